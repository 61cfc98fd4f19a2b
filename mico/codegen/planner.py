"""Static memory planning: every activation gets an offset in one arena, no malloc.

Buffers whose lifetimes overlap never overlap in memory. Finding the smallest arena is NP-hard
(dynamic storage allocation), so the planner places buffers first-fit (lowest offset that
fits) in several orders -- largest first, longest-lived first, by size x lifetime, by start,
then seeded random orders -- and keeps the smallest arena; it stops as soon as an arena
reaches its lower bound. The search is deterministic: the same graph always gets the same plan.

In-place execution ties buffers together: a kernel that writes its output over its own input
needs the output at a fixed displacement from the input (``ties``). Tied buffers are placed as
one group; each keeps its own lifetime, so the arena can go below the bound of separate
buffers (the peak of live bytes, which the plan reports so the gap is visible).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field

from mico.ir.graph import Graph, Node, Value
from mico.passes.inplace import INPLACE_ATTR
from mico.quant.packing import packed_size

SCRATCH_ATTR = "scratch_bytes"
"""A planning annotation (``Node.plan``): bytes of arena the node's kernel needs while it
runs (and only then)."""

RANDOM_ORDERS = 200
"""Seeded random orders the planner tries after its fixed ones (fewer on large graphs)."""

_SEARCH_BUDGET = 400_000  # groups x orders: bounds planning time on large graphs


def scratch_name(node: Node) -> str:
    """The buffer name of ``node``'s scratch memory."""
    return f"{node.name}.scratch"


@dataclass(frozen=True)
class Buffer:
    """A tensor that needs memory: live from step ``start`` to step ``end``, inclusive."""

    name: str
    size: int
    start: int
    end: int

    def overlaps_in_time(self, other: Buffer) -> bool:
        return self.start <= other.end and other.start <= self.end


@dataclass(frozen=True)
class ArenaPlan:
    offsets: dict[str, int]
    buffers: tuple[Buffer, ...]
    size: int  # arena bytes
    lower_bound: int  # peak of simultaneously live bytes, buffers counted separately
    align: int
    ties: dict[str, tuple[str, int]] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """Arena over the lower bound: 1.0 on the bound, below 1 where buffers share bytes in
        place."""
        return self.size / self.lower_bound if self.lower_bound else 1.0


def _align(n: int, align: int) -> int:
    return (n + align - 1) // align * align


@dataclass
class _Group:
    """Buffers placed together: members at fixed offsets from the group's start."""

    members: list[tuple[int, int]]  # (buffer index, offset in the group)
    extent: int
    start: int
    end: int


def _groups(buffers: list[Buffer], ties: Mapping[str, tuple[str, int]], align: int) -> list[_Group]:
    index = {b.name: i for i, b in enumerate(buffers)}
    for name, (anchor, offset) in ties.items():
        if name not in index or anchor not in index:
            missing = name if name not in index else anchor
            raise ValueError(f"tie names an unknown buffer '{missing}'")
        if offset % align:
            raise ValueError(
                f"tie of '{name}' to '{anchor}' is {offset} bytes, not a multiple of the "
                f"alignment {align}"
            )
    roots: dict[str, list[tuple[int, int]]] = {}
    for buf in buffers:
        name, position, seen = buf.name, 0, set()
        while name in ties:
            if name in seen:
                raise ValueError(f"ties form a cycle through '{name}'")
            seen.add(name)
            name, offset = ties[name][0], position + ties[name][1]
            position = offset
        roots.setdefault(name, []).append((index[buf.name], position))
    groups = []
    for members in roots.values():
        low = min(pos for _, pos in members)
        members = [(i, pos - low) for i, pos in members]
        groups.append(
            _Group(
                members,
                max(pos + buffers[i].size for i, pos in members),
                min(buffers[i].start for i, _ in members),
                max(buffers[i].end for i, _ in members),
            )
        )
    return groups


def _place(
    order: list[_Group], buffers: list[Buffer], overlaps: list[list[int]], align: int
) -> tuple[int, list[int]]:
    """First fit of ``order``: each group at the lowest aligned offset where none of its members
    shares bytes with a placed buffer it lives with."""
    offsets: list[int] = [-1] * len(buffers)
    arena = 0
    for group in order:
        conflicts = []  # (member's offset in group, member size, other's offset, other's size)
        for i, pos in group.members:
            if not buffers[i].size:
                continue
            for j in overlaps[i]:
                if offsets[j] >= 0 and buffers[j].size:
                    conflicts.append((pos, buffers[i].size, offsets[j], buffers[j].size))
        candidates = sorted(
            {0} | {_align(off + size, align) - pos for pos, _, off, size in conflicts}
        )
        for base in candidates:
            if base < 0:
                continue
            if all(
                base + pos + msize <= off or off + size <= base + pos
                for pos, msize, off, size in conflicts
            ):
                break
        for i, pos in group.members:
            offsets[i] = base + pos
        arena = max(arena, base + group.extent)
    return arena, offsets


def _live_bounds(buffers: list[Buffer], groups: list[_Group]) -> tuple[int, int]:
    """(peak of live bytes with every buffer counted apart, the same with each group's live
    members counted as the bytes they cover): the second is a lower bound of any arena."""
    if not buffers:
        return 0, 0
    if not groups:
        groups = [_Group([(i, 0)], b.size, b.start, b.end) for i, b in enumerate(buffers)]
    steps = range(min(b.start for b in buffers), max(b.end for b in buffers) + 1)
    separate = max(sum(b.size for b in buffers if b.start <= t <= b.end) for t in steps)
    covered = 0
    for t in steps:
        total = 0
        for group in groups:
            spans = sorted(
                (pos, pos + buffers[i].size)
                for i, pos in group.members
                if buffers[i].start <= t <= buffers[i].end and buffers[i].size
            )
            reach = None
            for lo, hi in spans:
                if reach is None or lo > reach:
                    total += hi - lo
                    reach = hi
                elif hi > reach:
                    total += hi - reach
                    reach = hi
        covered = max(covered, total)
    return separate, covered


def _search(
    buffers: list[Buffer],
    groups: list[_Group],
    overlaps: list[list[int]],
    align: int,
    random_orders: int,
) -> tuple[int, list[int]]:
    """The smallest first-fit arena over the fixed orders, then seeded random moves of the best
    order; stops on the lower bound."""
    target = _align(_live_bounds(buffers, groups)[1], align)

    def length(g: _Group) -> int:
        return g.end - g.start + 1

    fixed_keys = [
        lambda g: (-g.extent, g.start),
        lambda g: (-g.extent * length(g), g.start),
        lambda g: (-length(g), -g.extent, g.start),
        lambda g: (g.start, -g.extent),
        lambda g: (-g.end, -g.extent),
    ]
    best: tuple[int, list[int], list[_Group]] | None = None
    for key in fixed_keys:
        order = sorted(groups, key=key)
        size, offsets = _place(order, buffers, overlaps, align)
        if best is None or size < best[0]:
            best = (size, offsets, order)
        if best[0] <= target:
            return best[0], best[1]
    rng = random.Random(0)
    for _ in range(min(random_orders, _SEARCH_BUDGET // max(1, len(groups) ** 2))):
        order = list(best[2])
        order.insert(rng.randrange(len(order)), order.pop(rng.randrange(len(order))))
        size, offsets = _place(order, buffers, overlaps, align)
        if size <= best[0]:
            best = (size, offsets, order)
            if size <= target:
                break
    return best[0], best[1]


def plan_buffers(
    buffers: list[Buffer],
    align: int = 8,
    ties: Mapping[str, tuple[str, int]] | None = None,
    random_orders: int = RANDOM_ORDERS,
    choose_ties: bool = True,
) -> ArenaPlan:
    """Assign aligned offsets to ``buffers`` so that no two live at once share bytes.

    ``ties`` are the in-place options: a buffer name maps to ``(anchor, offset)``, meaning the
    buffer may sit ``offset`` bytes (a multiple of ``align``, possibly negative) after its
    anchor and share bytes with it. A tie is not always a gain (it fixes two buffers relative
    to each other), so the planner keeps the ties that shrink the arena: it plans with all and
    with none, then toggles each tie once and keeps a toggle that helps. ``ArenaPlan.ties``
    lists the ties used. ``choose_ties=False`` uses every tie.
    """
    if align < 1 or align & (align - 1):
        raise ValueError(f"alignment must be a power of two, got {align}")
    names = [b.name for b in buffers]
    if len(set(names)) != len(names):
        raise ValueError("buffer names must be unique")
    options = dict(ties or {})
    _groups(buffers, options, align)  # validates every tie
    overlaps = [
        [j for j, other in enumerate(buffers) if j != i and buf.overlaps_in_time(other)]
        for i, buf in enumerate(buffers)
    ]

    def plan(used: dict[str, tuple[str, int]]) -> tuple[int, list[int]]:
        return _search(buffers, _groups(buffers, used, align), overlaps, align, random_orders)

    used = dict(options)
    size, offsets = plan(used)
    if options and choose_ties:
        alone = plan({})
        if alone[0] < size:
            used, (size, offsets) = {}, alone
        for name in options:
            trial = {k: v for k, v in used.items() if k != name}
            if name not in used:
                trial[name] = options[name]
            result = plan(trial)
            if result[0] < size:
                used, (size, offsets) = trial, result
    separate = _live_bounds(buffers, [])[0]
    placed = {b.name: offsets[i] for i, b in enumerate(buffers)}
    return ArenaPlan(placed, tuple(buffers), _align(size, align), separate, align, used)


def storage_bytes(value: Value) -> int:
    """Arena bytes of ``value``: sub-byte integer codes are packed at their bit-width
    (``ceil(numel * bits / 8)``, as the kernels' ``mico_load`` / ``mico_store`` read them);
    every other value takes ``type.nbytes``."""
    dtype = value.type.dtype
    if dtype.is_int and dtype.bits < 8:
        return packed_size(value.type.numel, dtype.bits)
    return value.type.nbytes


def graph_buffers(graph: Graph) -> list[Buffer]:
    """The buffers of a graph's intermediate values, with lifetimes in node-schedule steps.

    Graph inputs live in the caller's memory; constants live in flash, and so do views of them
    (an alias of a mask buffer); views (reshapes) share the storage of the value they view,
    which stays alive as long as any view is used.
    """
    start: dict[int, int] = {}
    end: dict[int, int] = {}
    values: dict[int, Value] = {}
    inputs = {id(v) for v in graph.inputs}
    last = len(graph.nodes) - 1
    for step, node in enumerate(graph.nodes):
        for out in node.outputs:
            base = out.storage()
            if id(base) in inputs or base.producer is None:
                continue  # a view of the input or of a constant: no arena bytes
            values[id(base)] = base
            start.setdefault(id(base), step)
            end[id(base)] = max(end.get(id(base), step), step)
        for v in node.inputs:
            if v.is_const:
                continue
            base = v.storage()
            if id(base) in start:
                end[id(base)] = max(end[id(base)], step)
    for v in graph.outputs:
        base = v.storage()
        if id(base) in start:
            end[id(base)] = last
    buffers = [Buffer(values[k].name, storage_bytes(values[k]), start[k], end[k]) for k in start]
    for step, node in enumerate(graph.nodes):
        size = int(node.plan.get(SCRATCH_ATTR, 0) or 0)
        if size > 0:
            buffers.append(Buffer(scratch_name(node), size, step, step))
    return buffers


def graph_ties(graph: Graph, align: int = 8) -> dict[str, tuple[str, int]]:
    """Ties of in-place nodes (:data:`~mico.passes.inplace.INPLACE_ATTR`): the output buffer
    sits the node's displacement (rounded up to whole bytes, then to ``align``) before the
    buffer of the input it overwrites."""
    ties = {}
    for node in graph.nodes:
        spec = node.plan.get(INPLACE_ATTR)
        if not spec:
            continue
        source = node.inputs[spec["input"]].storage()
        displacement = _align((int(spec["displacement_bits"]) + 7) // 8, align)
        ties[node.output.storage().name] = (source.name, -displacement)
    return ties


def plan_graph(graph: Graph, align: int = 8) -> ArenaPlan:
    """The arena plan of ``graph``: buffers from lifetimes, ties from in-place nodes."""
    return plan_buffers(graph_buffers(graph), align, graph_ties(graph, align))
