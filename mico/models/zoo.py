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
        if self.input_shape and not getattr(model, "default_input_shape", ()):
            model.default_input_shape = self.input_shape  # the registration's shape is honoured
        return model


CATEGORY = "model"


def register_model(
    name: str,
    *,
    input_shape: tuple[int, ...],
    dataset: str,
    description: str = "",
    alias: str | list[str] | None = None,
    tags: list[str] | None = None,
    hardware_support: list[str] | None = None,
    override: bool = False,
    **defaults: Any,
) -> Callable[[ModelT], ModelT]:
    """Class decorator adding a model to the zoo under ``name``.

    The zoo is the ``model`` category of :class:`mico.registry.ModuleRegistry`: one registration
    path, so a model registered here is listed, searchable and buildable by name everywhere.
    ``input_shape`` is one sample's shape (no batch dimension) and becomes the model's default
    example input; ``defaults`` are constructor arguments used by :func:`from_zoo` unless
    overridden (e.g. ``in_channels=1``).
    """
    from mico.registry.modules import ModuleRegistry

    shape = tuple(int(d) for d in input_shape)
    if not shape or any(d <= 0 for d in shape):
        raise RegistryError(f"model '{name}': input_shape must be positive sizes, got {shape}")

    def decorate(factory: ModelT) -> ModelT:
        ModuleRegistry.add(
            factory,
            name,
            CATEGORY,
            description=description,
            alias=alias,
            tags=["zoo", *(tags or [])],
            hardware_support=hardware_support,
            author="mico",
            override=override,
            input_shape=shape,
            dataset=dataset,
            defaults=dict(sorted(defaults.items())),
        )
        return factory

    return decorate


def _entries() -> dict[str, ZooEntry]:
    from mico.registry.modules import ModuleRegistry

    entries = {}
    for meta in ModuleRegistry.list_modules(category=CATEGORY):
        shape = meta.extra.get("input_shape")
        if shape is None:
            shape = tuple(getattr(meta.module_class, "default_input_shape", ()) or ())
        entries[meta.name] = ZooEntry(
            meta.name,
            meta.module_class,
            tuple(shape),
            meta.extra.get("dataset", "synthetic"),
            meta.summary,
            tuple(sorted(meta.extra.get("defaults", {}).items())),
        )
    return entries


def model_names() -> list[str]:
    """Names of every zoo model, sorted."""
    return sorted(_entries())


def zoo_entry(name: str) -> ZooEntry:
    """The zoo entry of ``name`` (or an alias); an unknown name lists the available ones."""
    from mico.registry.modules import ModuleRegistry

    entries = _entries()
    key = ModuleRegistry._aliases.get(name, name) if isinstance(name, str) else name
    try:
        return entries[key]
    except (KeyError, TypeError):
        raise UnknownModelError(
            f"unknown model '{name}'; available: {', '.join(sorted(entries))}"
        ) from None


def from_zoo(name: str, **kwargs: Any) -> nn.Module:
    """Instantiate the zoo model ``name`` (``kwargs`` override its default arguments)."""
    return zoo_entry(name).create(**kwargs)


def model_zoo() -> list[ZooEntry]:
    """Every zoo entry, sorted by name (for listings)."""
    entries = _entries()
    return [entries[n] for n in sorted(entries)]
