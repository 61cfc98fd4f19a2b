"""The newcomer's path between commands: train with a plan, then compile and verify the
checkpoint with no mode flag (the checkpoint's own static scales decide the mode)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from mico.cli import app

runner = CliRunner()


@pytest.mark.slow
def test_train_then_compile_and_verify_the_checkpoint(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    trained = runner.invoke(app, ["train", "small_cnn", "--epochs", "1", "--plan", "4/4",
                                  "-o", "out/train"])  # fmt: skip
    assert trained.exit_code == 0, trained.output
    assert (tmp_path / "out/train/quantized.pt").is_file()
    compiled = runner.invoke(app, ["compile", "--checkpoint", "out/train/quantized.pt",
                                   "-o", "out/c"])  # fmt: skip
    assert compiled.exit_code == 0, compiled.output
    assert "(static mode)" in compiled.output
    verified = runner.invoke(app, ["verify", "--checkpoint", "out/train/quantized.pt",
                                   "-o", "out/v"])  # fmt: skip
    assert verified.exit_code == 0, verified.output
    assert "host: 32/32 bit-exact" in verified.output


def test_an_explicit_mode_still_wins_and_bad_modes_name_the_flag(tmp_path):
    bad = runner.invoke(app, ["compile", "mlp", "--mode", "fast", "-o", str(tmp_path / "c")])
    assert bad.exit_code == 2
    assert "unknown mode 'fast'; use --mode dynamic or --mode static" in bad.output


def test_checkpoint_mode_follows_the_layers():
    from mico.deploy import checkpoint_mode
    from mico.models import SmallCNN
    from mico.quant import QuantConfig, quantize_model

    assert checkpoint_mode(SmallCNN()) == "dynamic"  # float: nothing static to keep
    static = quantize_model(SmallCNN(), "4/4", QuantConfig(act_mode="static"))
    assert checkpoint_mode(static) == "static"
    dynamic = quantize_model(SmallCNN(), "4/4", QuantConfig(act_mode="dynamic"))
    assert checkpoint_mode(dynamic) == "dynamic"
