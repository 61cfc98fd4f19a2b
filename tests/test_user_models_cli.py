"""Bring your own model: `mico compile|verify path/to/file.py:Class` and `.pt2` programs."""

from __future__ import annotations

import textwrap

import pytest
import torch
from typer.testing import CliRunner

from mico.cli import app

runner = CliRunner()

MODEL_PY = textwrap.dedent(
    """
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self, num_classes: int = 10, width: int = 8):
            super().__init__()
            self.conv = nn.Conv2d(3, width, 3, padding=1)
            self.fc = nn.Linear(width * 16 * 16, num_classes)

        def forward(self, x):
            return self.fc(torch.relu(self.conv(x)).flatten(1))

    class Broken(nn.Module):
        def __init__(self):
            raise RuntimeError("no GPU here")
    """
)


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    (tmp_path / "my_model.py").write_text(MODEL_PY)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_file_class_compiles_and_verifies(user_dir, mode):
    result = runner.invoke(app, ["verify", "my_model.py:Net", "--input-shape", "3,16,16",
                                 "--model-args", '{"num_classes": 4}', "--plan", "4/8",
                                 "--mode", mode, "--samples", "8", "-o", "out", "-q"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "host: 8/8" in result.output or "8/8 within rtol" in result.output
    assert (user_dir / "out" / "mico.json").is_file()


def test_model_args_from_a_yaml_file(user_dir):
    (user_dir / "args.yaml").write_text("num_classes: 3\nwidth: 4\n")
    result = runner.invoke(app, ["compile", "my_model.py:Net", "--input-shape", "3x16x16",
                                 "--model-args", "args.yaml", "-o", "c", "-q"])  # fmt: skip
    assert result.exit_code == 0, result.output


def test_saved_export_program_compiles_in_float(user_dir):
    import importlib.util

    spec = importlib.util.spec_from_file_location("user_net", user_dir / "my_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    net = module.Net(4).eval()
    program = torch.export.export(net, (torch.randn(1, 3, 16, 16),))
    torch.export.save(program, str(user_dir / "net.pt2"))
    result = runner.invoke(app, ["verify", "net.pt2", "--mode", "dynamic", "--samples", "4",
                                 "-o", "p", "-q"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "4/4 within rtol" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["my_model.py:Nope", "--input-shape", "3,16,16"],
            "has no class 'Nope'; its nn.Module classes: Net, Broken",
        ),
        (
            ["my_model.py:Net", "--input-shape", "3,16,16", "--model-args", '{"depth": 3}'],
            "Net takes no argument 'depth' (--model-args); it takes: num_classes, width",
        ),
        (["my_model.py:Net"], "Net has no default_input_shape; pass --input-shape"),
        (
            ["my_model.py:Broken", "--input-shape", "3,16,16"],
            "building Broken({}) failed: RuntimeError: no GPU here",
        ),
        (["missing.py:Net"], "model file 'missing.py' does not exist"),
        (["my_model.py:Net", "--input-shape", "3,a"], "is not a list of integers"),
        (
            ["my_model.py:Net", "--input-shape", "3,16,16", "--model-args", "{bad"],
            "--model-args is not valid JSON",
        ),
        (["ghost.pt2"], "program 'ghost.pt2' does not exist"),
        (["mlp", "--input-shape", "3,16,16"], "apply to models from files only"),
    ],
)
def test_bad_user_models_are_one_line_errors(user_dir, args, message):
    result = runner.invoke(app, ["compile", *args, "-o", "x"])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert not (user_dir / "x").exists()


TRAINABLE_PY = textwrap.dedent(
    """
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self, num_classes: int = 10):
            super().__init__()
            self.conv = nn.Conv2d(1, 4, 3, padding=1)
            self.fc = nn.Linear(4 * 8 * 8, num_classes)

        def forward(self, x):
            return self.fc(torch.relu(self.conv(x)).flatten(1))
    """
)


@pytest.fixture
def trained_file_model(tmp_path, monkeypatch):
    (tmp_path / "net.py").write_text(TRAINABLE_PY)
    monkeypatch.chdir(tmp_path)
    args = ["train", "net.py:Net", "--input-shape", "1,8,8", "--model-args", '{"num_classes": 4}']
    args += ["--dataset", "synthetic", "--epochs", "1", "--plan", "4/8", "--no-progress"]
    args += ["-o", "tr"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return tmp_path


def test_a_model_from_a_file_trains_and_its_checkpoint_verifies(trained_file_model):
    assert (trained_file_model / "tr" / "quantized.pt").is_file()
    # the checkpoint recorded the arguments and shape: naming the file is enough
    result = runner.invoke(app, ["verify", "net.py:Net", "--checkpoint", "tr/quantized.pt",
                                 "--samples", "6", "-o", "c", "-q"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "host: 6/6 bit-exact" in result.output  # trained static scales: the static mode


def test_a_file_model_checkpoint_alone_names_the_command_that_rebuilds_it(trained_file_model):
    result = runner.invoke(app, ["compile", "--checkpoint", "tr/quantized.pt", "-o", "c"])
    assert result.exit_code == 2
    assert "never imports a file a checkpoint names" in result.output
    assert f"{trained_file_model / 'net.py'}:Net --checkpoint" in result.output
    assert not (trained_file_model / "c").exists()


def test_a_file_model_checkpoint_refuses_another_class(trained_file_model):
    (trained_file_model / "other.py").write_text(TRAINABLE_PY.replace("class Net", "class Other"))
    result = runner.invoke(app, ["compile", "other.py:Other", "--checkpoint", "tr/quantized.pt",
                                 "-o", "c"])  # fmt: skip
    assert result.exit_code == 2 and "holds Net" in result.output and "not Other" in result.output


def test_training_a_file_model_needs_a_dataset(user_dir):
    result = runner.invoke(app, ["train", "my_model.py:Net", "--input-shape", "3,16,16",
                                 "-o", "t"])  # fmt: skip
    assert result.exit_code == 2
    assert "has no default dataset" in result.output and "--dataset synthetic" in result.output
    result = runner.invoke(app, ["train", "small_cnn", "--input-shape", "1,8,8", "-o", "t"])
    assert result.exit_code == 2 and "apply to models from files only" in result.output


def test_a_file_model_and_its_checkpoint_tune_with_workers(trained_file_model):
    # workers rebuild the model from the run's checkpoint: the file named, its args recorded
    args = ["tune", "net.py:Net", "--checkpoint", "tr/fp32.pt", "--dataset", "synthetic"]
    args += ["--strategy", "random", "--trials", "2", "--workers", "2", "--no-compile"]
    args += ["--no-cache", "-o", "t", "-q"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "best plan: accuracy" in result.output
    assert (trained_file_model / "t" / "best_plan.yaml").is_file()
