"""Hardware latency: layer geometry, BitFusion's analytic cycle model, profiles and proxies.

``model_layer_shapes`` reads each layer's geometry; ``bitfusion.model_cycles`` estimates
BitFusion cycles; ``profile.run_profile`` measures layer shapes × bit pairs on a target into a
resumable CSV; ``proxy.fit_proxy`` fits per-kind regressors whose predictions sum to a model's
latency. See ``docs/latency.md``.
"""

from mico.hw.bitfusion import BitFusionConfig, BitFusionEstimate, layer_cycles, model_cycles
from mico.hw.layers import LayerShape, model_layer_shapes
from mico.hw.proxy import LatencyProxy, fit_proxy, mape

__all__ = [
    "BitFusionConfig",
    "BitFusionEstimate",
    "LatencyProxy",
    "LayerShape",
    "fit_proxy",
    "layer_cycles",
    "mape",
    "model_cycles",
    "model_layer_shapes",
]
