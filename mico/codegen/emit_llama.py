"""``emit`` rules of the static mode's LLaMa ops (:mod:`mico.ir.ops.llama_ops`): one call of a
``mico_llama.c`` kernel per node, its tables in flash."""

from __future__ import annotations

import numpy as np

from mico.codegen.context import EmitContext
from mico.codegen.emitters import _fmt, _out_struct
from mico.errors import UnsupportedOpError
from mico.ir.graph import Node
from mico.ir.ops import llama_ops
from mico.ir.ops.registry import OpRegistry
from mico.quant.packing import pack

KERNELS = "mico_llama.c"


def emit_qembedding(node: Node, ctx: EmitContext) -> list[str]:
    """Rows of a packed code table; the token ids (the program's input) are checked against
    the table's rows before the model runs (mico_first_bad_token)."""
    ids, table = node.inputs
    rows, dim = (int(d) for d in table.type.shape)
    if ids.producer is not None or id(ids.storage()) not in ctx.inputs:
        raise UnsupportedOpError(
            f"embedding at '{node.name}' looks up computed indices; the C backend takes token "
            "ids only from the model input"
        )
    ctx.__dict__["token_vocab"] = min(rows, ctx.__dict__.get("token_vocab", rows))
    fmt = table.qformat
    assert fmt is not None and table.data is not None
    symbol = ctx.const_bytes(f"{table.name}", pack(np.asarray(table.data), fmt), kind="weights",
                             comment=f"{table.type.shape} {fmt} embedding, packed")  # fmt: skip
    ctx.need(KERNELS)
    n_ids = ids.type.numel // ids.type.shape[0]
    return [
        f"mico_qembedding({ctx.buffer(ids)}, {symbol}, (MicoFmt){_fmt(table)}, "
        f"{ctx.buffer(node.output)}, (MicoFmt){_fmt(node.output)}, {n_ids}, {dim});"
    ]


def emit_qrmsnorm(node: Node, ctx: EmitContext) -> list[str]:
    x, out = node.inputs[0], node.output
    a = node.attrs
    g = ctx.const_int32(f"{node.name}_g", np.asarray(a["g"], dtype=np.int64), kind="params")
    n = int(x.type.shape[-1])
    rows = x.type.numel // x.type.shape[0] // n
    lo, hi = a["clamp"]
    ctx.need(KERNELS)
    return [
        f"mico_qrmsnorm({ctx.buffer(x)}, (MicoFmt){_fmt(x)}, {ctx.buffer(out)}, "
        f"(MicoFmt){_fmt(out)}, {rows}, {n}, {int(a['pre'])}, INT64_C({int(a['eps_q'])}), "
        f"INT64_C({int(a['k'])}), {g}, {int(a['shift'])}, {int(lo)}, {int(hi)});"
    ]


def emit_qrope(node: Node, ctx: EmitContext) -> list[str]:
    x, out = node.inputs[0], node.output
    a = node.attrs
    positions, half = int(a["positions"]), int(a["half"])
    # named by content: every rotation of the model shares one pair of tables
    tag = f"{positions}x{half}"
    cos = ctx.const_int32(f"rope_cos_q14_{tag}", np.asarray(a["cos"], np.int64), kind="params")
    sin = ctx.const_int32(f"rope_sin_q14_{tag}", np.asarray(a["sin"], np.int64), kind="params")
    o = _out_struct(ctx, node)
    heads = x.type.numel // x.type.shape[0] // (positions * 2 * half)
    ctx.need(KERNELS)
    return [
        f"mico_qrope({ctx.buffer(x)}, (MicoFmt){_fmt(x)}, {ctx.buffer(out)}, &{o}, {heads}, "
        f"{positions}, {half}, {cos}, {sin});"
    ]


def emit_qsoftmax_prefix(node: Node, ctx: EmitContext) -> list[str]:
    x, out = node.inputs[0], node.output
    table = np.asarray(node.attrs["exp_q15"], dtype=np.int64)
    symbol = ctx.const_int32(f"{node.name}_exp", table, kind="params")
    limits = np.asarray(node.attrs["limits"], dtype=np.int64)
    lim = ctx.const_int32(f"causal_limits_{len(limits)}", limits, kind="params")
    n = int(x.type.shape[-1])
    rows = x.type.numel // x.type.shape[0] // n
    ctx.need(KERNELS)
    return [
        f"mico_qsoftmax_prefix({ctx.buffer(x)}, (MicoFmt){_fmt(x)}, {ctx.buffer(out)}, "
        f"(MicoFmt){_fmt(out)}, {rows}, {n}, {symbol}, {len(table)}, "
        f"{int(node.attrs['qmax'])}, {lim}, {len(limits)});"
    ]


for _op, _fn in (
    (llama_ops.QEMBEDDING, emit_qembedding),
    (llama_ops.QRMSNORM, emit_qrmsnorm),
    (llama_ops.QROPE, emit_qrope),
    (llama_ops.QSOFTMAX_PREFIX, emit_qsoftmax_prefix),
):
    OpRegistry.attach(_op, "emit", _fn)
