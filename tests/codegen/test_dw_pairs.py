"""Depthwise 3x3 on pairs of output lines (mico_qconv2d_dwp_f1 / _f2 in mico_dwconv.c, chosen
by mico.codegen.dwconv_plan.dwp_plan) against the Python integer reference, through the C
program of benchmarks/kernels_rv32.py (one host program for all the kernel cases).

The kernel cases call the pair path whatever the plan would choose (the plan is tested on its
own below), so that every branch of the kernel meets the reference: activation widths 1..8 in
and out, signed, unsigned and asymmetric; weight widths 1..8 and ternary; stride 1 and 2,
padding 0..2; odd, tall and wide planes (both buffer orientations), rows short enough to be
unpacked at once and long enough to be read straight into the lanes; multipliers whose shift
is 32 or less (sums scaled by 2^k) and scales too large for that; codes at their limits,
saturating multipliers and biases near the int32 limits; lane sums wider than 16 bits (the
kernel's per-channel guard); planes too large for the buffer (the kernel's fallback)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from mico.codegen.dwconv_plan import dw_kernel, dw_lane_plan, dwp_plan, pair_span
from mico.quant.arithmetic import TERNARY, QFormat
from tests.codegen.dw_sanitized import check_sanitized, tight_program
from tests.codegen.test_dwconv_lanes import kernels_rv32

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


A4 = QFormat(4, False)


def _layer(h, w, *, a=A4, o=None, wb=4, c=3, stride=1, pad=1, seed=0, extreme=False, relu=True):
    layer = kernels_rv32.random_layer(
        "conv", QFormat.for_bits(wb, True), a, in_c=c, out_c=c, hw=max(h, w), k=3, pad=pad,
        stride=stride, groups=c, seed=seed, extreme=extreme, o_fmt=o or a, relu=relu,
    )  # fmt: skip
    layer.x = layer.x[:, :h, :w]
    return layer


def _widths() -> list:
    """Every activation width in and out, signed and unsigned, with weights of 1..8 bits and
    ternary, over odd planes of short and long rows, stride 1 and 2, padding 0..2."""
    layers = []
    geometry = [(5, 5), (25, 5), (5, 25), (9, 11), (16, 16), (13, 20), (3, 47), (47, 3)]
    weights = [2, 3, 4, 5, 6, 7, 8, TERNARY, 1]
    i = 0
    for bits in range(1, 9):
        for signed in (False, True):
            if signed and bits == 1:
                continue  # binary {-1, +1} activations: not this path
            for out_bits in (bits, 9 - bits):
                h, w = geometry[i % len(geometry)]
                stride, pad = (2, i % 3) if i % 4 == 3 else (1, 1 if i % 5 else 0)
                out = QFormat(out_bits, signed and out_bits > 1)
                a = QFormat(bits, signed)
                wb, c = weights[i % len(weights)], 1 + i % 3
                layers.append(_layer(h, w, a=a, o=out, wb=wb, c=c, stride=stride, pad=pad,
                                     seed=i, relu=not out.signed))  # fmt: skip
                i += 1
    return layers


def _edges() -> list:
    """Asymmetric codes, scales and biases at their limits, shifts of 32 or less, lane sums
    wider than 16 bits, planes larger than the buffer."""
    asym = [
        _layer(7, 9, a=QFormat(4, False, 3), o=QFormat(4, False, 5), relu=False, seed=40),
        _layer(
            16, 16, a=QFormat(8, False, 100), o=QFormat(8, False, 20), wb=3, relu=False, seed=41
        ),
        _layer(6, 10, a=QFormat(2, False, 1), o=QFormat(3, False, 2), stride=2, seed=42),
    ]
    extreme = [
        _layer(7, 13, a=QFormat(4, True), o=QFormat(4, True), extreme=True, relu=False, seed=43),
        _layer(9, 6, a=QFormat(2, False), stride=2, extreme=True, seed=44),
        _layer(11, 4, a=QFormat(8, True), o=QFormat(8, False), wb=2, extreme=True, seed=45),
    ]
    small_shift = []
    for seed, scale in ((46, 0.3), (47, 0.9), (48, 3.5), (49, 40.0)):
        layer = _layer(8, 8, a=QFormat(2, False), o=QFormat(2, False), wb=2, seed=seed)
        layer.shift = np.full_like(layer.shift, 20)
        layer.m = np.full_like(layer.m, int(scale * 2**20))
        small_shift.append(layer)  # k = 0, 1, 3, 7
    # multipliers above 4 (narrow weights and codes into 8-bit outputs, as DS-CNN's mixed
    # plan has): sums scaled by 2^4 and more, with biases each side of the bound that keeps
    # the scaled accumulator inside int32 (0x7ffe0000 >> k), and 4-bit codes whose scaled
    # sums no longer fit 16 bits (one output at a time)
    for seed, scale, bias in (
        (54, 5.6, 0x7FFE000 - 1),
        (55, 5.6, -0x7FFE000),
        (56, 300.0, 0),
        (57, 5.6, 0x1FFF0000),
    ):
        layer = _layer(25, 5, a=A4, o=QFormat(8, False), wb=2, c=3, seed=seed)
        layer.shift = np.full_like(layer.shift, 20)
        layer.m = np.full_like(layer.m, int(scale * 2**20))
        layer.bias[0] = bias
        small_shift.append(layer)
    wide = _layer(10, 12, a=QFormat(8, False), wb=8, extreme=True, seed=50)
    too_big = [
        _layer(40, 40, seed=51),  # rows longer than the pitch
        _layer(40, 40, a=QFormat(4, False, 2), o=QFormat(4, False, 1), relu=False, seed=52),
        _layer(30, 40, a=QFormat(2, False), o=QFormat(2, False), stride=2, seed=53),
    ]
    return asym + extreme + small_shift + [wide] + too_big


def _lanes() -> list:
    """Several lanes a word (planes of short rows, stride 1, codes whose padding is 0): 5 lanes
    of 6 bits (planes of at most 5 columns), 4 of 8, 3 of 10 and pairs, chosen per channel by
    the span of its sums, in one layer (each layout before and after the others); padding
    0..2, both orientations, outputs of 2, 4 and 8 bits with and without a ReLU, shifts of 32
    or less (sums scaled by 2^k), 1-bit codes."""
    a2, o4s = QFormat(2, False), QFormat(4, True)
    layers = [
        _layer(25, 5, a=a2, o=a2, wb=2, c=6, seed=80),
        _layer(25, 5, wb=4, c=5, seed=81),
        _layer(25, 5, o=QFormat(8, False), wb=4, c=3, seed=82),
        _layer(9, 7, a=a2, o=A4, wb=4, c=3, pad=0, seed=83),
        _layer(7, 6, wb=2, c=3, pad=2, seed=84),
        _layer(30, 4, a=a2, o=a2, wb=2, c=4, seed=85),  # buffer rows along the plane's rows
        _layer(13, 5, o=o4s, wb=4, c=3, relu=False, seed=86),
        _layer(11, 3, a=QFormat(1, False), o=QFormat(1, False), wb=1, c=3, seed=87),
        _layer(12, 5, a=QFormat(3, False), o=QFormat(3, False), wb=3, c=3, seed=88),
    ]
    # 8-bit codes: 5 lanes for weights all 0, 4 for |w| summing to 1, 3 up to 4, pairs above;
    # one layer: 5, 4, pairs, 5, 3, pairs, 4, 3 lanes
    mixed = _layer(25, 5, a=QFormat(8, False), o=A4, wb=4, c=8, seed=89)
    taps = {0: [], 1: [1], 3: [], 4: [1, -1, 1, 1], 6: [-1], 7: [1, -1, 1]}
    for ch, ws in taps.items():
        mixed.weight[ch] = 0
        mixed.weight[ch, 0].flat[: len(ws)] = ws
    five = [  # 5 lanes of 6 bits: planes of at most 5 columns
        _layer(7, 5, a=a2, o=a2, wb=2, c=3, pad=0, seed=92),
        _layer(9, 3, a=a2, o=a2, wb=2, c=3, pad=2, seed=93),
        _layer(13, 5, a=a2, o=QFormat(2, True), wb=2, c=3, relu=False, seed=94),
        _layer(20, 5, a=QFormat(1, False), o=A4, wb=4, c=4, seed=95),
    ]
    small_shift = []
    for seed, scale in ((90, 0.3), (91, 3.5)):
        layer = _layer(12, 5, a=a2, o=a2, wb=2, seed=seed)
        layer.shift = np.full_like(layer.shift, 20)
        layer.m = np.full_like(layer.m, int(scale * 2**20))
        small_shift.append(layer)
    return [*layers, mixed, *five, *small_shift]


def _levels() -> list:
    """Outputs of at most 4 codes by thresholds (the plane functions _2, every lane of a word
    at once): 1- and 2-bit outputs, an asymmetric one with a level fewer (hi = 2), biases that
    put every sum above the first level or below every level, multipliers whose rounding ties
    fall on exact sums (r / 8 + 1/2, r / 4 + 1/2), shifts of 32 or less (sums scaled by 2^k),
    in words of 5, 4 and 3 lanes, pairs at stride 1 (long rows) and 2; signed codes in words
    of 3 lanes (their padding u_pad = h) and pairs, one layer switching between them."""
    a2, a4 = QFormat(2, False), QFormat(4, False)
    layers = [
        _layer(25, 5, a=a2, o=a2, wb=2, c=6, seed=100),  # 5 lanes
        _layer(25, 5, a=a2, o=QFormat(1, False), wb=4, c=4, seed=101),  # 4 lanes
        _layer(19, 6, a=a4, o=a2, wb=3, c=4, seed=102),  # 3 lanes
        _layer(12, 12, a=a2, o=a2, wb=2, c=4, seed=103),  # pairs, rows read straight
        _layer(17, 14, a=a2, o=a2, wb=4, c=4, stride=2, seed=104),  # pairs, stride 2
        _layer(25, 5, a=a2, o=QFormat(2, False, 1), wb=2, c=4, seed=105),  # hi = 2
    ]
    for i, layer in enumerate(layers):
        c = len(layer.bias)
        layer.bias[0] = 10**6  # every sum at the top level
        layer.bias[1] = -(10**6)  # below every level
        layer.shift[2:] = 33
        layer.m[2:] = [2**30, 2**31 - 2**30 // 2 * (i % 2)][: c - 2] + [2**31] * (c - 4)
        layer.m[2], layer.shift[2] = 2**30, 33  # r / 8, ties at r = 4 (mod 8)
        if c > 3:
            layer.m[3], layer.shift[3] = 2**31 - 1, 32  # shift 32: the sums scaled by 2^k
    signed = [QFormat(4, True), QFormat(2, True), QFormat(3, True)]
    for j, a in enumerate(signed):
        o = QFormat(4, True) if j != 1 else QFormat(2, False)
        layers.append(_layer(25, 5, a=a, o=o, wb=4 if j != 1 else 2, c=5, seed=110 + j,
                             relu=not o.signed))  # fmt: skip
    # signed 4-bit codes: 3 lanes (span 15 sum |w| <= 1023; 4 lanes are for unsigned codes),
    # pairs (sums scaled by 2^2 for shift 30: 15 * 18 * 4 > 1023): 3, 3, pairs, 3, 3, pairs, 3
    mixed = _layer(25, 5, a=QFormat(4, True), o=QFormat(4, True), wb=4, c=7, seed=113,
                   relu=False)  # fmt: skip
    for ch, fill in enumerate([1, 3, 2, 1, -7, 2, 1]):
        mixed.weight[ch] = fill
        if fill == 2:
            mixed.shift[ch], mixed.m[ch] = 30, 2**31 - 1 - ch
    layers.append(mixed)
    # 2-bit codes, 5 lanes built from the packed codes, the plane unpacked only for the
    # channels of 4, 3 lanes (sums scaled by 2^1) or pairs (by 2^3): 5, 4, 3, pairs, 5, 4
    packed = _layer(25, 5, a=a2, o=a2, wb=4, c=6, seed=114)
    for ch, (fill, shift) in enumerate([(1, 0), (7, 0), (7, 31), (7, 29), (1, 0), (7, 0)]):
        packed.weight[ch] = fill
        if shift:
            packed.shift[ch], packed.m[ch] = shift, 2**31 - 1
    layers.append(packed)
    return layers


def _read2() -> list:
    """Rows of whole bytes read for both lanes at once (mico_dwp_read2): 1-, 2-, 4- and 8-bit
    codes, unsigned, signed and asymmetric (the padding lane's byte), stride 1 and 2, padding
    0..2 (buffer rows with one lane's line or none); every layer takes that read (its plane
    not transposed)."""
    u2, u4z = QFormat(2, False), QFormat(4, False, 3)
    return [
        _layer(16, 16, a=QFormat(1, False), o=QFormat(1, False), wb=2, c=2, pad=2, seed=120),
        _layer(16, 16, a=QFormat(2, True), o=QFormat(2, True), wb=3, c=2, relu=False, seed=121),
        _layer(31, 32, a=u4z, o=QFormat(4, False, 5), stride=2, c=2, relu=False, seed=122),
        _layer(24, 17, a=QFormat(8, False, 100), o=u2, wb=2, c=2, pad=0, seed=123),
        _layer(33, 32, a=u2, o=u2, wb=2, stride=2, pad=0, c=3, seed=124),
        _layer(16, 16, a=QFormat(4, True), o=QFormat(4, True), c=2, relu=False, seed=125),
    ]


def _forced(weight, a_fmt, in_hw, out_hw, stride, padding, dilation, out_fmt=None):
    """The pair path's entry point of the layer's stride, whatever the plan would choose."""
    return {"s": 0, "q": 0, "sf": int(stride[1]), "pair": 1}


def test_pair_path_bit_exact(monkeypatch):
    """Every case (one C program) equals the reference through the pair path's entry point
    and through the plain kernel."""
    layers = _widths() + _edges() + _lanes()
    assert pair_span(layers[-20].weight, layers[-20].a_fmt) > 0xFFFF  # the guard's case
    layers += _levels() + _read2()
    monkeypatch.setattr(kernels_rv32, "dw_lane_plan", _forced)
    for layer, results in zip(layers, kernels_rv32.run_layers(layers), strict=True):
        ref = layer.reference().ravel()
        for kernel, _, out in results:
            case = (kernel, layer.a_fmt, layer.o_fmt, layer.w_fmt, layer.x.shape, layer.stride)
            assert np.array_equal(out, ref), (case, layer.pad, np.flatnonzero(out != ref)[:8])
        assert results[0][0].startswith("mico_qconv2d_dwp_f")


def test_pair_path_sanitized(monkeypatch):
    """ASan + UBSan on outputs that end exactly at the end of their buffer (1-, 2-, 4-bit codes
    filling whole bytes, the packing's last call writing no code), and on every width's reads."""
    layers = [
        _layer(5, 5, a=QFormat(b, False), o=QFormat(b, False), wb=2, c=32 // b, seed=60 + b)
        for b in (1, 2, 4)
    ] + [_layer(5, 5, a=QFormat(b, True), o=QFormat(b, True), c=3, relu=False, seed=70 + b)
         for b in (3, 5, 8)]  # fmt: skip
    monkeypatch.setattr(kernels_rv32, "dw_lane_plan", _forced)
    program = tight_program(layers)
    check_sanitized(program, layers, "-O0")


def _plan(weight_bits, a_fmt, o_fmt, in_hw, out_hw, stride=1, pad=1, weight=None):
    rng = np.random.default_rng(0)
    if weight is None:
        w_fmt = QFormat.for_bits(weight_bits, True)
        weight = rng.integers(w_fmt.qmin, w_fmt.qmax + 1, size=(8, 1, 3, 3))
    return dw_lane_plan(weight, a_fmt, in_hw, out_hw, (stride,) * 2, (pad,) * 2, (1, 1), o_fmt)


def test_plan_picks_the_pair_path():
    """Sub-byte layers take the pair path where its estimate is the lowest (DS-CNN's 25 x 5
    planes at the sub-byte widths other than W2A2 and 4-bit codes in and out, which take
    mico_qconv2d_dw4 / _dw4s, 16 x 16 and stride-2 32 x 32 planes at W4A4
    and at W2A2 without padding, 3-bit weights on 2-bit codes at stride 2 (words of 4 lanes),
    asymmetric codes), W8A8 layers the byte path; W2A2 at padding 1 the bit-sliced path; lane
    sums wider than 16 bits, planes wider than the buffer and dilation are declined."""
    a4, a2, a8 = QFormat(4, False), QFormat(2, False), QFormat(8, False)
    assert dw_kernel(_plan(4, a4, a4, (25, 5), (25, 5))) == "mico_qconv2d_dw4"
    assert dw_kernel(_plan(2, a2, a2, (25, 5), (25, 5))) == "mico_qconv2d_dwbs_s1"
    assert dw_kernel(_plan(4, a4, a4, (16, 16), (16, 16))) == "mico_qconv2d_dwp_f1"
    assert dw_kernel(_plan(4, a4, a4, (32, 32), (16, 16), stride=2)) == "mico_qconv2d_dwp_f2"
    assert dw_kernel(_plan(2, a2, a2, (16, 16), (16, 16))) == "mico_qconv2d_dwbs_s1"
    assert dw_kernel(_plan(2, a2, a2, (16, 16), (14, 14), pad=0)) == "mico_qconv2d_dwp_f1"
    assert dw_kernel(_plan(8, a8, a8, (25, 5), (25, 5))) == "mico_qconv2d_dw8_f1"
    # the paths inside the pair kernel: signed codes (words of 3 lanes), 2-bit outputs by
    # thresholds, rows of whole bytes read for both lanes at stride 2
    s4 = QFormat(4, True)
    assert dw_kernel(_plan(4, s4, s4, (25, 5), (25, 5))) == "mico_qconv2d_dw4s"
    assert dw_kernel(_plan(4, s4, s4, (16, 16), (16, 16))) == "mico_qconv2d_dwp_f1"
    assert dw_kernel(_plan(4, a4, a2, (25, 5), (25, 5))) == "mico_qconv2d_dwp_f1"
    assert dw_kernel(_plan(3, a2, a2, (32, 32), (16, 16), stride=2)) == "mico_qconv2d_dwp_f2"
    assert dw_kernel(_plan(2, a2, a2, (32, 32), (16, 16), stride=2)) == "mico_qconv2d_dwbs_s2"
    assert dw_kernel(_plan(2, a2, a2, (32, 32), (15, 15), stride=2, pad=0)) == "mico_qconv2d_dwp_f2"
    assert dw_kernel(_plan(8, a4, a4, (25, 5), (25, 5))) == "mico_qconv2d_dwp_f1"
    asym = QFormat(4, False, 3)
    assert dw_kernel(_plan(4, asym, asym, (8, 8), (8, 8))) == "mico_qconv2d_dwp_f1"
    wide = np.full((2, 1, 3, 3), 127)  # 255 * 9 * 127 > 65535: the lanes would overflow
    assert dwp_plan(wide, a8, a8, (8, 8), (8, 8), (1, 1), (1, 1), (1, 1)) is None
    w4 = np.ones((2, 1, 3, 3), dtype=np.int64)
    assert dwp_plan(w4, a4, a4, (40, 40), (40, 40), (1, 1), (1, 1), (1, 1)) is None
    assert dwp_plan(w4, a4, a4, (8, 8), (4, 4), (1, 1), (0, 0), (2, 2)) is None
    assert dwp_plan(w4, QFormat(1, True), a4, (8, 8), (8, 8), (1, 1), (1, 1), (1, 1)) is None
