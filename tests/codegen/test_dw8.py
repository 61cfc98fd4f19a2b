"""Depthwise 3x3 on bytes (mico_qconv2d_dw8_f1 / _f2 in mico_dwconv.c, chosen by
mico.codegen.dwconv_plan.dw8_plan; the kernel cases take it wherever it applies) against the
Python integer reference, through the C program of benchmarks/kernels_rv32.py (one program for
many layers): plane widths 1-8 and tall or wide planes (both buffer orientations, lone outputs
at row ends), odd channel counts, strides 1 and 2 (also unequal), padding 0-2, signed
activations, code extremes with saturating multipliers, signed outputs without ReLU, the
layers it hands to the pixel lanes (dscnn W8A8 end to end: tests/codegen/test_w8a8_kernels.py)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from mico.codegen.dwconv_plan import dw8_plan, dw_kernel, dw_lane_plan
from mico.quant.arithmetic import QFormat
from tests.codegen.test_dwconv_lanes import kernels_rv32

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def _layer(h, w, *, c=3, stride=1, pad=1, signed=False, seed=0, extreme=False, o_fmt=None,
           relu=True, w_bits=8):  # fmt: skip
    layer = kernels_rv32.random_layer(
        "conv", QFormat.for_bits(w_bits, True), QFormat.for_bits(8, signed), in_c=c, out_c=c,
        hw=max(h, w), k=3, pad=pad, stride=stride, groups=c, seed=seed, extreme=extreme,
        o_fmt=o_fmt, relu=relu,
    )  # fmt: skip
    layer.x = layer.x[:, :h, :w]
    return layer


def _check(layers) -> list[str]:
    chosen = []
    for layer, results in zip(layers, kernels_rv32.run_layers(layers), strict=True):
        ref = layer.reference().ravel()
        for kernel, _, out in results:
            assert np.array_equal(out, ref), (kernel, layer.x.shape, np.flatnonzero(out != ref)[:8])
        chosen.append(results[0][0])
    return chosen


def _grid() -> list:
    """Widths 1-8, tall and wide planes, odd channel counts, stride 1 / 2, padding 0-2,
    unsigned and signed codes, 4-bit weights."""
    layers = []
    geometry = [(h, w) for h in (1, 3, 5, 9) for w in range(1, 9)] + [
        (25, 5),
        (5, 25),
        (16, 16),
        (47, 3),
        (2, 61),
    ]
    for i, (h, w) in enumerate(geometry):
        stride, pad = (1, 1) if i % 3 else (2, i % 2)
        if h + 2 * pad < 3 or w + 2 * pad < 3:
            pad = 1
        if i % 7 == 3:
            pad = 2
        layers.append(_layer(h, w, c=1 + 2 * (i % 3), stride=stride, pad=pad,
                             signed=i % 4 == 1, seed=i, w_bits=4 if i % 5 == 4 else 8))  # fmt: skip
    return layers


def _extremes() -> list:
    """Codes at their limits, saturating multipliers, biases near the int32 limits without
    ReLU; signed 8-bit outputs (the general requantization form)."""
    return [
        _layer(7, 13, extreme=True, relu=False, o_fmt=QFormat(8, True), seed=1),
        _layer(6, 9, stride=2, extreme=True, o_fmt=QFormat(8, True), seed=2),
        _layer(11, 4, signed=True, extreme=True, seed=3),
        _layer(5, 5, relu=False, o_fmt=QFormat(8, True), seed=4),
        _layer(5, 6, signed=True, relu=False, o_fmt=QFormat(8, True), seed=5),
    ]


def _small_shifts() -> list:
    """Shifts of 32 or less (the byte path rescales the sums by 2^k, k <= 3, for shift 33):
    ternary and 2-bit weights as the generator gives them, every shift from 26 to 32 with
    multipliers up to 2^31 - 1 (some channels beyond the rescaling: one output at a time),
    biases at the rescaling's limit 2^26 and past it, signed outputs without ReLU, signed
    codes, stride 2, code extremes."""
    layers = []
    for i, (w_bits, signed, stride, relu) in enumerate(
        [(2, False, 1, True), (2, True, 2, True), (4, False, 1, False), (8, True, 1, False),
         (1, False, 2, True), (2, False, 1, True)]
    ):  # fmt: skip
        layer = _layer(7 + i, 5 + 2 * i, c=9, stride=stride, signed=signed, seed=40 + i,
                       relu=relu, w_bits=w_bits, extreme=i == 5,
                       o_fmt=None if relu else QFormat(8, True))  # fmt: skip
        rng = np.random.default_rng(60 + i)
        layer.shift = np.array([26, 27, 28, 29, 30, 31, 32, 32, 31])
        layer.m = rng.integers(2**20, 2**31, size=9)
        layer.m[0], layer.m[6] = 2**31 - 1, 2**30  # 2^31 - 1 at shift 26: past the rescaling
        layer.bias[1], layer.bias[2] = 2**26 - 1, -(2**26)  # at the limit, past it
        layer.bias[3] = -(2**26) + 1
        if i == 5:  # no multiplier rescaling the sums into range: saturation both ways
            layer.m[:] = 2**31 - 1
            layer.bias = np.array([0, 1, -1, 2**20, -(2**20), 5, -5, 0, 0])
        layers.append(layer)
    ternary = kernels_rv32._plan_layer(
        dict(kind="conv", in_c=8, out_c=8, hw=(25, 5), k=3, pad=1, groups=8),
        ("ternary/8", kernels_rv32.TERNARY, 8, False),
    )
    return [*layers, ternary]


def _others() -> list:
    """What the byte path does not take: a plane wider than its buffer, sub-byte outputs."""
    wide = _layer(3, 100, seed=6)
    four = _layer(6, 6, seed=8, o_fmt=QFormat(4, False))
    return [wide, four]


def _byte_first(weight, a_fmt, in_hw, out_hw, stride, padding, dilation, out_fmt=None):
    """The byte path wherever it applies (narrower weights' layers may take the pair path by
    estimate: tests/codegen/test_dw_lut.py), else the plan's choice."""
    byte = dw8_plan(a_fmt, out_fmt, in_hw, out_hw, stride, padding, dilation)
    if byte is not None and np.asarray(weight).shape[1:] == (1, 3, 3):
        return byte
    return dw_lane_plan(weight, a_fmt, in_hw, out_hw, stride, padding, dilation, out_fmt)


def test_byte_path_bit_exact(monkeypatch):
    """Every layer of the groups above (one C program) equals the reference on the chosen and
    the plain path; the byte path is chosen where it applies, and not elsewhere."""
    monkeypatch.setattr(kernels_rv32, "dw_lane_plan", _byte_first)
    grid, extremes, small, others = _grid(), _extremes(), _small_shifts(), _others()
    assert min(int(s) for layer in small for s in layer.shift) <= 26
    chosen = _check(grid + extremes + small + others)
    assert all(k.startswith("mico_qconv2d_dw8_f") for k in chosen[: -len(others)]), chosen
    assert [k.startswith("mico_qconv2d_dw8") for k in chosen[-2:]] == [False, False]


def test_plan_mirrors_the_kernel():
    """The plan names the entry point of the stride along the buffer rows (the transposed
    orientation for tall planes), and declines what the kernel declines."""
    a8, o8 = QFormat(8, False), QFormat(8, False)
    assert dw8_plan(a8, o8, (25, 5), (25, 5), (1, 1), (1, 1), (1, 1)) == {"s": 0, "q": 0, "sf": 1}
    assert dw8_plan(a8, o8, (32, 32), (16, 16), (2, 2), (1, 1), (1, 1))["sf"] == 2
    tall = dw8_plan(a8, o8, (40, 6), (20, 6), (2, 1), (1, 1), (1, 1))  # rows of 20 at stride 2
    assert tall is not None and tall["sf"] == 2
    assert dw8_plan(a8, QFormat(4, False), (8, 8), (8, 8), (1, 1), (1, 1), (1, 1)) is None
    assert dw8_plan(QFormat(4, False), o8, (8, 8), (8, 8), (1, 1), (1, 1), (1, 1)) is None
    assert dw8_plan(a8, o8, (8, 8), (8, 8), (1, 1), (2, 2), (2, 2)) is None  # dilation
    assert dw8_plan(a8, o8, (3, 100), (3, 100), (1, 1), (1, 1), (1, 1)) is None
    # 8-bit weights: sums too wide for the pairs' 16-bit lanes, bytes
    rng = np.random.default_rng(0)
    w8 = rng.integers(-128, 128, size=(4, 1, 3, 3))
    plan = dw_lane_plan(w8, a8, (16, 16), (16, 16), (1, 1), (1, 1), (1, 1), o8)
    assert plan is not None and dw_kernel(plan) == "mico_qconv2d_dw8_f1"
    # narrower weights with 8-bit codes: the pairs (two outputs a multiply) where their
    # estimate is below the bytes'
    w = np.ones((4, 1, 3, 3), dtype=np.int64)
    plan = dw_lane_plan(w, a8, (16, 16), (16, 16), (1, 1), (1, 1), (1, 1), o8)
    assert plan is not None and dw_kernel(plan) == "mico_qconv2d_dwp_f1"
    ternary = rng.integers(-1, 2, size=(4, 1, 3, 3))
    plan = dw_lane_plan(ternary, a8, (25, 5), (25, 5), (1, 1), (1, 1), (1, 1), o8)
    assert plan is not None and dw_kernel(plan) == "mico_qconv2d_dwp_f1"
    plan = dw_lane_plan(ternary, a8, (32, 32), (16, 16), (2, 2), (1, 1), (1, 1), o8)
    assert plan is not None and dw_kernel(plan) == "mico_qconv2d_dwp_f2"
