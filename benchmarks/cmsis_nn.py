"""int8 on rv32: CMSIS-NN's portable C kernels beside mico's static kernels, instructions per MAC.

Run on demand (not a test):

    python benchmarks/cmsis_nn.py --cmsis-nn PATH [--out benchmarks/results] [--bits 8,4,2,1]

``PATH`` is the user's own CMSIS-NN checkout (or set ``CMSIS_NN``); mico carries no copy of it.
Its commit (``git rev-parse HEAD``) is recorded in the results.

CMSIS-NN side. Its integer sources (``Source/{Convolution,FullyConnected,NNSupport}Functions``,
float files left out) are compiled for rv32imac with the compiler and flags mico's rv32 builds
use (:mod:`mico.codegen.makefile`: ``-O2``, ``-march=rv32imac -mabi=ilp32``, picolibc with
semihosting, one section per function), neither ``ARM_MATH_DSP`` nor ``ARM_MATH_MVEI`` being
defined on a non-Arm target: the portable C paths. ``benchmarks/cmsis_nn/harness.c`` calls one
kernel on one seeded layer (int8 input already in memory, int8 output requantized per channel,
per tensor for the fully connected layer) and reads the ``instret`` CSR right before and after
the call under ``qemu-system-riscv32 -icount shift=0``; the cost of two back-to-back reads is
subtracted. Every output byte is compared with a Python reference of the same int8 arithmetic
(input offset, int32 accumulation, bias, TFLite's double-rounding requantization, output
offset, clamp), so each figure is that of a working kernel.

mico side. A model of the same layer followed by a small quantized layer (so that the measured
layer requantizes its output to the next layer's codes, as in a network) is quantized W/A
static at each width of ``--bits``, compiled to C and run once in mico's per-node instrumented
rv32 build (:func:`mico.hw.nodes.node_costs`); the figure is the layer's own node, input
quantization and the next layer excluded. The input quantization (float to codes, software
float on rv32imac) is reported apart, per input element. The W8A8 single-layer figure of
``mico profile`` (:func:`mico.hw.programs.measure_layer`: int32 output, no requantization) is
also given, for comparison with earlier figures.

To measure a commit's mico rather than the checkout's working tree (other people's
uncommitted kernel changes would otherwise count), export it and put it first on the path::

    git archive HEAD mico | tar -x -C /tmp/mico-head
    PYTHONPATH=/tmp/mico-head python benchmarks/cmsis_nn.py --cmsis-nn PATH \
        --mico-commit $(git rev-parse HEAD)

Results: ``cmsis_nn.{md,json}``. Exit status 2 when no CMSIS-NN path is given or the rv32
toolchain is missing, 1 when a CMSIS-NN output differs from the reference.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
HARNESS = HERE / "cmsis_nn" / "harness.c"
SOURCE_DIRS = ("ConvolutionFunctions", "FullyConnectedFunctions", "NNSupportFunctions")
FLOAT_MARKS = ("_f16", "_f32", "_flt")
TOOLS = (
    "riscv64-unknown-elf-gcc",
    "riscv64-unknown-elf-ar",
    "riscv64-unknown-elf-size",
    "qemu-system-riscv32",
)
SEED = 0
#: CMSIS-NN's asymmetric int8 zero points (offsets are their negatives), as TFLite models have
INPUT_OFFSET = 5
OUTPUT_OFFSET = -3

KIND_CODES = {
    "arm_convolve_s8": 1,
    "arm_convolve_1x1_s8_fast": 2,
    "arm_depthwise_conv_3x3_s8": 3,
    "arm_fully_connected_s8": 4,
}


@dataclass(frozen=True)
class Case:
    """One layer shape and the CMSIS-NN function that runs it (NHWC, batch 1)."""

    name: str
    function: str
    in_c: int
    out_c: int
    kernel: int
    size: int  # input H = W (1 for the fully connected layer)
    pad: int = 0
    depthwise: bool = False

    @property
    def fc(self) -> bool:
        return self.function == "arm_fully_connected_s8"

    @property
    def out_size(self) -> int:
        return self.size + 2 * self.pad - self.kernel + 1

    @property
    def macs(self) -> int:
        per_output = (1 if self.depthwise else self.in_c) * self.kernel * self.kernel
        return self.out_c * self.out_size * self.out_size * per_output

    @property
    def input_elements(self) -> int:
        return self.in_c * self.size * self.size


CASES = (
    Case("conv 3x3, 16->16, 16x16, pad 1", "arm_convolve_s8", 16, 16, 3, 16, pad=1),
    Case("conv 1x1, 32->32, 16x16", "arm_convolve_1x1_s8_fast", 32, 32, 1, 16),
    Case(
        "depthwise 3x3, 32 ch, 16x16, pad 1",
        "arm_depthwise_conv_3x3_s8",
        32,
        32,
        3,
        16,
        pad=1,
        depthwise=True,
    ),
    Case("fully connected 256->64", "arm_fully_connected_s8", 256, 64, 1, 1),
)


# ---------------------------------------------------------------------------------------------
# data and the Python reference of CMSIS-NN's int8 arithmetic


@dataclass
class Data:
    x: np.ndarray  # int8, (H, W, C) or (C,) for FC
    w: np.ndarray  # int8, conv (OC, KH, KW, IC); depthwise (KH, KW, C); FC (OC, IC)
    bias: np.ndarray  # int32 (OC,)
    mult: np.ndarray  # int32 (OC,), or (1,) for FC
    shift: np.ndarray  # int32, same shape


def accumulators(case: Case, x: np.ndarray, w: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """int64 sums of (x + input offset) * w plus bias; padding contributes zero (TFLite)."""
    xo = x.astype(np.int64) + INPUT_OFFSET
    if case.fc:
        return xo @ w.astype(np.int64).T + bias
    p, k, o = case.pad, case.kernel, case.out_size
    xp = np.zeros((case.size + 2 * p, case.size + 2 * p, case.in_c), dtype=np.int64)
    xp[p : p + case.size, p : p + case.size] = xo
    acc = np.zeros((o, o, case.out_c), dtype=np.int64)
    for i in range(k):
        for j in range(k):
            patch = xp[i : i + o, j : j + o]  # (o, o, C)
            if case.depthwise:
                acc += patch * w[i, j].astype(np.int64)
            else:
                acc += patch @ w[:, i, j, :].astype(np.int64).T
    return acc + bias


def requantize(acc: np.ndarray, mult: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """CMSIS-NN's default ``arm_nn_requantize``: doubling high multiply with rounding, then a
    rounding (half away from zero) divide by a power of two. int32 inputs, exact in int64."""
    acc = np.asarray(acc, dtype=np.int64)
    mult = np.broadcast_to(np.asarray(mult, dtype=np.int64), acc.shape)
    shift = np.broadcast_to(np.asarray(shift, dtype=np.int64), acc.shape)
    left, right = np.maximum(shift, 0), np.maximum(-shift, 0)
    val = _wrap32(acc << left)
    high = _wrap32((val * mult + (1 << 30)) >> 31)
    mask = (np.int64(1) << right) - 1
    remainder = high & mask
    result = high >> right
    threshold = (mask >> 1) + (result < 0)
    return result + (remainder > threshold)


def _wrap32(v: np.ndarray) -> np.ndarray:
    return ((v + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def reference(case: Case, data: Data) -> np.ndarray:
    """Output codes (int8) in CMSIS-NN's layout."""
    acc = accumulators(case, data.x, data.w, data.bias)
    if np.abs(acc).max() >= 1 << 31:
        raise ValueError("accumulator outside int32")
    out = requantize(acc, data.mult, data.shift) + OUTPUT_OFFSET
    return np.clip(out, -128, 127).astype(np.int8)


def make_data(case: Case, seed: int = SEED) -> Data:
    """Seeded codes; multipliers and shifts that map each channel's sums onto about +-100."""
    rng = np.random.default_rng(seed)
    x_shape = (case.in_c,) if case.fc else (case.size, case.size, case.in_c)
    if case.fc:
        w_shape: tuple[int, ...] = (case.out_c, case.in_c)
    elif case.depthwise:
        w_shape = (case.kernel, case.kernel, case.out_c)
    else:
        w_shape = (case.out_c, case.kernel, case.kernel, case.in_c)
    x = rng.integers(-128, 128, x_shape).astype(np.int8)
    w = rng.integers(-127, 128, w_shape).astype(np.int8)
    bias = rng.integers(-5000, 5001, case.out_c).astype(np.int32)
    acc = accumulators(case, x, w, bias).reshape(-1, case.out_c)
    spread = np.abs(acc).max(axis=0).astype(np.float64)
    if case.fc:
        spread = np.full(1, spread.max())
    target = 100.0 / np.maximum(spread, 1.0) * rng.uniform(0.8, 1.25, spread.shape)
    shift = np.ceil(np.log2(target)).astype(np.int64)  # 2^shift >= target
    mult = np.minimum(np.round(target / 2.0**shift * 2.0**31), 2**31 - 1).astype(np.int64)
    return Data(x, w, bias, mult.astype(np.int32), shift.astype(np.int32))


def _c_array(ctype: str, name: str, values: np.ndarray, const: bool = True) -> str:
    flat = [str(int(v)) for v in np.asarray(values).ravel()]
    lines = [", ".join(flat[i : i + 16]) for i in range(0, len(flat), 16)]
    qualifier = "const " if const else ""
    body = ",\n    ".join(lines)
    return f"static {qualifier}{ctype} {name}[{len(flat)}] = {{\n    {body}\n}};\n"


def case_header(case: Case, data: Data) -> str:
    """``case.h`` for harness.c: geometry, parameters and the seeded arrays."""
    if case.fc:
        fil = (case.in_c, 1, 1, case.out_c)  # filter_dims.n: accumulation depth
        inp = (1, 1, 1, case.in_c)
    elif case.depthwise:
        fil = (1, case.kernel, case.kernel, case.out_c)
        inp = (1, case.size, case.size, case.in_c)
    else:
        fil = (case.out_c, case.kernel, case.kernel, case.in_c)
        inp = (1, case.size, case.size, case.in_c)
    out_hw = 1 if case.fc else case.out_size
    defines = {
        "CASE_KIND": KIND_CODES[case.function],
        "CASE_IN_N": inp[0],
        "CASE_IN_H": inp[1],
        "CASE_IN_W": inp[2],
        "CASE_IN_C": inp[3],
        "CASE_FIL_N": fil[0],
        "CASE_FIL_H": fil[1],
        "CASE_FIL_W": fil[2],
        "CASE_FIL_C": fil[3],
        "CASE_OUT_H": out_hw,
        "CASE_OUT_W": out_hw,
        "CASE_OUT_C": case.out_c,
        "CASE_OUTPUT_SIZE": out_hw * out_hw * case.out_c,
        "CASE_STRIDE": 1,
        "CASE_PAD": case.pad,
        "CASE_INPUT_OFFSET": INPUT_OFFSET,
        "CASE_OUTPUT_OFFSET": OUTPUT_OFFSET,
        "CASE_ACT_MIN": -128,
        "CASE_ACT_MAX": 127,
    }
    text = [f"/* case.h - generated by benchmarks/cmsis_nn.py: {case.name} */\n"]
    text += [f"#define {k} ({v})\n" for k, v in defines.items()]
    text += [
        _c_array("int8_t", "case_input", data.x),
        _c_array("int8_t", "case_filter", data.w),
        _c_array("int32_t", "case_bias", data.bias),
        _c_array("int32_t", "case_multiplier", data.mult, const=False),
        _c_array("int32_t", "case_shift", data.shift, const=False),
    ]
    return "".join(text)


# ---------------------------------------------------------------------------------------------
# building and running CMSIS-NN


def rv32_flags() -> dict[str, list[str]]:
    """mico's rv32 compile and link flags (the generated Makefile's, for TARGET=rv32)."""
    from mico.codegen import makefile as mk

    common = [
        "-O2",
        *shlex.split(mk.WARNINGS),
        *shlex.split(mk.FP_FLAGS),
        *shlex.split(mk.RV32_ARCH),
        *shlex.split(mk.RV32_LIBC),
        *shlex.split(mk.RV32_SECTIONS),
    ]
    return {
        "cc": [mk.RV32_CC],
        "cflags": common,
        "ldflags": [*shlex.split(mk.RV32_MEMORY), mk.RV32_GC],
        "qemu": shlex.split(mk.QEMU_RV32),
    }


def cmsis_sources(root: Path) -> list[Path]:
    sources = []
    for folder in SOURCE_DIRS:
        for path in sorted((root / "Source" / folder).glob("*.c")):
            if not any(mark in path.name for mark in FLOAT_MARKS):
                sources.append(path)
    return sources


def _run(command: list[str], what: str, cwd: Path | None = None, timeout: float = 600) -> str:
    result = subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"{what} failed ({result.returncode}):\n{(result.stdout + result.stderr)[-4000:]}"
        )
    return result.stdout + result.stderr


def build_library(
    root: Path,
    work: Path,
    flags: dict[str, list[str]],
    jobs: int = 2,
    names: tuple[str, ...] = (),
) -> Path:
    """CMSIS-NN's integer sources (or those of ``names`` alone, file stems) compiled with
    mico's rv32 flags and archived (libcmsisnn.a)."""
    include = ["-I", str(root / "Include")]
    objects = work / "obj"
    objects.mkdir(parents=True, exist_ok=True)

    def compile_one(source: Path) -> Path:
        obj = objects / (source.stem + ".o")
        _run(
            [*flags["cc"], *flags["cflags"], *include, "-c", str(source), "-o", str(obj)],
            f"compiling {source.relative_to(root)}",
        )
        return obj

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        sources = [p for p in cmsis_sources(root) if not names or p.stem in names]
        built = list(pool.map(compile_one, sources))
    library = work / "libcmsisnn.a"
    library.unlink(missing_ok=True)
    _run(["riscv64-unknown-elf-ar", "rcs", str(library), *map(str, built)], "archiving CMSIS-NN")
    return library


@dataclass
class CmsisResult:
    instructions: int  # kernel call, measurement cost subtracted
    empty: int
    status: int
    output: np.ndarray  # int8 as the kernel wrote it
    text_bytes: int  # .text of the linked ELF (harness + libc + kernel)


def run_case(
    case: Case, data: Data, root: Path, library: Path, work: Path, flags: dict[str, list[str]]
) -> CmsisResult:
    """Build harness.c for ``case`` against ``library``, run it under qemu, parse its console."""
    folder = work / case.function
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "case.h").write_text(case_header(case, data))
    elf = folder / "harness.elf"
    _run(
        [
            *flags["cc"],
            *flags["cflags"],
            "-I",
            str(folder),
            "-I",
            str(root / "Include"),
            *flags["ldflags"],
            "-o",
            str(elf),
            str(HARNESS),
            str(library),
        ],
        f"building the harness for {case.function}",
    )
    result = subprocess.run(
        [*flags["qemu"], "-kernel", str(elf)],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    console = result.stdout + result.stderr
    values: dict[str, int] = {}
    hexdata = []
    for line in console.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in ("empty", "instret", "status"):
            values[parts[0]] = int(parts[1])
        elif len(parts) == 2 and parts[0] == "out":
            hexdata.append(parts[1])
    if result.returncode != 0 or set(values) != {"empty", "instret", "status"}:
        raise RuntimeError(
            f"{elf.name} for {case.function} under qemu failed "
            f"({result.returncode}):\n{console[-4000:]}"
        )
    output = np.frombuffer(bytes.fromhex("".join(hexdata)), dtype=np.int8).copy()
    size = _run(["riscv64-unknown-elf-size", "-A", "-d", str(elf)], "size")
    text_bytes = sum(
        int(p[1])
        for p in (line.split() for line in size.splitlines())
        if len(p) >= 2 and p[0] == ".text" and p[1].isdigit()
    )
    return CmsisResult(
        values["instret"] - values["empty"], values["empty"], values["status"], output, text_bytes
    )


# ---------------------------------------------------------------------------------------------
# mico


def mico_measure(case: Case, bits: int, seed: int = SEED) -> dict:
    """The layer's own node (output requantized for a next layer) and the input quantization,
    from mico's instrumented rv32 build of a two-layer model, quantized W``bits``A``bits``."""
    import torch
    from torch import nn

    from mico.codegen import emit_c_project
    from mico.hw.nodes import node_costs
    from mico.pipeline import lower_model, quantize_ptq
    from mico.quant import QuantConfig, QuantPlan
    from mico.quant.arithmetic import format_bits

    class Two(nn.Module):
        def __init__(self, layer: nn.Module, after: nn.Module) -> None:
            super().__init__()
            self.layer = layer
            self.next = after

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.next(self.layer(x))

    torch.manual_seed(seed)
    if case.fc:
        model = Two(nn.Linear(case.in_c, case.out_c), nn.Linear(case.out_c, 8))
        sample: tuple[int, ...] = (case.in_c,)
    else:
        groups = case.in_c if case.depthwise else 1
        model = Two(
            nn.Conv2d(case.in_c, case.out_c, case.kernel, 1, case.pad, groups=groups),
            nn.Conv2d(case.out_c, 4, 1),
        )
        sample = (case.in_c, case.size, case.size)
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn((8, *sample), generator=generator)
    b = format_bits(bits)
    plan = QuantPlan.parse(f"layer={b}/{b},next={b}/{b}")
    quantized = quantize_ptq(model, plan, [inputs], QuantConfig(act_mode="static"))
    graph = lower_model(quantized, inputs[:1], "two", calibration=[inputs])
    with tempfile.TemporaryDirectory(prefix="mico-cmsis-cmp-") as tmp:
        project = emit_c_project(graph, Path(tmp) / "two", "two", sample_inputs=inputs[:1])
        costs = node_costs(project, "qemu-rv32", inputs[0].numpy())
    by_name = dict(costs.nodes)
    layer_nodes = [n for n in graph.nodes if n.attrs.get("layer") == "layer"]
    quant_nodes = [n for n in graph.nodes if n.op == "mico.quantize"]
    if not layer_nodes or not quant_nodes:
        raise RuntimeError(f"no node of the layer or of the input quantization in {costs.nodes}")
    layer = sum(by_name[n.name] for n in layer_nodes)
    requant = layer_nodes[-1].attrs.get("requant") or {}
    fmt = requant.get("qformat")
    return {
        "instructions": layer,
        "per_mac": layer / case.macs,
        "nodes": [n.name for n in layer_nodes],
        "requant_multipliers": int(np.atleast_1d(requant["m"]).size) if "m" in requant else 0,
        "output_codes": f"{fmt.bits}-bit {'signed' if fmt.signed else 'unsigned'}"
        if fmt
        else "int32",
        "input_quantize": sum(by_name[n.name] for n in quant_nodes),
        "input_quantize_per_element": sum(by_name[n.name] for n in quant_nodes)
        / case.input_elements,
    }


def mico_single_layer(case: Case) -> float:
    """``mico profile``'s W8A8 figure for the shape: one layer, int32 accumulators out."""
    from mico.hw.layers import LayerShape
    from mico.hw.programs import measure_layer
    from mico.targets.catalog import builtin_dir, load_target_file

    size = (1, 1) if case.fc else (case.size, case.size)
    out = (1, 1) if case.fc else (case.out_size, case.out_size)
    kind = "linear" if case.fc else "dwconv2d" if case.depthwise else "conv2d"
    shape = LayerShape(
        case.name,
        kind,
        case.in_c,
        case.out_c,
        (case.kernel, case.kernel),
        (1, 1),
        case.in_c if case.depthwise else 1,
        size,
        out,
        8,
        8,
    )
    spec = load_target_file(builtin_dir() / "rv32.yaml")
    return measure_layer(shape, spec) / case.macs


# ---------------------------------------------------------------------------------------------
# environment and reports


def cmsis_commit(root: Path) -> str:
    result = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    return result.stdout.strip() if result.returncode == 0 else "unknown (not a git checkout)"


def tool_version(tool: str) -> str:
    result = subprocess.run([tool, "--version"], capture_output=True, text=True, check=False)
    return (result.stdout.splitlines() or ["?"])[0].strip()


def mico_state(export_commit: str = "") -> dict:
    """Which mico was measured: the imported package, its commit, and whether its C kernels and
    code generator are the commit's (uncommitted changes in the checkout change the figures)."""
    import mico
    from mico.hw.programs import kernels_hash

    package = Path(mico.__file__).resolve().parent
    repo = package.parent
    git = ["git", "-C", str(repo)]
    head = subprocess.run(
        [*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    if not head:  # an export (git archive) of a commit: the commit given to --mico-commit
        return {
            "package": str(package),
            "commit": export_commit or "unknown (not a git checkout)",
            "kernels_sha256": kernels_hash(),
            "changed_from_commit": [],
        }
    status = subprocess.run(
        [
            *git,
            "status",
            "--porcelain",
            "--",
            "mico/csrc",
            "mico/codegen",
            "mico/passes",
            "mico/quant",
        ],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    changed = sorted(line[3:] for line in status.splitlines() if line.strip())
    return {
        "package": str(package),
        "commit": head,
        "kernels_sha256": kernels_hash(),
        "changed_from_commit": changed,
    }


def _fmt(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def markdown(report: dict) -> str:
    bits = report["bits"]
    env = report["environment"]
    changed = env["mico"]["changed_from_commit"]
    lines = [
        "# int8 on rv32: CMSIS-NN's portable C kernels beside mico's kernels",
        "",
        "Generated by `python benchmarks/cmsis_nn.py --cmsis-nn PATH`. Instructions per MAC of",
        "one layer alone on rv32imac (qemu-system-riscv32 `-icount shift=0`, `instret` read",
        "around the call, the cost of an empty measurement subtracted for CMSIS-NN; mico's",
        "per-node markers). Input already in integer codes, output requantized to the next",
        "layer's codes (CMSIS-NN: int8, per-channel multipliers; per tensor for the fully",
        "connected layer).",
        "",
        "| shape | CMSIS-NN function | MACs | CMSIS-NN instr/MAC | "
        + " | ".join(f"mico W{b}A{b}" for b in bits)
        + " | mico W8A8 / CMSIS-NN | mico W8A8 int32 out (`mico profile`) |",
        "|---|---|---:|---:|" + "---:|" * len(bits) + "---:|---:|",
    ]
    for row in report["rows"]:
        cmsis = row["cmsis_nn"]["per_mac"]
        mico = [row["mico"].get(f"W{b}A{b}", {}).get("per_mac") for b in bits]
        w8 = row["mico"].get("W8A8", {}).get("per_mac")
        ratio = None if w8 is None else w8 / cmsis
        lines.append(
            f"| {row['shape']} | `{row['function']}` | {row['macs']} | {_fmt(cmsis)} | "
            + " | ".join(_fmt(v) for v in mico)
            + f" | {_fmt(ratio)} | {_fmt(row.get('mico_w8a8_int32_out_per_mac'))} |"
        )
    lines += [
        "",
        "Ratio: mico W8A8 instructions / CMSIS-NN instructions (below 1: mico retires fewer).",
        "",
        "mico's input quantization (float input to codes, its own node, not in the figures "
        "above), instructions per input element:",
        "",
        "| shape | input elements | " + " | ".join(f"W{b}A{b}" for b in bits) + " |",
        "|---|---:|" + "---:|" * len(bits),
    ]
    for row in report["rows"]:
        vals = [row["mico"].get(f"W{b}A{b}", {}).get("input_quantize_per_element") for b in bits]
        lines.append(
            f"| {row['shape']} | {row['input_elements']} | "
            + " | ".join(_fmt(v, 1) for v in vals)
            + " |"
        )
    checks = [
        f"- {r['shape']}: {r['cmsis_nn']['checked_outputs']} output bytes, "
        + (
            "bit-exact"
            if r["cmsis_nn"]["bit_exact"]
            else f"**{r['cmsis_nn']['mismatches']} differ**"
        )
        for r in report["rows"]
    ]
    errors = [
        f"- {r['shape']} W{k}: {v['error']}"
        for r in report["rows"]
        for k, v in r["mico"].items()
        if "error" in v
    ]
    lines += [
        "",
        "## CMSIS-NN outputs against the Python reference",
        "",
        "Every output byte of every CMSIS-NN run is compared with a numpy reference of the same",
        "int8 arithmetic (input offset, int32 sums, bias, double-rounding requantization, output",
        "offset, clamp to [-128, 127]):",
        "",
        *checks,
        "",
        "## Setup",
        "",
        f"- CMSIS-NN commit: `{env['cmsis_nn_commit']}` (the user's checkout; not part of mico)",
        f"- CMSIS-NN sources compiled: the integer files of {', '.join(SOURCE_DIRS)} "
        f"({env['cmsis_nn_sources']} files), no `ARM_MATH_DSP` / `ARM_MATH_MVEI`: portable C",
        f"- compiler: {env['compiler']}",
        f"- CFLAGS (CMSIS-NN and harness, as mico's rv32 build): `{' '.join(env['cflags'])}`",
        f"- LDFLAGS: `{' '.join(env['ldflags'])}`",
        f"- qemu: {env['qemu']}: `{' '.join(env['qemu_command'])}`",
        f"- CMSIS-NN empty measurement (two back-to-back `instret` reads): "
        f"{report['rows'][0]['cmsis_nn']['empty']} instruction(s), subtracted",
        f"- CMSIS-NN offsets: input {INPUT_OFFSET}, output {OUTPUT_OFFSET}; seed {SEED}",
        f"- mico: commit `{env['mico']['commit']}`, kernels sha256 "
        f"`{env['mico']['kernels_sha256'][:16]}`"
        + (
            "; measured WITH uncommitted changes to " + ", ".join(changed)
            if changed
            else " (the commit's own code)"
        ),
        "- mico model: the layer followed by a small quantized layer (1x1 conv to 4 channels, or",
        "  Linear to 8), quantized W/A static (`QuantConfig(act_mode='static')`), calibrated on 8",
        "  seeded normal samples; the figure is the layer's node from `mico.hw.nodes.node_costs`",
        "  (qemu-rv32), marker call included (a few instructions). mico's layout is NCHW with",
        "  symmetric activation codes; CMSIS-NN's is NHWC with asymmetric ones.",
        "- mico W8A8 output requantization multipliers (1: per tensor, else per channel): "
        + ", ".join(
            f"{r['shape'].split(',')[0]} {r['mico']['W8A8'].get('requant_multipliers', '?')}"
            for r in report["rows"]
            if "W8A8" in r["mico"]
        ),
        "- The `int32 out` column is `mico.hw.programs.measure_layer` (the single-layer program of",
        "  `mico profile`): the layer alone feeding the output, accumulators not requantized.",
        f"- run on {env['host']}, {env['date']}, {report['seconds']:.0f} s",
    ]
    if errors:
        lines += ["", "## mico configurations that did not run", "", *errors]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--cmsis-nn",
        default=os.environ.get("CMSIS_NN"),
        help="path of a CMSIS-NN checkout (default: $CMSIS_NN)",
    )
    parser.add_argument("--out", default=str(HERE / "results"), help="results folder")
    parser.add_argument("--bits", default="8,4,2,1", help="mico widths W=A to measure")
    parser.add_argument("--no-mico", action="store_true", help="CMSIS-NN only")
    parser.add_argument(
        "--mico-commit",
        default="",
        help="the commit of the imported mico when it is an export (git archive) "
        "rather than a checkout, e.g. PYTHONPATH=<export of HEAD>",
    )
    parser.add_argument("--jobs", type=int, default=2, help="parallel compiles of CMSIS-NN")
    args = parser.parse_args(argv)

    if not args.cmsis_nn:
        print(
            "error: no CMSIS-NN checkout given: pass --cmsis-nn PATH or set CMSIS_NN "
            "(git clone https://github.com/ARM-software/CMSIS-NN); mico does not carry it",
            file=sys.stderr,
        )
        return 2
    root = Path(args.cmsis_nn).expanduser().resolve()
    if not (root / "Include" / "arm_nnfunctions.h").is_file():
        print(
            f"error: {root} is not a CMSIS-NN checkout (no Include/arm_nnfunctions.h)",
            file=sys.stderr,
        )
        return 2
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        print(
            f"error: missing {', '.join(missing)}: install gcc-riscv64-unknown-elf "
            "picolibc-riscv64-unknown-elf binutils-riscv64-unknown-elf qemu-system-misc",
            file=sys.stderr,
        )
        return 2
    bits = [int(b) for b in args.bits.split(",") if b.strip()]

    start = time.time()
    flags = rv32_flags()
    rows = []
    failed = False
    with tempfile.TemporaryDirectory(prefix="mico-cmsis-nn-") as tmp:
        work = Path(tmp)
        print(f"compiling CMSIS-NN ({len(cmsis_sources(root))} files) for rv32imac ...", flush=True)
        library = build_library(root, work, flags, args.jobs)
        for case in CASES:
            data = make_data(case)
            res = run_case(case, data, root, library, work, flags)
            expected = reference(case, data).ravel()
            mismatches = (
                int(np.count_nonzero(res.output != expected))
                if (res.output.size == expected.size)
                else expected.size
            )
            exact = res.status == 0 and mismatches == 0
            failed |= not exact
            per_mac = res.instructions / case.macs
            print(
                f"{case.name:38s} CMSIS-NN {per_mac:6.2f} instr/MAC "
                f"({'bit-exact' if exact else f'{mismatches} outputs differ'})",
                flush=True,
            )
            row = {
                "shape": case.name,
                "function": case.function,
                "macs": case.macs,
                "input_elements": case.input_elements,
                "cmsis_nn": {
                    "instructions": res.instructions,
                    "empty": res.empty,
                    "per_mac": per_mac,
                    "status": res.status,
                    "checked_outputs": int(expected.size),
                    "mismatches": mismatches,
                    "bit_exact": exact,
                    "elf_text_bytes": res.text_bytes,
                    "output_saturated": int(np.count_nonzero(np.abs(expected.astype(int)) >= 127)),
                },
                "mico": {},
            }
            rows.append(row)
    if not args.no_mico:
        for case, row in zip(CASES, rows, strict=True):
            for b in bits:
                try:
                    m = mico_measure(case, b)
                    print(
                        f"{case.name:38s} mico W{b}A{b} {m['per_mac']:6.2f} instr/MAC, "
                        f"input quantization {m['input_quantize_per_element']:.1f} "
                        "instr/element",
                        flush=True,
                    )
                except Exception as exc:
                    m = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
                    print(f"{case.name:38s} mico W{b}A{b}: {m['error']}", flush=True)
                row["mico"][f"W{b}A{b}"] = m
            row["mico_w8a8_int32_out_per_mac"] = mico_single_layer(case)
    env = {
        "cmsis_nn_path": str(root),
        "cmsis_nn_commit": cmsis_commit(root),
        "cmsis_nn_sources": len(cmsis_sources(root)),
        "compiler": tool_version("riscv64-unknown-elf-gcc"),
        "qemu": tool_version("qemu-system-riscv32"),
        "cflags": flags["cflags"],
        "ldflags": flags["ldflags"],
        "qemu_command": flags["qemu"],
        "mico": mico_state(args.mico_commit),
        "host": platform.platform(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    report = {"bits": bits, "rows": rows, "environment": env, "seconds": time.time() - start}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cmsis_nn.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "cmsis_nn.md").write_text(markdown(report))
    print(f"wrote {out / 'cmsis_nn.md'} and {out / 'cmsis_nn.json'}")
    if failed:
        print("error: a CMSIS-NN output differs from the reference", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
