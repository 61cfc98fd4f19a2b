"""Multi-layer perceptrons: ``MLP`` (flattened images, 8x8 digits by default) and ``HARMLP``."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from mico.models.base import MiCoModel
from mico.models.zoo import register_model


@register_model(
    "mlp",
    input_shape=(1, 8, 8),
    dataset="digits",
    description="flatten -> 64 -> 32 -> 10 ReLU MLP for 8x8 digits (~6.6k params)",
)
class MLP(MiCoModel):
    """``flatten -> [Linear -> ReLU] * len(hidden) -> Linear``.

    ``input_shape`` is one sample's shape (flattened; default ``(1, 8, 8)`` digits), or give
    ``in_features`` for flat vectors. Default ``hidden=(64, 32)``: 6.6k parameters, 3 Linear layers.
    """

    default_input_shape = (1, 8, 8)

    def __init__(
        self,
        in_features: int | None = None,
        num_classes: int = 10,
        hidden: Sequence[int] = (64, 32),
        input_shape: Sequence[int] = (1, 8, 8),
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        shape = (in_features,) if in_features is not None else tuple(input_shape)
        self.default_input_shape = shape
        self.in_features = math.prod(shape)
        layers: list[nn.Module] = []
        width = self.in_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            if dropout:
                layers.append(nn.Dropout(dropout))
            width = h
        layers.append(nn.Linear(width, num_classes))
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(torch.flatten(x, 1))


@register_model(
    "harmlp",
    input_shape=(561,),
    dataset="ucihar",
    description="561 UCI-HAR features -> 64 -> 32 -> 6 activities (~38k params)",
)
class HARMLP(MLP):
    """MLP for UCI-HAR human activity recognition: 561 features -> 64 -> 32 -> 6 classes.

    About 38k parameters, 3 Linear layers.
    """

    default_input_shape = (561,)

    def __init__(
        self,
        in_features: int = 561,
        num_classes: int = 6,
        hidden: Sequence[int] = (64, 32),
        dropout: float = 0.0,
    ) -> None:
        super().__init__(in_features, num_classes, hidden, dropout=dropout)
