"""The W8A8 kernels (mico_qconv2d_tiled_s8's byte paths mico_qconv2d_s8_pw / mico_qconv2d_s8,
mico_qlinear_s8's rows) against the Python integer arithmetic, layer by layer, through the
C program of benchmarks/kernels_rv32.py: odd channel counts (a channel computed twice), pixel
counts that fill no group (a patch's empty columns, a pointwise plane's last group), padding,
stride 2, groups, reductions longer than the patch (chunks), kernel rows wider than the patch
takes (the generic path), pointwise layers through the 4 x 4 kernel and the 2 x 8 one, signed,
unsigned and asymmetric codes, code extremes, biases as near the int32 limits as leaves every
sum in int32, saturating multipliers; one case on rv32 under qemu."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from mico.quant.arithmetic import QFormat
from mico.targets import rv32
from tests.benchmark_modules import load_benchmark

kernels_rv32 = load_benchmark("kernels_rv32")

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

W8 = QFormat(8, True)
A_FMTS = [QFormat(8, False), QFormat(8, True)]

# (in_c, out_c, hw, k, pad, stride, groups)
CONVS = [
    (3, 5, 7, 3, 1, 1, 1),  # odd channels, 49 pixels
    (16, 9, 5, 3, 1, 2, 1),  # stride 2, 9 pixels
    (8, 6, 6, 3, 1, 1, 2),  # groups of 3 output channels
    (40, 4, 4, 3, 1, 1, 1),  # 360 taps: two chunks of kernel rows
    (2, 2, 3, 3, 1, 1, 1),  # a plane smaller than a group
    (6, 4, 11, 5, 2, 2, 2),  # 5x5, stride 2, groups
    (1, 8, 9, 5, 0, 1, 1),  # one input channel, no padding
    (4, 4, 18, 17, 1, 1, 1),  # kernel rows wider than the patch takes: the generic path
    (12, 6, 6, 3, 1, 1, 6),  # one output channel per group: the generic path
    (7, 3, 9, 1, 0, 1, 1),  # pointwise, 81 pixels (a last group of 1)
    (32, 33, 5, 1, 0, 1, 1),  # pointwise, 25 pixels, 33 channels
    (24, 16, 8, 1, 0, 1, 1),  # pointwise, 64 pixels (whole groups)
    (4, 4, 2, 1, 0, 1, 1),  # pointwise, 4 pixels: through the patch
    (9, 6, 13, 1, 0, 2, 3),  # pointwise, stride 2, groups: through the patch
    (300, 4, 3, 1, 0, 1, 1),  # pointwise, 300 taps
    (520, 4, 3, 1, 0, 1, 1),  # pointwise, too many taps to interleave: the 2 x 8 kernel
    (8, 8, 5, 1, 0, 1, 2),  # pointwise, groups of 4 output channels
    (5, 6, 1, 1, 0, 1, 1),  # pointwise, one pixel: through the patch
]


def check(layers, target: str = "host", results=None) -> list[str]:
    """Run every layer's paths (one program) unless ``results`` holds their runs; all must
    equal the reference exactly. Returns the chosen kernel of each layer."""
    chosen = []
    if results is None:
        results = kernels_rv32.run_layers(layers, target)
    for layer, result in zip(layers, results, strict=True):
        ref = layer.reference().ravel()
        for kernel, _, out in result:
            assert np.array_equal(out, ref), (kernel, np.flatnonzero(out != ref)[:10])
        chosen.append(result[0][0])
    return chosen


def within_int32(layer):
    """The layer with its biases moved just far enough from the int32 limits that bias plus
    any sum of its taps fits int32 (the range mico's integer layers work in)."""
    bound = layer.taps * 127 * 255
    layer.bias = np.clip(layer.bias, -(2**31) + bound, 2**31 - 1 - bound)
    return layer


def conv(a_fmt: QFormat, shape: tuple, seed: int, extreme: bool = False):
    in_c, out_c, hw, k, pad, stride, groups = shape
    return within_int32(kernels_rv32.random_layer(
        "conv", W8, a_fmt, in_c=in_c, out_c=out_c, hw=hw, k=k, pad=pad, stride=stride,
        groups=groups, seed=seed, extreme=extreme, relu=not extreme,
        o_fmt=QFormat(8, True) if extreme else None,
    ))  # fmt: skip


def conv_shapes(a_fmt: QFormat) -> list:
    """Every shape above, random codes and at the code extremes (saturating multipliers,
    biases near the int32 limits, no ReLU, signed 8-bit outputs)."""
    return [
        conv(a_fmt, shape, seed=2 * i + extreme, extreme=bool(extreme))
        for i, shape in enumerate(CONVS)
        for extreme in (0, 1)
    ]


def linear_shapes(a_fmt: QFormat) -> list:
    """Outputs in blocks of 8 and left over (70: two runs of requantization), input lengths
    that fill no step of 4 taps, several rows, extremes with 4-bit outputs, with and without
    ReLU."""
    return [
        within_int32(kernels_rv32.random_layer(
            "linear", W8, a_fmt, in_c=in_c, out_c=out_c, rows=rows, seed=i + 10 * extreme,
            extreme=bool(extreme), o_fmt=QFormat(4, False) if extreme else None,
            relu=not (extreme and i % 2),
        ))
        for i, (in_c, out_c, rows) in enumerate(
            [(37, 3, 3), (256, 64, 1), (5, 1, 2), (301, 70, 1), (64, 16, 3), (1000, 9, 1)]
        )
        for extreme in (0, 1)
    ]  # fmt: skip


def pointwise_plane_tails(a_fmt: QFormat) -> list:
    """Pointwise planes of h x w pixels ending 1, 2 or 3 pixels past a group of 4 (one or two
    pixels one at a time, three as the plane's last group), and 6 output channels (a block
    of 4 repeating its last channel)."""
    rng = np.random.default_rng(5)
    layers = []
    for i, (h, w) in enumerate([(1, 5), (2, 5), (5, 7), (3, 6), (2, 3), (7, 10)]):
        layer = kernels_rv32.random_layer("conv", W8, a_fmt, in_c=10, out_c=6, hw=1, k=1,
                                          seed=60 + i)  # fmt: skip
        layer.x = kernels_rv32._codes(rng, a_fmt, (10, h, w), False)
        layers.append(layer)
    return layers


def asymmetric_layers() -> list:
    """Asymmetric 8-bit inputs (bytes are code + zero) through conv and linear layers."""
    layers = []
    for i, zero in enumerate((37, 200)):
        a_fmt = QFormat.asymmetric(8, zero)
        layers += [conv(a_fmt, shape, seed=50 + i * 20 + j) for j, shape in enumerate(CONVS[:12])]
        layers.append(kernels_rv32.random_layer("linear", W8, a_fmt, in_c=37, out_c=12, rows=2,
                                                seed=90 + i))  # fmt: skip
    return layers


def fmt_with_zero(f: QFormat) -> str:
    """The C format with its zero point (the harness's own leaves it out): the same text for
    symmetric formats."""
    zero = f", .zero = {f.zero}" if f.zero else ""
    return f"{{ .bits = {f.bits}, .is_signed = {int(f.signed)}{zero} }}"


@pytest.fixture(scope="module")
def host_runs() -> dict[str, tuple[list, list]]:
    """Every host case of this module built into one program and run once (one build instead
    of one per test): per group, its layers and their runs."""
    groups = {"asymmetric": asymmetric_layers()}
    for a_fmt in A_FMTS:
        groups[f"conv {a_fmt}"] = conv_shapes(a_fmt)
        groups[f"linear {a_fmt}"] = linear_shapes(a_fmt)
        groups[f"tails {a_fmt}"] = pointwise_plane_tails(a_fmt)
    every = [layer for layers in groups.values() for layer in layers]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kernels_rv32, "_fmt", fmt_with_zero)
        results = iter(kernels_rv32.run_layers(every, "host"))
    return {name: (layers, [next(results) for _ in layers]) for name, layers in groups.items()}


def check_group(host_runs, name: str) -> list[str]:
    layers, results = host_runs[name]
    return check(layers, results=results)


@pytest.mark.parametrize("a_fmt", A_FMTS, ids=str)
def test_conv_shapes(a_fmt, host_runs):
    """Every shape above, random codes and at the code extremes (saturating multipliers,
    biases near the int32 limits, no ReLU, signed 8-bit outputs)."""
    assert set(check_group(host_runs, f"conv {a_fmt}")) == {"mico_qconv2d_tiled_s8"}


@pytest.mark.parametrize("a_fmt", A_FMTS, ids=str)
def test_linear_shapes(a_fmt, host_runs):
    """Outputs in blocks of 8 and left over, input lengths that fill no step of 4 taps,
    several rows, extremes with 4-bit outputs, with and without ReLU."""
    assert set(check_group(host_runs, f"linear {a_fmt}")) == {"mico_qlinear_s8"}


@pytest.mark.parametrize("a_fmt", A_FMTS, ids=str)
def test_pointwise_plane_tails(a_fmt, host_runs):
    """Pointwise planes ending 1, 2 or 3 pixels past a group of 4, and 6 output channels."""
    check_group(host_runs, f"tails {a_fmt}")


def test_asymmetric_codes(host_runs):
    """Asymmetric 8-bit inputs (bytes are code + zero): the conv path takes the zero point off
    through the weight sums (padding is the byte zero); linear layers keep the unpacking path."""
    check_group(host_runs, "asymmetric")


@pytest.mark.skipif(not rv32.available(), reason="needs the rv32 toolchain and qemu")
def test_rv32_w8a8_bit_exact():
    """On rv32imac: a 3x3 conv with padding and an odd channel count, a pointwise conv whose
    plane ends inside a group, and a linear layer, bit-exact."""
    layers = [
        conv(QFormat(8, False), (5, 7, 9, 3, 1, 1, 1), seed=1),
        conv(QFormat(8, True), (16, 8, 5, 1, 0, 1, 1), seed=2),
        kernels_rv32.random_layer("linear", W8, QFormat(8, False), in_c=75, out_c=20, seed=3),
    ]
    check(layers, "rv32")


def test_generated_dscnn_w8a8_is_bit_exact(tmp_path):
    """End to end: dscnn at W8A8 (its first conv and pointwise layers through the 4 x 4 byte
    tiles of mico_conv_narrow.c, its depthwise layers through mico_dwconv.c's byte path, the
    classifier through the plain linear kernel), built with ASan + UBSan, equals the Python
    reference."""
    import torch

    from mico.codegen import emit_c_project
    from mico.execute import run_graph
    from mico.ir import extract_ir
    from mico.models import from_zoo
    from mico.passes import lower_static
    from mico.quant import calibrate, fuse_model
    from mico.targets import host

    torch.manual_seed(8)
    model = from_zoo("dscnn")
    n = model.n_layers
    model.set_qscheme([[8] * n, [8] * n], act_mode="static")
    example = model.example_input()
    gen = torch.Generator().manual_seed(8)
    batches = [torch.randn((4, *example.shape[1:]), generator=gen)]
    model = fuse_model(model, example).eval()
    calibrate(model, batches)
    graph = lower_static(extract_ir(model, example), batches)
    project = emit_c_project(graph, tmp_path / "c", "m")
    source = (project.directory / "m.c").read_text()
    assert source.count("mico_qconv2d_narrow_s8(") == 5 and "mico_qlinear_s8(" not in source
    assert source.count("mico_qconv2d_dw8_f1(") == 4
    host.build(project, sanitize=True)
    samples = torch.randn((3, *example.shape[1:]), generator=gen)
    reference = run_graph(graph, samples)[0].numpy()
    c_out = host.run(project, samples.numpy())
    assert np.array_equal(c_out.reshape(reference.shape), reference)
