"""Offset codes on the pointwise lanes path (mico_conv2d.c mico_conv_pw): signed and
asymmetric activations are multiplied as unsigned fields u = x + o in unsigned lanes flushed
every n taps, the plan's bound for signed sums of |x| in lanes of half the range
(mico.quant.packing.lane_plan). That holds while u <= 2 max|x|: o = -qmin (mico_pw_offset),
u in [0, qmax - qmin]. Signed codes are symmetric (|x| <= 2^(b-1) - 1); with o = 2^(b-1)
(mico_field_map's) their fields reached 2^b - 1 (2-bit codes: 3 = 3 max|x|) and the 8-bit
lanes of DS-CNN's ternary pointwise layers carried into their neighbours.

- the rule: every run of n taps of every channel, times the largest field qmax - qmin, fits an
  unsigned lane, where fields of 2^b - 1 do not (2-bit codes);
- seeded random pointwise layers (and single-plane layers of narrow rows: the im2col patch),
  signed and asymmetric codes of 1..8 bits against weights of 1..8 bits and ternary ones, on
  8- and 16-bit lanes, reductions of one segment and of several, columns of the largest
  fields (the lanes at their bound): every output equal to the reference, in one sanitized
  host program and an rv32 one."""

from __future__ import annotations

import numpy as np
import pytest

from mico.codegen.emitters import lanes_plan, widened_to_s8
from mico.quant.arithmetic import TERNARY, QFormat
from mico.quant.packing import LANE_RUN_UNBOUNDED, lane_offsets, lane_plan
from mico.targets import rv32
from tests.codegen.test_lanes_pointwise import kernels_rv32
from tests.codegen.test_pw_paths import _sanitized_run, needs_gcc

W1, W2, W4, W8 = (QFormat(b, True) for b in (1, 2, 4, 8))
WT = QFormat.for_bits(TERNARY, True)
W_FMTS = (W1, WT, W2, W4, W8)


def _offset_fmts(rng: np.random.Generator) -> list[QFormat]:
    """Signed codes of 1..8 bits and asymmetric ones of 2..8 bits (a random zero point)."""
    fmts = [QFormat(b, True) for b in range(1, 9)]
    fmts += [QFormat.asymmetric(b, int(rng.integers(1, 2**b))) for b in range(2, 9)]
    return fmts


def _windows(offsets: np.ndarray, n: int) -> np.ndarray:
    """Sums of w' over every run of n consecutive taps (the whole rows when shorter)."""
    n = min(n, offsets.shape[1])
    return np.lib.stride_tricks.sliding_window_view(offsets, n, axis=1).sum(axis=2)


def test_offset_fields_bound_the_lanes():
    """The fields u = x - qmin of every offset format span at most twice max|x|, so every run
    of the plan's n taps, times qmax - qmin, fits the unsigned lane (random weights of every
    width, every offset format); the fields x + 2^(b-1) of signed 2-bit codes (up to 3) did
    not: 42 taps of 3 x 3 overflow an 8-bit lane."""
    rng = np.random.default_rng(5)
    s2 = QFormat(2, True)
    plan = lane_plan(W2, s2)
    assert plan == {"s": 8, "n": 42, "is_signed": 1}
    assert plan["n"] * (s2.qmax - s2.qmin) * 3 <= 2**8 - 1 < plan["n"] * (2**s2.bits - 1) * 3
    checked = 0
    for a_fmt in _offset_fmts(rng):
        u_max, x_max = a_fmt.qmax - a_fmt.qmin, max(a_fmt.qmax, -a_fmt.qmin)
        assert u_max <= 2 * x_max
        for w_fmt in W_FMTS:
            codes = rng.integers(w_fmt.qmin, w_fmt.qmax + 1, size=(32, 64))
            if w_fmt.binary:
                codes = rng.choice([-1, 1], size=(32, 64))
            got = lane_plan(w_fmt, a_fmt, weight=codes)
            if got is None or got["n"] >= LANE_RUN_UNBOUNDED:
                continue
            offs = lane_offsets(codes, w_fmt)
            assert _windows(offs, got["n"]).max() * u_max <= 2 ** got["s"] - 1
            checked += 1
    assert checked >= 10


def _layer(rng: np.random.Generator, w_fmt, a_fmt, seed: int, *, in_c, out_c, hw, k=1, **kw):
    """A random layer whose first pixels of every plane hold the largest field (x = qmax) and
    whose weights lean to their largest offset weight: lanes near their bound."""
    layer = kernels_rv32.random_layer(
        "conv", w_fmt, a_fmt, in_c=in_c, out_c=out_c, hw=hw, k=k, seed=seed, **kw
    )
    flat = layer.x.reshape(in_c, -1)
    flat[:, : int(rng.integers(1, 6))] = a_fmt.qmax
    if not w_fmt.binary:
        heavy = rng.random(layer.weight.shape) < rng.uniform(0.3, 0.9)
        layer.weight = np.where(heavy, w_fmt.qmax, layer.weight)
    return layer


def random_layers() -> list:
    """Pointwise layers of every offset format against every weight width (random taps up to
    the path's 64, random planes of one or two blocks of pixels), and single-plane layers of
    narrow rows (the im2col patch: 8 x 8 and 10 x 4 kernels)."""
    rng = np.random.default_rng(2027)
    layers = []
    for i, a_fmt in enumerate(_offset_fmts(rng)):
        for j, w_fmt in enumerate(W_FMTS):
            if (i + j) % 2:
                continue  # half of the grid: the build stays short
            in_c = int(rng.choice([9, 24, 40, 64]))
            hw = (int(rng.integers(2, 6)), int(rng.integers(5, 10)))
            layers.append(_layer(rng, w_fmt, a_fmt, 7000 + 10 * i + j, in_c=in_c,
                                 out_c=32 // w_fmt.bits, hw=hw))  # fmt: skip
    for i, (w_fmt, a_fmt, k) in enumerate(((W2, QFormat(2, True), 8), (WT, QFormat(2, True), 8),
                                           (W4, QFormat(3, True), 8),
                                           (W2, QFormat.asymmetric(2, 2), 8),
                                           (W4, QFormat(4, True), 4))):  # fmt: skip
        layers.append(_layer(rng, w_fmt, a_fmt, 7500 + i, in_c=1, out_c=32, hw=(13, 7 + k - 1),
                             k=k))  # fmt: skip
    return layers


def _plans(layers: list) -> list[dict | None]:
    return [
        lanes_plan(layer.w_fmt, layer.a_fmt, layer.weight.shape[0], weight=layer.weight)
        for layer in layers
    ]


def _on_bytes(layer) -> bool:
    """Whether a pointwise layer of 8-bit codes takes the W8A8 bytes (emitters.widened_to_s8)."""
    k = layer.weight.shape[2:]
    return widened_to_s8(layer.w_fmt, layer.a_fmt, k, (1, 1), (0, 0), in_c=layer.x.shape[0],
                         weight=layer.weight)  # fmt: skip


def test_random_layers_cover_the_bounds():
    """The layers reach what the rule is about: 8- and 16-bit lanes whose reductions take
    several segments of n taps."""
    layers = random_layers()
    multi = {
        p["s"]
        for layer, p in zip(layers, _plans(layers), strict=True)
        if p is not None and layer.taps > p["n"]
    }
    assert {8, 16} <= multi


@needs_gcc
def test_random_offset_layers_bit_exact():
    layers = random_layers()
    outs = _sanitized_run(layers)
    for i, (layer, out, plan) in enumerate(zip(layers, outs, _plans(layers), strict=True)):
        ref = layer.reference().ravel()
        (kernel, _), *_ = kernels_rv32._layer_code(layer, "L0_", ("chosen",))[1]
        lanes = plan is not None and not layer.binary() and not _on_bytes(layer)
        assert kernel.startswith("mico_qconv2d_lanes") == lanes, (i, kernel)
        assert np.array_equal(out, ref), (i, layer.w_fmt, layer.a_fmt, kernel, plan)


@pytest.mark.skipif(not rv32.available(), reason="needs the rv32 toolchain and qemu")
def test_random_offset_layers_rv32():
    """The lanes layers with several segments of 8-bit lanes, built for rv32imac."""
    every = random_layers()
    layers = [
        layer
        for layer, p in zip(every, _plans(every), strict=True)
        if p is not None and p["s"] == 8 and layer.taps > p["n"]
    ][:8]
    assert layers
    for layer, ((kernel, _, out),) in zip(
        layers, kernels_rv32.run_layers(layers, "rv32", ("chosen",)), strict=True
    ):
        assert kernel.startswith("mico_qconv2d_lanes")
        assert np.array_equal(out, layer.reference().ravel()), kernel
