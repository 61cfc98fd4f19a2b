"""Whole-model quantization of any nn.Module: layer order, plan forms and errors, scales,
calibration methods, cached weights and learned step sizes."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mico.errors import CalibrationError, PlanError
from mico.quant import (
    TERNARY,
    BitConv1d,
    BitLayer,
    BitLinear,
    QuantConfig,
    QuantPlan,
    apply_plan,
    as_plan,
    bit_layers,
    calibrate,
    fuse_model,
    list_quantize_layers,
    quantizable_layers,
    quantize_model,
    replace_quantize_layers,
)
from mico.quant.arithmetic import QFormat

DYNAMIC = QuantConfig(act_mode="dynamic")


class HeadFirst(nn.Module):
    """``head`` is registered before ``body`` but runs after it; ``unused`` never runs."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(16, 3)
        self.unused = nn.Linear(3, 3)
        self.body = nn.Sequential(
            nn.Conv1d(2, 4, 3, padding=1),
            nn.ReLU(),
            nn.Conv1d(4, 4, 3, padding=1),
            nn.ReLU(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x).flatten(1))


EXEC_ORDER = ["body.0", "body.2", "head"]


class SharedLayer(nn.Module):
    """``block`` is called twice."""

    def __init__(self) -> None:
        super().__init__()
        self.out = nn.Linear(4, 2)
        self.block = nn.Linear(4, 4)
        self.first = nn.Linear(3, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.first(x))
        x = torch.relu(self.block(x))
        x = torch.relu(self.block(x))
        return self.out(x)


class AliasedLayer(SharedLayer):
    """The shared ``block`` is also registered as ``alias``, and the second call uses it."""

    def __init__(self) -> None:
        super().__init__()
        self.alias = self.block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.first(x))
        x = torch.relu(self.block(x))
        x = torch.relu(self.alias(x))
        return self.out(x)


def _head_first(seed: int = 0) -> HeadFirst:
    torch.manual_seed(seed)
    return HeadFirst().eval()


def _x(seed: int = 1, n: int = 8) -> torch.Tensor:
    return torch.randn(n, 2, 4, generator=torch.Generator().manual_seed(seed))


def _mlp(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 4)).eval()


# --------------------------------------------------------------------------- layer order


@pytest.mark.parametrize("with_example", [True, False], ids=["hooks", "fx"])
def test_layers_are_listed_in_execution_order(with_example: bool) -> None:
    model = _head_first()
    assert [n for n, _ in model.named_modules() if n][:2] == ["head", "unused"]
    names = quantizable_layers(model, _x(n=1) if with_example else None)
    assert names == EXEC_ORDER  # not registration order, and "unused" is not listed


@pytest.mark.parametrize("with_example", [True, False], ids=["hooks", "fx"])
def test_qscheme_follows_execution_order(with_example: bool) -> None:
    model = _head_first()
    example = _x(n=1) if with_example else None
    quantize_model(model, [[8, 4, 2], [8, 6, 3]], DYNAMIC, example_inputs=example)
    assert (model.body[0].w_bits, model.body[0].a_bits) == (8, 8)
    assert (model.body[2].w_bits, model.body[2].a_bits) == (4, 6)
    assert (model.head.w_bits, model.head.a_bits) == (2, 3)
    assert type(model.unused) is nn.Linear  # a layer the forward never calls stays float
    assert list(bit_layers(model)) == ["head", "body.0", "body.2"]  # registration order
    assert model.body[2].layer_name == "body.2"


def _calls(model: nn.Module, x: torch.Tensor) -> list[str]:
    """Class names of the Linear layers the forward pass calls, in order."""
    calls: list[str] = []
    handles = [
        m.register_forward_pre_hook(lambda mod, _i: calls.append(type(mod).__name__))
        for m in model.modules()
        if isinstance(m, nn.Linear)
    ]
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    return calls


@pytest.mark.parametrize("with_example", [True, False], ids=["hooks", "fx"])
def test_shared_layer_listed_once_and_quantized_at_every_call(with_example: bool) -> None:
    torch.manual_seed(0)
    model = SharedLayer()
    example = torch.randn(1, 3) if with_example else None
    assert quantizable_layers(model, example) == ["first", "block", "out"]
    with pytest.raises(PlanError, match="3 quantizable layers"):
        quantize_model(model, [[8, 4, 4, 2], [8, 4, 4, 2]], DYNAMIC, example_inputs=example)
    quantize_model(model, [[8, 4, 2], [8, 4, 2]], DYNAMIC, example_inputs=example)
    assert isinstance(model.block, BitLinear)
    assert (model.block.w_bits, model.block.a_bits) == (4, 4)
    assert _calls(model, torch.randn(5, 3)) == ["BitLinear"] * 4


def test_layer_registered_under_two_names_stays_shared() -> None:
    torch.manual_seed(0)
    model = AliasedLayer()
    assert quantizable_layers(model, torch.randn(1, 3)) == ["first", "block", "out"]
    quantize_model(model, [[8, 4, 2], [8, 4, 2]], DYNAMIC, example_inputs=torch.randn(1, 3))
    assert model.alias is model.block
    assert _calls(model, torch.randn(5, 3)) == ["BitLinear"] * 4


def test_list_quantize_layers_returns_the_modules_in_execution_order() -> None:
    model = _head_first()
    layers = list_quantize_layers(model, _x(n=1))
    assert [id(m) for m in layers] == [id(model.body[0]), id(model.body[2]), id(model.head)]
    assert list_quantize_layers(model) == layers


def test_untraceable_model_without_example_names_the_fix() -> None:
    class Branchy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.sum() > 0:
                return self.fc(x)
            return -self.fc(x)

    with pytest.raises(PlanError, match=r"Branchy.*example_inputs"):
        quantizable_layers(Branchy())
    assert quantizable_layers(Branchy(), torch.ones(1, 3)) == ["fc"]


# --------------------------------------------------------------------------- plan forms


def _expected_plan() -> QuantPlan:
    return QuantPlan.parse("body.0=8/8,body.2=4/1.58,head=1.58/2")


@pytest.mark.parametrize(
    "plan",
    [
        [[8, 4, TERNARY], [8, TERNARY, 2]],
        ((8, 4, 1.58), (8, "ternary", 2)),
        [8, 4, 1.58, 8, 1.58, 2],  # flat: weights then activations
        {"head": (1.58, 2), "body.0": (8, 8), "body.2": (4, 1.58)},
        {"head": {"w": "t", "a": 2}, "body.0": {"w": 8, "a": 8}, "body.2": {"w": 4, "a": 1.58}},
        "head=1.58/2,body.0=8/8,body.2=4/ternary",
        _expected_plan(),
    ],
    ids=["nested", "tuples", "flat", "map-tuple", "map-dict", "text", "plan"],
)
def test_plan_forms_are_equivalent(plan: Any) -> None:
    parsed = as_plan(plan, EXEC_ORDER)
    assert list(parsed) == EXEC_ORDER  # put in the model's order
    assert parsed == _expected_plan()
    model = quantize_model(_head_first(), plan, DYNAMIC, example_inputs=_x(n=1))
    assert model.head.w_bits == TERNARY
    assert model.body[2].a_bits == TERNARY
    assert model.head.w_fmt == QFormat(2, True)


def test_yaml_round_trip_with_ternary(tmp_path: Path) -> None:
    plan = _expected_plan()
    path = tmp_path / "plan.yaml"
    path.write_text(plan.to_yaml())
    loaded = QuantPlan.load(path)
    assert loaded == plan
    assert loaded.qscheme() == [[8, 4, TERNARY], [8, TERNARY, 2]]
    assert "1.58" in plan.to_yaml()
    model = quantize_model(_head_first(), str(path), DYNAMIC)
    assert model.head.w_bits == TERNARY
    assert model.body[2].a_bits == TERNARY


@pytest.mark.parametrize(
    ("plan", "needles"),
    [
        ([[8, 8], [8, 8]], ["2 weight bit-widths", "3 quantizable layers", "body.0, body.2, head"]),
        ([[8, 8, 8], [8, 8, 8, 8]], ["4 activation bit-widths", "body.0, body.2, head"]),
        ([8, 8, 8, 8, 8], ["flat qscheme needs 6", "got 5", "3 quantizable layers"]),
        ([[8, 8, 8], [8, 8, 8], [8, 8, 8]], ["flat qscheme needs 6", "got 3"]),
        (
            {"body.0": (8, 8), "body.2": (8, 8)},
            ["no bit-widths for head", "(body.0, body.2, head)"],
        ),
        (
            {"body.0": (8, 8), "body.2": (8, 8), "head": (8, 8), "nope": (8, 8)},
            ["unknown layer(s) nope", "(body.0, body.2, head)"],
        ),
        ({"unused": (8, 8), "body.0": (8, 8), "body.2": (8, 8)}, ["unknown layer(s) unused"]),
        ([[8, 8, 0], [8, 8, 8]], ["layer 'head': weight bit-width is 0", "1..8"]),
        ([[8, 8, 8], [8, 9, 8]], ["layer 'body.2': activation bit-width is 9", "1..8"]),
        ([[8, 2.5, 8], [8, 8, 8]], ["layer 'body.2': weight bit-width 2.5", "whole number"]),
        ({"head": {"w": 8}}, ["layer 'head'", "{w: W, a: A}"]),
        (42, ["cannot read a quantization plan from int"]),
        (None, ["cannot read a quantization plan from NoneType"]),
        ({8, 4}, ["cannot read a quantization plan from set"]),
    ],
    ids=[
        "short-weights",
        "long-acts",
        "flat-count",
        "three-lists",
        "missing",
        "unknown",
        "unused-layer",
        "bits-0",
        "bits-9",
        "bits-2.5",
        "incomplete-entry",
        "int",
        "none",
        "set",
    ],
)
def test_bad_plans_raise_plan_error_and_leave_model_untouched(
    plan: Any, needles: list[str]
) -> None:
    model = _head_first()
    with pytest.raises(PlanError) as info:
        quantize_model(model, plan, DYNAMIC, example_inputs=_x(n=1))
    for needle in needles:
        assert needle in str(info.value)
    assert bit_layers(model) == {}


@settings(max_examples=50, deadline=None)
@given(
    w=st.lists(st.sampled_from([1, 2, 3, 4, 5, 6, 7, 8, TERNARY]), min_size=3, max_size=3),
    a=st.lists(st.sampled_from([1, 2, 3, 4, 5, 6, 7, 8, TERNARY]), min_size=3, max_size=3),
)
def test_nested_flat_and_mapping_forms_agree(w: list[float], a: list[float]) -> None:
    nested = as_plan([w, a], EXEC_ORDER)
    assert as_plan(w + a, EXEC_ORDER) == nested
    assert (
        as_plan(
            dict(zip(EXEC_ORDER[::-1], zip(w[::-1], a[::-1], strict=True), strict=True)), EXEC_ORDER
        )
        == nested
    )
    assert nested.qscheme() == [w, a]
    assert QuantPlan.from_dict(yaml.safe_load(nested.to_yaml())) == nested


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"weight_granularity": "row"}, "weight_granularity must be one of tensor, channel"),
        ({"weight_method": "percentile"}, "weight_method must be one of"),
        ({"act_mode": "runtime"}, "act_mode must be one of static, dynamic; got 'runtime'"),
        ({"act_method": "absmean"}, "act_method must be one of"),
        ({"percentile": 0}, "percentile must be in (0, 100], got 0"),
        ({"percentile": 100.5}, "percentile must be in (0, 100]"),
    ],
)
def test_quant_config_invalid_values(kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(PlanError) as info:
        QuantConfig(**kwargs)
    assert needle in str(info.value)


def test_quant_config_replace_and_dict_round_trip() -> None:
    config = QuantConfig(act_mode="dynamic", learned_step=True)
    assert QuantConfig.from_dict(config.to_dict()) == config
    with pytest.raises(PlanError, match=r"unknown quantization option\(s\) colour"):
        config.replace(colour="red")
    with pytest.raises(PlanError, match="act_method must be one of"):
        config.replace(act_method="nope")


# --------------------------------------------------------------------------- MiCo's API


def test_replace_quantize_layers_runs_dynamically_at_once() -> None:
    model = _head_first()
    x = _x()
    with torch.no_grad():
        float_out = model(x)
    out_model = replace_quantize_layers(model, [8, 4, 2], [8, 8, 4])
    assert out_model is model
    layers = list_quantize_layers(model, x[:1])
    assert [type(m) for m in layers] == [BitConv1d, BitConv1d, BitLinear]
    assert [(m.w_bits, m.a_bits) for m in layers] == [(8, 8), (4, 8), (2, 4)]
    assert all(m.qconfig.act_mode == "dynamic" and m.mode == "quant" for m in layers)
    with torch.no_grad():
        out = model(x)  # no calibration needed
    assert out.shape == float_out.shape
    assert bool(torch.isfinite(out).all())
    assert not torch.equal(out, float_out)
    torch.testing.assert_close(out, float_out, atol=0.5, rtol=0.5)


def test_replace_quantize_layers_quant_aware_and_without_bias() -> None:
    model = replace_quantize_layers(
        _head_first(), [4, 4, 4], [8, 8, 8], quant_aware=True, use_bias=False
    )
    layers = list(bit_layers(model).values())
    assert all(m.bias is None for m in layers)
    assert all(isinstance(m.weight_step, nn.Parameter) for m in layers)
    model(_x()).sum().backward()
    assert all(m.weight_step.grad is not None for m in layers)


# --------------------------------------------------------------------------- re-quantization


def test_requantizing_changes_bits_and_drops_static_scales() -> None:
    model = _head_first()
    quantize_model(model, [[8, 8, 8], [8, 8, 8]], example_inputs=_x(n=1))
    calibrate(model, [_x()])
    scale_body0 = model.body[0].act_scale
    assert scale_body0 is not None and model.head.act_scale is not None
    layer_objects = [model.body[0], model.body[2], model.head]
    quantize_model(model, [[8, 8, 4], [8, 8, 6]], example_inputs=_x(n=1))
    # same objects, new bits; only the changed layer loses its scale
    assert [model.body[0], model.body[2], model.head] == layer_objects
    assert (model.head.w_bits, model.head.a_bits) == (4, 6)
    assert model.head.act_scale is None
    assert not model.head.calibrated
    assert model.body[0].act_scale == scale_body0
    with pytest.raises(CalibrationError, match="layer 'head'"):
        model(_x())
    calibrate(model, [_x()])
    assert model.head.calibrated
    assert bool(torch.isfinite(model(_x())).all())


def test_requantizing_with_another_config_rebuilds_layers_with_same_weights() -> None:
    model = _head_first()
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    quantize_model(model, [[8, 8, 8], [8, 8, 8]], example_inputs=_x(n=1))
    quantize_model(model, [[4, 4, 4], [4, 4, 4]], DYNAMIC, example_inputs=_x(n=1))
    assert all(m.qconfig == DYNAMIC for m in bit_layers(model).values())
    for key, value in weights.items():
        assert torch.equal(model.state_dict()[key], value)
    assert bool(torch.isfinite(model(_x())).all())  # dynamic: runs without calibration


# --------------------------------------------------------------------------- weight scales


def test_per_channel_weight_scales_have_one_scale_per_output_channel() -> None:
    conv = nn.Conv1d(3, 5, 3)
    with torch.no_grad():
        conv.weight.copy_(torch.randn(5, 3, 3) * torch.tensor([0.1, 1, 3, 0.5, 2]).reshape(5, 1, 1))
    for method in ("absmax", "mse"):
        config = QuantConfig(weight_granularity="channel", weight_method=method, act_mode="dynamic")
        model = quantize_model(nn.Sequential(copy.deepcopy(conv)), [[4], [8]], config)
        scales = model[0].weight_scale
        assert isinstance(scales, np.ndarray)
        assert scales.shape == (5,)
        assert len(set(scales.tolist())) == 5
        if method == "absmax":
            amax = conv.weight.detach().abs().reshape(5, -1).amax(dim=1).double().numpy()
            np.testing.assert_allclose(scales, amax / 7, rtol=1e-6)
        codes = model[0].weight_codes()
        assert codes.shape == (5, 3, 3)
        assert all(np.abs(codes[c]).max() >= 4 for c in range(5))  # every channel uses its range
    tensor_model = quantize_model(nn.Sequential(copy.deepcopy(conv)), [[4], [8]], DYNAMIC)
    assert isinstance(tensor_model[0].weight_scale, float)


@pytest.mark.parametrize("bits", [TERNARY, 1])
@pytest.mark.parametrize("granularity", ["tensor", "channel"])
@pytest.mark.parametrize("method", ["mse", "absmax"])
def test_ternary_and_binary_weights_use_absmean_scale(
    bits: float, granularity: str, method: str
) -> None:
    torch.manual_seed(3)
    linear = nn.Linear(10, 4)
    config = QuantConfig(weight_granularity=granularity, weight_method=method, act_mode="dynamic")
    model = quantize_model(nn.Sequential(linear), [[bits], [8]], config)
    w = linear.weight.detach().numpy()
    if granularity == "tensor":
        assert model[0].weight_scale == pytest.approx(float(np.abs(w).mean()), rel=1e-6)
    else:
        np.testing.assert_allclose(model[0].weight_scale, np.abs(w).mean(axis=1), rtol=1e-6)
    codes = set(np.unique(model[0].weight_codes()).tolist())
    assert codes <= ({-1, 0, 1} if bits == TERNARY else {-1, 1})


# --------------------------------------------------------------------------- calibration


def _input_of(model: nn.Module, layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    seen: list[torch.Tensor] = []
    handle = layer.register_forward_pre_hook(lambda _m, inp: seen.append(inp[0].detach()))
    try:
        with torch.no_grad():
            model(x)
    finally:
        handle.remove()
    return seen[0]


@pytest.mark.parametrize("bits", [8, 4, 2])
def test_static_calibration_methods(bits: int) -> None:
    x = torch.randn(64, 6, generator=torch.Generator().manual_seed(5)) * 2
    scales = {}
    for method in ("minmax", "percentile", "mse"):
        config = QuantConfig(act_method=method, percentile=90.0)
        model = apply_plan(_mlp(), [[8, 8], [bits, bits]], config)
        calibrate(model, [x])
        scales[method] = (model[0].act_scale, model[2].act_scale)
        assert model[0].act_signed is True
        assert model[2].act_signed is False  # after ReLU
        assert model[0].a_fmt == QFormat(bits, True)
        assert model[2].a_fmt == QFormat(bits, False)
        if method == "minmax":
            qmax_s = QFormat(bits, True).qmax
            assert scales[method][0] == float(np.float32(float(x.abs().max()) / qmax_s))
            relu_in = _input_of(model, model[2], x)
            assert float(relu_in.min()) >= 0
            qmax_u = QFormat(bits, False).qmax
            assert scales[method][1] == float(np.float32(float(relu_in.max()) / qmax_u))
            with torch.no_grad():
                codes = model[2].quant_input(relu_in) / model[2].act_scale
            assert float(codes.min()) >= 0
            assert round(float(codes.max())) == qmax_u  # unsigned codes reach 2**b - 1
    for i in (0, 1):
        assert scales["percentile"][i] < scales["minmax"][i]
        assert scales["mse"][i] <= scales["minmax"][i] * (1 + 1e-6)


def test_dynamic_mode_needs_no_calibration_static_mode_does() -> None:
    x = _x()
    dynamic = quantize_model(_head_first(), [[4, 4, 4], [4, 4, 4]], DYNAMIC)
    assert all(m.calibrated for m in bit_layers(dynamic).values())
    assert bool(torch.isfinite(dynamic(x)).all())
    static = quantize_model(_head_first(), [[4, 4, 4], [4, 4, 4]])
    assert not any(m.calibrated for m in bit_layers(static).values())
    with pytest.raises(CalibrationError) as info:
        static(x)
    assert "layer 'body.0'" in str(info.value)
    assert "calibrate" in str(info.value)


def test_float_state_dict_loads_into_quantized_model_uncalibrated() -> None:
    float_model = _head_first(seed=7)
    qmodel = quantize_model(_head_first(), [[8, 8, 8], [8, 8, 8]])
    calibrate(qmodel, [_x()])
    assert all(m.calibrated for m in bit_layers(qmodel).values())
    result = qmodel.load_state_dict(float_model.state_dict())
    assert list(result.missing_keys) == [] and list(result.unexpected_keys) == []
    for layer in bit_layers(qmodel).values():
        assert not layer.calibrated
        assert layer.act_signed is None
    assert torch.equal(qmodel.head.weight, float_model.head.weight)
    with pytest.raises(CalibrationError, match=r"layer 'body\.0'"):
        qmodel(_x())
    calibrate(qmodel, [_x()])
    assert bool(torch.isfinite(qmodel(_x())).all())


# --------------------------------------------------------------------------- cached weights


def _fresh_twin(float_model: nn.Module, plan: Any) -> nn.Module:
    return quantize_model(copy.deepcopy(float_model), plan, DYNAMIC)


def _outputs(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The output without gradients (cached weights) and with (the QAT path)."""
    with torch.no_grad():
        inference = model(x)
    with torch.enable_grad():
        training = model(x).detach()
    return inference, training


PLAN = [[4, 3, 2], [8, 8, 8]]


def _prime(model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    return _outputs(model, _x())


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(
            "data_mul",
        ),
        pytest.param(
            "data_copy",
        ),
        "no_grad_mul",
        "assign_data",
        "optimizer_step",
    ],
)
def test_cached_quantized_weight_follows_weight_changes(change: str) -> None:
    float_model = _head_first()
    qmodel = _fresh_twin(float_model, PLAN)
    before = _prime(qmodel)  # fills the caches
    new_weight = float_model.body[0].weight.detach() * 2
    if change == "data_mul":
        qmodel.body[0].weight.data.mul_(2)
    elif change == "data_copy":
        qmodel.body[0].weight.data.copy_(new_weight)
    elif change == "no_grad_mul":
        with torch.no_grad():
            qmodel.body[0].weight.mul_(2)
    elif change == "assign_data":
        qmodel.body[0].weight.data = new_weight.clone()
    elif change == "optimizer_step":
        optimizer = torch.optim.SGD([qmodel.body[0].weight], lr=1.0)
        qmodel.body[0].weight.grad = -new_weight / 2  # w - lr * grad == 2 w
        optimizer.step()
    torch.testing.assert_close(qmodel.body[0].weight.detach(), new_weight)
    with torch.no_grad():
        float_model.body[0].weight.copy_(new_weight)
    expected = _outputs(_fresh_twin(float_model, PLAN), _x())
    after = _outputs(qmodel, _x())
    assert not torch.equal(after[0], before[0])
    assert torch.equal(after[0], expected[0])
    assert torch.equal(after[1], expected[1])


def test_cached_weight_follows_data_assignment_back_to_the_same_storage() -> None:
    float_model = _head_first()
    qmodel = _fresh_twin(float_model, PLAN)
    layer = qmodel.body[0]
    first = layer.weight.detach().clone()
    layer.weight.data = first
    _prime(qmodel)  # cached under first's address
    layer.weight.data = first.clone() * 3  # some other weights, never run
    first.mul_(2)  # the earlier tensor is edited while detached from the layer
    layer.weight.data = first  # back to the same storage: same address, same version
    with torch.no_grad():
        float_model.body[0].weight.copy_(first)
    expected = _outputs(_fresh_twin(float_model, PLAN), _x())
    after = _outputs(qmodel, _x())
    assert torch.equal(after[0], expected[0])
    assert torch.equal(after[1], expected[1])


def test_cached_weight_follows_load_state_dict() -> None:
    qmodel = _fresh_twin(_head_first(0), PLAN)
    before = _prime(qmodel)
    other = _head_first(seed=11)
    qmodel.load_state_dict(_fresh_twin(other, PLAN).state_dict())
    after = _outputs(qmodel, _x())
    assert not torch.equal(after[0], before[0])
    expected = _outputs(_fresh_twin(other, PLAN), _x())
    assert torch.equal(after[0], expected[0]) and torch.equal(after[1], expected[1])
    # a float state dict works too (dynamic layers need no scales)
    qmodel.load_state_dict(_head_first(seed=0).state_dict())
    assert torch.equal(_outputs(qmodel, _x())[0], before[0])


def test_cached_weight_follows_fuse_model() -> None:
    torch.manual_seed(0)
    float_model = nn.Sequential(
        nn.Conv1d(2, 4, 3), nn.BatchNorm1d(4), nn.ReLU(), nn.Flatten(), nn.Linear(8, 3)
    )
    with torch.no_grad():
        float_model[1].running_mean.uniform_(-1, 1)
        float_model[1].running_var.uniform_(0.5, 2)
        float_model[1].weight.uniform_(0.5, 3)
    float_model.eval()
    plan = [[4, 4], [8, 8]]
    x = _x()
    for inplace in (False, True):
        qmodel = _fresh_twin(float_model, plan)
        _outputs(qmodel, x)
        fused = fuse_model(qmodel, inplace=inplace)
        assert isinstance(fused[1], nn.Identity)
        expected = _outputs(_fresh_twin(fuse_model(float_model), plan), x)
        after = _outputs(fused, x)
        assert torch.equal(after[0], expected[0])
        assert torch.equal(after[1], expected[1])


# --------------------------------------------------------------------------- LSQ


def test_learned_steps_are_parameters_that_train() -> None:
    torch.manual_seed(0)
    model = apply_plan(_mlp(), [[4, 4], [4, 4]], QuantConfig(learned_step=True))
    x = torch.randn(64, 6, generator=torch.Generator().manual_seed(2))
    y = torch.randint(0, 4, (64,), generator=torch.Generator().manual_seed(3))
    calibrate(model, [x])
    names = dict(model.named_parameters())
    for prefix in ("0", "2"):
        assert isinstance(names[f"{prefix}.activation_scale"], nn.Parameter)
        assert isinstance(names[f"{prefix}.weight_step"], nn.Parameter)
        assert float(names[f"{prefix}.weight_step"].detach().abs().min()) > 0  # initialised
        layer: BitLayer = model[int(prefix)]
        assert layer.act_scale == pytest.approx(float(names[f"{prefix}.activation_scale"].detach()))
    start = {k: v.detach().clone() for k, v in names.items() if "step" in k or "scale" in k}
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(5):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        if step == 0:
            for key in start:
                grad = names[key].grad
                assert grad is not None, key
                assert bool((grad != 0).any()), key
        optimizer.step()
    for key, value in start.items():
        assert not torch.equal(names[key].detach(), value), key
    # the layer computes with the learned step
    layer = model[0]
    assert layer.weight_scale == pytest.approx(float(layer.weight_step.detach().abs()))
