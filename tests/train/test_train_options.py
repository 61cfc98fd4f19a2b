"""Training numbers are checked before any work, each error naming the option as spelled."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from mico.errors import ConfigError
from mico.train.options import check_train_numbers
from mico.train.run import TrainOptions, run_train


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"lr": math.nan}, ["lr is nan", "finite"]),
        ({"lr": math.inf}, ["lr is inf"]),
        ({"lr": -1e-3}, ["lr is -0.001"]),
        ({"lr": 0.0}, ["lr is 0.0"]),
        ({"lr": 1e3}, ["lr is 1000.0", "(0, 10]"]),
        ({"lr": "0.1"}, ["lr is '0.1'"]),
        ({"epochs": -1}, ["epochs is -1", ">= 0"]),
        ({"epochs": 2.5}, ["epochs is 2.5", "whole number"]),
        ({"batch_size": 0}, ["batch_size is 0", ">= 1"]),
        ({"qat_epochs": -3}, ["qat_epochs is -3"]),
        ({"calibration_batches": 0}, ["calibration_batches is 0"]),
        ({"resize": 0}, ["resize is 0", "1 to 4096"]),
        ({"seed": -1}, ["seed is -1", "from 0 to 4294967295"]),
        ({"seed": 2**40}, ["seed is 1099511627776"]),
        ({"resize": 10**6}, ["resize is 1000000"]),
    ],
)
def test_bad_numbers_are_named(values: dict, words: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        check_train_numbers(values)
    for word in words:
        assert word in str(info.value)


def test_flag_spelling_is_used() -> None:
    with pytest.raises(ConfigError, match=r"^--lr is nan; .* e\.g\. --lr 1e-3$"):
        check_train_numbers({"lr": math.nan}, {"lr": "--lr"})


def test_good_numbers_pass() -> None:
    check_train_numbers({"lr": 1e-3, "epochs": 0, "batch_size": 1, "qat_epochs": 0})
    check_train_numbers({"resize": None, "lr": 10})


def test_run_train_checks_before_touching_the_output(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match="lr is nan"):
        run_train(TrainOptions(model="mlp", out_dir=out, lr=math.nan), log=lambda _: None)
    assert not out.exists()
