"""Non-finite numbers stop at the boundary: one behaviour for Python and C.

NaN and Inf have no quantized code: the static C program and the Python reference would each
map them somewhere, and the dynamic mode would spread them. So mico refuses them where they
enter: input samples (every entry point that runs, calibrates or verifies a model calls
:func:`check_finite_samples`; the generated C's ``<name>_run`` returns ``MICO_ERR_NONFINITE``)
and model parameters (:func:`check_finite_parameters`, before quantization and compilation).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from mico.errors import InputError, ParameterError


def _first_bad(values: np.ndarray) -> tuple[int, ...] | None:
    """Index of the first NaN or Inf of ``values``, or None when all are finite."""
    bad = ~np.isfinite(values)
    if not bad.any():
        return None
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), values.shape))


def _as_float_array(data: Any) -> np.ndarray | None:
    """``data`` as a numpy array when it holds floating-point numbers, else None."""
    if isinstance(data, torch.Tensor):
        if not data.is_floating_point():
            return None
        return data.detach().cpu().to(torch.float64).numpy()
    array = np.asarray(data)
    return array if np.issubdtype(array.dtype, np.floating) else None


def check_finite_samples(samples: Any, what: str = "input sample") -> None:
    """Raise :class:`InputError` naming the first sample (batch index) and element that is
    NaN or Inf. ``samples`` is batch-first (a numpy array or tensor, or a tuple of them for
    a model of several inputs); integers pass."""
    if isinstance(samples, list | tuple) and any(
        isinstance(s, torch.Tensor | np.ndarray) for s in samples
    ):
        for item in samples:
            check_finite_samples(item, what)
        return
    try:
        array = _as_float_array(samples)
    except (TypeError, ValueError):  # not numbers at all: the model itself will say so
        return
    if array is None:
        return
    if array.ndim == 0:
        array = array.reshape(1)
    index = _first_bad(array)
    if index is None:
        return
    value = array[index]
    element = index[1:]
    flat = int(np.ravel_multi_index(element, array.shape[1:])) if element else 0
    raise InputError(
        f"{what} {index[0]} holds {value} at element {flat} (index {element}); mico refuses "
        "NaN and Inf inputs (the generated C stops on them too): drop or clean the sample, "
        "e.g. numpy.nan_to_num"
    )


def check_finite_parameters(model: nn.Module) -> None:
    """Raise :class:`ParameterError` naming the first parameter or floating-point buffer of
    ``model`` (``conv1.bias``) that holds NaN or Inf, with the count and the first index."""
    tensors = [*model.named_parameters(), *model.named_buffers()]
    for name, tensor in tensors:
        if not tensor.is_floating_point():
            continue
        values = tensor.detach().cpu().to(torch.float64).numpy()
        index = _first_bad(values)
        if index is None:
            continue
        count = int((~np.isfinite(values)).sum())
        raise ParameterError(
            f"parameter '{name}' of {type(model).__name__} holds {count} non-finite value(s) "
            f"(first: {values[index]} at index {index}); NaN or Inf cannot be quantized or "
            "deployed: retrain with a smaller learning rate or fix the checkpoint"
        )
