"""Quantization: the arithmetic (written once), plans, Bit* layers, calibration, BN folding,
cost."""

from mico.quant import export_ops as export_ops  # registers the mico.bit_* operators
from mico.quant.arithmetic import (
    MAX_BITS,
    MIN_BITS,
    TERNARY,
    BitWidth,
    QFormat,
    check_bits,
    dequantize,
    dynamic_scale,
    fake_quantize,
    format_bits,
    is_ternary,
    lsq_fake_quantize,
    quantize,
    quantize_bias,
    quantize_multiplier,
    requantize,
    round_half_away,
    storage_bits,
)
from mico.quant.config import QuantConfig
from mico.quant.cost import CostTable, LayerCost, get_model_macs, model_costs
from mico.quant.fuse import fold_bn_into, fuse_model, fuse_model_seq
from mico.quant.layers import BitConv1d, BitConv2d, BitLayer, BitLinear
from mico.quant.model import (
    apply_plan,
    as_plan,
    bit_layers,
    calibrate,
    float_mode,
    prepare_export,
    quantize_model,
    replace_quantize_layers,
    set_to_qforward,
)
from mico.quant.order import list_quantize_layers, quantizable_layers
from mico.quant.packing import pack, packed_size, unpack
from mico.quant.plan import LayerBits, QuantPlan
from mico.quant.scales import choose_scale, weight_scales
from mico.quant.weights import export_layer_weights, weight_quant

__all__ = [
    "MAX_BITS",
    "MIN_BITS",
    "TERNARY",
    "BitConv1d",
    "BitConv2d",
    "BitLayer",
    "BitLinear",
    "BitWidth",
    "CostTable",
    "LayerBits",
    "LayerCost",
    "QFormat",
    "QuantConfig",
    "QuantPlan",
    "apply_plan",
    "as_plan",
    "bit_layers",
    "calibrate",
    "check_bits",
    "choose_scale",
    "dequantize",
    "dynamic_scale",
    "export_layer_weights",
    "fake_quantize",
    "float_mode",
    "fold_bn_into",
    "format_bits",
    "fuse_model",
    "fuse_model_seq",
    "get_model_macs",
    "is_ternary",
    "list_quantize_layers",
    "lsq_fake_quantize",
    "model_costs",
    "pack",
    "packed_size",
    "prepare_export",
    "quantizable_layers",
    "quantize",
    "quantize_bias",
    "quantize_model",
    "quantize_multiplier",
    "replace_quantize_layers",
    "requantize",
    "round_half_away",
    "set_to_qforward",
    "storage_bits",
    "unpack",
    "weight_quant",
    "weight_scales",
]
