"""Static (integer-only) mode: products of two activations (a gate x * sigmoid(y), attention's
q @ k^T and scores @ v) and scaling by a positive constant, bit-exact between C and Python."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from mico.codegen.compile import compile_model
from mico.errors import UnsupportedOpError
from mico.ir.ops.mico_ops import QMATMUL, QMUL
from mico.quant import QuantConfig, calibrate, quantize_model
from mico.targets import host, rv32


class Gate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 4)

    def forward(self, x):
        x = x.flatten(1)
        return self.c(torch.relu(self.a(x)) * torch.sigmoid(self.b(x)) * 0.5)


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.o = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 3)

    def forward(self, x):
        scores = torch.matmul(self.q(x), self.k(x).transpose(1, 2))
        return self.o(torch.matmul(scores, x)).flatten(1)


def compiled(model_cls, shape, plan, tmp_path):
    torch.manual_seed(0)
    model = model_cls().eval()
    quantize_model(
        model, plan, QuantConfig(act_mode="static"), example_inputs=torch.zeros(1, *shape)
    )
    batches = [torch.randn(8, *shape) for _ in range(3)]
    calibrate(model, batches)
    return compile_model(model, batches[0][:1], tmp_path / "p", "p", mode="static",
                         calibration=batches)  # fmt: skip


@pytest.mark.parametrize("plan", ["8/8", "4/4", "2/8"])
@pytest.mark.parametrize(
    ("model_cls", "shape", "op"), [(Gate, (1, 4, 4), QMUL), (Attention, (6, 8), QMATMUL)]
)
def test_products_of_activations_are_bit_exact(tmp_path, model_cls, shape, op, plan):
    c = compiled(model_cls, shape, plan, tmp_path)
    assert op in {n.op for n in c.graph.nodes}
    host.build(c.project)
    x = np.random.default_rng(3).standard_normal((5, *shape)).astype(np.float32)
    assert np.array_equal(host.run(c.project, x), c.reference(x))


@pytest.mark.skipif(not rv32.available(), reason=rv32.missing_tools_hint())
def test_attention_products_on_rv32(tmp_path):
    c = compiled(Attention, (6, 8), "8/8", tmp_path)
    rv32.build(c.project)
    x = np.random.default_rng(4).standard_normal((2, 6, 8)).astype(np.float32)
    assert np.array_equal(rv32.run(c.project, x).outputs, c.reference(x))


@pytest.mark.parametrize(
    ("forward", "message"),
    [
        (lambda m, x: m.fc(x) * -2.0, "multiplies by -2.0; the static mode takes a positive"),
        (lambda m, x: m.fc(x) * m.fc(x)[:, :1], "broadcasts"),
    ],
)
def test_unsupported_products_are_named(tmp_path, forward, message):
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return forward(self, x)

    with pytest.raises(UnsupportedOpError, match=message):
        compiled(Net, (4,), "8/8", tmp_path)


class SoftmaxAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)
        self.o = nn.Linear(8, 3)

    def forward(self, x):
        scores = torch.matmul(self.q(x), self.k(x).transpose(1, 2)) * 0.35
        return self.o(torch.matmul(torch.softmax(scores, dim=-1), self.v(x))).flatten(1)


@pytest.mark.parametrize("plan", ["8/8", "4/4", "8/4"])
def test_integer_softmax_attention_is_bit_exact(tmp_path, plan):
    from mico.ir.ops.mico_ops import QSOFTMAX

    c = compiled(SoftmaxAttention, (6, 8), plan, tmp_path)
    node = next(n for n in c.graph.nodes if n.op == QSOFTMAX)
    assert node.output.qformat.signed is False and node.output.scale == 1 / node.attrs["qmax"]
    host.build(c.project)
    x = np.random.default_rng(5).standard_normal((5, 6, 8)).astype(np.float32)
    reference = c.reference(x)
    assert np.array_equal(host.run(c.project, x), reference)
    if plan == "8/8":  # close to the float model at 8 bits
        eager = c.pytorch(x)
        assert np.corrcoef(reference.ravel().astype(float), eager.ravel())[0, 1] > 0.999


def test_softmax_codes_sum_to_about_one():
    from mico.ir.ops.mico_ops import softmax_codes

    rng = np.random.default_rng(0)
    codes = rng.integers(-127, 128, (50, 16))
    scale = 0.05
    exp_q15 = np.floor(np.exp(-np.arange(255) * scale) * 2**15 + 0.5).astype(np.int64)
    probs = softmax_codes(codes, exp_q15, 255) / 255
    exact = np.exp(codes * scale) / np.exp(codes * scale).sum(axis=1, keepdims=True)
    assert np.abs(probs - exact).max() < 2 / 255
    assert np.abs(probs.sum(axis=1) - 1).max() < 16 / 255


class NormBlock(nn.Module):
    def __init__(self, affine: bool = True) -> None:
        super().__init__()
        self.a, self.o = nn.Linear(16, 16), nn.Linear(16, 4)
        self.ln = nn.LayerNorm(16, elementwise_affine=affine)
        if affine:
            with torch.no_grad():
                self.ln.weight.uniform_(0.5, 1.5)
                self.ln.bias.uniform_(-0.3, 0.3)

    def forward(self, x):
        return self.o(self.ln(self.a(x))).flatten(1)


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("plan", ["8/8", "4/4", "8/4", "8/1"])
def test_integer_layernorm_is_bit_exact(tmp_path, plan, affine):
    """8/1: binary {-1, +1} outputs, the sign of the normalised value (zero counts as +1)."""
    from mico.ir.ops.mico_ops import QLAYERNORM

    torch.manual_seed(0)
    model = NormBlock(affine).eval()
    quantize_model(
        model, plan, QuantConfig(act_mode="static"), example_inputs=torch.zeros(1, 5, 16)
    )
    batches = [torch.randn(8, 5, 16) for _ in range(3)]
    calibrate(model, batches)
    c = compile_model(
        model, batches[0][:1], tmp_path / "n", "n", mode="static", calibration=batches
    )
    assert QLAYERNORM in {n.op for n in c.graph.nodes}
    host.build(c.project)
    x = np.random.default_rng(6).standard_normal((5, 5, 16)).astype(np.float32)
    reference = c.reference(x)
    assert np.array_equal(host.run(c.project, x), reference)
    if plan == "8/8":
        assert np.corrcoef(reference.ravel().astype(float), c.pytorch(x).ravel())[0, 1] > 0.999


def test_layernorm_codes_match_float_layernorm():
    from mico.ir.ops.mico_ops import layernorm_codes

    rng = np.random.default_rng(0)
    codes = rng.integers(-127, 128, (20, 32))
    s, s_out, n = 0.03, 4 / 127, 32
    gamma, beta = rng.uniform(0.5, 1.5, n), rng.uniform(-0.2, 0.2, n)
    attrs = {
        "eps_q": round(1e-5 * n**3 / s**2),
        "k": round(np.sqrt(n) * 2**16),
        "g": [round(v) for v in gamma / s_out * 2**12],
        "b": [round(v) for v in beta / s_out * 2**28],
        "shift": 28,
        "clamp": [-127, 127],
    }
    got = layernorm_codes(codes, attrs) * s_out
    x = codes * s
    ref = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5) * gamma + beta
    assert np.abs(got - ref).max() < 1.5 * s_out
    binary = layernorm_codes(codes, {**attrs, "binary": True, "clamp": [-1, 1]})
    full = layernorm_codes(codes, {**attrs, "clamp": [-(2**31), 2**31 - 1]})
    assert np.array_equal(binary, np.where(full >= 0, 1, -1)) and (full == 0).any()
    constant = layernorm_codes(np.full((1, 32), 5), {**attrs, "eps_q": 0})  # zero deviation
    assert np.array_equal(
        constant, np.clip(np.round(np.array(attrs["b"]) / 2**28), -127, 127)[None]
    )
