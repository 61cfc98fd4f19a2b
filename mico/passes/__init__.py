"""Graph rewrites."""

from mico.passes.lower_quant import LayerQuant, lower_quantized, macs
from mico.passes.lower_static import lower_static
from mico.passes.observe import observe_ranges

__all__ = ["LayerQuant", "lower_quantized", "lower_static", "macs", "observe_ranges"]
