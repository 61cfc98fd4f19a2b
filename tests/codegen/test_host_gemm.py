"""The host kernels (mico_host_gemm.c: mico_qconv2d_host, mico_qlinear_host) against the Python
integer arithmetic: every weight width 1..8 and ternary, activations of 1..8 bits (unsigned,
signed, asymmetric), odd channel, tap and pixel counts, padding, stride, dilation, groups,
depthwise layers, code extremes and saturating multipliers; built at -O3 the way the
generated Makefile builds a host project. Also: the kernel choice follows the target's
`xautovec` capability, a host project still builds and runs bit-exact for rv32, and a zoo
model built with the host kernels equals its reference."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
import torch

from mico.codegen.emitters import HOST_CONV, HOST_EXTENSION, HOST_LINEAR
from mico.codegen.makefile import HOST_KERNELS, HOST_OPT
from mico.deploy import generation_extensions
from mico.quant.arithmetic import TERNARY, QFormat, requantize
from mico.quant.packing import pack, unpack

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

SOURCES = (
    "mico_host_gemm.c",
    "mico_check.c",
    "mico_conv2d.c",
    "mico_linear.c",
    "mico_eltwise.c",
    "mico_nn_run.c",
    "mico_pool.c",
    "mico_quant.c",
)


@dataclass
class Case:
    """One conv (NCHW, batch 1) or linear layer of codes, with its requantization."""

    kind: str
    w_fmt: QFormat
    a_fmt: QFormat
    o_fmt: QFormat
    weight: np.ndarray  # (out, in / groups, kh, kw) or (out, in)
    x: np.ndarray  # (c, h, w) or (rows, in)
    bias: np.ndarray
    m: np.ndarray
    shift: np.ndarray
    relu: bool = True
    stride: tuple[int, int] = (1, 1)
    pad: tuple[int, int] = (0, 0)
    dil: tuple[int, int] = (1, 1)
    groups: int = 1
    out_rows: int | None = None  # more output rows than the padding gives: a deeper bottom pad

    def out_hw(self) -> tuple[int, int]:
        _, h, w = self.x.shape
        kh, kw = self.weight.shape[2:]
        oh, ow = (
            (n + 2 * p - d * (k - 1) - 1) // s + 1
            for n, p, d, k, s in zip((h, w), self.pad, self.dil, (kh, kw), self.stride, strict=True)
        )
        return (oh if self.out_rows is None else self.out_rows), ow

    def bottom_pad(self) -> int:
        """Rows of zeros below the input that the output rows read (pad[0] or more)."""
        h, kh = self.x.shape[1], self.weight.shape[2]
        reach = (self.out_hw()[0] - 1) * self.stride[0] + self.dil[0] * (kh - 1) + 1
        return max(self.pad[0], reach - h - self.pad[0])

    def reference(self) -> np.ndarray:
        """bias + exact int64 sums, ReLU, per-channel requantization (mico.quant.arithmetic)."""
        w = self.weight.astype(np.int64)
        if self.kind == "linear":
            acc = self.x.astype(np.int64) @ w.T + self.bias[None, :]
            acc = acc.T  # channel first, like the conv sums
        else:
            c, h, wd = self.x.shape
            (ph, pw), (sh, sw), (dh, dw) = self.pad, self.stride, self.dil
            xp = np.zeros((c, h + ph + self.bottom_pad(), wd + 2 * pw), dtype=np.int64)
            xp[:, ph : ph + h, pw : pw + wd] = self.x
            out_c, ipg, kh, kw = w.shape
            oh, ow = self.out_hw()
            opg = out_c // self.groups
            acc = np.zeros((out_c, oh, ow), dtype=np.int64)
            for ky in range(kh):
                for kx in range(kw):
                    y0, x0 = ky * dh, kx * dw
                    win = xp[:, y0 : y0 + sh * (oh - 1) + 1 : sh, x0 : x0 + sw * (ow - 1) + 1 : sw]
                    for g in range(self.groups):
                        xs = win[g * ipg : (g + 1) * ipg]
                        ws = w[g * opg : (g + 1) * opg, :, ky, kx]
                        acc[g * opg : (g + 1) * opg] += np.einsum("oi,ihw->ohw", ws, xs)
            acc += self.bias[:, None, None]
        if self.relu:
            acc = np.maximum(acc, 0)
        out = np.stack([requantize(acc[c], int(self.m[c]), int(self.shift[c]), self.o_fmt)
                        for c in range(acc.shape[0])])  # fmt: skip
        return out.T if self.kind == "linear" else out


def codes(rng: np.random.Generator, fmt: QFormat, shape: tuple, extreme: bool) -> np.ndarray:
    """Random codes of a format (binary: {-1, +1}); ``extreme``: only its two limits."""
    if extreme or fmt.binary:
        return rng.choice([fmt.qmin, fmt.qmax], size=shape).astype(np.int64)
    return rng.integers(fmt.qmin, fmt.qmax + 1, size=shape).astype(np.int64)


def case(kind: str, w_fmt: QFormat, a_fmt: QFormat, *, in_c: int, out_c: int, hw=(1, 1),
         k=(1, 1), groups: int = 1, rows: int = 1, o_fmt: QFormat | None = None, seed: int = 0,
         extreme: bool = False, relu: bool = True, **geometry) -> Case:  # fmt: skip
    """A layer of seeded random codes whose multipliers spread the sums over the output range
    (``extreme``: codes at their limits, biases near the int32 limits, saturating scales)."""
    rng = np.random.default_rng(seed)
    o_fmt = o_fmt or a_fmt
    if kind == "linear":
        wshape, xshape = (out_c, in_c), (rows, in_c)
    else:
        wshape, xshape = (out_c, in_c // groups, *k), (in_c, *hw)
    w, x = codes(rng, w_fmt, wshape, extreme), codes(rng, a_fmt, xshape, extreme)
    taps = int(np.prod(wshape[1:]))
    peak = max(abs(w_fmt.qmin), w_fmt.qmax) * max(abs(a_fmt.qmin), a_fmt.qmax)
    spread = max(1.0, np.sqrt(taps) * peak / 2)
    bias = rng.integers(-int(spread), int(spread) + 1, size=out_c)
    if extreme:
        bias = rng.choice([-(2**31) + 2**20, 2**31 - 1 - 2**20, 0], size=out_c)
    real = (o_fmt.qmax - o_fmt.qmin + 1) / (2 * spread) * rng.uniform(0.5, 2.0, size=out_c)
    if extreme:
        real = real * 1000.0
    shift = np.clip(np.floor(30 - np.log2(real)).astype(np.int64), 1, 62)
    m = np.clip(np.round(real * 2.0**shift), 0, 2**31 - 1).astype(np.int64)
    return Case(kind, w_fmt, a_fmt, o_fmt, w, x, bias.astype(np.int64), m, shift, relu=relu,
                groups=groups, **geometry)  # fmt: skip


def c_fmt(f: QFormat) -> str:
    zero = f", .zero = {f.zero}" if f.zero else ""
    return f"{{ .bits = {f.bits}, .is_signed = {int(f.signed)}{zero} }}"


def c_array(ctype: str, name: str, values) -> str:
    items = ", ".join(str(int(v)) for v in np.ravel(values)) or "0"
    return f"static const {ctype} {name}[] = {{ {items} }};"


def program(cases: list[Case]) -> str:
    """A C program calling the host kernel on every case twice (the first call lays the
    weights out in the kernels' store, the second reads them from there), printing the output
    bytes of each call."""
    lines = ["#include <stdio.h>", '#include "mico_nn.h"']
    body = []
    for i, c in enumerate(cases):
        t = f"L{i}_"
        out_c = c.weight.shape[0]
        lines += [c_array("uint8_t", f"{t}x", pack(c.x, c.a_fmt)),
                  c_array("uint8_t", f"{t}w", pack(c.weight, c.w_fmt)),
                  c_array("int32_t", f"{t}b", c.bias), c_array("int32_t", f"{t}m", c.m),
                  c_array("int32_t", f"{t}s", c.shift)]  # fmt: skip
        common = (
            f".in_fmt = {c_fmt(c.a_fmt)}, .w_bits = {c.w_fmt.bits}, .weight = {t}w, "
            f".bias = {t}b, .out = {{ .fmt = {c_fmt(c.o_fmt)}, .relu = {int(c.relu)}, "
            f".n_mult = {out_c}, .m = {t}m, .shift = {t}s, .lo = {c.o_fmt.qmin}, "
            f".hi = {c.o_fmt.qmax} }}"
        )
        if c.kind == "linear":
            rows, in_f = c.x.shape
            lines.append(f"static const MicoLinear {t}p = {{ .rows = {rows}, .in_features = "
                         f"{in_f}, .out_features = {out_c}, {common} }};")  # fmt: skip
            kernel = HOST_LINEAR
        else:
            in_c, h, w = c.x.shape
            oh, ow = c.out_hw()
            kh, kw = c.weight.shape[2:]
            lines.append(
                f"static const MicoConv2d {t}p = {{ .in_c = {in_c}, .in_h = {h}, .in_w = {w}, "
                f".out_c = {out_c}, .out_h = {oh}, .out_w = {ow}, .k_h = {kh}, .k_w = {kw}, "
                f".stride_h = {c.stride[0]}, .stride_w = {c.stride[1]}, .pad_h = {c.pad[0]}, "
                f".pad_w = {c.pad[1]}, .dil_h = {c.dil[0]}, .dil_w = {c.dil[1]}, "
                f".groups = {c.groups}, {common} }};"
            )
            kernel = HOST_CONV
        size = (c.reference().size * c.o_fmt.bits + 7) // 8
        body += [f"    {kernel}(&{t}p, {t}x, y);\n"
                 f"    for (i = 0; i < {size}; i++) {{ printf(\"%02x\", y[i]); }}\n"
                 "    printf(\"\\n\");"] * 2  # fmt: skip
    sizes = [(c.reference().size * c.o_fmt.bits + 7) // 8 for c in cases]
    lines.append(f"static uint8_t y[{max(sizes) + 8}];")
    lines.append("int main(void)\n{\n    size_t i;\n" + "\n".join(body) + "\n    return 0;\n}")
    return "\n".join(lines) + "\n"


_OBJECTS: dict[tuple[str, bool, tuple[str, ...]], Path] = {}


def kernels(tmp_path_factory: pytest.TempPathFactory, cc: str, host: bool,
            defines: tuple[str, ...] = ()) -> Path:  # fmt: skip
    """The kernel sources compiled once per compiler and variant: the host build's flags, or
    without MICO_HOST_KERNELS (the forwarding entry points of every other target);
    ``defines``: more -D flags (a smaller weight store)."""
    key = (cc, host, defines)
    if key not in _OBJECTS:
        work = tmp_path_factory.mktemp(f"kernels_{cc}_{int(host)}")
        csrc = resources.files("mico.csrc")
        for name in ("mico_nn.h", *SOURCES):
            (work / name).write_text((csrc / name).read_text())
        flags = [HOST_OPT, HOST_KERNELS, *defines] if host else ["-O2"]
        sources = list(SOURCES)
        if defines:  # only mico_host_gemm.c reads them: the other objects of the plain build
            base = kernels(tmp_path_factory, cc, host)
            for name in SOURCES[1:]:
                obj = name.replace(".c", ".o")
                (work / obj).write_bytes((base / obj).read_bytes())
            sources = [SOURCES[0]]
        command = [cc, "-std=c99", "-Wall", "-Wextra", "-Werror", *flags, "-c"]
        # two compilers at a time (mico_host_gemm.c alone takes as long as the rest)
        jobs = [subprocess.Popen([*command, *part], cwd=work, stderr=subprocess.PIPE, text=True)
                for part in (sources[:1], sources[1:]) if part]  # fmt: skip
        for job in jobs:
            _, err = job.communicate()
            assert job.returncode == 0, err
        _OBJECTS[key] = work
    return _OBJECTS[key]


@pytest.fixture
def build(tmp_path_factory: pytest.TempPathFactory):
    return lambda cc="gcc", host=True, defines=(): kernels(tmp_path_factory, cc, host, defines)


def printed(source: str, objects: Path, cc: str = "gcc") -> list[str]:
    """The lines a C program prints, linked with the compiled kernels."""
    main = objects / f"case_{len(list(objects.glob('case_*.c')))}.c"
    main.write_text(source)
    exe = main.with_suffix("")
    objs = [str(objects / s.replace(".c", ".o")) for s in SOURCES]
    subprocess.run([cc, "-std=c99", "-O0", "-I", str(objects), "-o", str(exe), str(main), *objs],
                   check=True, capture_output=True, text=True)  # fmt: skip
    return subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()


def run(cases: list[Case], objects: Path, cc: str = "gcc") -> None:
    """Link the cases' program with the compiled kernels and check every output against the
    reference, bit for bit."""
    check(printed(program(cases), objects, cc), [c for c in cases for _ in "12"])


def check(lines: list[str], cases: list[Case]) -> None:
    """Each printed line against its case's reference, bit for bit."""
    assert len(lines) == len(cases)
    for i, (c, line) in enumerate(zip(cases, lines, strict=True)):
        ref = c.reference()
        got = unpack(np.frombuffer(bytes.fromhex(line), np.uint8), ref.size, c.o_fmt)
        bad = np.flatnonzero(got != ref.ravel())
        assert bad.size == 0, (i, c.kind, c.w_fmt, c.a_fmt, bad[:8], got[bad[:8]])


W_FMTS = [QFormat.for_bits(b, True) for b in (1, TERNARY, 2, 3, 4, 5, 6, 7, 8)]
A_FMTS = [QFormat(b, s) for b in range(1, 9) for s in (False, True)] + [
    QFormat(2, False, 1),
    QFormat(4, False, 7),
    QFormat(8, False, 128),
    QFormat(8, False, 3),
]


def test_conv_every_width(build):
    """3x3 convs with padding on an odd 5x7 plane, 5 input and 7 output channels, at every
    weight width against every activation format (signed, unsigned, asymmetric), outputs of
    another width (one program)."""
    cases = [
        case("conv", w_fmt, a, in_c=5, out_c=7, hw=(5, 7), k=(3, 3), pad=(1, 1), seed=i,
             o_fmt=QFormat(1 + i % 8, bool(i % 3)), relu=bool(i % 2))
        for w_fmt in W_FMTS
        for i, a in enumerate(A_FMTS)
    ]  # fmt: skip
    run(cases, build())


def test_linear_every_width(build):
    """Linear layers of 37 inputs and 3 rows, 300 inputs and 1 row, 9 and 6 outputs, at every
    weight width against every activation format (one program)."""
    cases = [
        case("linear", w_fmt, a, in_c=in_c, out_c=out_c, rows=rows, seed=i + in_c)
        for w_fmt in W_FMTS
        for i, a in enumerate(A_FMTS)
        for in_c, out_c, rows in ((37, 9, 3), (300, 6, 1))
    ]
    run(cases, build())


def test_geometry(build):
    """Stride, asymmetric padding, dilation, rectangular kernels, groups, pointwise layers
    (the direct path and its odd tail), depthwise layers with strides and dilation, a
    channel multiplier, layers too wide for one patch block (odd pixel counts), and layers of
    few taps over many pixels (rows of taps; padding wider than the kernel)."""
    w8, a8, a4 = QFormat(8, True), QFormat(8, False), QFormat(4, True)
    w4 = QFormat(4, True)
    geo = [
        dict(in_c=3, out_c=16, hw=(32, 32), k=(3, 3), pad=(1, 1), stride=(2, 2)),
        dict(in_c=16, out_c=13, hw=(9, 11), k=(1, 1)),  # direct, odd pixels and channels
        dict(in_c=32, out_c=8, hw=(7, 5), k=(1, 1), stride=(2, 1)),
        dict(in_c=4, out_c=6, hw=(12, 10), k=(10, 4), pad=(4, 1), stride=(2, 2)),
        dict(in_c=6, out_c=9, hw=(11, 13), k=(3, 3), pad=(2, 2), dil=(2, 2)),
        dict(in_c=6, out_c=9, hw=(11, 13), k=(3, 2), pad=(1, 0), dil=(1, 3)),
        dict(in_c=8, out_c=12, hw=(9, 9), k=(3, 3), pad=(1, 1), groups=4),
        dict(in_c=12, out_c=12, hw=(25, 5), k=(3, 3), pad=(1, 1), groups=12),
        dict(in_c=7, out_c=7, hw=(15, 14), k=(3, 3), pad=(1, 1), stride=(2, 2), groups=7),
        dict(in_c=5, out_c=5, hw=(16, 17), k=(5, 5), pad=(2, 2), stride=(1, 2), groups=5),
        dict(in_c=5, out_c=5, hw=(16, 17), k=(3, 3), pad=(2, 2), dil=(2, 2), groups=5),
        dict(in_c=4, out_c=8, hw=(8, 8), k=(3, 3), pad=(1, 1), groups=4),  # multiplier 2
        # depthwise on wide rows (the plane path; narrow ones go channels-last)
        dict(in_c=3, out_c=3, hw=(6, 41), k=(3, 3), pad=(1, 1), groups=3),
        dict(in_c=3, out_c=3, hw=(9, 61), k=(3, 3), pad=(1, 1), stride=(2, 2), groups=3),
        dict(in_c=2, out_c=2, hw=(7, 50), k=(5, 3), pad=(2, 1), dil=(1, 2), groups=2),
        dict(in_c=21, out_c=21, hw=(7, 7), k=(3, 3), pad=(1, 1), groups=21),  # 2 vectors
        dict(in_c=64, out_c=10, hw=(13, 13), k=(3, 3), pad=(1, 1)),  # 576 taps: small blocks
        # few taps over many pixels: rows of taps, pixels in vector lanes (mico_host_pw)
        dict(in_c=1, out_c=6, hw=(28, 28), k=(5, 5)),
        dict(in_c=2, out_c=5, hw=(20, 23), k=(3, 3), pad=(2, 1), dil=(2, 1)),
        dict(in_c=3, out_c=7, hw=(40, 50), k=(3, 3), pad=(1, 1), stride=(2, 3)),
        dict(in_c=2, out_c=3, hw=(16, 16), k=(3, 3), pad=(3, 3)),
    ]
    cases = [
        case("conv", w, a, seed=i, o_fmt=QFormat(8, True) if i % 2 else None, **g)
        for i, g in enumerate(geo)
        for w, a in ((w8, a8), (w4, a4), (QFormat(2, True), QFormat(2, False, 1)))
    ]
    run(cases, build())


#: pointwise (pixels in vector lanes with int32 or int16 sums, or the GEMM's direct path,
#: channels padded to 16 taps: 24 channels of 36 pixels take the GEMM at 8 bits),
#: depthwise (two channel blocks; wide and narrow rows, stride 2) and a 3x3 conv of 11
#: channels: odd planes whose sub-byte codes start inside a byte, 8 channels unpacked at a
#: time and a remainder
PER_WIDTH_GEOMETRY = [
    dict(in_c=11, out_c=6, hw=(5, 7), k=(1, 1)),
    dict(in_c=24, out_c=9, hw=(6, 6), k=(1, 1)),
    dict(in_c=8, out_c=5, hw=(12, 12), k=(1, 1)),
    dict(in_c=19, out_c=19, hw=(9, 30), k=(3, 3), pad=(1, 1), stride=(2, 2), groups=19),
    dict(in_c=17, out_c=17, hw=(5, 5), k=(3, 3), pad=(1, 1), groups=17),
    dict(in_c=11, out_c=5, hw=(5, 7), k=(3, 3), pad=(1, 1)),
]


def test_pointwise_and_depthwise_every_width(build):
    """The pointwise, depthwise and input-unpacking paths at every weight width against every
    activation format, outputs of other widths (requantization shifts above and below 32; one
    program)."""
    cases = [
        case("conv", w_fmt, a, seed=i + 20 * j, o_fmt=QFormat(1 + (i * 3) % 8, bool(i % 3)),
             relu=bool(i % 2), **PER_WIDTH_GEOMETRY[(i + j) % len(PER_WIDTH_GEOMETRY)])
        for j, w_fmt in enumerate(W_FMTS)
        for i, a in enumerate(A_FMTS)
    ]  # fmt: skip
    run(cases, build())


def test_uneven_padding(build):
    """Bands of patch-based execution: more output rows than the top padding gives on both
    sides, so the rows below the input read as zeros deeper than pad_h (conv, dilated,
    strided, pointwise and depthwise layers)."""
    geo = [
        dict(in_c=5, out_c=7, hw=(6, 9), k=(3, 3), pad=(1, 1), out_rows=7),
        dict(in_c=5, out_c=7, hw=(6, 9), k=(3, 3), pad=(0, 1), out_rows=6),
        dict(in_c=4, out_c=6, hw=(7, 8), k=(3, 3), pad=(1, 1), stride=(2, 2), out_rows=5),
        dict(in_c=4, out_c=6, hw=(7, 8), k=(3, 3), pad=(2, 2), dil=(2, 2), out_rows=9),
        dict(in_c=16, out_c=16, hw=(6, 30), k=(3, 3), pad=(1, 1), groups=16, out_rows=8),
        dict(in_c=9, out_c=9, hw=(5, 5), k=(3, 3), pad=(1, 1), stride=(2, 2), groups=9,
             out_rows=4),
        dict(in_c=3, out_c=4, hw=(16, 20), k=(3, 3), pad=(1, 1), out_rows=18),
    ]  # fmt: skip
    formats = ((QFormat(8, True), QFormat(8, False)), (QFormat(4, True), QFormat(4, True)),
               (QFormat(2, True), QFormat(2, False, 1)))  # fmt: skip
    cases = [case("conv", w, a, seed=i, **g) for i, g in enumerate(geo) for w, a in formats]
    run(cases, build())


def test_scratch_limits(build):
    """Layers whose unpacked input just fits the scratch (2^20 int16: 16 channels of 255 x
    257 pixels) and just does not (256 x 256: the portable kernels, or the depthwise plane
    path): bit-exact on both sides."""
    w, a = QFormat(2, True), QFormat(2, False)
    cases = [
        case("conv", w, a, in_c=16, out_c=4, hw=(255, 257), k=(1, 1), seed=1),
        case("conv", w, a, in_c=16, out_c=4, hw=(256, 256), k=(1, 1), seed=2),
        case("conv", w, a, in_c=16, out_c=16, hw=(256, 256), k=(3, 3), pad=(1, 1), groups=16,
             seed=3),
    ]  # fmt: skip
    run(cases, build())


def test_full_weight_store(build):
    """A weight store too small for every layer (-DMICO_HOST_CACHE=2048 int16): the layers
    after it fills unpack their weights on every call, still bit-exact."""
    w4, a4 = QFormat(4, True), QFormat(4, False)
    geo = [dict(in_c=16, out_c=40, hw=(5, 5), k=(3, 3), pad=(1, 1)),
           dict(in_c=16, out_c=8, hw=(5, 5), k=(1, 1)),
           dict(in_c=32, out_c=32, hw=(4, 4), k=(3, 3), pad=(1, 1), groups=32)]  # fmt: skip
    cases = [case("conv", w4, a4, seed=i, **g) for i, g in enumerate(geo)]
    cases += [case("linear", w4, a4, in_c=300, out_c=9, rows=2, seed=7)]
    run(cases * 2, build(defines=("-DMICO_HOST_CACHE=2048",)))


def test_weights_changed_in_place(build):
    """Weights rewritten in the same buffer between two calls (a weights file loaded again):
    the second call sees the new weights, not the layout the first call stored (a conv, a
    depthwise, a pointwise of int32 and of int16 sums and a linear layer; one program)."""
    w, a = QFormat(4, True), QFormat(8, False)
    geos = [dict(in_c=6, out_c=5, hw=(5, 6), k=(3, 3), pad=(1, 1)),
            dict(in_c=7, out_c=7, hw=(5, 6), k=(3, 3), pad=(1, 1), groups=7),
            dict(in_c=8, out_c=6, hw=(8, 8), k=(1, 1)), dict(in_c=40, out_c=6, rows=2)]  # fmt: skip
    formats = [(w, a), (w, a), (QFormat(8, True), a), (w, a), (w, QFormat(4, False))]
    firsts, seconds = [], []
    for geo, (wf, af) in zip([*geos, geos[2]], formats, strict=True):
        kind = "linear" if "rows" in geo else "conv"
        firsts.append(case(kind, wf, af, seed=1, **geo))
        seconds.append(
            dataclasses.replace(firsts[-1], weight=case(kind, wf, af, seed=2, **geo).weight)
        )
    source = "#include <string.h>\n" + program(firsts)
    for i, second in enumerate(seconds):
        source = source.replace(f"static const uint8_t L{i}_w[]", f"static uint8_t L{i}_w[]")
        call = next(line for line in source.splitlines() if f"(&L{i}_p, L{i}_x, y);" in line)
        head, tail = source.rsplit(call, 1)
        source = f"{head}    memcpy(L{i}_w, L{i}_w2, sizeof L{i}_w);\n{call}{tail}"
        renewed = c_array("uint8_t", f"L{i}_w2", pack(second.weight, second.w_fmt))
        source = source.replace("static uint8_t y[", f"{renewed}\nstatic uint8_t y[")
    check(printed(source, build()), [c for pair in zip(firsts, seconds, strict=True) for c in pair])


def test_wide_depthwise_and_channel_requantization(build):
    """Depthwise layers over CHW planes (rows of 24 outputs or more: stride 1 and 2, odd
    widths, padding 0 to 2, int16 sums at the bound the channel's weights allow and int32 sums
    past it), rows of taps of strided convs from phase-split planes (odd widths), and the
    per-pixel requantization over channels (depthwise layers of <= 64 pixels, pointwise layers
    of <= 16 pixels; 1-pixel planes, channel counts off the vector width, multipliers of
    shifts above and below 32, asymmetric and signed bytes out, extreme codes; one
    program)."""
    w8, a8, s8 = QFormat(8, True), QFormat(8, False), QFormat(8, True)
    u8z, w4, a4 = QFormat(8, False, 128), QFormat(4, True), QFormat(4, False)
    dw = dict(k=(3, 3), pad=(1, 1))
    geo = [
        dict(in_c=5, out_c=5, hw=(8, 48), groups=5, **dw),
        dict(in_c=3, out_c=3, hw=(9, 49), groups=3, stride=(2, 2), **dw),
        dict(in_c=3, out_c=3, hw=(10, 50), groups=3, stride=(2, 2), k=(3, 3)),
        dict(in_c=2, out_c=2, hw=(7, 51), groups=2, stride=(2, 2), k=(3, 3), pad=(2, 2)),
        dict(in_c=3, out_c=16, hw=(33, 35), stride=(2, 2), **dw),  # rows of taps, odd width
        dict(in_c=2, out_c=4, hw=(20, 41), stride=(2, 2), k=(3, 3)),
        dict(in_c=37, out_c=37, hw=(6, 6), groups=37, **dw),  # requantized over channels
        dict(in_c=21, out_c=21, hw=(3, 3), groups=21, **dw),
        dict(in_c=19, out_c=19, hw=(6, 6), groups=19, stride=(2, 2), **dw),
        dict(in_c=17, out_c=17, hw=(1, 1), groups=17, **dw),
        dict(in_c=24, out_c=37, hw=(3, 3)),
        dict(in_c=56, out_c=131, hw=(3, 3)),
        dict(in_c=40, out_c=9, hw=(1, 1)),
        dict(in_c=12, out_c=21, hw=(4, 4)),
    ]
    cases = []
    for i, g in enumerate(geo):
        for j, (w, a, o) in enumerate(((w8, a8, a8), (w8, s8, u8z), (w4, a4, s8))):
            for extreme in (False, True):
                cases.append(case("conv", w, a, seed=10 * i + j, o_fmt=o, relu=bool(j % 2),
                                  extreme=extreme and j < 2, **g))  # fmt: skip
    # 8-bit weights of one sign whose magnitudes sum to 128: int16 sums at their bound (codes
    # of 255 give -32640), and 129: one past it (-32895 needs the int32 sums)
    rng = np.random.default_rng(4)
    for k, extra in enumerate((0, 1)):
        c = case("conv", w8, a8, seed=90 + k, extreme=True, **geo[0])
        weight = np.zeros_like(c.weight)
        for ch in range(weight.shape[0]):
            taps = rng.permutation(9)[:3]
            weight[ch, 0].flat[taps] = [-100 - extra, -20, -8] if ch % 2 else [-127, -1 - extra, 0]
        cases.append(dataclasses.replace(c, weight=weight))
    run(cases, build())


def test_first_nonfinite(build):
    """mico_first_nonfinite (mico_check.c, host build: blocks tested without an exit) returns
    the scalar loop's index for NaN, +inf and -inf at every position of lengths around the
    block size, with a second one after it, and the length when there is none."""
    lengths = (0, 1, 5, 63, 64, 65, 127, 128, 130, 200)
    source = """#include <stdio.h>
#include <string.h>
#include "mico_nn.h"
static float x[256];
int main(void)
{
    static const uint32_t bad[] = { 0x7fc00000u, 0xffc00001u, 0x7f800000u, 0xff800000u,
                                    0x7f800001u };
    static const size_t lengths[] = { LENGTHS };
    size_t a, pos, i;
    int k;
    for (a = 0; a < sizeof lengths / sizeof lengths[0]; a++) {
        for (pos = 0; pos <= lengths[a]; pos++) {
            for (k = 0; k < 5; k++) {
                for (i = 0; i < 256; i++) {
                    x[i] = (float)(i % 60) * 5e36f - 1e38f; /* large finite values */
                }
                x[3] = -0.0f;
                if (pos < lengths[a]) {
                    memcpy(&x[pos], &bad[k], 4);
                }
                if (pos + 2 < lengths[a]) {
                    memcpy(&x[pos + 2], &bad[(k + 1) % 5], 4);
                }
                printf("%zu\\n", mico_first_nonfinite(x, lengths[a]));
            }
        }
    }
    return 0;
}
""".replace("LENGTHS", ", ".join(map(str, lengths)))
    got = [int(v) for v in printed(source, build())]
    want = [pos for n in lengths for pos in range(n + 1) for _ in range(5)]
    assert got == want


EXTREME_FORMATS = [
    (8, QFormat(8, True)), (8, QFormat(8, False)), (8, QFormat(8, False, 200)),
    (4, QFormat(4, False)), (1, QFormat(1, True)), (TERNARY, QFormat(8, False)),
    (2, QFormat(3, True)), (8, QFormat(4, False)), (5, QFormat(8, False)),
]  # fmt: skip


def test_extremes_and_saturation(build):
    """Codes at their limits (the largest products: int16 products in the depthwise loop,
    int16 sums of the pointwise kernel at their bound over chunks of input channels), biases
    near the int32 limits and multipliers that saturate, long reductions (one program)."""
    cases = []
    for w_bits, a_fmt in EXTREME_FORMATS:
        w_fmt = QFormat.for_bits(w_bits, True)
        for seed, extreme in ((1, True), (2, False)):
            for o_fmt, relu in ((QFormat(8, True), False), (QFormat(4, False), True),
                                (QFormat(1, True), False)):  # fmt: skip
                common = dict(seed=seed, extreme=extreme, o_fmt=o_fmt, relu=relu)
                cases += [
                    case("conv", w_fmt, a_fmt, in_c=40, out_c=6, hw=(4, 4), k=(3, 3),
                         pad=(1, 1), **common),
                    case("conv", w_fmt, a_fmt, in_c=9, out_c=9, hw=(6, 6), k=(3, 3),
                         pad=(1, 1), groups=9, **common),
                    case("conv", w_fmt, a_fmt, in_c=300, out_c=5, hw=(4, 8), **common),
                    case("conv", w_fmt, a_fmt, in_c=8, out_c=6, hw=(8, 8), **common),
                    case("conv", w_fmt, a_fmt, in_c=7, out_c=5, hw=(16, 16), k=(3, 3),
                         pad=(1, 1), **common),
                    case("linear", w_fmt, a_fmt, in_c=1000, out_c=5, **common),
                ]  # fmt: skip
    run(cases, build())


def test_clang_and_portable_entry_points(build):
    """clang builds the same kernels; without MICO_HOST_KERNELS (any target but the host)
    the entry points are the portable kernels, also bit-exact."""
    w, a = QFormat(4, True), QFormat(8, False, 5)
    cases = [
        case("conv", w, a, in_c=6, out_c=10, hw=(9, 8), k=(3, 3), pad=(1, 1), stride=(2, 2)),
        case("conv", w, a, in_c=10, out_c=10, hw=(9, 8), k=(3, 3), pad=(1, 1), groups=10),
        case("linear", w, a, in_c=77, out_c=11, rows=2),
        case("conv", w, a, in_c=11, out_c=6, hw=(5, 7), k=(1, 1)),
        case("conv", w, a, in_c=5, out_c=5, hw=(7, 9), k=(3, 3), pad=(1, 1), groups=5,
             out_rows=8),
    ]  # fmt: skip
    run(cases, build(host=False))
    if shutil.which("clang"):
        run(cases, build("clang"), cc="clang")


def test_generation_follows_the_targets():
    """The host alone gives the host kernels' capability; any device target among the
    targets gives what every device has (an rv32 project never takes the host kernels)."""
    assert HOST_EXTENSION in generation_extensions(["host"])
    assert HOST_EXTENSION not in generation_extensions(["host", "rv32"])
    assert HOST_EXTENSION not in generation_extensions(["rv32zbb"])
    assert generation_extensions(["host", "rv32zbb"]) == ("zbb", "zicsr")


@pytest.mark.slow
def test_zoo_model_with_host_kernels(tmp_path):
    """dscnn at W4A4 (static, per-channel) compiled for the host: every conv and linear layer
    calls the host kernels (a conv, depthwise and pointwise layers, the mean, a linear
    layer), and the C outputs equal the reference; the same project built for rv32 (the
    forwarding entry points) too, when qemu is here. (resnet8's adds and strided shortcuts
    are covered by the unit cases; the benchmarks run every peers model at three widths.)"""
    from mico.codegen.compile import compile_model
    from mico.models import from_zoo
    from mico.quant import QuantConfig, calibrate, quantize_model
    from mico.targets import host, rv32

    for name, bits in (("dscnn", "4/4"),):
        torch.manual_seed(0)
        model = from_zoo(name)
        plan = ",".join(f"{layer}={bits}" for layer in model.quantize_layer_names())
        quantize_model(model, plan, QuantConfig(act_mode="static", weight_granularity="channel"))
        shape = tuple(model.default_input_shape)
        x = np.random.default_rng(1).standard_normal((6, *shape)).astype(np.float32)
        model.eval()
        calibrate(model, [torch.from_numpy(x)])
        compiled = compile_model(model, torch.from_numpy(x[:1]), tmp_path / name, "model",
                                 "static", calibration=[torch.from_numpy(x)],
                                 isa_extensions=generation_extensions(["host"]))  # fmt: skip
        source = (tmp_path / name / "model.c").read_text()
        assert HOST_CONV in source and "mico_qconv2d_tiled" not in source
        host.build(compiled.project)
        ref = compiled.reference(x)
        assert np.array_equal(host.run(compiled.project, x), ref)
        if name == "dscnn" and rv32.available():
            rv32.build(compiled.project)
            assert np.array_equal(rv32.run(compiled.project, x[:2]).outputs, ref[:2])


def add_reference(a: np.ndarray, b: np.ndarray, m_a: int, m_b: int, shift: int, fmt: QFormat):
    """clamp(round_half_away((a m_a + b m_b) / 2^shift)) in int64, binary as its sign."""
    v = a.astype(np.int64) * m_a + b.astype(np.int64) * m_b
    r = (np.abs(v) + (1 << (shift - 1))) >> shift
    r = np.where(v < 0, -r, r)
    if fmt.binary:
        return np.where(r >= 0, 1, -1)
    return np.clip(r, fmt.qmin, fmt.qmax)


def test_add(build):
    """mico_add_host on every pair of input formats it meets (widths 1..8, signed, unsigned,
    asymmetric, int32) and several outputs, with multipliers of either sign, shifts from 1 to
    40 and runs longer than one block of the scratch (odd lengths)."""
    rng = np.random.default_rng(5)
    fmts = [QFormat(8, True), QFormat(8, False, 128), QFormat(4, False), QFormat(3, True),
            QFormat(1, True), QFormat(2, False, 1)]  # fmt: skip
    lines = ["#include <stdio.h>", '#include "mico_nn.h"']
    body, refs = [], []
    for i, (fa, fb, fo) in enumerate(zip(fmts, fmts[::-1], fmts[2:] + fmts[:2], strict=True)):
        n = (37, 1001, 40000)[i % 3]
        a, b = codes(rng, fa, (n,), i == 4), codes(rng, fb, (n,), False)
        m_a, m_b = int(rng.integers(-(2**20), 2**20)), int(rng.integers(-(2**20), 2**20))
        shift = int(rng.integers(1, 41)) if i % 2 else 20
        refs.append((add_reference(a, b, m_a, m_b, shift, fo), fo))
        lines += [c_array("uint8_t", f"A{i}", pack(a, fa)),
                  c_array("uint8_t", f"B{i}", pack(b, fb)),
                  f"static const MicoAdd P{i} = {{ .n = {n}, .a_fmt = {c_fmt(fa)}, "
                  f".b_fmt = {c_fmt(fb)}, .fmt = {c_fmt(fo)}, .m_a = {m_a}, .m_b = {m_b}, "
                  f".shift = {shift}, .lo = {fo.qmin}, .hi = {fo.qmax} }};"]  # fmt: skip
        size = (n * fo.bits + 7) // 8
        body.append(f"    mico_add_host(&P{i}, A{i}, B{i}, y);\n"
                    f"    for (i = 0; i < {size}; i++) {{ printf(\"%02x\", y[i]); }}\n"
                    "    printf(\"\\n\");")  # fmt: skip
    lines.append("static uint8_t y[40008];")
    lines.append("int main(void)\n{\n    size_t i;\n" + "\n".join(body) + "\n    return 0;\n}")
    objects = build()
    main = objects / "add_case.c"
    main.write_text("\n".join(lines) + "\n")
    objs = [str(objects / s.replace(".c", ".o")) for s in SOURCES]
    subprocess.run(["gcc", "-std=c99", "-O0", "-I", str(objects), "-o", str(objects / "add_case"),
                    str(main), *objs], check=True, capture_output=True, text=True)  # fmt: skip
    out = subprocess.run([str(objects / "add_case")], check=True, capture_output=True, text=True)
    for line, (ref, fo) in zip(out.stdout.split(), refs, strict=True):
        got = unpack(np.frombuffer(bytes.fromhex(line), np.uint8), ref.size, fo)
        assert np.array_equal(got, ref), (fo, np.flatnonzero(got != ref)[:8])


def test_pooling_and_mean_on_the_host(build):
    """Max and average pooling and the mean (mico_pool.c), whose host builds unpack whole
    planes and runs of codes in vectorised loops: byte for byte what the portable kernels
    (every other target's) store, on random packed inputs of every activation format, planes
    whose sub-byte codes start inside a byte, padding, strides, dilation, windows counted
    with and without the padding, and means longer than one run (one program, built both
    ways; means with one multiplier or one per output)."""
    rng = np.random.default_rng(11)
    pools = [  # channels, (h, w), (k_h, k_w), stride, pad, dilation
        (3, (28, 28), (2, 2), (2, 2), (0, 0), (1, 1)),
        (5, (10, 10), (2, 2), (2, 2), (0, 0), (1, 1)),
        (4, (7, 9), (3, 3), (2, 2), (1, 1), (1, 1)),
        (2, (11, 13), (3, 3), (1, 1), (1, 1), (2, 2)),
        (3, (9, 9), (3, 2), (3, 2), (1, 0), (1, 1)),
        (2, (6, 5), (5, 5), (1, 1), (2, 2), (1, 1)),
    ]
    means = [(64, 125), (3, 5000), (100, 9), (3, 1)]
    lines = ["#include <stdio.h>", '#include "mico_nn.h"']
    body, sizes = [], []

    def out_struct(t: str, fmt: QFormat, n: int) -> str:
        lines.extend([c_array("int32_t", f"{t}m", rng.integers(1 << 20, 1 << 30, size=n)),
                      c_array("int32_t", f"{t}s", rng.integers(20, 40, size=n))])  # fmt: skip
        return (f"{{ .fmt = {c_fmt(fmt)}, .relu = {int(rng.integers(2))}, .n_mult = {n}, "
                f".m = {t}m, .shift = {t}s, .lo = {fmt.qmin}, .hi = {fmt.qmax} }}")  # fmt: skip

    def call(kernel: str, t: str, n_in: int, fmt: QFormat, n_out: int, o_fmt: QFormat) -> None:
        lines.append(
            c_array("uint8_t", f"{t}x", rng.integers(0, 256, size=(n_in * fmt.bits + 7) // 8))
        )
        size = (n_out * o_fmt.bits + 7) // 8
        sizes.append(size)
        body.append(f"    {kernel}(&{t}p, {t}x, y);\n"
                    f"    for (i = 0; i < {size}; i++) {{ printf(\"%02x\", y[i]); }}\n"
                    "    printf(\"\\n\");")  # fmt: skip

    for i, fmt in enumerate(A_FMTS):
        o_fmt = A_FMTS[(i * 7 + 3) % len(A_FMTS)]
        for j, (ch, (h, w), (kh, kw), (sh, sw), (ph, pw), (dh, dw)) in enumerate(pools):
            oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
            ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
            geo = (f".channels = {ch}, .in_h = {h}, .in_w = {w}, .out_h = {oh}, .out_w = {ow}, "
                   f".k_h = {kh}, .k_w = {kw}, .stride_h = {sh}, .stride_w = {sw}, "
                   f".pad_h = {ph}, .pad_w = {pw}")  # fmt: skip
            t = f"M{i}_{j}_"
            lines.append(f"static const MicoMaxPool2d {t}p = {{ {geo}, .dil_h = {dh}, "
                         f".dil_w = {dw}, .fmt = {c_fmt(fmt)} }};")  # fmt: skip
            call("mico_maxpool2d", t, ch * h * w, fmt, ch * oh * ow, fmt)
            if dh == dw == 1:
                t = f"A{i}_{j}_"
                out = out_struct(t, o_fmt, kh * kw)
                lines.append(f"static const MicoAvgPool2d {t}p = {{ {geo}, .count_include_pad = "
                             f"{j % 2}, .in_fmt = {c_fmt(fmt)}, .out = {out} }};")  # fmt: skip
                call("mico_avgpool2d", t, ch * h * w, fmt, ch * oh * ow, o_fmt)
        for j, (outer, count) in enumerate(means):
            t = f"E{i}_{j}_"
            out = out_struct(t, o_fmt, outer if j % 2 else 1)  # per channel, or one multiplier
            lines.append(f"static const MicoMean {t}p = {{ .outer = {outer}, .count = {count}, "
                         f".in_fmt = {c_fmt(fmt)}, .out = {out} }};")  # fmt: skip
            call("mico_mean", t, outer * count, fmt, outer, o_fmt)
    lines.append(f"static uint8_t y[{max(sizes) + 8}];")
    lines.append("int main(void)\n{\n    size_t i;\n" + "\n".join(body) + "\n    return 0;\n}")
    source = "\n".join(lines) + "\n"
    on_host, portable = printed(source, build()), printed(source, build(host=False))
    assert len(on_host) == len(body)
    bad = [i for i, (a, b) in enumerate(zip(on_host, portable, strict=True)) if a != b]
    assert not bad, bad[:8]


def test_input_quantization_on_the_host(build):
    """mico_quantize_f32_exact_b2..b8 and mico_quantize_f32_table_b1..b4, whose host builds
    compute the ranks of a run of inputs in one vectorised loop (the tables: a compare per
    threshold), against mico.quant.exact_input's integer steps and mico.quant.quantize: every
    width, signed, unsigned, asymmetric and binary codes, scales from tiny to huge, inputs at
    zero, tiny, huge and random magnitudes, tensors ending inside a byte and longer than one
    run (one program)."""
    from mico.quant.arithmetic import quantize
    from mico.quant.exact_input import codes_exact, exact_params
    from mico.quant.thresholds import c_table

    rng = np.random.default_rng(3)
    lines = ["#include <stdio.h>", "#include <string.h>", '#include "mico_nn.h"']
    body, refs = [], []
    for i, b in enumerate((2, 3, 4, 5, 6, 7, 8) * 3):
        fmt = QFormat(b, i % 3 == 0, 0 if i % 3 != 2 else (2**b - 1) // 3)
        n = (1, 7, 255, 256, 300, 1001, 13)[i % 7]
        scale = float(10.0 ** rng.uniform(-6, 3))
        p = exact_params(scale, fmt)
        assert p is not None
        x = (rng.standard_normal(n) * scale * 2.0 ** (b - 1)).astype(np.float32)
        x[: min(n, 6)] = np.float32([0.0, -0.0, 1e-40, -3e38, 3e38, scale / 2])[: min(n, 6)]
        refs.append((codes_exact(x, p), fmt))
        fields = ", ".join(f".{k} = {v}{'u' if k in ('m', 'span') else ''}"
                           for k, v in p.c_fields().items())  # fmt: skip
        floats = ", ".join(f"{float(v).hex()}f" for v in x)
        lines += [f"static const float X{i}[] = {{ {floats} }};",
                  f"static const MicoQuantExact Q{i} = {{ {fields} }};",
                  f"static const MicoFmt F{i} = {c_fmt(fmt)};"]  # fmt: skip
        size = (n * b + 7) // 8
        body.append(f"    memset(y, 0xa5, sizeof y);\n"
                    f"    mico_quantize_f32_exact_b{b}(X{i}, y, {n}, &Q{i}, F{i});\n"
                    f"    for (i = 0; i < {size + 1}; i++) {{ printf(\"%02x\", y[i]); }}\n"
                    "    printf(\"\\n\");")  # fmt: skip
    for i, b in enumerate((1, 1, 2, 3, 4, 2, 3, 4) * 2, start=len(refs)):  # the table kernels
        signed = i % 2 == 0
        fmt = QFormat(b, signed, 0 if b == 1 or signed or i % 3 else (2**b - 1) // 2)
        n = (1, 7, 255, 256, 300, 1001, 13)[i % 7]
        scale = float(10.0 ** rng.uniform(-6, 3))
        x = (rng.standard_normal(n) * scale * 2.0 ** (b - 1)).astype(np.float32)
        x[: min(n, 4)] = np.float32([0.0, -0.0, -3e38, scale / 2])[: min(n, 4)]
        refs.append((quantize(torch.from_numpy(x), scale, fmt).numpy().astype(np.int64), fmt))
        floats = ", ".join(f"{float(v).hex()}f" for v in x)
        lines += [f"static const float X{i}[] = {{ {floats} }};",
                  c_array("int32_t", f"T{i}", c_table(scale, fmt)),
                  f"static const MicoFmt F{i} = {c_fmt(fmt)};"]  # fmt: skip
        size = (n * b + 7) // 8
        body.append(f"    memset(y, 0xa5, sizeof y);\n"
                    f"    mico_quantize_f32_table_b{b}(X{i}, y, {n}, T{i}, F{i}, {fmt.qmin});\n"
                    f"    for (i = 0; i < {size + 1}; i++) {{ printf(\"%02x\", y[i]); }}\n"
                    "    printf(\"\\n\");")  # fmt: skip
    lines.append("static uint8_t y[1100];")
    lines.append("int main(void)\n{\n    size_t i;\n" + "\n".join(body) + "\n    return 0;\n}")
    out = printed("\n".join(lines) + "\n", build())
    assert len(out) == len(refs)
    for line, (ref, fmt) in zip(out, refs, strict=True):
        raw = bytes.fromhex(line)
        got = unpack(np.frombuffer(raw, np.uint8), ref.size, fmt)
        assert np.array_equal(got, ref), (fmt, ref.size, np.flatnonzero(got != ref)[:8])
        used = ref.size * fmt.bits % 8  # the bits past the tensor are kept
        last = raw[(ref.size * fmt.bits) // 8]
        assert last >> used == 0xA5 >> used, (fmt, ref.size)
