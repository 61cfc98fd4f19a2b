"""How a model is quantized, beyond its bit-widths: scale granularity, methods, modes."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from mico.errors import PlanError, brief
from mico.quant.scales import ACT_METHODS, DEFAULT_PERCENTILE, WEIGHT_METHODS

ActMode = Literal["static", "dynamic"]
Granularity = Literal["tensor", "channel"]


@dataclass(frozen=True)
class QuantConfig:
    """Quantizer settings shared by every layer of a model.

    * ``weight_granularity``: one scale per tensor, or per output channel;
    * ``weight_method``: ``mse`` (least-error clipping) or ``absmax``; binary and ternary
      weights always use MiCo's absmean scale;
    * ``act_mode``: ``static`` scales calibrated ahead of time (integer-only deployment) or
      ``dynamic`` scales computed per inference from each sample (MiCo's behaviour);
    * ``act_method``: how a static range is calibrated: ``minmax``, ``percentile`` or ``mse``;
    * ``learned_step``: learn the scales by gradient descent during QAT (LSQ);
    * ``act_asymmetric``: quantize activations of 2 or more bits with a zero point (all ``2**b``
      codes cover ``[min, max]``, for skewed ranges such as GELU/SiLU outputs); binary and
      ternary activations stay symmetric.
    """

    weight_granularity: Granularity = "tensor"
    weight_method: str = "mse"
    act_mode: ActMode = "static"
    act_method: str = "mse"
    percentile: float = DEFAULT_PERCENTILE
    learned_step: bool = False
    act_asymmetric: bool = False

    def __post_init__(self) -> None:
        _check("weight_granularity", self.weight_granularity, ("tensor", "channel"))
        _check("weight_method", self.weight_method, WEIGHT_METHODS)
        _check("act_mode", self.act_mode, ("static", "dynamic"))
        _check("act_method", self.act_method, ACT_METHODS)
        if not isinstance(self.act_asymmetric, bool):
            raise PlanError(
                f"act_asymmetric must be true or false, got {brief(self.act_asymmetric)}"
            )
        number = isinstance(self.percentile, int | float) and not isinstance(self.percentile, bool)
        if not number or not 0 < self.percentile <= 100:
            raise PlanError(f"percentile must be in (0, 100], got {brief(self.percentile)}")

    @property
    def per_channel(self) -> bool:
        return self.weight_granularity == "channel"

    def replace(self, **changes: Any) -> QuantConfig:
        """A copy with some fields changed (unknown fields raise PlanError)."""
        fields = {f.name for f in dataclasses.fields(self)}
        unknown = ", ".join(sorted(str(k)[:40] for k in set(changes) - fields)[:5])
        if unknown:
            raise PlanError(
                f"unknown quantization option(s) {unknown}; known: {', '.join(sorted(fields))}"
            )
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> QuantConfig:
        if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
            raise PlanError(
                f"a quantization config is a mapping of option names to values, got {brief(data)}"
            )
        return cls().replace(**data)


def _check(field: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise PlanError(f"{field} must be one of {', '.join(allowed)}; got {brief(value)}")
