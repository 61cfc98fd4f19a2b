"""ModelFactory: models from configs of registered and unregistered modules, validated first."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mico.errors import ConfigError
from mico.registry import ConfigModel, ModelFactory, ModuleRegistry

RESIDUAL = {
    "input_shape": [1, 8, 8],
    "layers": [
        {
            "name": "stem",
            "module": "conv2d",
            "config": {"in_channels": 1, "out_channels": 4, "kernel_size": 3, "padding": 1},
        },
        {"name": "act", "module": "relu"},
        {
            "name": "conv",
            "module": "conv2d",
            "config": {"in_channels": 4, "out_channels": 4, "kernel_size": 3, "padding": 1},
        },
        {"name": "join", "module": "add", "inputs": ["conv", "act"]},
        {"name": "flat", "module": "flatten"},
        {"name": "fc", "module": nn.Linear, "config": {"in_features": 256, "out_features": 10}},
    ],
}


def test_sequential_config_matches_hand_built_model():
    config = {
        "layers": [
            {"name": "fc1", "module": "linear", "config": {"in_features": 4, "out_features": 8}},
            {"name": "relu", "module": "relu"},
            {"name": "fc2", "module": "linear", "config": {"in_features": 8, "out_features": 2}},
        ]
    }
    torch.manual_seed(0)
    model = ModelFactory.from_config(config)
    assert isinstance(model, ConfigModel)
    reference = nn.Sequential(model.layers["fc1"], nn.ReLU(), model.layers["fc2"])
    x = torch.randn(3, 4)
    assert torch.equal(model(x), reference(x))


def test_residual_graph_computes_the_skip_connection():
    model = ModelFactory.from_config(RESIDUAL)
    x = torch.randn(2, 1, 8, 8)
    stem = torch.relu(model.layers["stem"](x))
    expected = model.layers["fc"](torch.flatten(model.layers["conv"](stem) + stem, 1))
    assert torch.allclose(model(x), expected)
    assert model.example_input().shape == (1, 1, 8, 8)


def test_config_model_compiles_to_c_that_matches_python(tmp_path):
    """A factory-built residual model goes the whole way: static W/A plan, C, host run."""
    import numpy as np

    from mico.codegen.compile import compile_model
    from mico.pipeline import quantize_ptq
    from mico.quant import QuantConfig, as_plan, quantizable_layers
    from mico.targets import host

    torch.manual_seed(0)
    model = ModelFactory.from_config(RESIDUAL).eval()
    example = model.example_input()
    names = quantizable_layers(model, example)
    assert names == ["layers.stem", "layers.conv", "layers.fc"]
    batches = [torch.randn(4, 1, 8, 8) for _ in range(2)]
    plan = as_plan([[8, 4, 2], [8, 8, 8]], names)
    qmodel = quantize_ptq(model, plan, batches, QuantConfig(act_mode="static"))
    compiled = compile_model(qmodel, example, tmp_path / "proj", mode="static", calibration=batches)
    samples = torch.randn(5, 1, 8, 8).numpy()
    host.build(compiled.project)
    outputs = host.run(compiled.project, samples)
    assert np.array_equal(outputs, compiled.reference(samples))


def test_two_outputs():
    config = {
        "outputs": ["a", "b"],
        "layers": [
            {"name": "a", "module": "linear", "config": {"in_features": 2, "out_features": 3}},
            {"name": "b", "module": "relu", "inputs": ["input"]},
        ],
    }
    a, b = ModelFactory.from_config(config)(torch.ones(1, 2))
    assert a.shape == (1, 3) and torch.equal(b, torch.ones(1, 2))


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"layers": []}, "'layers' must be a non-empty list"),
        ([1], "a model config must be a mapping"),
        (
            {"layers": [{"name": "x", "module": "conv2dd"}]},
            "layer 0 'x': field 'module': no module named 'conv2dd'.*did you mean 'conv2d'",
        ),
        (
            {"layers": [{"name": "fc", "module": "linear", "config": {"in_features": "4"}}]},
            "layer 0 'fc': config: missing required field 'out_features'.*"
            "field 'in_features' should be int, got str '4'",
        ),
        (
            {"layers": [{"name": "fc", "module": 3}]},
            "field 'module' must be a registered module name or a class",
        ),
        (
            {"layers": [{"name": "a.b", "module": "relu"}]},
            "field 'name' must be a Python identifier",
        ),
        (
            {"layers": [{"name": "r", "module": "relu"}, {"name": "r", "module": "relu"}]},
            "layer 1 'r': field 'name': 'r' is already used",
        ),
        (
            {
                "layers": [
                    {"name": "r", "module": "relu", "inputs": ["later"]},
                    {"name": "later", "module": "relu"},
                ]
            },
            "layer 0 'r': field 'inputs': 'later' is not a model input or an earlier layer",
        ),
        (
            {"layers": [{"name": "r", "module": "relu", "inptus": []}]},
            "layer 0 'r': unknown field\\(s\\) 'inptus'",
        ),
        (
            {"layers": [{"name": "r", "module": "relu"}], "outputs": ["nope"]},
            "'outputs': 'nope' is not a layer",
        ),
        (
            {"layers": [{"name": "r", "module": "relu"}], "input_shape": [1, 0]},
            "'input_shape' must be a list of positive integers",
        ),
        ({"layer": []}, "unknown model config key\\(s\\) 'layer'"),
    ],
)
def test_invalid_configs_name_the_layer_and_field(config, message):
    with pytest.raises(ConfigError, match=message):
        ModelFactory.from_config(config)


def test_nothing_is_built_when_a_later_layer_is_invalid(monkeypatch):
    built = []

    class Probe(nn.Module):
        def __init__(self, width: int) -> None:
            super().__init__()
            built.append(width)

    config = {
        "layers": [
            {"name": "p", "module": Probe, "config": {"width": 1}},
            {"name": "q", "module": "linear", "config": {"in_features": 1}},
        ]
    }
    with pytest.raises(ConfigError, match="layer 1 'q'"):
        ModelFactory.from_config(config)
    assert built == []


def test_constructor_failure_names_the_layer():
    config = {
        "layers": [
            {"name": "fc", "module": "linear", "config": {"in_features": -1, "out_features": 2}}
        ]
    }
    with pytest.raises(ConfigError, match=r"layer 0 'fc': building Linear with .* failed"):
        ModelFactory.from_config(config)


def test_device_reaches_only_modules_that_take_it():
    seen = {}

    class WithDevice(nn.Module):
        def __init__(self, width: int, device=None) -> None:
            super().__init__()
            seen["device"] = device

        def forward(self, x):
            return x

    config = {
        "layers": [
            {"name": "d", "module": WithDevice, "config": {"width": 2}},
            {"name": "r", "module": "relu"},
        ]
    }
    ModelFactory.from_config(config, device="cpu")
    assert seen["device"] == "cpu"


def test_aliases_resolve_in_configs():
    with ModuleRegistry.scoped():
        ModuleRegistry.add(nn.Tanh, "tanh-act", "layer", alias="th")
        model = ModelFactory.from_config({"layers": [{"name": "t", "module": "th"}]})
        assert isinstance(model.layers["t"], nn.Tanh)
