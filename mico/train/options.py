"""Check the numbers of a training run (learning rate, epochs, batch size…) before any work.

``mico train --lr nan`` used to train into NaN weights; each bad value is now one ConfigError
naming the option the way the caller spells it (``--lr`` at the CLI, ``lr`` in Python).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from mico.errors import ConfigError, brief

MAX_SEED = 2**32 - 1  # numpy and scikit-learn take seeds in [0, 2**32)
#: (field, lowest and highest allowed value, what the value is) for the integer options
_COUNTS = (
    ("epochs", 0, None, "a number of epochs"),
    ("qat_epochs", 0, None, "a number of epochs"),
    ("batch_size", 1, None, "a batch size"),
    ("calibration_batches", 1, None, "a number of batches"),
    ("seed", 0, MAX_SEED, "a random seed"),
)
MAX_LR = 10.0  # above this no optimiser mico uses converges; a typo such as 1e3 for 1e-3


def check_train_numbers(values: Mapping[str, Any], names: Mapping[str, str] | None = None) -> None:
    """Raise ConfigError for the first bad number in ``values`` (field -> value).

    ``names`` maps a field to how the caller spells it (``{"lr": "--lr"}``); fields absent from
    ``values`` are not checked.
    """
    names = names or {}

    def name(key: str) -> str:
        return names.get(key, key)

    if "lr" in values:
        lr = values["lr"]
        number = isinstance(lr, int | float) and not isinstance(lr, bool)
        if not number or not math.isfinite(lr) or not 0 < lr <= MAX_LR:
            raise ConfigError(
                f"{name('lr')} is {brief(lr)}; the learning rate must be a finite number in "
                f"(0, {MAX_LR:g}], e.g. {name('lr')} 1e-3"
            )
    for key, low, high, what in _COUNTS:
        if key not in values:
            continue
        value = values[key]
        whole = isinstance(value, int) and not isinstance(value, bool)
        if not whole or value < low or (high is not None and value > high):
            bound = f">= {low}" if high is None else f"from {low} to {high}"
            raise ConfigError(
                f"{name(key)} is {brief(value)}; it is {what} and must be a whole number {bound}"
            )
    if values.get("resize") is not None:
        resize = values["resize"]
        if isinstance(resize, bool) or not isinstance(resize, int) or not 1 <= resize <= 4096:
            raise ConfigError(
                f"{name('resize')} is {brief(resize)}; give an image side from 1 to 4096 pixels"
            )
