"""Seed 003's small print: subclassing MiCoModel as the seed says (set n_layers), from_torch,
test_quantized, weight_quant and export_layer_weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from mico.errors import ConfigError, PlanError
from mico.models import MiCoModel, from_torch
from mico.quant import export_layer_weights, weight_quant


class SeedStyleNet(MiCoModel):
    """Written as the seed's guide says: inherit MiCoModel, set n_layers."""

    def __init__(self, n_layers: int = 3) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.fc1 = nn.Linear(4 * 8 * 8, 16)
        self.fc2 = nn.Linear(16, 10)
        self.default_input_shape = (1, 8, 8)
        self.n_layers = n_layers  # the seed's "set n_layers attribute for search compatibility"

    def forward(self, x):
        x = torch.relu(self.conv(x)).flatten(1)
        return self.fc2(torch.relu(self.fc1(x)))


def loaders():
    from mico.data import digits_loaders

    return digits_loaders(batch_size=64)


def test_seed_style_subclass_sets_n_layers_and_quantizes():
    model = SeedStyleNet()
    assert model.n_layers == 3
    model.set_qscheme([[8] * model.n_layers, [8] * model.n_layers])
    assert [layer.w_bits for layer in model.get_qlayers()] == [8, 8, 8]


def test_a_wrong_n_layers_is_named():
    model = SeedStyleNet(n_layers=5)
    with pytest.raises(PlanError, match="sets n_layers = 5 but has 3 quantizable layers"):
        _ = model.n_layers
    with pytest.raises(PlanError, match="non-negative integer"):
        model.n_layers = "3"


def test_missing_default_input_shape_says_how_to_fix():
    class NoShape(MiCoModel):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

    with pytest.raises(NotImplementedError, match=r"default_input_shape = \(1, 28, 28\)"):
        NoShape().example_input()


def test_test_quantized_leaves_the_model_alone():
    train_loader, test_loader = loaders()
    model = SeedStyleNet()
    model.train_loop(2, train_loader, verbose=False)
    fp = model.test(test_loader)
    int8 = model.test_quantized(test_loader)
    assert abs(int8 - fp) < 0.05  # the seed's "int8_acc > fp_acc * 0.95" holds
    assert not any(hasattr(m, "w_bits") for m in model.modules())  # still float
    two_bit = model.test_quantized(test_loader, [[2, 2, 2], [2, 2, 2]])
    assert two_bit < int8


def test_from_torch_wraps_any_module():
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 30 * 30, 10))
    model = from_torch(net, (3, 32, 32))
    assert model.n_layers == 2
    assert model.quantize_layer_names() == ["model.0", "model.3"]
    model.set_qscheme([[4, 2], [8, 8]])
    assert model(torch.zeros(2, 3, 32, 32)).shape == (2, 10)
    assert from_torch(model, (3, 32, 32)) is model
    with pytest.raises(ConfigError, match=r"does not run on an input of shape \(1, 3, 16, 16\)"):
        from_torch(net, (3, 16, 16))
    with pytest.raises(ConfigError, match=r"needs a torch\.nn\.Module"):
        from_torch(lambda x: x, (3,))


@pytest.mark.parametrize("bits", [8, 4, 3, 2, 1, 1.58])
def test_weight_quant_matches_the_layer_and_its_grid(bits):
    torch.manual_seed(0)
    model = SeedStyleNet()
    model.set_qscheme([[bits] * 3, [8] * 3])
    layer = model.get_qlayers()[1]
    expected = layer.quant_weight().detach()
    got = weight_quant(layer.weight, bits)
    assert torch.equal(got, expected)
    levels = torch.unique(got).numel()
    assert levels <= (3 if bits == 1.58 else 2 ** int(bits))


def test_export_layer_weights_gives_codes_times_scale():
    model = SeedStyleNet()
    model.set_qscheme([[8, 4, 1.58], [8, 8, 8]])
    exported = export_layer_weights(model)
    assert list(exported) == ["conv", "fc1", "fc2"]
    for name, entry in exported.items():
        layer = dict(model.named_modules())[name]
        scale = np.asarray(entry["scale"])
        weights = entry["codes"] * (
            scale.reshape(-1, *[1] * (entry["codes"].ndim - 1)) if scale.ndim else scale
        )
        assert np.allclose(weights, layer.quant_weight().detach().numpy(), atol=1e-6)
        assert entry["shape"] == tuple(layer.weight.shape)
        assert entry["codes"].dtype == np.int64
    assert set(np.unique(exported["fc2"]["codes"])) <= {-1, 0, 1}
    with pytest.raises(PlanError, match="no quantized layers; quantize it first"):
        export_layer_weights(SeedStyleNet())


def test_weight_quant_refuses_bad_input():
    with pytest.raises(PlanError, match="NaN or infinite"):
        weight_quant(torch.tensor([1.0, float("nan")]), 4)
    with pytest.raises(PlanError):
        weight_quant(torch.ones(3), 9)
