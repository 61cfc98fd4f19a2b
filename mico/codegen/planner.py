"""Static memory planning: every activation gets an offset in one arena, no malloc.

Buffers whose lifetimes overlap never overlap in memory. Placement is greedy by size (largest
first, lowest offset that fits), a strong heuristic for this interval-colouring problem. The plan
reports the lower bound -- the peak of live bytes over the schedule -- so the gap is visible.
"""

from __future__ import annotations

from dataclasses import dataclass

from mico.ir.graph import Graph, Node, Value
from mico.quant.packing import packed_size

SCRATCH_ATTR = "scratch_bytes"
"""A node attribute: bytes of arena the node's kernel needs while it runs (and only then)."""


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
    lower_bound: int  # peak of simultaneously live bytes
    align: int

    @property
    def ratio(self) -> float:
        return self.size / self.lower_bound if self.lower_bound else 1.0


def _align(n: int, align: int) -> int:
    return (n + align - 1) // align * align


def plan_buffers(buffers: list[Buffer], align: int = 8) -> ArenaPlan:
    """Assign aligned offsets to ``buffers`` so that no two live at once share bytes."""
    if align < 1 or align & (align - 1):
        raise ValueError(f"alignment must be a power of two, got {align}")
    names = [b.name for b in buffers]
    if len(set(names)) != len(names):
        raise ValueError("buffer names must be unique")
    placed: list[tuple[Buffer, int]] = []
    offsets: dict[str, int] = {}
    for buf in sorted(buffers, key=lambda b: (-b.size, b.start, b.name)):
        conflicts = sorted(
            (off, off + other.size) for other, off in placed if other.overlaps_in_time(buf)
        )
        offset = 0
        for lo, hi in conflicts:
            if offset + buf.size <= lo:
                break
            offset = max(offset, _align(hi, align))
        offsets[buf.name] = offset
        placed.append((buf, offset))
    size = max((offsets[b.name] + b.size for b in buffers), default=0)
    steps = range(
        min((b.start for b in buffers), default=0), max((b.end for b in buffers), default=-1) + 1
    )
    lower = max((sum(b.size for b in buffers if b.start <= t <= b.end) for t in steps), default=0)
    return ArenaPlan(offsets, tuple(buffers), _align(size, align) if size else 0, lower, align)


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

    Graph inputs live in the caller's memory; constants live in flash; views (reshapes) share
    the storage of the value they view, which stays alive as long as any view is used.
    """
    start: dict[int, int] = {}
    end: dict[int, int] = {}
    values: dict[int, Value] = {}
    inputs = {id(v) for v in graph.inputs}
    last = len(graph.nodes) - 1
    for step, node in enumerate(graph.nodes):
        for out in node.outputs:
            base = out.storage()
            if id(base) in inputs:
                continue
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
        size = int(node.attrs.get(SCRATCH_ATTR, 0) or 0)
        if size > 0:
            buffers.append(Buffer(scratch_name(node), size, step, step))
    return buffers


def plan_graph(graph: Graph, align: int = 8) -> ArenaPlan:
    return plan_buffers(graph_buffers(graph), align)
