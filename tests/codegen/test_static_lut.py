"""Static (integer-only) mode: sigmoid, tanh, hardswish, hardsigmoid, SiLU, GELU, leaky ReLU and
ELU as lookup tables of output codes, bit-exact between C and the Python reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from mico.codegen.compile import compile_model
from mico.codegen.support import c_modes
from mico.ir.ops.mico_ops import LUT
from mico.quant import QuantConfig, calibrate, quantize_model
from mico.targets import host, rv32

ACTIVATIONS = {
    "sigmoid": nn.Sigmoid(),
    "tanh": nn.Tanh(),
    "hardswish": nn.Hardswish(),
    "hardsigmoid": nn.Hardsigmoid(),
    "silu": nn.SiLU(),
    "gelu": nn.GELU(),
    "gelu_tanh": nn.GELU(approximate="tanh"),
    "leaky_relu": nn.LeakyReLU(0.2),
    "elu": nn.ELU(0.5),
}


def build(act: nn.Module, plan: str, tmp_path, name: str = "m"):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), act, nn.Flatten(), nn.Linear(256, 10))
    model.eval()
    quantize_model(
        model, plan, QuantConfig(act_mode="static"), example_inputs=torch.zeros(1, 1, 8, 8)
    )
    batches = [torch.randn(8, 1, 8, 8) for _ in range(3)]
    calibrate(model, batches)
    return compile_model(model, batches[0][:1], tmp_path / name, name, mode="static",
                         calibration=batches)  # fmt: skip


@pytest.mark.parametrize("plan", ["8/8", "4/4", "2/4", "t/8"])
@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
def test_lookup_activation_is_bit_exact(tmp_path, activation, plan):
    compiled = build(ACTIVATIONS[activation], plan, tmp_path)
    luts = [n for n in compiled.graph.nodes if n.op == LUT]
    assert len(luts) == 1
    table = luts[0].attrs["table"]
    fmt_in = luts[0].inputs[0].qformat
    assert len(table) == fmt_in.qmax - fmt_in.qmin + 1  # one output code per input code
    host.build(compiled.project)
    x = np.random.default_rng(1).standard_normal((6, 1, 8, 8)).astype(np.float32)
    assert np.array_equal(host.run(compiled.project, x), compiled.reference(x))


def test_table_follows_the_function(tmp_path):
    compiled = build(nn.Sigmoid(), "8/8", tmp_path)
    node = next(n for n in compiled.graph.nodes if n.op == LUT)
    x, out = node.inputs[0], node.output
    codes = np.arange(x.qformat.qmin, x.qformat.qmax + 1)
    expected = 1 / (1 + np.exp(-codes * x.scale))
    got = np.asarray(node.attrs["table"]) * out.scale
    assert np.abs(got - expected).max() <= out.scale / 2 + 1e-6  # rounding only
    assert all(np.diff(node.attrs["table"]) >= 0)  # monotone


def test_static_mode_lists_the_lookup_activations():
    for op in ("aten.sigmoid.default", "aten.gelu.default", "aten.silu.default"):
        assert c_modes(op) == ("dynamic", "static")


@pytest.mark.skipif(not rv32.available(), reason=rv32.missing_tools_hint())
def test_lookup_activation_on_rv32(tmp_path):
    compiled = build(nn.SiLU(), "4/4", tmp_path)
    rv32.build(compiled.project)
    x = np.random.default_rng(2).standard_normal((3, 1, 8, 8)).astype(np.float32)
    run = rv32.run(compiled.project, x)
    assert np.array_equal(run.outputs, compiled.reference(x))
