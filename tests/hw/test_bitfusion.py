"""BitFusion's analytic model reproduces its documented reference points."""

from __future__ import annotations

import math

import pytest

from mico.errors import ConfigError
from mico.hw import BitFusionConfig, LayerShape, layer_cycles, model_cycles, model_layer_shapes


def conv(ic, oc, size, k=3, stride=1, groups=1, w=8, a=8, name="conv"):
    out = (size + 2 * (k // 2) - k) // stride + 1
    kind = "dwconv2d" if groups > 1 else "conv2d"
    return LayerShape(name, kind, ic, oc, (k, k), (stride, stride), groups, (size, size),
                      (out, out), w, a)  # fmt: skip


@pytest.mark.parametrize(
    ("w", "a", "engines"),
    # the authors' Fusion Unit: 16 BitBricks fuse into 16 engines (2/2, binary and ternary
    # operands as 2-bit), four (8/2, 4/4, 2/8) or one (8/8); 3 bits cost like 4, 5-7 like 8
    [
        (2, 2, 16),
        (1, 1, 16),
        (1.58, 2, 16),
        (8, 2, 4),
        (2, 8, 4),
        (4, 4, 4),
        (4, 2, 8),
        (8, 8, 1),
        (3, 3, 4),
        (6, 2, 4),
        (5, 8, 1),
    ],
)
def test_fusion_unit_engines(w, a, engines):
    assert BitFusionConfig().perf(w, a) == engines


def test_published_configuration_and_peak_throughput():
    cfg = BitFusionConfig()
    assert (cfg.rows, cfg.cols, cfg.frequency_hz, cfg.interface_bits) == (16, 32, 500e6, 192)
    assert (cfg.weight_buffer_bytes, cfg.input_buffer_bytes, cfg.output_buffer_bytes) == (
        65536,
        32768,
        16384,
    )
    assert cfg.fusion_units == 512
    assert cfg.peak_macs_per_cycle(8, 8) == 512
    assert cfg.peak_macs_per_cycle(2, 2) == 8192  # 16x the 8-bit peak


def test_wide_compute_bound_layer_scales_with_bricks():
    # 256 -> 256 channels, 3x3, 16x16: every mapping fills the rows, so cycles scale exactly
    # with the engines per unit, and the layer is compute bound at every width
    layer = conv(256, 256, 16)
    by_bits = {b: layer_cycles(layer.with_bits(b, b)) for b in (8, 4, 2)}
    assert by_bits[8].compute_cycles == 8 * 256 * 9 * 16  # ceil(256/32) x pixels x taps x 256/16
    assert by_bits[8].compute_cycles == 4 * by_bits[4].compute_cycles
    assert by_bits[4].compute_cycles == 4 * by_bits[2].compute_cycles
    assert all(c.bound == "compute" for c in by_bits.values())


def test_narrow_layer_gains_less_than_the_peak():
    # 16 input channels fill the 16 rows once at 8 bits: im2col (144 reductions) is what lets
    # lower widths help at all, and the gain stays below the 16x peak ratio
    layer = conv(16, 16, 32)
    c8, c2 = (layer_cycles(layer.with_bits(b, b)).cycles for b in (8, 2))
    assert 1 < c8 / c2 < 16


def test_memory_bound_layer_counts_offchip_bits():
    fc = LayerShape("fc", "linear", 4096, 4096, (1, 1), (1, 1), 1, (1, 1), (1, 1), 8, 8)
    cycles = layer_cycles(fc)
    weight_bits = 4096 * 4096 * 8
    assert cycles.weight_passes == math.ceil(weight_bits / (8 * 65536))
    assert cycles.offchip_bits == weight_bits + 4096 * 8 + 4096 * 8
    assert cycles.memory_cycles == math.ceil(cycles.offchip_bits / 192)
    assert cycles.bound == "memory"
    assert cycles.cycles == cycles.memory_cycles + cycles.weight_passes * (16 + 32)


def test_depthwise_maps_poorly_on_the_array():
    dw = conv(64, 64, 16, groups=64)
    dense = conv(64, 64, 16)
    # one output channel per group: the array's 32 columns and 16 rows are mostly idle
    assert layer_cycles(dw).compute_cycles == 64 * 256 * 1
    assert (
        dense.macs / layer_cycles(dense).compute_cycles
        > 30 * dw.macs / layer_cycles(dw).compute_cycles
    )


def test_model_cycles_on_a_zoo_model():
    from mico.models import from_zoo

    model = from_zoo("resnet8")
    layers = model_layer_shapes(model, model.example_input())
    totals = {b: model_cycles([s.with_bits(b, b) for s in layers]).cycles for b in (8, 4, 2)}
    assert totals[8] > totals[4] > totals[2]
    estimate = model_cycles(layers)
    assert estimate.seconds == pytest.approx(estimate.cycles / 500e6)
    assert len(estimate.layers) == len(layers) == model.n_layers == 10


def test_invalid_configuration_and_widths():
    with pytest.raises(ConfigError, match="rows must be positive"):
        BitFusionConfig(rows=0)
    with pytest.raises(ConfigError, match="at most 8 bits"):
        BitFusionConfig().perf(16, 8)
