"""In-place execution for the static (integer-only) backend.

A kernel may write its output over its own input when nothing reads that input afterwards.
mico does it for the kernels whose writes trail their reads:

* elementwise ops -- ``mico.requant``, ``mico.qadd`` (over either input), ``mico.mean`` --
  write output ``i`` after reading input ``i`` (``mean``: input block ``i``);
* per-channel windowed ops -- depthwise ``mico.qconv2d``, ``mico.maxpool2d``,
  ``mico.qavgpool2d`` -- write channel by channel, row by row, and an output row only needs the
  input rows under its window.

Input and output may have different bit-widths and sizes, so the output starts ``d`` bits
before the input, with ``d`` the smallest displacement at which no write reaches an input bit
that a later step still reads (a row-by-row simulation of the kernel's order). A W8A8 residual
add then needs no second buffer, and a 3x3 depthwise convolution needs its input plus two
rows, instead of input plus output: the arena goes below the bound of separate buffers.

The pass sets :data:`INPLACE_ATTR` in ``Node.plan``; the planner ties the two buffers together.
"""

from __future__ import annotations

from collections.abc import Iterable

from mico.ir.graph import Graph, Node, Value
from mico.ir.ops import mico_ops

INPLACE_ATTR = "inplace_of"
"""Planning annotation (``Node.plan``) ``{"input": i, "displacement_bits": d}``: the node's
output is stored ``d`` bits before the storage of its input ``i``, which it overwrites."""

ELEMENTWISE = (mico_ops.REQUANT, mico_ops.ADD, mico_ops.MEAN)
WINDOWED = (mico_ops.QCONV2D, mico_ops.MAXPOOL2D, mico_ops.AVGPOOL2D)


def value_bits(value: Value) -> int:
    """Bits one element of ``value`` takes in the arena (packed codes, or 32 for int32)."""
    dtype = value.type.dtype
    return dtype.bits if dtype.is_sub_byte else 8 * dtype.container_bytes


def _elementwise_steps(node: Node, x: Value) -> Iterable[tuple[int, int]]:
    """(end bit of what step i writes, first input bit a later step reads) per step."""
    out = node.output
    ob, ib = value_bits(out), value_bits(x)
    steps = out.type.numel // out.type.shape[0]
    block = (x.type.numel // x.type.shape[0]) // max(1, steps)  # mean: inputs per output
    # linear in i: the worst step is the first or the last
    for i in {0, steps - 1}:
        yield (i + 1) * ob, (i + 1) * block * ib


def _windowed_steps(node: Node, x: Value) -> Iterable[tuple[int, int]] | None:
    """Per output row of a depthwise/pooling kernel (channel-major, rows in order): the end
    bit it writes and the first input bit it or a later row reads."""
    out = node.output
    _, channels, in_h, in_w = x.type.shape
    _, out_c, out_h, out_w = out.type.shape
    a = node.attrs
    if node.op == mico_ops.QCONV2D:
        if not (a["groups"] == channels == out_c):
            return None  # every output channel reads every input channel of its group
        k_h = node.inputs[1].type.shape[2]
    else:
        k_h = a["kernel_size"][0]
    stride, pad = a["stride"][0], a["padding"][0]
    dil = a.get("dilation", [1, 1])[0]
    ob, ib = value_bits(out), value_bits(x)
    rows: list[tuple[int, int]] = []
    first_needed = channels * in_h * in_w * ib  # past the end: nothing left to read
    for c in reversed(range(channels)):
        for oy in reversed(range(out_h)):
            taps = [oy * stride - pad + k * dil for k in range(k_h)]
            inside = [iy for iy in taps if 0 <= iy < in_h]
            if inside:
                first_needed = min(first_needed, (c * in_h + min(inside)) * in_w * ib)
            rows.append(((c * out_h + oy + 1) * out_w * ob, first_needed))
    return rows


def displacement_bits(node: Node, index: int) -> int | None:
    """Bits the output of ``node`` must start before its input ``index`` for the kernel to run
    in place, or None when the kernel cannot."""
    x = node.inputs[index]
    if node.op in ELEMENTWISE:
        steps = _elementwise_steps(node, x)
    elif node.op in WINDOWED and x.type.rank == 4:
        steps = _windowed_steps(node, x)
        if steps is None:
            return None
    else:
        return None
    return max(0, max((written - needed for written, needed in steps), default=0))


def mark_inplace(graph: Graph) -> int:
    """Mark every node of a lowered static graph that can overwrite an input that dies there.

    Returns how many nodes were marked.
    """
    inputs = {id(v.storage()) for v in graph.inputs}
    outputs = {id(v.storage()) for v in graph.outputs}
    last_read: dict[int, int] = {}
    for step, node in enumerate(graph.nodes):
        for v in node.inputs:
            last_read[id(v.storage())] = step
    marked = 0
    for step, node in enumerate(graph.nodes):
        best: tuple[int, int] | None = None
        for index, x in enumerate(node.inputs):
            base = x.storage()
            if (
                x.is_const
                or id(base) in inputs
                or id(base) in outputs
                or last_read.get(id(base)) != step
                or any(v.storage() is base for j, v in enumerate(node.inputs) if j != index)
            ):
                continue
            bits = displacement_bits(node, index)
            if bits is not None and (best is None or bits < best[1]):
                best = (index, bits)
        if best is not None:
            node.plan[INPLACE_ATTR] = {"input": best[0], "displacement_bits": best[1]}
            marked += 1
    return marked
