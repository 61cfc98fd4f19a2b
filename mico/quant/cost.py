"""What each quantizable layer costs: MACs, BOPs, packed weight bytes, activation bytes.

Costs are measured on a real forward pass (hooks record every layer's input and output
shapes), so groups, dilation, padding, stride and sequence length are all accounted for:
a convolution does ``out_channels/groups``… exactly ``out.numel() · (in/groups) · kernel``
multiply-accumulates, a linear layer ``out.numel() · in_features``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from mico.quant.arithmetic import BitWidth, format_bits, is_ternary
from mico.quant.layers import BitLayer
from mico.quant.order import QUANTIZABLE, _as_tuple, quantizable_layers


def _stored_bits(bits: BitWidth) -> int:
    """Bits per stored value: 2 for ternary, else the width (32 for a float layer)."""
    return 2 if is_ternary(bits) else int(bits)


@dataclass(frozen=True)
class LayerCost:
    """One layer's cost for one input sample."""

    name: str
    kind: str
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    params: int
    macs: int
    w_bits: BitWidth
    a_bits: BitWidth

    @property
    def bops(self) -> float:
        """Bit operations: MACs x weight bits x activation bits (ternary counts 1.58)."""
        return self.macs * float(self.w_bits) * float(self.a_bits)

    @property
    def weight_bytes(self) -> int:
        """Weights packed at their storage width (ternary takes 2 bits)."""
        return math.ceil(self.params * _stored_bits(self.w_bits) / 8)

    @property
    def activation_bytes(self) -> int:
        """The layer's input activations packed at ``a_bits`` (one sample)."""
        return math.ceil(math.prod(self.input_shape) * _stored_bits(self.a_bits) / 8)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(bops=self.bops, weight_bytes=self.weight_bytes)
        data["activation_bytes"] = self.activation_bytes
        return data


@dataclass(frozen=True)
class CostTable:
    """Per-layer costs in execution order, with totals."""

    layers: tuple[LayerCost, ...]

    @property
    def macs(self) -> int:
        return sum(c.macs for c in self.layers)

    @property
    def bops(self) -> float:
        return sum(c.bops for c in self.layers)

    @property
    def weight_bytes(self) -> int:
        return sum(c.weight_bytes for c in self.layers)

    @property
    def params(self) -> int:
        return sum(c.params for c in self.layers)

    @property
    def max_activation_bytes(self) -> int:
        return max((c.activation_bytes for c in self.layers), default=0)

    def __getitem__(self, name: str) -> LayerCost:
        for cost in self.layers:
            if cost.name == name:
                return cost
        raise KeyError(name)

    def to_markdown(self) -> str:
        """A Markdown table, one row per layer, then the totals."""
        rows = [
            "| layer | kind | in | out | W | A | params | MACs | BOPs | weight B | act B |",
            "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for c in self.layers:
            rows.append(
                f"| {c.name} | {c.kind} | {'x'.join(map(str, c.input_shape))} | "
                f"{'x'.join(map(str, c.output_shape))} | {format_bits(c.w_bits)} | "
                f"{format_bits(c.a_bits)} | {c.params} | {c.macs} | {c.bops:.0f} | "
                f"{c.weight_bytes} | {c.activation_bytes} |"
            )
        rows.append(
            f"| **total** | | | | | | {self.params} | {self.macs} | {self.bops:.0f} | "
            f"{self.weight_bytes} | {self.max_activation_bytes} (max) |"
        )
        return "\n".join(rows) + "\n"

    def to_dict(self) -> dict[str, Any]:
        return {
            "layers": [c.to_dict() for c in self.layers],
            "total": {
                "params": self.params,
                "macs": self.macs,
                "bops": self.bops,
                "weight_bytes": self.weight_bytes,
                "max_activation_bytes": self.max_activation_bytes,
            },
        }


def _macs(module: nn.Module, output: torch.Tensor) -> int:
    per_sample = output.numel() // max(output.shape[0], 1)
    if isinstance(module, nn.Linear):
        return per_sample * module.in_features
    kernel = math.prod(module.kernel_size)  # type: ignore[arg-type]
    return per_sample * (module.in_channels // module.groups) * kernel  # type: ignore[operator]


def model_costs(
    model: nn.Module,
    example_inputs: Any = None,
    bits: dict[str, tuple[BitWidth, BitWidth]] | None = None,
) -> CostTable:
    """The cost table of ``model`` for one sample of ``example_inputs``' shape.

    A layer counts at ``bits[name]`` if given, else at its own bit-widths (Bit* layers) or
    32/32 (float layers).
    """
    if example_inputs is None and hasattr(model, "example_input"):
        example_inputs = model.example_input()
    if example_inputs is None:
        raise ValueError("model_costs needs example_inputs (one batch of the model's input)")
    order = quantizable_layers(model, example_inputs)
    modules = {n: model.get_submodule(n) for n in order}
    seen: dict[str, tuple[tuple[int, ...], tuple[int, ...], int]] = {}

    def hook(module: nn.Module, inputs: Any, output: Any) -> None:
        name = names[id(module)]
        macs = _macs(module, output)
        if name in seen:  # a shared layer costs at every call
            i, o, m = seen[name]
            seen[name] = (i, o, m + macs)
        else:
            seen[name] = (tuple(inputs[0].shape[1:]), tuple(output.shape[1:]), macs)

    names = {id(m): n for n, m in modules.items()}
    handles = [m.register_forward_hook(hook) for m in modules.values()]
    modes = {n: m.mode for n, m in modules.items() if isinstance(m, BitLayer)}
    for n in modes:
        modules[n].mode = "float"  # type: ignore[union-attr]
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(*_as_tuple(example_inputs))
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
        for n, mode in modes.items():
            modules[n].mode = mode  # type: ignore[union-attr]
    costs = []
    for name in order:
        module = modules[name]
        in_shape, out_shape, macs = seen[name]
        if bits and name in bits:
            w, a = bits[name]
        elif isinstance(module, BitLayer):
            w, a = module.w_bits, module.a_bits
        else:
            w, a = 32, 32
        kind = next(t.__name__ for t in QUANTIZABLE if isinstance(module, t))
        costs.append(LayerCost(name, kind, in_shape, out_shape, module.weight.numel(), macs, w, a))
    return CostTable(tuple(costs))


def get_model_macs(model: nn.Module, input_size: Any = None) -> int:
    """Total MACs of the quantizable layers for one sample (MiCo's ``get_model_macs``).

    ``input_size`` is a shape such as ``(1, 1, 28, 28)`` or an example tensor.
    """
    example = input_size
    if input_size is not None and not isinstance(input_size, torch.Tensor | tuple | list):
        raise TypeError("input_size must be a shape tuple or an example tensor")
    if isinstance(input_size, tuple | list) and all(isinstance(d, int) for d in input_size):
        dtype = getattr(model, "input_dtype", torch.float32)
        example = torch.zeros(tuple(input_size), dtype=dtype)
    return model_costs(model, example).macs
