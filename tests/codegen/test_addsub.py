"""The sign-weight convolutions (mico_qconv2d_addsub2 / _addsub1, mico_conv_addsub.c) against
the Python integer arithmetic through the C program of benchmarks/kernels_rv32.py: ternary and
binary weights on activation codes of every width (signed, unsigned, with a zero point), strides,
dilation, padding, tap counts that take several chunks, channel counts past a tile's block,
pixel counts that fill no tile, codes at their limits; a -2 code (not a sign) taken element by
element; which layers the generator gives the path; one case on rv32 under qemu."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from mico.codegen import addsub_plan
from mico.hw.layers import LayerShape
from mico.hw.opshape import emitted_kernel, layer_node
from mico.quant.arithmetic import TERNARY, QFormat
from mico.targets import rv32
from tests.benchmark_modules import load_benchmark

kernels_rv32 = load_benchmark("kernels_rv32")

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

TERN, BIN = QFormat.for_bits(TERNARY, True), QFormat(1, True)


def check(layers, target: str = "host") -> None:
    """The addsub kernel and the plain path of every layer (one program) equal the reference."""
    runs = kernels_rv32.run_layers(layers, target, ("addsub", "plain"))
    assert_exact(zip(layers, runs, strict=True))


def assert_exact(runs) -> None:
    """Each (layer, its paths' results): every path equals the reference, the first is the
    layer's sign-weight kernel."""
    for layer, results in runs:
        ref = layer.reference().ravel()
        for kernel, _, out in results:
            assert np.array_equal(out, ref), (kernel, np.flatnonzero(out != ref)[:10])
        assert results[0][0] == addsub_plan.KERNELS[layer.w_fmt.bits]


def _layer(w_fmt, a_fmt, seed, **kw):
    spec = dict(in_c=5, out_c=6, hw=(5, 7), k=3, pad=1)
    spec.update(kw)
    return kernels_rv32.random_layer("conv", w_fmt, a_fmt, seed=seed, **spec)


def _formats(w_fmt) -> list:
    """Codes of 1 to 8 bits, unsigned and signed (negative codes: words of values modulo
    2^32), on 5x7 planes (the patch: 16-pixel tiles left partly empty, pixel pairs across
    rows) and 6x8 planes (words from input rows)."""
    return [
        _layer(w_fmt, QFormat(bits, signed), seed=bits * 2 + signed, hw=hw)
        for bits in range(1, 9)
        for signed in (False, True)
        for hw in ((5, 7), (6, 8))
    ]


def _zero_point() -> list:
    """Unsigned codes with a zero point (values from -zero to 255 - zero)."""
    layers = [
        _layer(TERN, QFormat(8, False, zero=z), seed=z, hw=hw)
        for z in (1, 77, 128, 255)
        for hw in ((5, 7), (6, 8))
    ]
    return layers + [_layer(BIN, QFormat(5, False, zero=9), seed=3, hw=hw)
                     for hw in ((5, 7), (5, 6))]  # fmt: skip


def _geometry(w_fmt) -> list:
    """Stride 2 with padding, dilation 2, a 1x1 kernel of 130 channels (three chunks), a 5x5
    kernel (rows of a chunk balanced), 70 output channels (two blocks of the tile), 5x1 and
    1x40 planes, no padding, rows of 40 (tiles of 16, 16 and 8), several chunks of rows."""
    a8 = QFormat(8, False)
    return [
        _layer(w_fmt, a8, 1, in_c=7, hw=(9, 8), stride=2),
        _layer(w_fmt, a8, 2, in_c=4, hw=(9, 9), dil=2, pad=2),
        _layer(w_fmt, a8, 3, in_c=130, hw=(3, 6), k=1, pad=0),
        _layer(w_fmt, a8, 4, in_c=6, hw=(8, 8), k=5, pad=2),
        _layer(w_fmt, a8, 5, in_c=9, out_c=70, hw=(6, 5)),
        _layer(w_fmt, QFormat(6, True), 6, in_c=3, hw=(5, 1), k=1, pad=0),
        _layer(w_fmt, a8, 7, in_c=3, hw=(1, 40), k=1, pad=0),
        _layer(w_fmt, a8, 8, in_c=8, hw=(6, 6), pad=0),
        _layer(w_fmt, QFormat(8, True), 9, in_c=6, hw=(3, 40)),
        _layer(w_fmt, a8, 10, in_c=5, hw=(7, 44), stride=2, k=5, pad=2),
        _layer(w_fmt, a8, 11, in_c=30, hw=(4, 10), dil=2, pad=2),
    ]


def _limits(w_fmt, a_fmt, hw) -> list:
    """Every code and weight at an extreme (the 16-bit lanes summed to their bound over a
    chunk of 64 taps), saturating multipliers, biases near the int32 limits; and all weights
    +1, all -1 and all zero."""
    layers = [
        _layer(w_fmt, a_fmt, seed, in_c=40, hw=hw, extreme=extreme, relu=False,
               o_fmt=QFormat(8, True))
        for seed, extreme in ((1, True), (2, True), (3, False))
    ]  # fmt: skip
    for value in (1, -1, 0):
        if value == 0 and w_fmt.bits == 1:
            continue  # binary weights have no zero
        layer = _layer(w_fmt, a_fmt, 4, in_c=40, hw=hw, extreme=True, relu=False,
                       o_fmt=QFormat(8, True))  # fmt: skip
        layer.weight[:] = value
        layer.x[:] = a_fmt.qmax if value >= 0 else a_fmt.qmin
        layers.append(layer)
    return layers


W_FMTS = [TERN, BIN]
A8S = [QFormat(8, False), QFormat(8, True)]
HWS = [(4, 5), (4, 6)]


@pytest.fixture(scope="module")
def host_runs() -> dict:
    """Every host case below in one program (building the kernels is most of a case's cost):
    case key -> [(layer, its paths' results)]."""
    cases = {("formats", str(w)): _formats(w) for w in W_FMTS}
    cases[("zero_point",)] = _zero_point()
    cases.update({("geometry", str(w)): _geometry(w) for w in W_FMTS})
    cases.update({("limits", str(w), str(a), hw): _limits(w, a, hw)
                  for w in W_FMTS for a in A8S for hw in HWS})  # fmt: skip
    layers = [layer for group in cases.values() for layer in group]
    results = kernels_rv32.run_layers(layers, "host", ("addsub", "plain"))
    runs = iter(zip(layers, results, strict=True))
    return {key: [next(runs) for _ in group] for key, group in cases.items()}


@pytest.mark.parametrize("w_fmt", W_FMTS, ids=str)
def test_every_activation_format(host_runs, w_fmt):
    assert_exact(host_runs[("formats", str(w_fmt))])


def test_zero_point_codes(host_runs):
    assert_exact(host_runs[("zero_point",)])


@pytest.mark.parametrize("w_fmt", W_FMTS, ids=str)
def test_geometry(host_runs, w_fmt):
    assert_exact(host_runs[("geometry", str(w_fmt))])


@pytest.mark.parametrize("hw", HWS, ids=str)
@pytest.mark.parametrize("w_fmt", W_FMTS, ids=str)
@pytest.mark.parametrize("a_fmt", A8S, ids=str)
def test_codes_at_their_limits(host_runs, w_fmt, a_fmt, hw):
    assert_exact(host_runs[("limits", str(w_fmt), str(a_fmt), hw)])


def test_minus_two_codes_go_element_by_element(monkeypatch):
    """2-bit weight fields holding -2 (not signs; mico's own packing refuses them, a
    hand-made layer may not): the kernel takes the layer element by element, still exact; the
    generator does not choose the path for them."""
    real_pack = kernels_rv32.pack

    def pack_fields(codes, fmt):  # two's complement fields, -2 included
        if fmt == QFormat(2, True):
            return real_pack(np.asarray(codes) & 3, QFormat(2, False))
        return real_pack(codes, fmt)

    monkeypatch.setattr(kernels_rv32, "pack", pack_fields)
    layer = _layer(TERN, QFormat(8, False), 9, in_c=12)
    layer.weight.ravel()[::7] = -2
    check([layer])
    assert addsub_plan.addsub_kernel(QFormat(2, True), 8, 108, 1, True, layer.weight) is None


@pytest.mark.parametrize(
    "w_fmt, in_bits, taps, groups, lanes, expected",
    [
        (TERN, 8, 144, 1, True, "mico_qconv2d_addsub2"),
        (BIN, 8, 144, 1, True, "mico_qconv2d_addsub1"),
        (BIN, 6, 32, 1, False, "mico_qconv2d_addsub1"),  # no lanes: any number of taps
        (TERN, 8, 32, 1, True, None),  # few taps: the lanes
        (TERN, 4, 144, 1, True, None),  # narrow codes: the lanes
        (TERN, 8, 144, 2, True, None),  # groups
        (QFormat(4, True), 8, 144, 1, True, None),
        (QFormat(2, False), 8, 144, 1, True, None),
        (None, 8, 144, 1, True, None),
    ],
)
def test_choice_rule(w_fmt, in_bits, taps, groups, lanes, expected):
    assert addsub_plan.addsub_kernel(w_fmt, in_bits, taps, groups, lanes) == expected


@pytest.mark.parametrize(
    "out_size, k_w, fill, lanes, expected",
    [
        ((16, 16), 3, 1.0, True, "mico_qconv2d_addsub2"),
        ((1, 25), 3, 25 / 32, True, "mico_qconv2d_addsub2"),  # odd: raster tiles 16 + 9
        ((1, 20), 3, 20 / 32, True, None),  # tiles of a row: 16 + 4, the lanes keep it
        ((1, 20), 3, 20 / 32, False, "mico_qconv2d_addsub2"),  # no lanes: the sums anyway
        ((4, 5), 1, 20 / 32, True, None),
        ((8, 6), 3, 6 / 16, True, None),  # rows of 6 in tiles of 16
    ],
)
def test_tiles_filled_enough(out_size, k_w, fill, lanes, expected):
    """Where the lanes also take the layer, the path needs its tiles' pixel lanes filled to
    MIN_FILL (a 1-D layer of 20 outputs runs slower on it than on the lanes)."""
    assert addsub_plan.tile_fill(out_size, k_w) == pytest.approx(fill)
    kernel = addsub_plan.addsub_kernel(TERN, 8, 96, 1, lanes, None, out_size, k_w)
    assert kernel == expected


@pytest.mark.parametrize(
    "w_bits, a_bits, kernel, expected",
    [
        (TERNARY, 8, (3, 3), "mico_qconv2d_addsub2"),
        (1, 8, (3, 3), "mico_qconv2d_sign_lut"),  # whole bytes a channel: test_sign_lut.py
        (TERNARY, 4, (3, 3), None),  # 4-bit codes keep the lanes
        (8, 8, (3, 3), None),
    ],
)
def test_generator_emits_the_path(w_bits, a_bits, kernel, expected):
    """The code generator calls the sign-weight kernel for a 3x3 conv of 32 -> 32 channels of
    ternary weights on 8-bit codes (binary ones: the sign tables), and keeps the other paths
    otherwise."""
    shape = LayerShape("conv", "conv", 32, 32, kernel, (1, 1), 1, (16, 16), (16, 16), w_bits,
                       a_bits)  # fmt: skip
    called, _, _ = emitted_kernel(layer_node(shape, False, 8))
    if expected is None:
        assert not called.startswith("mico_qconv2d_addsub")
    else:
        assert called == expected


@pytest.mark.skipif(not rv32.available(), reason="needs the rv32 toolchain and qemu")
def test_rv32_bit_exact():
    layers = [
        _layer(TERN, QFormat(8, False), 11, in_c=9, hw=(6, 7)),
        _layer(BIN, QFormat(8, True), 12, in_c=9, hw=(6, 7), stride=2),
    ]
    check(layers, "rv32")


def test_kernel_rows_longer_than_a_chunk_are_refused():
    """A kernel row longer than a chunk (MAX_K_W taps) would go element by element in the C
    (m5's first layer: a 1-D kernel of 80 taps at stride 16, 196 instructions per MAC there):
    the path refuses it, and the generator gives m5's layer another kernel."""
    assert addsub_plan.addsub_kernel(TERN, 8, 80, 1, False, None, (1, 1000), 80) is None
    assert addsub_plan.addsub_kernel(TERN, 8, 64, 1, False, None, (1, 1000), 64) is not None
    shape = LayerShape("conv", "conv1d", 1, 32, (1, 80), (1, 16), 1, (1, 16000), (1, 996),
                       TERNARY, 8)  # fmt: skip
    called, _, _ = emitted_kernel(layer_node(shape, True, 8))
    assert not called.startswith("mico_qconv2d_addsub"), called
