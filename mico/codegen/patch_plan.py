"""Patch-based execution of a graph's first layers: the arena below the whole-tensor bound.

A whole-tensor planner cannot go below the largest ``input + output`` of one layer (LOAD-FA),
and in a CNN that peak sits in the first, high-resolution layers. Run in row bands instead
(MCUNetV2's idea), those layers need only a few rows of each intermediate at a time:

* the **stage** is a prefix of the schedule (the input quantization, then convolutions --
  plain, depthwise, pointwise, with their fused ReLU / ReLU6 -- and elementwise ops) whose
  values are used only inside it, except its last node's output;
* that output is computed in **bands** of ``rows`` rows; for each band the rows every value
  needs are derived backwards through the receptive fields (kernel, stride, padding,
  dilation), so rows shared by neighbouring bands are computed again (the recomputation);
* each node runs on its band with its own ``MicoConv2d`` (the band's rows, its top padding;
  rows past the band's end are the layer's bottom padding, as the kernels already treat
  them), reading and writing small band buffers; a band's result is copied into the stage
  output, which is whole in the arena.

Kernels are unchanged: a band is a smaller layer. Bands of the same shape share their
parameter struct (the first and the last band differ by their padding and height). The stage
and the band height are chosen to lower the arena (the real first-fit plan decides, against
the plan without patches), then the fewest extra MACs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mico.codegen.planner import (
    SCRATCH_ATTR,
    ArenaPlan,
    Buffer,
    graph_buffers,
    graph_ties,
    plan_buffers,
    plan_graph,
    storage_bytes,
)
from mico.ir.graph import Graph, Node, Value
from mico.ir.ops import mico_ops
from mico.ir.types import TensorType
from mico.quant.packing import packed_size

PATCH_MODES = ("auto", "off")
#: ops a stage may hold: row-local (convolutions) or elementwise (one output row per input row)
ELEMENTWISE = (mico_ops.QUANTIZE, mico_ops.ADD, mico_ops.REQUANT, mico_ops.LUT)
STAGE_OPS = (mico_ops.QCONV2D, *ELEMENTWISE)
#: candidates whose estimated peak is lowest are planned for real (first fit), the best kept
PLANNED_CANDIDATES = 6
#: the recomputation ``auto`` accepts: extra MACs at most this share of the model's MACs (a
#: deep stage in one-row bands can lower the arena a little for several times the work)
MAX_EXTRA_MACS = 0.10

Range = tuple[int, int]  # rows [start, stop) of a value


@dataclass(frozen=True)
class PatchPlan:
    """A chosen stage, its bands, and the arena with and without them."""

    stage: tuple[Node, ...]  # graph.nodes[: len(stage)]
    rows: int  # rows of the stage output per band (the last band may have fewer)
    bands: tuple[dict[int, Range], ...]  # per band: id(value) -> rows it needs
    arena: ArenaPlan  # with patches
    whole: ArenaPlan  # the same graph without patches
    load_fa: int  # the whole-tensor bound: the largest input + output bytes of one node
    macs: int  # MACs of the stage's convolutions, run whole
    band_macs: int  # the same run in bands (recomputed rows included)
    model_macs: int  # MACs of every conv / linear of the graph
    values: dict[int, Value] = field(default_factory=dict, repr=False)

    @property
    def extra_macs(self) -> int:
        return self.band_macs - self.macs

    def summary(self) -> dict[str, Any]:
        """The figures a report shows (JSON-ready)."""
        last = self.stage[-1].output
        return {
            "patched": True,
            "stage": [n.name for n in self.stage],
            "stage_output": {"name": last.name, "shape": list(last.type.shape)},
            "bands": len(self.bands),
            "rows_per_band": self.rows,
            "arena_bytes": self.arena.size,
            "arena_without_patches": self.whole.size,
            "load_fa": self.load_fa,
            "arena_over_load_fa": round(self.arena.size / self.load_fa, 4)
            if self.load_fa
            else None,
            "stage_macs": self.macs,
            "stage_macs_in_bands": self.band_macs,
            "extra_macs": self.extra_macs,
            "extra_macs_of_model": round(self.extra_macs / self.model_macs, 4)
            if self.model_macs
            else None,
        }


def band_name(value: Value, band: int) -> str:
    """The arena buffer of ``value``'s rows in band ``band``."""
    return f"{value.name}.band{band}"


def load_fa(graph: Graph) -> int:
    """LOAD-FA, the whole-tensor bound: the largest sum of one node's arena inputs and output
    (graph inputs live in the caller's memory, constants in flash)."""
    inputs = {id(v) for v in graph.inputs}
    best = 0
    for node in graph.nodes:
        seen: dict[int, int] = {}
        for v in [*node.inputs, *node.outputs]:
            base = v.storage()
            if v.is_const or id(base) in inputs or base.producer is None:
                continue
            seen[id(base)] = storage_bytes(base)
        best = max(best, sum(seen.values()))
    return best


def _conv_macs(node: Node, out_rows: int | None = None) -> int:
    x, w, out = node.inputs[0], node.inputs[1], node.output
    _, out_c, out_h, out_w = out.type.shape
    k_h, k_w = w.type.shape[2:]
    rows = out_h if out_rows is None else out_rows
    return out_c * rows * out_w * (x.type.shape[1] // node.attrs["groups"]) * k_h * k_w


def model_macs(graph: Graph) -> int:
    """MACs of the graph's convolutions and fully connected layers."""
    total = 0
    for node in graph.nodes:
        if node.op == mico_ops.QCONV2D:
            total += _conv_macs(node)
        elif node.op == mico_ops.QLINEAR:
            out_f, in_f = node.inputs[1].type.shape
            total += node.inputs[0].type.numel // in_f * out_f
    return total


def _bits(value: Value) -> int:
    return value.qformat.bits if value.qformat is not None else value.type.dtype.bits


def _rows_bytes(value: Value, rows: int) -> int:
    """Bytes of ``rows`` rows of a (1, C, H, W) value, packed as its storage is."""
    _, c, _, w = value.type.shape
    numel = c * rows * w
    bits = _bits(value)
    return packed_size(numel, bits) if bits < 8 else numel * bits // 8


def _is_nchw(value: Value) -> bool:
    shape = value.type.shape
    return len(shape) == 4 and shape[0] == 1 and all(isinstance(d, int) for d in shape)


def _conv_input(node: Node, out: Range) -> tuple[Range, int]:
    """The input rows a convolution's output rows ``out`` read, and the band's top padding."""
    s, p, d = node.attrs["stride"][0], node.attrs["padding"][0], node.attrs["dilation"][0]
    k = node.inputs[1].type.shape[2]
    height = node.inputs[0].type.shape[2]
    lo = out[0] * s - p
    hi = (out[1] - 1) * s - p + (k - 1) * d + 1
    start = max(0, lo)
    return (start, min(height, hi)), start - lo


def _node_qualifies(node: Node, graph: Graph, produced: set[int]) -> bool:
    """``node`` can run in bands, reading the graph input (quantize) or stage values."""
    if node.op not in STAGE_OPS or len(node.outputs) != 1 or node.plan.get(SCRATCH_ATTR):
        return False
    out = node.output
    if out.alias_of is not None or not _is_nchw(out):
        return False
    data = [v for v in node.inputs if not v.is_const]
    if node.op == mico_ops.QUANTIZE:
        x = node.inputs[0]
        return (
            x is graph.inputs[0]
            and _is_nchw(x)
            and np.ndim(node.attrs["scale"]) == 0
            and out.type.shape[3] * _bits(out) % 8 == 0
        )
    if not data or not all(id(v) in produced and _is_nchw(v) for v in data):
        return False
    if node.op == mico_ops.QCONV2D:
        return len(node.inputs) == 3 and all(v.is_const for v in node.inputs[1:])
    if node.op == mico_ops.REQUANT:
        spec = node.attrs["out"].get("m")
        per_channel = spec is not None and len(spec) > 1
        if per_channel and int(node.attrs.get("axis", 1)) % 4 != 1:
            return False
    return all(tuple(v.type.shape) == tuple(out.type.shape) for v in data)


def stage_ends(graph: Graph) -> list[int]:
    """Lengths ``k`` of the prefixes ``graph.nodes[:k]`` that can run as a patch stage: every
    node qualifies and only the last node's output is used after the prefix."""
    if len(graph.inputs) != 1 or not graph.nodes or graph.nodes[0].op != mico_ops.QUANTIZE:
        return []
    last_use: dict[int, int] = {}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            last_use[id(v.storage())] = i
    outputs = {id(v.storage()) for v in graph.outputs}
    ends, produced = [], set()
    for i, node in enumerate(graph.nodes):
        if not _node_qualifies(node, graph, produced):
            break
        produced.add(id(node.output))
        k = i + 1
        stage = graph.nodes[:k]
        out = node.output
        if id(out) in outputs or out.type.shape[2] < 2 or out.type.shape[3] * _bits(out) % 8:
            continue
        if all(
            last_use.get(id(n.output), -1) < k and id(n.output) not in outputs for n in stage[:-1]
        ):
            ends.append(k)
    return ends


def band_ranges(stage: Sequence[Node], out: Range) -> dict[int, Range] | None:
    """The rows every value of ``stage`` (and the graph input) needs for rows ``out`` of the
    stage output; None when two consumers of a value need different rows (a residual beside
    a window: the band buffers cannot hold both)."""
    need: dict[int, Range] = {id(stage[-1].output): out}
    for node in reversed(stage):
        rows = need.get(id(node.output))
        if rows is None:
            return None  # a value no later stage node reads
        if node.op == mico_ops.QCONV2D:
            wanted = [(node.inputs[0], _conv_input(node, rows)[0])]
        else:
            wanted = [(v, rows) for v in node.inputs if not v.is_const]
        for v, r in wanted:
            if need.setdefault(id(v), r) != r:
                return None
    return need


def _band_steps(stage: Sequence[Node]) -> list[int]:
    """The last step (stage index; ``len(stage)`` is the copy out) using each node's output."""
    index = {id(n.output): i for i, n in enumerate(stage)}
    last = [len(stage) if i == len(stage) - 1 else i for i in range(len(stage))]
    for i, node in enumerate(stage):
        for v in node.inputs:
            if id(v) in index:
                last[index[id(v)]] = max(last[index[id(v)]], i)
    return last


def _bands(stage: Sequence[Node], rows: int) -> list[dict[int, Range]] | None:
    height = stage[-1].output.type.shape[2]
    bands = []
    for start in range(0, height, rows):
        need = band_ranges(stage, (start, min(height, start + rows)))
        if need is None:
            return None
        bands.append(need)
    return bands


def _band_peak(stage: Sequence[Node], bands: list[dict[int, Range]]) -> int:
    """The most band-buffer bytes live at once (outputs counted from their node to their last
    reader)."""
    last = _band_steps(stage)
    peak = 0
    for need in bands:
        sizes = [_rows_bytes(n.output, need[id(n.output)][1] - need[id(n.output)][0])
                 for n in stage]  # fmt: skip
        for t in range(len(stage) + 1):
            peak = max(peak, sum(s for i, s in enumerate(sizes) if i <= t <= last[i]))
    return peak


def _band_macs(stage: Sequence[Node], bands: list[dict[int, Range]]) -> int:
    total = 0
    for need in bands:
        for node in stage:
            if node.op == mico_ops.QCONV2D:
                r = need[id(node.output)]
                total += _conv_macs(node, r[1] - r[0])
    return total


def patched_buffers(
    graph: Graph, stage: Sequence[Node], bands: Sequence[dict[int, Range]]
) -> list[Buffer]:
    """The buffers of the patched schedule: per band one step per stage node and one for the
    copy into the stage output, then the rest of the graph (its lifetimes shifted)."""
    k, per = len(stage), len(stage) + 1
    shift = len(bands) * per - k
    internal = {n.output.name for n in stage[:-1]}
    out = stage[-1].output
    buffers = []
    for buf in graph_buffers(graph):
        if buf.name in internal:
            continue
        start = k if buf.name == out.name else buf.start + shift
        buffers.append(Buffer(buf.name, buf.size, start, buf.end + shift))
    last = _band_steps(stage)
    for b, need in enumerate(bands):
        for i, node in enumerate(stage):
            r = need[id(node.output)]
            size = _rows_bytes(node.output, r[1] - r[0])
            buffers.append(Buffer(band_name(node.output, b), size, b * per + i, b * per + last[i]))
    return buffers


def _live_after(graph: Graph) -> list[int]:
    """``after[k]``: the most bytes live at any step from ``k`` on (whole tensors, counted
    apart)."""
    buffers = graph_buffers(graph)
    steps = len(graph.nodes)
    live = [0] * (steps + 1)
    for b in buffers:
        for t in range(b.start, min(b.end, steps - 1) + 1):
            live[t] += b.size
    after = [0] * (steps + 1)
    for t in range(steps - 1, -1, -1):
        after[t] = max(live[t], after[t + 1])
    return after


def choose_patches(
    graph: Graph, align: int = 8, max_extra_macs: float = MAX_EXTRA_MACS
) -> PatchPlan | None:
    """The patch stage and band height of the smallest arena whose recomputed MACs stay within
    ``max_extra_macs`` of the model's, fewest extra MACs among equals; None when no qualifying
    stage lowers the arena below the whole-tensor plan's."""
    ends = stage_ends(graph)
    if not ends:
        return None
    budget = max_extra_macs * model_macs(graph)
    after = _live_after(graph)
    candidates = []
    for k in ends:
        stage = graph.nodes[:k]
        out = stage[-1].output
        whole_out = storage_bytes(out)
        macs = sum(_conv_macs(n) for n in stage if n.op == mico_ops.QCONV2D)
        for rows in range(1, out.type.shape[2]):
            bands = _bands(stage, rows)
            if bands is None:
                break  # taller bands meet the same conflict
            extra = _band_macs(stage, bands) - macs
            if extra > budget:
                continue
            peak = max(after[k], whole_out + _band_peak(stage, bands))
            candidates.append((peak, extra, k, rows, bands))
    if not candidates:
        return None
    candidates.sort(key=lambda c: (c[0], c[1], c[2], c[3]))
    whole = plan_graph(graph, align)
    ties = graph_ties(graph, align)
    best: tuple[int, int, ArenaPlan, tuple] | None = None
    for _peak, extra, k, rows, bands in candidates[:PLANNED_CANDIDATES]:
        stage = graph.nodes[:k]
        buffers = patched_buffers(graph, stage, bands)
        names = {b.name for b in buffers}
        kept = {n: t for n, t in ties.items() if n in names and t[0] in names}
        arena = plan_buffers(buffers, align, kept)
        if best is None or (arena.size, extra) < (best[0], best[1]):
            best = (arena.size, extra, arena, (k, rows, bands))
    assert best is not None
    if best[0] >= whole.size:
        return None
    k, rows, bands = best[3]
    stage = tuple(graph.nodes[:k])
    macs = sum(_conv_macs(n) for n in stage if n.op == mico_ops.QCONV2D)
    values = {id(n.output): n.output for n in stage}
    values[id(graph.inputs[0])] = graph.inputs[0]
    return PatchPlan(stage, rows, tuple(bands), best[2], whole, load_fa(graph), macs,
                     _band_macs(stage, bands), model_macs(graph), values)  # fmt: skip


def no_patch_summary(graph: Graph, arena: ArenaPlan, mode: str) -> dict[str, Any]:
    """The report entry of a project compiled without patches (``mode`` off, or auto when no
    stage lowers the arena)."""
    why = "off" if mode == "off" else ("no qualifying prefix" if not stage_ends(graph) else
                                        "no band plan lowers the arena within "
                                        f"{MAX_EXTRA_MACS:.0%} extra MACs")  # fmt: skip
    return {"patched": False, "mode": mode, "why": why, "arena_bytes": arena.size,
            "load_fa": load_fa(graph)}  # fmt: skip


# ------------------------------------------------------------------------------- emission
def _placeholder(
    value: Value, rows: int, token: str, ctx: Any, channels: int | None = None
) -> Value:
    """A stand-in for ``value``'s band (``rows`` rows) whose C expression is ``token``."""
    _, c, _, w = value.type.shape
    shape = (1, c if channels is None else channels, rows, w)
    stand = Value(f"{value.name}.tpl", TensorType(shape, value.type.dtype), qformat=value.qformat,
                  scale=value.scale)  # fmt: skip
    ctx.inputs[id(stand)] = token
    return stand


def _template(node: Node, need: dict[int, Range], ctx: Any, cache: dict) -> list[str]:
    """The statements of ``node`` on a band of this shape, buffers as ``@IN0@``.. ``@OUT@``
    tokens; emitted once per distinct shape (same struct for bands of the same shape)."""
    from mico.codegen.project import emit_rule

    out = node.output
    o = need[id(out)]
    attrs = dict(node.attrs)
    if node.op == mico_ops.QCONV2D:
        r, pad = _conv_input(node, o)
        attrs["padding"] = [pad, node.attrs["padding"][1]]
        attrs["whole_macs"] = _conv_macs(node)
        attrs["whole_name"] = node.name
        key = (node.name, r[1] - r[0], o[1] - o[0], pad)
    else:
        key = (node.name, o[1] - o[0])
    if key in cache:
        return cache[key]
    per_channel = node.op == mico_ops.QUANTIZE  # one call per channel (strided input planes)
    channels = 1 if per_channel else None
    ins = []
    for i, v in enumerate(node.inputs):
        if v.is_const:
            ins.append(v)
            continue
        rows = need[id(v)][1] - need[id(v)][0]
        ins.append(_placeholder(v, rows, f"@IN{i}@", ctx, channels))
    tout = _placeholder(out, o[1] - o[0], "@OUT@", ctx, channels)
    tnode = Node(f"{node.name}_band{len([k for k in cache if k[0] == node.name])}", node.op,
                 ins, [tout], attrs, origin=node.origin)  # fmt: skip
    previous, ctx.node = ctx.node, tnode
    try:
        statements = emit_rule(node)(tnode, ctx)
    finally:
        ctx.node = previous
        for v in [*ins, tout]:
            ctx.inputs.pop(id(v), None)
    cache[key] = statements
    return statements


def _arena(ctx: Any, name: str) -> int:
    return int(ctx.plan.offsets[name])


def emit_stage(plan: PatchPlan, ctx: Any) -> list[str]:
    """The C statements of the patch stage: every band's nodes, then its copy into the stage
    output; the stage output's debug dump last."""
    body: list[str] = []
    cache: dict = {}
    stage, out = plan.stage, plan.stage[-1].output
    ctx.need("mico_nn_run.c")
    first = stage[0]
    x = first.inputs[0]
    _, c_in, h_in, w_in = x.type.shape
    _, c_out, h_out, w_out = out.type.shape
    row_bytes = w_out * _bits(out) // 8
    body.append(f"/* patch stage: {len(stage)} ops in {len(plan.bands)} bands of {plan.rows} "
                f"rows of {out.name} {list(out.type.shape)} */")  # fmt: skip
    for b, need in enumerate(plan.bands):
        o = need[id(out)]
        body.append(f"/* band {b}: rows {o[0]}..{o[1] - 1} */")
        for node in stage:
            statements = _template(node, need, ctx, cache)
            dst = _arena(ctx, band_name(node.output, b))
            if node.op == mico_ops.QUANTIZE:
                r = need[id(x)]
                rows = r[1] - r[0]
                src = f"{ctx.buffer(x)} + (size_t)mico_c * {h_in * w_in} + {r[0] * w_in}"
                band = (
                    f"MICO_ARENA({dst} + (size_t)mico_c * {_rows_bytes(node.output, rows) // c_in})"
                )
                calls = [s.replace("@IN0@", f"({src})").replace("@OUT@", band) for s in statements]
                body.append("{")
                body.append("    int32_t mico_c;")
                body.append(f"    for (mico_c = 0; mico_c < {c_in}; mico_c++) {{")
                body.extend(f"        {s}" for s in calls)
                body.append("    }")
                body.append("}")
                continue
            text = [s.replace("@OUT@", f"MICO_ARENA({dst})") for s in statements]
            for i, v in enumerate(node.inputs):
                if not v.is_const:
                    src = f"MICO_ARENA({_arena(ctx, band_name(v, b))})"
                    text = [s.replace(f"@IN{i}@", src) for s in text]
            body.extend(text)
        rows = o[1] - o[0]
        src, dst = _arena(ctx, band_name(out, b)), _arena(ctx, out.name)
        body.append("{")
        body.append("    int32_t mico_c;")
        body.append(f"    for (mico_c = 0; mico_c < {c_out}; mico_c++) {{")
        body.append(f"        memcpy(MICO_ARENA({dst} + (size_t)mico_c * {h_out * row_bytes} + "
                    f"{o[0] * row_bytes}), MICO_ARENA({src} + (size_t)mico_c * "
                    f"{rows * row_bytes}), {rows * row_bytes});")  # fmt: skip
        body.append("    }")
        body.append("}")
    body.append(f'MICO_DUMP("{stage[-1].name}", {ctx.buffer(out)}, {storage_bytes(out)});')
    return body


def check_patch_mode(mode: str) -> None:
    """Refuse a patch mode that is not one of :data:`PATCH_MODES`."""
    from mico.errors import CompileError

    if mode not in PATCH_MODES:
        raise CompileError(f"unknown patch mode '{mode}'; use one of {', '.join(PATCH_MODES)}")


__all__ = [
    "PATCH_MODES",
    "PatchPlan",
    "band_name",
    "band_ranges",
    "check_patch_mode",
    "choose_patches",
    "emit_stage",
    "load_fa",
    "model_macs",
    "no_patch_summary",
    "patched_buffers",
    "stage_ends",
]
