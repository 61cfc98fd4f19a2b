"""The pointwise channel-lanes path (mico_conv2d.c mico_conv_pw / mico_pw_*) and the lanes'
weight-aware bound (mico.quant.packing.longest_run) against the Python integer arithmetic:
every weight width the lanes take against activations of 1..8 bits (signed, unsigned,
asymmetric), odd channel counts and planes (pixel blocks and groups left partly empty),
reductions of one segment and of several (16-bit, 8-bit widened, 4-bit and signed lanes),
the most input channels the path takes and one more (the rows path), the block store and its
fallbacks (codes not on whole bytes, 3-bit and signed outputs, no ReLU, shifts of at most 32,
small multipliers, saturation). One host program for every case; the paths the generator
picks for given formats."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from mico.codegen.emitters import NARROW_CONV, conv2d_kernel, lanes_kernel, lanes_plan
from mico.quant.arithmetic import TERNARY, QFormat
from mico.quant.packing import LANE_RUN_UNBOUNDED, lane_offsets, lane_plan, longest_run
from mico.targets import rv32
from tests.benchmark_modules import load_benchmark

kernels_rv32 = load_benchmark("kernels_rv32")

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

W1, W2, W4, W8 = (QFormat(b, True) for b in (1, 2, 4, 8))
WT = QFormat.for_bits(TERNARY, True)
A2, A4, A8 = (QFormat(b, False) for b in (2, 4, 8))
W_FMTS = [W1, WT, W2, W4, W8]


def pw(w_fmt, a_fmt, seed, in_c=7, out_c=None, hw=(5, 7), **kw):
    """A pointwise layer (1x1, stride 1, no padding) of F channels per weight word by default."""
    out_c = out_c or 32 // w_fmt.bits
    return kernels_rv32.random_layer(
        "conv", w_fmt, a_fmt, in_c=in_c, out_c=out_c, hw=hw, k=1, seed=seed, **kw
    )


def every_activation() -> list:
    """Each weight width against activations of 1..8 bits, unsigned, signed and asymmetric,
    on a 5 x 7 plane (a block of 32 pixels and one of 3) of 7 input channels; extremes (the
    bound from the widths alone, saturating multipliers) for the even signed ones."""
    layers = []
    for w_fmt in W_FMTS:
        for a_bits in range(1, 9):
            fmts = [QFormat(a_bits, False), QFormat(a_bits, True)]
            if 2 <= a_bits <= 8:
                fmts.append(QFormat.asymmetric(a_bits, (2**a_bits) // 3))
            for j, a_fmt in enumerate(fmts):
                extreme = j == 1 and a_bits % 2 == 0
                layers.append(pw(w_fmt, a_fmt, 10 * a_bits + j, extreme=extreme))
    return layers


def segments() -> list:
    """Reductions longer than a lane holds (extreme weights: the widths' bound): 16-bit lanes
    in 3 segments (W8A4: 17 taps a segment), unsigned 8-bit lanes widened (W2A4: 5),
    4-bit lanes (W1A2), signed 8- and 16-bit lanes; 64 input channels (the most the path
    takes: blocks of 32 pixels) and 65 (the rows path)."""
    return [
        pw(W8, A4, 500, in_c=40, extreme=True),
        pw(W2, A4, 501, in_c=23, extreme=True),
        pw(W1, A2, 502, in_c=31, extreme=True),
        pw(W2, QFormat(4, True), 503, in_c=33, extreme=True),
        pw(W4, QFormat(4, True), 504, in_c=64, hw=(9, 9), extreme=True),
        pw(W4, A4, 505, in_c=64, out_c=16, hw=(25, 5)),
        pw(W4, A4, 506, in_c=65, out_c=8, hw=(8, 8)),
        pw(W8, A4, 507, in_c=48, out_c=8, hw=(4, 16)),
    ]


def stores() -> list:
    """The block store (8-, 4-, 2-bit codes after a ReLU on whole bytes) and its fallbacks:
    planes of 25 x 5 (odd channels' 4- and 2-bit codes start inside a byte), 3-bit, signed and
    asymmetric outputs, no ReLU (signed codes of 8, 4 and 2 bits: their own loop), shifts of at
    most 32 with multipliers small and large, one multiplier for every channel, multipliers
    that saturate."""
    layers = []
    outs = [A8, A4, A2, QFormat(3, False), QFormat(8, True), QFormat.asymmetric(8, 100)]
    for i, o_fmt in enumerate(outs):
        for hw, relu in (((4, 8), True), ((25, 5), True), ((4, 8), False)):
            layers.append(pw(W4, A4, 600 + 10 * i, in_c=9, hw=hw, o_fmt=o_fmt, relu=relu))
    low = pw(W2, A2, 700, in_c=16, out_c=32, hw=(4, 8))
    new_shift = 32 - np.arange(16) % 6  # the same real multipliers at shifts 27..32
    low.m[:16] = np.round(low.m[:16] * 2.0 ** (new_shift - low.shift[:16])).astype(np.int64)
    low.shift[:16] = new_shift  # the store's 32-bit rewrite
    low.m[16:24] = np.arange(8) + 1  # multipliers below 2 (hi + 1): the 64-bit product
    low.shift[16:24] = 3
    one = pw(W2, A2, 701, in_c=16, out_c=16, hw=(4, 8))
    one.m[:], one.shift[:] = one.m[0], one.shift[0]
    extreme = pw(W4, A4, 702, in_c=11, out_c=16, hw=(6, 6), extreme=True)
    # planes whose codes start and end inside a byte (25 x 5 and 5 x 7): shifts of at most 32
    odd = [pw(w, a, 703 + i, in_c=13, out_c=2 * (32 // w.bits), hw=hw)
           for i, (w, a, hw) in enumerate(((W2, A2, (25, 5)), (W4, A4, (5, 7))))]  # fmt: skip
    for layer in odd:
        half = layer.m.size // 2
        new_shift = 32 - np.arange(half) % 4
        layer.m[:half] = np.round(layer.m[:half] * 2.0 ** (new_shift - layer.shift[:half])).astype(
            np.int64
        )
        layer.shift[:half] = new_shift
    # signed codes without a ReLU (mico_pw_scode): 8, 4, 2 bits, planes that start inside a
    # byte (25 x 5), signed inputs, multipliers that saturate both ways
    for i, o_fmt in enumerate((QFormat(8, True), QFormat(4, True), QFormat(2, True))):
        for hw in ((4, 8), (25, 5)):
            layers.append(pw(W4, A4, 720 + 10 * i + hw[0], in_c=9, hw=hw, o_fmt=o_fmt, relu=False))
        layers.append(pw(W4, QFormat(4, True), 760 + i, in_c=13, out_c=16, hw=(25, 5),
                         o_fmt=o_fmt, relu=False, extreme=True))  # fmt: skip
    return [*layers, low, one, extreme, *odd]


def linear_stores() -> list:
    """The linear lanes' fused store (mico_linear.c mico_ll_store) and its fallbacks: 8-, 4-,
    2-bit codes after a ReLU, shifts above 32 and of at most 32 with multipliers large and
    small, one multiplier, signed outputs, no ReLU, several rows."""
    layers = []
    for i, (w_fmt, a_fmt, o_fmt) in enumerate(((W4, A4, A4), (W2, A2, A2), (W1, A8, A8),
                                               (W8, A4, QFormat(8, True)))):  # fmt: skip
        f = 32 // w_fmt.bits
        for j, relu in enumerate((True, False)):
            layers.append(kernels_rv32.random_layer(
                "linear", w_fmt, a_fmt, in_c=200 + 7 * i, out_c=2 * f, rows=2, o_fmt=o_fmt,
                relu=relu, seed=900 + 10 * i + j))  # fmt: skip
    low = kernels_rv32.random_layer("linear", W2, A2, in_c=96, out_c=32, seed=950)
    new_shift = 32 - np.arange(16) % 6  # the same real multipliers at shifts 27..32
    low.m[:16] = np.round(low.m[:16] * 2.0 ** (new_shift - low.shift[:16])).astype(np.int64)
    low.shift[:16] = new_shift
    small = kernels_rv32.random_layer("linear", W2, A2, in_c=96, out_c=16, seed=953)
    small.m[:4], small.shift[:4] = np.arange(4) + 1, 3  # below 2 (hi + 1): the fallback
    one = kernels_rv32.random_layer("linear", W4, A4, in_c=96, out_c=16, seed=951)
    one.m[:], one.shift[:] = one.m[0], one.shift[0]
    rows = kernels_rv32.random_layer("linear", W4, A4, in_c=40, out_c=8, rows=3, seed=952)
    # the unpacking with the codes' sum: signed and asymmetric codes, rows that start inside a
    # byte, chunks of 256 codes and a remainder, extremes
    more = [
        kernels_rv32.random_layer("linear", W4, QFormat(4, True), in_c=301, out_c=16, rows=2,
                                  seed=960),
        kernels_rv32.random_layer("linear", W2, QFormat.asymmetric(8, 100), in_c=263, out_c=32,
                                  seed=961),
        kernels_rv32.random_layer("linear", W4, A2, in_c=513, out_c=8, rows=3, seed=962,
                                  extreme=True),
    ]  # fmt: skip
    return [*layers, low, small, one, rows, *more]


CASES = {
    "every_activation": every_activation,
    "segments": segments,
    "stores": stores,
    "linear_stores": linear_stores,
}


@pytest.fixture(scope="module")
def chosen() -> dict[str, list[str]]:
    """Every case's layers through their chosen paths in one host program, each output held
    to the reference; case name -> the kernel of each layer."""
    layers = {name: fn() for name, fn in CASES.items()}
    flat = [layer for group in layers.values() for layer in group]
    runs = iter(kernels_rv32.run_layers(flat, "host", ("chosen",)))
    kernels: dict[str, list[str]] = {}
    for name, group in layers.items():
        kernels[name] = []
        for i, layer in enumerate(group):
            ((kernel, _, out),) = next(runs)
            ref = layer.reference().ravel()
            assert np.array_equal(out, ref), (name, i, kernel, np.flatnonzero(out != ref)[:10])
            kernels[name].append(kernel)
    return kernels


@needs_gcc
def test_every_activation(chosen):
    kernels = chosen["every_activation"]
    assert sum(k.startswith("mico_qconv2d_lanes") for k in kernels) >= 5 * 8


@needs_gcc
def test_segments(chosen):
    kernels = chosen["segments"]
    assert kernels[0] == "mico_qconv2d_lanes_w8g2" and kernels[1] == "mico_qconv2d_lanes_w2g4"
    assert all(k.startswith("mico_qconv2d_lanes") for k in kernels[4:])


@needs_gcc
def test_stores(chosen):
    assert all(k.startswith("mico_qconv2d_lanes") for k in chosen["stores"])


@needs_gcc
def test_linear_stores(chosen):
    assert sum(k.startswith("mico_qlinear_lanes") for k in chosen["linear_stores"]) >= 8


@pytest.mark.skipif(not rv32.available(), reason="needs the rv32 toolchain and qemu")
def test_rv32_pointwise_bit_exact():
    """The same path built for rv32imac (its 32-bit store rewrite, halfword unpacking)."""
    layers = [pw(W4, A4, 800, in_c=32, out_c=16, hw=(8, 8)),
              pw(W2, A2, 801, in_c=64, out_c=32, hw=(25, 5)),
              pw(W4, QFormat(4, True), 802, in_c=20, hw=(5, 7), extreme=True)]  # fmt: skip
    for layer, ((kernel, _, out),) in zip(
        layers, kernels_rv32.run_layers(layers, "rv32", ("chosen",)), strict=True
    ):
        assert kernel.startswith("mico_qconv2d_lanes")
        assert np.array_equal(out, layer.reference().ravel()), kernel


def _brute_run(offsets: np.ndarray, budget: int) -> int:
    """The longest run by trying every length and start."""
    taps = offsets.shape[1]
    best = 0
    for n in range(1, taps + 1):
        sums = [offsets[:, t : t + n].sum(axis=1).max() for t in range(taps - n + 1)]
        if max(sums) <= budget:
            best = n
    return LANE_RUN_UNBOUNDED if best == taps else best


def test_longest_run_matches_brute_force():
    rng = np.random.default_rng(0)
    for trial in range(60):
        out, taps = int(rng.integers(1, 5)), int(rng.integers(1, 20))
        offsets = rng.integers(0, 16, size=(out, taps))
        budget = int(rng.integers(0, 80))
        assert longest_run(offsets, budget) == _brute_run(offsets, budget), trial


def test_lane_plan_bound_from_the_weights():
    """With the weights, n is never below the widths' bound, and every run of n taps of
    every channel fits a lane; W2A2 on ordinary weights sums a 32-tap reduction in one
    segment of 8-bit lanes (the widths alone allow 28)."""
    rng = np.random.default_rng(1)
    w = rng.integers(-2, 2, size=(32, 32))
    plain = lane_plan(W2, A2)
    plan = lane_plan(W2, A2, weight=w)
    assert plain is not None and plan is not None
    assert plain == {"s": 8, "n": 28, "is_signed": 0}
    assert plan["s"] == 8 and plan["n"] >= 32
    for w_fmt, a_fmt, shape in ((W4, A4, (8, 40)), (W2, QFormat(4, True), (16, 50)),
                                (W1, A8, (32, 70)), (WT, A4, (16, 45))):  # fmt: skip
        codes = rng.integers(w_fmt.qmin, w_fmt.qmax + 1, size=shape)
        if w_fmt.binary:
            codes = rng.choice([-1, 1], size=shape)
        got = lane_plan(w_fmt, a_fmt, weight=codes)
        base = lane_plan(w_fmt, a_fmt)
        if got is None:
            continue
        assert base is None or got["n"] >= base["n"] or got["s"] != base["s"]
        s, n = got["s"], min(got["n"], shape[1])
        cap = 2 ** (s - 1) - 1 if got["is_signed"] else 2**s - 1
        x_max = max(a_fmt.qmax, -a_fmt.qmin)
        offs = lane_offsets(codes, w_fmt)
        windows = np.lib.stride_tricks.sliding_window_view(offs, n, axis=1).sum(axis=2)
        assert windows.max() * x_max <= cap


def test_generator_paths_for_pointwise_formats():
    """The generator's choices for a pointwise layer of 64 channels on DS-CNN's 25 x 5 planes:
    W8A8 and narrower weights on 8-bit codes the byte path for their size, W4A4 / W2A2 /
    W4A2 channel lanes of 16-, 8- and 8-bit lanes, binary the popcount kernels."""
    macs = 64 * 64 * 125
    assert conv2d_kernel(8, 1, 64, 64, (1, 1), 1, w_bits=8, macs=macs) == NARROW_CONV
    w = np.random.default_rng(2).integers(-2, 2, size=(64, 64))
    picks = {
        (4, 4): "mico_qconv2d_lanes_w4g4",
        (2, 2): "mico_qconv2d_lanes_w2g4",
        (4, 2): "mico_qconv2d_lanes_w4g2",
    }
    for (wb, ab), kernel in picks.items():
        w_fmt, a_fmt = QFormat(wb, True), QFormat(ab, False)
        codes = np.clip(w, w_fmt.qmin, w_fmt.qmax)
        plan = lanes_plan(w_fmt, a_fmt, 64, macs=macs, weight=codes)
        assert plan is not None and lanes_kernel("mico_qconv2d", plan, wb) == kernel
    assert lanes_plan(W8, A8, 64, macs=macs) is None
