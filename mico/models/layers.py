"""Building blocks shared by the zoo models (plain ``nn.Module`` compositions)."""

from __future__ import annotations

import torch
from torch import nn


def make_divisible(value: float, divisor: int = 8, min_value: int | None = None) -> int:
    """Round ``value`` to a multiple of ``divisor`` (MobileNet's rule: never drop below 90%)."""
    min_value = divisor if min_value is None else min_value
    rounded = max(min_value, int(value + divisor / 2) // divisor * divisor)
    if rounded < 0.9 * value:
        rounded += divisor
    return rounded


class ConvBNReLU(nn.Sequential):
    """``Conv2d(bias=False) -> BatchNorm2d -> ReLU`` (or ReLU6, or no activation)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int] = 3,
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] | None = None,
        groups: int = 1,
        activation: str | None = "relu",
    ) -> None:
        if padding is None:
            k = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
            padding = (k[0] // 2, k[1] // 2)
        layers: list[nn.Module] = [
            nn.Conv2d(
                in_channels, out_channels, kernel_size, stride, padding, groups=groups, bias=False
            ),
            nn.BatchNorm2d(out_channels),
        ]
        if activation == "relu":
            layers.append(nn.ReLU())
        elif activation == "relu6":
            layers.append(nn.ReLU6())
        elif activation is not None:
            raise ValueError(f"activation must be 'relu', 'relu6' or None, got {activation!r}")
        super().__init__(*layers)


class ConvBNReLU1d(nn.Sequential):
    """``Conv1d(bias=False) -> BatchNorm1d -> ReLU``."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int = 3,
        stride: int = 1,
        padding: int | None = None,
    ) -> None:
        padding = kernel_size // 2 if padding is None else padding
        super().__init__(
            nn.Conv1d(in_channels, out_channels, kernel_size, stride, padding, bias=False),
            nn.BatchNorm1d(out_channels),
            nn.ReLU(),
        )


def global_avg_pool(x: torch.Tensor) -> torch.Tensor:
    """Mean over every spatial / time dimension: ``(N, C, ...) -> (N, C)``."""
    return x.flatten(2).mean(-1)
