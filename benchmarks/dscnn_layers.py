"""Where DS-CNN's rv32 instructions go: per-node instructions of one inference, per MAC.

Builds the zoo's ``dscnn`` (seed 0, static mode, calibrated as ``benchmarks/c_backend.py``
does) under uniform plans, checks the host build against the Python integer reference, and
counts every node's instructions on rv32imac (qemu ``-icount shift=0``, the ``instret``
markers of :func:`mico.hw.nodes.rv32_node_costs`), with the kernel path each node takes.

    .venv/bin/python benchmarks/dscnn_layers.py [--plans W8A8 W4A4 W2A2] [--label after]

The figures of each run are stored in ``benchmarks/results/dscnn_layers.json`` under
``--label`` (a previous label's figures are kept, so "before" and "after" sit side by side),
and the Markdown table is written from every label stored.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from c_backend import (
    CALIBRATION_BATCH_SIZE,
    CALIBRATION_BATCHES,
    mixed,
    plan_text,
    quantized,
    random_inputs,
    uniform,
)

from mico.codegen.compile import compile_model
from mico.hw.nodes import rv32_node_costs
from mico.hw.opshape import graph_op_shapes
from mico.models import from_zoo
from mico.targets import host

RESULTS = Path(__file__).resolve().parent / "results"
NOTES = """## Where the rest goes (W8A8)

On rv32imac (no packed multiply), an 8-bit x 8-bit product costs one `mul` and its sum one
`add`: two lanes of 16 bits cannot hold the 19-21-bit sums of these layers, so about 2
instructions per MAC is the floor before any load or requantization. Since issue 16's
session 8 the byte tile of `mico_conv_narrow.c` (first conv, pointwise layers) is 4 channels
x 5 pixels: a tap's 9 byte loads (4 weights, 5 codes) serve 20 MACs, and its 20 sums, 4
weights, code, product and 2 pointers take all 28 allocatable registers, so on rv32 it is an
assembly routine (`mico_nw_q5_rv32`; C on every other target). Patches of 20 pixels make
DS-CNN's 125 pixels 25 tiles (no 1-pixel tail), requantization constants are read once per
block of 64 channels, and a sum <= 0 stores 0 in 3 instructions: pointwise 2.89 -> 2.69,
first conv 3.17 -> 3.00, the model 3.12 -> 2.95 per MAC (the issue's 3.0). What is left in the
pointwise layers: about 2.2 per MAC in the tile's loop (2 for the multiply-adds, 9 loads per
20 MACs), the 20-byte patch copies and the per-call rearrangement of the weights (which the
generator could emit pre-arranged), the requantization (about 8 instructions an output, 0.13
per MAC over 64 taps). The depthwise byte path (`mico_qconv2d_dw8_f1`, 4.53) has 9 taps per
output, so its per-output costs weigh 7x more: 18 byte loads, 9 weight loads, 36 multiplies
and 36 adds per 4-output tile, about 9 instructions of requantization per output, and the
copy of each plane into its padded buffer.

## Where the rest goes (sub-byte depthwise)

The 4- and 2-bit depthwise layers take the pair path (`mico_qconv2d_dwp_f1_*`): two output
lines per 32-bit word in 16-bit lanes, so a 2-word tile does 4 word loads, 6 multiplies and 6
adds per buffer row for 12 MACs (the byte tile: 6 byte loads, 12 multiplies and 12 adds for
12), about 14 instructions of taps per output against W8A8's 25. What keeps the layer above
W8A8's per-MAC figure is around the taps: the 25 x 5 planes run as 13 line pairs of 5
outputs (2 tiles and a lone output pair each, about 40 instructions of loop per line pair),
the requantization (about 9.5 instructions per output, as at W8A8) is now a third of the
layer, and each plane's 125 packed codes are unpacked and spread into the lanes' halfwords
(about 10 instructions a code, 1.1 per MAC; W8A8 copies bytes at about 2). Planes with rows of
8 codes or more read the packed codes straight into the lanes (16 x 16: W4A4 4.11 per MAC
against W8A8's 4.48).

Since the issue-16 sub-byte kernels, a channel of a 25 x 5 plane whose sums fit takes more lanes
a word: 4-bit codes 3 lanes of 10 bits (9 line groups instead of 13 pairs), 2-bit codes 5 lanes
of 6 bits (the plane transposed: all 5 output columns in one word, one line group of 25
positions), the buffer built a word at a time from the unpacked plane. That left W4A4 at 4.78
per MAC in the model (W8A8 4.54): the requantization (about 10 instructions an output) and
the build, unpacking and packing of the plane (about 1.6 per MAC together) around the taps.

The depthwise round of issue 16 (label "issue-16 depthwise round") took the part around the
taps down: the 3- and 4-lane words of DS-CNN's rows of 5 are built at constant offsets (the
build's pointer steps were a third of it: W4A4 -0.30 per MAC on the kernel benchmark), 5-lane
words are built from the packed 2-bit codes without unpacking the plane, a channel's 9 weight
codes are decoded in one unrolled pass with their sums, 1- and 2-bit outputs in the ReLU form
go by per-channel thresholds counted for every lane of a word at once (three adds, shifts and
masks a word instead of a multiply per output; the thresholds found by bisection with the
kernel's own requantization), signed codes take 3 lanes too, and the pairs fill both lanes
of a word at once. Depthwise in the model: W8A8 4.54 -> 4.53, W4A4 4.78 -> 4.42 (now below
W8A8), W2A2 3.96 -> 3.67. What is left at W4A4 is the requantization of 4-bit outputs (15
levels: too many thresholds, so a high-word multiply per output, about 10 instructions with
its lane extraction and store, a third of the layer), the unpacking of the input and the
packing of the outputs (about 0.7 per MAC), and the taps (3 lanes: 9.5 instructions an
output). 8-bit weights with 4-bit codes keep 16-bit pairs (their sums do not fit 10 bits):
5.15 per MAC on the kernel benchmark, above W8A8's 4.58.

Session 8 (label "issue-16 session 8"): 2-bit activations with weights in {-1, 0, +1} take the
bit-sliced path (`mico_qconv2d_dwbs`): each channel plane as two bit planes, 32 outputs a word,
a tap one shift, a weight a choice (x, 3 - x or 3), carry-save adders counting the nine taps
into 5-bit counts, and the 1- or 2-bit output codes by comparing the counts with three
per-channel thresholds the generator computes with the reference's requantization. DS-CNN's
depthwise layers at W2A2: 3.67 -> 2.20 per MAC (2.06x fewer than W8A8's 4.53); the model
1.79 -> 1.56. The global mean sums packed codes a word at a time (W4A4 185,802 -> about
20,000 instructions; W2A2 below W8A8's too). W4A4's depthwise layers are unchanged (4.42): 15
output levels are too many thresholds, and a multiply per output stays cheaper; its first
conv (one input plane, the lanes' patch path, 3.65) is now above W8A8's byte tile (3.00).
"""
BITS = {"W8A8": 8, "W4A4": 4, "W2A2": 2}
#: the plans a run can measure: the uniform ones and c_backend's seeded mixed plan of DS-CNN
PLAN_NAMES = (*BITS, "mixed")


def plan_of(name: str, n_layers: int, seed: int) -> tuple[list[float], list[float]]:
    """Per-layer (weight, activation) widths of a plan name: uniform, or ``mixed``, the seeded
    random plan ``benchmarks/c_backend.py`` measures DS-CNN's ``mixed`` row with."""
    if name == "mixed":
        return mixed(n_layers, seed, "dscnn")
    return uniform(n_layers, BITS[name], BITS[name])


def kernel_calls(source: str) -> dict[str, str]:
    """The kernel each node calls in a generated ``<name>.c`` (the first ``mico_*(`` call after
    the node's comment line ``/* <node> ...``)."""
    calls: dict[str, str] = {}
    node = None
    for line in source.splitlines():
        text = line.strip()
        if text.startswith("/* ") and node is None:
            node = text[3:].split()[0].rstrip(":")
            continue
        if node is not None and text.startswith("mico_") and "(" in text:
            calls[node] = text.split("(")[0]
            node = None
    return calls


def measure(plan_name: str, seed: int) -> dict[str, Any]:
    """One plan's per-node figures (and the host agreement check)."""
    torch.manual_seed(seed)
    base = from_zoo("dscnn").eval()
    example = base.example_input()
    shape = tuple(example.shape[1:])
    calib = [
        torch.from_numpy(random_inputs(shape, CALIBRATION_BATCH_SIZE, seed + 100 + i))
        for i in range(CALIBRATION_BATCHES)
    ]
    qmodel, plan = quantized(base, plan_of(plan_name, base.n_layers, seed), "static", calib)
    with tempfile.TemporaryDirectory(prefix="mico-dscnn-layers-") as tmp:
        compiled = compile_model(
            qmodel, example, Path(tmp) / "m", name="m", mode="static", calibration=calib
        )
        samples = random_inputs(shape, 4, seed + 1)
        host.build(compiled.project)
        exact = bool(
            np.array_equal(host.run(compiled.project, samples), compiled.reference(samples))
        )
        costs = rv32_node_costs(compiled.project, samples[0])
        source = (compiled.project.directory / "m.c").read_text()
    calls = kernel_calls(source)
    shapes = {s.name: s for s in graph_op_shapes(compiled.graph)}
    nodes = []
    for name, count in costs.nodes:
        s = shapes.get(name)
        nodes.append(
            {
                "node": name,
                "kind": s.kind if s else "",
                "kernel": calls.get(name, ""),
                "macs": s.macs if s else 0,
                "instructions": count,
                "shape": (
                    f"{s.in_channels}->{s.out_channels} k{s.kh}x{s.kw} s{s.sh} {s.out_pixels} px"
                    if s and s.macs
                    else ""
                ),
            }
        )
    macs = sum(n["macs"] for n in nodes)
    return {
        "plan": plan_name,
        "plan_bits": plan_text(plan),
        "exact_host": exact,
        "macs": macs,
        "instructions": costs.total,
        "per_mac": costs.total / macs,
        "tail": costs.tail,
        "nodes": nodes,
    }


def groups(record: dict[str, Any]) -> list[tuple[str, int, int]]:
    """(group, instructions, MACs) by layer kind: first conv, depthwise, pointwise, rest."""
    out: dict[str, list[int]] = {}
    first = True
    for n in record["nodes"]:
        if n["kind"] in ("conv2d", "conv1d") and first:
            key, first = "first conv", False
        elif n["kind"] == "dwconv2d":
            key = "depthwise 3x3"
        elif n["kind"] in ("conv2d", "conv1d"):
            key = "pointwise 1x1"
        elif n["kind"] == "linear":
            key = "classifier"
        else:
            key = "other (quantize, pool, glue)"
        acc = out.setdefault(key, [0, 0])
        acc[0] += n["instructions"]
        acc[1] += n["macs"]
    return [(k, v[0], v[1]) for k, v in out.items()]


def markdown(data: dict[str, Any]) -> str:
    lines = [
        "# DS-CNN per layer on rv32imac (benchmarks/dscnn_layers.py)",
        "",
        "The zoo's `dscnn` (seed 0, static mode, calibrated as in `c_backend.py`), one "
        "inference on qemu-system-riscv32 `-icount shift=0` (rv32imac, -O2): instructions "
        "retired by each node between two `instret` markers (`mico.hw.nodes`), per MAC of the "
        "node. Every build's host output is checked bit-exact against the Python integer "
        "reference on 4 samples (`exact`).",
        "",
    ]
    for label, runs in data["labels"].items():
        meta = runs.get("_meta", {})
        lines += [f"## {label}", "", f"{meta.get('note', '')} (commit {meta.get('commit', '?')}, "
                  f"{meta.get('date', '')})", ""]  # fmt: skip
        summary = ["| plan | instructions | MACs | per MAC | exact |", "|---|---:|---:|---:|---|"]
        for plan, rec in runs.items():
            if plan.startswith("_"):
                continue
            summary.append(
                f"| {plan} | {rec['instructions']:,} | {rec['macs']:,} | {rec['per_mac']:.2f} | "
                f"{'✓' if rec['exact_host'] else '✗'} |"
            )
        lines += [*summary, ""]
        for plan, rec in runs.items():
            if plan.startswith("_"):
                continue
            lines += [
                f"### {label}: {plan}",
                "",
                "| group | instructions | share | per MAC |",
                "|---|---:|---:|---:|",
            ]
            for key, ins, macs in groups(rec):
                per = f"{ins / macs:.2f}" if macs else "-"
                lines.append(f"| {key} | {ins:,} | {ins / rec['instructions']:.1%} | {per} |")
            lines += [
                "",
                "| node | kind | shape | kernel | MACs | instructions | per MAC |",
                "|---|---|---|---|---:|---:|---:|",
            ]
            for n in rec["nodes"]:
                per = f"{n['instructions'] / n['macs']:.2f}" if n["macs"] else "-"
                lines.append(
                    f"| {n['node']} | {n['kind']} | {n['shape']} | {n['kernel']} | "
                    f"{n['macs']:,} | {n['instructions']:,} | {per} |"
                )
            lines += [f"| (tail) | | | | | {rec['tail']:,} | |", ""]
    return "\n".join([*lines, NOTES]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plans", nargs="+", default=["W8A8"], choices=PLAN_NAMES)
    parser.add_argument("--label", default="now")
    parser.add_argument("--note", default="")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    options = parser.parse_args()
    path = options.out / "dscnn_layers.json"
    data = json.loads(path.read_text()) if path.exists() else {"labels": {}}
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    runs: dict[str, Any] = {
        "_meta": {
            "commit": commit,
            "date": time.strftime("%Y-%m-%d"),
            "note": options.note,
            "machine": platform.machine(),
        }
    }
    for plan in options.plans:
        rec = measure(plan, options.seed)
        runs[plan] = rec
        print(f"{plan}: {rec['instructions']:,} instructions, {rec['per_mac']:.2f} per MAC, "
              f"exact {rec['exact_host']}")  # fmt: skip
        for key, ins, macs in groups(rec):
            print(f"  {key:30s} {ins:>10,} " + (f"{ins / macs:.2f}" if macs else "-"))
    data["labels"][options.label] = runs
    options.out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    (options.out / "dscnn_layers.md").write_text(markdown(data))


if __name__ == "__main__":
    main()
