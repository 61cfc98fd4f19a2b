"""The depthwise pair path on planes of rows of 5 unsigned 4-bit codes (DS-CNN's 25 x 5 at
W4A4, 8/4, 2/4, ternary/4): each row read once into a line word (mico_dwp_lines5 in
mico_dwconv.c) and the buffers of every layout built from the line words (the pairs,
mico_dwp_lfill; words of 3 or 4 lanes, mico_dwp_lbuild; of 5, mico_dwp_lbuild5) instead of
the plane unpacked into bytes, against the Python integer reference, through the C program
of benchmarks/kernels_rv32.py.

The cases reach every branch of the line words: channel planes that start on a byte and in
the middle of one (an odd number of channels of 125 codes), odd and even heights (a last lone
row), heights of 1..3 rows, padding 0..2 (rows of 3, 5 and 7 outputs: the plane functions of
rows of 5 and the others), channels of one layer taking 5, 4, 3 lanes and the pairs (each
layout before and after the others), outputs by table, by thresholds, requantized with and
without a ReLU, 8-bit weights (the pairs alone), shifts of 32 or less, biases that put every
sum at one level; and, not taking the line words, asymmetric and signed 4-bit codes and rows
of other lengths. Reads and stores are checked under ASan + UBSan on planes that end exactly
at the end of their buffers."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from mico.codegen.dwconv_plan import dw_kernel, dw_lane_plan, dwp_form, dwp_levels
from mico.ir.ops.mico_ops import out_spec
from mico.quant.arithmetic import TERNARY, QFormat
from tests.codegen.dscnn_graph import check_sanitized_dscnn
from tests.codegen.dw_sanitized import (
    check_sanitized,
    pair_path_kernels,
    pair_path_plan,
    tight_program,
)
from tests.codegen.test_dwconv_lanes import kernels_rv32

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

A2, A4 = QFormat(2, False), QFormat(4, False)


def _layer(h, w=5, *, a=A4, o=None, wb=4, c=3, pad=1, seed=0, relu=True):
    layer = kernels_rv32.random_layer(
        "conv", QFormat.for_bits(wb, True), a, in_c=c, out_c=c, hw=(h, w), k=3, pad=pad,
        groups=c, seed=seed, o_fmt=o or a, relu=relu,
    )  # fmt: skip
    return layer


def _cases() -> list:
    layers = [
        _layer(25, c=5, seed=1),  # W4A4: table, 3 lanes, odd channels start mid-byte
        _layer(25, c=4, wb=8, o=A4, seed=2),  # 8/4: the pairs, requantized
        _layer(25, c=3, wb=TERNARY, seed=3),  # ternary/4: 4 lanes
        _layer(25, c=3, wb=2, seed=4),  # 2/4
        _layer(24, c=3, seed=5),  # an even height: no lone last row
        _layer(1, c=3, seed=6),  # one row
        _layer(2, c=3, seed=7),
        _layer(3, c=5, wb=8, seed=8),
        _layer(13, c=3, pad=0, seed=9),  # rows of 3 outputs
        _layer(11, c=3, pad=2, wb=8, seed=10),  # rows of 7 outputs
        _layer(25, c=3, o=A2, seed=11),  # 2-bit outputs: thresholds
        _layer(25, c=3, o=QFormat(8, False), seed=12),  # 8-bit outputs, direct
        _layer(25, c=3, o=QFormat(4, True), relu=False, seed=13),  # signed outputs, no ReLU
        _layer(25, c=3, relu=False, seed=14),  # unsigned outputs, no ReLU
        _layer(17, c=3, o=QFormat(3, False), seed=15),  # 3-bit outputs: staged
        # not the line words: asymmetric and signed codes, rows of 4 and 6 codes, 2-bit codes
        _layer(25, c=3, a=QFormat(4, False, 3), o=QFormat(4, False, 5), relu=False, seed=16),
        _layer(25, c=3, a=QFormat(4, True), o=QFormat(4, True), relu=False, seed=17),
        _layer(20, 4, c=3, seed=18),
        _layer(20, 6, c=3, seed=19),
        _layer(25, c=3, a=A2, o=A4, seed=20),
    ]
    # one layer whose channels take 4 lanes (|w| summing to at most 17: span <= 255) and 3
    # (<= 1023) by table (no 5 lanes: tables take 4), 3 requantized (levels 300 lane values
    # apart: no table), in an order that moves from each layout to the other; shifts of 32
    # or less; biases at the extremes
    mixed = _layer(25, a=A4, o=A4, wb=4, c=11, seed=21)
    rng = np.random.default_rng(22)
    mixed.weight[:] = rng.integers(-7, 8, size=mixed.weight.shape)
    taps = {0: [1], 1: [3, -4, 2, 5, 1], 3: [2], 4: [1, -1], 6: [], 8: [4, 4, -3, 2, 1, 2, 1]}
    for ch, ws in taps.items():
        mixed.weight[ch] = 0
        mixed.weight[ch, 0].flat[: len(ws)] = ws
    mixed.weight[2] = 7  # no table: requantized
    mixed.m[2], mixed.shift[2] = 2**36 // 300, 36
    mixed.weight[7] = -7
    mixed.m[5], mixed.shift[5] = 2**31 - 1, 32
    mixed.m[9], mixed.shift[9] = 3 * 2**24, 30
    mixed.bias[10] = 10**6
    mixed.bias[4] = -(10**6)
    layers.append(mixed)
    # words of 5 lanes (outputs not by table: thresholds, requantized): spans of at most 63
    # (|w| summing to 4 at most), the pairs (sums scaled by 2^2: 945 * 4), 3 lanes, then 5
    # lanes again (kept in 4 after 3)
    for seed, o in ((23, A2), (24, QFormat(8, False)), (25, QFormat(4, True))):
        five = _layer(25, a=A4, o=o, wb=4, c=6, seed=seed, relu=not o.signed)
        five.weight[:] = np.random.default_rng(seed).integers(-7, 8, size=five.weight.shape)
        for ch, ws in {0: [1, -1, 1, 1], 1: [2], 3: [-1, 2], 5: [1]}.items():
            five.weight[ch] = 0
            five.weight[ch, 0].flat[: len(ws)] = ws
        five.weight[2] = 7  # pairs
        five.m[2], five.shift[2] = 2**30, 30
        layers.append(five)
    return layers


def test_line_words_bit_exact(monkeypatch):
    """Every case (one C program) equals the reference through the pair path's entry point
    and through the plain kernel."""
    layers = _cases()
    assert all(k.startswith("mico_qconv2d_dwp_f1") for k in pair_path_kernels(monkeypatch, layers))


def test_line_words_sanitized(monkeypatch):
    """ASan + UBSan: 4-bit planes of 5 columns whose last channel ends exactly at the end of
    the input (in the middle of its last byte for an odd number of channels, on it for an
    even one) and outputs that end at the end of theirs."""
    layers = [_layer(25, c=3, seed=30), _layer(25, c=2, wb=8, seed=31),
              _layer(7, c=1, wb=TERNARY, seed=32), _layer(1, c=3, seed=33)]  # fmt: skip
    monkeypatch.setattr(kernels_rv32, "dw_lane_plan", pair_path_plan)
    check_sanitized(tight_program(layers), layers, "-O1")


def test_plan_takes_the_short_rows_form():
    """The generator gives DS-CNN's depthwise layers at W4A4, 8/4, 2/4 and ternary/4 the pair
    path's form of short rows (``_s``, the form whose read builds the line words) with rows of
    5 outputs (``_r5``): table and words of 5 lanes at W4A4, the pairs at 8/4 (W4A4, 2/4 and
    ternary/4 take mico_qconv2d_dw4 since: the form is the pair path's when forced)."""
    rng = np.random.default_rng(3)
    for wb, want in ((4, "_s_k5_l_r5"), (8, "_s_q_r5"), (2, "_s_k5_l_r5"), (TERNARY, "_s_k5_l_r5")):
        layer = _layer(25, c=16, wb=wb, seed=40)
        w_fmt = QFormat.for_bits(wb, True)
        layer.weight[:] = rng.integers(w_fmt.qmin, w_fmt.qmax + 1, size=layer.weight.shape)
        plan = dw_lane_plan(layer.weight, A4, (25, 5), (25, 5), (1, 1), (1, 1), (1, 1), A4)
        assert dw_kernel(plan) == ("mico_qconv2d_dwp_f1" if wb == 8 else "mico_qconv2d_dw4")
        spec = out_spec(A4, 1.0, list(layer.m), list(layer.shift))
        lvl = dwp_levels(layer.weight, layer.bias, spec, True, A4)
        _, suffix = dwp_form(A4, A4, (25, 5), (25, 5), (1, 1), 1, w_fmt.bits, (0, 15), lvl)
        assert suffix.startswith(want), (wb, suffix)


def test_generated_dscnn_w4a4_sanitized(tmp_path):
    """End to end: DS-CNN at W4A4 emits the rows-of-5 path (mico_qconv2d_dw4, which took its
    depthwise layers from the pair path's short-rows form: the line words, forced in the
    tests above) for its four depthwise layers, with the generator's tables, and the program
    (ASan + UBSan) equals the Python reference."""
    check_sanitized_dscnn(4, 3, "mico_qconv2d_dw4(&", tmp_path)
