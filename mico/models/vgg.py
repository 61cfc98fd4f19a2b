"""A small VGG with BatchNorm for CIFAR-10."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from mico.models.base import MiCoModel
from mico.models.layers import ConvBNReLU, global_avg_pool
from mico.models.zoo import register_model

#: conv widths and ``"M"`` (2x2 max-pool); 32 -> 16 -> 8 -> 4 for CIFAR.
VGG_SMALL: tuple[int | str, ...] = (16, 16, "M", 32, 32, "M", 64, 64, "M")


@register_model(
    "vgg",
    input_shape=(3, 32, 32),
    dataset="cifar10",
    description="VGG-small: 6 conv3x3-BN-ReLU, 3 max-pools, 2 linear (~77k params)",
)
class VGG(MiCoModel):
    """VGG-style CIFAR net: stacks of ``conv3x3-BN-ReLU`` separated by 2x2 max-pooling.

    Default ``cfg`` ``(16, 16, M, 32, 32, M, 64, 64, M)``, then global average pooling and a
    classifier ``Linear(64, hidden) -> ReLU -> Linear(hidden, classes)``. About 77k parameters,
    8 quantizable layers (6 Conv2d, 2 Linear).
    """

    default_input_shape = (3, 32, 32)

    def __init__(
        self,
        in_channels: int = 3,
        num_classes: int = 10,
        cfg: Sequence[int | str] = VGG_SMALL,
        hidden: int = 64,
    ) -> None:
        super().__init__()
        self.default_input_shape = (in_channels, 32, 32)
        layers: list[nn.Module] = []
        c_in = in_channels
        for item in cfg:
            if item == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                layers.append(ConvBNReLU(c_in, int(item), 3))
                c_in = int(item)
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Linear(c_in, hidden), nn.ReLU(), nn.Linear(hidden, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(global_avg_pool(self.features(x)))
