"""W8A8 convolutions with few taps or 1x1 kernels (mico_qconv2d_narrow_s8 in mico_conv_narrow.c:
a network's first layer, pointwise layers) against the Python integer reference, through the C
program of benchmarks/kernels_rv32.py (one program for all layers): 1-3 input channels, kernels
1-7, pointwise layers of 8-64 channels, strides 1 and 2, padding, odd output channel counts and
pixel counts (partial tiles and patches), pointwise layers over patches and with their planes
read in place (more than 128 taps), signed and unsigned codes, extremes with saturating
multipliers, signed outputs without ReLU, small weights in 16-bit lanes (ternary, 2- and 4-bit
codes, lanes at their bound, shifts of 32 or less), and layers it hands on (shifts of 32 or
less with 8-bit weights, a weight table too large once the taps are padded to a multiple of
8), the edges of the 4 x 5 byte tile (every remainder of 5 pixels, two channel blocks, signed
codes with biases near the int32 limits), and the same on rv32 under qemu (its assembly)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from mico.codegen import emitters
from mico.codegen.emitters import NARROW_CONV, conv2d_kernel
from mico.quant.arithmetic import TERNARY, QFormat
from mico.targets import rv32
from tests.codegen.test_dwconv_lanes import kernels_rv32

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
TERNARY_FMT = QFormat.for_bits(TERNARY, True)


def _layer(in_c, out_c, hw, k, *, stride=1, pad=0, signed=True, seed=0, extreme=False,
           o_fmt=None, relu=True, w_fmt=None):  # fmt: skip
    return kernels_rv32.random_layer(
        "conv", w_fmt or QFormat(8, True), QFormat(8, signed), in_c=in_c, out_c=out_c, hw=hw,
        k=k, pad=pad, stride=stride, seed=seed, extreme=extreme, o_fmt=o_fmt, relu=relu,
    )  # fmt: skip


def _small_weights() -> list:
    """Layers whose weights take the 16-bit lanes (ternary, 2- and 4-bit codes widened to
    bytes, or 8-bit codes that stay small): chunks of 8 to 64 taps, every lane at its bound
    (extremes), shifts of 32 or less (the pre-shifted form, or the plain requantization when
    a bias is too large for it), signed codes, partial patches and channel quads."""
    w4, w2 = QFormat(4, True), QFormat(2, True)
    layers = [
        _layer(64, 64, (25, 5), 1, signed=False, w_fmt=w4, seed=30),
        _layer(64, 12, 5, 1, signed=False, w_fmt=TERNARY_FMT, seed=31),
        _layer(32, 7, 7, 1, w_fmt=w2, seed=32),  # signed codes
        _layer(16, 9, (3, 7), 1, signed=False, w_fmt=w4, extreme=True, seed=33),
        _layer(48, 5, 6, 1, signed=False, w_fmt=w4, extreme=True, relu=False,
               o_fmt=QFormat(8, True), seed=34),
        _layer(24, 6, 9, 1, w_fmt=TERNARY_FMT, relu=False, o_fmt=QFormat(8, True), seed=35),
    ]  # fmt: skip
    for layer in layers[3:5]:  # activations at their limits too: lanes at their bound
        layer.x[:] = np.where(layer.x > 0, layer.a_fmt.qmax, layer.a_fmt.qmin)
    small = _layer(3, 10, 9, 3, pad=1, seed=36)  # a 3x3 W8A8 layer of small weights
    small.weight = np.clip(small.weight, -9, 9)
    layers.append(small)
    return layers


def _byte_tile_edges() -> list:
    """Layers at the edges of the 4-channel x 5-pixel byte tile (mico_nw_q5): every remainder
    of a patch's pixels past whole tiles (planes of 1 to 24 pixels), more channels than a block
    (70: two blocks), DS-CNN's shapes (a 10 x 4 kernel of stride 2 on one signed plane, the
    pointwise 64 -> 64 on 25 x 5), signed codes at their limits with biases near the int32
    limits (their sums start at bias - 128 * the weight sum: past int32 on the way), signed
    outputs without ReLU."""
    layers = [
        _layer(8, 4, (1, 1), 1, signed=False, seed=40),  # one pixel
        _layer(12, 8, (2, 2), 1, signed=False, seed=41),  # 4 pixels: a partial tile only
        _layer(16, 12, (3, 7), 1, signed=False, seed=42),  # 21: a patch and 1
        _layer(9, 5, (2, 11), 1, seed=43),  # 22
        _layer(20, 16, (23, 1), 1, signed=False, seed=44),  # 23
        _layer(7, 8, (4, 6), 1, signed=False, seed=45),  # 24
        _layer(56, 70, 5, 1, signed=False, seed=46),  # two blocks of channels
        _layer(64, 64, (25, 5), 1, signed=False, seed=47),  # DS-CNN's pointwise layers
        _layer(32, 8, (5, 3), 1, extreme=True, seed=48),
        _layer(2, 12, 7, 3, pad=1, extreme=True, seed=49),  # 18 taps, signed codes
        _layer(40, 9, 6, 1, signed=False, extreme=True, relu=False,
               o_fmt=QFormat(8, True), seed=50),
    ]  # fmt: skip
    first = _layer(1, 64, (49, 10), 4, stride=2, pad=1, seed=51)  # 10 x 4 kernel (DS-CNN)
    first.weight = np.random.default_rng(52).integers(-127, 128, size=(64, 1, 10, 4))
    layers.append(first)
    for layer in layers[8:10]:  # the largest sums: biases at the limit, pushed past it
        layer.bias[:] = np.where(layer.bias < 0, -(2**31) + 2**20, 2**31 - 1 - 2**20)
    return layers


def _narrow_outputs() -> list:
    """Outputs of fewer than 8 bits (an 8-bit layer feeding a narrower one, as mixed plans
    have: staged as bytes per patch, then packed): unsigned 1..7 bits, signed 2..7 without a
    ReLU, on the byte tiles (DS-CNN's pointwise and first layers, odd channels and pixels so
    that channel planes start inside a byte, two channel blocks) and on the small weights'
    lanes (per-channel multipliers with shifts of 32 or less, the plain requantization: each
    quad's own channels), and a layer of more taps than a patch (handed on)."""
    w4 = QFormat(4, True)
    layers = []
    for bits in range(1, 8):
        layers.append(_layer(64, 64, (25, 5), 1, signed=False, o_fmt=QFormat(bits, False),
                             seed=60 + bits))  # fmt: skip
        if bits > 1:
            layers.append(_layer(37, 13, (3, 7), 1, relu=False, o_fmt=QFormat(bits, True),
                                 seed=70 + bits))  # fmt: skip
    first = _layer(1, 64, (49, 10), 4, stride=2, pad=1, o_fmt=QFormat(4, False), seed=80)
    first.weight = np.random.default_rng(81).integers(-127, 128, size=(64, 1, 10, 4))
    shifted = _layer(64, 12, 5, 1, signed=False, w_fmt=w4, o_fmt=QFormat(3, False), seed=82)
    shifted.shift = np.full_like(shifted.shift, 12)  # sums past 2^11: not pre-shifted
    shifted.m = np.arange(len(shifted.m)) % 5 + 1  # every channel its own multiplier
    layers += [
        first,
        _layer(56, 70, 5, 1, signed=False, o_fmt=QFormat(2, False), seed=83),  # two blocks
        _layer(24, 6, 9, 1, w_fmt=TERNARY_FMT, relu=False, o_fmt=QFormat(4, True), seed=84),
        shifted,
    ]
    return layers


def _large(in_bits, groups, in_c, out_c, *args, **kwargs):
    """The generator's choice for a large layer, of any channel count: the kernel's own
    cases include patched layers of fewer channels than the generator sends it."""
    out = max(out_c, emitters.NARROW_MIN_CHANNELS)
    return conv2d_kernel(in_bits, groups, in_c, out, *args, **{**kwargs, "macs": 10**9})


def _bytes(*args, in_c=None, weight=None, **kwargs):
    """widened_to_s8 without the layer's channels: small weights on 8-bit codes take the bytes
    (the generator sends the pointwise layers of at most 64 channels to the lanes, where they
    cost less: tests/codegen/test_pw_choice.py), so that their path here is tested."""
    return emitters.widened_to_s8(*args, **kwargs)


def test_narrow_conv_bit_exact(monkeypatch):
    """Every layer equals the reference on the chosen and the plain path; the narrow path is
    chosen for the layers it takes (the shift <= 32 one too: the kernel hands it on). The
    harness's chosen path does not pass the layer's size, the generator's does: here the
    layers count as large enough."""
    monkeypatch.setattr(kernels_rv32, "conv2d_kernel", _large)
    monkeypatch.setattr(kernels_rv32, "widened_to_s8", _bytes)
    layers = [
        _layer(1, 64, 12, 3, stride=2, pad=1, seed=1),
        _layer(1, 5, 7, 5, pad=2, signed=False, seed=2),
        _layer(2, 7, 9, 3, stride=2, seed=3),
        _layer(3, 16, 6, 3, pad=1, seed=4),
        _layer(3, 4, 5, 1, seed=5),
        _layer(1, 9, 11, 7, stride=2, pad=3, seed=6),  # 49 taps
        _layer(2, 3, 4, 3, pad=1, extreme=True, relu=False, o_fmt=QFormat(8, True), seed=7),
        _layer(1, 6, 8, 3, extreme=True, signed=False, seed=8),
        _layer(3, 5, 7, 3, relu=False, o_fmt=QFormat(8, True), seed=9),
        _layer(1, 8, 5, 3, pad=1, seed=11),  # 25 pixels: a patch of 9, its last quad partial
        _layer(2, 12, 11, 3, pad=1, signed=False, seed=12),  # 121 pixels
        # pointwise (the input planes read in place): odd pixel counts, channels, stride 2
        _layer(8, 12, 5, 1, signed=False, seed=13),
        _layer(20, 6, 7, 1, seed=14),
        _layer(64, 64, 6, 1, signed=False, seed=15),
        _layer(16, 5, 9, 1, stride=2, seed=16),
        _layer(9, 7, 3, 1, relu=False, o_fmt=QFormat(8, True), extreme=True, seed=17),
        _layer(24, 8, 8, 1, seed=18),  # 64 pixels: whole patches of 16
        _layer(130, 8, 5, 1, signed=False, seed=19),  # more taps than a patch: planes in place
        _layer(57, 67, 4, 1, signed=False, seed=20),  # taps padded to 64: the table too large
    ]
    layers += _small_weights() + _byte_tile_edges() + _narrow_outputs()
    planes = _layer(130, 9, 5, 1, signed=False, o_fmt=QFormat(4, False), seed=85)
    layers.append(planes)  # (more taps than a patch, outputs packed: handed on)
    small_shift = _layer(1, 4, 6, 3, seed=10)
    small_shift.shift = np.minimum(small_shift.shift, 30)
    small_shift.m = np.minimum(small_shift.m, 2**29)
    layers.append(small_shift)
    chosen = []
    for layer, results in zip(layers, kernels_rv32.run_layers(layers), strict=True):
        ref = layer.reference().ravel()
        for kernel, _, out in results:
            assert np.array_equal(out, ref), (
                kernel,
                layer.weight.shape,
                np.flatnonzero(out != ref)[:8],
            )
        chosen.append(results[0][0])
    assert all(k == NARROW_CONV for k in chosen), chosen


@pytest.mark.skipif(not rv32.available(), reason="needs the rv32 toolchain and qemu")
def test_narrow_conv_rv32_bit_exact(monkeypatch):
    """On rv32imac (qemu), where the byte tile is the assembly of mico_nw_q5_rv32: the edge
    layers and a few of the others equal the reference."""
    monkeypatch.setattr(kernels_rv32, "conv2d_kernel", _large)
    monkeypatch.setattr(kernels_rv32, "widened_to_s8", _bytes)
    layers = [
        *_byte_tile_edges(),
        *_narrow_outputs(),
        _layer(1, 64, 12, 3, stride=2, pad=1, seed=1),
        _layer(3, 5, 7, 3, relu=False, o_fmt=QFormat(8, True), seed=9),
        _layer(130, 8, 5, 1, signed=False, seed=19),  # planes in place
        _small_weights()[0],
    ]
    results = kernels_rv32.run_layers(layers, "rv32", ("chosen",))
    for layer, ((kernel, _, out),) in zip(layers, results, strict=True):
        ref = layer.reference().ravel()
        assert kernel == NARROW_CONV
        assert np.array_equal(out, ref), (layer.weight.shape, np.flatnonzero(out != ref)[:8])


def test_narrow_conv_choice():
    """The generator's choice: W8A8, groups 1, few input channels and taps, large enough."""
    assert conv2d_kernel(8, 1, 1, 64, (10, 4), 1, w_bits=8, macs=320_000) == NARROW_CONV
    assert conv2d_kernel(8, 1, 3, 16, (3, 3), 1, w_bits=8, macs=100_000) == NARROW_CONV
    assert conv2d_kernel(8, 1, 8, 16, (3, 3), 1, w_bits=8, macs=100_000) != NARROW_CONV
    assert conv2d_kernel(8, 1, 64, 64, (1, 1), 1, w_bits=8, macs=512_000) == NARROW_CONV
    assert conv2d_kernel(8, 1, 128, 64, (1, 1), 1, w_bits=8, macs=512_000) != NARROW_CONV
    assert conv2d_kernel(8, 1, 1, 64, (9, 9), 1, w_bits=8, macs=100_000) != NARROW_CONV
    assert conv2d_kernel(8, 1, 1, 64, (3, 3), 1, w_bits=4, macs=100_000) != NARROW_CONV
    assert conv2d_kernel(8, 1, 1, 8, (3, 3), 1, w_bits=8, macs=1_000) != NARROW_CONV
    # a patch of few output channels does not repay building it (LeNet-5's first conv)
    assert conv2d_kernel(8, 1, 1, 6, (5, 5), 1, w_bits=8, macs=86_400) != NARROW_CONV
    assert conv2d_kernel(8, 1, 2, 8, (3, 3), 1, w_bits=8, macs=86_400) == NARROW_CONV
    assert conv2d_kernel(8, 1, 32, 4, (1, 1), 1, w_bits=8, macs=86_400) == NARROW_CONV
