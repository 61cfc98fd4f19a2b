"""The targets' entries in the module registry (category ``target``), loaded by
:func:`mico.registry.builtin.load_builtin`.

Every target file mico ships (and those in ``$MICO_TARGETS_DIR``) is registered under its name
with its hardware (ISA, extensions, memory), the bit-widths it runs and how it is measured. The
registered class is :class:`mico.targets.catalog.TargetSpec`: its fields are a target file's.
A file in ``$MICO_TARGETS_DIR`` with a mistake raises ConfigError naming it (after mico's own
targets are registered).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _memory(size: int | None) -> str:
    return "not limited" if size is None else f"{size} B"


def register(registry: Any) -> None:
    from mico.targets.catalog import load_catalog

    # mico's own files first: a broken file in $MICO_TARGETS_DIR is reported (ConfigError
    # naming it) after they are registered
    for spec in load_catalog([], include_env=False).values():
        _register(registry, spec)
    for spec in load_catalog().values():
        _register(registry, spec)


def _register(registry: Any, spec: Any) -> None:
    from mico.targets.catalog import RUNNERS, TargetSpec, builtin_dir

    if registry.get_module(spec.name) is not None:
        return
    own = Path(spec.source).parent == builtin_dir()
    registry.add(
        TargetSpec, spec.name, "target", author="mico" if own else "user",
        description=f"{spec.description}\n\nRunner: {RUNNERS[spec.runner].description}.",
        tags=[spec.runner, spec.cost, spec.isa if spec.isa != "none" else "accelerator",
              *spec.extensions],
        hardware_support=[spec.name],
        isa=spec.isa, extensions=list(spec.extensions),
        flash=_memory(spec.flash_bytes), ram=_memory(spec.ram_bytes),
        weight_bits=list(spec.weight_bits), activation_bits=list(spec.activation_bits),
        runner=spec.runner, cost=spec.cost,
        target_file=Path(spec.source).name if own else spec.source,
    )  # fmt: skip
