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


def test_a_checkpoint_saved_from_python_reloads_and_compiles(tmp_path):
    import torch

    from mico.models import LeNet
    from mico.train.checkpoint import load_checkpoint

    model = LeNet(1)  # built in Python, not by zoo name; positional argument
    model.set_qscheme([[8, 4, 4, 2, 2], [8] * 5])
    model.save(tmp_path / "lenet.pt")
    loaded = load_checkpoint(tmp_path / "lenet.pt")
    assert type(loaded) is LeNet
    assert [layer.w_bits for layer in loaded.get_qlayers()] == [8, 4, 4, 2, 2]
    x = torch.rand(2, 1, 28, 28)
    assert torch.equal(model.eval()(x), loaded.eval()(x))
    result = runner.invoke(app, ["compile", "--checkpoint", str(tmp_path / "lenet.pt"),
                                 "-o", str(tmp_path / "c")])  # fmt: skip
    assert result.exit_code == 0, result.output


def test_a_checkpoint_of_an_unknown_class_is_refused_without_importing_it(tmp_path):
    from torch import nn

    from mico.errors import CheckpointError
    from mico.train.checkpoint import load_checkpoint, save_checkpoint

    class Mystery(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)

    save_checkpoint(Mystery(), tmp_path / "m.pt")
    with pytest.raises(CheckpointError, match="holds a Mystery, which is not a mico model"):
        load_checkpoint(tmp_path / "m.pt")


@pytest.mark.slow
@pytest.mark.parametrize("model", ["resnet8", "m5", "tinyllama", "harmlp"])
def test_every_kind_of_zoo_model_trains_offline(tmp_path, model):
    result = runner.invoke(app, ["train", model, "--dataset", "synthetic", "--epochs", "1",
                                 "--batch-size", "32", "--no-progress",
                                 "-o", str(tmp_path / "t")])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output and "fp32.pt, costs.md, metrics.json" in result.output
    assert "no quantized.pt: pass --plan" in result.output


def test_missing_data_names_the_cli_flags(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MICO_DATA", raising=False)
    result = runner.invoke(app, ["train", "resnet8", "--epochs", "1", "-o", "out"])
    assert result.exit_code == 2
    assert "--root DIR" in result.output and "root=" not in result.output
    assert result.output.rstrip().endswith("--dataset synthetic")


def test_verify_writes_its_report(tmp_path):
    import json

    out = tmp_path / "v"
    result = runner.invoke(app, ["verify", "mlp", "--plan", "4/4", "--samples", "8", "-o",
                                 str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads((out / "verify.json").read_text())
    assert data["ok"] is True and data["mode"] == "dynamic" and data["plan"] == "4/4"
    assert data["targets"][0]["target"] == "host" and data["targets"][0]["samples"] == 8
    report = (out / "verify.md").read_text()
    assert "| host | 8/8 | 8/8 |" in report
    assert not list(out.glob(".*.tmp"))


@pytest.mark.slow
def test_make_run_works_out_of_the_box(tmp_path):
    import json
    import subprocess

    out = tmp_path / "c"
    result = runner.invoke(app, ["compile", "small_cnn", "--plan", "4/4", "--mode", "static",
                                 "-o", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert (out / "inputs.bin").stat().st_size == 4 * 64 * 4  # 4 samples of 1x8x8 float32
    assert (
        "samples the project was built with"
        in json.loads((out / "mico.json").read_text())["inputs_bin"]
    )
    run = subprocess.run(["make", "run"], cwd=out, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = [line for line in run.stdout.splitlines() if line.startswith("sample ")]
    assert len(lines) == 4 and all("top-1 index" in line for line in lines)
    assert (out / "outputs.bin").stat().st_size == 4 * 10 * 4  # int32 outputs, 10 classes


def test_verify_report_says_when_samples_are_random(tmp_path, monkeypatch):
    import json

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MICO_DATA", raising=False)
    out = tmp_path / "r"
    result = runner.invoke(app, ["verify", "lenet", "--plan", "8/8", "--samples", "2", "-o",
                                 str(out), "-q"])  # fmt: skip
    assert result.exit_code == 0, result.output
    origin = json.loads((out / "verify.json").read_text())["samples"]
    assert origin.startswith("seeded random inputs, not real data (dataset 'mnist' is not on disk)")
    assert "top-1 is not an accuracy" in (out / "verify.md").read_text()
