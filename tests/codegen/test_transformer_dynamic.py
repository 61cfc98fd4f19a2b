"""The ViT in the dynamic C mode: class token and position embedding as float constants in
flash, LayerNorm, softmax attention and GELU in float, held to the Python reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mico.codegen.compile import DEPLOYABLE_MODELS, compile_model
from mico.models import from_zoo
from mico.quant import QuantConfig, quantize_model
from mico.targets import host


@pytest.mark.slow
@pytest.mark.parametrize("plan", ["8/8", "4/4"])
def test_vit_tiny_dynamic_matches_python_on_the_host(tmp_path, plan):
    assert "vit_tiny" in DEPLOYABLE_MODELS  # both modes
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


def test_tinyllama_compiles_in_static_mode_from_the_cli(tmp_path):
    """Once refused (no integer embedding); now the integer-only program (see
    test_transformer_static.py for its bit-exactness)."""
    from typer.testing import CliRunner

    from mico.cli import app

    result = CliRunner().invoke(app, ["compile", "tinyllama", "--mode", "static", "--samples",
                                      "2", "-o", str(tmp_path / "v")])  # fmt: skip
    assert result.exit_code == 0, result.output
    source = (tmp_path / "v" / "model.c").read_text()
    assert "mico_qembedding(" in source and "mico_qrmsnorm(" in source


@pytest.mark.slow
def test_vit_tiny_static_is_bit_exact_and_integer_only(tmp_path):
    """Integer attention: qmatmul, qsoftmax, qlayernorm, GELU by table, constants as codes."""
    from mico.ir.ops import mico_ops

    torch.manual_seed(0)
    model = from_zoo("vit_tiny")
    quantize_model(model, "8/8", QuantConfig(act_mode="static"))
    model.eval()
    batches = [torch.rand(8, 3, 32, 32)]
    from mico.quant import calibrate

    calibrate(model, batches)
    compiled = compile_model(model, batches[0][:1], tmp_path / "vs", "vs", mode="static",
                             calibration=batches)  # fmt: skip
    ops = {n.op for n in compiled.graph.nodes}
    assert {mico_ops.QMATMUL, mico_ops.QSOFTMAX, mico_ops.QLAYERNORM, mico_ops.LUT} <= ops
    assert not any(n.op.startswith("aten.") for n in compiled.graph.nodes)  # no float op left
    source = (tmp_path / "vs" / "vs.c").read_text()
    assert "mico_f32_" not in source.split("int vs_run")[1]  # no float kernel call in the run
    host.build(compiled.project)
    x = torch.rand(4, 3, 32, 32).numpy()
    assert np.array_equal(host.run(compiled.project, x), compiled.reference(x))


@pytest.mark.slow
def test_tinyllama_dynamic_is_bit_exact_on_the_host(tmp_path):
    """Token ids in (as exact float32 integers), logits out: embedding lookup, RMSNorm (pow,
    mean, rsqrt), RoPE (select, stack), causal mask (a constant buffer in flash), SiLU."""
    import subprocess

    torch.manual_seed(0)
    model = from_zoo("tinyllama")
    quantize_model(model, "8/8", QuantConfig(act_mode="dynamic"))
    model.eval()
    tokens = torch.randint(0, 512, (2, 64))
    compiled = compile_model(model, tokens[:1], tmp_path / "ll", "llm", mode="dynamic")
    source = (tmp_path / "ll" / "llm.c").read_text()
    assert (
        "mico_f32_embedding" in source
        and "mico_first_bad_token(input, LLM_INPUT_SIZE, 512)" in source
    )
    host.build(compiled.project)
    samples = tokens.float().numpy()
    outputs = host.run(compiled.project, samples)
    assert np.array_equal(outputs, compiled.reference(samples))
    # a token id outside the vocabulary: Python names it, the C program exits 5 naming it
    from mico.errors import InputError

    bad = samples.copy()
    bad[1, 7] = 512
    with pytest.raises(InputError, match=r"sample 1 element 7 is 512\.0, not a token id"):
        compiled.reference(bad)
    bad.astype("<f4").tofile(tmp_path / "bad.bin")
    run = subprocess.run([str(tmp_path / "ll" / "llm"), str(tmp_path / "bad.bin"),
                          str(tmp_path / "out.bin")], capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 5
    assert "sample 1 holds a token id that is not an integer in [0, vocabulary)" in run.stderr
