"""Quantization: the arithmetic (written once), plans, Bit* layers, calibration, packing."""

from mico.quant.arithmetic import (
    MAX_BITS,
    MIN_BITS,
    QFormat,
    dequantize,
    fake_quantize,
    quantize,
    quantize_bias,
    quantize_multiplier,
    requantize,
    round_half_away,
)
from mico.quant.layers import BitConv2d, BitLayer, BitLinear
from mico.quant.model import apply_plan, bit_layers, calibrate, float_mode, quantizable_layers
from mico.quant.packing import pack, packed_size, unpack
from mico.quant.plan import LayerBits, QuantPlan
from mico.quant.scales import choose_scale

__all__ = [
    "MAX_BITS",
    "MIN_BITS",
    "BitConv2d",
    "BitLayer",
    "BitLinear",
    "LayerBits",
    "QFormat",
    "QuantPlan",
    "apply_plan",
    "bit_layers",
    "calibrate",
    "choose_scale",
    "dequantize",
    "fake_quantize",
    "float_mode",
    "pack",
    "packed_size",
    "quantizable_layers",
    "quantize",
    "quantize_bias",
    "quantize_multiplier",
    "requantize",
    "round_half_away",
    "unpack",
]
