"""The ViT in the dynamic C mode: class token and position embedding as float constants in
flash, LayerNorm, softmax attention and GELU in float, held to the Python reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mico.codegen.compile import DYNAMIC_ONLY_MODELS, compile_model
from mico.models import from_zoo
from mico.quant import QuantConfig, quantize_model
from mico.targets import host


@pytest.mark.slow
@pytest.mark.parametrize("plan", ["8/8", "4/4"])
def test_vit_tiny_dynamic_matches_python_on_the_host(tmp_path, plan):
    assert "vit_tiny" in DYNAMIC_ONLY_MODELS
    torch.manual_seed(0)
    model = from_zoo("vit_tiny")
    quantize_model(model, plan, QuantConfig(act_mode="dynamic"))
    model.eval()
    samples = torch.rand(3, 3, 32, 32)
    compiled = compile_model(model, samples[:1], tmp_path / "vit", "vit", mode="dynamic")
    symbols = (tmp_path / "vit" / "vit.c").read_text()
    assert "param_cls_token" in symbols and "param_pos_embed" in symbols
    assert compiled.project.flash["params"] >= 4 * (64 + 65 * 64)  # token + positions, float32
    host.build(compiled.project)
    outputs = host.run(compiled.project, samples.numpy())
    reference = compiled.reference(samples.numpy())
    np.testing.assert_allclose(outputs, reference, rtol=1e-5, atol=1e-6)
    assert (outputs.argmax(1) == compiled.pytorch(samples.numpy()).argmax(1)).all()


def test_vit_tiny_static_names_what_is_missing(tmp_path):
    from typer.testing import CliRunner

    from mico.cli import app

    result = CliRunner().invoke(app, ["compile", "vit_tiny", "--mode", "static", "-o",
                                      str(tmp_path / "v")])  # fmt: skip
    assert result.exit_code == 2
    assert "vit_tiny in --mode dynamic" in result.output
