"""Graph rewrites."""

from mico.passes.lower_quant import LayerQuant, lower_quantized, macs

__all__ = ["LayerQuant", "lower_quantized", "macs"]
