"""The depthwise pair path's outputs by table and its words of K lanes on long rows
(mico_qconv2d_dwp_f1 / _f2 in mico_dwconv.c) against the Python integer reference, through the
C program of benchmarks/kernels_rv32.py (words of K lanes of rows of 5 outputs take one tile a
buffer row).

Outputs of 5..16 unsigned codes come from a per-channel table of the output code of every lane
value (the generator's levels, mico.codegen.dwconv_plan.dwp_levels); planes of rows of whole
bytes of 2- and 4-bit unsigned codes are read straight into words of 3 lanes of 10 bits or 4
of 8 (stride 1, and stride 2 when the outputs go by table); 4-bit outputs of rows of an even
number of outputs are stored packed from the table, two a byte (4 outputs an iteration at
stride 2). The cases below reach every one of these branches and the per-channel fallbacks
around them: channels whose sums do not fit 3 lanes (pairs), whose span does not fit the
table or whose levels are too far apart for its bytes (the multiply), biases that put every
sum at one level, shifts of 32 or less, asymmetric and 3-bit outputs, odd rows, plane heights
that leave lanes empty, unsigned outputs without a ReLU."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from mico.codegen.dwconv_plan import (
    DWP_K_SPAN,
    DWP_LUT,
    dw_kernel,
    dw_lane_plan,
    dwp_levels,
)
from mico.ir.ops.mico_ops import finish, out_spec
from mico.quant.arithmetic import TERNARY, QFormat
from tests.codegen.dw_sanitized import (
    check_sanitized,
    pair_path_kernels,
    pair_path_plan,
    tight_program,
)
from tests.codegen.test_dwconv_lanes import kernels_rv32

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

A2, A4 = QFormat(2, False), QFormat(4, False)


def _layer(h, w, *, a=A4, o=None, wb=4, c=3, stride=1, pad=1, seed=0, relu=True):
    layer = kernels_rv32.random_layer(
        "conv", QFormat.for_bits(wb, True), a, in_c=c, out_c=c, hw=max(h, w), k=3, pad=pad,
        stride=stride, groups=c, seed=seed, o_fmt=o or a, relu=relu,
    )  # fmt: skip
    layer.x = layer.x[:, :h, :w]
    return layer


def _levels(layer) -> np.ndarray | None:
    spec = out_spec(layer.o_fmt, 1.0, list(layer.m), list(layer.shift))
    return dwp_levels(layer.weight, layer.bias, spec, layer.relu, layer.a_fmt)


def _packed_rows() -> list:
    """Rows of whole bytes: 4- and 2-bit codes, stride 1 and 2, even rows (4-bit outputs
    stored packed; at stride 2 rows of 4k and 4k + 2 outputs), odd output rows (staged),
    heights that fill the lanes' lines or leave some empty, 3 lanes and 4 (small weights),
    outputs of at most 4 codes by thresholds at stride 2."""
    layers = [
        _layer(16, 16, c=4, seed=1),  # W4A4: 3 lanes, packed stores
        _layer(17, 16, c=3, seed=2),  # 17 lines: the last lane's lines partly past the plane
        _layer(11, 8, c=3, pad=0, seed=3),  # no padding: rows of 6 outputs
        _layer(32, 32, c=3, stride=2, seed=4),  # stride 2: 16 outputs a row, 4 an iteration
        _layer(28, 28, c=3, stride=2, seed=5),  # 14 outputs a row: a last pair of outputs
        _layer(18, 18, c=3, stride=2, seed=6),  # 9 outputs a row: staged, not packed
        _layer(16, 16, wb=TERNARY, c=4, seed=7),  # ternary/4: 4 lanes of 8 bits
        _layer(15, 20, wb=TERNARY, c=3, stride=2, seed=8),  # 4 lanes at stride 2
        _layer(16, 16, a=A2, o=A4, wb=4, c=3, seed=9),  # 2-bit codes in, 4-bit out
        _layer(16, 12, a=A2, o=A4, wb=4, c=3, stride=2, seed=10),
        _layer(16, 16, o=QFormat(3, False), c=3, seed=11),  # 3-bit outputs: staged
        _layer(16, 16, o=QFormat(4, False, 2), c=3, relu=False, seed=12),  # asymmetric out
        _layer(16, 16, c=3, relu=False, seed=13),  # unsigned outputs, no ReLU
        _layer(16, 16, o=QFormat(8, False), c=3, seed=14),  # 8-bit outputs: the multiply
        _layer(16, 16, a=A2, o=A2, wb=4, c=3, seed=15),  # 2-bit outputs: thresholds
        # unsigned bytes read four words at a time (mico_dwp_read2): rows of 4k, 4k + 2
        _layer(16, 16, a=QFormat(8, False), c=3, seed=16),
        _layer(31, 30, a=QFormat(8, False), wb=TERNARY, c=3, stride=2, seed=17),
        _layer(9, 18, a=QFormat(8, False), o=A4, c=3, pad=2, seed=18),
    ]
    # rows of 5 outputs (DS-CNN's planes): one tile a buffer row, 3 and 4 lanes, lines that
    # leave a lane's last lines empty; outputs by table, by thresholds (2 bits: 3 and 4
    # lanes), requantized (signed codes in 3 lanes, with and without a ReLU)
    s4 = QFormat(4, True)
    layers += [
        _layer(25, 5, c=4, seed=22),
        _layer(13, 5, wb=TERNARY, c=3, seed=23),
        _layer(25, 5, a=A2, o=QFormat(3, False), wb=4, c=3, seed=24),
        _layer(25, 5, a=A2, o=A2, wb=4, c=3, seed=28),
        _layer(25, 5, o=A2, wb=4, c=3, seed=29),
        _layer(25, 5, a=s4, o=s4, c=3, relu=False, seed=30),
        _layer(16, 5, a=s4, o=A4, c=3, seed=31),
    ]
    # and the pairs' (requantized): 8-bit weights, 8-bit codes, signed outputs without a ReLU,
    # shifts of 32 or less (the sums scaled by 2^k)
    pairs5 = _layer(25, 5, wb=8, c=4, seed=25)
    pairs5.m[1], pairs5.shift[1] = 2**31 - 1, 31
    layers += [
        pairs5,
        _layer(25, 5, a=QFormat(8, False), c=3, seed=26),
        _layer(13, 5, a=QFormat(8, True), o=QFormat(4, True), c=3, relu=False, seed=27),
    ]
    # stride 2, outputs by thresholds: 4 lanes (W2A2), 3 (sums of 7 * 9 * 3), shifts of 32 or
    # less (the sums and weights scaled by 2^k), 1-bit outputs
    thr = _layer(32, 24, a=A2, o=A2, wb=4, c=4, stride=2, seed=19)
    thr.weight[1] = 7
    thr.weight[2] = -7
    thr.m[2], thr.shift[2] = 2**31 - 1, 30
    thr.m[3], thr.shift[3] = 3 * 2**28, 32
    layers += [
        _layer(32, 32, a=A2, o=A2, wb=2, c=3, stride=2, seed=20),
        thr,
        _layer(20, 28, a=A2, o=QFormat(1, False), wb=TERNARY, c=3, stride=2, seed=21),
    ]
    return layers


def _fallbacks() -> list:
    """Per-channel fallbacks inside one layer (8-bit weights' format, 4-bit codes): sums too
    wide for 3 lanes (pairs, with and without the table), a span past the table (the
    multiply), levels too far apart for its bytes (the multiply), biases that put every sum at
    the top or the bottom level, shifts of 32 or less (the table takes the sums unscaled)."""
    layers = []
    for stride, (h, w) in ((1, (16, 16)), (2, (32, 20))):
        layer = _layer(h, w, wb=8, c=9, stride=stride, seed=20 + stride)
        rng = np.random.default_rng(30 + stride)
        layer.weight[:] = rng.integers(-7, 8, size=layer.weight.shape)
        layer.m[:], layer.shift[:] = int(0.02 * 2**36), 36  # a code every 50 lane values
        layer.weight[0] = 7  # 15 * 63 = 945: 3 lanes, the table
        layer.weight[1] = -8  # 15 * 72 = 1080: pairs (the multiply; the table is K lanes')
        layer.weight[2] = np.array([-8, -8, 7, -8, 7, -8, 7, -8, 7]).reshape(1, 3, 3)  # 1020:
        # 3 lanes at their limit
        layer.weight[3] = 7  # a small multiplier: levels 300 lane values apart
        layer.m[3], layer.shift[3] = 2**36 // 300, 36
        layer.bias[4] = 10**6  # every sum at the top level
        layer.bias[5] = -(10**6)  # at the bottom
        layer.m[6], layer.shift[6] = 2**31 - 1, 32  # shift 32
        layer.m[7], layer.shift[7] = 3 * 2**24, 30  # shift 30
        layer.weight[8] = 100  # 15 * 900: past the table, pairs with the multiply
        layers.append(layer)
    return layers


def test_tables_and_packed_rows_bit_exact(monkeypatch):
    """Every case (one C program) equals the reference through the pair path's entry point
    and through the plain kernel."""
    layers = _packed_rows() + _fallbacks()
    assert all(k.startswith("mico_qconv2d_dwp_f") for k in pair_path_kernels(monkeypatch, layers))


def test_levels_table():
    """The generator's table: n + 1 bytes a channel for outputs of 3..16 codes (None for
    fewer or more, after a ReLU from code 0); a channel's t_1 0xffff when its span
    does not fit the kernel's words of K lanes or its levels are more than 255 lane values apart;
    otherwise t_1 and the steps give back, by the kernel's own reading, every code of the
    reference."""
    layer = _fallbacks()[0]
    lvl = _levels(layer)
    n = 15
    assert lvl is not None and lvl.shape == (9 * (n + 1),)
    rows = lvl.reshape(9, n + 1)
    assert list(rows[3, :2]) == [0xFF, 0xFF]  # levels 300 apart
    assert list(rows[8, :2]) == [0xFF, 0xFF]  # span past the table
    assert list(rows[1, :2]) == [0xFF, 0xFF]  # span 1080: past 3 lanes, no words read it
    spec = out_spec(layer.o_fmt, 1.0, list(layer.m), list(layer.shift))
    w = layer.weight.reshape(9, -1)
    neg, pos = np.where(w < 0, w, 0).sum(1), np.where(w > 0, w, 0).sum(1)
    for c in (0, 2, 4, 5, 6, 7):
        span = 15 * int(pos[c] - neg[c])
        assert span <= DWP_K_SPAN < DWP_LUT
        t = np.cumsum([int(rows[c, 0]) | int(rows[c, 1]) << 8, *rows[c, 2:]])
        v = np.arange(span + 1)
        codes = (v[:, None] >= t[None, :]).sum(axis=1)  # the kernel's table, code by code
        acc = layer.bias[c] + 15 * neg[c] + v
        one = dict(spec, m=[int(layer.m[c])], shift=[int(layer.shift[c])])
        ref = np.asarray(finish(acc[None, :], one, layer.relu, axis=0).numpy())[0]
        assert np.array_equal(codes, ref), c
    # 4 codes: a table too (words of K lanes at stride 1 take it; the others count thresholds)
    assert _levels(_layer(8, 8, a=A2, o=A2, wb=2)) is not None
    assert _levels(_layer(8, 8, o=QFormat(2, True), relu=True)) is None  # signed, a ReLU: 0, 1
    # signed codes without a ReLU: their table (test_dw_signed.py)
    assert _levels(_layer(8, 8, o=QFormat(4, True), relu=False)) is not None
    assert _levels(_layer(8, 8, o=QFormat(8, False))) is None  # 256 codes
    assert _levels(_layer(8, 8, a=QFormat(8, False), o=A4)) is None  # 8-bit codes: no K lanes
    assert _levels(_layer(8, 8, wb=8, o=A4)) is None  # 8-bit weights: no channel fits


def test_plan_takes_pairs_for_narrow_weights():
    """8-bit codes with weights of 4 bits or ternary take the pairs (two outputs a multiply)
    where their estimate is below the byte path's (unsigned codes read four words at a time);
    W8A8 and signed codes at stride 2 keep the bytes; W4A4 takes the pairs at both strides."""
    rng = np.random.default_rng(1)
    a8 = QFormat(8, False)
    w4 = rng.integers(-8, 8, size=(8, 1, 3, 3))
    w8 = rng.integers(-128, 128, size=(8, 1, 3, 3))

    def kernel(w, a, o, in_hw, out_hw, s=1):
        return dw_kernel(dw_lane_plan(w, a, in_hw, out_hw, (s, s), (1, 1), (1, 1), o))

    assert kernel(w4, a8, a8, (16, 16), (16, 16)) == "mico_qconv2d_dwp_f1"
    assert kernel(w4, a8, a8, (25, 5), (25, 5)) == "mico_qconv2d_dwp_f1"
    assert kernel(w4, a8, a8, (32, 32), (16, 16), 2) == "mico_qconv2d_dwp_f2"
    assert kernel(w4, QFormat(8, True), a8, (32, 32), (16, 16), 2) == "mico_qconv2d_dw8_f2"
    assert kernel(w8, a8, a8, (16, 16), (16, 16)) == "mico_qconv2d_dw8_f1"
    assert kernel(w4, A4, A4, (16, 16), (16, 16)) == "mico_qconv2d_dwp_f1"
    assert kernel(w4, A4, A4, (32, 32), (16, 16), 2) == "mico_qconv2d_dwp_f2"


def test_packed_stores_sanitized(monkeypatch):
    """ASan + UBSan on 4-bit outputs stored packed that end exactly at the end of their
    buffer, at stride 1 and 2, with the table's fallbacks."""
    layers = [_layer(16, 16, c=2, seed=40), _layer(28, 28, c=2, stride=2, seed=41),
              _fallbacks()[1]]  # fmt: skip
    monkeypatch.setattr(kernels_rv32, "dw_lane_plan", pair_path_plan)
    program = tight_program(layers)
    check_sanitized(program, layers, "-O1")
