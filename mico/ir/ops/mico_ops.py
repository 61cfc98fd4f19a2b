"""The quantized ``mico.*`` operators and their reference semantics (``execute`` rules).

These are what the C kernels implement. Executors take and return torch tensors (batch first):
codes and accumulators as int64, reals as float32. Integer convolutions run in float64, which is
exact while every partial sum stays below 2**53 (int32 accumulators guarantee that).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from mico.ir.ops.registry import OpRegistry, register_executor
from mico.quant.arithmetic import QFormat, quantize, requantize

QUANTIZE = "mico.quantize"
QCONV2D = "mico.qconv2d"
QLINEAR = "mico.qlinear"
MAXPOOL2D = "mico.maxpool2d"
RESHAPE = "mico.reshape"

OpRegistry.define(
    QUANTIZE, "float32 input -> integer codes (float32 rounding, half away from zero)"
)
OpRegistry.define(QCONV2D, "integer 2-D convolution, int32 bias, fused ReLU, requantization")
OpRegistry.define(QLINEAR, "integer fully-connected layer, int32 bias, fused ReLU, requantization")
OpRegistry.define(MAXPOOL2D, "2-D max pooling on integer codes")
OpRegistry.define(RESHAPE, "view with a new shape; shares its input's memory")


def _finish(acc: torch.Tensor, attrs: dict[str, Any]) -> torch.Tensor:
    """Fused ReLU, then requantize to codes or keep the int32 accumulator."""
    acc = acc.round().to(torch.int64)
    if attrs["relu"]:
        acc = acc.clamp_min(0)
    requant = attrs.get("requant")
    if requant is None:
        return acc
    fmt: QFormat = requant["qformat"]
    out = requantize(acc.numpy(), requant["m"], requant["shift"], fmt)
    return torch.from_numpy(np.ascontiguousarray(out))


@register_executor(QUANTIZE)
def execute_quantize(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
    return [quantize(inputs[0].to(torch.float32), attrs["scale"], attrs["qformat"]).to(torch.int64)]


@register_executor(QCONV2D)
def execute_qconv2d(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
    x, w, b = (t.to(torch.float64) for t in inputs)
    acc = F.conv2d(
        x,
        w,
        b,
        stride=attrs["stride"],
        padding=attrs["padding"],
        dilation=attrs["dilation"],
        groups=attrs["groups"],
    )
    return [_finish(acc, attrs)]


@register_executor(QLINEAR)
def execute_qlinear(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
    x, w, b = (t.to(torch.float64) for t in inputs)
    return [_finish(F.linear(x, w, b), attrs)]


@register_executor(MAXPOOL2D)
def execute_maxpool2d(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
    out = F.max_pool2d(
        inputs[0].to(torch.float64),
        attrs["kernel_size"],
        attrs["stride"],
        attrs["padding"],
        attrs["dilation"],
    )
    return [out.to(torch.int64)]


@register_executor(RESHAPE)
def execute_reshape(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
    x = inputs[0]
    return [x.reshape(x.shape[0], *attrs["shape"][1:])]
