"""Choosing a quantization scale for a tensor (weights) or a set of observed activations."""

from __future__ import annotations

from typing import Literal

import numpy as np

from mico.quant.arithmetic import QFormat, dequantize, quantize

ScaleMethod = Literal["max", "mse"]
SCALE_METHODS: tuple[str, ...] = ("max", "mse")
_MAX_SAMPLES = 200_000
_MSE_GRID = np.linspace(0.1, 1.0, 46)


def _subsample(values: np.ndarray) -> np.ndarray:
    flat = np.asarray(values, dtype=np.float32).ravel()
    if flat.size > _MAX_SAMPLES:  # a deterministic stride keeps the choice repeatable
        flat = flat[:: flat.size // _MAX_SAMPLES + 1]
    return flat


def choose_scale(
    values: np.ndarray, fmt: QFormat, method: ScaleMethod = "mse", amax: float | None = None
) -> float:
    """Return the scale that maps ``values`` onto ``fmt``'s codes.

    ``max`` maps the largest magnitude onto the largest code. ``mse`` tries clipping ratios of
    that range and keeps the one with the least squared quantization error, which matters at
    2-4 bits. Binary (signed 1-bit) codes use the mean magnitude, the L2-optimal scale for sign.
    The range is taken from every value (or given as ``amax`` by an observer that saw more
    values than it kept); only the error of the MSE search is measured on a subsample.
    """
    if method not in SCALE_METHODS:
        raise ValueError(f"unknown scale method {method!r}; use one of {', '.join(SCALE_METHODS)}")
    every = np.asarray(values, dtype=np.float32).ravel()
    if every.size == 0:
        return 1.0
    if fmt.binary:
        mean = float(np.mean(np.abs(every)))
        return mean if mean > 0 else 1.0
    if amax is None:
        amax = float(np.max(np.abs(every))) if fmt.signed else float(np.max(every))
    x = _subsample(every)
    if amax <= 0:
        return 1.0
    full = amax / fmt.qmax
    if method == "max":
        return full
    best, best_err = full, np.inf
    for ratio in _MSE_GRID:
        scale = float(full * ratio)
        err = float(np.mean((dequantize(quantize(x, scale, fmt), scale) - x) ** 2))
        if err < best_err:
            best, best_err = scale, err
    return best
