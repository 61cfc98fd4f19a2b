"""Regressions from models users bring: a no-op cast at the output, a layer called twice
(shared weights), and a batch of more than one sample given to the code generators."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from mico.codegen import MiCoCodeGen, emit_c_project
from mico.codegen.compile import compile_model
from mico.execute import run_graph
from mico.pipeline import lower_model, quantize_ptq
from mico.quant import QuantConfig, QuantPlan, calibrate, quantize_model
from mico.targets import host


class NoOpCast(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return torch.relu(self.fc(x)).float().to(torch.float32)


class Shared(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(torch.relu(self.fc(x)))


@pytest.mark.parametrize("mode", ["dynamic", "static"])
@pytest.mark.parametrize("model_cls", [NoOpCast, Shared])
def test_compiles_and_matches_the_reference(tmp_path, model_cls, mode):
    torch.manual_seed(0)
    model = model_cls().eval()
    quantize_model(model, "8/8", QuantConfig(act_mode=mode), example_inputs=torch.zeros(1, 4))
    batches = [torch.randn(8, 4)]
    calibrate(model, batches)
    c = compile_model(model, batches[0][:1], tmp_path / "m", "m", mode=mode, calibration=batches)
    assert not any("assert" in n.op or n.op.startswith("aten.to") for n in c.graph.nodes)
    host.build(c.project)
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(host.run(c.project, x), c.reference(x), rtol=1e-5, atol=1e-6)


def test_shared_weights_are_emitted_once(tmp_path):
    c = compile_model(Shared().eval(), torch.zeros(1, 4), tmp_path / "s", "s", mode="dynamic")
    source = (tmp_path / "s" / "s_weights.h").read_text() + (tmp_path / "s" / "s.c").read_text()
    assert source.count("fc_weight[") == 1  # defined once, used by both calls
    assert c.project.flash["weights"] == 4 * 4 * 4  # one float copy of the 4x4 weight


def test_micocodegen_forward_returns_every_sample_of_a_batch(tmp_path):
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 3)).eval()
    x = torch.randn(2, 4)
    codegen = MiCoCodeGen(model)
    out = codegen.forward(x)
    assert out.shape == (2, 3)
    torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-6)
    project = codegen.convert(tmp_path / "p", "p")
    assert project.input_shape[0] == 1  # one sample per call of the C program


def test_lower_model_with_a_batch_example_is_a_one_sample_program(tmp_path):
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 3)).eval()
    batches = [torch.randn(8, 4)]
    qmodel = quantize_ptq(model, QuantPlan.parse("0=8/8,2=8/8"), batches,
                          QuantConfig(act_mode="static"))  # fmt: skip
    graph = lower_model(qmodel, torch.randn(2, 4), "m", batches)
    assert graph.inputs[0].type.shape[0] == 1
    project = emit_c_project(graph, tmp_path / "m", "m")
    host.build(project)
    x = np.random.default_rng(1).standard_normal((6, 4)).astype(np.float32)
    assert np.array_equal(host.run(project, x), run_graph(graph, x)[0].numpy())  # 6/6, not 3/6
