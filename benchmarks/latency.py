"""Measured latency of zoo models per target and plan, next to the latency proxies' predictions.

Run on demand (not a test; minutes):
    python benchmarks/latency.py [--models small_cnn,lenet,dscnn] [--profile-csv rv32.csv]

For each model and plan (W8A8, W4A4, W2A2 and a mixed plan: 8 bits at both ends, W2A4 and
W4A4 alternating inside, from W2A4) the static C program is compiled once and measured on
sample 0 of the model's test data:

* **rv32**: instructions retired under qemu-system-riscv32 ``-icount`` (``instret``), and the
  same program counted node by node (``mico.hw.latency.per_layer``): the conv and linear
  nodes' share is what a layer proxy predicts;
* **vexriscv**: clock cycles of the VexRiscv IMAC RTL core under verilator (``mcycle``), and
  its instructions (the same as qemu's): cycles per instruction (CPI);
* **host**: x86-64 instructions under callgrind (gcc -O2), when valgrind is installed;
* **bitfusion**: BitFusion's analytic cycle model of the conv and linear layers.

Per MAC of the model's conv and linear layers: instructions (rv32, host) and cycles
(vexriscv, bitfusion) side by side. Proxies: BitFusion's, fitted on Latin-hypercube layer
shapes of its cycle model, and rv32's, fitted on whole compiled programs counted node by node
on rv32 (``mico profile --target rv32``'s programs of the other zoo models: the benchmark's
models are left out). BitFusion's predicts the sum of the conv and linear layers; rv32's the
whole program (every node plus the per-model overhead), held to the release build's count.

Figures go to ``benchmarks/results/latency.json``, ``.md`` and ``.png``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mico.deploy import DeployOptions, compile_from_options, load_model
from mico.hw import fit_proxy, mape
from mico.hw.latency import analytic_report, per_layer
from mico.hw.layers import model_layer_shapes
from mico.hw.measure import backend
from mico.hw.modelprof import current_records
from mico.hw.opshape import graph_op_shapes
from mico.hw.profile import bit_pairs, sample_shapes
from mico.hw.programs import kernels_hash
from mico.targets import host, rv32
from mico.targets.catalog import get_target

ROOT = Path(__file__).resolve().parent.parent
PLANS = ("W8A8", "W4A4", "W2A2", "mixed")
KINDS = ("conv2d", "dwconv2d", "linear")


def _plan(name: str, layers: list[str]) -> str:
    if name != "mixed":
        w, a = name[1], name[3]
        return ",".join(f"{layer}={w}/{a}" for layer in layers)
    bits = ["2/4" if i % 2 else "4/4" for i in range(len(layers))]
    bits[0] = bits[-1] = "8/8"
    return ",".join(f"{layer}={b}" for layer, b in zip(layers, bits, strict=True))


def _layers(model: str, plan: str | None) -> list[Any]:
    options = DeployOptions(model=model, plan=plan, mode="dynamic", out_dir=Path("unused"))
    quantized, _ = load_model(options)
    return model_layer_shapes(quantized, quantized.example_input())


def _git(*args: str) -> str:
    result = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return result.stdout.strip()


def measure(model: str, plan_name: str, work: Path, samples: int,
            targets: list[str]) -> dict[str, Any]:  # fmt: skip
    names = [layer.name for layer in _layers(model, None)]
    plan = _plan(plan_name, names)
    layers = _layers(model, plan)
    macs = sum(layer.macs for layer in layers)
    row: dict[str, Any] = {"model": model, "plan_name": plan_name, "plan": plan, "macs": macs}

    def generate(family: tuple[str, ...]) -> tuple[Any, np.ndarray, np.ndarray]:
        """The program ``mico compile --target`` generates for these targets (the devices'
        and the host's differ: the host's takes its GEMM kernels, which a device build
        replaces by the portable ones)."""
        options = DeployOptions(model=model, plan=plan, mode="static", samples=samples,
                                out_dir=work / model / "-".join(family), force=True,
                                targets=family)  # fmt: skip
        made, samples_in = compile_from_options(options, log=lambda _m: None)
        return made, samples_in, np.asarray(made.reference(samples_in[:1])).reshape(-1)

    devices = tuple(t for t in targets if t in ("rv32", "vexriscv"))
    hosted = "host" in targets and shutil.which("valgrind")
    if devices or not hosted:
        compiled, inputs, reference = generate(devices or ("rv32",))
    if hosted:
        made = generate(("host",))
        host_compiled, host_inputs = made[0], made[1]
        if not devices:
            compiled, inputs, reference = made
    project = compiled.project

    def exact(outputs: np.ndarray) -> bool:
        return bool(np.array_equal(np.asarray(outputs).reshape(-1), reference))

    if "rv32" in targets:
        start = time.perf_counter()
        rv32.build(project)
        run = rv32.run(project, inputs[:1])
        nodes = per_layer(compiled, inputs[0], "rv32")
        layer_nodes = sum(r.value for r in nodes.report.rows if r.bits)  # bits: the plan layer
        row["rv32"] = {
            "instructions": int(run.instructions[0]), "bit_exact": exact(run.outputs),
            "layer_instructions": int(layer_nodes), "per_layer_glue": nodes.glue,
            "seconds": round(time.perf_counter() - start, 1),
        }  # fmt: skip
    if "vexriscv" in targets:
        from mico.targets import vexriscv

        start = time.perf_counter()
        vexriscv.build(project)
        run = vexriscv.run(project, inputs[:1])
        row["vexriscv"] = {
            "cycles": int(run.cycles[0]), "instructions": int(run.instructions[0]),
            "bit_exact": exact(run.outputs), "seconds": round(time.perf_counter() - start, 1),
        }  # fmt: skip
    if hosted:
        start = time.perf_counter()
        host.build(host_compiled.project)
        with tempfile.TemporaryDirectory() as tmp:
            # the steady state: a warm-up inference first (the host kernels lay out each
            # layer's weights on their first call, once per run), counted apart
            count, first = host.steady_callgrind_counts(
                host_compiled.project, host_inputs[:1], Path(tmp)
            )
        row["host"] = {"instructions": int(count[0]), "first_inference": first,
                       "seconds": round(time.perf_counter() - start, 1)}  # fmt: skip
    if "bitfusion" in targets:
        report = analytic_report(layers, get_target("bitfusion"))
        row["bitfusion"] = {"cycles": int(report.total)}
    row["_ops"] = graph_op_shapes(compiled.graph)  # for the proxies, fitted afterwards
    row["_layers"] = layers
    return row


def predict(row: dict[str, Any], layers: list[Any], proxies: dict[str, Any],
            ops: list[Any] | None = None) -> None:  # fmt: skip
    """Each proxy's prediction and its error where measured: BitFusion's of the conv and
    linear layers, rv32's of the whole program (every node of ``ops``, the compiled graph's,
    plus the per-model overhead) against the release build's count."""
    for target, proxy in proxies.items():
        if target == "rv32":
            if ops is None:
                row["proxy_rv32"] = {"missing": "no program nodes"}
                continue
            predicted = proxy.predict_model(ops)
            entry: dict[str, Any] = {"predicted": round(predicted, 1)}
            if "rv32" in row:
                entry["error_pct"] = round(mape([predicted], [row["rv32"]["instructions"]]), 2)
            row["proxy_rv32"] = entry
            continue
        if any(layer.kind not in proxy.kinds for layer in layers):
            row[f"proxy_{target}"] = {
                "missing_kinds": sorted(
                    {layer.kind for layer in layers if layer.kind not in proxy.kinds}
                )
            }
            continue
        predicted = float(sum(proxy.predict_layers(layers)))
        entry = {"predicted": round(predicted, 1)}
        if target == "bitfusion" and "bitfusion" in row:
            entry["error_pct"] = round(mape([predicted], [row["bitfusion"]["cycles"]]), 2)
        row[f"proxy_{target}"] = entry


def fit_proxies(records_file: Path | None, held_out: list[str], seed: int,
                bf_samples: int) -> dict[str, Any]:  # fmt: skip
    """BitFusion's proxy on random shapes; rv32's on the zoo programs of ``records_file``
    (``mico profile --target rv32``'s, by default the cache's) except the ``held_out`` models."""
    proxies: dict[str, Any] = {}
    info: dict[str, Any] = {}
    bf = backend("bitfusion")
    shapes = sample_shapes(KINDS, bf_samples, seed=seed, include_zoo=False)
    rows = [(s.with_bits(w, a), bf.measure(s.with_bits(w, a)))
            for s in shapes for w, a in bit_pairs(bf.bits)]  # fmt: skip
    proxies["bitfusion"] = fit_proxy(rows, "bitfusion", bf.unit, seed=seed)
    info["bitfusion"] = {"rows": len(rows), "shapes": len(shapes)}
    if records_file is None:
        from mico.hw.modelprof import models_path
        from mico.hw.profile import profile_path
        from mico.hw.programs import resolve_backend

        records_file = models_path(profile_path("rv32", resolve_backend("rv32").fingerprint))
    records = [r for r in current_records(records_file) if r.model not in held_out]
    if records:
        proxies["rv32"] = fit_proxy([], "rv32", "instructions", seed=seed, models=records)
        info["rv32"] = {"rows": sum(len(m.rows) for k, m in proxies["rv32"].kinds.items()
                                    if k != "other"),
                        "programs": len(records),
                        "models": sorted({r.model for r in records}),
                        "records_file": records_file.name}  # fmt: skip
    for target, proxy in proxies.items():
        info[target]["holdout_mape"] = {
            kind: {k: round(v, 1) for k, v in m.holdout_mape.items()} | {"kept": m.algorithm}
            for kind, m in sorted(proxy.kinds.items())
        }
    return {"proxies": proxies, "info": info}


def _f(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} %"


def _n(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "# Measured latency per target, and the proxies",
        "",
        f"Written by `benchmarks/latency.py` on {results['date']} (mico {results['commit']}"
        f"{', C kernels modified in the working tree' if results['kernels_dirty'] else ''}; "
        f"kernels hash {results['kernels_hash'][:12]}); {results['seconds']:.0f} s. Each "
        "figure is one inference of sample 0 of the model's test data by the static C program "
        "(whose outputs agree with the Python reference bit for bit: "
        f"{'yes, on every run' if results['all_bit_exact'] else 'NO, see the JSON'}). "
        "MACs are the conv and linear layers'. Host: the steady state (after a warm-up "
        "inference, whose count, with the host kernels' one-time weight layout, is in the "
        "JSON as `first_inference`).",
        "",
        "| model | plan | MACs | rv32 instructions | host instructions (steady state) | "
        "VexRiscv cycles | BitFusion cycles |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    rows = results["rows"]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['plan_name']} | {_n(r['macs'])} | "
            f"{_n(r.get('rv32', {}).get('instructions'))} | "
            f"{_n(r.get('host', {}).get('instructions'))} | "
            f"{_n(r.get('vexriscv', {}).get('cycles'))} | "
            f"{_n(r.get('bitfusion', {}).get('cycles'))} |"
        )
    lines += [
        "",
        "## Per MAC",
        "",
        "One whole inference over the conv and linear layers' MACs: instructions per MAC (rv32 "
        "under qemu, host under callgrind) beside cycles per MAC "
        "(VexRiscv RTL, BitFusion's model), and VexRiscv's cycles per instruction (CPI: how far "
        "qemu's instruction count is from the core's cycles; VexRiscv retires exactly qemu's "
        "instructions).",
        "",
        "| model | plan | rv32 instr/MAC | host instr/MAC | VexRiscv cycles/MAC | CPI | "
        "BitFusion cycles/MAC |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        macs = r["macs"]
        rv = r["rv32"]["instructions"] / macs if "rv32" in r else None
        hi = r["host"]["instructions"] / macs if "host" in r else None
        vex = r.get("vexriscv")
        cpi = vex["cycles"] / vex["instructions"] if vex else None
        vc = vex["cycles"] / macs if vex else None
        bf = r["bitfusion"]["cycles"] / macs if "bitfusion" in r else None
        lines.append(
            f"| {r['model']} | {r['plan_name']} | {_f(rv)} | {_f(hi)} | {_f(vc)} | {_f(cpi)} | "
            f"{_f(bf, 4)} |"
        )
    info = results["proxies"]
    lines += [
        "",
        "## Proxies",
        "",
        "BitFusion's proxy predicts the sum of the conv and linear layers from their shapes "
        "and widths and is held to its cycle model. rv32's predicts the whole program: every "
        "node of the compiled graph (input quantization, conv and linear on the kernel path the "
        "generator picks, pooling, adds, ...) plus a fitted per-model overhead, held to the "
        "release build's instructions for sample 0. Neither saw these models: BitFusion's is "
        "fitted on random shapes, rv32's on the other zoo models' programs (`mico profile "
        "--target rv32` records, leave these models out).",
        "",
    ]
    for target, i in info.items():
        held = ", ".join(
            f"{kind} {min(v for k, v in m.items() if k != 'kept'):.1f} % ({m['kept']})"
            if len(m) > 1
            else f"{kind} not held out (under 5 shapes)"
            for kind, m in i["holdout_mape"].items()
        )
        source = (f"{i['programs']} programs of {', '.join(i['models'])}" if "programs" in i
                  else f"{i['shapes']} shapes")  # fmt: skip
        lines.append(f"- **{target}**: fitted on {i['rows']} layer or node x bit cases "
                     f"({source}); held-out-shape MAPE per kind: {held}.")  # fmt: skip
    if "rv32" not in info:
        lines.append("- **rv32**: no models file (`mico profile --target rv32`): no rv32 proxy.")
    lines += [
        "",
        "| model | plan | BitFusion predicted | error | rv32 predicted | rv32 measured | error |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        bf, rp = r.get("proxy_bitfusion", {}), r.get("proxy_rv32", {})
        lines.append(
            f"| {r['model']} | {r['plan_name']} | {_n(bf.get('predicted'))} | "
            f"{_pct(bf.get('error_pct'))} | {_n(rp.get('predicted'))} | "
            f"{_n(r.get('rv32', {}).get('instructions'))} | {_pct(rp.get('error_pct'))} |"
        )
    for target in info:
        errors = [r[f"proxy_{target}"]["error_pct"] for r in rows if f"proxy_{target}" in r
                  and "error_pct" in r[f"proxy_{target}"]]  # fmt: skip
        if errors:
            lines.append(f"\nMean {target} proxy error: **{np.mean(errors):.1f} %** "
                         f"({min(errors):.1f}-{max(errors):.1f} %).")  # fmt: skip
    for note in results.get("notes", []):
        lines += ["", note]
    return "\n".join(lines) + "\n"


def plot(results: dict[str, Any], path: Path) -> None:
    from matplotlib.figure import Figure

    rows = results["rows"]
    fig = Figure(figsize=(12, 5), dpi=100, layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=[2, 1])
    labels = [f"{r['model']}\n{r['plan_name']}" for r in rows]
    x = np.arange(len(rows))
    series = [
        ("rv32 instr/MAC", lambda r: r.get("rv32", {}).get("instructions")),
        ("host instr/MAC", lambda r: r.get("host", {}).get("instructions")),
        ("VexRiscv cycles/MAC", lambda r: r.get("vexriscv", {}).get("cycles")),
        ("BitFusion cycles/MAC", lambda r: r.get("bitfusion", {}).get("cycles")),
    ]
    width = 0.8 / len(series)
    for k, (name, get) in enumerate(series):
        values = [(get(r) or np.nan) / r["macs"] for r in rows]
        left.bar(x + (k - 1.5) * width, values, width, label=name)
    left.set_yscale("log")
    left.set_xticks(x, labels, fontsize=7)
    left.set_ylabel("per MAC (log)")
    left.legend(fontsize=8, loc="center right")
    left.set_title("one inference per MAC (of the conv and linear layers)", fontsize=10)
    for target, marker in (("rv32", "o"), ("bitfusion", "s")):
        pairs = []
        for r in rows:
            p = r.get(f"proxy_{target}")
            measured = (r.get("rv32", {}).get("instructions") if target == "rv32"
                        else r.get("bitfusion", {}).get("cycles"))  # fmt: skip
            if p and "predicted" in p and measured:
                pairs.append((measured, p["predicted"]))
        if pairs:
            m, p = np.array(pairs).T
            right.scatter(m, p, marker=marker, label=target, alpha=0.8)
    lims = right.get_xlim()
    low = min(lims[0], right.get_ylim()[0])
    high = max(lims[1], right.get_ylim()[1])
    right.plot([low, high], [low, high], color="grey", lw=0.8)
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlabel("measured (instructions or cycles)")
    right.set_ylabel("proxy prediction")
    right.legend(fontsize=8)
    right.set_title("proxies vs measured (BitFusion: layers; rv32: program)", fontsize=10)
    fig.savefig(path, format="png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="small_cnn,lenet,dscnn")
    parser.add_argument("--targets", default="rv32,vexriscv,host,bitfusion")
    parser.add_argument("--plans", default=",".join(PLANS))
    parser.add_argument("--samples", type=int, default=8, help="calibration samples")
    parser.add_argument(
        "--rv32-records",
        type=Path,
        default=None,
        help="rv32 programs counted node by node (mico profile --target rv32's .models.jsonl; "
        "default: the cache's, for the current C kernels)",
    )
    parser.add_argument("--bitfusion-shapes", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--reuse",
        type=Path,
        default=None,
        help="take the measurements from this latency.json; refit the proxies",
    )
    parser.add_argument("--note", action="append", default=[], help="a line for the report")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()  # fmt: skip
    torch.set_num_threads(1)
    start = time.perf_counter()
    targets = args.targets.split(",")
    rows = []
    if args.reuse is None:  # measure first: the proxies are fitted on the records there are then
        with tempfile.TemporaryDirectory(prefix="mico-latency-bench-") as tmp:
            for model in args.models.split(","):
                for plan in args.plans.split(","):
                    row = measure(model, plan, Path(tmp), args.samples, targets)
                    rows.append(row)
                    print(json.dumps({k: v for k, v in row.items() if not k.startswith("_")}),
                          flush=True)  # fmt: skip
    fitted = fit_proxies(args.rv32_records, args.models.split(","), args.seed,
                         args.bitfusion_shapes)  # fmt: skip
    for row in rows:
        predict(row, row.pop("_layers"), fitted["proxies"], row.pop("_ops"))
    if args.reuse is not None:
        previous = json.loads(args.reuse.read_text())
        for old in previous["rows"]:
            row = {k: v for k, v in old.items() if not k.startswith("proxy_")}
            ops = None
            if "rv32" in fitted["proxies"]:  # the same program: compile it again for its graph
                with tempfile.TemporaryDirectory(prefix="mico-latency-bench-") as tmp:
                    options = DeployOptions(model=row["model"], plan=row["plan"], mode="static",
                                            out_dir=Path(tmp) / "p", samples=args.samples,
                                            force=True)  # fmt: skip
                    compiled, _ = compile_from_options(options, log=lambda _m: None)
                    ops = graph_op_shapes(compiled.graph)
            predict(row, _layers(row["model"], row["plan"]), fitted["proxies"], ops)
            rows.append(row)
        start -= previous["seconds"]
    exact = [r[t]["bit_exact"] for r in rows for t in ("rv32", "vexriscv") if t in r]
    results = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _git("rev-parse", "--short", "HEAD"),
        "kernels_dirty": bool(_git("status", "--porcelain", "mico/csrc", "mico/codegen")),
        "kernels_hash": kernels_hash(),
        "python": platform.python_version(),
        "seconds": time.perf_counter() - start,
        "all_bit_exact": all(exact),
        "proxies": fitted["info"],
        "notes": args.note,
        "rows": rows,
    }
    if args.reuse is not None:  # the measurements' own provenance
        for key in ("date", "commit", "kernels_dirty", "kernels_hash"):
            results[key] = previous[key]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latency.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "latency.md").write_text(markdown(results))
    plot(results, args.out / "latency.png")
    print(markdown(results))


if __name__ == "__main__":
    main()
