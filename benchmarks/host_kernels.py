"""The host kernels (``mico_host_gemm.c``) per model and bit-width, in exact instruction counts.

Run on demand (not a test):

    python benchmarks/host_kernels.py [--out benchmarks/results] [--models lenet,...]
        [--bits 8/8,4/4,2/2] [--work DIR] [--baseline REV]

The models and seeded weights of ``benchmarks/peers.py`` (LeNet-5, ResNet8, DS-CNN,
MobileNetV2-0.35 96x96), every layer at one bit-width (static, per-channel weights), compiled
for the host (its ``xautovec`` capability: the host kernels) and built by the generated
Makefile (-O3). Each program runs two samples under callgrind, which counts the instructions
of each ``<name>_run`` call exactly: the first inference (which also lays out the weights in
the kernels' store) and the second (the steady state, what every later inference costs).
Wall-clock time is not measured here (a shared 2-core machine makes it noisy; see peers.py
for wall-clock ratios measured side by side in one run).

``--baseline REV`` also builds every project with the kernel sources (``mico/csrc``: the host
kernels of ``mico_host_gemm.c`` and the host paths of the pooling and mean kernels) as of git
revision REV and counts it the same way (before / after in one run). Every build's outputs
must be byte-identical to the outputs checked against mico's Python reference when the project was
generated. ``--work DIR`` keeps the generated projects, and a later run reuses them (only the
kernels are rebuilt). Results: ``host_kernels.{md,json}``.
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import peers
import torch

ROOT = Path(__file__).resolve().parents[1]
CSRC = ROOT / "mico" / "csrc"
BITS = ("8/8", "4/4", "2/2")
SAMPLES = 2  # the first inference and the steady state


def generate(name: str, bits: str, directory: Path) -> None:
    """Compile ``name`` at ``bits`` for the host into ``directory`` (the peers' seeded model,
    calibration and inputs), check the C outputs against the Python reference, and keep the
    samples and those outputs beside the project."""
    from mico.codegen.compile import compile_model
    from mico.deploy import generation_extensions
    from mico.errors import MicoError
    from mico.quant import QuantConfig, calibrate, quantize_model
    from mico.targets import host
    from mico.targets.io import write_samples

    model = peers.float_model(name)
    shape = tuple(model.default_input_shape)
    calib = peers.inputs(shape, peers.CALIBRATION, peers.SEED + 1)
    x = peers.inputs(shape, SAMPLES, peers.SEED + 2)
    qmodel = copy.deepcopy(model)
    plan = ",".join(f"{layer}={bits}" for layer in qmodel.quantize_layer_names())
    quantize_model(qmodel, plan, QuantConfig(act_mode="static", weight_granularity="channel"))
    batches = [torch.from_numpy(b) for b in np.array_split(calib, 4)]
    qmodel.eval()
    calibrate(qmodel, batches)
    compiled = compile_model(
        qmodel, torch.from_numpy(x[:1]), directory, "model", "static", calibration=batches,
        force=True, sample_inputs=x[:1], isa_extensions=generation_extensions(["host"]),
    )  # fmt: skip
    host.build(compiled.project)
    if not np.array_equal(host.run(compiled.project, x), compiled.reference(x)):
        raise MicoError(f"{name} {bits}: the C outputs differ from the Python reference")
    write_samples(compiled.project, x, directory / "samples.bin")
    run_program(directory, directory / "expected.bin")


def run_program(directory: Path, outputs: Path) -> None:
    subprocess.run(["./model", "samples.bin", str(outputs)], cwd=directory, check=True,
                   capture_output=True)  # fmt: skip


def kernel_sources(directory: Path, revision: str | None) -> dict[str, str]:
    """The project's kernel sources (``mico_*.c`` / ``mico_*.h``) as they are in mico/csrc, or
    as of git revision ``revision``."""
    sources = {}
    for path in sorted(directory.glob("mico_*.[ch]")):
        if revision is None:
            sources[path.name] = (CSRC / path.name).read_text()
        else:
            show = ["git", "show", f"{revision}:mico/csrc/{path.name}"]
            sources[path.name] = subprocess.run(show, cwd=ROOT, check=True, capture_output=True,
                                                text=True).stdout  # fmt: skip
    return sources


def build_with(directory: Path, kernels: dict[str, str], into: Path) -> None:
    """A copy of the project in ``into`` built with ``kernels`` (file name: source)."""
    if into.exists():
        shutil.rmtree(into)
    shutil.copytree(directory, into, ignore=shutil.ignore_patterns("model", "*.o"))
    for name, text in kernels.items():
        (into / name).write_text(text)
    subprocess.run(["make", "-s"], cwd=into, check=True, capture_output=True)


def count(directory: Path) -> dict[str, Any]:
    """Instructions of the first and the second inference, and whether the outputs equal the
    checked ones."""
    from mico.targets import host

    counts = host.callgrind_counts(directory / "model", "model_run", directory / "samples.bin",
                                   SAMPLES)  # fmt: skip
    run_program(directory, directory / "outputs.bin")
    same = (directory / "outputs.bin").read_bytes() == (directory / "expected.bin").read_bytes()
    return {"first": int(counts[0]), "steady": int(counts[-1]), "bit_exact": same}


def measure(name: str, bits: str, work: Path, baseline: str | None) -> dict[str, Any]:
    """One model at one bit-width: the current kernels, and the baseline's when given."""
    directory = work / f"{name}_{bits[0]}{bits[2]}"
    if not (directory / "expected.bin").exists():
        generate(name, bits, directory)
    row: dict[str, Any] = {"model": name, "bits": f"W{bits[0]}A{bits[2]}"}
    build_with(directory, kernel_sources(directory, None), work / "current")
    row["after"] = count(work / "current")
    if baseline:
        build_with(directory, kernel_sources(directory, baseline), work / "baseline")
        row["before"] = count(work / "baseline")
    return row


def write_markdown(path: Path, rows: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    """Steady-state instructions per inference, per model and width, ratio to W8A8."""
    before = any("before" in r for r in rows)
    lines = [
        "# Host kernels: instructions per inference (callgrind)",
        "",
        f"Generated by `benchmarks/host_kernels.py` on {meta['date']} ({meta['seconds']:.0f} s); "
        f"kernels at {meta['commit']}" + (f", baseline {meta['baseline']}" if before else "")
        + ". Every layer at one width (static, per-channel weights), compiled for the host "
        "(`xautovec`: mico_host_gemm.c) and built -O3 by the generated Makefile; *before* builds "
        "the same projects with every kernel source (mico/csrc) as of the baseline. Exact "
        "instruction counts of `model_run` under callgrind: *steady* is the second inference "
        "(every later one costs the same), *first* also lays out the weights in the kernels' "
        "store (once per program run). Every build's outputs are byte-identical to the ones "
        "checked against mico's Python reference.",
        "",
        "| model | bits | steady | vs W8A8 | first |"
        + (" before (steady) | after / before |" if before else ""),
        "|---|---|---:|---:|---:|" + ("---:|---:|" if before else ""),
    ]  # fmt: skip
    w8 = {r["model"]: r["after"]["steady"] for r in rows if r["bits"] == "W8A8"}
    for r in rows:
        a = r["after"]
        ratio = f"{a['steady'] / w8[r['model']]:.2f}" if r["model"] in w8 else "-"
        cells = [r["model"], r["bits"], f"{a['steady']:,}", ratio, f"{a['first']:,}"]
        if before:
            b = r.get("before")
            cells += [f"{b['steady']:,}", f"{a['steady'] / b['steady']:.2f}"] if b else ["-", "-"]
        if not a["bit_exact"] or (r.get("before") and not r["before"]["bit_exact"]):
            cells[1] += " (outputs differ!)"
        lines.append("| " + " | ".join(cells) + " |")
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--models", default=",".join(peers.MODELS))
    parser.add_argument("--bits", default=",".join(BITS))
    parser.add_argument("--work", type=Path, default=None, help="keep (and reuse) projects here")
    parser.add_argument("--baseline", default=None, help="git revision to compare against")
    args = parser.parse_args(argv)
    names = [m for m in args.models.split(",") if m]
    unknown = [m for m in names if m not in peers.MODELS]
    if unknown:
        parser.error(f"unknown model {unknown[0]}; choose from {', '.join(peers.MODELS)}")
    torch.set_num_threads(1)
    start = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="mico-host-kernels-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for name in names:
            for bits in args.bits.split(","):
                rows.append(measure(name, bits, work, args.baseline))
                print(json.dumps(rows[-1]), flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    dirty = subprocess.run(["git", "diff", "--quiet", "--", str(CSRC)], cwd=ROOT).returncode
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "seconds": time.perf_counter() - start,
            "commit": commit + (" (mico/csrc modified)" if dirty else ""),
            "baseline": args.baseline}  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "host_kernels.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    write_markdown(args.out / "host_kernels.md", rows, meta)
    return 0 if all(r["after"]["bit_exact"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
