"""The geometry of each quantizable layer, as latency models need it.

A :class:`LayerShape` is what a hardware cost model sees of a layer: its kind (conv, depthwise
conv, linear), channels, kernel, stride, groups, input and output sizes and the W/A bit-widths.
Shapes are recorded on a real forward pass, so padding, dilation and sequence length count.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from mico.quant.arithmetic import BitWidth, is_ternary

KINDS = ("conv2d", "dwconv2d", "conv1d", "linear")


def storage_bits(bits: BitWidth) -> int:
    """Bits a value of ``bits`` occupies in hardware (ternary: 2)."""
    return 2 if is_ternary(bits) else int(bits)


@dataclass(frozen=True)
class LayerShape:
    """One layer for one sample: geometry and bit-widths (MACs derived)."""

    name: str
    kind: str
    in_channels: int
    out_channels: int
    kernel: tuple[int, int]
    stride: tuple[int, int]
    groups: int
    in_size: tuple[int, int]  # (H, W) of the input; (1, L) for 1-D; (1, 1) for linear
    out_size: tuple[int, int]
    w_bits: BitWidth = 8
    a_bits: BitWidth = 8

    @property
    def macs(self) -> int:
        per_output = (self.in_channels // self.groups) * self.kernel[0] * self.kernel[1]
        return self.out_channels * self.out_size[0] * self.out_size[1] * per_output

    @property
    def params(self) -> int:
        return self.out_channels * (self.in_channels // self.groups) * math.prod(self.kernel)

    @property
    def input_elements(self) -> int:
        return self.in_channels * self.in_size[0] * self.in_size[1]

    @property
    def output_elements(self) -> int:
        return self.out_channels * self.out_size[0] * self.out_size[1]

    @property
    def bops(self) -> float:
        return self.macs * float(self.w_bits) * float(self.a_bits)

    def with_bits(self, w_bits: BitWidth, a_bits: BitWidth) -> LayerShape:
        data = asdict(self)
        data.update(w_bits=w_bits, a_bits=a_bits)
        return LayerShape(**data)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(macs=self.macs, params=self.params)
        return data


def _pair(value: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(value, int):
        return (value, value)
    items = tuple(value)
    return (items[0], items[0]) if len(items) == 1 else (items[0], items[1])


def layer_shape(name: str, module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> LayerShape:
    """The :class:`LayerShape` of ``module`` given one input and output batch."""
    w_bits = getattr(module, "w_bits", 8)  # Bit* layers carry their widths; float counts 8/8
    a_bits = getattr(module, "a_bits", 8)
    if isinstance(module, nn.Conv2d):
        groups = module.groups
        depthwise = groups > 1 and groups == module.in_channels
        return LayerShape(
            name, "dwconv2d" if depthwise else "conv2d", module.in_channels,
            module.out_channels, _pair(module.kernel_size), _pair(module.stride), groups,
            (x.shape[-2], x.shape[-1]), (y.shape[-2], y.shape[-1]), w_bits, a_bits,
        )  # fmt: skip
    if isinstance(module, nn.Conv1d):
        return LayerShape(
            name, "conv1d", module.in_channels, module.out_channels,
            (1, module.kernel_size[0]), (1, module.stride[0]), module.groups,
            (1, x.shape[-1]), (1, y.shape[-1]), w_bits, a_bits,
        )  # fmt: skip
    if isinstance(module, nn.Linear):
        rows = math.prod(y.shape[1:-1]) if y.dim() > 2 else 1  # tokens of a sequence model
        return LayerShape(
            name, "linear", module.in_features, module.out_features, (1, 1), (1, 1), 1,
            (1, rows), (1, rows), w_bits, a_bits,
        )  # fmt: skip
    raise TypeError(f"no layer shape for {type(module).__name__}")


def model_layer_shapes(
    model: nn.Module,
    example: torch.Tensor,
    bits: Mapping[str, tuple[BitWidth, BitWidth]] | None = None,
) -> list[LayerShape]:
    """Every Conv1d/Conv2d/Linear layer of ``model`` in execution order, for one sample.

    ``bits`` overrides the W/A widths by layer name (a plan's entries); otherwise quantized
    layers report their own widths and float layers count as 8/8.
    """
    records: list[LayerShape] = []
    hooks = []
    for name, module in model.named_modules():
        if isinstance(module, nn.Conv1d | nn.Conv2d | nn.Linear):

            def hook(mod: nn.Module, inputs: Any, output: Any, _name: str = name) -> None:
                records.append(layer_shape(_name, mod, inputs[0], output))

            hooks.append(module.register_forward_hook(hook))
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(example[:1])
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    if bits:
        records = [r.with_bits(*bits[r.name]) if r.name in bits else r for r in records]
    return records
