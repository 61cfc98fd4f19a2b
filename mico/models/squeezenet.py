"""SqueezeNet (Iandola et al. 2016) with BatchNorm, sized for 32x32 CIFAR images."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from mico.models.base import MiCoModel
from mico.models.layers import ConvBNReLU, global_avg_pool
from mico.models.zoo import register_model


class Fire(nn.Module):
    """``squeeze conv1x1 -> concat(expand conv1x1, expand conv3x3)``, each conv with BN + ReLU."""

    def __init__(self, in_channels: int, squeeze: int, expand: int) -> None:
        super().__init__()
        self.squeeze = ConvBNReLU(in_channels, squeeze, 1)
        self.expand1x1 = ConvBNReLU(squeeze, expand, 1)
        self.expand3x3 = ConvBNReLU(squeeze, expand, 3)
        self.out_channels = 2 * expand

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.squeeze(x)
        return torch.cat([self.expand1x1(s), self.expand3x3(s)], dim=1)


#: ``(squeeze, expand)`` per fire module, ``None`` for a 2x2 max-pool.
SQUEEZENET_TINY: tuple[tuple[int, int] | None, ...] = (
    (8, 16),
    (8, 16),
    None,
    (16, 32),
    (16, 32),
    None,
    (24, 48),
)


@register_model(
    "squeezenet",
    input_shape=(3, 32, 32),
    dataset="cifar10",
    description="SqueezeNet for CIFAR: 5 fire modules with BN, conv1x1 classifier (~31k params)",
)
class SqueezeNet(MiCoModel):
    """SqueezeNet for CIFAR: ``conv3x3(32)-BN-ReLU -> pool``, fire modules (``SQUEEZENET_TINY``:
    5 fires with 2 pools, outputs 32/32/64/64/96 channels), then the SqueezeNet classifier:
    ``conv1x1(classes)`` and global average pooling (no Linear layer).

    About 31k parameters, 17 quantizable layers (all Conv2d).
    """

    default_input_shape = (3, 32, 32)

    def __init__(
        self,
        in_channels: int = 3,
        num_classes: int = 10,
        stem_channels: int = 32,
        fires: Sequence[tuple[int, int] | None] = SQUEEZENET_TINY,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.default_input_shape = (in_channels, 32, 32)
        layers: list[nn.Module] = [ConvBNReLU(in_channels, stem_channels, 3), nn.MaxPool2d(2)]
        c_in = stem_channels
        for spec in fires:
            if spec is None:
                layers.append(nn.MaxPool2d(2))
            else:
                fire = Fire(c_in, *spec)
                layers.append(fire)
                c_in = fire.out_channels
        self.features = nn.Sequential(*layers)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Conv2d(c_in, num_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return global_avg_pool(self.classifier(self.dropout(self.features(x))))
