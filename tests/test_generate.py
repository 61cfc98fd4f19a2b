"""mico generate: greedy generation from Python and from the model's C program, compared."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from mico.cli import app
from mico.errors import ConfigError
from mico.generate import Generation, decode, generate
from mico.models import from_zoo

runner = CliRunner()


@pytest.mark.slow
def test_c_generates_the_same_tokens_as_python(tmp_path):
    torch.manual_seed(0)
    model = from_zoo("tinyllama")
    result = generate(model, [79, 110, 99, 101], 6, work_dir=tmp_path / "lm", log=lambda _m: None)
    assert len(result.python_ids) == len(result.c_ids) == 6
    assert result.python_ids == result.c_ids and result.first_difference is None
    assert all(0 <= t < 512 for t in result.c_ids)
    assert (tmp_path / "lm" / "lm.c").is_file()


@pytest.mark.slow
def test_cli_prints_both_texts():
    result = runner.invoke(app, ["generate", "tinyllama", "--prompt", "Hi", "--tokens", "3"])
    assert result.exit_code == 0, result.output
    assert "python: " in result.output and "C (host): " in result.output
    assert "the C program generated the same 3 tokens" in result.output


def test_first_difference_and_decoding():
    assert Generation([1], [5, 6, 7], [5, 9, 7]).first_difference == 1
    assert Generation([1], [5, 6], [5, 6, 7]).first_difference == 2
    from mico.data import ByteBPETokenizer

    assert decode(ByteBPETokenizer(special_tokens=()), [72, 105, 300]) == "Hi<300>"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["generate", "small_cnn"], "needs a language model"),
        (["generate", "tinyllama", "--tokens", "0"], "--tokens must be from 1 to 10000"),
        (["generate", "tinyllama", "--prompt", ""], "the prompt is empty"),
        (["generate", "tinyllama", "--target", "rv32"], "runs on the host for now"),
        (["generate"], "give a zoo model name or --checkpoint"),
    ],
)
def test_bad_requests_are_one_line_errors(args, message):
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_generate_refuses_models_without_tokens():
    with pytest.raises(ConfigError, match="needs a language model"):
        generate(from_zoo("mlp"), [1, 2], 2, log=lambda _m: None)
