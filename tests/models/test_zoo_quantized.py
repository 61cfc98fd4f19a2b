"""Every zoo model quantizes to random mixed plans (ternary included), calibrates, trains
quantization-aware, and folds its BatchNorms without changing its eval-mode output."""

from __future__ import annotations

import random

import pytest
import torch
from torch import nn

from mico.models import from_zoo, model_names
from mico.quant import (
    TERNARY,
    BitLayer,
    QuantConfig,
    bit_layers,
    calibrate,
    fuse_model,
    model_costs,
)

NAMES = model_names()
BITS = [1, 2, 3, 4, 5, 6, 7, 8, TERNARY]


def _random_input(model: nn.Module, batch: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    shape = (batch, *model.default_input_shape)
    if model.input_dtype == torch.long:
        vocab = model.tok_embeddings.num_embeddings
        return torch.randint(0, vocab, shape, generator=g)
    return torch.randn(shape, generator=g)


def _random_plan(n: int, seed: int) -> list[list[float]]:
    rng = random.Random(seed)
    return [[rng.choice(BITS) for _ in range(n)], [rng.choice(BITS) for _ in range(n)]]


@pytest.mark.parametrize("name", NAMES)
def test_random_mixed_plans_dynamic_and_static(name: str) -> None:
    torch.manual_seed(0)
    model = from_zoo(name).eval()
    x = _random_input(model, 2, seed=1)
    n = model.n_layers
    plan = _random_plan(n, seed=hash(name) % 1000)
    model.set_qscheme(plan)  # dynamic activations: runs at once
    layers = list(bit_layers(model).values())
    assert len(layers) == n
    assert [
        [layer.w_bits for layer in model.get_qlayers()],
        [layer.a_bits for layer in model.get_qlayers()],
    ] == plan
    out = model(x)
    assert torch.isfinite(out).all()
    # static activations after calibration, same plan
    model.set_qscheme(plan, act_mode="static")
    calibrate(model, [_random_input(model, 4, seed=2)])
    assert all(layer.calibrated and layer.act_scale for layer in bit_layers(model).values())
    static = model(x)
    assert static.shape == out.shape and torch.isfinite(static).all()
    costs = model_costs(model)
    assert [c.name for c in costs.layers] == model.quantize_layer_names()
    assert costs.bops == pytest.approx(
        sum(c.macs * float(c.w_bits) * float(c.a_bits) for c in costs.layers)
    )


@pytest.mark.parametrize("name", NAMES)
def test_quantization_aware_training_step(name: str) -> None:
    torch.manual_seed(0)
    model = from_zoo(name)
    n = model.n_layers
    model.set_qscheme([[4] * n, [4] * n])
    x = _random_input(model, 2, seed=3)
    out = model(x)
    if model.task == "language":
        target = torch.randint(0, out.shape[-1], out.shape[:-1])
    else:
        target = torch.randint(0, out.shape[-1], (2,))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.loss(out, target).backward()
    for layer in bit_layers(model).values():
        assert layer.weight.grad is not None and torch.isfinite(layer.weight.grad).all()
        assert layer.weight.grad.abs().sum() > 0, "the straight-through gradient reaches weights"
    optimizer.step()
    changed = [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])]
    assert changed


def _randomize_batchnorms(model: nn.Module, seed: int) -> int:
    g = torch.Generator().manual_seed(seed)
    count = 0
    for m in model.modules():
        if isinstance(m, nn.BatchNorm1d | nn.BatchNorm2d):
            count += 1
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.5)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                if m.affine:
                    m.weight.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                    m.bias.copy_(torch.randn(m.num_features, generator=g) * 0.2)
    return count


@pytest.mark.parametrize("name", NAMES)
def test_bn_folding_keeps_eval_outputs(name: str) -> None:
    torch.manual_seed(0)
    model = from_zoo(name).eval()
    n_bn = _randomize_batchnorms(model, seed=5)
    x = _random_input(model, 2, seed=6)
    with torch.no_grad():
        expected = model(x)
        fused = fuse_model(model)
        got = fused(x)
    assert (got - expected).abs().max().item() < 1e-5 * max(1.0, expected.abs().max().item())
    left = [m for m in fused.modules() if isinstance(m, nn.BatchNorm1d | nn.BatchNorm2d)]
    assert not left, f"{len(left)} of {n_bn} BatchNorms were not folded"
    assert type(fused) is type(model)
    # the original keeps its BatchNorms
    assert sum(isinstance(m, nn.BatchNorm1d | nn.BatchNorm2d) for m in model.modules()) == n_bn


@pytest.mark.parametrize("name", ["resnet8", "mobilenetv2", "dscnn", "m5"])
def test_bn_folding_into_quantized_layers_refreshes_their_weights(name: str) -> None:
    torch.manual_seed(0)
    model = from_zoo(name).eval()
    _randomize_batchnorms(model, seed=7)
    n = model.n_layers
    model.set_qscheme([[8] * n, [8] * n], config=QuantConfig(act_mode="dynamic"))
    x = _random_input(model, 2, seed=8)
    with torch.no_grad():
        before = model(x)  # fills the cached quantized weights
        fused = fuse_model(model)
        after = fused(x)
        # the same folded float weights, quantized from scratch
        fresh = fuse_model(model)
        for layer in bit_layers(fresh).values():
            layer._scale_cache = layer._weight_cache = None
        reference = fresh(x)
    assert torch.equal(after, reference)
    # W8 quantization error is small relative to the outputs
    assert (after - before).abs().max() < 0.1 * before.abs().max() + 0.1
    assert all(isinstance(m, BitLayer) for m in fused.get_qlayers())
