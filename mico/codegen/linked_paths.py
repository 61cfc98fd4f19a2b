"""Small layers on the fast paths a program links anyway.

Every fast kernel path (channel lanes, the W8A8 byte paths, the popcount kernels) adds its
code to a program's flash, so a layer too small to repay that (fewer MACs than the path's gate:
``emitters.LANES_MIN_MACS``, ``CONV_S8_MIN_MACS``, ``LINEAR_S8_MIN_MACS``,
``binary_plan.MIN_MACS``) keeps the plain kernel. When another layer of the same program takes
that entry point anyway, its code is already paid for, and the small layer takes it too: LeNet-5
at W1A1, whose fc1 links the popcount linear kernel, runs fc2 through it as well (74,728 ->
9,928 rv32 instructions), where a per-layer rule left fc2 on the plain kernel, slower than at
W8A8 and so never chosen by a latency-aware search.

The choice is the generator's own: each conv / linear node's emit rule is run in a probe context
(:func:`mico.hw.opshape.emitted_kernel`) with the gates as they are and with them lifted, and a
node whose lifted entry point is one the gated program calls is emitted lifted. The latency
proxies make the same choice from the same function, so what they predict is what runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from mico.errors import ConfigError

#: the MAC count the size gates see for a node on a path its program links anyway
UNGATED_MACS = 1 << 62

#: what a program's kernel paths are chosen for: ``speed`` (the fast paths, each behind its
#: size gate) or ``size`` (the plain kernels only: the least code, every layer slower)
PREFERENCES = ("speed", "size")


def check_preference(prefer: str) -> None:
    """Refuse a preference that is not one of :data:`PREFERENCES`."""
    if prefer not in PREFERENCES:
        raise ConfigError(
            f"unknown kernel preference {prefer!r}: use 'speed' (the fast kernel paths) or "
            "'size' (the plain kernels: least flash)"
        )


def prefers_size(ctx: Any) -> bool:
    """Whether the program being emitted takes the plain kernels only (``prefer="size"``)."""
    return getattr(ctx, "prefer", "speed") == "size"


#: the ops whose emit rules have size-gated paths
GATED_OPS = ("mico.qconv2d", "mico.qlinear")


#: the lift of a node's offset-code gate alone (``emitters.SUB_OFFSET_MIN_MACS``): a small
#: linear layer keeps the word kernels it has and takes the offset-code entry point its
#: program links, where lifting every gate would put it on the lanes no other layer calls
OFFSET_ONLY = "offset"


def linked_layers(nodes: Iterable[Any], extensions: Sequence[str] = ()) -> dict[str, bool | str]:
    """The conv / linear ``nodes`` that take a path their program links anyway, and how: True
    where their entry point without the size gates differs from the gated one and is called by
    some node of the program as generated with the gates; :data:`OFFSET_ONLY` where that holds
    of the entry point with the offset-code gate alone lifted."""
    from mico.hw.opshape import emitted_kernel

    gated: dict[str, str] = {}
    lifted: dict[str, tuple[str, str]] = {}
    for node in nodes:
        if node.op not in GATED_OPS:
            continue
        try:
            gated[node.name] = emitted_kernel(node, extensions)[0]
            lifted[node.name] = (
                emitted_kernel(node, extensions, ungated=True)[0],
                emitted_kernel(node, extensions, ungated=OFFSET_ONLY)[0],
            )
        except Exception:  # a node the probe cannot emit keeps its own rule
            continue
    linked = set(gated.values())
    how: dict[str, bool | str] = {}
    for name, (every, offset) in lifted.items():
        if every != gated[name] and every in linked:
            how[name] = True
        elif offset != gated[name] and offset in linked:
            how[name] = OFFSET_ONLY
    return how


def ungated_layers(nodes: Iterable[Any], extensions: Sequence[str] = ()) -> frozenset[str]:
    """Names of the conv / linear ``nodes`` that take a path their program links anyway
    (:func:`linked_layers`, either way)."""
    return frozenset(linked_layers(nodes, extensions))


def gate_macs(ctx: Any, node: Any, macs: int) -> int:
    """The MAC count a node's size gates see: ``macs``, :data:`UNGATED_MACS` for a node on a
    linked path (``ctx.ungated`` says True) or in a probe that lifts every gate
    (``ctx.ungate_all`` True), 0 (no fast path reached) when the program prefers size."""
    if prefers_size(ctx):
        return 0
    if _lift(ctx, node) is True:
        return UNGATED_MACS
    return macs


def offset_gate_macs(ctx: Any, node: Any, macs: int) -> int:
    """The MAC count the offset-code gate sees: :func:`gate_macs`, or :data:`UNGATED_MACS`
    where that gate alone is lifted (:data:`OFFSET_ONLY`)."""
    if prefers_size(ctx):
        return 0
    return UNGATED_MACS if _lift(ctx, node) is not False else macs


def _lift(ctx: Any, node: Any) -> bool | str:
    """How ``ctx`` lifts ``node``'s gates: True (all), :data:`OFFSET_ONLY` or False."""
    every = getattr(ctx, "ungate_all", False)
    if every:
        return every
    ungated = getattr(ctx, "ungated", ())
    if isinstance(ungated, dict):
        return ungated.get(node.name, False)
    return node.name in ungated
