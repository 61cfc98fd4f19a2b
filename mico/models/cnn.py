"""Small plain CNNs: ``SmallCNN`` for 8x8 digits and ``CNN`` for CIFAR-10."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mico.models.base import MiCoModel
from mico.models.layers import ConvBNReLU, global_avg_pool
from mico.models.zoo import register_model


@register_model(
    "small_cnn",
    input_shape=(1, 8, 8),
    dataset="digits",
    description="2 conv + 1 linear for 8x8 digits (~1.9k params)",
)
class SmallCNN(MiCoModel):
    """conv1 -> relu -> pool -> conv2 -> relu -> pool -> flatten -> fc.

    Sized for 8x8 digits by default (about 1.9k parameters); ``image_size`` must be divisible by 4.
    Three quantizable layers: ``conv1``, ``conv2``, ``fc``.
    """

    default_input_shape = (1, 8, 8)

    def __init__(
        self,
        in_channels: int = 1,
        num_classes: int = 10,
        channels: tuple[int, int] = (8, 16),
        image_size: int = 8,
    ) -> None:
        super().__init__()
        if image_size % 4:
            raise ValueError(
                f"image_size must be divisible by 4 (two 2x2 poolings), got {image_size}"
            )
        c1, c2 = channels
        self.default_input_shape = (in_channels, image_size, image_size)
        self.conv1 = nn.Conv2d(in_channels, c1, 3, padding=1)
        self.conv2 = nn.Conv2d(c1, c2, 3, padding=1)
        self.fc = nn.Linear(c2 * (image_size // 4) ** 2, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(torch.flatten(x, 1))


@register_model(
    "cnn",
    input_shape=(3, 32, 32),
    dataset="cifar10",
    description="3 conv-BN-ReLU-pool stages + linear for CIFAR-10 (~24k params)",
)
class CNN(MiCoModel):
    """A small CIFAR-10 CNN: three ``conv3x3-BN-ReLU-maxpool2`` stages, global pool, linear.

    Default channels ``(16, 32, 64)``: about 24k parameters, 4 quantizable layers (3 Conv2d,
    1 Linear). Any input size whose sides are divisible by 8 works (global average pooling).
    """

    default_input_shape = (3, 32, 32)

    def __init__(
        self,
        in_channels: int = 3,
        num_classes: int = 10,
        channels: tuple[int, ...] = (16, 32, 64),
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c_in = in_channels
        for c in channels:
            layers += [ConvBNReLU(c_in, c, 3), nn.MaxPool2d(2)]
            c_in = c
        self.default_input_shape = (in_channels, 32, 32)
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(c_in, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(global_avg_pool(self.features(x)))
