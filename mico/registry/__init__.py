"""Discovery of modules (seed 004): "use without registration, register for discovery".

``ModuleRegistry`` holds optional metadata of models, layers, datasets, searchers, targets and
planners; ``ModelFactory`` builds models from configs naming registered modules or passing
classes. See ``docs/registry.md``.
"""

from __future__ import annotations

from typing import Any

from mico.registry.modules import ModuleMetadata, ModuleRegistry, config_errors, register_module
from mico.registry.schema import ConfigSchema, FieldSchema, extract_config_schema

__all__ = [
    "ConfigModel",
    "ConfigSchema",
    "FieldSchema",
    "ModelFactory",
    "ModuleMetadata",
    "ModuleRegistry",
    "config_errors",
    "extract_config_schema",
    "load_builtin",
    "register_module",
]


def __getattr__(name: str) -> Any:
    # the factory and the built-in registrations import torch models: load them on first use
    if name in ("ModelFactory", "ConfigModel"):
        from mico.registry import factory

        return getattr(factory, name)
    if name == "load_builtin":
        from mico.registry.builtin import load_builtin

        return load_builtin
    raise AttributeError(f"module 'mico.registry' has no attribute {name!r}")
