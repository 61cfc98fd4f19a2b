"""``emit`` rules of the ``mico.*`` ops: one C statement (and its constant data) per node."""

from __future__ import annotations

import numpy as np

from mico.codegen.context import EmitContext
from mico.ir.graph import Node, Value
from mico.ir.ops import mico_ops
from mico.ir.ops.registry import OpRegistry
from mico.quant.arithmetic import QFormat, inv_scale_f32
from mico.quant.packing import pack


def _fields(values: dict[str, object]) -> str:
    return ", ".join(f".{k} = {v}" for k, v in values.items())


def _requant(node: Node) -> str:
    requant = node.attrs.get("requant")
    if requant is None:
        return "{ .to_codes = 0 }"
    fmt: QFormat = requant["qformat"]
    return (
        "{ "
        + _fields(
            {
                "to_codes": 1,
                "is_signed": int(fmt.signed),
                "binary": int(fmt.binary),
                "qmin": fmt.qmin,
                "qmax": fmt.qmax,
                "m": requant["m"],
                "shift": requant["shift"],
            }
        )
        + " }"
    )


def _weights(ctx: EmitContext, node: Node) -> tuple[str, str, int]:
    """Emit packed weights and int32 bias; return their symbols and the weight bit-width."""
    weight, bias = node.inputs[1], node.inputs[2]
    fmt = weight.qformat
    assert fmt is not None and weight.data is not None and bias.data is not None
    w_sym = ctx.const_bytes(
        f"{weight.name}",
        pack(weight.data, fmt),
        kind="weights",
        comment=f"{weight.type.shape} {fmt}, packed",
    )
    b_sym = ctx.const_int32(f"{bias.name}", np.asarray(bias.data))
    return w_sym, b_sym, fmt.bits


def _window(attrs: dict) -> dict[str, int]:
    """Stride, padding and dilation fields shared by the 2-D window kernels."""
    return {
        "stride_h": attrs["stride"][0],
        "stride_w": attrs["stride"][1],
        "pad_h": attrs["padding"][0],
        "pad_w": attrs["padding"][1],
        "dil_h": attrs["dilation"][0],
        "dil_w": attrs["dilation"][1],
    }


def _signed(value: Value) -> int:
    return int(value.qformat.signed) if value.qformat else 1


def emit_quantize(node: Node, ctx: EmitContext) -> list[str]:
    fmt: QFormat = node.attrs["qformat"]
    inv = float(inv_scale_f32(node.attrs["scale"])).hex() + "f"
    args = [
        ctx.buffer(node.inputs[0]),
        ctx.buffer(node.output),
        str(node.output.type.numel),
        inv,
        str(int(fmt.signed)),
        str(int(fmt.binary)),
        str(fmt.qmin),
        str(fmt.qmax),
    ]
    ctx.need("mico_quant.c")
    return [f"mico_quantize_f32({', '.join(args)});"]


def emit_qconv2d(node: Node, ctx: EmitContext) -> list[str]:
    x, out = node.inputs[0], node.output
    w_sym, b_sym, w_bits = _weights(ctx, node)
    _, in_c, in_h, in_w = x.type.shape
    _, out_c, out_h, out_w = out.type.shape
    k_h, k_w = node.inputs[1].type.shape[2:]
    a = node.attrs
    params = ctx.const_struct(
        "MicoConv2d",
        f"{node.name}_params",
        _fields(
            {
                "in_c": in_c,
                "in_h": in_h,
                "in_w": in_w,
                "out_c": out_c,
                "out_h": out_h,
                "out_w": out_w,
                "k_h": k_h,
                "k_w": k_w,
                **_window(a),
                "groups": a["groups"],
                "in_signed": _signed(x),
                "w_bits": w_bits,
                "weight": w_sym,
                "bias": b_sym,
                "relu": int(a["relu"]),
                "out": _requant(node),
            }
        ),
    )
    ctx.need("mico_conv2d.c")
    return [f"mico_qconv2d(&{params}, {ctx.buffer(x)}, {ctx.buffer(out)});"]


def emit_qlinear(node: Node, ctx: EmitContext) -> list[str]:
    x, out = node.inputs[0], node.output
    w_sym, b_sym, w_bits = _weights(ctx, node)
    out_features, in_features = node.inputs[1].type.shape
    params = ctx.const_struct(
        "MicoLinear",
        f"{node.name}_params",
        _fields(
            {
                "in_features": in_features,
                "out_features": out_features,
                "in_signed": _signed(x),
                "w_bits": w_bits,
                "weight": w_sym,
                "bias": b_sym,
                "relu": int(node.attrs["relu"]),
                "out": _requant(node),
            }
        ),
    )
    ctx.need("mico_linear.c")
    return [f"mico_qlinear(&{params}, {ctx.buffer(x)}, {ctx.buffer(out)});"]


def emit_maxpool2d(node: Node, ctx: EmitContext) -> list[str]:
    x, out = node.inputs[0], node.output
    _, channels, in_h, in_w = x.type.shape
    _, _, out_h, out_w = out.type.shape
    a = node.attrs
    elem = {None: "MICO_I32", True: "MICO_I8", False: "MICO_U8"}[
        x.qformat.signed if x.qformat else None
    ]
    params = ctx.const_struct(
        "MicoMaxPool2d",
        f"{node.name}_params",
        _fields(
            {
                "channels": channels,
                "in_h": in_h,
                "in_w": in_w,
                "out_h": out_h,
                "out_w": out_w,
                "k_h": a["kernel_size"][0],
                "k_w": a["kernel_size"][1],
                **_window(a),
                "elem": elem,
            }
        ),
    )
    ctx.need("mico_pool.c")
    return [f"mico_maxpool2d(&{params}, {ctx.buffer(x)}, {ctx.buffer(out)});"]


def emit_reshape(node: Node, ctx: EmitContext) -> list[str]:
    return []  # a view: the output shares its input's arena bytes


for _op, _fn in (
    (mico_ops.QUANTIZE, emit_quantize),
    (mico_ops.QCONV2D, emit_qconv2d),
    (mico_ops.QLINEAR, emit_qlinear),
    (mico_ops.MAXPOOL2D, emit_maxpool2d),
    (mico_ops.RESHAPE, emit_reshape),
):
    OpRegistry.attach(_op, "emit", _fn)
