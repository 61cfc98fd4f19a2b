"""The search's ``flash`` cost against the linker: predicted rv32 program flash vs linked ELFs.

Run on demand (not a test):

    python benchmarks/codesize.py [--models dscnn,lenet,mlp,small_cnn] [--plans W8A8,W4A4,W2A2]

For each zoo model and plan (static, calibrated on two test samples as the model profiles are),
:func:`mico.hw.codesize.program_flash` predicts the program's flash from the section graph, and
:func:`mico.hw.codesize.linked_flash` links the same objects twice and reads the linker maps:
with the project's own ``main.c`` (the kernel bytes of the program ``make TARGET=rv32``
builds) and with a ``main`` that only runs the model (the libraries the kernels add, and the
ELF's whole flash). Prints one Markdown row per (model, plan).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path


def row(model: str, plan: str, out: Path) -> str:
    """One table row: constants, predicted and linked code (kernels + libraries), error,
    predicted and linked total."""
    from mico.hw import codesize
    from mico.hw.modelprof import compile_program

    compiled, _ = compile_program(model, plan, "rv32", out / f"{model}_{plan}")
    predicted = codesize.program_flash(compiled.graph)
    harness = (compiled.project.directory / "main.c").read_text()
    project = codesize.linked_flash(compiled.graph, main=harness)
    alone = codesize.linked_flash(compiled.graph)
    code = predicted.kernels + predicted.libraries
    linked = project.kernels + alone.libraries
    return (
        f"| {model} | {plan} | {predicted.constants} | {code} | {linked} | "
        f"{100 * (code - linked) / linked:+.2f} % | {predicted.total} | {alone.total} | "
        f"{100 * (predicted.total - alone.total) / alone.total:+.3f} % |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="dscnn,lenet,mlp,small_cnn")
    parser.add_argument("--plans", default="W8A8,W4A4,W2A2")
    args = parser.parse_args()
    print("| model | plan | constants | predicted code | linked code | error | predicted "
          "flash | linked flash | error |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="mico-codesize-") as tmp:
        for model in args.models.split(","):
            for plan in args.plans.split(","):
                print(row(model, plan, Path(tmp)), flush=True)


if __name__ == "__main__":
    main()
