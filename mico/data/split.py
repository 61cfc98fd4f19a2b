"""A train/test split held in memory, and the loaders built from it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset


@dataclass(frozen=True)
class DatasetSplit:
    """Inputs are float32 ``(N, C, H, W)`` (or ``(N, F)``), labels int64 ``(N,)``."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one sample (without the batch dimension)."""
        return tuple(self.x_train.shape[1:])

    def loaders(self, batch_size: int = 64, seed: int = 0) -> tuple[DataLoader, DataLoader]:
        """Shuffled (seeded) training loader and ordered test loader."""
        generator = torch.Generator().manual_seed(seed)
        train = TensorDataset(torch.from_numpy(self.x_train), torch.from_numpy(self.y_train))
        test = TensorDataset(torch.from_numpy(self.x_test), torch.from_numpy(self.y_test))
        return (
            DataLoader(train, batch_size=batch_size, shuffle=True, generator=generator),
            DataLoader(test, batch_size=batch_size, shuffle=False),
        )
