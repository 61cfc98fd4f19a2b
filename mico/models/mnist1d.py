"""A small Conv1d network for MNIST-1D (Greydanus 2020)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mico.models.base import MiCoModel
from mico.models.zoo import register_model


@register_model(
    "mnist1d_cnn",
    input_shape=(1, 40),
    dataset="mnist1d",
    description="3 Conv1d(32) + linear for MNIST-1D (~9.6k params)",
)
class MNIST1DCNN(MiCoModel):
    """Conv1d net for the 40-sample MNIST-1D signals, input ``(1, 40)``.

    ``conv1d(k5, 32) -> conv1d(k3, s2, 32) -> conv1d(k3, s2, 32)`` with ReLU (40 -> 20 -> 10
    samples), flatten (320), linear to 10 classes. About 9.6k parameters, 4 quantizable layers
    (3 Conv1d, 1 Linear); reaches about 90% test accuracy in a few CPU seconds.
    """

    default_input_shape = (1, 40)

    def __init__(
        self,
        in_channels: int = 1,
        num_classes: int = 10,
        channels: int = 32,
        length: int = 40,
    ) -> None:
        super().__init__()
        if length % 4:
            raise ValueError(f"length must be divisible by 4 (two stride-2 convs), got {length}")
        self.default_input_shape = (in_channels, length)
        self.conv1 = nn.Conv1d(in_channels, channels, 5, padding=2)
        self.conv2 = nn.Conv1d(channels, channels, 3, stride=2, padding=1)
        self.conv3 = nn.Conv1d(channels, channels, 3, stride=2, padding=1)
        self.fc = nn.Linear(channels * (length // 4), num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.relu(self.conv3(x))
        return self.fc(torch.flatten(x, 1))
