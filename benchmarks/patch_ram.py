"""Patch-based execution of the first layers: arena below the whole-tensor bound, and its cost.

Run on demand (not a test):

    python benchmarks/patch_ram.py [--out benchmarks/results] [--models mobilenetv2_035_96,...]

For each model (the seeded float models of ``benchmarks/peers.py``, W8A8 static, per-channel
weights): the lowered graph is emitted twice, ``patch="off"`` (whole tensors) and
``patch="auto"`` (:mod:`mico.codegen.patch_plan`), and both programs are

* built and run on the host and on rv32 (qemu ``-icount shift=0``), outputs compared with the
  Python integer reference (must be bit-exact);
* measured: arena (planned), LOAD-FA (largest input + output of one layer, whole tensors),
  rv32 RAM of the model (data + bss), MACs recomputed at band borders, and rv32 instructions
  per inference with and without patches (the recomputation's cost, copies included).

Results: ``patch_ram.{json,md}``.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import peers  # noqa: E402  (the seeded float models, shared with the peers benchmark)

CALIBRATION = 8  # seeded calibration inputs
HOST_SAMPLES = 4
RV32_SAMPLES = 2


def lowered(name: str) -> tuple[Any, np.ndarray]:
    """The static W8A8 graph of a peers model and seeded evaluation inputs."""
    from mico.codegen.compile import lower
    from mico.quant import calibrate, quantize_model

    model = peers.float_model(name)
    shape = tuple(model.default_input_shape)
    calib = peers.inputs(shape, CALIBRATION, peers.SEED + 1)
    q = copy.deepcopy(model)
    plan = ",".join(f"{layer}=8/8" for layer in q.quantize_layer_names())
    quantize_model(q, plan, peers_config())
    batches = [torch.from_numpy(b) for b in np.array_split(calib, 2)]
    q.eval()
    calibrate(q, batches)
    graph, _ = lower(q, torch.from_numpy(calib[:1]), "static", batches)
    return graph, peers.inputs(shape, HOST_SAMPLES, peers.SEED + 2)


def peers_config() -> Any:
    from mico.quant import QuantConfig

    return QuantConfig(act_mode="static", weight_granularity="channel")


def measure(name: str, work: Path) -> dict[str, Any]:
    from mico.codegen.project import emit_c_project
    from mico.execute import run_graph
    from mico.targets import host, rv32

    start = time.perf_counter()
    graph, x = lowered(name)
    print(f"{name}: lowered in {time.perf_counter() - start:.0f} s", flush=True)
    reference = run_graph(graph, torch.from_numpy(x))[0].numpy()
    row: dict[str, Any] = {"model": name, "input_shape": list(graph.inputs[0].type.shape)}
    for patch in ("off", "auto"):
        start = time.perf_counter()
        project = emit_c_project(graph, work / f"{name}_{patch}", "model", patch=patch,
                                 sample_inputs=x[:1])  # fmt: skip
        emitted = time.perf_counter() - start
        host.build(project)
        host_exact = bool(np.array_equal(host.run(project, x), reference))
        entry: dict[str, Any] = {
            "arena_bytes": project.arena.size,
            "emit_seconds": round(emitted, 1),
            "host_bit_exact": f"{HOST_SAMPLES}/{HOST_SAMPLES}" if host_exact else "NO",
            "patch": project.patch,
        }
        if rv32.available():
            rv32.build(project)
            run = rv32.run(project, x[:RV32_SAMPLES])
            same = int(
                sum(np.array_equal(a, b) for a, b in zip(run.outputs, reference, strict=False))
            )
            entry["rv32_bit_exact"] = f"{same}/{RV32_SAMPLES}"
            entry["rv32_instructions"] = int(run.instructions[0])
            entry["rv32_ram"] = rv32.model_sizes(project).get("ram")
        row[patch] = entry
        print(f"  {patch}: {json.dumps({k: v for k, v in entry.items() if k != 'patch'})}",
              flush=True)  # fmt: skip
    summary = row["auto"]["patch"] or {}
    row["load_fa"] = summary.get("load_fa")
    if summary.get("patched"):
        row["extra_macs"] = summary["extra_macs"]
        row["extra_macs_of_model"] = summary["extra_macs_of_model"]
    off, auto = row["off"], row["auto"]
    if "rv32_instructions" in off and "rv32_instructions" in auto:
        extra = auto["rv32_instructions"] - off["rv32_instructions"]
        row["extra_rv32_instructions"] = extra
        row["extra_rv32_instructions_ratio"] = round(extra / off["rv32_instructions"], 4)
    return row


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "# Patch-based execution: arena below the whole-tensor bound",
        "",
        "W8A8 static (per-channel weights), seeded float models of `benchmarks/peers.py`. "
        "`off`: whole tensors; `auto`: the first layers in row bands "
        "(`mico.codegen.patch_plan`). LOAD-FA: the largest input + output of one layer. "
        "Instructions: rv32imac under qemu `-icount shift=0`, one inference, the input "
        "quantization included. Bit-exact: C output equal to the Python integer reference.",
        "",
        "| model | LOAD-FA | arena off | arena auto | auto / LOAD-FA | stage | bands x rows "
        "| extra MACs | rv32 instr off | rv32 instr auto | extra instr | bit-exact host / rv32 |",
        "|---|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        off, auto = r["off"], r["auto"]
        p = auto.get("patch") or {}
        stage = (
            f"{len(p['stage'])} ops to `{p['stage'][-1]}`"
            if p.get("patched")
            else p.get("why", "-")
        )
        bands = f"{p['bands']} x {p['rows_per_band']}" if p.get("patched") else "-"
        macs = (f"{r['extra_macs']:,} ({100 * r['extra_macs_of_model']:.1f}% of model)"
                if "extra_macs" in r else "-")  # fmt: skip
        ratio = f"{auto['arena_bytes'] / r['load_fa']:.3f}" if r.get("load_fa") else "-"
        extra = "-"
        if "extra_rv32_instructions" in r:
            share = 100 * r["extra_rv32_instructions_ratio"]
            extra = f"{r['extra_rv32_instructions']:+,} ({share:+.1f}%)"
        exact = " / ".join(
            f"{off.get(k, '-')}, {auto.get(k, '-')}" for k in ("host_bit_exact", "rv32_bit_exact")
        )
        lines.append(
            f"| {r['model']} | {r.get('load_fa') or 0:,} | {off['arena_bytes']:,} | "
            f"{auto['arena_bytes']:,} | {ratio} | {stage} | {bands} | {macs} | "
            f"{off.get('rv32_instructions', 0):,} | {auto.get('rv32_instructions', 0):,} | "
            f"{extra} | {exact} |"
        )
    lines += [
        "",
        "rv32 RAM of the model (data + bss, arena included): "
        + "; ".join(
            f"{r['model']} {r['off'].get('rv32_ram', 0):,} -> {r['auto'].get('rv32_ram', 0):,} B"
            for r in rows
        ),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--models", default="mobilenetv2_035_96,dscnn,resnet8")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="mico-patch-") as tmp:
        for name in args.models.split(","):
            rows.append(measure(name, Path(tmp)))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "patch_ram.json").write_text(json.dumps(rows, indent=2) + "\n")
    (args.out / "patch_ram.md").write_text(markdown(rows))
    print(markdown(rows))


if __name__ == "__main__":
    main()
