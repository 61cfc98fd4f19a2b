"""Models mico has never seen (written for this suite, not the zoo), end to end in C.

Each model exercises shapes and ops users bring: non-square kernels, dilation, groups, odd
strides, residual/cat/slice, 1-D convs, ``padding='same'`` and every padding mode, weight
sharing, two outputs, each activation, LayerNorm and attention. Every model is quantized with a
plan from W8A8, W4A4, W2A2, ternary and a mixed plan (rotated over the models so the suite stays
quick), compiled in both modes and run on the host: static bit for bit, dynamic within 1e-5 of
the Python reference. Two models also run on rv32 under qemu.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mico.codegen import compile_model
from mico.deploy import DeployOptions, verify_compiled
from mico.quant import QuantConfig, apply_plan, calibrate, quantizable_layers
from mico.targets import rv32

PLANS = ["8/8", "4/4", "2/2", "1.58/8", "mixed"]


class NonSquare(nn.Module):
    """Non-square kernels, an odd stride, dilation and grouped convolution."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(2, 6, (3, 1), stride=(3, 1), padding=(1, 0))
        self.b = nn.Conv2d(6, 6, (1, 3), dilation=(1, 2), padding=(0, 2), groups=3)
        self.fc = nn.Linear(6 * 4 * 7, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(F.relu(self.b(F.relu(self.a(x)))).flatten(1))


class ResidualCatSlice(nn.Module):
    """A residual add, a concatenation and a channel slice."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(1, 4, 3, padding=1)
        self.body = nn.Conv2d(4, 4, 3, padding=1)
        self.fc = nn.Linear(6 * 6 * 6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.stem(x))
        z = F.relu(y + self.body(y))
        return self.fc(torch.cat([z, y[:, :2]], dim=1).flatten(1))


class Conv1dPadding(nn.Module):
    """1-D convolutions with ``padding='same'`` (reflect) and an odd stride."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv1d(3, 4, 5, padding="same", padding_mode="reflect")
        self.b = nn.Conv1d(4, 4, 3, stride=3)
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(F.hardswish(self.b(F.hardswish(self.a(x)))).mean(dim=-1))


class PaddingModes(nn.Module):
    """'same' with an even kernel, replicate, circular, ZeroPad2d and F.pad(reflect)."""

    def __init__(self) -> None:
        super().__init__()
        self.same = nn.Conv2d(1, 3, 4, padding="same", padding_mode="replicate")
        self.circ = nn.Conv2d(3, 3, 3, padding=1, padding_mode="circular")
        self.zpad = nn.ZeroPad2d((1, 0, 0, 1))
        self.fc = nn.Linear(3 * 9 * 9, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.circ(F.relu(self.same(x))))
        return self.fc(F.pad(self.zpad(y), (0, 0, 0, 0), mode="reflect").flatten(1))


class SharedWeights(nn.Module):
    """One layer applied twice (its weights emitted once)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.relu(self.fc(F.relu(self.fc(x)))))


class TwoOutputs(nn.Module):
    """Two heads, two C output buffers."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(10, 12)
        self.cls = nn.Linear(12, 4)
        self.box = nn.Linear(12, 2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = F.relu(self.body(x))
        return self.cls(h), self.box(h)


class Activations(nn.Module):
    """Each activation of the static lookup tables, between linear layers."""

    ACTS = (
        torch.sigmoid,
        torch.tanh,
        F.gelu,
        F.silu,
        lambda t: F.leaky_relu(t, 0.1),
        F.elu,
        F.hardsigmoid,
        lambda t: torch.clamp(t, -0.5, 0.75),
    )

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in self.ACTS)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer, act in zip(self.layers, self.ACTS, strict=True):
            x = act(layer(x))
        return self.head(x)


class Attention(nn.Module):
    """Single-head self-attention over 4 tokens, then LayerNorm."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 3)
        self.scale = 1.0 / math.sqrt(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.q(x), self.k(x), self.v(x)
        weights = torch.softmax(q @ k.transpose(-2, -1) * self.scale, dim=-1)
        y = self.norm(x + weights @ v)
        return self.head(y.mean(dim=1))


MODELS = [
    (NonSquare, (2, 11, 7)),
    (ResidualCatSlice, (1, 6, 6)),
    (Conv1dPadding, (3, 7)),
    (PaddingModes, (1, 8, 8)),
    (SharedWeights, (8,)),
    (TwoOutputs, (10,)),
    (Activations, (8,)),
    (Attention, (4, 8)),
]


def plan_for(model: nn.Module, plan: str) -> str | dict[str, tuple[float, int]]:
    """A uniform plan as text; "mixed" cycles 8/8, 4/8, 2/4, ternary/8 over the layers."""
    if plan != "mixed":
        return plan
    cycle = [(8, 8), (4, 8), (2, 4), (1.58, 8)]
    names = list(quantizable_layers(model))
    return {name: cycle[i % len(cycle)] for i, name in enumerate(names)}


def build(model_class: type[nn.Module], shape: tuple[int, ...], plan: str, mode: str, seed: int):
    torch.manual_seed(seed)
    model = model_class().eval()
    batches = [torch.randn(8, *shape) for _ in range(2)]
    qmodel = apply_plan(model, plan_for(model, plan), QuantConfig(act_mode=mode))
    qmodel = calibrate(qmodel, batches)
    return qmodel, batches


@pytest.mark.parametrize("mode", ["static", "dynamic"])
@pytest.mark.parametrize(
    ("index", "model_class", "shape"),
    [(i, m, s) for i, (m, s) in enumerate(MODELS)],
    ids=[m.__name__ for m, _ in MODELS],
)
def test_unseen_model_matches_its_reference_on_the_host(tmp_path, index, model_class, shape, mode):
    plan = PLANS[(index + (mode == "dynamic")) % len(PLANS)]
    qmodel, batches = build(model_class, shape, plan, mode, seed=index)
    compiled = compile_model(
        qmodel, batches[0][:1], tmp_path / "c", name="net", mode=mode, calibration=batches
    )
    samples = torch.randn(6, *shape, generator=torch.Generator().manual_seed(99)).numpy()
    options = DeployOptions(targets=("host",), rtol=1e-5)
    result = verify_compiled(compiled, samples, options, log=lambda _m: None)
    agreement = result.results[0].agreement
    if mode == "static":
        assert agreement.all_exact, (plan, agreement.summary())
    else:
        assert agreement.all_within_tolerance, (plan, agreement.summary())


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model_class", "shape", "plan"),
    [(PaddingModes, (1, 8, 8), "mixed"), (Attention, (4, 8), "4/4")],
    ids=["padding-modes", "attention"],
)
def test_unseen_models_are_bit_exact_on_rv32(tmp_path, model_class, shape, plan):
    if not rv32.available():
        pytest.skip("rv32 toolchain missing: " + rv32.missing_tools_hint())
    qmodel, batches = build(model_class, shape, plan, "static", seed=1)
    compiled = compile_model(
        qmodel, batches[0][:1], tmp_path / "c", name="net", mode="static", calibration=batches
    )
    samples = np.random.default_rng(3).standard_normal((4, *shape)).astype(np.float32)
    options = DeployOptions(targets=("rv32",))
    result = verify_compiled(compiled, samples, options, log=lambda _m: None)
    assert result.results[0].agreement.all_exact, result.results[0].agreement.summary()
    assert result.results[0].instructions_per_inference > 0
