"""End to end: small 4- and 2-bit linear layers on the word kernels with offset codes.

The fully connected layer of benchmarks/cmsis_nn.py (Linear 256 -> 64, 16,384 MACs: below the
lanes' size gate) fed the model's signed input codes, or a ReLU's unsigned ones, followed by
Linear 64 -> 8: the generator calls ``mico_qlinear_sub4`` / ``_sub2`` and, for signed codes of
at most 4 bits, gives them ``x_off`` (the codes' offset, its products with the weights folded
into the bias: :func:`mico.codegen.emitters.linear_x_off`). The program (ASan + UBSan on the
host, and once under qemu-rv32) equals the Python reference bit for bit.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from torch import nn

from mico.codegen import emit_c_project
from mico.codegen.emitters import LANES_MIN_MACS, folded_bias, linear_kernel, linear_x_off
from mico.execute import run_graph
from mico.pipeline import lower_model, quantize_ptq
from mico.quant import QFormat, QuantConfig, QuantPlan
from mico.targets import host, rv32

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


class _Fc(nn.Module):
    def __init__(self, relu_in: bool):
        super().__init__()
        self.pre = nn.Linear(256, 256) if relu_in else None
        self.layer = nn.Linear(256, 64)
        self.next = nn.Linear(64, 8)

    def forward(self, x):
        if self.pre is not None:
            x = torch.relu(self.pre(x))
        return self.next(self.layer(x))


def _graph(bits: int, relu_in: bool):
    torch.manual_seed(bits)
    model = _Fc(relu_in).eval()
    x = torch.randn((8, 256), generator=torch.Generator().manual_seed(bits))
    spec = f"layer={bits}/{bits},next={bits}/{bits}" + (",pre=8/8" if relu_in else "")
    q = quantize_ptq(model, QuantPlan.parse(spec), [x], QuantConfig(act_mode="static"))
    return lower_model(q, x[:1], "fc", calibration=[x]), x


@pytest.mark.parametrize("bits", [4, 2])
@pytest.mark.parametrize("relu_in", [False, True], ids=["signed", "relu"])
def test_small_fc_word_kernels_bit_exact(bits, relu_in, tmp_path):
    graph, x = _graph(bits, relu_in)
    layer = next(n for n in graph.nodes if n.attrs.get("layer") == "layer")
    assert LANES_MIN_MACS > 256 * 64
    assert layer.inputs[0].qformat.signed != relu_in
    project = emit_c_project(graph, tmp_path / "c", "fc", sample_inputs=x[:1])
    weights = (project.directory / "fc_weights.h").read_text()
    source = (project.directory / "fc.c").read_text()
    assert f"mico_qlinear_sub{bits}(&" in source
    params = next(line for line in weights.splitlines() if f"{layer.name}_params =" in line)
    x_off = 0 if relu_in else 1 << (bits - 1)
    assert (f".x_off = {x_off}" in params) == (x_off != 0)
    host.build(project, sanitize=True)
    reference = run_graph(graph, x)[0].numpy()
    out = host.run(project, x.numpy())
    assert np.array_equal(out.reshape(reference.shape), reference)


@pytest.mark.skipif(not rv32.available(), reason="rv32 toolchain missing")
def test_small_fc_word_kernels_rv32(tmp_path):
    graph, x = _graph(4, False)
    project = emit_c_project(graph, tmp_path / "c", "fc", sample_inputs=x[:1])
    rv32.build(project)
    reference = run_graph(graph, x[:3])[0].numpy()
    run = rv32.run(project, x[:3].numpy())
    assert np.array_equal(np.asarray(run.outputs).reshape(reference.shape), reference)


def test_linear_x_off_rule():
    """Offsets only for the word kernels, on codes of at most 4 bits that can be negative."""
    sub4, sub2 = "mico_qlinear_sub4", "mico_qlinear_sub2"
    assert linear_kernel(4, QFormat(4, True), 16384) == sub4
    assert linear_kernel(2, QFormat(2, True), 16384) == sub2
    assert linear_x_off(sub4, QFormat(4, True)) == 8
    assert linear_x_off(sub2, QFormat(2, True)) == 2
    assert linear_x_off(sub2, QFormat(3, True)) == 4
    assert linear_x_off(sub4, QFormat(1, True)) == 1  # binary codes {-1, +1}
    assert linear_x_off(sub4, QFormat.asymmetric(4, 5)) == 5
    assert linear_x_off(sub4, QFormat(4, False)) == 0  # already non-negative
    assert linear_x_off(sub4, QFormat(5, True)) == 0  # wider signed codes: centred already
    assert linear_x_off(sub4, QFormat(8, False)) == -128  # wider unsigned codes centred
    assert linear_x_off(sub2, QFormat.asymmetric(8, 100)) == 100 - 128
    assert linear_x_off("mico_qlinear", QFormat(4, True)) == 0
    assert linear_x_off("mico_qlinear_s8", QFormat(4, True)) == 0
    assert linear_x_off(sub4, QFormat(4, True), np.full((2, 4096), -8)) == 8
    huge = np.full((2, 1), -(2**28))  # the folded bias would leave int32's comfortable range
    assert linear_x_off(sub4, QFormat(4, True), huge) == 0
    bias = folded_bias(np.array([5, -3]), np.array([[1, -2, 3], [0, 0, -1]]), 8)
    assert bias.tolist() == [5 - 8 * 2, -3 + 8]
