"""What ``--weights-file`` costs on rv32imac: instructions per inference and the model's flash,
with the constants compiled in (the default) and read from the weights file.

Run on demand (not a test; tests/codegen/test_weights_file.py checks the behaviour):

    python benchmarks/weights_file.py [--out benchmarks/results] [--models small_cnn,resnet8]

Each zoo model is compiled twice (static mode, plan 4/8, the same seed and samples): once as
usual, once with ``weights_file=True``; both are built for rv32 and run under qemu
(``-icount shift=0``) on the same samples. Outputs must be equal (bit for bit: the same
program, constants elsewhere). Reported per model: the largest instructions per inference of
each build (``instret`` around ``<name>_run``; the file's check, once per program start, is not
in it), the model's flash and RAM linked alone (``rv32.model_sizes``: without the weights in the
file build) and the weights file's size. Results: ``weights_file.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
from pathlib import Path
from typing import Any

import numpy as np


def measure(model: str, plan: str, work: Path) -> dict[str, Any]:
    from mico.deploy import DeployOptions, compile_from_options
    from mico.targets import rv32

    row: dict[str, Any] = {"model": model, "plan": plan}
    outputs = []
    for label, file_mode in (("compiled_in", False), ("weights_file", True)):
        out = work / f"{model}_{label}"
        options = DeployOptions(model=model, plan=plan, mode="static", samples=8, out_dir=out,
                                weights_file=file_mode)  # fmt: skip
        compiled, samples = compile_from_options(options, log=lambda _m: None)
        rv32.build(compiled.project)
        run = rv32.run(compiled.project, samples)
        sizes = rv32.model_sizes(compiled.project)
        outputs.append(run.outputs)
        row[label] = {
            "instructions_per_inference": run.instructions_per_inference,
            "flash": sizes["flash"],
            "ram": sizes["ram"],
            "file_bytes": (compiled.project.directory / "model.bin").stat().st_size
            if file_mode
            else 0,
        }
    row["bit_exact"] = bool(np.array_equal(outputs[0], outputs[1]))
    a, b = row["compiled_in"], row["weights_file"]
    row["instructions_change_pct"] = round(
        100.0 * (b["instructions_per_inference"] - a["instructions_per_inference"])
        / max(a["instructions_per_inference"], 1), 3)  # fmt: skip
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--models", default="small_cnn,resnet8,vit_tiny")
    parser.add_argument("--plan", default="4/8")
    args = parser.parse_args()
    from mico.targets import rv32

    if not rv32.available():
        raise SystemExit("rv32 toolchain missing: " + rv32.missing_tools_hint())
    with tempfile.TemporaryDirectory(prefix="mico-bench-wf-") as tmp:
        rows = [measure(m, args.plan, Path(tmp)) for m in args.models.split(",")]
    data = {"machine": platform.machine(), "target": "rv32imac (qemu -icount shift=0)",
            "rows": rows}  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "weights_file.json").write_text(json.dumps(data, indent=2) + "\n")
    lines = [
        "# --weights-file on rv32imac: compiled-in constants vs the weights file",
        "",
        "Static mode, plan " + args.plan + "; instructions per inference (largest over 8 samples);",
        "flash/RAM: the model and kernels linked alone (`rv32.model_sizes`); with the file, the",
        "parameter structs that point at weights are in RAM (filled at load), and the file itself",
        "is wherever the device keeps it (main.c: a static buffer; a device: a flash region).",
        "",
        "| model | bit-exact | instr. compiled in | instr. file | change | flash compiled in | "
        "flash file | RAM compiled in | RAM file | file bytes |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        a, b = r["compiled_in"], r["weights_file"]
        lines.append(
            f"| {r['model']} | {r['bit_exact']} | {a['instructions_per_inference']:,} | "
            f"{b['instructions_per_inference']:,} | {r['instructions_change_pct']:+.3f} % | "
            f"{a['flash']:,} | {b['flash']:,} | {a['ram']:,} | {b['ram']:,} | "
            f"{b['file_bytes']:,} |"
        )
    (args.out / "weights_file.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
