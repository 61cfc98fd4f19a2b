"""Per-layer latency measurement backends, one per target, for profiles and proxies.

``bitfusion`` is the analytic cycle model (instant). Targets that run programs (rv32 under qemu,
host under callgrind, VexRiscv under verilator) measure single-layer programs through
:mod:`mico.targets` when their per-layer counters are available.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mico.errors import ConfigError
from mico.hw.bitfusion import BitFusionConfig, layer_cycles
from mico.hw.layers import LayerShape
from mico.hw.profile import fingerprint


@dataclass(frozen=True)
class Backend:
    """How to measure one layer on a target, in which unit, with which bit-widths."""

    target: str
    unit: str
    measure: Callable[[LayerShape], float]
    bits: tuple[float | int, ...]
    fingerprint: str


def bitfusion_backend(config: BitFusionConfig | None = None) -> Backend:
    """The BitFusion cycle model as a measurement backend (bit-widths 2, 4, 8 and mixes)."""
    cfg = config or BitFusionConfig()
    return Backend(
        "bitfusion", "cycles", lambda layer: float(layer_cycles(layer, cfg).cycles),
        (2, 4, 8), fingerprint(cfg),
    )  # fmt: skip


BACKENDS: dict[str, Callable[[], Backend]] = {"bitfusion": bitfusion_backend}


def backend(target: str) -> Backend:
    """The measurement backend of ``target``; unknown targets list the known ones."""
    try:
        factory = BACKENDS[target]
    except KeyError:
        raise ConfigError(
            f"no per-layer latency backend for target '{target}'; backends: "
            f"{', '.join(sorted(BACKENDS))}"
        ) from None
    return factory()
