"""ShuffleNetV2 (Ma et al. 2018), scaled down for 32x32 CIFAR images."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from mico.models.base import MiCoModel
from mico.models.layers import ConvBNReLU, global_avg_pool
from mico.models.zoo import register_model


def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    """``(N, g*k, H, W) -> (N, k*g, H, W)``: interleave the channels of the ``groups`` groups."""
    return x.unflatten(1, (groups, -1)).transpose(1, 2).flatten(1, 2)


class ShuffleUnit(nn.Module):
    """A ShuffleNetV2 unit.

    Stride 1: split the channels in half, keep one half, pass the other through
    ``conv1x1-BN-ReLU -> dw3x3-BN -> conv1x1-BN-ReLU``, concat, shuffle.
    Stride 2 (downsampling): both branches see the whole input, the left one is
    ``dw3x3(s2)-BN -> conv1x1-BN-ReLU``; the output has ``out_channels`` channels.
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        if out_channels % 2:
            raise ValueError(f"ShuffleNetV2 widths must be even, got {out_channels}")
        if stride == 1 and in_channels != out_channels:
            raise ValueError("a stride-1 shuffle unit keeps the width")
        self.stride = stride
        branch = out_channels // 2
        self.split = in_channels // 2
        self.left: nn.Module = nn.Identity()
        if stride != 1:
            self.left = nn.Sequential(
                ConvBNReLU(
                    in_channels, in_channels, 3, stride, groups=in_channels, activation=None
                ),
                ConvBNReLU(in_channels, branch, 1),
            )
        right_in = in_channels if stride != 1 else self.split
        self.right = nn.Sequential(
            ConvBNReLU(right_in, branch, 1),
            ConvBNReLU(branch, branch, 3, stride, groups=branch, activation=None),
            ConvBNReLU(branch, branch, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:  # fixed at construction: no data-dependent control flow
            out = torch.cat([x[:, : self.split], self.right(x[:, self.split :])], dim=1)
        else:
            out = torch.cat([self.left(x), self.right(x)], dim=1)
        return channel_shuffle(out, 2)


@register_model(
    "shufflenetv2",
    input_shape=(3, 32, 32),
    dataset="cifar10",
    description="ShuffleNetV2 for CIFAR: 3 stages x 2 units, widths 32/64/128 (~51k params)",
)
class ShuffleNetV2(MiCoModel):
    """ShuffleNetV2 for CIFAR: stem ``conv3x3(24)`` (stride 1, no max-pool), three stages of
    shuffle units (first one stride 2) with widths ``stage_channels`` (default 32/64/128,
    2 units each), a ``conv1x1(last_channels)`` head, global average pooling, linear.

    About 51k parameters, 27 quantizable layers (26 Conv2d of which 9 depthwise, 1 Linear).
    """

    default_input_shape = (3, 32, 32)

    def __init__(
        self,
        in_channels: int = 3,
        num_classes: int = 10,
        stage_channels: Sequence[int] = (32, 64, 128),
        stage_repeats: Sequence[int] = (2, 2, 2),
        stem_channels: int = 24,
        last_channels: int = 128,
    ) -> None:
        super().__init__()
        if len(stage_channels) != len(stage_repeats):
            raise ValueError("stage_channels and stage_repeats must have the same length")
        self.default_input_shape = (in_channels, 32, 32)
        self.stem = ConvBNReLU(in_channels, stem_channels, 3)
        units: list[nn.Module] = []
        c_in = stem_channels
        for c_out, n in zip(stage_channels, stage_repeats, strict=True):
            units.append(ShuffleUnit(c_in, c_out, 2))
            units += [ShuffleUnit(c_out, c_out, 1) for _ in range(n - 1)]
            c_in = c_out
        self.stages = nn.Sequential(*units)
        self.head = ConvBNReLU(c_in, last_channels, 1)
        self.fc = nn.Linear(last_channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(global_avg_pool(self.head(self.stages(self.stem(x)))))
