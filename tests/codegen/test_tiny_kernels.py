"""The plain kernels' several-products-per-multiply branches against the element-by-element
reference (the harness of test_packed_rows).

mico_qlinear reads rows of 4- or 2-bit weights a 32-bit word at a time when every row spans
whole words (in_features a multiple of 8 or 16) at an aligned address (the harness's malloc'ed
weights are): 4-bit weights in 16-bit lanes when 15 sum |x| of a chunk is below 2^15, 2-bit
weights in byte lanes for codes in [0, 21] or, rounded, in [-10, 10]; other chunks take the
byte loops. The cases below sit on both sides of those bounds (codes at their extremes,
chunks of 128 codes and a shorter last one, one and several rows, odd output counts).
"""

from __future__ import annotations

import numpy as np
import pytest

from mico.codegen.emitters import folded_bias, linear_x_off
from mico.quant import QFormat, pack, quantize_multiplier
from tests.codegen import test_packed_rows as rows_tests
from tests.codegen.test_packed_rows import (
    NO_LAYOUT,
    _bytes,
    _kernel,
    _multiplier,
    _out,
    _pool_tokens,
    _run,
)

harness = rows_tests.harness  # the packed-rows harness (a module-scoped fixture)


def _tokens(x, weight, w_bits, in_fmt, out_fmt, rows, n_in, n_out, rng, relu=True, x_off=0):
    """A linear case; ``x_off``: the kernel's input offset (the bias folded as the generator
    folds it, linear_x_off)."""
    spread = np.sqrt(n_in) * (1 + np.abs(x).mean()) * (1 + np.abs(weight).mean())
    mults = [_multiplier(rng, spread, out_fmt) for _ in range(n_out)]
    wraw = pack(weight, QFormat(w_bits, True)).tolist()
    bias = folded_bias(rng.integers(-300, 300, n_out), np.reshape(weight, (n_out, n_in)), x_off)
    return ["l", rows, n_in, n_out, in_fmt.bits, int(in_fmt.signed), w_bits, len(wraw), *wraw,
            *bias.tolist(), *_out(out_fmt, rng, relu, mults), 0, x_off,
            *_bytes(x, in_fmt), *NO_LAYOUT]  # fmt: skip


@pytest.mark.parametrize("w_bits", [2, 4])
@pytest.mark.parametrize("in_bits", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("n_in", [16, 32, 144, 272])
@pytest.mark.parametrize("extreme", ["random", "max", "min"])
def test_linear_word_lanes_match_reference(harness, w_bits, in_bits, signed, n_in, extreme):
    """Whole-word rows of 4- and 2-bit weights: random codes, and every code (and weight) at
    its largest or smallest value, which puts the lanes' sums at their bounds (or past them:
    those chunks take the byte loops); outputs stored as the reference's, with the codes as
    they are and offset as the generator offsets them (linear_x_off)."""
    in_fmt, w_fmt = QFormat(in_bits, signed), QFormat(w_bits, True)
    rng = np.random.default_rng(n_in * 131 + in_bits * 7 + w_bits + signed)
    rows, n_out = 2, 11
    x = rng.integers(in_fmt.qmin, in_fmt.qmax + 1, rows * n_in)
    weight = rng.integers(w_fmt.qmin, w_fmt.qmax + 1, n_out * n_in)
    if extreme == "max":
        x[:] = in_fmt.qmax
        weight[: n_in * 5] = w_fmt.qmax
    elif extreme == "min":
        x[:] = in_fmt.qmin
        weight[: n_in * 5] = w_fmt.qmin
    out_fmt = QFormat(8, True)
    for x_off in {0, linear_x_off(f"mico_qlinear_sub{w_bits}", in_fmt)}:
        tokens = _tokens(x, weight, w_bits, in_fmt, out_fmt, rows, n_in, n_out, rng,
                         relu=extreme == "random", x_off=x_off)  # fmt: skip
        _kernel(harness, tokens)


@pytest.mark.parametrize("w_bits", [2, 4])
@pytest.mark.parametrize("out_bits", [2, 4, 8])
def test_linear_word_lanes_outputs_vary(harness, w_bits, out_bits):
    """The word lanes' sums reach the outputs: a gentle multiplier leaves them unclamped and
    different from one another, and equal to the reference's."""
    rng = np.random.default_rng(w_bits * 10 + out_bits)
    n_in, n_out, in_fmt = 64, 9, QFormat(4, False)
    x = rng.integers(0, 16, n_in)
    w_fmt = QFormat(w_bits, True)
    weight = rng.integers(w_fmt.qmin, w_fmt.qmax + 1, n_out * n_in)
    wraw = pack(weight, QFormat(w_bits, True)).tolist()
    out_fmt = QFormat(8, True)
    tokens = ["l", 1, n_in, n_out, 4, 0, w_bits, len(wraw), *wraw, *([0] * n_out),
              *_out(out_fmt, rng, False, [quantize_multiplier(1 / 16)]), 0, 0,
              *_bytes(x, in_fmt), *NO_LAYOUT]  # fmt: skip
    lines = _run(harness, tokens)
    assert lines[0] == lines[1]
    assert len(set(lines[0])) > 3


CONV_SHAPES = [  # c_in, c_out, (h, w), k, pad: taps of a kernel row span whole words or not
    (8, 9, (5, 6), (3, 3), (1, 1)),  # 72 taps: words at 4 bits, one chunk
    (16, 11, (4, 5), (3, 3), (1, 1)),  # 144 taps: words at 2 and 4 bits, two chunks
    (32, 5, (3, 4), (3, 3), (1, 0)),  # 288 taps: three chunks of 96
    (16, 7, (3, 7), (1, 1), (0, 0)),  # pointwise, 16 taps
    (8, 3, (2, 9), (1, 1), (0, 0)),  # pointwise, 8 taps
    (1, 8, (8, 8), (3, 3), (1, 1)),  # 9 taps: rows inside bytes, pixel lanes
    (3, 5, (5, 7), (3, 3), (0, 1)),  # 27 taps: pixel lanes (16-bit lanes for wider codes)
    (2, 3, (4, 9), (1, 3), (0, 1)),  # 6 taps: whole bytes at 4 bits, pixel lanes at 2
]


CONV_FORMATS = [(1, False), (2, False), (2, True), (3, True), (4, False), (4, True), (5, False),
                (8, True)]  # fmt: skip


@pytest.mark.parametrize("w_bits", [2, 4])
@pytest.mark.parametrize("in_bits, signed", CONV_FORMATS)
@pytest.mark.parametrize("shape", CONV_SHAPES)
@pytest.mark.parametrize("extreme", ["random", "max", "min"])
def test_conv_word_lanes_match_reference(harness, w_bits, in_bits, signed, shape, extreme):
    """mico_qconv2d_tiled's word kernels (rows and chunks of whole words at 4 bits, halfwords
    at 2; 4-bit weights where 15 x taps x max |code| < 2^15, 2-bit ones for codes in [0, 21]
    or [-10, 10]), its pixel lanes (rows inside bytes: bytes or 16-bit lanes by the codes'
    range) and the byte loops the other formats keep: random codes and every code (and
    weight) at an extreme, odd channel counts (one computed twice), per-channel multipliers,
    padding."""
    c_in, c_out, size, k, pad = shape
    in_fmt, w_fmt = QFormat(in_bits, signed), QFormat(w_bits, True)
    rng = np.random.default_rng(c_in * 1000 + in_bits * 10 + w_bits + signed)
    taps = c_in * k[0] * k[1]
    x = rng.integers(in_fmt.qmin, in_fmt.qmax + 1, c_in * size[0] * size[1])
    weight = rng.integers(w_fmt.qmin, w_fmt.qmax + 1, c_out * taps)
    if extreme != "random":
        x[:] = in_fmt.qmax if extreme == "max" else in_fmt.qmin
        weight[: 2 * taps] = w_fmt.qmax if extreme == "max" else w_fmt.qmin
    spread = np.sqrt(taps) * (1 + np.abs(x).mean()) * (1 + np.abs(weight).mean())
    out_fmt = QFormat(8, True)
    mults = [_multiplier(rng, spread, out_fmt) for _ in range(c_out)]
    out_h = size[0] + 2 * pad[0] - k[0] + 1
    out_w = size[1] + 2 * pad[1] - k[1] + 1
    wraw = pack(weight, w_fmt).tolist()
    tokens = ["c", c_in, *size, c_out, out_h, out_w, *k, 1, 1, *pad, 1, 1, 1, in_bits,
              int(signed), w_bits, len(wraw), *wraw, *rng.integers(-300, 300, c_out).tolist(),
              *_out(out_fmt, rng, extreme == "random", mults), *_bytes(x, in_fmt),
              *NO_LAYOUT]  # fmt: skip
    _kernel(harness, tokens)


@pytest.mark.parametrize("out_bits, out_signed", [(2, False), (2, True), (4, False), (8, True)])
@pytest.mark.parametrize("scale", [0.3, 0.5, 0.74, 1.0, 3.0, 17.0, 1000.0])
@pytest.mark.parametrize("relu", [False, True])
def test_conv_large_output_scales_match_reference(harness, out_bits, out_signed, scale, relu):
    """Multipliers of shift 32 or less (an output scale close to or above the accumulators',
    as 2-bit outputs have) take mico_conv_rq's 32-bit rounding, with sums of either sign, some
    clamped and some at the rounding boundary; larger shifts the usual loop."""
    rng = np.random.default_rng(out_bits * 100 + int(scale * 10) + relu)
    in_fmt, w_fmt, out_fmt = QFormat(4, True), QFormat(4, True), QFormat(out_bits, out_signed)
    c_in, c_out, size, k = 3, 5, (5, 6), (3, 3)
    x = rng.integers(in_fmt.qmin, in_fmt.qmax + 1, c_in * size[0] * size[1])
    weight = rng.integers(w_fmt.qmin, w_fmt.qmax + 1, c_out * c_in * 9)
    mults = [quantize_multiplier(scale / (1 + c)) for c in range(c_out)]
    wraw = pack(weight, w_fmt).tolist()
    tokens = ["c", c_in, *size, c_out, *size, *k, 1, 1, 1, 1, 1, 1, 1, 4, 1, 4, len(wraw),
              *wraw, *rng.integers(-40, 40, c_out).tolist(), *_out(out_fmt, rng, relu, mults),
              *_bytes(x, in_fmt), *NO_LAYOUT]  # fmt: skip
    lines = _run(harness, tokens)
    assert lines[0] == lines[1]


POOL_SHAPES = [  # size, k, stride, pad, dil
    ((8, 8), (2, 2), (2, 2), (0, 0), (1, 1)),
    ((7, 9), (3, 3), (2, 2), (1, 1), (1, 1)),
    ((5, 11), (2, 3), (1, 2), (1, 1), (2, 2)),
    ((4, 70), (1, 2), (1, 2), (0, 0), (1, 1)),  # more outputs in a row than one run
]


@pytest.mark.parametrize("bits", [1, 2, 3, 4, 5, 6, 7, 8, 32])
@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("shape", POOL_SHAPES)
@pytest.mark.parametrize("place", [False, True])
def test_maxpool_fields_match_reference(harness, bits, signed, shape, place):
    """mico_maxpool2d on fields read in place (binary codes included; 3, 5, 6, 7 bits across
    byte boundaries) and on int32 values: padding, strides, dilation, runs of outputs, and
    over its own input displaced as far as the in-place contract allows."""
    if bits == 32 and (place or not signed):
        pytest.skip("int32 tensors: signed, out of place")
    size, k, stride, pad, dil = shape
    rng = np.random.default_rng(bits * 10 + signed)
    fmt = None if bits == 32 else QFormat(bits, signed)
    tokens = _pool_tokens(rng, "m", 3, size, k, stride, pad, dil, fmt, None, False, place)
    _kernel(harness, tokens, in_place=place)
