"""Bit* layers and whole-model quantization: apply_plan, calibrate, float_mode."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from mico.errors import CalibrationError, PlanError
from mico.models import SmallCNN
from mico.quant.arithmetic import QFormat, quantize
from mico.quant.config import QuantConfig
from mico.quant.layers import BitConv2d, BitLayer, BitLinear
from mico.quant.model import apply_plan, bit_layers, calibrate, float_mode, quantizable_layers
from mico.quant.plan import QuantPlan

PLAN = "conv1=8/6,conv2=3/5,fc=2/8"


@pytest.fixture
def model() -> SmallCNN:
    torch.manual_seed(0)
    return SmallCNN(channels=(2, 4)).eval()


def _nonneg_batches(n: int = 3, seed: int = 1) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.rand(4, 1, 8, 8, generator=g) for _ in range(n)]


def _signed_batches(n: int = 3, seed: int = 2) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(4, 1, 8, 8, generator=g) for _ in range(n)]


def test_quantizable_layers(model: SmallCNN) -> None:
    assert quantizable_layers(model) == ["conv1", "conv2", "fc"]


def test_quantizable_layers_nested_names() -> None:
    net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Sequential(nn.Flatten(), nn.Linear(2, 3)))
    assert quantizable_layers(net) == ["0", "2.1"]


def test_apply_plan_converts_layers_with_plan_bits(model: SmallCNN) -> None:
    original_state = {k: v.clone() for k, v in model.state_dict().items()}
    qmodel = apply_plan(model, QuantPlan.parse(PLAN))
    assert qmodel is not model
    assert isinstance(qmodel.conv1, BitConv2d)
    assert isinstance(qmodel.conv2, BitConv2d)
    assert isinstance(qmodel.fc, BitLinear)
    assert (qmodel.conv1.w_bits, qmodel.conv1.a_bits) == (8, 6)
    assert (qmodel.conv2.w_bits, qmodel.conv2.a_bits) == (3, 5)
    assert (qmodel.fc.w_bits, qmodel.fc.a_bits) == (2, 8)
    assert list(bit_layers(qmodel)) == ["conv1", "conv2", "fc"]
    for layer in bit_layers(qmodel).values():
        assert layer.mode == "float"
        assert not layer.calibrated
        assert layer.qconfig == QuantConfig()
    # weights copied; the quantizers add their (uncalibrated) activation state
    state = qmodel.state_dict()
    for key, value in original_state.items():
        assert torch.equal(state[key], value)
    extra = sorted(set(state) - set(original_state))
    assert extra == sorted(
        f"{n}.{b}"
        for n in ("conv1", "conv2", "fc")
        for b in ("activation_scale", "activation_signed")
    )
    # the original is untouched and independent of the copy
    assert type(model.conv1) is nn.Conv2d
    assert type(model.conv2) is nn.Conv2d
    assert type(model.fc) is nn.Linear
    assert bit_layers(model) == {}
    with torch.no_grad():
        qmodel.conv1.weight.add_(1.0)
    for key, value in model.state_dict().items():
        assert torch.equal(value, original_state[key])


def test_apply_plan_accepts_plan_in_any_order_and_a_config(model: SmallCNN) -> None:
    config = QuantConfig(weight_method="absmax", act_method="minmax")
    qmodel = apply_plan(model, QuantPlan.parse("fc=4/4,conv2=2/2,conv1=1/1"), config)
    assert (qmodel.conv1.w_bits, qmodel.conv2.w_bits, qmodel.fc.w_bits) == (1, 2, 4)
    assert all(layer.qconfig is config for layer in bit_layers(qmodel).values())


def test_apply_plan_nested_module_names() -> None:
    net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Sequential(nn.Flatten(), nn.Linear(2, 3)))
    qnet = apply_plan(net, QuantPlan.from_qscheme([[4, 2], [8, 3]], quantizable_layers(net)))
    assert isinstance(qnet[0], BitConv2d)
    assert isinstance(qnet[2][1], BitLinear)
    assert (qnet[2][1].w_bits, qnet[2][1].a_bits) == (2, 3)


def test_text_plan_for_sequential_layer_names() -> None:
    net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Sequential(nn.Flatten(), nn.Linear(2, 3)))
    with pytest.raises(PlanError) as info:
        QuantPlan.parse("conv=8/8").validate_for(quantizable_layers(net))
    suggestion = str(info.value).rsplit("e.g. ", 1)[1]
    assert suggestion == "0=8/8,2.1=8/8"
    assert list(QuantPlan.parse(suggestion).validate_for(quantizable_layers(net))) == ["0", "2.1"]


def test_float_mode_output_matches_original_exactly(model: SmallCNN) -> None:
    qmodel = apply_plan(model, QuantPlan.parse(PLAN))
    x = torch.randn(5, 1, 8, 8, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert torch.equal(qmodel(x), model(x))


@pytest.mark.parametrize(
    ("plan", "needle"),
    [
        ("conv1=8/8,conv2=8/8", "no bit-widths for fc"),
        ("conv1=8/8,conv2=8/8,fc=8/8,head=8/8", "unknown layer(s) head"),
    ],
)
def test_apply_plan_bad_plan(model: SmallCNN, plan: str, needle: str) -> None:
    with pytest.raises(PlanError) as info:
        apply_plan(model, QuantPlan.parse(plan))
    assert needle in str(info.value)
    assert "(conv1, conv2, fc)" in str(info.value)
    assert type(model.conv1) is nn.Conv2d


def test_quant_mode_before_calibration_raises(model: SmallCNN) -> None:
    qmodel = apply_plan(model, QuantPlan.parse(PLAN))
    qmodel.conv1.mode = "quant"
    with pytest.raises(CalibrationError, match=r"layer 'conv1'.*no activation range"):
        qmodel(torch.rand(1, 1, 8, 8))


def test_activation_format_before_calibration_raises(model: SmallCNN) -> None:
    qmodel = apply_plan(model, QuantPlan.parse(PLAN))
    for layer in bit_layers(qmodel).values():
        codes = layer.weight_codes()  # weight scales need no calibration
        assert codes.shape == tuple(layer.weight.shape)
        with pytest.raises(CalibrationError, match="no activation range"):
            _ = layer.a_fmt
        assert layer.w_fmt == QFormat(layer.w_bits, True)  # weights are always signed


def test_calibration_error_is_runtime_error() -> None:
    assert issubclass(CalibrationError, RuntimeError)


def test_calibrate_nonnegative_inputs(model: SmallCNN) -> None:
    qmodel = apply_plan(model, QuantPlan.parse(PLAN))
    qmodel.train()
    out = calibrate(qmodel, _nonneg_batches())
    assert out is qmodel
    assert qmodel.training  # the train/eval state is restored
    for name, layer in bit_layers(qmodel).items():
        assert layer.calibrated, name
        assert layer.mode == "quant"
        assert isinstance(layer.act_scale, float)
        assert layer.act_scale > 0
        assert isinstance(layer.weight_scale, float)
        assert layer.weight_scale > 0
        assert layer.act_signed is False, name  # image in [0, 1) and post-ReLU inputs
        assert layer.a_fmt == QFormat(layer.a_bits, False)


def test_calibrate_signed_inputs(model: SmallCNN) -> None:
    qmodel = apply_plan(model, QuantPlan.parse(PLAN))
    calibrate(qmodel, _signed_batches())
    assert qmodel.conv1.act_signed is True
    assert qmodel.conv1.a_fmt == QFormat(6, True)
    # conv2 and fc read ReLU (then max-pool) outputs
    assert qmodel.conv2.act_signed is False
    assert qmodel.fc.act_signed is False
    assert qmodel.conv2.a_fmt == QFormat(5, False)
    assert qmodel.fc.a_fmt == QFormat(8, False)


def test_calibrated_weight_codes_within_format(model: SmallCNN) -> None:
    qmodel = apply_plan(model, QuantPlan.parse("conv1=8/8,conv2=3/4,fc=1/8"))
    calibrate(qmodel, _signed_batches())
    for name, layer in bit_layers(qmodel).items():
        codes = layer.weight_codes()
        assert codes.dtype == np.int64
        assert codes.shape == tuple(layer.weight.shape)
        fmt = layer.w_fmt
        assert codes.min() >= fmt.qmin, name
        assert codes.max() <= fmt.qmax, name
        expected = quantize(layer.weight.detach().numpy(), layer.weight_scale, fmt)
        np.testing.assert_array_equal(codes, expected)
    assert set(np.unique(qmodel.fc.weight_codes()).tolist()) <= {-1, 1}
    assert qmodel.conv1.weight_codes().max() <= 127


def test_quant_forward_uses_fake_quantized_inputs_and_weights(model: SmallCNN) -> None:
    qmodel = apply_plan(model, QuantPlan.parse("conv1=2/2,conv2=2/2,fc=2/2"))
    batches = _signed_batches()
    calibrate(qmodel, batches)
    layer = qmodel.conv1
    x = batches[0]
    with torch.no_grad():
        xq = layer.quant_input(x)
        wq = layer.quant_weight()
    codes = xq / layer.act_scale
    torch.testing.assert_close(codes, torch.round(codes), rtol=0, atol=1e-4)
    assert set(torch.round(codes).unique().tolist()) <= {-1.0, 0.0, 1.0}
    wcodes = wq / layer.weight_scale
    torch.testing.assert_close(wcodes, torch.round(wcodes), rtol=0, atol=1e-4)
    with torch.no_grad():
        quant_out = qmodel(x)
        float_out = model(x)
    assert quant_out.shape == float_out.shape
    assert not torch.equal(quant_out, float_out)  # 2-bit quantization changes the output


def test_calibrate_accepts_tuples_and_max_batches(model: SmallCNN) -> None:
    data = _signed_batches(4)
    labelled = [(x, torch.zeros(4, dtype=torch.long)) for x in data]
    q1 = calibrate(apply_plan(model, QuantPlan.parse(PLAN)), labelled, max_batches=1)
    q2 = calibrate(apply_plan(model, QuantPlan.parse(PLAN)), data[:1])
    q3 = calibrate(apply_plan(model, QuantPlan.parse(PLAN)), data)
    for name in ("conv1", "conv2", "fc"):
        assert getattr(q1, name).act_scale == getattr(q2, name).act_scale
    assert q1.conv1.act_scale != q3.conv1.act_scale


def test_calibrate_with_no_batches_raises(model: SmallCNN) -> None:
    qmodel = apply_plan(model, QuantPlan.parse(PLAN))
    with pytest.raises(CalibrationError, match="no batches"):
        calibrate(qmodel, [])
    with pytest.raises(CalibrationError, match="no batches"):
        calibrate(qmodel, iter(_nonneg_batches()), max_batches=0)
    assert all(not layer.calibrated for layer in bit_layers(qmodel).values())


def test_calibrate_model_without_bit_layers_raises(model: SmallCNN) -> None:
    with pytest.raises(CalibrationError, match="quantize_model"):
        calibrate(model, _nonneg_batches())


def test_end_calibration_without_observations_raises() -> None:
    layer = BitLinear(3, 2, w_bits=4, a_bits=4)
    layer.begin_calibration()
    with pytest.raises(CalibrationError, match="saw no input"):
        layer.end_calibration()


def test_float_mode_restores_modes(model: SmallCNN) -> None:
    qmodel = apply_plan(model, QuantPlan.parse(PLAN))
    calibrate(qmodel, _nonneg_batches())
    qmodel.fc.mode = "float"  # a mixed state must come back as it was
    x = _nonneg_batches(1, seed=9)[0]
    with torch.no_grad():
        quant_out = qmodel(x)
        with float_mode(qmodel) as inner:
            assert inner is qmodel
            assert [m.mode for m in bit_layers(qmodel).values()] == ["float"] * 3
            assert torch.equal(qmodel(x), model(x))
    assert [m.mode for m in bit_layers(qmodel).values()] == ["quant", "quant", "float"]
    with torch.no_grad():
        assert torch.equal(qmodel(x), quant_out)


def test_float_mode_restores_modes_on_error(model: SmallCNN) -> None:
    qmodel = apply_plan(model, QuantPlan.parse(PLAN))
    calibrate(qmodel, _nonneg_batches())
    with pytest.raises(KeyError), float_mode(qmodel):
        raise KeyError("boom")
    assert all(m.mode == "quant" for m in bit_layers(qmodel).values())


def test_bit_layer_constructors_check_bits() -> None:
    with pytest.raises(PlanError, match=r"weight bit-width is 0.*1\.\.8"):
        BitLinear(3, 2, w_bits=0)
    with pytest.raises(PlanError, match=r"activation bit-width is 9.*1\.\.8"):
        BitConv2d(1, 2, 3, a_bits=9)
    layer = BitConv2d(1, 2, 3, w_bits=3, a_bits=5)
    assert isinstance(layer, BitLayer)
    assert isinstance(layer, nn.Conv2d)
    assert "w_bits=3, a_bits=5" in repr(layer)
