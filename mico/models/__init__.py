"""The model zoo: models by name."""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from mico.errors import UnknownModelError
from mico.models.cnn import SmallCNN

_MODELS: dict[str, Callable[..., nn.Module]] = {"small_cnn": SmallCNN}


def model_names() -> list[str]:
    return sorted(_MODELS)


def create_model(name: str, **kwargs) -> nn.Module:
    """Instantiate a zoo model by name, passing ``kwargs`` to its constructor."""
    try:
        factory = _MODELS[name]
    except KeyError:
        raise UnknownModelError(
            f"unknown model '{name}'; available: {', '.join(model_names())}"
        ) from None
    return factory(**kwargs)


__all__ = ["SmallCNN", "create_model", "model_names"]
