"""Seed 003's weight utilities: ``weight_quant`` and ``export_layer_weights``.

``weight_quant`` fake-quantizes a weight tensor with mico's one arithmetic (the scale rule of a
quantized layer: least-error scales, absmean for ternary and binary); ``export_layer_weights``
gives, per quantized layer, the integer codes, scales, bias and widths the C code is built from,
so a user can check or reuse them outside mico.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from mico.errors import PlanError
from mico.quant.arithmetic import BitWidth, QFormat, check_bits, fake_quantize, is_ternary, quantize
from mico.quant.layers import BitLayer
from mico.quant.scales import weight_scales


def _scales(weight: torch.Tensor, bits: BitWidth, per_channel: bool) -> tuple[np.ndarray, QFormat]:
    fmt = QFormat.for_bits(bits, signed=True)
    scales = weight_scales(
        weight.detach().float().numpy(),
        fmt,
        "mse",
        per_channel=per_channel,
        absmean=is_ternary(bits),
    )
    if scales.ndim:
        scales = scales.reshape(-1, *([1] * (weight.dim() - 1)))
    return scales, fmt


def weight_quant(weight: torch.Tensor, bits: BitWidth, per_channel: bool = False) -> torch.Tensor:
    """``weight`` fake-quantized to ``bits`` (1–8 or ternary): float values on the b-bit grid.

    The same scales and rounding a :class:`~mico.quant.BitLayer` uses, so the result equals the
    weights a quantized layer of that width computes with.
    """
    bits = check_bits(bits, "weight bit-width")
    if not torch.is_tensor(weight) or weight.dim() < 1:
        raise PlanError("weight_quant needs a weight tensor with at least one dimension")
    if not bool(torch.isfinite(weight).all()):
        raise PlanError("weight_quant: the weights hold NaN or infinite values")
    scales, fmt = _scales(weight, bits, per_channel)
    return fake_quantize(weight.detach().float(), scales, fmt)


def export_layer_weights(model: nn.Module) -> dict[str, dict[str, Any]]:
    """Every quantized layer's integer weights and parameters, in module order.

    Per layer: ``codes`` (int64 array in the weight's layout), ``scale`` (float, or one per
    output channel), ``bias`` (float32 array or None), ``w_bits``, ``a_bits``, ``act_scale``
    (static layers, else None) and ``shape``. ``codes * scale`` are the weights the layer
    computes with. A model with no quantized layer is an error naming what to do.
    """
    layers = {name: m for name, m in model.named_modules() if isinstance(m, BitLayer)}
    if not layers:
        raise PlanError(
            "export_layer_weights: the model has no quantized layers; quantize it first "
            "(model.set_qscheme(...) or mico.quant.quantize_model)"
        )
    exported: dict[str, dict[str, Any]] = {}
    for name, layer in layers.items():
        bias = getattr(layer, "bias", None)
        exported[name] = {
            "codes": layer.weight_codes(),
            "scale": layer.weight_scale,
            "bias": None if bias is None else bias.detach().float().numpy().copy(),
            "w_bits": layer.w_bits,
            "a_bits": layer.a_bits,
            "act_scale": layer.act_scale,
            "shape": tuple(layer.weight.shape),
        }
    return exported


def codes_of(weight: torch.Tensor, bits: BitWidth, per_channel: bool = False) -> np.ndarray:
    """The integer codes ``weight_quant`` rounds to (int64)."""
    scales, fmt = _scales(weight, check_bits(bits, "weight bit-width"), per_channel)
    return quantize(weight.detach().float().numpy(), scales, fmt).astype(np.int64)
