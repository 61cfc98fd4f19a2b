"""A small CNN: two 3x3 conv layers, each followed by ReLU and 2x2 max-pooling, then a linear."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class SmallCNN(nn.Module):
    """conv1 -> relu -> pool -> conv2 -> relu -> pool -> flatten -> fc.

    Sized for 8x8 digits by default (about 2.4k parameters); ``image_size`` must be divisible by 4.
    """

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
        self.conv1 = nn.Conv2d(in_channels, c1, 3, padding=1)
        self.conv2 = nn.Conv2d(c1, c2, 3, padding=1)
        self.fc = nn.Linear(c2 * (image_size // 4) ** 2, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(torch.flatten(x, 1))
