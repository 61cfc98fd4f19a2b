"""A train/test split held in memory, and the loaders built from it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from mico.errors import DatasetError


@dataclass(frozen=True)
class DatasetSplit:
    """A named train/test split, the common in-memory form of every mico data set.

    Classification sets hold float32 inputs ``(N, C, H, W)``, ``(N, C, L)`` or ``(N, F)`` and
    int64 labels ``(N,)``; token sets hold int64 inputs ``(N, T)`` and int64 next-token targets
    ``(N, T)``. ``classes`` names the labels when known; ``metadata`` carries reader details
    (feature parameters, the tokenizer, normalization statistics).
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    classes: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        parts = (("train", self.x_train, self.y_train), ("test", self.x_test, self.y_test))
        for part, x, y in parts:
            if len(x) != len(y):
                raise DatasetError(
                    f"dataset '{self.name}': {part} inputs hold {len(x)} samples but "
                    f"{part} labels hold {len(y)}; both must have the same length"
                )
        if self.classes and len(self.classes) != self.num_classes:
            raise DatasetError(
                f"dataset '{self.name}': {len(self.classes)} class names given for "
                f"{self.num_classes} classes"
            )

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one sample (without the batch dimension)."""
        return tuple(self.x_train.shape[1:])

    def loaders(
        self,
        batch_size: int = 64,
        seed: int = 0,
        num_workers: int = 0,
        shuffle: bool = True,
    ) -> tuple[DataLoader, DataLoader]:
        """Training loader (shuffled by ``seed`` unless ``shuffle=False``), ordered test loader."""
        if batch_size < 1:
            raise DatasetError(f"batch_size must be a positive integer, got {batch_size}")
        if num_workers < 0:
            raise DatasetError(f"num_workers must be >= 0, got {num_workers}")
        generator = torch.Generator().manual_seed(seed)
        train = TensorDataset(torch.from_numpy(self.x_train), torch.from_numpy(self.y_train))
        test = TensorDataset(torch.from_numpy(self.x_test), torch.from_numpy(self.y_test))
        return (
            DataLoader(
                train,
                batch_size=batch_size,
                shuffle=shuffle,
                generator=generator if shuffle else None,
                num_workers=num_workers,
            ),
            DataLoader(test, batch_size=batch_size, shuffle=False, num_workers=num_workers),
        )
