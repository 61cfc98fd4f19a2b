"""An analytic cycle model of the BitFusion accelerator (Sharma et al., ISCA 2018).

BitFusion is a systolic array of *Fusion Units*; each holds 16 *BitBricks* (2-bit × 2-bit
multipliers) that fuse at run time into 1, 2, 4, 8 or 16 processing engines, so one unit does
``(4 / bricks(w)) · (4 / bricks(a))`` multiply-adds per cycle, where an operand of b bits takes
``bricks(b)`` = 1, 2 or 4 bricks along its side (2, 4 or 8 bits; bricks fuse in powers of two, so
3 bits cost like 4 and 5–7 like 8; ternary and binary run as 2-bit). The array's rows consume
input channels and its columns produce output channels.

The layer model (per sample, double-buffered so transfers overlap computation):

* compute cycles = ``ceil(oc_g / cols) · OH · OW · KH · KW · ceil(ic_g / (rows · perf)) · groups``
  (``_g``: per group), the channel-wise mapping of the authors' simulator;
* off-chip traffic: weights once; inputs once when they fit the input buffer, else once per
  weight pass (weights split into passes that fit the weight buffer); outputs once at
  ``out_bits``; cycles = ``ceil(bits / interface_bits)``;
* latency = max(compute, memory) + one array fill (rows + cols cycles) per weight pass.

Every parameter is in :class:`BitFusionConfig` (documented in ``docs/latency.md``); the default
is the authors' published configuration used against Eyeriss (``bf_e_conf.ini`` of their
simulator: a 16 × 32 array, 8/2-bit precision range, 500 MHz, 64/32/16 KB weight/input/output
SRAM, a 192-bit memory interface).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from mico.errors import ConfigError
from mico.hw.layers import LayerShape, storage_bits


@dataclass(frozen=True)
class BitFusionConfig:
    """The accelerator's parameters (defaults: the authors' Eyeriss-comparison configuration)."""

    rows: int = 16  # systolic rows: input channels consumed per cycle per unit of perf
    cols: int = 32  # systolic columns: output channels produced in parallel
    max_bits: int = 8  # widest operand a Fusion Unit handles in one pass
    min_bits: int = 2  # one BitBrick's width
    frequency_hz: float = 500e6
    weight_buffer_bytes: int = 65536
    input_buffer_bytes: int = 32768
    output_buffer_bytes: int = 16384
    interface_bits: int = 192  # off-chip bits per cycle
    out_bits: int = 8  # outputs are written requantized

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not value or value < 0:
                raise ConfigError(f"BitFusionConfig.{name} must be positive, got {value!r}")
        if self.max_bits % self.min_bits or self.max_bits < self.min_bits:
            raise ConfigError("BitFusionConfig: max_bits must be a multiple of min_bits")

    @property
    def fusion_units(self) -> int:
        return self.rows * self.cols

    def bricks(self, bits: float) -> int:
        """BitBricks along one operand side: widths round up to min_bits · 2^k."""
        width = max(storage_bits(bits), self.min_bits)
        if width > self.max_bits:
            raise ConfigError(
                f"BitFusion runs operands of at most {self.max_bits} bits, got {bits}"
            )
        side = math.ceil(width / self.min_bits)
        return 1 << (side - 1).bit_length()

    def perf(self, w_bits: float, a_bits: float) -> int:
        """Multiply-adds per Fusion Unit per cycle (fused processing engines)."""
        side = self.max_bits // self.min_bits
        return (side // self.bricks(w_bits)) * (side // self.bricks(a_bits))

    def peak_macs_per_cycle(self, w_bits: float, a_bits: float) -> int:
        return self.fusion_units * self.perf(w_bits, a_bits)


@dataclass(frozen=True)
class LayerCycles:
    """One layer's estimated cycles and the parts they come from."""

    name: str
    compute_cycles: int
    memory_cycles: int
    fill_cycles: int
    offchip_bits: int
    weight_passes: int

    @property
    def cycles(self) -> int:
        return max(self.compute_cycles, self.memory_cycles) + self.fill_cycles

    @property
    def bound(self) -> str:
        return "compute" if self.compute_cycles >= self.memory_cycles else "memory"


def layer_cycles(layer: LayerShape, config: BitFusionConfig | None = None) -> LayerCycles:
    """BitFusion cycles of one layer for one sample."""
    cfg = config or BitFusionConfig()
    perf = cfg.perf(layer.w_bits, layer.a_bits)
    groups = layer.groups
    ic_g = layer.in_channels // groups
    oc_g = layer.out_channels // groups
    oh, ow = layer.out_size
    kh, kw = layer.kernel
    lanes = cfg.rows * perf
    tiles = groups * math.ceil(oc_g / cfg.cols) * oh * ow
    channelwise = tiles * kh * kw * math.ceil(ic_g / lanes)
    im2col = tiles * math.ceil(kh * kw * ic_g / lanes)
    compute = min(channelwise, im2col)
    weight_bits = layer.params * storage_bits(layer.w_bits)
    input_bits = layer.input_elements * storage_bits(layer.a_bits)
    output_bits = layer.output_elements * cfg.out_bits
    passes = max(1, math.ceil(weight_bits / (8 * cfg.weight_buffer_bytes)))
    input_reads = 1 if input_bits <= 8 * cfg.input_buffer_bytes else passes
    traffic = weight_bits + input_reads * input_bits + output_bits
    memory = math.ceil(traffic / cfg.interface_bits)
    fill = passes * (cfg.rows + cfg.cols)
    return LayerCycles(layer.name, compute, memory, fill, traffic, passes)


@dataclass(frozen=True)
class BitFusionEstimate:
    """Per-layer and total cycles of a model on BitFusion."""

    layers: tuple[LayerCycles, ...]
    config: BitFusionConfig

    @property
    def cycles(self) -> int:
        return sum(layer.cycles for layer in self.layers)

    @property
    def seconds(self) -> float:
        return self.cycles / self.config.frequency_hz


def model_cycles(
    layers: Sequence[LayerShape], config: BitFusionConfig | None = None
) -> BitFusionEstimate:
    """BitFusion cycles of every layer (layers run one after another, batch 1)."""
    cfg = config or BitFusionConfig()
    return BitFusionEstimate(tuple(layer_cycles(layer, cfg) for layer in layers), cfg)
