"""The bit-sliced depthwise path of mico_binary.c (3x3, stride 1 or 2, padding 1: binary weights
times unsigned {0, 1} or binary {-1, +1} activations) against the Python integer reference,
every layer in one host program: planes of one pixel, one row or one column, rows of 1 to 64
pixels (one word, several words, a word's multiple), planes that fill whole words, stride 2 on
even widths (odd and even heights; rows of 18 to 32 pixels too, and on rv32), 1-bit
outputs by thresholds (ties, limits outside the counts' range) and 2-, 4-, 8-bit outputs
requantized (saturating multipliers), activations all 0 / all 1; and which layers the
generator gives it (the popcount entry points, cpop only with Zbb)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from mico.codegen import binary_plan
from mico.codegen.binary_plan import (
    DW_MAX_PIXELS,
    DW_MAX_WIDTH,
    MIN_MACS,
    binary_kernel,
    depthwise_sliced,
    takes_binary,
)
from mico.quant.arithmetic import QFormat
from mico.targets import rv32
from tests.benchmark_modules import load_benchmark

kernels_rv32 = load_benchmark("kernels_rv32")

needs_gcc = pytest.mark.skipif(
    shutil.which("gcc") is None, reason="needs gcc (apt-get install gcc)"
)

W1 = QFormat(1, True)
U1 = QFormat(1, False)
B1 = QFormat(1, True)


def _dw(a_fmt: QFormat, seed: int, hw: tuple[int, int], c: int = 6, **kw):
    """A depthwise 3x3 layer, stride 1, padding 1; binary outputs follow no ReLU."""
    o_fmt = kw.pop("o_fmt", None)
    kw.setdefault("relu", not (o_fmt or a_fmt).binary)
    return kernels_rv32.random_layer(
        "conv", W1, a_fmt, in_c=c, out_c=c, hw=hw, k=3, pad=1, groups=c, seed=seed,
        o_fmt=o_fmt, **kw,
    )  # fmt: skip


PLANES = [(25, 5), (5, 25), (16, 16), (1, 1), (1, 7), (7, 1), (2, 2), (3, 33), (4, 64),
          (16, 64), (33, 31), (32, 32), (9, 3)]  # fmt: skip


def _layers(a_fmt: QFormat) -> list:
    seed = 100 if a_fmt.binary else 0
    layers = [_dw(a_fmt, seed + i, hw, c=12) for i, hw in enumerate(PLANES)]
    layers += [
        _dw(a_fmt, seed + 20, (25, 5), o_fmt=QFormat(2, False)),
        _dw(a_fmt, seed + 21, (7, 9), o_fmt=QFormat(4, False)),
        _dw(a_fmt, seed + 22, (3, 33), o_fmt=QFormat(8, True), relu=False),
        _dw(a_fmt, seed + 23, (1, 1), o_fmt=QFormat(4, False)),
        _dw(a_fmt, seed + 24, (16, 16), extreme=True),  # limits outside 0..9 / 0..18
        _dw(a_fmt, seed + 25, (5, 6), extreme=True, o_fmt=QFormat(4, False)),
        _dw(a_fmt, seed + 26, (6, 5), o_fmt=B1 if not a_fmt.binary else U1, relu=a_fmt.binary),
    ]
    layers += [  # stride 2 (even widths): odd and even heights, 1-bit and wider outputs
        _dw(a_fmt, seed + 40 + i, hw, c=7, stride=2, **kw)
        for i, (hw, kw) in enumerate([
            ((32, 32), {}), ((9, 6), {}), ((1, 2), {}), ((2, 64), {}), ((15, 4), {}),
            ((7, 10), {"o_fmt": QFormat(4, False)}), ((8, 8), {"extreme": True}),
            ((5, 2), {"o_fmt": QFormat(8, True), "relu": False}),
            # rows of 18 to 32 pixels: a row per word (mico_bin_dw2r)
            ((5, 18), {}), ((6, 30), {"o_fmt": QFormat(4, False)}), ((9, 24), {"extreme": True}),
            ((1, 20), {}), ((2, 26), {"o_fmt": QFormat(8, True), "relu": False}),
            ((31, 32), {}), ((4, 22), {"extreme": True, "o_fmt": QFormat(2, False)}),
        ])
    ]  # fmt: skip
    zeros, ones = _dw(a_fmt, seed + 27, (5, 7)), _dw(a_fmt, seed + 28, (5, 7))
    zeros.x[:] = a_fmt.qmin  # all 0 (unsigned) / all -1 (binary)
    ones.x[:] = a_fmt.qmax
    return [*layers, zeros, ones]


@needs_gcc
def test_depthwise_bit_exact_on_host(monkeypatch):
    """Every layer takes the bit-sliced path (the popcount kernels' entry point) and equals
    the reference; one program for both activation formats (layers of any size: the
    generator's floor on MACs lifted)."""
    monkeypatch.setattr(binary_plan, "MIN_MACS", 0)
    layers = _layers(U1) + _layers(B1)
    assert all(layer.binary() for layer in layers)
    assert any(layer.thresholds() is None for layer in layers)
    results = kernels_rv32.run_layers(layers, "host", ("chosen",))
    for layer, ((kernel, _, out),) in zip(layers, results, strict=True):
        ref = layer.reference().ravel()
        assert kernel == "mico_qconv2d_bin_swar"
        assert np.array_equal(out, ref), (layer.x.shape, layer.a_fmt, layer.o_fmt,
                                          np.flatnonzero(out != ref)[:10])  # fmt: skip


@pytest.mark.skipif(not rv32.available(), reason="needs the rv32 toolchain and qemu")
def test_depthwise_stride2_bit_exact_on_rv32(monkeypatch):
    """The stride-2 layers (both paths: rows split into tap planes, rows of their own words)
    on rv32 under qemu."""
    monkeypatch.setattr(binary_plan, "MIN_MACS", 0)
    layers = [la for la in _layers(U1) + _layers(B1) if la.stride == 2]
    results = kernels_rv32.run_layers(layers, "rv32", ("chosen",))
    for layer, ((kernel, _, out),) in zip(layers, results, strict=True):
        ref = layer.reference().ravel()
        assert kernel == "mico_qconv2d_bin_swar"
        assert np.array_equal(out, ref), (layer.x.shape, layer.a_fmt, layer.o_fmt)


def test_which_depthwise_layers_take_the_sliced_path():
    ok = dict(groups=8, in_c=8, out_c=8, kernel=(3, 3), stride=(1, 1), padding=(1, 1),
              dilation=(1, 1), in_hw=(25, 5))  # fmt: skip
    assert depthwise_sliced(**ok)
    assert depthwise_sliced(**{**ok, "in_hw": (DW_MAX_PIXELS // DW_MAX_WIDTH, DW_MAX_WIDTH)})
    assert depthwise_sliced(**{**ok, "stride": (2, 2), "in_hw": (25, 6)})
    for bad in (
        {"stride": (2, 2)},  # an odd width
        {"stride": (1, 2)},
        {"padding": (0, 0)},
        {"padding": (0, 1)},
        {"dilation": (2, 2)},
        {"kernel": (5, 5)},
        {"out_c": 16},  # a channel multiplier
        {"groups": 4},
        {"in_hw": (2, DW_MAX_WIDTH + 1)},
        {"in_hw": (DW_MAX_PIXELS // 8 + 1, 8)},
    ):
        assert not depthwise_sliced(**{**ok, **bad}), bad
    assert takes_binary(W1, U1, 9, 8, k_w=3, macs=MIN_MACS, depthwise=True)
    assert takes_binary(W1, B1, 9, 8, k_w=3, depthwise=True)
    assert not takes_binary(W1, U1, 9, 8, k_w=3, macs=MIN_MACS - 1, depthwise=True)
    assert not takes_binary(W1, QFormat(2, False), 9, 8, k_w=3, depthwise=True)
    assert not takes_binary(QFormat(2, True), U1, 9, 8, k_w=3, depthwise=True)
    assert not takes_binary(W1, U1, 9, 8, k_w=3)  # other depthwise shapes: the dw paths
    assert binary_kernel("mico_qconv2d", ["zicsr"]) == "mico_qconv2d_bin_swar"
    assert binary_kernel("mico_qconv2d", ["zicsr", "zbb"]) == "mico_qconv2d_bin_cpop"


def test_generator_emits_the_sliced_path_for_depthwise_layers(tmp_path):
    """A W1A1 net's depthwise layer calls the binary entry point (cpop only with Zbb); a
    depthwise layer of fewer MACs than MIN_MACS keeps the depthwise paths."""
    import torch
    from torch import nn

    from mico.codegen import emit_c_project
    from mico.ir import extract_ir
    from mico.models import from_torch
    from mico.passes import lower_static
    from mico.quant import calibrate

    torch.manual_seed(5)
    net = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1, stride=2, groups=16), nn.ReLU(),
        nn.Flatten(), nn.Linear(16 * 8 * 8, 4),
    )  # fmt: skip
    model = from_torch(net, input_shape=(3, 16, 16))
    model.set_qscheme([[1] * 4, [8] + [1] * 3], act_mode="static")
    example = model.example_input()
    batches = [torch.randn((4, *example.shape[1:]), generator=torch.Generator().manual_seed(6))]
    model.eval()
    calibrate(model, batches)
    graph = lower_static(extract_ir(model, example), batches)
    for extensions, path in (((), "swar"), (("zicsr", "zbb"), "cpop")):
        project = emit_c_project(graph, tmp_path / path, "m", isa_extensions=extensions)
        source = (project.directory / "m.c").read_text()
        # both depthwise layers: the small stride-2 one (9216 MACs, below the popcount
        # kernels' gate) too, since the stride-1 one links the path anyway (linked_paths)
        assert source.count(f"mico_qconv2d_bin_{path}(") == 2, source
        assert "_bin_swar(" not in source if path == "cpop" else "_bin_cpop(" not in source
