"""The targets' entries in the module registry (category ``target``), loaded by
:func:`mico.registry.builtin.load_builtin`.

Every target file mico ships (and those in ``$MICO_TARGETS_DIR``) is registered under its name
with its hardware (ISA, extensions, memory), the bit-widths it runs and how it is measured. The
registered class is :class:`mico.targets.catalog.TargetSpec`: its fields are a target file's.
"""

from __future__ import annotations

from typing import Any


def _memory(size: int | None) -> str:
    return "not limited" if size is None else f"{size} B"


def register(registry: Any) -> None:
    from mico.targets.catalog import RUNNERS, TargetSpec, load_catalog

    for spec in load_catalog().values():
        if registry.get_module(spec.name) is not None:
            continue
        registry.add(
            TargetSpec, spec.name, "target", author="mico",
            description=f"{spec.description}\n\nRunner: {RUNNERS[spec.runner].description}.",
            tags=[spec.runner, spec.cost, spec.isa if spec.isa != "none" else "accelerator",
                  *spec.extensions],
            hardware_support=[spec.name],
            isa=spec.isa, extensions=list(spec.extensions),
            flash=_memory(spec.flash_bytes), ram=_memory(spec.ram_bytes),
            weight_bits=list(spec.weight_bits), activation_bits=list(spec.activation_bits),
            runner=spec.runner, cost=spec.cost, target_file=spec.source.rsplit("/", 1)[-1],
        )  # fmt: skip
