"""Shared fixtures: the digits split and a small model trained on it (cheap: about a second)."""

from __future__ import annotations

import pytest
import torch

from mico.data import DatasetSplit, load_dataset
from mico.models import SmallCNN
from mico.train import train


@pytest.fixture(scope="session")
def digits_split() -> DatasetSplit:
    return load_dataset("digits", seed=0)


@pytest.fixture(scope="session")
def trained_cnn(digits_split: DatasetSplit) -> SmallCNN:
    """A SmallCNN(4, 8) trained for 8 epochs (about 90% test accuracy)."""
    torch.manual_seed(0)
    model = SmallCNN(channels=(4, 8))
    train_loader, _ = digits_split.loaders(batch_size=64, seed=0)
    return train(model, train_loader, epochs=8)


@pytest.fixture(scope="session")
def calibration_batches(digits_split: DatasetSplit) -> list[torch.Tensor]:
    train_loader, _ = digits_split.loaders(batch_size=64, seed=0)
    return [x for x, _ in train_loader][:4]
