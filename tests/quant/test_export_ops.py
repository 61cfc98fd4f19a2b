"""Quantized layers export as single mico.bit_* operators that compute what eager computes."""

from __future__ import annotations

import pytest
import torch

from mico.errors import CalibrationError
from mico.ir.ops.registry import OpRegistry
from mico.models import from_zoo
from mico.quant import QuantConfig, calibrate, prepare_export


def _input(model, batch=2, seed=0):
    x = model.example_input(batch)
    if x.is_floating_point():
        x = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed))
    return x


CASES = [
    ("small_cnn", QuantConfig(act_mode="dynamic")),
    ("m5", QuantConfig(act_mode="static", weight_granularity="channel")),
    ("mobilenetv2", QuantConfig(act_mode="static")),
    ("tinyllama", QuantConfig(act_mode="dynamic", weight_granularity="channel")),
]


@pytest.mark.parametrize(("name", "config"), CASES, ids=[c[0] for c in CASES])
def test_export_gives_one_op_per_layer_and_exact_outputs(name, config) -> None:
    torch.manual_seed(0)
    model = from_zoo(name).eval()
    n = model.n_layers
    bits = [4, 1.58, 8, 2, 3, 5, 6, 7, 1]
    plan = [[bits[i % len(bits)] for i in range(n)], [bits[(i + 2) % len(bits)] for i in range(n)]]
    model.set_qscheme(plan, config=config)
    x = _input(model)
    if config.act_mode == "static":
        calibrate(model, [_input(model, 4, seed=1)])
    prepare_export(model)
    program = torch.export.export(model, (x,), strict=False)
    targets = [str(node.target) for node in program.graph.nodes if node.op == "call_function"]
    quantized = [t for t in targets if t.startswith("mico.bit_")]
    assert len(quantized) == n
    assert not any(t.split(".")[1] in ("round", "clamp", "where", "floor") for t in targets)
    with torch.no_grad():
        assert torch.equal(program.module()(x), model(x))


def test_export_without_prepare_is_refused() -> None:
    model = from_zoo("small_cnn").eval()
    model.set_qscheme([[4] * 3, [8] * 3])
    with pytest.raises(CalibrationError, match=r"prepare_export"):
        torch.export.export(model, (_input(model),), strict=False)


def test_uncalibrated_static_layer_cannot_be_prepared() -> None:
    model = from_zoo("small_cnn").eval()
    model.set_qscheme([[4] * 3, [8] * 3], act_mode="static")
    with pytest.raises(CalibrationError, match="before calibration"):
        prepare_export(model)


def test_registered_executor_matches_the_layer() -> None:
    torch.manual_seed(0)
    model = from_zoo("small_cnn").eval()
    model.set_qscheme([[3] * 3, [5] * 3])
    prepare_export(model)
    layer = model.conv1
    x = _input(model)
    execute = OpRegistry.require("mico.bit_conv2d", "execute")
    names = ("stride", "padding", "dilation", "groups", "w_bits", "a_bits", "weight_scale",
             "act_scale", "act_signed", "dynamic", "act_zero", "act_asymmetric")  # fmt: skip
    values = (list(layer.stride), list(layer.padding), list(layer.dilation), layer.groups,
              *layer._export_quant_args())  # fmt: skip
    (out,) = execute([x, layer.weight, layer.bias], dict(zip(names, values, strict=True)))
    with torch.no_grad():
        assert torch.equal(out, layer(x))
