"""Rebuild a model from the constructor arguments a checkpoint recorded, without trusting them.

A checkpoint names its model's class and arguments; a damaged or hostile one can name an
argument the class does not take (a ``TypeError`` deep in torch) or an absurd size
(``num_classes=10**9``: gigabytes allocated before anything fails). Every argument is checked
against the constructor's signature and bounded, and the model is first built on torch's
``meta`` device (no memory) to count its parameters, before the real one is allocated.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from mico.errors import CheckpointError, MicoError, brief

#: largest integer a recorded constructor argument may hold (channels, classes, sizes…)
MAX_ARGUMENT = 1 << 20
#: largest model rebuilt from a checkpoint: far beyond any microcontroller, far below a blow-up
MAX_PARAMETERS = 100_000_000
_MAX_ITEMS = 1000  # elements of a list argument (e.g. per-stage channels)

FIX = "build the model yourself and pass it to load_checkpoint(path, model)"


def check_arguments(
    factory: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any], what: str
) -> None:
    """Refuse arguments ``factory`` does not take, and integers above :data:`MAX_ARGUMENT`."""
    for key in kwargs:
        if not isinstance(key, str) or not key.isidentifier():
            raise CheckpointError(f"{what}: argument name {brief(key)} is not a name; {FIX}")
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        signature = None
    if signature is not None:
        try:
            signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise CheckpointError(
                f"{what} was recorded with arguments its constructor does not take ({exc}); {FIX}"
            ) from None
    named = [(f"argument {i + 1}", v) for i, v in enumerate(args)] + list(kwargs.items())
    for name, value in named:
        _check_value(name, value, what, depth=0)


def _check_value(name: str, value: Any, what: str, depth: int) -> None:
    if isinstance(value, bool) or value is None or isinstance(value, str | float):
        return
    if isinstance(value, int):
        if abs(value) > MAX_ARGUMENT:
            raise CheckpointError(
                f"{what}: argument {name}={brief(value, 40)} is larger than the {MAX_ARGUMENT} "
                f"mico accepts in a checkpoint; the checkpoint is damaged, or {FIX}"
            )
        return
    if isinstance(value, list | tuple) and depth < 3:
        if len(value) > _MAX_ITEMS:
            raise CheckpointError(
                f"{what}: argument {name} holds {len(value)} items, more than {_MAX_ITEMS}; {FIX}"
            )
        for item in value:
            _check_value(name, item, what, depth + 1)
        return
    if isinstance(value, dict) and depth < 3:
        for item in value.values():
            _check_value(name, item, what, depth + 1)
        return
    raise CheckpointError(
        f"{what}: argument {name}={brief(value, 40)} is not a plain value "
        f"(number, string, list); {FIX}"
    )


def parameter_count(factory: Callable[[], nn.Module]) -> int | None:
    """Parameters of the model ``factory`` builds, counted on the meta device (no memory);
    None when the model cannot be built there (its constructor computes with tensors)."""
    try:
        with torch.device("meta"):
            model = factory()
    except MicoError:
        raise
    except Exception:  # only an estimate: the real build below reports real errors
        return None
    return sum(p.numel() for p in model.parameters()) + sum(b.numel() for b in model.buffers())


def rebuild(
    factory: Callable[[], nn.Module],
    signature_of: Callable[..., Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    what: str,
) -> nn.Module:
    """``factory()`` once its recorded ``args``/``kwargs`` (checked against ``signature_of``)
    are known to build a model of at most :data:`MAX_PARAMETERS` parameters."""
    check_arguments(signature_of, args, kwargs, what)
    count = parameter_count(factory)
    if count is not None and count > MAX_PARAMETERS:
        raise CheckpointError(
            f"{what}: its recorded arguments ({brief(dict(kwargs) or list(args), 60)}) build "
            f"{count:,} parameters, more than the {MAX_PARAMETERS:,} mico rebuilds; "
            f"the checkpoint is damaged, or {FIX}"
        )
    try:
        return factory()
    except MicoError:
        raise
    except (TypeError, ValueError, RuntimeError, MemoryError, OverflowError) as exc:
        raise CheckpointError(
            f"{what} cannot be rebuilt from its recorded arguments "
            f"({type(exc).__name__}: {brief(str(exc), 120)}); {FIX}"
        ) from None
