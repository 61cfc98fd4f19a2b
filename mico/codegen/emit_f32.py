"""``emit`` rules of the dynamic mode: ATen ops and ``mico.bit_*`` layers as float32 C kernels.

Each rule turns one node of an extracted graph (see :mod:`mico.codegen.dynamic`) into calls of
``mico_f32.h``. They hang off the ops' entries in the one op registry, next to their ``infer``
and ``execute`` rules. Arguments are read by their schema names, so a rule never depends on
how torch happened to pass them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from mico.codegen.context import EmitContext, c_float
from mico.errors import CompileError, UnsupportedOpError
from mico.ir.analyzer import TensorListRef, resolve_torch_op
from mico.ir.graph import Node, Value
from mico.ir.ops.registry import OpRegistry
from mico.quant.arithmetic import QFormat, is_ternary
from mico.quant.packing import pack

HEADER = "mico_f32.h"
EmitRule = Callable[[Node, EmitContext], list[str]]


# --------------------------------------------------------------------------- arguments
def named_args(node: Node) -> dict[str, Any]:
    """Schema argument name -> input :class:`Value` (or list of them) or attribute value."""
    op = resolve_torch_op(node.op)
    if op is None:
        raise UnsupportedOpError(f"'{node.op}' at '{node.name}' is not a torch operator")
    args: dict[str, Any] = {}
    cursor = 0
    for arg in op._schema.arguments:
        kind = str(arg.type)
        attr = node.attrs.get(arg.name, _MISSING)
        if isinstance(attr, TensorListRef):
            args[arg.name] = [None if p is None else node.inputs[p] for p in attr.positions]
            used = [p + 1 for p in attr.positions if p is not None]
            cursor = max([cursor, *used])
        elif "Tensor" in kind and "[]" not in kind and attr is _MISSING:
            args[arg.name] = node.inputs[cursor] if cursor < len(node.inputs) else None
            cursor += 1
        elif attr is not _MISSING:
            args[arg.name] = attr
        elif arg.has_default_value():
            args[arg.name] = arg.default_value
        else:
            args[arg.name] = None
    return args


_MISSING = object()


def _shape(value: Value) -> tuple[int, ...]:
    return tuple(int(d) for d in value.type.shape)


def _strides(shape: Sequence[int]) -> list[int]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


def _fields(values: dict[str, object]) -> str:
    return ", ".join(f".{k} = {v}" for k, v in values.items())


def _dim(dim: int, rank: int) -> int:
    return dim + rank if dim < 0 else dim


def _pair(value: Any, n: int = 2) -> list[int]:
    if isinstance(value, int):
        return [value] * n
    items = [int(v) for v in value]
    return items * n if len(items) == 1 else items


def _call(ctx: EmitContext, fn: str, *args: object) -> list[str]:
    ctx.need("mico_f32_ops.c")
    return [f"{fn}({', '.join(str(a) for a in args)});"]


# --------------------------------------------------------------------------- elementwise
UNARY = {
    "aten.relu.default": ("MICO_UNARY_RELU", None),
    "aten.sigmoid.default": ("MICO_UNARY_SIGMOID", None),
    "aten.tanh.default": ("MICO_UNARY_TANH", None),
    "aten.silu.default": ("MICO_UNARY_SILU", None),
    "aten.hardswish.default": ("MICO_UNARY_HARDSWISH", None),
    "aten.hardsigmoid.default": ("MICO_UNARY_HARDSIGMOID", None),
    "aten.exp.default": ("MICO_UNARY_EXP", None),
    "aten.neg.default": ("MICO_UNARY_NEG", None),
    "aten.abs.default": ("MICO_UNARY_ABS", None),
    "aten.sqrt.default": ("MICO_UNARY_SQRT", None),
    "aten.rsqrt.default": ("MICO_UNARY_RSQRT", None),
    "aten.gelu.default": ("MICO_UNARY_GELU", None),  # approximate="tanh": MICO_UNARY_GELU_TANH
    "aten.hardtanh.default": ("MICO_UNARY_CLAMP", ("min_val", "max_val")),
    "aten.relu6.default": ("MICO_UNARY_CLAMP", (0.0, 6.0)),
    "aten.elu.default": ("MICO_UNARY_ELU", ("alpha",)),
    "aten.leaky_relu.default": ("MICO_UNARY_LEAKY_RELU", ("negative_slope",)),
    "aten.pow.Tensor_Scalar": ("MICO_UNARY_POW", ("exponent",)),
    "aten.clamp.default": ("MICO_UNARY_CLAMP", ("min", "max")),
    "aten.clamp_min.default": ("MICO_UNARY_CLAMP", ("min", None)),
}

#: an absent clamp bound: the largest float32 (so the bound never acts)
_NO_BOUND = 3.4028234663852886e38


def emit_unary(node: Node, ctx: EmitContext) -> list[str]:
    code, params = UNARY[node.op]
    args = named_args(node)
    p = []
    for i, k in enumerate(params or ()):
        if isinstance(k, str) and args.get(k) is None:  # clamp without this bound
            p.append(-_NO_BOUND if i == 0 else _NO_BOUND)
        elif isinstance(k, str):
            p.append(float(args[k]))
        elif k is None:
            p.append(_NO_BOUND)
        else:
            p.append(k)
    if node.op == "aten.elu.default" and (args["scale"] != 1 or args["input_scale"] != 1):
        raise UnsupportedOpError(f"elu at '{node.name}' with scale/input_scale is not supported")
    if args.get("approximate") == "tanh":
        code = "MICO_UNARY_GELU_TANH"
    p = [*p, 0.0, 0.0][:2]
    x = node.inputs[0]
    return _call(
        ctx,
        "mico_f32_unary",
        code,
        ctx.buffer(x),
        ctx.buffer(node.output),
        x.type.numel,
        c_float(p[0]),
        c_float(p[1]),
    )


BINARY = {
    "aten.add.Tensor": "MICO_BINARY_ADD",
    "aten.sub.Tensor": "MICO_BINARY_SUB",
    "aten.mul.Tensor": "MICO_BINARY_MUL",
    "aten.div.Tensor": "MICO_BINARY_DIV",
    "aten.maximum.default": "MICO_BINARY_MAX",
    "aten.minimum.default": "MICO_BINARY_MIN",
}


def _broadcast_strides(value: Value, out_shape: tuple[int, ...]) -> list[int]:
    shape = _shape(value)
    pad = len(out_shape) - len(shape)
    full = [1] * pad + list(shape)
    strides = [0] * pad + _strides(shape)
    return [0 if d == 1 and o != 1 else s for d, s, o in zip(full, strides, out_shape, strict=True)]


def emit_binary(node: Node, ctx: EmitContext) -> list[str]:
    args = named_args(node)
    alpha = args.get("alpha", 1)
    if alpha not in (None, 1):
        raise UnsupportedOpError(f"{node.op} at '{node.name}' with alpha={alpha} is unsupported")
    x, y, out = node.inputs[0], ctx.buffer(node.output), node.output
    other = args.get("other")
    if not isinstance(other, Value):  # a Python number: an affine map
        c = float(other)
        if node.op == "aten.add.Tensor":
            mul, add = 1.0, c
        elif node.op == "aten.sub.Tensor":
            mul, add = 1.0, -c
        elif node.op == "aten.mul.Tensor":
            mul, add = c, 0.0
        elif node.op == "aten.div.Tensor":
            return _call(ctx, "mico_f32_unary", "MICO_UNARY_AFFINE", ctx.buffer(x), y,
                         x.type.numel, c_float(1.0 / c), "0.0f")  # fmt: skip
        else:
            raise UnsupportedOpError(f"{node.op} at '{node.name}' with a scalar is unsupported")
        return _call(ctx, "mico_f32_unary", "MICO_UNARY_AFFINE", ctx.buffer(x), y, x.type.numel,
                     c_float(mul), c_float(add))  # fmt: skip
    code = BINARY[node.op]
    out_shape = _shape(out)
    if _shape(x) == out_shape and _shape(other) == out_shape:
        return _call(ctx, "mico_f32_binary", code, ctx.buffer(x), ctx.buffer(other), y,
                     out.type.numel)  # fmt: skip
    a_s = ctx.const_i32_array(f"{node.name}_a_strides", _broadcast_strides(x, out_shape))
    b_s = ctx.const_i32_array(f"{node.name}_b_strides", _broadcast_strides(other, out_shape))
    shape = ctx.const_i32_array(f"{node.name}_shape", out_shape)
    if len(out_shape) > 6:
        raise UnsupportedOpError(f"{node.op} at '{node.name}' has more than 6 dimensions")
    return _call(ctx, "mico_f32_binary_bcast", code, ctx.buffer(x), a_s, ctx.buffer(other), b_s,
                 y, shape, len(out_shape))  # fmt: skip


def emit_batch_norm(node: Node, ctx: EmitContext) -> list[str]:
    args = named_args(node)
    if args.get("training"):
        raise CompileError(f"batch_norm at '{node.name}' runs in training mode; call .eval()")
    x = node.inputs[0]
    channels = _shape(x)[1]

    def const(name: str, default: float) -> np.ndarray:
        v = args.get(name)
        return (
            ctx.data(v).astype(np.float64) if isinstance(v, Value) else np.full(channels, default)
        )

    mean, var = const("running_mean", 0.0), const("running_var", 1.0)
    gamma, beta = const("weight", 1.0), const("bias", 0.0)
    mul = gamma / np.sqrt(var + float(args["eps"]))
    add = beta - mean * mul
    mul_s = ctx.const_f32(f"{node.name}_mul", mul)
    add_s = ctx.const_f32(f"{node.name}_add", add)
    inner = x.type.numel // channels
    return _call(ctx, "mico_f32_channel_affine", ctx.buffer(x), ctx.buffer(node.output), channels,
                 inner, mul_s, add_s)  # fmt: skip


# --------------------------------------------------------------------------- data movement
def _copy(
    ctx: EmitContext,
    src: str,
    src_offset: int,
    src_strides: Sequence[int],
    dst: str,
    dst_offset: int,
    dst_strides: Sequence[int],
    shape: Sequence[int],
    name: str,
) -> list[str]:
    if len(shape) > 6:
        raise UnsupportedOpError(f"'{name}' moves a tensor of more than 6 dimensions")
    ss = ctx.const_i32_array(f"{name}_src_strides", src_strides)
    ds = ctx.const_i32_array(f"{name}_dst_strides", dst_strides)
    sh = ctx.const_i32_array(f"{name}_shape", shape)
    return _call(ctx, "mico_f32_copy_strided", src, src_offset, ss, dst, dst_offset, ds, sh,
                 len(shape))  # fmt: skip


def emit_cat(node: Node, ctx: EmitContext) -> list[str]:
    args = named_args(node)
    out = node.output
    out_shape = _shape(out)
    dim = _dim(int(args["dim"]), len(out_shape))
    dst_strides = _strides(out_shape)
    lines: list[str] = []
    offset = 0
    for i, x in enumerate(v for v in args["tensors"] if v is not None):
        shape = _shape(x)
        if x.type.numel == 0:
            continue
        start = offset * dst_strides[dim]
        lines += _copy(ctx, ctx.buffer(x), 0, _strides(shape), ctx.buffer(out), start,
                       dst_strides, shape, f"{node.name}_{i}")  # fmt: skip
        offset += shape[dim]
    return lines


def emit_stack(node: Node, ctx: EmitContext) -> list[str]:
    """``torch.stack``: each input fills one index of the new dimension of the output."""
    args = named_args(node)
    out = node.output
    out_shape = _shape(out)
    dim = _dim(int(args["dim"]), len(out_shape))
    out_strides = _strides(out_shape)
    dst_strides = out_strides[:dim] + out_strides[dim + 1 :]
    lines: list[str] = []
    for i, x in enumerate(v for v in args["tensors"] if v is not None):
        if x.type.numel == 0:
            continue
        shape = _shape(x)
        lines += _copy(ctx, ctx.buffer(x), 0, _strides(shape), ctx.buffer(out),
                       i * out_strides[dim], dst_strides, shape, f"{node.name}_{i}")  # fmt: skip
    return lines


def emit_pad(node: Node, ctx: EmitContext) -> list[str]:
    """``F.pad`` in any mode as a gather through a compile-time index table."""
    from mico.codegen.padding import pad_index

    args = named_args(node)
    x, out = node.inputs[0], node.output
    where = f"pad at '{node.name}'"
    index = pad_index(_shape(x)[1:], args["pad"], args.get("mode") or "constant", where)
    table = ctx.const_i32_array(f"{node.name}_index", index)
    fill = float(args.get("value") or 0.0)
    return _call(ctx, "mico_f32_gather", ctx.buffer(x), ctx.buffer(out), table, len(index),
                 c_float(fill))  # fmt: skip


def emit_embedding(node: Node, ctx: EmitContext) -> list[str]:
    """Row lookup in a float table; token ids arrive as exact float32 integers, checked
    against the table's rows before the model runs (mico_first_bad_token)."""
    args = named_args(node)
    table, ids = args["weight"], args["indices"]
    rows, dim = _shape(table)
    if ids.producer is None and id(ids.storage()) in ctx.inputs:
        ctx.__dict__["token_vocab"] = min(rows, ctx.__dict__.get("token_vocab", rows))
    else:
        raise UnsupportedOpError(
            f"embedding at '{node.name}' looks up computed indices; the C backend takes token "
            "ids only from the model input"
        )
    return _call(ctx, "mico_f32_embedding", ctx.buffer(ids), ctx.buffer(table),
                 ctx.buffer(node.output), ids.type.numel, dim)  # fmt: skip


def emit_slice(node: Node, ctx: EmitContext) -> list[str]:
    args = named_args(node)
    x, out = node.inputs[0], node.output
    shape = _shape(x)
    dim = _dim(int(args["dim"]), len(shape))
    start = args.get("start") or 0
    step = int(args.get("step") or 1)
    start = int(start) + shape[dim] if int(start) < 0 else min(int(start), shape[dim])
    strides = _strides(shape)
    src_strides = list(strides)
    src_strides[dim] *= step
    return _copy(ctx, ctx.buffer(x), start * strides[dim], src_strides, ctx.buffer(out), 0,
                 _strides(_shape(out)), _shape(out), node.name)  # fmt: skip


def emit_select(node: Node, ctx: EmitContext) -> list[str]:
    args = named_args(node)
    x, out = node.inputs[0], node.output
    shape = _shape(x)
    dim = _dim(int(args["dim"]), len(shape))
    index = int(args["index"])
    index = index + shape[dim] if index < 0 else index
    strides = _strides(shape)
    src_strides = strides[:dim] + strides[dim + 1 :]
    out_shape = _shape(out)
    return _copy(ctx, ctx.buffer(x), index * strides[dim], src_strides, ctx.buffer(out), 0,
                 _strides(out_shape), out_shape, node.name)  # fmt: skip


def _permute(node: Node, ctx: EmitContext, perm: list[int]) -> list[str]:
    x, out = node.inputs[0], node.output
    strides = _strides(_shape(x))
    out_shape = _shape(out)
    return _copy(ctx, ctx.buffer(x), 0, [strides[p] for p in perm], ctx.buffer(out), 0,
                 _strides(out_shape), out_shape, node.name)  # fmt: skip


def emit_transpose(node: Node, ctx: EmitContext) -> list[str]:
    args = named_args(node)
    rank = len(_shape(node.inputs[0]))
    perm = list(range(rank))
    a, b = _dim(int(args["dim0"]), rank), _dim(int(args["dim1"]), rank)
    perm[a], perm[b] = perm[b], perm[a]
    return _permute(node, ctx, perm)


def emit_permute(node: Node, ctx: EmitContext) -> list[str]:
    rank = len(_shape(node.inputs[0]))
    return _permute(node, ctx, [_dim(int(d), rank) for d in named_args(node)["dims"]])


def emit_expand(node: Node, ctx: EmitContext) -> list[str]:
    x, out = node.inputs[0], node.output
    out_shape = _shape(out)
    return _copy(ctx, ctx.buffer(x), 0, _broadcast_strides(x, out_shape), ctx.buffer(out), 0,
                 _strides(out_shape), out_shape, node.name)  # fmt: skip


def emit_view(node: Node, ctx: EmitContext) -> list[str]:
    return []  # the output shares its input's bytes (mico.codegen.dynamic.VIEW_OPS)


# --------------------------------------------------------------------------- reductions
def _reduce_layout(node: Node, dims: Sequence[int]) -> tuple[int, int, int]:
    shape = _shape(node.inputs[0])
    rank = len(shape)
    axes = sorted({_dim(int(d), rank) for d in dims}) if dims else list(range(rank))
    if axes != list(range(axes[0], axes[-1] + 1)):
        raise UnsupportedOpError(
            f"{node.op} at '{node.name}' reduces non-adjacent dims {axes}; only a contiguous "
            "block of dims is supported"
        )
    outer = math.prod(shape[: axes[0]])
    reduce = math.prod(shape[axes[0] : axes[-1] + 1])
    inner = math.prod(shape[axes[-1] + 1 :])
    return outer, reduce, inner


REDUCE = {
    "aten.mean.dim": "MICO_REDUCE_MEAN",
    "aten.sum.dim_IntList": "MICO_REDUCE_SUM",
    "aten.amax.default": "MICO_REDUCE_MAX",
    "aten.amin.default": "MICO_REDUCE_MIN",
    "aten.mean.default": "MICO_REDUCE_MEAN",
    "aten.sum.default": "MICO_REDUCE_SUM",
}


def emit_reduce(node: Node, ctx: EmitContext) -> list[str]:
    args = named_args(node)
    if args.get("dtype") is not None:
        raise UnsupportedOpError(f"{node.op} at '{node.name}' with a dtype is unsupported")
    outer, reduce, inner = _reduce_layout(node, args.get("dim") or [])
    return _call(ctx, "mico_f32_reduce", REDUCE[node.op], ctx.buffer(node.inputs[0]),
                 ctx.buffer(node.output), outer, reduce, inner)  # fmt: skip


REDUCE_F64 = "mico.reduce_f64"
"""Sum/mean in float64 in index order, rounded once: the C and the reference agree exactly."""


def execute_reduce_f64(inputs: list, attrs: dict) -> list:
    x = inputs[0]
    dims = list(attrs.get("dim") or range(x.dim()))
    total = x.to(dtype=torch.float64).sum(dim=dims, keepdim=bool(attrs.get("keepdim")))
    if attrs["reduce"] == "mean":
        total = total / math.prod(x.shape[d] for d in dims)
    return [total.to(torch.float32)]


def emit_reduce_f64(node: Node, ctx: EmitContext) -> list[str]:
    outer, reduce, inner = _reduce_layout(node, node.attrs.get("dim") or [])
    kind = {"mean": "MICO_REDUCE_MEAN", "sum": "MICO_REDUCE_SUM"}[node.attrs["reduce"]]
    return _call(ctx, "mico_f32_reduce", kind, ctx.buffer(node.inputs[0]),
                 ctx.buffer(node.output), outer, reduce, inner)  # fmt: skip


def emit_softmax(node: Node, ctx: EmitContext) -> list[str]:
    args = named_args(node)
    shape = _shape(node.inputs[0])
    dim = _dim(int(args["dim"]), len(shape))
    outer, length, inner = math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1 :])
    log = int("log_softmax" in node.op)
    return _call(ctx, "mico_f32_softmax", ctx.buffer(node.inputs[0]), ctx.buffer(node.output),
                 outer, length, inner, log)  # fmt: skip


def emit_layer_norm(node: Node, ctx: EmitContext) -> list[str]:
    args = named_args(node)
    x = node.inputs[0]
    n = math.prod(int(d) for d in args["normalized_shape"])
    gamma = args.get("weight")
    beta = args.get("bias")
    g = ctx.const_f32(f"{node.name}_gamma", ctx.data(gamma)) if isinstance(gamma, Value) else "0"
    b = ctx.const_f32(f"{node.name}_beta", ctx.data(beta)) if isinstance(beta, Value) else "0"
    return _call(ctx, "mico_f32_layer_norm", ctx.buffer(x), ctx.buffer(node.output),
                 x.type.numel // n, n, g, b, c_float(float(args["eps"])))  # fmt: skip


# --------------------------------------------------------------------------- pooling
def _pool_fields(node: Node, args: dict, dims: int) -> dict[str, object]:
    x, out = _shape(node.inputs[0]), _shape(node.output)
    kernel = _pair(args["kernel_size"], dims)
    stride = _pair(args.get("stride") or kernel, dims)
    padding = _pair(args.get("padding") or 0, dims)
    dilation = _pair(args.get("dilation") or 1, dims)
    if dims == 1:
        kernel, stride, dilation = ([1, v[0]] for v in (kernel, stride, dilation))
        padding = [0, padding[0]]
        in_hw, out_hw = (1, x[2]), (1, out[2])
    else:
        in_hw, out_hw = (x[2], x[3]), (out[2], out[3])
    return {
        "channels": x[1] * x[0],
        "in_h": in_hw[0], "in_w": in_hw[1], "out_h": out_hw[0], "out_w": out_hw[1],
        "k_h": kernel[0], "k_w": kernel[1], "stride_h": stride[0], "stride_w": stride[1],
        "pad_h": padding[0], "pad_w": padding[1], "dil_h": dilation[0], "dil_w": dilation[1],
        "count_include_pad": int(bool(args.get("count_include_pad", True))),
        "divisor": int(args.get("divisor_override") or 0),
    }  # fmt: skip


def _emit_pool(kind: str, dims: int) -> EmitRule:
    def emit(node: Node, ctx: EmitContext) -> list[str]:
        fields = _pool_fields(node, named_args(node), dims)
        params = ctx.const_struct("MicoPool2dF", f"{node.name}_params", _fields(fields))
        ctx.need("mico_f32_pool.c")
        return [f"mico_f32_{kind}(&{params}, {ctx.buffer(node.inputs[0])}, "
                f"{ctx.buffer(node.output)});"]  # fmt: skip

    return emit


def emit_adaptive_avg_pool(node: Node, ctx: EmitContext) -> list[str]:
    x, out = _shape(node.inputs[0]), _shape(node.output)
    if len(x) == 3:  # 1-D: [N, C, L]
        in_hw, out_hw = (1, x[2]), (1, out[2])
    else:
        in_hw, out_hw = (x[2], x[3]), (out[2], out[3])
    ctx.need("mico_f32_pool.c")
    return [
        f"mico_f32_adaptive_avgpool2d({x[0] * x[1]}, {in_hw[0]}, {in_hw[1]}, {out_hw[0]}, "
        f"{out_hw[1]}, {ctx.buffer(node.inputs[0])}, {ctx.buffer(node.output)});"
    ]


# --------------------------------------------------------------------------- float layers
def emit_linear(node: Node, ctx: EmitContext) -> list[str]:
    args = named_args(node)
    x, w, b = args["input"], args["weight"], args.get("bias")
    out_f, in_f = _shape(w)
    rows = x.type.numel // in_f
    w_sym = ctx.const_f32(f"{w.name}", ctx.data(w), kind="weights")
    b_sym = ctx.const_f32(f"{b.name}", ctx.data(b), kind="bias") if isinstance(b, Value) else "0"
    ctx.need("mico_f32_layers.c")
    return [
        f"mico_f32_linear({rows}, {in_f}, {out_f}, {w_sym}, {b_sym}, {ctx.buffer(x)}, "
        f"{ctx.buffer(node.output)});"
    ]


def _conv_geometry(node: Node, args: dict, dims: int, weight: Value) -> dict[str, object]:
    x, out, w = _shape(node.inputs[0]), _shape(node.output), _shape(weight)
    stride = _pair(args["stride"], dims)
    padding = args["padding"]
    if isinstance(padding, str):
        raise UnsupportedOpError(f"convolution at '{node.name}' uses padding='{padding}'")
    padding = _pair(padding, dims)
    dilation = _pair(args["dilation"], dims)
    if dims == 1:
        x, out, w = (x[0], x[1], 1, x[2]), (out[0], out[1], 1, out[2]), (w[0], w[1], 1, w[2])
        stride, padding, dilation = [1, stride[0]], [0, padding[0]], [1, dilation[0]]
    if x[0] != 1:
        raise CompileError(f"'{node.name}' runs on a batch of {x[0]}; compile with batch 1")
    return {
        "in_c": x[1], "in_h": x[2], "in_w": x[3], "out_c": out[1], "out_h": out[2],
        "out_w": out[3], "k_h": w[2], "k_w": w[3], "stride_h": stride[0], "stride_w": stride[1],
        "pad_h": padding[0], "pad_w": padding[1], "dil_h": dilation[0], "dil_w": dilation[1],
        "groups": int(args["groups"]),
    }  # fmt: skip


def _emit_float_conv(dims: int) -> EmitRule:
    def emit(node: Node, ctx: EmitContext) -> list[str]:
        args = named_args(node)
        w, b = args["weight"], args.get("bias")
        fields = _conv_geometry(node, args, dims, w)
        fields["weight"] = ctx.const_f32(f"{w.name}", ctx.data(w), kind="weights")
        fields["bias"] = (
            ctx.const_f32(f"{b.name}", ctx.data(b), kind="bias") if isinstance(b, Value) else "0"
        )
        params = ctx.const_struct("MicoConv2dF", f"{node.name}_params", _fields(fields))
        ctx.need("mico_f32_layers.c")
        return [f"mico_f32_conv2d(&{params}, {ctx.buffer(node.inputs[0])}, "
                f"{ctx.buffer(node.output)});"]  # fmt: skip

    return emit


def emit_matmul(node: Node, ctx: EmitContext) -> list[str]:
    a, b = node.inputs[0], node.inputs[1]
    sa, sb, so = _shape(a), _shape(b), _shape(node.output)
    if len(sa) < 2 or len(sb) < 2:
        raise UnsupportedOpError(f"matmul at '{node.name}' with 1-D operands is unsupported")
    m, k, n = sa[-2], sa[-1], sb[-1]
    batch = math.prod(so[:-2])
    a_batch = math.prod(sa[:-2])
    b_batch = math.prod(sb[:-2])
    if a_batch not in (1, batch) or b_batch not in (1, batch):
        raise UnsupportedOpError(f"matmul at '{node.name}' broadcasts batch dims partially")
    a_stride = m * k if a_batch == batch else 0
    b_stride = k * n if b_batch == batch else 0
    ctx.need("mico_f32_layers.c")
    return [
        f"mico_f32_matmul({ctx.buffer(a)}, {a_stride}, {ctx.buffer(b)}, {b_stride}, "
        f"{ctx.buffer(node.output)}, {batch}, {m}, {k}, {n});"
    ]


# --------------------------------------------------------------------------- quantized layers
def _dyn_quant(node: Node) -> str:
    a_bits = node.attrs["a_bits"]
    fmt = QFormat.for_bits(a_bits, bool(node.attrs["act_signed"]))
    if node.attrs.get("act_asymmetric") and not is_ternary(a_bits) and fmt.bits >= 2:
        # a zero point per call: unsigned fields code + zero over the full 2^b codes
        fields = {"bits": fmt.bits, "is_signed": 0, "absmean": 0, "qmin": 0,
                  "qmax": 2**fmt.bits - 1, "asymmetric": 1}  # fmt: skip
        return "{ " + _fields(fields) + " }"
    if node.attrs.get("act_zero"):
        raise CompileError(
            f"'{node.name}' has a static zero point ({node.attrs['act_zero']}) but is compiled "
            "in dynamic mode; compile it in static mode, or quantize with act_mode='dynamic'"
        )
    return (
        "{ "
        + _fields(
            {
                "bits": fmt.bits,
                "is_signed": int(fmt.signed),
                "absmean": int(fmt.binary or is_ternary(a_bits)),
                "qmin": fmt.qmin,
                "qmax": fmt.qmax,
            }
        )
        + " }"
    )


def _quant_weights(node: Node, ctx: EmitContext) -> dict[str, object]:
    import torch

    from mico.quant.export_ops import weight_codes

    weight = node.inputs[1]
    w_bits = node.attrs["w_bits"]
    scales = list(node.attrs["weight_scale"])
    codes, sw = weight_codes(torch.from_numpy(np.asarray(ctx.data(weight))), w_bits, scales)
    fmt = QFormat.for_bits(w_bits, True)
    packed = pack(codes.numpy().astype(np.int64), fmt)
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    return {
        "w_bits": fmt.bits,
        "w_per_channel": int(len(scales) > 1),
        "weight": ctx.const_bytes(
            f"{weight.name}", packed, kind="weights",
            comment=f"{list(_shape(weight))} {fmt} codes, packed",
        ),
        "w_scale": ctx.const_f32(f"{weight.name}_scale", sw.numpy()),
        "bias": ctx.const_f32(f"{bias.name}", ctx.data(bias), kind="bias") if bias else "0",
        "act": _dyn_quant(node),
    }  # fmt: skip


def _emit_bit_conv(dims: int) -> EmitRule:
    def emit(node: Node, ctx: EmitContext) -> list[str]:
        args = dict(node.attrs)
        fields = _conv_geometry(node, args, dims, node.inputs[1])
        fields.update(_quant_weights(node, ctx))
        params = ctx.const_struct("MicoBitConv2dF", f"{node.name}_params", _fields(fields))
        ctx.need("mico_bit_f32.c")
        return [f"mico_bit_conv2d_f32(&{params}, {ctx.buffer(node.inputs[0])}, "
                f"{ctx.buffer(node.output)}, {ctx.scratch(node)});"]  # fmt: skip

    return emit


def emit_bit_linear(node: Node, ctx: EmitContext) -> list[str]:
    x, w = node.inputs[0], node.inputs[1]
    out_f, in_f = _shape(w)
    if _shape(x)[0] != 1:
        raise CompileError(f"'{node.name}' runs on a batch of {_shape(x)[0]}; compile with batch 1")
    fields: dict[str, object] = {
        "rows": x.type.numel // in_f,
        "in_features": in_f,
        "out_features": out_f,
    }
    fields.update(_quant_weights(node, ctx))
    params = ctx.const_struct("MicoBitLinearF", f"{node.name}_params", _fields(fields))
    ctx.need("mico_bit_f32.c")
    return [f"mico_bit_linear_f32(&{params}, {ctx.buffer(x)}, {ctx.buffer(node.output)}, "
            f"{ctx.scratch(node)});"]  # fmt: skip


# --------------------------------------------------------------------------- registration
def _rules() -> dict[str, EmitRule]:
    from mico.codegen.dynamic import VIEW_OPS

    rules: dict[str, EmitRule] = {op: emit_unary for op in UNARY}
    rules.update({op: emit_binary for op in BINARY})
    rules.update({op: emit_view for op in VIEW_OPS})
    rules.update({op: emit_reduce for op in REDUCE})
    rules.update(
        {
            "aten.batch_norm.default": emit_batch_norm,
            "aten.cat.default": emit_cat,
            "aten.stack.default": emit_stack,
            "aten.embedding.default": emit_embedding,
            "aten.pad.default": emit_pad,
            "aten.slice.Tensor": emit_slice,
            "aten.select.int": emit_select,
            "aten.transpose.int": emit_transpose,
            "aten.permute.default": emit_permute,
            "aten.expand.default": emit_expand,
            "aten.softmax.int": emit_softmax,
            "aten._softmax.default": emit_softmax,
            "aten.log_softmax.int": emit_softmax,
            "aten._log_softmax.default": emit_softmax,
            "aten.layer_norm.default": emit_layer_norm,
            "aten.max_pool2d.default": _emit_pool("maxpool2d", 2),
            "aten.max_pool1d.default": _emit_pool("maxpool2d", 1),
            "aten.avg_pool2d.default": _emit_pool("avgpool2d", 2),
            "aten.avg_pool1d.default": _emit_pool("avgpool2d", 1),
            "aten.adaptive_avg_pool2d.default": emit_adaptive_avg_pool,
            "aten.adaptive_avg_pool1d.default": emit_adaptive_avg_pool,
            "aten.linear.default": emit_linear,
            "aten.conv2d.default": _emit_float_conv(2),
            "aten.conv1d.default": _emit_float_conv(1),
            "aten.matmul.default": emit_matmul,
            "aten.bmm.default": emit_matmul,
            "aten.mm.default": emit_matmul,
            "mico.bit_conv2d": _emit_bit_conv(2),
            "mico.bit_conv1d": _emit_bit_conv(1),
            "mico.bit_linear": emit_bit_linear,
        }
    )
    return rules


for _op, _fn in _rules().items():
    OpRegistry.attach(_op, "emit", _fn)
OpRegistry.define(REDUCE_F64, "sum or mean over dims, in float64 in index order (mico's C)")
OpRegistry.attach(REDUCE_F64, "emit", emit_reduce_f64)
OpRegistry.attach(REDUCE_F64, "execute", execute_reduce_f64)
