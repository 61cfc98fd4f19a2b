"""MobileNetV2 (Sandler et al. 2018), scaled down for 32x32 CIFAR images."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from mico.models.base import MiCoModel
from mico.models.layers import ConvBNReLU, global_avg_pool, make_divisible
from mico.models.zoo import register_model

#: ``(expansion t, channels c, repeats n, first stride s)`` per stage; 32 -> 16 -> 8 -> 4.
MOBILENETV2_TINY: tuple[tuple[int, int, int, int], ...] = (
    (1, 8, 1, 1),
    (6, 16, 2, 2),
    (6, 24, 2, 2),
    (6, 32, 1, 2),
)


class InvertedResidual(nn.Module):
    """``1x1 expand-BN-ReLU6 -> 3x3 depthwise-BN-ReLU6 -> 1x1 project-BN`` (+ x if same shape).

    The expansion conv is skipped when ``expand_ratio == 1``.
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        hidden = in_channels * expand_ratio
        self.use_residual = stride == 1 and in_channels == out_channels
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(ConvBNReLU(in_channels, hidden, 1, activation="relu6"))
        layers += [
            ConvBNReLU(hidden, hidden, 3, stride, groups=hidden, activation="relu6"),
            ConvBNReLU(hidden, out_channels, 1, activation=None),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.use_residual:  # fixed at construction: no data-dependent control flow
            return x + self.conv(x)
        return self.conv(x)


@register_model(
    "mobilenetv2",
    input_shape=(3, 32, 32),
    dataset="cifar10",
    description="MobileNetV2 for CIFAR: 6 inverted residual blocks, ReLU6 (~37k params)",
)
class MobileNetV2(MiCoModel):
    """MobileNetV2 for CIFAR: stem ``conv3x3(16)`` (stride 1), inverted residual blocks with
    depthwise 3x3 convs and ReLU6 (``MOBILENETV2_TINY``: 6 blocks, widths 8/16/24/32), a
    ``conv1x1(128)`` head, global average pooling and a linear classifier.

    ``width_mult`` scales every width (rounded to multiples of 8, head included when > 1).
    Default: about 37k parameters, 20 quantizable layers (19 Conv2d of which 6 depthwise,
    1 Linear).
    """

    default_input_shape = (3, 32, 32)

    def __init__(
        self,
        in_channels: int = 3,
        num_classes: int = 10,
        width_mult: float = 1.0,
        settings: Sequence[tuple[int, int, int, int]] = MOBILENETV2_TINY,
        stem_channels: int = 16,
        last_channels: int = 128,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if width_mult <= 0:
            raise ValueError(f"width_mult must be positive, got {width_mult}")
        self.width_mult = width_mult
        self.default_input_shape = (in_channels, 32, 32)
        c_in = make_divisible(stem_channels * width_mult)
        self.last_channels = make_divisible(last_channels * max(1.0, width_mult))
        layers: list[nn.Module] = [ConvBNReLU(in_channels, c_in, 3, 1, activation="relu6")]
        for t, c, n, s in settings:
            c_out = make_divisible(c * width_mult)
            for i in range(n):
                layers.append(InvertedResidual(c_in, c_out, s if i == 0 else 1, t))
                c_in = c_out
        layers.append(ConvBNReLU(c_in, self.last_channels, 1, activation="relu6"))
        self.features = nn.Sequential(*layers)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(self.last_channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(global_avg_pool(self.features(x))))
