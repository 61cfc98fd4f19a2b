"""The model zoo: every model registered by name with its default input shape and dataset."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from torch import nn

from mico.errors import RegistryError, UnknownModelError

ModelT = TypeVar("ModelT", bound=Callable[..., nn.Module])


@dataclass(frozen=True)
class ZooEntry:
    """One zoo model: how to build it and what it expects by default."""

    name: str
    factory: Callable[..., nn.Module]
    input_shape: tuple[int, ...]
    dataset: str
    description: str
    defaults: tuple[tuple[str, Any], ...] = ()

    def create(self, **kwargs: Any) -> nn.Module:
        model = self.factory(**{**dict(self.defaults), **kwargs})
        model.zoo_name = self.name  # recorded in checkpoints
        return model


_ZOO: dict[str, ZooEntry] = {}


def register_model(
    name: str,
    *,
    input_shape: tuple[int, ...],
    dataset: str,
    description: str = "",
    **defaults: Any,
) -> Callable[[ModelT], ModelT]:
    """Class decorator adding a model to the zoo under ``name``.

    ``input_shape`` is one sample's shape (no batch dimension); ``defaults`` are constructor
    arguments used by :func:`from_zoo` unless overridden (e.g. ``in_channels=1``).
    """

    def decorate(factory: ModelT) -> ModelT:
        if name in _ZOO:
            raise RegistryError(f"model '{name}' is already in the zoo ({_ZOO[name].factory})")
        doc = description or (factory.__doc__ or "").strip().splitlines()[0:1]
        text = doc if isinstance(doc, str) else (doc[0] if doc else "")
        _ZOO[name] = ZooEntry(
            name, factory, tuple(input_shape), dataset, text, tuple(sorted(defaults.items()))
        )
        return factory

    return decorate


def model_names() -> list[str]:
    """Names of every zoo model, sorted."""
    return sorted(_ZOO)


def zoo_entry(name: str) -> ZooEntry:
    """The zoo entry of ``name``; an unknown name lists the available ones."""
    try:
        return _ZOO[name]
    except KeyError:
        raise UnknownModelError(
            f"unknown model '{name}'; available: {', '.join(model_names())}"
        ) from None


def from_zoo(name: str, **kwargs: Any) -> nn.Module:
    """Instantiate the zoo model ``name`` (``kwargs`` override its default arguments)."""
    return zoo_entry(name).create(**kwargs)


def model_zoo() -> list[ZooEntry]:
    """Every zoo entry, sorted by name (for listings)."""
    return [_ZOO[n] for n in model_names()]
