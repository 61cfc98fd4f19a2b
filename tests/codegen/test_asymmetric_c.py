"""Asymmetric (zero-point) activations in C: static projects equal the Python reference bit for
bit at every width (lanes, LUT activations, pooling, residual add and concat on shifted codes),
dynamic ones within the usual tolerance."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mico.codegen.compile import compile_model
from mico.errors import CompileError
from mico.quant import QuantConfig, calibrate, quantize_model
from mico.targets import host, rv32


class Skewed(nn.Module):
    """GELU / SiLU activations (ranges like [-0.17, 6]) through residual add, max and average
    pooling, concat and a global mean: every static op that reads or writes shifted codes."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 32, 3, padding=1)
        self.c2 = nn.Conv2d(32, 32, 3, padding=1)
        self.c3 = nn.Conv2d(32, 16, 1)
        self.c4 = nn.Conv2d(48, 16, 3, padding=1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = F.gelu(self.c1(x))
        b = F.gelu(self.c2(a))
        c = F.silu(self.c3(F.max_pool2d(a + b, 2)))
        d = F.gelu(self.c4(torch.cat([c, F.max_pool2d(b, 2)], 1)))
        return self.fc(F.avg_pool2d(d, 2).mean((2, 3)))


def build(plan, mode: str, tmp_path, name: str = "m"):
    torch.manual_seed(0)
    model = Skewed().eval()
    config = QuantConfig(act_mode=mode, act_asymmetric=True)
    quantize_model(model, plan, config, example_inputs=torch.zeros(1, 3, 12, 12))
    batches = [torch.randn(8, 3, 12, 12) + 0.5 for _ in range(2)]
    calibrate(model, batches)
    compiled = compile_model(model, batches[0][:1], tmp_path / name, name, mode=mode,
                             calibration=batches)  # fmt: skip
    return model, compiled


def samples(n: int = 4) -> np.ndarray:
    return np.random.default_rng(1).standard_normal((n, 3, 12, 12)).astype(np.float32) + 0.5


# flat plans: the weights of the 5 layers, then their activations
MIXED = [8, 4, 2, 4, 8, 8, 5, 3, 6, 7]


@pytest.mark.parametrize("plan", ["8/8", "4/4", "2/2", "3/3", MIXED], ids=str)
def test_static_asymmetric_is_bit_exact(tmp_path, plan):
    model, compiled = build(plan, "static", tmp_path)
    zeros = [layer.act_zero for layer in model.modules() if hasattr(layer, "act_zero")]
    assert any(zeros)  # some layer really has a zero point
    source = "".join(p.read_text() for p in (tmp_path / "m").glob("m*.[ch]"))
    assert ".zero = " in source
    if plan == "4/4":  # shifted codes in signed channel lanes
        assert "_lanes_w4" in source
    host.build(compiled.project)
    x = samples()
    assert np.array_equal(host.run(compiled.project, x), compiled.reference(x))


@pytest.mark.parametrize("plan", ["8/8", "4/4", MIXED], ids=str)
def test_dynamic_asymmetric_matches_within_tolerance(tmp_path, plan):
    model, compiled = build(plan, "dynamic", tmp_path)
    params = (tmp_path / "m" / "m_weights.h").read_text()
    assert ".asymmetric = 1" in params  # a zero point per call
    host.build(compiled.project)
    x = samples()
    out, ref = host.run(compiled.project, x), compiled.reference(x)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        eager = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(ref, eager, rtol=1e-5, atol=1e-5)


def test_static_zero_point_is_refused_in_dynamic_mode(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 4)).eval()
    quantize_model(model, "8/8", QuantConfig(act_asymmetric=True))
    calibrate(model, [torch.randn(16, 8)])
    with pytest.raises(CompileError, match="dynamic"):
        compile_model(model, torch.zeros(1, 8), tmp_path / "d", "d", mode="dynamic")


@pytest.mark.skipif(not rv32.available(), reason=rv32.missing_tools_hint())
def test_static_asymmetric_on_rv32(tmp_path):
    _, compiled = build(MIXED, "static", tmp_path)
    rv32.build(compiled.project)
    x = samples(2)
    assert np.array_equal(rv32.run(compiled.project, x).outputs, compiled.reference(x))
