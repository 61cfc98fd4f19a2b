"""FP32 (or fake-quant) training and evaluation loops."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

Log = Callable[[str], None]


def train(
    model: nn.Module,
    loader: DataLoader,
    epochs: int,
    lr: float = 1e-2,
    log: Log | None = None,
    test_loader: DataLoader | None = None,
) -> nn.Module:
    """Train with Adam and cross-entropy; log loss (and test accuracy) after each epoch."""
    if epochs < 0:
        raise ValueError(f"epochs must be >= 0, got {epochs}")
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(epochs, 1))
    for epoch in range(epochs):
        model.train()
        total, seen = 0.0, 0
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss.item() * len(y)
            seen += len(y)
        scheduler.step()
        if log:
            msg = f"epoch {epoch + 1}/{epochs}  loss {total / max(seen, 1):.4f}"
            if test_loader is not None:
                msg += f"  test acc {accuracy(model, test_loader):.4f}"
            log(msg)
    model.eval()
    return model


@torch.no_grad()
def predict(model: nn.Module, loader: DataLoader) -> torch.Tensor:
    """Model outputs for every sample of ``loader``, concatenated."""
    model.eval()
    return torch.cat([model(x) for x, _ in loader])


@torch.no_grad()
def accuracy(model: nn.Module, loader: DataLoader) -> float:
    """Top-1 accuracy over ``loader``."""
    model.eval()
    correct = seen = 0
    for x, y in loader:
        correct += int((model(x).argmax(dim=1) == y).sum())
        seen += len(y)
    return correct / max(seen, 1)
