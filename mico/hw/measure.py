"""Per-layer latency measurement backends, one per target, for profiles and proxies.

``bitfusion`` is the analytic cycle model (instant). Targets that run programs (rv32 under qemu,
host under callgrind, VexRiscv under verilator) measure single-layer programs through
:mod:`mico.targets` when their per-layer counters are available.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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
    #: program backends: the measurement that keys each row by its program
    #: (:data:`mico.hw.profile.KeyedMeasure`); None for analytic models
    keyed: Callable[..., Any] | None = None
    #: (weight, activation) pairs measured besides every pair of ``bits`` (a program target
    #: that runs binary layers: W1A1, whose popcount kernels no other pair shows)
    extra_pairs: tuple[tuple[float | int, float | int], ...] = ()
    #: pairs measured for the one-group convolutions alone
    #: (:data:`mico.hw.profile.SIGN_WEIGHT_KINDS`): binary weights on wide codes (W1A8), which
    #: take the sign tables no other pair shows
    sign_pairs: tuple[tuple[float | int, float | int], ...] = ()


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


#: how each target runner is measured, by the name of the built-in target that runs it so
RUNNER_LATENCY = {
    "analytic-bitfusion": "bitfusion",
    "qemu-rv32": "rv32",
    "host": "host",
    "verilator-vexriscv": "vexriscv",
}


def latency_kind(target: str) -> str:
    """How a latency target is measured: ``bitfusion``, ``rv32``, ``host`` or ``vexriscv`` for
    the built-in targets and for every target file whose runner is theirs (``rv32zbb``: rv32,
    its programs generated for its extensions); anything else is refused with the choices."""
    from mico.errors import MicoError
    from mico.targets.catalog import get_target

    try:
        runner = get_target(target).runner
    except MicoError as exc:
        raise ConfigError(f"latency target '{target}': {exc}") from None
    if runner not in RUNNER_LATENCY:
        raise ConfigError(
            f"latency target '{target}' (runner {runner}) has no latency measurement; use a "
            f"target whose runner is {', '.join(RUNNER_LATENCY)} (mico targets)"
        )
    return RUNNER_LATENCY[runner]


def generation_extensions(target: str) -> tuple[str, ...]:
    """The ISA extensions a program for ``target`` is generated with: what ``mico verify
    --target`` passes (:func:`mico.deploy.generation_extensions`; the host gets its own
    kernels, so its counts are those of the program ``mico compile`` writes)."""
    from mico.deploy import generation_extensions as project_extensions

    if latency_kind(target) == "bitfusion":
        return ()
    return tuple(str(e).lower() for e in project_extensions([target]))


def spec_extensions(spec: Any) -> tuple[str, ...]:
    """:func:`generation_extensions` of a loaded target file (a board from --targets-dir:
    its own extensions; a host file's ``xautovec`` gives the host kernels, as for ``host``)."""
    if spec.runner == "analytic-bitfusion":
        return ()
    return tuple(sorted(str(e).lower() for e in spec.extensions))
