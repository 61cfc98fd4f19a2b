"""Depthwise 3x3 in pixel lanes (mico_dwconv.c, mico.codegen.dwconv_plan) against the Python
integer arithmetic, through the C program of benchmarks/kernels_rv32.py: a grid of weight and
activation widths (ternary, signed activations, odd widths), strides 1 and 2, padding 0 and 1,
plane sizes that fill no chunk or several, code extremes with saturating multipliers; the
lane-width bound; the generator's choice end to end; one case on rv32 under qemu."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from mico.codegen.dwconv_plan import DW_LANE_WIDTHS, dw_lane_plan, window_range
from mico.quant.arithmetic import TERNARY, QFormat
from mico.targets import rv32
from tests.benchmark_modules import load_benchmark
from tests.codegen.dscnn_graph import check_sanitized_dscnn

kernels_rv32 = load_benchmark("kernels_rv32")

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

#: (weight bits, activation bits, activations signed)
PAIRS = [(8, 8, False), (4, 4, False), (2, 2, False), (1, 1, False), (TERNARY, 8, False),
         (TERNARY, 4, False), (8, 4, False), (4, 8, False), (4, 2, False), (4, 4, True),
         (2, 3, True), (3, 5, False), (8, 8, True), (2, 6, False), (1, 7, True)]  # fmt: skip


def _layer(w_bits, a_bits, signed, *, h, w, stride, pad, seed, extreme=False, o_fmt=None):
    w_fmt, a_fmt = QFormat.for_bits(w_bits, True), QFormat.for_bits(a_bits, signed)
    layer = kernels_rv32.random_layer(
        "conv", w_fmt, a_fmt, in_c=3, out_c=3, hw=h, k=3, pad=pad, stride=stride, groups=3,
        seed=seed, extreme=extreme, o_fmt=o_fmt, relu=not extreme,
    )  # fmt: skip
    if w != h:  # a plane of h x w: columns repeated or cut
        layer.x = np.resize(layer.x, (3, h, w)) if w > h else layer.x[:, :, :w]
    return layer


def check(layers, target: str = "host") -> list[str]:
    """Every layer's chosen and plain paths equal the reference exactly; the chosen kernels."""
    chosen = []
    for layer, results in zip(layers, kernels_rv32.run_layers(layers, target), strict=True):
        ref = layer.reference().ravel()
        for kernel, _, out in results:
            assert np.array_equal(out, ref), (kernel, np.flatnonzero(out != ref)[:10])
        chosen.append(results[0][0])
    return chosen


def _grid(part) -> list:
    """Every pair of widths (a third of them per part) over planes 5x5 .. 17x35 (one partial
    chunk, several, an odd last one), stride 1 and 2, padding 0 and 1."""
    geometry = [((5, 5), 1, 1), ((6, 17), 2, 1), ((9, 35), 1, 0), ((17, 12), 2, 0),
                ((7, 16), 1, 1), ((8, 33), 2, 1)]  # fmt: skip
    return [
        _layer(w_bits, a_bits, signed, h=h, w=w, stride=s, pad=p, seed=i * 7 + h + w)
        for i, (w_bits, a_bits, signed) in enumerate(PAIRS[part::3])
        for (h, w), s, p in geometry
    ]


EXTREMES = [(4, 4, False), (2, 2, False), (4, 4, True), (8, 8, True)]


def _extremes(w_bits, a_bits, signed) -> list:
    """Codes at their limits (lanes filled to their bound), saturating multipliers and biases
    near the int32 limits without ReLU (the sums requantized apart); signed and 1-bit outputs;
    a row too wide for the ring (the plain kernel takes it)."""
    return [
        _layer(w_bits, a_bits, signed, h=7, w=13, stride=1, pad=1, seed=1, extreme=True,
               o_fmt=QFormat(8, True)),
        _layer(w_bits, a_bits, signed, h=6, w=9, stride=2, pad=1, seed=2, extreme=True,
               o_fmt=QFormat(3, True)),
        _layer(w_bits, a_bits, signed, h=5, w=11, stride=1, pad=1, seed=3,
               o_fmt=QFormat(1, False)),
        _layer(w_bits, a_bits, signed, h=3, w=700, stride=1, pad=1, seed=4),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def chosen() -> dict:
    """The grid and the extremes in one program (chosen and plain paths, each equal to the
    reference); case key -> the chosen kernel of each of its layers."""
    cases = {("grid", part): _grid(part) for part in range(3)}
    cases.update({("extremes", e): _extremes(*e) for e in EXTREMES})
    kernels = iter(check([layer for layers in cases.values() for layer in layers]))
    return {key: [next(kernels) for _ in layers] for key, layers in cases.items()}


@pytest.mark.parametrize("part", range(3))
def test_grid_of_shapes_strides_and_padding(chosen, part):
    """The lanes path is taken and bit-exact over the grid."""
    kernels = chosen[("grid", part)]
    # the plan keeps the plain kernel where it estimates that one cheaper (8-bit codes in and
    # out take the byte path, mico_qconv2d_dw8_f*)
    assert sum(k.startswith("mico_qconv2d_dw") for k in kernels) >= len(kernels) // 2


def test_one_pixel_lanes_every_width(monkeypatch):
    """The one-pixel form (s = 32) forced for 1-, 2-, 4- and 8-bit codes, signed or not,
    strides 1 and 2, padding 0 and 1 (its own row reading and 8-bit output paths)."""
    monkeypatch.setattr(kernels_rv32, "dw_lane_plan", lambda *a, **k: {"s": 32, "q": 0})
    layers = [
        _layer(w_bits, a_bits, signed, h=h, w=h, stride=s, pad=p, seed=h + a_bits)
        for w_bits, a_bits, signed in ((4, 4, False), (4, 4, True), (2, 2, False), (2, 2, True),
                                       (1, 1, False), (8, 2, True), (8, 8, False))
        for s, p, h in ((1, 1, 7), (2, 1, 9), (1, 0, 33), (2, 0, 10))
    ]  # fmt: skip
    assert all(k == "mico_qconv2d_dwl_s32" for k in check(layers))


@pytest.mark.parametrize(("w_bits", "a_bits", "signed"), EXTREMES)
def test_extremes_wide_rows_and_output_formats(chosen, w_bits, a_bits, signed):
    assert chosen[("extremes", (w_bits, a_bits, signed))][0].startswith("mico_qconv2d_dw")


def test_lane_width_bound():
    """The chosen width holds every channel's span of window sums (exactly, from the
    weights), and one more weight unit would not fit a narrower width than needed."""
    a2 = QFormat(2, False)
    w = np.ones((4, 1, 3, 3), dtype=np.int64)  # 9 taps of +1: span 9 * 3 = 27
    assert window_range(w, a2) == 27
    plan = dw_lane_plan(w, a2, (16, 16), (16, 16), (1, 1), (1, 1), (1, 1))
    assert plan is not None and 2 ** plan["s"] - 1 >= 27
    signed = QFormat(4, True)  # codes in [-7, 7]: span 2 * 7 * sum|w|
    w4 = np.full((2, 1, 3, 3), -7, dtype=np.int64)
    assert window_range(w4, signed) == 2 * 7 * 63
    plan = dw_lane_plan(w4, signed, (8, 8), (8, 8), (1, 1), (1, 1), (1, 1))
    assert plan is not None and plan["s"] in DW_LANE_WIDTHS and 2 ** plan["s"] > 2 * 7 * 63
    # what the kernel does not take
    for args in (
        (QFormat(1, True), (1, 1), (1, 1), (1, 1)),  # binary activations
        (a2, (1, 3), (1, 1), (1, 1)),  # stride 3
        (a2, (1, 1), (1, 2), (1, 1)),  # padding 2
        (a2, (1, 1), (1, 1), (2, 2)),  # dilation
    ):
        fmt, stride, pad, dil = args
        assert dw_lane_plan(w, fmt, (16, 16), (16, 16), stride, pad, dil) is None


@pytest.mark.skipif(not rv32.available(), reason="needs the rv32 toolchain and qemu "
                    "(apt-get install gcc-riscv64-unknown-elf picolibc-riscv64-unknown-elf "
                    "qemu-system-misc)")  # fmt: skip
def test_rv32_bit_exact_and_fewer_instructions():
    """On rv32imac: W8A8 and W2A2 depthwise bit-exact, both cheaper than the plain kernel and
    W2A2 cheaper than W8A8."""
    layers = [_layer(b, b, False, h=16, w=16, stride=1, pad=1, seed=5) for b in (8, 2)]
    results = kernels_rv32.run_layers(layers, "rv32")
    counts = []
    for layer, ((kernel, n, out), (_, n_plain, out_plain)) in zip(layers, results, strict=True):
        ref = layer.reference().ravel()
        assert kernel.startswith("mico_qconv2d_dw")
        assert np.array_equal(out, ref) and np.array_equal(out_plain, ref)
        assert n < n_plain
        counts.append(n)
    assert counts[1] < counts[0]


def test_generated_dscnn_takes_pixel_lanes(tmp_path):
    """End to end: dscnn at W2A2 emits the bit-sliced path (mico_qconv2d_dwbs_s1: 2-bit codes
    in and out, ternary weights, stride 1, padding 1) for its depthwise layers and the program
    (ASan + UBSan) equals the Python reference."""
    check_sanitized_dscnn(2, 2, "mico_qconv2d_dwbs_s1(", tmp_path)
