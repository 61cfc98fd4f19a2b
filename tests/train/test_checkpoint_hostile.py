"""Hostile checkpoints: recorded constructor arguments are checked and bounded before any
model is allocated, and every problem is a one-line CheckpointError naming the argument."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import torch

from mico.errors import CheckpointError
from mico.models import from_zoo
from mico.train.checkpoint import load_checkpoint, read_checkpoint, save_checkpoint
from mico.train.rebuild import MAX_ARGUMENT, MAX_PARAMETERS, parameter_count


def _forged(tmp_path: Path, **model: Any) -> Path:
    """An honest mlp checkpoint whose recorded model entry is then edited."""
    path = save_checkpoint(from_zoo("mlp"), tmp_path / "honest.pt")
    data = torch.load(path, weights_only=True)
    data["model"].update(model)
    forged = tmp_path / "forged.pt"
    torch.save(data, forged)
    return forged


def _refused(path: Path, *words: str) -> str:
    start = time.monotonic()
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    assert time.monotonic() - start < 10
    message = str(info.value)
    assert "\n" not in message, message
    for word in words:
        assert word in message, message
    return message


def test_unknown_argument_is_named(tmp_path: Path) -> None:
    _refused(_forged(tmp_path, kwargs={"bogus": 1}), "MLP", "unexpected keyword argument 'bogus'")


def test_absurd_class_count_is_refused_before_allocating(tmp_path: Path) -> None:
    _refused(
        _forged(tmp_path, kwargs={"num_classes": 10**9}),
        "num_classes=1000000000",
        f"larger than the {MAX_ARGUMENT}",
    )


def test_parameter_count_over_the_limit(tmp_path: Path) -> None:
    message = _refused(_forged(tmp_path, kwargs={"hidden": [100_000, 100_000]}), "parameters")
    assert f"more than the {MAX_PARAMETERS:,}" in message


def test_too_many_list_items(tmp_path: Path) -> None:
    _refused(_forged(tmp_path, kwargs={"hidden": [1] * 5000}), "argument hidden holds 5000 items")


def test_argument_of_the_wrong_type(tmp_path: Path) -> None:
    _refused(_forged(tmp_path, kwargs={"num_classes": "ten"}), "cannot be rebuilt", "TypeError")


def test_positional_arguments_to_a_zoo_model(tmp_path: Path) -> None:
    _refused(_forged(tmp_path, args=[3]), "positional arguments [3]")


def test_arguments_not_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="model arguments are not a list and a mapping"):
        read_checkpoint(_forged(tmp_path, kwargs=[1, 2]))


def test_directory_is_named_as_such(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="is a directory, not a file"):
        read_checkpoint(tmp_path)


def test_overlong_path() -> None:
    with pytest.raises(CheckpointError, match="the name is too long"):
        read_checkpoint("c" * 300 + ".pt")


def test_honest_checkpoint_still_loads(tmp_path: Path) -> None:
    model = from_zoo("mlp", num_classes=7)
    path = save_checkpoint(model, tmp_path / "ok.pt")
    loaded = load_checkpoint(path)
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value)


def test_parameter_count_allocates_nothing() -> None:
    count = parameter_count(lambda: torch.nn.Linear(100_000, 100_000))
    assert count == 100_000 * 100_000 + 100_000


class _System:
    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple:
        import os

        return os.system, (self.command,)


@pytest.mark.parametrize("protocol", [2, 4])
def test_malicious_pickle_never_runs(tmp_path: Path, protocol: int) -> None:
    import pickle
    import warnings

    target = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    path.write_bytes(pickle.dumps({"state_dict": _System(f"touch {target}")}, protocol=protocol))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's protocol warning is silenced, not shown
        message = _refused(path, "evil.pt", "never unpickles")
    assert len(message) < 400
    assert not target.exists()


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("quant_config", {"percentile": "x"}, "percentile must be in (0, 100], got 'x'"),
        ("quant_config", [1, 2], "a mapping of option names"),
        ("quant_config", {"k" * 10_000: 1}, "unknown quantization option(s) kkkk"),
        ("plan", {"layers.0": {"w": 10**9, "a": 8}}, "outside the allowed range"),
        ("plan", "8/8", "must be a mapping"),
    ],
)
def test_damaged_plan_or_config_is_a_checkpoint_error(
    tmp_path: Path, field: str, value: Any, words: str
) -> None:
    path = save_checkpoint(from_zoo("mlp"), tmp_path / "honest.pt")
    data = torch.load(path, weights_only=True)
    data[field] = value
    torch.save(data, path)
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(path)
    assert words in str(info.value)
    assert len(str(info.value)) < 400


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda d: d.__setitem__("state_dict", {"layers.0.weight": "x"}), "is str, not a tensor"),
        (lambda d: d.__setitem__("state_dict", {1: torch.zeros(1)}), "entry 1 is Tensor"),
        (lambda d: d.__setitem__("extra", [1, 2]), "'extra' is not a mapping"),
    ],
)
def test_damaged_records_are_named(tmp_path: Path, change: Any, words: str) -> None:
    path = save_checkpoint(from_zoo("mlp"), tmp_path / "honest.pt")
    data = torch.load(path, weights_only=True)
    change(data)
    torch.save(data, path)
    with pytest.raises(CheckpointError, match="is damaged") as info:
        read_checkpoint(path)
    assert words in str(info.value)
