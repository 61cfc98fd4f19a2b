"""mico's op library: loads ``tensor.*`` and ``tile.*``, and declares the quantized ``mico.*`` ops.

The ``mico.*`` ops (``mico.quantize``, ``mico.qconv2d``, ``mico.qlinear``, ``mico.maxpool2d``,
``mico.reshape``) are defined with their ``execute`` rules in :mod:`mico.ir.ops.mico_ops` and
get their ``emit`` rules from :mod:`mico.codegen`; here they get their signature, typed
attributes and ``infer`` rule through the fluent registry. Their executors return integer
codes and accumulators as int64 tensors (see :mod:`mico.ir.ops.mico_ops`); the deduced
``dtype`` is the code format the values belong to (``int4``, ``uint8``, ``int32``…).
"""

from __future__ import annotations

from typing import Any

from mico.ir.dtypes import DataType
from mico.ir.ops import llama_ops, mico_ops, scalar_ops, tensor_ops, tile_ops  # noqa: F401  (registers)
from mico.ir.ops.registry import OpRegistry
from mico.ir.ops.tensor_ops import conv_shape, fail, need_float, need_int, pool_shape
from mico.ir.ops.tensor_ops import reshape_shape as _reshape_shape
from mico.ir.types import ShapedType, TensorType
from mico.quant.arithmetic import QFormat

MICO = "MicoOp"


def codes_dtype(fmt: QFormat) -> DataType:
    """The data type of codes in format ``fmt``: ``int<b>`` when signed, else ``uint<b>`` (the
    storage field type: asymmetric codes are stored as unsigned ``code + zero``)."""
    return DataType.int(fmt.bits) if fmt.signed else DataType.uint(fmt.bits)


def _deduce_quantize(args: list[Any], attrs: dict[str, Any]) -> ShapedType:
    x = args[0].type
    need_float(mico_ops.QUANTIZE, x)
    if not attrs["scale"] > 0:
        raise fail(mico_ops.QUANTIZE, f"attribute 'scale' must be > 0, got {attrs['scale']}")
    return TensorType(codes_dtype(attrs["qformat"]), list(x.shape))


(
    OpRegistry.register(mico_ops.QUANTIZE)
    .set_op_category(MICO)
    .set_description(
        "Float input -> integer codes: round(float32(x) * float32(1/scale)) half away from zero, "
        "clamped to the code range"
    )
    .add_argument("input", "Real-valued tensor (TensorType)")
    .add_attribute("scale", float, description="real value of one code step")
    .add_attribute("qformat", QFormat, description="code width, signedness and zero point")
    .f_deduce_type(_deduce_quantize)
)


def _accumulator_dtype(op: str, args: list[Any], attrs: dict[str, Any]) -> DataType:
    x, w, b = (a.type for a in args)
    need_int(op, x, "input (codes)")
    need_int(op, w, "weight (codes)")
    if b.dtype != DataType.INT32:
        raise fail(op, f"the bias must be int32, got {b}")
    requant = attrs["requant"]
    if requant is None:
        return DataType.INT32
    fmt = requant.get("qformat")
    if not isinstance(fmt, QFormat):
        raise fail(op, f"attribute 'requant' needs a 'qformat' (QFormat), got {fmt!r}")
    for key in ("m", "shift"):
        if key not in requant:
            raise fail(op, f"attribute 'requant' needs '{key}' (from quantize_multiplier)")
    return codes_dtype(fmt)


_REQUANT_DOC = "None: keep the int32 accumulator; else {qformat, scale, m, shift}"


def _deduce_qconv2d(args: list[Any], attrs: dict[str, Any]) -> ShapedType:
    op = mico_ops.QCONV2D
    dtype = _accumulator_dtype(op, args, attrs)
    x, w, b = (a.type for a in args)
    if x.rank != 4:
        raise fail(op, f"the input must be [N, C, H, W], got {x}")
    shape = conv_shape(
        op, x, w, b, 2, attrs["stride"], attrs["padding"], attrs["dilation"], attrs["groups"]
    )
    return TensorType(dtype, shape)


(
    OpRegistry.register(mico_ops.QCONV2D)
    .set_op_category(MICO)
    .set_description(
        "Integer 2-D convolution on codes: int32 accumulator and bias, fused ReLU, "
        "requantization to the next layer's codes"
    )
    .add_argument("input", "Input codes [N, C, H, W] (TensorType)")
    .add_argument("weight", "Weight codes [out, in/groups, kH, kW] (TensorType)")
    .add_argument("bias", "Bias [out], int32 at scale s_in*s_w (TensorType)")
    .add_attribute("stride", list[int], [1, 1], "step of the window")
    .add_attribute("padding", list[int], [0, 0], "zero padding per side")
    .add_attribute("dilation", list[int], [1, 1], "spacing of kernel taps")
    .add_attribute("groups", int, 1, "channel groups")
    .add_attribute("relu", bool, False, "fused ReLU on the accumulator")
    .add_attribute("requant", dict | None, None, _REQUANT_DOC)
    .add_attribute("layer", str, "", "name of the model layer it lowers")
    .f_deduce_type(_deduce_qconv2d)
)


def _deduce_qlinear(args: list[Any], attrs: dict[str, Any]) -> ShapedType:
    op = mico_ops.QLINEAR
    dtype = _accumulator_dtype(op, args, attrs)
    x, w, b = (a.type for a in args)
    if x.rank < 1 or w.rank != 2:
        raise fail(op, f"needs input [..., in] and weight [out, in], got {x} and {w}")
    out_f, in_f = w.shape
    k = x.shape[-1]
    if isinstance(k, int) and isinstance(in_f, int) and k != in_f:
        raise fail(op, f"the input has {k} features but the weight expects {in_f}")
    if b.rank != 1 or (
        isinstance(b.shape[0], int) and isinstance(out_f, int) and b.shape[0] != out_f
    ):
        raise fail(op, f"the bias must be [{out_f}], got {b}")
    return TensorType(dtype, [*x.shape[:-1], out_f])


(
    OpRegistry.register(mico_ops.QLINEAR)
    .set_op_category(MICO)
    .set_description(
        "Integer fully-connected layer on codes: int32 accumulator and bias, fused ReLU, "
        "requantization"
    )
    .add_argument("input", "Input codes [..., in] (TensorType)")
    .add_argument("weight", "Weight codes [out, in] (TensorType)")
    .add_argument("bias", "Bias [out], int32 (TensorType)")
    .add_attribute("relu", bool, False, "fused ReLU on the accumulator")
    .add_attribute("requant", dict | None, None, _REQUANT_DOC)
    .add_attribute("layer", str, "", "name of the model layer it lowers")
    .f_deduce_type(_deduce_qlinear)
)


def _deduce_maxpool2d(args: list[Any], attrs: dict[str, Any]) -> ShapedType:
    op = mico_ops.MAXPOOL2D
    x = args[0].type
    need_int(op, x, "input (codes)")
    return x.with_shape(
        pool_shape(
            op, x, attrs["kernel_size"], attrs["stride"], attrs["padding"], attrs["dilation"], False
        )
    )


(
    OpRegistry.register(mico_ops.MAXPOOL2D)
    .set_op_category(MICO)
    .set_description("2-D max pooling on integer codes (commutes with requantization)")
    .add_argument("input", "Input codes [N, C, H, W] (TensorType)")
    .add_attribute("kernel_size", list[int], description="window size")
    .add_attribute("stride", list[int], description="step of the window")
    .add_attribute("padding", list[int], [0, 0], "padding per side")
    .add_attribute("dilation", list[int], [1, 1], "spacing of window taps")
    .f_deduce_type(_deduce_maxpool2d)
)


def _deduce_mico_reshape(args: list[Any], attrs: dict[str, Any]) -> ShapedType:
    op = mico_ops.RESHAPE
    x = args[0].type
    target = list(attrs["shape"])
    if x.rank == 0 or not target:
        raise fail(op, f"needs a batched input and shape, got {x} and {target}")
    return x.with_shape(_reshape_shape(op, x, [x.shape[0], *target[1:]]))


(
    OpRegistry.register(mico_ops.RESHAPE)
    .set_op_category(MICO)
    .set_description("View with a new shape (the batch size is the input's); shares memory")
    .add_argument("input", "Input tensor (TensorType)")
    .add_attribute("shape", list[int], description="the new shape, batch first")
    .f_deduce_type(_deduce_mico_reshape)
)
