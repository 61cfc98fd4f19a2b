"""The register-tiled channel-lanes kernels (mico_conv2d.c mico_conv_lr / mico_lr_*, mico_linear.c
mico_linear_ll / mico_ll_*) against the Python integer arithmetic: input rows by stride phase
(stride, dilation, padding wider than the kernel), the row ring, chunks of input channels and
passes of output blocks, the fused requantize-and-pack store and its fallbacks (odd widths,
signed outputs, no ReLU), every weight width the lanes take against activations of 1..8 bits
(signed, unsigned, asymmetric), linear layers whose blocks fill no group of the kernel, the
fallback to the im2col lanes for rows wider than the kernels take. One program per test."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from mico.quant.arithmetic import TERNARY, QFormat
from mico.quant.packing import lane_cost, lane_plan
from mico.targets import rv32
from tests.benchmark_modules import load_benchmark

kernels_rv32 = load_benchmark("kernels_rv32")

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

W4, A4 = QFormat(4, True), QFormat(4, False)


#: the host cases, built once: case name -> its layers (every case in one program)
CASES: dict = {}


def case(fn):
    """Register a function returning a case's layers (run by the module's one program)."""
    CASES[fn.__name__] = fn
    return fn


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


def conv(w_fmt, a_fmt, seed, **kw):
    return kernels_rv32.random_layer("conv", w_fmt, a_fmt, seed=seed, **kw)


@case
def conv_windows():
    """Stride 2 (rows by phase), dilation 2, padding 2 around a 3x3, a 5x5 kernel, 1x1,
    odd planes, groups of F channels: every layer through the lanes by rows."""
    return [
        conv(W4, A4, 1, in_c=6, out_c=8, hw=9, k=3, pad=1, stride=2),
        conv(W4, A4, 2, in_c=5, out_c=8, hw=11, k=3, pad=2, dil=2),
        conv(W4, A4, 3, in_c=3, out_c=16, hw=7, k=5, pad=2),
        conv(W4, A4, 4, in_c=9, out_c=8, hw=5, k=1),
        conv(W4, A4, 5, in_c=8, out_c=16, hw=6, k=3, pad=1, groups=2),
        conv(W4, A4, 6, in_c=4, out_c=8, hw=10, k=3, pad=0, stride=3),
        conv(W4, A4, 7, in_c=4, out_c=8, hw=9, k=2, pad=3, stride=2, dil=2),
    ]


def test_conv_windows(chosen):
    assert all(k == "mico_qconv2d_lanes_w4g4" for k in chosen["conv_windows"])


@case
def conv_chunks_passes_and_fallback():
    """Input channels in several chunks (rows refilled, no ring), output blocks in several
    passes of the tile, both at once; rows wider than the kernels take (the im2col lanes)."""
    w8, w2 = QFormat(8, True), QFormat(2, True)
    layers = [
        conv(W4, A4, 11, in_c=70, out_c=8, hw=5, k=3, pad=1),  # 3 chunks
        conv(w8, A4, 12, in_c=6, out_c=80, hw=13, k=3, pad=1),  # 2 passes of 16 blocks
        conv(w2, QFormat(2, False), 13, in_c=64, out_c=48, hw=12, k=3, pad=1),  # both
        conv(W4, A4, 14, in_c=3, out_c=8, hw=70, k=1),  # 70 columns: the im2col lanes
    ]
    layers[3].x = layers[3].x[:, :2, :]  # 2 x 70 inputs (the layer stays small)
    return layers


def test_conv_chunks_passes_and_fallback(chosen):
    kernels = chosen["conv_chunks_passes_and_fallback"]
    assert kernels[1] == "mico_qconv2d_lanes_w8g2" and kernels[2] == "mico_qconv2d_lanes_w2g4"


W_FMTS = [QFormat(1, True), QFormat.for_bits(TERNARY, True), QFormat(2, True), W4,
          QFormat(8, True)]  # fmt: skip


@case
def conv_every_activation():
    """Each weight width against activations of 1..8 bits, unsigned, signed and asymmetric,
    on an odd 5 x 7 plane (pixel groups left partly empty); with saturating extremes."""
    layers = []
    for w_fmt in W_FMTS:
        out_c = 32 // w_fmt.bits
        for a_bits in range(1, 9):
            fmts = [QFormat(a_bits, False), QFormat(a_bits, True)]
            if 2 <= a_bits <= 8:
                fmts.append(QFormat.asymmetric(a_bits, (2**a_bits) // 3))
            for j, a_fmt in enumerate(fmts):
                layer = conv(w_fmt, a_fmt, 100 * a_bits + j, in_c=3, out_c=out_c, hw=5, k=3,
                             pad=1, extreme=j == 1 and a_bits % 2 == 0)  # fmt: skip
                layer.x = np.concatenate([layer.x, layer.x[:, :, :2]], axis=2)
                layers.append(layer)
    return layers


def test_conv_every_activation(chosen):
    kernels = chosen["conv_every_activation"]
    assert sum(k.startswith("mico_qconv2d_lanes") for k in kernels) >= 5 * 8


@case
def conv_stores():
    """The fused store (8-, 4-, 2-bit codes after a ReLU, a zero point) and its fallbacks:
    odd rows of 4-bit codes (not whole bytes), 3-bit and signed outputs, no ReLU, a single
    multiplier, multipliers that saturate."""
    layers = []
    outs = [QFormat(8, False), QFormat(4, False), QFormat(2, False), QFormat(3, False),
            QFormat(8, True), QFormat.asymmetric(8, 100)]  # fmt: skip
    for i, o_fmt in enumerate(outs):
        for hw, relu in ((8, True), (7, True), (8, False)):
            layers.append(conv(W4, A4, 200 + 10 * i + hw, in_c=5, out_c=8, hw=hw, k=3, pad=1,
                               o_fmt=o_fmt, relu=relu))  # fmt: skip
    extreme = conv(W4, A4, 300, in_c=7, out_c=16, hw=6, k=3, pad=1, extreme=True)
    one = conv(QFormat(2, True), QFormat(2, False), 301, in_c=7, out_c=16, hw=6, k=3, pad=1)
    one.m[:], one.shift[:] = one.m[0], one.shift[0]
    return [*layers, extreme, one]


def test_conv_stores(chosen):
    assert all(k.startswith("mico_qconv2d_lanes") for k in chosen["conv_stores"])


@case
def linear_blocks():
    """Linear layers whose blocks fill no group of 4 (or 2) blocks, several rows, inputs of
    odd length and of more than one chunk, every weight width, signed and unsigned codes."""
    layers = []
    for i, w_fmt in enumerate((QFormat(1, True), QFormat(2, True), W4, QFormat(8, True))):
        f = 32 // w_fmt.bits
        for j, (blocks, in_c, rows) in enumerate(((1, 37, 3), (3, 300, 1), (5, 64, 2),
                                                  (9, 130, 1))):  # fmt: skip
            for a_fmt in (QFormat(2, False), QFormat(4, True), QFormat(8, False)):
                layers.append(kernels_rv32.random_layer(
                    "linear", w_fmt, a_fmt, in_c=in_c, out_c=blocks * f, rows=rows,
                    seed=1000 + 100 * i + 10 * j + a_fmt.bits, extreme=j == 3,
                ))  # fmt: skip
    return layers


def test_linear_blocks(chosen):
    kernels = chosen["linear_blocks"]
    assert sum(k.startswith("mico_qlinear_lanes") for k in kernels) >= len(kernels) // 2


def test_lane_cost_picks_the_cheaper_width():
    """The estimate ranks what the kernels measure: W2A4 takes 8-bit lanes (flushes every 5
    taps) rather than 16-bit ones; W4A4 16-bit lanes; W8A8 none (the byte paths)."""
    assert lane_plan(QFormat(2, True), A4) == {"s": 8, "n": 5, "is_signed": 0}
    assert lane_plan(W4, A4)["s"] == 16  # type: ignore[index]
    assert lane_plan(QFormat(8, True), QFormat(8, False)) is None
    assert lane_cost(2, 4, 28, False) < lane_cost(4, 4, 291, False) < 2.0


@pytest.mark.skipif(not rv32.available(), reason="needs the rv32 toolchain and qemu")
def test_rv32_lanes_rows_bit_exact_and_cheaper():
    """On rv32imac the new paths (W4A4 conv by rows, W2A2 linear by 4 blocks a code) are
    bit-exact and take fewer instructions than the plain kernels."""
    c = conv(W4, A4, 400, in_c=16, out_c=16, hw=8, k=3, pad=1)
    fc = kernels_rv32.random_layer("linear", QFormat(2, True), QFormat(2, False), in_c=256,
                                   out_c=64, seed=401)  # fmt: skip
    for layer, results in zip((c, fc), kernels_rv32.run_layers([c, fc], "rv32"), strict=True):
        ref = layer.reference().ravel()
        (_, count, out), (_, plain_count, plain_out) = results
        assert np.array_equal(out, ref) and np.array_equal(plain_out, ref)
        assert count < plain_count
