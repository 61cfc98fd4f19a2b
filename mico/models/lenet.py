"""LeNet-5 for 28x28 MNIST."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mico.models.base import MiCoModel
from mico.models.zoo import register_model


@register_model(
    "lenet",
    input_shape=(1, 28, 28),
    dataset="mnist",
    description="LeNet-5: 2 conv 5x5 + 3 linear for MNIST (~62k params)",
)
class LeNet(MiCoModel):
    """Classic LeNet-5: ``conv5x5(6, pad 2) -> pool -> conv5x5(16) -> pool -> 120 -> 84 -> N``.

    ReLU activations and 2x2 max-pooling; ``batch_norm=True`` adds BatchNorm after each conv.
    For (1, 28, 28) inputs: about 62k parameters, 5 quantizable layers (2 Conv2d, 3 Linear).
    ``image_size`` (square) sets the flatten size, e.g. 32 for CIFAR-sized inputs.
    """

    default_input_shape = (1, 28, 28)

    def __init__(
        self,
        in_channels: int = 1,
        num_classes: int = 10,
        batch_norm: bool = False,
        image_size: int = 28,
    ) -> None:
        super().__init__()
        side = (image_size // 2 - 4) // 2  # conv1 keeps the size, conv2 (no padding) trims 4
        if side < 1:
            raise ValueError(f"image_size must be at least 12 for LeNet, got {image_size}")
        self.default_input_shape = (in_channels, image_size, image_size)
        self.conv1 = nn.Conv2d(in_channels, 6, 5, padding=2, bias=not batch_norm)
        self.bn1 = nn.BatchNorm2d(6) if batch_norm else nn.Identity()
        self.conv2 = nn.Conv2d(6, 16, 5, bias=not batch_norm)
        self.bn2 = nn.BatchNorm2d(16) if batch_norm else nn.Identity()
        self.fc1 = nn.Linear(16 * side * side, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)
