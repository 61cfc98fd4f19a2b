"""Quantized layers as single ``mico::*`` torch operators, for graph export.

When a model is exported (``torch.export``) while its Bit* layers are quantized, each layer
becomes one call — ``mico.bit_linear``, ``mico.bit_conv1d`` or ``mico.bit_conv2d`` — holding
its float weight (a state-dict reference), bit-widths and scales as attributes, instead of a
spray of ATen rounding and clamping ops. The operators compute exactly what the layer computes
in eager mode (the same functions of :mod:`mico.quant.arithmetic`), have fake (meta)
implementations for tracing, and are registered as ``execute`` rules of the op registry.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from mico.errors import InputError
from mico.ir.ops.registry import OpRegistry
from mico.quant.arithmetic import (
    QFormat,
    dynamic_asymmetric,
    dynamic_scale,
    is_ternary,
    quantize,
    quantize_shifted,
)
from mico.quant.integer import Accumulate, accumulate, rescale


def input_codes(
    x: torch.Tensor,
    a_bits: float,
    signed: bool,
    scale: float,
    dynamic: bool,
    zero: int = 0,
    asymmetric: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Input codes (float32, integral) and their float32 scale (per sample when dynamic).

    ``zero``: the static zero point (shifted codes ``[-zero, 2**b - 1 - zero]``);
    ``asymmetric`` with ``dynamic``: a zero point computed per sample (:func:`dynamic_asymmetric`).
    """
    fmt = QFormat.for_bits(a_bits, signed, 0 if dynamic else zero)
    if dynamic and asymmetric and fmt.bits >= 2 and not is_ternary(a_bits):
        s, z = dynamic_asymmetric(x, fmt.bits)
        _check_overflow(s)
        return quantize_shifted(x.detach(), s, z, fmt.bits), s
    if dynamic:
        s = dynamic_scale(x, fmt, absmean=fmt.binary or is_ternary(a_bits))
        _check_overflow(s)
    else:
        s = torch.tensor(scale, dtype=torch.float32)
    return quantize(x.detach(), s, fmt), s


def _check_overflow(s: torch.Tensor) -> None:
    """A run-time scale of inf: the sample overflowed float32 (the C program stops too)."""
    if bool(torch.isinf(s).any()):
        raise InputError(
            "an activation overflowed float32 before a dynamic-mode quantized layer (its "
            "run-time scale is inf): the sample is too large for this model, and the C "
            "program stops on it too (<NAME>_ERR_OVERFLOW); scale the inputs down"
        )


def weight_codes(
    weight: torch.Tensor, w_bits: float, scales: list[float]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Weight codes (float32, integral) and their float32 scales (one, or one per channel)."""
    fmt = QFormat.for_bits(w_bits, True)
    s = np.asarray(scales, dtype=np.float64)
    s = s.reshape(()) if s.size == 1 else s.reshape(-1, *([1] * (weight.dim() - 1)))
    return quantize(weight.detach(), s, fmt), torch.from_numpy(s.astype(np.float32).reshape(-1))


def integer_call(
    op: Accumulate,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    w_bits: float,
    a_bits: float,
    weight_scale: list[float],
    act_scale: float,
    act_signed: bool,
    dynamic: bool,
    channel_dim: int,
    act_zero: int = 0,
    act_asymmetric: bool = False,
) -> torch.Tensor:
    """A quantized layer's output as the C computes it (see :mod:`mico.quant.integer`)."""
    wc, sw = weight_codes(weight, w_bits, weight_scale)
    return integer_output(op, x, wc, sw, bias, a_bits, act_signed, act_scale, dynamic, channel_dim,
                          act_zero, act_asymmetric)  # fmt: skip


def integer_output(
    op: Accumulate,
    x: torch.Tensor,
    w_codes: torch.Tensor,
    w_scale: torch.Tensor,
    bias: torch.Tensor | None,
    a_bits: float,
    act_signed: bool,
    act_scale: float,
    dynamic: bool,
    channel_dim: int,
    act_zero: int = 0,
    act_asymmetric: bool = False,
) -> torch.Tensor:
    """:func:`integer_call` with the weight codes and scales already computed."""
    xc, sa = input_codes(x, a_bits, act_signed, act_scale, dynamic, act_zero, act_asymmetric)
    return rescale(accumulate(op, xc, w_codes), sa, w_scale, bias, channel_dim)


@torch.library.custom_op("mico::bit_linear", mutates_args=())
def bit_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    w_bits: float,
    a_bits: float,
    weight_scale: list[float],
    act_scale: float,
    act_signed: bool,
    dynamic: bool,
    act_zero: int = 0,
    act_asymmetric: bool = False,
) -> torch.Tensor:
    """``linear`` of quantized inputs and weights (see :class:`mico.quant.BitLinear`)."""
    return integer_call(F.linear, x, weight, bias, w_bits, a_bits, weight_scale, act_scale,
                        act_signed, dynamic, -1, act_zero, act_asymmetric)  # fmt: skip


@bit_linear.register_fake
def _(x, weight, bias, w_bits, a_bits, weight_scale, act_scale, act_signed, dynamic, *rest):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def _conv(
    dims: int,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
    w_bits: float,
    a_bits: float,
    weight_scale: list[float],
    act_scale: float,
    act_signed: bool,
    dynamic: bool,
    act_zero: int = 0,
    act_asymmetric: bool = False,
) -> torch.Tensor:
    conv = F.conv1d if dims == 1 else F.conv2d

    def op(xc: torch.Tensor, wc: torch.Tensor) -> torch.Tensor:
        return conv(xc, wc, None, stride, padding, dilation, groups)

    return integer_call(op, x, weight, bias, w_bits, a_bits, weight_scale, act_scale,
                        act_signed, dynamic, 1, act_zero, act_asymmetric)  # fmt: skip


@torch.library.custom_op("mico::bit_conv1d", mutates_args=())
def bit_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
    w_bits: float,
    a_bits: float,
    weight_scale: list[float],
    act_scale: float,
    act_signed: bool,
    dynamic: bool,
    act_zero: int = 0,
    act_asymmetric: bool = False,
) -> torch.Tensor:
    """``conv1d`` of quantized inputs and weights (see :class:`mico.quant.BitConv1d`)."""
    return _conv(1, x, weight, bias, stride, padding, dilation, groups, w_bits, a_bits,
                 weight_scale, act_scale, act_signed, dynamic, act_zero,
                 act_asymmetric)  # fmt: skip


@torch.library.custom_op("mico::bit_conv2d", mutates_args=())
def bit_conv2d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
    w_bits: float,
    a_bits: float,
    weight_scale: list[float],
    act_scale: float,
    act_signed: bool,
    dynamic: bool,
    act_zero: int = 0,
    act_asymmetric: bool = False,
) -> torch.Tensor:
    """``conv2d`` of quantized inputs and weights (see :class:`mico.quant.BitConv2d`)."""
    return _conv(2, x, weight, bias, stride, padding, dilation, groups, w_bits, a_bits,
                 weight_scale, act_scale, act_signed, dynamic, act_zero,
                 act_asymmetric)  # fmt: skip


def _conv_fake(dims: int):
    def fake(x, weight, bias, stride, padding, dilation, groups, *rest):
        out = []
        for i in range(dims):
            size = x.shape[2 + i] + 2 * padding[i] - dilation[i] * (weight.shape[2 + i] - 1) - 1
            out.append(size // stride[i] + 1)
        return x.new_empty((x.shape[0], weight.shape[0], *out))

    return fake


bit_conv1d.register_fake(_conv_fake(1))
bit_conv2d.register_fake(_conv_fake(2))

_OPS = {"mico.bit_linear": bit_linear, "mico.bit_conv1d": bit_conv1d, "mico.bit_conv2d": bit_conv2d}
_ARGS = {
    "mico.bit_linear": ("w_bits", "a_bits", "weight_scale", "act_scale", "act_signed", "dynamic",
                        "act_zero", "act_asymmetric"),
    "mico.bit_conv1d": ("stride", "padding", "dilation", "groups", "w_bits", "a_bits",
                        "weight_scale", "act_scale", "act_signed", "dynamic", "act_zero",
                        "act_asymmetric"),
}  # fmt: skip
_ARGS["mico.bit_conv2d"] = _ARGS["mico.bit_conv1d"]


def _executor(name: str):
    op = _OPS[name]

    def execute(inputs: list[torch.Tensor | None], attrs: dict) -> list[torch.Tensor]:
        x, weight = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 else attrs.get("bias")
        defaults = {"act_zero": 0, "act_asymmetric": False}  # graphs from before zero points
        return [op(x, weight, bias, *(attrs.get(a, defaults.get(a)) for a in _ARGS[name]))]

    execute.__name__ = f"execute_{name.replace('.', '_')}"
    return execute


def _quant_attrs(builder):
    return (
        builder.add_attribute("w_bits", float, description="weight bit-width (1.58: ternary)")
        .add_attribute("a_bits", float, description="input bit-width (1.58: ternary)")
        .add_attribute("weight_scale", list[float], description="one scale, or one per channel")
        .add_attribute("act_scale", float, 1.0, "static input scale")
        .add_attribute("act_signed", bool, True, "inputs take negative values")
        .add_attribute("dynamic", bool, False, "input scales computed per sample at run time")
        .add_attribute("act_zero", int, 0, "static zero point of asymmetric input codes")
        .add_attribute("act_asymmetric", bool, False, "dynamic: a zero point per sample")
    )


def _check_operands(op: str, args: list) -> None:
    from mico.ir.ops.tensor_ops import fail, need_float

    x = args[0].type
    for what, a in zip(("input", "weight", "bias"), args, strict=False):
        need_float(op, a.type, what)
        if a.type.dtype != x.dtype:
            raise fail(op, f"the input is {x.dtype} but the {what} is {a.type.dtype}")


def _deduce_linear(args: list, attrs: dict):
    from mico.ir.ops.tensor_ops import fail
    from mico.ir.types import TensorType

    op = "mico.bit_linear"
    _check_operands(op, args)
    x, w = args[0].type, args[1].type
    if w.rank != 2 or x.rank < 1:
        raise fail(op, f"needs input [..., in] and weight [out, in], got {x} and {w}")
    k, (out_f, in_f) = x.shape[-1], w.shape
    if isinstance(k, int) and isinstance(in_f, int) and k != in_f:
        raise fail(op, f"the input has {k} features but the weight expects {in_f}")
    return TensorType(x.dtype, [*x.shape[:-1], out_f])


def _deduce_conv(n: int):
    def deduce(args: list, attrs: dict):
        from mico.ir.ops.tensor_ops import conv_shape
        from mico.ir.types import TensorType

        op = f"mico.bit_conv{n}d"
        _check_operands(op, args)
        x, w = args[0].type, args[1].type
        bias = args[2].type if len(args) > 2 else None
        shape = conv_shape(
            op, x, w, bias, n, attrs["stride"], attrs["padding"], attrs["dilation"], attrs["groups"]
        )
        return TensorType(x.dtype, shape)

    return deduce


def _register() -> None:

    for name in _OPS:
        if OpRegistry.rule(name, "infer") is None:
            builder = (
                OpRegistry.register(name)
                .set_op_category("MicoOp")
                .set_description(
                    f"quantized {name.split('_', 1)[1]} layer as one op: fake-quantized input "
                    "and weights, float output (exported from a Bit* layer)"
                )
                .add_argument("input", "Activation (TensorType)")
                .add_argument("weight", "Float weight, quantized by the op (TensorType)")
                .add_argument("bias", "Bias [out] (TensorType)", optional=True)
            )
            if name == "mico.bit_linear":
                _quant_attrs(builder).f_deduce_type(_deduce_linear)
            else:
                n = 1 if name.endswith("1d") else 2
                builder = (
                    builder.add_attribute("stride", list[int], description="step of the window")
                    .add_attribute("padding", list[int], description="zero padding per side")
                    .add_attribute("dilation", list[int], description="spacing of kernel taps")
                    .add_attribute("groups", int, 1, "channel groups")
                )
                _quant_attrs(builder).f_deduce_type(_deduce_conv(n))
        if OpRegistry.rule(name, "execute") is None:
            OpRegistry.attach(name, "execute", _executor(name))


_register()
