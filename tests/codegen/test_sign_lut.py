"""The sign tables (mico_qconv2d_sign_lut / mico_qlinear_sign_lut, mico_sign_lut.c): binary
weights on 2- to 8-bit codes by table lookup, against the Python integer arithmetic through the
C program of benchmarks/kernels_rv32.py. Every activation width (signed, unsigned, zero points),
strides, dilation, kernels of 1 to 8 columns, chunks of taps, channel counts past a block, pixel
counts that fill no four-pixel group, linear layers of one to five rows; codes and lanes at their
limits, multipliers above and below 2^-1 (mico_rq_run_fast's two loops) and saturating ones;
layers the tables do not take (weights not in whole bytes a channel, kernel rows wider than a
chunk) handed on, still exact; which layers the generator gives the path; one case on rv32."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from mico.codegen import sign_lut_plan
from mico.hw.layers import LayerShape
from mico.hw.opshape import emitted_kernel, layer_node
from mico.quant.arithmetic import TERNARY, QFormat
from mico.targets import rv32
from tests.benchmark_modules import load_benchmark

kernels_rv32 = load_benchmark("kernels_rv32")

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

BIN = QFormat(1, True)
A8 = QFormat(8, False)
KERNELS = (sign_lut_plan.CONV_KERNEL, sign_lut_plan.LINEAR_KERNEL)


def assert_exact(runs) -> None:
    """Each (layer, its paths' results): every path equals the reference, the first called the
    sign tables' entry point."""
    for layer, results in runs:
        ref = layer.reference().ravel()
        for kernel, _, out in results:
            assert np.array_equal(out, ref), (kernel, np.flatnonzero(out != ref)[:10])
        assert results[0][0] in KERNELS


def _conv(a_fmt, seed, **kw):
    spec = dict(in_c=8, out_c=6, hw=(5, 7), k=3, pad=1)
    spec.update(kw)
    return kernels_rv32.random_layer("conv", BIN, a_fmt, seed=seed, **spec)


def _linear(a_fmt, seed, in_c=136, out_c=70, rows=1, **kw):
    return kernels_rv32.random_layer("linear", BIN, a_fmt, seed=seed, in_c=in_c, out_c=out_c,
                                     rows=rows, **kw)  # fmt: skip


def _formats() -> list:
    """Codes of 2 to 8 bits, unsigned and signed (negative codes: words of the values modulo
    2^32), on 5x7 planes (35 pixels: a last group of three) and 6x8 planes; 72 taps a channel
    (chunks of 48 and 24)."""
    return [
        _conv(QFormat(bits, signed), seed=bits * 2 + signed, hw=hw)
        for bits in range(2, 9)
        for signed in (False, True)
        for hw in ((5, 7), (6, 8))
    ]


def _zero_point() -> list:
    """Unsigned codes with a zero point (values from -zero to 2^bits - 1 - zero)."""
    convs = [_conv(QFormat(8, False, zero=z), seed=z, hw=hw) for z in (1, 77, 128, 255)
             for hw in ((5, 7), (4, 4))]  # fmt: skip
    return [*convs, _linear(QFormat(5, False, zero=9), seed=3, rows=3),
            _linear(QFormat(8, False, zero=200), seed=4, rows=2)]  # fmt: skip


def _geometry() -> list:
    """Stride 2, dilation 2, 1x1 kernels of 136 channels (three chunks of 64, 64, 8), 5x5 (chunks
    of 40 taps), 7x7 (56), 8x8 (64) and 1x8 kernels, 70 output channels (three blocks of 32),
    1x40 and 3x1 planes, no padding, a single output pixel."""
    return [
        _conv(A8, 1, in_c=8, hw=(9, 8), stride=2),
        _conv(A8, 2, in_c=8, hw=(9, 9), dil=2, pad=2),
        _conv(A8, 3, in_c=136, hw=(3, 6), k=1, pad=0),
        _conv(A8, 4, in_c=8, hw=(8, 8), k=5, pad=2),
        _conv(QFormat(6, True), 5, in_c=8, hw=(9, 9), k=7, pad=3),
        _conv(A8, 6, in_c=8, hw=(9, 10), k=8, pad=0),
        _conv(A8, 7, in_c=16, out_c=70, hw=(6, 5)),
        _conv(A8, 8, in_c=8, hw=(1, 40), k=1, pad=0),
        _conv(QFormat(4, False), 9, in_c=24, hw=(3, 1), k=1, pad=0),
        _conv(A8, 10, in_c=16, hw=(3, 3), pad=0),
        _conv(QFormat(8, True), 11, in_c=32, out_c=33, hw=(7, 44), stride=2, k=5, pad=2),
    ]


def _linears() -> list:
    """One to five rows (pairs of rows as lanes, a last row alone), 8 to 256 inputs (one to
    four chunks), 3 to 130 outputs (blocks of 64), signed and unsigned codes of 2 to 8 bits."""
    return [
        _linear(QFormat(bits, signed), seed=rows * 10 + bits, in_c=in_c, out_c=out_c, rows=rows)
        for rows, in_c, out_c in ((1, 256, 64), (2, 8, 3), (3, 136, 130), (4, 64, 65), (5, 200, 10))
        for bits, signed in ((8, False), (8, True), (4, False), (2, True))
    ]


def _limits() -> list:
    """Every code and weight at an extreme (a chunk of 64 taps sums 64 codes of 255 or -128 in
    a lane), saturating multipliers, biases near the int32 limits, with and without a ReLU;
    all weights +1 and all -1 on the largest codes."""
    layers = []
    for a_fmt in (A8, QFormat(8, True)):
        for seed in (1, 2):
            layers.append(_conv(a_fmt, seed, in_c=64, hw=(4, 5), k=1, pad=0, extreme=True,
                                relu=False, o_fmt=QFormat(8, True)))  # fmt: skip
            layers.append(_linear(a_fmt, seed, in_c=128, out_c=9, rows=3, extreme=True,
                                  relu=seed == 1, o_fmt=QFormat(8, True)))  # fmt: skip
        for value in (1, -1):
            layer = _conv(a_fmt, 4, in_c=64, hw=(4, 6), k=1, pad=0, extreme=True, relu=False,
                          o_fmt=QFormat(8, True))  # fmt: skip
            layer.weight[:] = value
            layer.x[:] = a_fmt.qmax if value > 0 else a_fmt.qmin
            layers.append(layer)
    return layers


def _handed_on() -> list:
    """Layers the tables do not take: 45 taps a channel (weights not in whole bytes), a 9-wide
    kernel row (its whole-byte chunk, 72 taps, is past 64), 12 linear inputs; the entry point
    hands them to mico_qconv2d_elementwise / mico_qlinear, exact."""
    return [
        _conv(A8, 1, in_c=5, hw=(5, 7)),
        _conv(A8, 2, in_c=8, hw=(9, 11), k=9, pad=4),
        _linear(A8, 3, in_c=12, out_c=5, rows=2),
    ]


@pytest.fixture(scope="module")
def host_runs() -> dict:
    """Every host case in one program (building the kernels is most of a case's cost): case
    name -> [(layer, its paths' results)], the sign tables forced first, the plain path next."""
    cases = {"formats": _formats(), "zero_point": _zero_point(), "geometry": _geometry(),
             "linear": _linears(), "limits": _limits(), "handed_on": _handed_on()}  # fmt: skip
    layers = [layer for group in cases.values() for layer in group]
    results = kernels_rv32.run_layers(layers, "host", ("sign_lut", "plain"))
    runs = iter(zip(layers, results, strict=True))
    return {key: [next(runs) for _ in group] for key, group in cases.items()}


@pytest.mark.parametrize("case", ["formats", "zero_point", "geometry", "linear", "limits"])
def test_bit_exact(host_runs, case):
    assert_exact(host_runs[case])


def test_both_requantization_loops_are_covered(host_runs):
    """The cases hold multipliers of shift 32 or less (mico_rq_run_fast's short loop, binary
    weights' wide sums) and above 32, so both loops are held to the reference."""
    shifts = np.concatenate([np.ravel(layer.shift) for group in host_runs.values()
                             for layer, _ in group])  # fmt: skip
    assert (shifts <= 32).any() and (shifts > 32).any()


def test_layers_it_does_not_take_are_handed_on(host_runs):
    for layer, results in host_runs["handed_on"]:
        ref = layer.reference().ravel()
        for kernel, _, out in results:
            assert np.array_equal(out, ref), kernel
        taps = layer.taps
        k_w = layer.weight.shape[3] if layer.kind == "conv" else 1
        assert sign_lut_plan.layer_kernel(layer.kind, BIN, 8, taps, 1, k_w) is None


@pytest.mark.parametrize(
    "w_fmt, in_bits, taps, groups, k_w, expected",
    [
        (BIN, 8, 288, 1, 3, sign_lut_plan.CONV_KERNEL),
        (BIN, 2, 32, 1, 1, sign_lut_plan.CONV_KERNEL),  # no lanes: any width from 2 bits
        (BIN, 1, 288, 1, 3, None),  # 1-bit codes: the popcount kernels
        (BIN, 16, 288, 1, 3, None),  # int16 / int32 inputs
        (BIN, 8, 45, 1, 3, None),  # not whole bytes a channel
        (BIN, 8, 72, 1, 9, None),  # a kernel row wider than a chunk's whole bytes
        (BIN, 8, 64, 2, 1, None),  # groups
        (QFormat(1, False), 8, 64, 1, 1, None),  # unsigned 1-bit codes are not signs
        (QFormat.for_bits(TERNARY, True), 8, 288, 1, 3, None),
        (QFormat(4, True), 8, 288, 1, 3, None),
    ],
)
def test_conv_choice_rule(w_fmt, in_bits, taps, groups, k_w, expected):
    assert sign_lut_plan.conv_kernel(w_fmt, in_bits, taps, groups, k_w) == expected


@pytest.mark.parametrize("in_bits", range(2, 9))
def test_narrow_codes_keep_the_lanes(in_bits):
    """Where the channel lanes take the layer, codes of fewer than MIN_BITS_WITH_LANES bits
    keep them (they pack more products a multiply), wider ones take the tables."""
    wide = in_bits >= sign_lut_plan.MIN_BITS_WITH_LANES
    conv = sign_lut_plan.conv_kernel(BIN, in_bits, 288, 1, 3, has_lanes=True)
    linear = sign_lut_plan.linear_kernel(BIN, in_bits, 256, has_lanes=True)
    assert (conv, linear) == (
        (sign_lut_plan.CONV_KERNEL, sign_lut_plan.LINEAR_KERNEL) if wide else (None, None)
    )


def test_linear_choice_rule():
    assert sign_lut_plan.linear_kernel(BIN, 8, 256) == sign_lut_plan.LINEAR_KERNEL
    assert sign_lut_plan.linear_kernel(BIN, 8, 250) is None
    assert sign_lut_plan.linear_kernel(BIN, 1, 256) is None
    assert sign_lut_plan.linear_kernel(QFormat(2, True), 8, 256) is None


@pytest.mark.parametrize(
    "kind, in_c, out_c, kernel, size, a_bits, expected",
    [
        ("conv", 32, 32, (1, 1), (16, 16), 8, sign_lut_plan.CONV_KERNEL),
        ("conv", 32, 32, (3, 3), (16, 16), 6, sign_lut_plan.CONV_KERNEL),
        ("conv", 32, 32, (3, 3), (16, 16), 4, None),  # 4-bit codes keep the lanes
        # 20,736 MACs: below the lanes' gate, above the tables'
        ("conv", 8, 8, (3, 3), (6, 6), 4, sign_lut_plan.CONV_KERNEL),
        ("conv", 8, 8, (1, 1), (8, 8), 8, None),  # 4,096 MACs: below MIN_MACS
        ("linear", 256, 64, (1, 1), (1, 1), 8, sign_lut_plan.LINEAR_KERNEL),
        ("linear", 64, 10, (1, 1), (1, 1), 8, None),  # 640 MACs
    ],
)
def test_generator_emits_the_path(kind, in_c, out_c, kernel, size, a_bits, expected):
    """The code generator calls the sign tables for binary-weight layers of MIN_MACS or more
    on 5- to 8-bit codes (2 to 8 bits without lanes), and another path for others."""
    shape = LayerShape("l", kind, in_c, out_c, kernel, (1, 1), 1, size, size, 1, a_bits)
    called, _, _ = emitted_kernel(layer_node(shape, False, 8))
    if expected is None:
        assert called not in KERNELS
    else:
        assert called == expected


@pytest.mark.skipif(not rv32.available(), reason="needs the rv32 toolchain and qemu")
def test_rv32_bit_exact():
    layers = [
        _conv(A8, 11, in_c=16, hw=(6, 7)),
        _conv(QFormat(8, True), 12, in_c=8, hw=(6, 7), stride=2),
        _conv(QFormat(4, False, zero=3), 13, in_c=40, hw=(3, 5), k=1, pad=0),
        _linear(A8, 14, in_c=136, out_c=70, rows=3),
    ]
    runs = kernels_rv32.run_layers(layers, "rv32", ("sign_lut", "plain"))
    assert_exact(zip(layers, runs, strict=True))


def test_conv_only_model_end_to_end(tmp_path):
    """SqueezeNet (no linear layer) with binary weights on 8-bit codes: the generated program
    calls the sign tables, builds on the host (the tables' file links the plain linear kernel
    its fallback calls, though the model has no linear layer) under ASan + UBSan, and equals
    the Python reference."""
    import torch

    from mico.codegen import emit_c_project
    from mico.execute import run_graph
    from mico.models import from_zoo
    from mico.targets import host
    from tests.codegen.dscnn_graph import zoo_graph

    n = from_zoo("squeezenet").n_layers
    graph, example, gen = zoo_graph("squeezenet", [1] * n, [8] * n, seed=3)
    project = emit_c_project(graph, tmp_path / "c", "m")
    assert sign_lut_plan.CONV_KERNEL in (project.directory / "m.c").read_text()
    host.build(project, sanitize=True)
    samples = torch.randn((2, *example.shape[1:]), generator=gen)
    reference = run_graph(graph, samples)[0].numpy()
    c_out = host.run(project, samples.numpy())
    assert np.array_equal(c_out.reshape(reference.shape), reference)
