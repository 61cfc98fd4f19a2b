"""Quantized layers: ``BitLinear``, ``BitConv1d`` and ``BitConv2d``.

Each layer quantizes its *input* activations to ``a_bits`` and its weights to ``w_bits`` with
the arithmetic of :mod:`mico.quant.arithmetic` (``1.58`` is ternary). A layer is in one of
three modes:

* ``float`` — plain FP32 (used while exporting the graph);
* ``calibrate`` — FP32 while observing the inputs, to fix static activation scales;
* ``quant`` — fake-quantized inputs and weights with straight-through gradients (QAT), or
  learned step sizes (LSQ) when the config asks for them.

Weight scales are a function of the weights, cached together with a copy of the weights they
were computed from: any change of the weight values (folding BN, ``load_state_dict``, an
optimizer step, ``weight.data`` edits) invalidates the cache.
Static activation scales, their signedness and (with ``QuantConfig(act_asymmetric=True)``) their
zero points are buffers, so checkpoints carry them; an asymmetric layer loading a checkpoint
without a zero point keeps that checkpoint's symmetric (or unsigned) codes until recalibrated.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mico.errors import CalibrationError
from mico.quant.arithmetic import (
    BitWidth,
    QFormat,
    check_bits,
    dynamic_asymmetric,
    dynamic_scale,
    fake_quantize,
    format_bits,
    is_ternary,
    lsq_fake_quantize,
    quantize,
    quantize_shifted,
)
from mico.quant.config import QuantConfig
from mico.quant.scales import choose_asymmetric, choose_scale, weight_scales

Mode = Literal["float", "calibrate", "quant"]
_OBSERVE_PER_BATCH = 50_000
_UNKNOWN_SIGN = -1


class BitLayer(nn.Module):
    """Shared quantization state of the Bit* layers (a mixin over Conv1d / Conv2d / Linear)."""

    weight: nn.Parameter
    bias: nn.Parameter | None
    w_bits: BitWidth
    a_bits: BitWidth

    def _init_quant(self, w_bits: BitWidth, a_bits: BitWidth, config: QuantConfig) -> None:
        self.layer_name = type(self).__name__
        self.qconfig = config
        self.mode: Mode = "float"
        self.register_buffer("activation_signed", torch.tensor(_UNKNOWN_SIGN, dtype=torch.int8))
        if config.act_asymmetric:  # symmetric layers keep the state dict they always had
            self.register_buffer("activation_zero", torch.tensor(0, dtype=torch.int16))
        if config.learned_step and config.act_mode == "static":
            self.activation_scale = nn.Parameter(torch.zeros(()))
        else:
            self.register_buffer("activation_scale", torch.zeros(()))
        if config.learned_step:
            n = self.weight.shape[0] if config.per_channel else 1
            self.weight_step = nn.Parameter(torch.zeros(n))
        self._scale_cache: tuple[_WeightSnapshot, np.ndarray] | None = None
        self._weight_cache: tuple[_WeightSnapshot, torch.Tensor] | None = None
        self._reset_observer()
        self.set_bits(w_bits, a_bits)

    # ----------------------------------------------------------------- bit-widths, formats
    def set_bits(self, w_bits: BitWidth, a_bits: BitWidth) -> None:
        """Change the bit-widths; static scales chosen for the old widths are dropped."""
        w = check_bits(w_bits, f"layer '{self.layer_name}': weight bit-width")
        a = check_bits(a_bits, f"layer '{self.layer_name}': activation bit-width")
        changed = (w, a) != (getattr(self, "w_bits", None), getattr(self, "a_bits", None))
        self.w_bits, self.a_bits = w, a
        if changed:
            with torch.no_grad():
                self.activation_scale.zero_()
                if hasattr(self, "activation_zero"):
                    self.activation_zero.zero_()
                if hasattr(self, "weight_step"):
                    self.weight_step.zero_()
            self._scale_cache = self._weight_cache = self._codes_cache = None

    @property
    def w_fmt(self) -> QFormat:
        """Weight codes are signed (ternary: {-1, 0, +1}; 1 bit: {-1, +1})."""
        return QFormat.for_bits(self.w_bits, signed=True)

    @property
    def act_signed(self) -> bool | None:
        """Whether the inputs take negative values (None before calibration)."""
        flag = int(self.activation_signed)
        return None if flag == _UNKNOWN_SIGN else bool(flag)

    @act_signed.setter
    def act_signed(self, value: bool | None) -> None:
        self.activation_signed.fill_(_UNKNOWN_SIGN if value is None else int(bool(value)))

    @property
    def act_zero(self) -> int:
        """The static zero point of asymmetric input codes (0: symmetric or unsigned)."""
        zero = getattr(self, "activation_zero", None)
        return 0 if zero is None else int(zero)

    @property
    def asymmetric(self) -> bool:
        """Inputs quantized with a zero point (``QuantConfig.act_asymmetric``, 2+ bits)."""
        return bool(self.qconfig.act_asymmetric) and _can_shift(self.a_bits)

    @property
    def a_fmt(self) -> QFormat:
        """Input codes: unsigned (one more bit of resolution) when the inputs are never negative,
        shifted by the calibrated zero point when asymmetric.

        Dynamic layers that were never calibrated assume signed inputs, as MiCo does; dynamic
        asymmetric layers have a zero point per sample, so their format here has zero 0.
        """
        signed = self.act_signed
        if signed is None:
            if self.qconfig.act_mode == "static":
                raise CalibrationError(
                    f"layer '{self.layer_name}' has no activation range yet; run "
                    "mico.quant.calibrate(model, batches) before quantizing"
                )
            signed = True
        zero = self.act_zero if self.qconfig.act_mode == "static" else 0
        return QFormat.for_bits(self.a_bits, signed, zero)  # signed codes ignore a zero point

    @property
    def act_scale(self) -> float | None:
        """The static input scale, or None (dynamic, or not calibrated yet)."""
        value = float(self.activation_scale.detach().abs())
        return value if value > 0 else None

    @property
    def calibrated(self) -> bool:
        """Ready to run quantized: static layers need a calibrated activation scale."""
        return self.qconfig.act_mode == "dynamic" or self.act_scale is not None

    @property
    def weight_scale(self) -> float | np.ndarray:
        """The weight scale: a float per tensor, an ``(out_channels,)`` array per channel."""
        scales = self._weight_scales()
        return float(scales) if scales.ndim == 0 else scales

    # ----------------------------------------------------------------- weights
    def _weight_key(self) -> _WeightSnapshot:
        step = getattr(self, "weight_step", None)
        return _WeightSnapshot(self.weight, step, (self.w_bits, self.qconfig))

    def _is_current(self, snapshot: _WeightSnapshot) -> bool:
        step = getattr(self, "weight_step", None)
        return snapshot.matches(self.weight, step, (self.w_bits, self.qconfig))

    def _rule_scales(self) -> np.ndarray:
        """The scales the config's rule gives the current weights (absmean for ternary)."""
        return weight_scales(
            self.weight.detach().numpy(),
            self.w_fmt,
            self.qconfig.weight_method,  # type: ignore[arg-type]
            per_channel=self.qconfig.per_channel,
            absmean=is_ternary(self.w_bits),
        )

    def _weight_scales(self) -> np.ndarray:
        """Scales as float64, shape () or (out,); cached while the weights are unchanged."""
        if self._scale_cache is not None and self._is_current(self._scale_cache[0]):
            return self._scale_cache[1]
        key = self._weight_key()
        step = getattr(self, "weight_step", None)
        if step is not None and bool(torch.all(step != 0)):
            learned = step.detach().abs().to(torch.float64).numpy()
            scales = learned.reshape(()) if not self.qconfig.per_channel else learned
        else:
            scales = self._rule_scales()
        self._scale_cache = (key, scales)
        return scales

    def _broadcast(self, scales: np.ndarray) -> np.ndarray:
        return scales.reshape(-1, *([1] * (self.weight.dim() - 1))) if scales.ndim else scales

    def _init_learned_steps(self) -> None:
        """LSQ steps start from the rule-based scales."""
        if hasattr(self, "weight_step") and not bool(torch.all(self.weight_step != 0)):
            scales = self._rule_scales()
            with torch.no_grad():
                self.weight_step.copy_(torch.from_numpy(np.atleast_1d(scales)).float())

    def quant_weight(self) -> torch.Tensor:
        """The weights the layer computes with: fake-quantized in ``quant`` mode."""
        if self.mode != "quant":
            return self.weight
        if hasattr(self, "weight_step"):
            self._init_learned_steps()
            step = self.weight_step
            if step.numel() > 1:
                step = step.reshape(-1, *([1] * (self.weight.dim() - 1)))
            else:
                step = step[0]
            return lsq_fake_quantize(self.weight, step, self.w_fmt)
        scales = self._broadcast(self._weight_scales())
        if torch.is_grad_enabled() and self.weight.requires_grad:
            return fake_quantize(self.weight, scales, self.w_fmt)
        if self._weight_cache is None or not self._is_current(self._weight_cache[0]):
            quantized = fake_quantize(self.weight.detach(), scales, self.w_fmt)
            self._weight_cache = (self._weight_key(), quantized)
        return self._weight_cache[1]

    def weight_codes(self) -> np.ndarray:
        """The weights as integer codes (int64), in the layer's weight layout."""
        scales = self._broadcast(self._weight_scales())
        return quantize(self.weight.detach().numpy(), scales, self.w_fmt).astype(np.int64)

    # ----------------------------------------------------------------- activations
    def _reset_observer(self) -> None:
        self._observed: list[torch.Tensor] = []
        self._observed_min = float("inf")
        self._observed_max = float("-inf")

    def begin_calibration(self) -> None:
        """Observe the inputs of the following forward passes."""
        self.mode = "calibrate"
        self._reset_observer()

    def end_calibration(self) -> None:
        """Fix the input signedness (and the static scale) from what was observed; enter quant."""
        if not self._observed:
            raise CalibrationError(
                f"layer '{self.layer_name}' saw no input during calibration; pass at least one "
                "batch that reaches it"
            )
        self.act_signed = bool(self._observed_min < 0)
        if self.qconfig.act_mode == "static" and self.asymmetric:
            values = torch.cat(self._observed).numpy()
            scale, zero = choose_asymmetric(
                values,
                int(self.a_bits),
                self.qconfig.act_method,  # type: ignore[arg-type]
                vmin=self._observed_min,
                vmax=self._observed_max,
                percentile=self.qconfig.percentile,
            )
            self.act_signed = False  # shifted unsigned codes
            with torch.no_grad():
                self.activation_scale.fill_(scale)
                self.activation_zero.fill_(zero)
        elif self.qconfig.act_mode == "static":
            values = torch.cat(self._observed).numpy()
            amax = max(abs(self._observed_min), self._observed_max)  # every value, not a sample
            fmt = self.a_fmt
            scale = choose_scale(
                values,
                fmt,
                self.qconfig.act_method,  # type: ignore[arg-type]
                amax=amax if fmt.signed else max(self._observed_max, 0.0),
                percentile=self.qconfig.percentile,
                absmean=is_ternary(self.a_bits),
            )
            with torch.no_grad():
                self.activation_scale.fill_(scale)
        self._init_learned_steps()
        self._reset_observer()
        self.mode = "quant"

    def _observe(self, x: torch.Tensor) -> None:
        flat = x.detach().reshape(-1).to(torch.float32)
        if flat.numel() == 0:
            return
        self._observed_min = min(self._observed_min, float(flat.min()))
        self._observed_max = max(self._observed_max, float(flat.max()))
        if flat.numel() > _OBSERVE_PER_BATCH:
            flat = flat[:: flat.numel() // _OBSERVE_PER_BATCH + 1]
        self._observed.append(flat.clone())

    def quant_input(self, x: torch.Tensor) -> torch.Tensor:
        """The input the layer computes with: observed, fake-quantized or unchanged."""
        if self.mode == "calibrate":
            self._observe(x)
            return x
        if self.mode != "quant":
            return x
        fmt = self.a_fmt
        if self.qconfig.act_mode == "dynamic" and self.asymmetric:
            scale, zero = dynamic_asymmetric(x, int(self.a_bits))
            codes = quantize_shifted(x.detach(), scale, zero, int(self.a_bits))
            return codes * scale + (x - x.detach())
        if self.qconfig.act_mode == "dynamic":
            return fake_quantize(x, dynamic_scale(x, fmt, absmean=_absmean(self.a_bits, fmt)), fmt)
        if self.act_scale is None:
            raise CalibrationError(
                f"layer '{self.layer_name}' uses static activation scales but was not "
                "calibrated; run mico.quant.calibrate(model, batches), or quantize with "
                "act_mode='dynamic'"
            )
        if isinstance(self.activation_scale, nn.Parameter):
            return lsq_fake_quantize(x, self.activation_scale, fmt)
        return fake_quantize(x, self.act_scale, fmt)

    def prepare_export(self) -> None:
        """Snapshot bit-widths and scales for export (while exporting, tensors are symbolic)."""
        dynamic = self.qconfig.act_mode == "dynamic"
        if not dynamic and self.act_scale is None:
            raise CalibrationError(
                f"layer '{self.layer_name}' cannot be exported quantized before calibration"
            )
        self._export_args = self._quant_args()

    def _quant_args(self) -> tuple[Any, ...]:
        """Bit-widths and scales now, in the order the ``mico::bit_*`` operators take them."""
        dynamic = self.qconfig.act_mode == "dynamic"
        fmt = self.a_fmt
        return (
            float(self.w_bits),
            float(self.a_bits),
            np.atleast_1d(self._weight_scales()).astype(float).tolist(),
            float(self.act_scale or 1.0),
            bool(fmt.signed),
            dynamic,
            int(fmt.zero),
            bool(dynamic and self.asymmetric),
        )

    def _uses_integer_path(self) -> bool:
        """Eval-mode inference computes as the C does (integer accumulation, then rescale)."""
        return self.mode == "quant" and not self.training and self.calibrated

    def _integer_forward(
        self, x: torch.Tensor, op: Any, float_op: Any, channel_dim: int
    ) -> torch.Tensor:
        """The exact inference output; gradients, when asked for, flow straight through."""
        from mico.quant.export_ops import integer_output

        _, a_bits, _, act_scale, act_signed, dynamic, zero, asym = self._quant_args()
        codes, scales = self.weight_codes_f32()
        out = integer_output(
            op,
            x,
            codes,
            scales,
            self.bias,
            a_bits,
            act_signed,
            act_scale,
            dynamic,
            channel_dim,
            act_zero=zero,
            act_asymmetric=asym,
        )
        if torch.is_grad_enabled() and (
            x.requires_grad or any(p.requires_grad for p in self.parameters())
        ):
            fake = float_op(self.quant_input(x), self.quant_weight())
            out = out + (fake - fake.detach())
        return out

    def weight_codes_f32(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Weight codes (float32, integral) and float32 scales; cached like quant_weight()."""
        from mico.quant.export_ops import weight_codes

        cache = getattr(self, "_codes_cache", None)
        if cache is None or not self._is_current(cache[0]):
            scales = np.atleast_1d(self._weight_scales()).astype(float).tolist()
            cache = (self._weight_key(), *weight_codes(self.weight, self.w_bits, scales))
            self._codes_cache = cache
        return cache[1], cache[2]

    def _export_quant_args(self) -> tuple[Any, ...]:
        """Bit-widths and scales as the ``mico::bit_*`` operators take them."""
        args = getattr(self, "_export_args", None)
        if args is None:
            raise CalibrationError(
                f"layer '{self.layer_name}': call mico.quant.prepare_export(model) right before "
                "torch.export, so the scales are taken from the current weights"
            )
        return args

    # ----------------------------------------------------------------- state dict
    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        local_metadata: dict[str, Any],
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        """A float checkpoint (no scales) loads into a quantized layer, leaving it uncalibrated."""
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        for name in ("activation_scale", "activation_signed", "activation_zero", "weight_step"):
            key = prefix + name
            if key in missing_keys:
                missing_keys.remove(key)
                with torch.no_grad():
                    tensor = getattr(self, name)
                    tensor.fill_(_UNKNOWN_SIGN if name == "activation_signed" else 0)
        self._scale_cache = self._weight_cache = self._codes_cache = None

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, w_bits={format_bits(self.w_bits)}, "
            f"a_bits={format_bits(self.a_bits)}, act_mode={self.qconfig.act_mode}"
        )


class _WeightSnapshot:
    """What the cached weight scales and quantized weights were computed from.

    Two snapshots are equal only if the settings match and the weight (and learned step)
    *values* are identical, so no way of changing the weights can leave a stale cache:
    optimizer steps, ``load_state_dict``, BN folding, ``weight.data`` edits or assignment.
    """

    def __init__(self, weight: torch.Tensor, step: torch.Tensor | None, settings: Any) -> None:
        self.weight = weight.detach().clone()
        self.step = None if step is None else step.detach().clone()
        self.settings = settings

    def matches(self, weight: torch.Tensor, step: torch.Tensor | None, settings: Any) -> bool:
        if settings != self.settings or (step is None) != (self.step is None):
            return False
        if weight.shape != self.weight.shape or weight.dtype != self.weight.dtype:
            return False
        if step is not None and not torch.equal(step.detach(), self.step):
            return False
        return torch.equal(weight.detach(), self.weight)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _WeightSnapshot):
            return NotImplemented
        return other.matches(self.weight, self.step, self.settings)

    __hash__ = None  # type: ignore[assignment]


def _can_shift(bits: BitWidth) -> bool:
    """Zero points apply to activations of 2 or more bits (binary and ternary stay symmetric)."""
    return not is_ternary(bits) and int(bits) >= 2


def _absmean(bits: BitWidth, fmt: QFormat) -> bool:
    """MiCo scales binary and ternary values by their mean magnitude."""
    return fmt.binary or is_ternary(bits)


class _BitConv(BitLayer):
    """Conversion shared by the convolutions."""

    @classmethod
    def from_float(
        cls,
        conv: nn.Conv1d | nn.Conv2d,
        w_bits: BitWidth,
        a_bits: BitWidth,
        config: QuantConfig | None = None,
        bias: bool = True,
    ) -> _BitConv:
        """A Bit* copy of ``conv`` (same geometry and weights; ``bias=False`` drops the bias)."""
        layer = cls(
            conv.in_channels,
            conv.out_channels,
            conv.kernel_size,
            stride=conv.stride,
            padding=conv.padding,
            dilation=conv.dilation,
            groups=conv.groups,
            bias=bias and conv.bias is not None,
            padding_mode=conv.padding_mode,
            w_bits=w_bits,
            a_bits=a_bits,
            config=config,
        )
        with torch.no_grad():
            layer.weight.copy_(conv.weight)
            if layer.bias is not None and conv.bias is not None:
                layer.bias.copy_(conv.bias)
        return layer.to(conv.weight.device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "quant" and torch.compiler.is_exporting():
            return self._exported_call(x)
        if self._uses_integer_path():
            padded = self._explicit_padding(x)
            if padded is not None:
                return self._integer_forward(
                    padded,
                    lambda xc, wc: self._unpadded_conv(xc, wc, None),
                    lambda xq, wq: self._unpadded_conv(xq, wq, self.bias),
                    channel_dim=1,
                )
            return self._integer_forward(
                x,
                lambda xc, wc: self._conv_forward(xc, wc, None),
                lambda xq, wq: self._conv_forward(xq, wq, self.bias),
                channel_dim=1,
            )
        return self._conv_forward(self.quant_input(x), self.quant_weight(), self.bias)

    def _explicit_padding(self, x: torch.Tensor) -> torch.Tensor | None:
        """``x`` padded as torch pads it for ``padding='same'`` or a non-zero padding mode.

        Such convolutions compute as an explicit ``F.pad`` followed by an unpadded convolution
        (torch does the same), so the quantized kernel only ever sees zero-padding-free input
        and the pad is an op of its own in the exported graph. None when no pre-padding is needed.
        """
        if self.padding_mode == "zeros" and not isinstance(self.padding, str):
            return None
        pads = list(self._reversed_padding_repeated_twice)
        if not any(pads):
            return x
        mode = "constant" if self.padding_mode == "zeros" else self.padding_mode
        return F.pad(x, pads, mode=mode)

    def _unpadded_conv(
        self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        conv = F.conv1d if isinstance(self, nn.Conv1d) else F.conv2d
        return conv(x, weight, bias, self.stride, 0, self.dilation, self.groups)

    def _exported_call(self, x: torch.Tensor) -> torch.Tensor:
        """One ``mico.bit_conv1d`` / ``mico.bit_conv2d`` call (see mico.quant.export_ops)."""
        from mico.quant import export_ops

        padded = self._explicit_padding(x)
        padding = [0] * len(self.stride) if padded is not None else list(self.padding)
        op = export_ops.bit_conv1d if isinstance(self, nn.Conv1d) else export_ops.bit_conv2d
        return op(
            x if padded is None else padded,
            self.weight,
            self.bias,
            list(self.stride),
            padding,
            list(self.dilation),
            self.groups,
            *self._export_quant_args(),
        )


class BitConv1d(_BitConv, nn.Conv1d):
    """``nn.Conv1d`` with per-layer weight / input-activation quantization."""

    def __init__(
        self,
        *args: Any,
        w_bits: BitWidth = 8,
        a_bits: BitWidth = 8,
        config: QuantConfig | None = None,
        **kwargs: Any,
    ) -> None:
        nn.Conv1d.__init__(self, *args, **kwargs)
        self._init_quant(w_bits, a_bits, config or QuantConfig())


class BitConv2d(_BitConv, nn.Conv2d):
    """``nn.Conv2d`` with per-layer weight / input-activation quantization."""

    def __init__(
        self,
        *args: Any,
        w_bits: BitWidth = 8,
        a_bits: BitWidth = 8,
        config: QuantConfig | None = None,
        **kwargs: Any,
    ) -> None:
        nn.Conv2d.__init__(self, *args, **kwargs)
        self._init_quant(w_bits, a_bits, config or QuantConfig())


class BitLinear(BitLayer, nn.Linear):
    """``nn.Linear`` with per-layer weight / input-activation quantization."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        w_bits: BitWidth = 8,
        a_bits: BitWidth = 8,
        config: QuantConfig | None = None,
    ) -> None:
        nn.Linear.__init__(self, in_features, out_features, bias=bias)
        self._init_quant(w_bits, a_bits, config or QuantConfig())

    @classmethod
    def from_float(
        cls,
        linear: nn.Linear,
        w_bits: BitWidth,
        a_bits: BitWidth,
        config: QuantConfig | None = None,
        bias: bool = True,
    ) -> BitLinear:
        """A BitLinear copy of ``linear`` (``bias=False`` drops the bias)."""
        layer = cls(
            linear.in_features,
            linear.out_features,
            bias=bias and linear.bias is not None,
            w_bits=w_bits,
            a_bits=a_bits,
            config=config,
        )
        with torch.no_grad():
            layer.weight.copy_(linear.weight)
            if layer.bias is not None and linear.bias is not None:
                layer.bias.copy_(linear.bias)
        return layer.to(linear.weight.device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "quant" and torch.compiler.is_exporting():
            from mico.quant import export_ops

            return export_ops.bit_linear(x, self.weight, self.bias, *self._export_quant_args())
        if self._uses_integer_path():
            return self._integer_forward(
                x,
                lambda xc, wc: F.linear(xc, wc),
                lambda xq, wq: F.linear(xq, wq, self.bias),
                channel_dim=-1,
            )
        return F.linear(self.quant_input(x), self.quant_weight(), self.bias)


def bit_layer_for(module: nn.Module) -> type[BitLayer]:
    """The Bit* class that quantizes ``module`` (Conv1d, Conv2d or Linear)."""
    for float_type, bit_type in QUANTIZABLE_TYPES:
        if isinstance(module, float_type):
            return bit_type
    raise TypeError(f"{type(module).__name__} is not quantizable (Conv1d, Conv2d or Linear)")


QUANTIZABLE_TYPES: tuple[tuple[type[nn.Module], type[BitLayer]], ...] = (
    (nn.Conv1d, BitConv1d),
    (nn.Conv2d, BitConv2d),
    (nn.Linear, BitLinear),
)
