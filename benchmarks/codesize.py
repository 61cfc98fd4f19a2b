"""The search's ``flash`` cost against the linker: predicted rv32 program flash vs linked ELFs.

Run on demand (not a test):

    python benchmarks/codesize.py [--models dscnn,lenet,mlp,small_cnn] [--plans W8A8,W4A4,W2A2]

For each zoo model and plan (static, calibrated on two test samples as the model profiles are),
:func:`mico.hw.codesize.program_flash` predicts the program's flash from the section graph, and
:func:`mico.hw.codesize.linked_flash` links the same objects twice and reads the linker maps:
with the project's own ``main.c`` (the kernel bytes of the program ``make TARGET=rv32``
builds) and with a ``main`` that only runs the model (the libraries the kernels add, and the
ELF's whole flash). Writes ``codesize.{md,json}`` (one row per model and plan, the commit
measured) to ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def row(model: str, plan: str, out: Path) -> dict[str, Any]:
    """One (model, plan): constants, predicted and linked code (kernels + libraries), predicted
    and linked total flash, in bytes."""
    from mico.hw import codesize
    from mico.hw.modelprof import compile_program

    compiled, _ = compile_program(model, plan, "rv32", out / f"{model}_{plan}")
    predicted = codesize.program_flash(compiled.graph)
    harness = (compiled.project.directory / "main.c").read_text()
    project = codesize.linked_flash(compiled.graph, main=harness)
    alone = codesize.linked_flash(compiled.graph)
    return {
        "model": model,
        "plan": plan,
        "constants": predicted.constants,
        "predicted_code": predicted.kernels + predicted.libraries,
        "linked_code": project.kernels + alone.libraries,
        "predicted_flash": predicted.total,
        "linked_flash": alone.total,
    }


def markdown(rows: list[dict[str, Any]], commit: str) -> str:
    """The table of :func:`row` records."""
    lines = [
        "# The search's flash cost against the linker (rv32)",
        "",
        f"`python benchmarks/codesize.py` at commit `{commit}`: the program flash "
        "`mico.hw.codesize.program_flash` predicts from the section graph (no link) against "
        "the linked ELF (bytes; static mode).",
        "",
        "| model | plan | constants | predicted code | linked code | error | predicted flash "
        "| linked flash | error |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        code_err = 100 * (r["predicted_code"] - r["linked_code"]) / r["linked_code"]
        flash_err = 100 * (r["predicted_flash"] - r["linked_flash"]) / r["linked_flash"]
        lines.append(
            f"| {r['model']} | {r['plan']} | {r['constants']:,} | {r['predicted_code']:,} | "
            f"{r['linked_code']:,} | {code_err:+.2f} % | {r['predicted_flash']:,} | "
            f"{r['linked_flash']:,} | {flash_err:+.3f} % |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="dscnn,lenet,mlp,small_cnn")
    parser.add_argument("--plans", default="W8A8,W4A4,W2A2")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    rows = []
    with tempfile.TemporaryDirectory(prefix="mico-codesize-") as tmp:
        for model in args.models.split(","):
            for plan in args.plans.split(","):
                rows.append(row(model, plan, Path(tmp)))
                print(rows[-1], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "codesize.json").write_text(json.dumps({"commit": commit, "rows": rows}, indent=1))
    (args.out / "codesize.md").write_text(markdown(rows, commit))
    print(f"wrote {args.out / 'codesize.md'}")


if __name__ == "__main__":
    main()
