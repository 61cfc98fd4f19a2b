"""BatchNorm folding: which pairs are folded, the result equals the original in eval mode,
the original model is left alone, quantized layers and untraceable models."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch import nn

from mico.quant import (
    BitConv2d,
    BitLinear,
    QuantConfig,
    fold_bn_into,
    fuse_model,
    fuse_model_seq,
    quantize_model,
)

BNS = (nn.BatchNorm1d, nn.BatchNorm2d)


def _randomize_bn(model: nn.Module, seed: int = 0) -> nn.Module:
    """Random running statistics (and affine parameters) so that folding is not trivial."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, BNS) and m.running_mean is not None:
                n = m.num_features
                m.running_mean.copy_(torch.randn(n, generator=g))
                m.running_var.copy_(torch.rand(n, generator=g) * 2 + 0.2)
                if m.weight is not None:
                    m.weight.copy_(torch.rand(n, generator=g) * 2 + 0.3)
                if m.bias is not None:
                    m.bias.copy_(torch.randn(n, generator=g))
    return model.eval()


def _n_bn(model: nn.Module) -> int:
    return sum(isinstance(m, BNS) for m in model.modules())


def _state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


def _max_diff(a: nn.Module, b: nn.Module, x: torch.Tensor) -> float:
    with torch.no_grad():
        return float((a(x) - b(x)).abs().max())


def _bn_kwargs(variant: str) -> dict[str, Any]:
    return {
        "affine": {"affine": True},
        "no-affine": {"affine": False},
        "no-bn-bias": {"bias": False},
    }[variant]


PAIRS = {
    "conv1d": (
        lambda bias, kw: (nn.Conv1d(3, 5, 3, padding=1, bias=bias), nn.BatchNorm1d(5, **kw)),
        (4, 3, 11),
    ),
    "conv2d": (
        lambda bias, kw: (nn.Conv2d(3, 5, (3, 2), bias=bias), nn.BatchNorm2d(5, **kw)),
        (4, 3, 7, 6),
    ),
    "conv2d-depthwise": (
        lambda bias, kw: (nn.Conv2d(4, 4, 3, groups=4, bias=bias), nn.BatchNorm2d(4, **kw)),
        (4, 4, 6, 6),
    ),
    "linear": (lambda bias, kw: (nn.Linear(6, 5, bias=bias), nn.BatchNorm1d(5, **kw)), (8, 6)),
}


@pytest.mark.parametrize("bn_variant", ["affine", "no-affine", "no-bn-bias"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("pair", list(PAIRS))
def test_fold_pair_keeps_eval_output(pair: str, bias: bool, bn_variant: str) -> None:
    torch.manual_seed(0)
    build, shape = PAIRS[pair]
    layer, bn = build(bias, _bn_kwargs(bn_variant))
    model = _randomize_bn(nn.Sequential(layer, bn, nn.ReLU()))
    before = _state(model)
    x = torch.randn(shape)
    fused = fuse_model(model, x)  # Linear + BN folds are checked on an example
    assert fused is not model
    assert isinstance(fused[1], nn.Identity)
    assert _n_bn(fused) == 0
    assert fused[0].bias is not None  # the folded shift lives in the bias
    assert _max_diff(fused, model, x) < 1e-5
    # the original is untouched
    assert isinstance(model[1], BNS)
    after = model.state_dict()
    assert set(after) == set(before)
    assert all(torch.equal(after[k], v) for k, v in before.items())


def test_inplace_fuses_the_given_model() -> None:
    model = _randomize_bn(nn.Sequential(nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3)))
    reference = _randomize_bn(nn.Sequential(nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3)))
    reference.load_state_dict(model.state_dict())
    out = fuse_model(model, inplace=True)
    assert out is model
    assert isinstance(model[1], nn.Identity)
    assert _max_diff(model, reference, torch.randn(2, 2, 5, 5)) < 1e-5


def test_fold_bn_into_formula() -> None:
    conv = nn.Conv1d(2, 3, 1, bias=False)
    bn = nn.BatchNorm1d(3, eps=0.0)
    with torch.no_grad():
        conv.weight.copy_(torch.tensor([[[1.0], [2.0]], [[3.0], [4.0]], [[-1.0], [0.5]]]))
        bn.running_mean.copy_(torch.tensor([1.0, 2.0, 3.0]))
        bn.running_var.copy_(torch.tensor([4.0, 1.0, 0.25]))
        bn.weight.copy_(torch.tensor([2.0, 1.0, 1.0]))
        bn.bias.copy_(torch.tensor([0.5, 0.0, -1.0]))
    fold_bn_into(conv, bn)
    # g = gamma / sqrt(var) = [1, 1, 2]; w' = w * g; b' = (0 - mean) * g + beta
    assert conv.weight.detach().reshape(3, 2).tolist() == [[1, 2], [3, 4], [-2, 1]]
    assert conv.bias is not None
    assert conv.bias.detach().tolist() == [-0.5, -2.0, -7.0]


def test_bn_without_running_stats_cannot_be_folded_directly() -> None:
    with pytest.raises(ValueError, match="running statistics"):
        fold_bn_into(nn.Linear(2, 3), nn.BatchNorm1d(3, track_running_stats=False))


# --------------------------------------------------------------------------- what is folded


class Residual(nn.Module):
    """``conv``'s output feeds both ``bn`` and the residual sum: folding would change it."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3, padding=1)
        self.bn = nn.BatchNorm2d(3)
        self.conv2 = nn.Conv2d(3, 3, 1)
        self.bn2 = nn.BatchNorm2d(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        z = self.bn(y) + y
        return self.bn2(self.conv2(z))


def test_conv_feeding_a_residual_is_not_folded() -> None:
    torch.manual_seed(0)
    model = _randomize_bn(Residual())
    fused = fuse_model(model)
    assert isinstance(fused.bn, nn.BatchNorm2d)  # left alone
    assert isinstance(fused.bn2, nn.Identity)  # the plain pair is folded
    assert _max_diff(fused, model, torch.randn(2, 3, 5, 5)) < 1e-5


class AfterRelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3)
        self.relu = nn.ReLU()
        self.bn = nn.BatchNorm2d(3)
        self.conv2 = nn.Conv2d(3, 3, 1)
        self.bn2 = nn.BatchNorm2d(3)
        self.pool = nn.AvgPool2d(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.bn(self.relu(self.conv(x)))  # BN after a ReLU module
        x = self.bn2(torch.tanh(self.conv2(x)))  # BN after a function
        return self.pool(x)


def test_bn_after_non_conv_ops_is_not_folded() -> None:
    torch.manual_seed(0)
    model = _randomize_bn(AfterRelu())
    fused = fuse_model(model)
    assert _n_bn(fused) == 2
    seq = _randomize_bn(nn.Sequential(nn.Conv2d(2, 3, 3), nn.ReLU(), nn.BatchNorm2d(3)))
    assert _n_bn(fuse_model(seq)) == 1
    assert _n_bn(fuse_model_seq(seq)) == 1


def test_shared_conv_called_twice_is_not_folded() -> None:
    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 3, 1)
            self.bn = nn.BatchNorm2d(3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.conv(self.bn(self.conv(x)))

    model = _randomize_bn(Twice())
    fused = fuse_model(model)
    assert isinstance(fused.bn, nn.BatchNorm2d)
    assert _max_diff(fused, model, torch.randn(2, 3, 4, 4)) == 0.0


def test_bn_without_running_stats_warns_and_stays() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4, track_running_stats=False))
    with pytest.warns(UserWarning, match=r"'1' has no running statistics.*left unfolded"):
        fused = fuse_model(model)
    assert isinstance(fused[1], nn.BatchNorm1d)
    with pytest.warns(UserWarning, match="track_running_stats=False"):
        fuse_model_seq(model)


def test_bn_over_another_dim_of_linear_output_is_not_folded() -> None:
    model = _randomize_bn(nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4)))
    x = torch.randn(2, 4, 5)
    fused = fuse_model(model, x)  # checked on the example: the fold is undone
    assert _max_diff(fused, model, x) < 1e-5
    assert _n_bn(fused) == 1
    with pytest.warns(UserWarning, match=r"'1' after '0' is left unfolded.*example_inputs"):
        unchecked = fuse_model(model)  # no example: Linear + BN is not folded blindly
    assert _max_diff(unchecked, model, x) < 1e-5


def test_bn_with_other_channel_count_is_not_folded() -> None:
    # Linear on (N, C, L) features: the BN normalises C, not the Linear's outputs
    model = _randomize_bn(nn.Sequential(nn.Linear(6, 6), nn.BatchNorm1d(4)))
    x = torch.randn(2, 4, 6)
    fused = fuse_model(model)
    assert _max_diff(fused, model, x) < 1e-5


# --------------------------------------------------------------------------- variants


class Nested(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Sequential(nn.Conv2d(1, 4, 3, bias=False), nn.BatchNorm2d(4), nn.ReLU()),
            nn.Sequential(nn.Conv2d(4, 4, 3, groups=4, bias=False), nn.BatchNorm2d(4), nn.ReLU()),
        )
        self.fc = nn.Linear(4, 3)
        self.bn = nn.BatchNorm1d(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x).mean(dim=(2, 3))
        return self.bn(self.fc(x))


def test_fuse_model_seq_folds_sequential_pairs_only() -> None:
    torch.manual_seed(0)
    model = _randomize_bn(Nested())
    x = torch.randn(3, 1, 8, 8)
    seq = fuse_model_seq(model, x)
    assert isinstance(seq.features[0][1], nn.Identity)
    assert isinstance(seq.features[1][1], nn.Identity)
    assert isinstance(seq.bn, nn.BatchNorm1d)  # not inside a Sequential
    assert _max_diff(seq, model, x) < 1e-5
    assert _n_bn(model) == 3  # untouched
    full = fuse_model(model, x)
    assert _n_bn(full) == 0
    assert _max_diff(full, model, x) < 1e-5
    assert fuse_model_seq(model, inplace=True) is model
    assert _n_bn(model) == 1


@pytest.mark.parametrize("act_mode", ["dynamic", "static"])
def test_folding_into_quantized_layers(act_mode: str) -> None:
    torch.manual_seed(0)
    float_model = _randomize_bn(
        nn.Sequential(
            nn.Conv2d(2, 4, 3, bias=False),
            nn.BatchNorm2d(4),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(36, 5),
            nn.BatchNorm1d(5),
        )
    )
    x = torch.randn(6, 2, 5, 5)
    plan = [[4, 6], [8, 8]]
    config = QuantConfig(act_mode=act_mode)
    qmodel = quantize_model(_copy(float_model), plan, config)
    if act_mode == "static":
        qmodel[0].activation_signed.fill_(1)
        qmodel[4].activation_signed.fill_(0)
        with torch.no_grad():
            qmodel[0].activation_scale.fill_(0.02)
            qmodel[4].activation_scale.fill_(0.05)
    with torch.no_grad():
        qmodel(x)  # fill the cached weights
    fused = fuse_model(qmodel, x)
    assert isinstance(fused[0], BitConv2d) and isinstance(fused[4], BitLinear)
    assert _n_bn(fused) == 0
    assert fused[0].bias is not None
    # the same as quantizing the folded float model (with the same activation state)
    expected = quantize_model(fuse_model(float_model, x), plan, config)
    for name in ("0", "4"):
        for buf in ("activation_scale", "activation_signed"):
            getattr(expected.get_submodule(name), buf).copy_(
                getattr(fused.get_submodule(name), buf)
            )
    with torch.no_grad():
        assert torch.equal(fused(x), expected(x))
    assert fused[0].weight_scale == expected[0].weight_scale
    assert fused[4].weight_scale == expected[4].weight_scale


def _copy(model: nn.Module) -> nn.Module:
    import copy

    return copy.deepcopy(model)


# --------------------------------------------------------------------------- untraceable


class Branchy(nn.Module):
    """fx cannot trace the data-dependent ``if``; the pairs are found by running it."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1)
        self.bn = nn.BatchNorm2d(3)
        self.fc = nn.Linear(3, 2)
        self.bn_fc = nn.BatchNorm1d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            x = -x
        y = torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3))
        return self.bn_fc(self.fc(y))


def test_untraceable_model_is_fused_via_example_input() -> None:
    torch.manual_seed(0)
    model = _randomize_bn(Branchy())
    x = torch.randn(4, 2, 5, 5)
    fused = fuse_model(model, torch.randn(1, 2, 5, 5))
    assert isinstance(fused.bn, nn.Identity)
    assert isinstance(fused.bn_fc, nn.Identity)
    assert _max_diff(fused, model, x) < 1e-5
    assert _max_diff(fused, model, -x) < 1e-5
    assert isinstance(model.bn, nn.BatchNorm2d)


def test_untraceable_model_without_example_folds_nothing_outside_sequentials() -> None:
    model = _randomize_bn(Branchy())
    fused = fuse_model(model)
    assert _n_bn(fused) == 2
    assert _max_diff(fused, model, torch.randn(2, 2, 4, 4)) == 0.0


class BranchyResidual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 3, padding=1)
        self.bn = nn.BatchNorm2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            x = x * 2
        y = self.conv(x)
        return self.bn(y) + y


class BranchyInplace(BranchyResidual):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            x = x * 2
        y = self.conv(x)
        y.relu_()
        return self.bn(y)


@pytest.mark.parametrize("cls", [BranchyResidual, BranchyInplace])
def test_untraceable_fallback_does_not_fold_a_shared_output(cls: type[nn.Module]) -> None:
    torch.manual_seed(0)
    model = _randomize_bn(cls())
    x = torch.randn(3, 2, 5, 5)
    fused = fuse_model(model, x[:1])
    assert _max_diff(fused, model, x) < 1e-5


def test_warnings_are_not_raised_for_normal_folding() -> None:
    model = _randomize_bn(nn.Sequential(nn.Conv1d(2, 3, 3), nn.BatchNorm1d(3)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fuse_model(model)
