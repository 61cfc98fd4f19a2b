"""Quantized layers: ``BitConv2d`` and ``BitLinear``.

Each layer quantizes its *input* activations to ``a_bits`` and its weights to ``w_bits`` with the
arithmetic of :mod:`mico.quant.arithmetic`. A layer is in one of three modes:

* ``float`` — plain FP32 (used while exporting the graph);
* ``calibrate`` — FP32, while observing the inputs to choose the activation scale;
* ``quant`` — fake-quantized inputs and weights (straight-through gradients, usable for QAT).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mico.errors import CalibrationError
from mico.quant.arithmetic import QFormat, check_bits, fake_quantize, quantize
from mico.quant.scales import ScaleMethod, choose_scale

Mode = Literal["float", "calibrate", "quant"]
_OBSERVE_PER_BATCH = 50_000


class BitLayer(nn.Module):
    """Shared quantization state of the Bit* layers (a mixin over Conv2d / Linear)."""

    w_bits: int
    a_bits: int

    def _init_quant(self, w_bits: int, a_bits: int, scale_method: ScaleMethod) -> None:
        self.w_bits = check_bits(w_bits, "weight bit-width")
        self.a_bits = check_bits(a_bits, "activation bit-width")
        self.scale_method: ScaleMethod = scale_method
        self.mode: Mode = "float"
        self.act_scale: float | None = None
        self.act_signed: bool | None = None
        self.weight_scale: float | None = None
        self._observed: list[torch.Tensor] = []
        self._observed_min = float("inf")
        self._observed_max = float("-inf")

    @property
    def w_fmt(self) -> QFormat:
        return QFormat(self.w_bits, signed=True)

    @property
    def a_fmt(self) -> QFormat:
        if self.act_signed is None:
            raise CalibrationError(
                f"{type(self).__name__} has no activation range yet; run mico.quant.calibrate "
                "on sample inputs before quantizing"
            )
        return QFormat(self.a_bits, signed=self.act_signed)

    @property
    def calibrated(self) -> bool:
        return self.act_scale is not None and self.weight_scale is not None

    def begin_calibration(self) -> None:
        self.mode = "calibrate"
        self._observed, self._observed_min, self._observed_max = [], float("inf"), float("-inf")

    def end_calibration(self) -> None:
        """Fix the activation and weight scales from what was observed, and switch to ``quant``."""
        if not self._observed:
            raise CalibrationError(
                f"{type(self).__name__} saw no input during calibration; pass at least one batch"
            )
        values = torch.cat(self._observed).numpy()
        self.act_signed = bool(self._observed_min < 0)
        amax = max(abs(self._observed_min), self._observed_max)  # every value, not the sample
        self.act_scale = choose_scale(values, self.a_fmt, self.scale_method, amax=amax)
        self.weight_scale = choose_scale(
            self.weight.detach().numpy(), self.w_fmt, self.scale_method
        )
        self._observed = []
        self.mode = "quant"

    def _observe(self, x: torch.Tensor) -> None:
        flat = x.detach().reshape(-1).to(torch.float32)
        self._observed_min = min(self._observed_min, float(flat.min()))
        self._observed_max = max(self._observed_max, float(flat.max()))
        if flat.numel() > _OBSERVE_PER_BATCH:
            flat = flat[:: flat.numel() // _OBSERVE_PER_BATCH + 1]
        self._observed.append(flat.clone())

    def quant_input(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "calibrate":
            self._observe(x)
        elif self.mode == "quant":
            return fake_quantize(x, self._require(self.act_scale), self.a_fmt)
        return x

    def quant_weight(self) -> torch.Tensor:
        if self.mode == "quant":
            return fake_quantize(self.weight, self._require(self.weight_scale), self.w_fmt)
        return self.weight

    def weight_codes(self) -> np.ndarray:
        """The weights as integer codes (int64), in the layer's weight layout."""
        scale = self._require(self.weight_scale)
        return quantize(self.weight.detach().numpy(), scale, self.w_fmt).astype(np.int64)

    def _require(self, value: float | None) -> float:
        if value is None:
            raise CalibrationError(
                f"{type(self).__name__} is not calibrated; run mico.quant.calibrate first"
            )
        return value

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, w_bits={self.w_bits}, a_bits={self.a_bits}"


class BitConv2d(BitLayer, nn.Conv2d):
    """``nn.Conv2d`` with per-layer weight / input-activation quantization."""

    def __init__(
        self, *args, w_bits: int = 8, a_bits: int = 8, scale_method: ScaleMethod = "mse", **kwargs
    ) -> None:
        nn.Conv2d.__init__(self, *args, **kwargs)
        self._init_quant(w_bits, a_bits, scale_method)

    @classmethod
    def from_float(
        cls, conv: nn.Conv2d, w_bits: int, a_bits: int, scale_method: ScaleMethod = "mse"
    ) -> BitConv2d:
        layer = cls(
            conv.in_channels,
            conv.out_channels,
            conv.kernel_size,
            stride=conv.stride,
            padding=conv.padding,
            dilation=conv.dilation,
            groups=conv.groups,
            bias=conv.bias is not None,
            padding_mode=conv.padding_mode,
            w_bits=w_bits,
            a_bits=a_bits,
            scale_method=scale_method,
        )
        layer.load_state_dict(conv.state_dict())
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._conv_forward(self.quant_input(x), self.quant_weight(), self.bias)


class BitLinear(BitLayer, nn.Linear):
    """``nn.Linear`` with per-layer weight / input-activation quantization."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        w_bits: int = 8,
        a_bits: int = 8,
        scale_method: ScaleMethod = "mse",
    ) -> None:
        nn.Linear.__init__(self, in_features, out_features, bias=bias)
        self._init_quant(w_bits, a_bits, scale_method)

    @classmethod
    def from_float(
        cls, linear: nn.Linear, w_bits: int, a_bits: int, scale_method: ScaleMethod = "mse"
    ) -> BitLinear:
        layer = cls(
            linear.in_features,
            linear.out_features,
            bias=linear.bias is not None,
            w_bits=w_bits,
            a_bits=a_bits,
            scale_method=scale_method,
        )
        layer.load_state_dict(linear.state_dict())
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(self.quant_input(x), self.quant_weight(), self.bias)
