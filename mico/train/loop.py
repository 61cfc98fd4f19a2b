"""Training and evaluation loops for classifiers and language models (FP32, QAT alike)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

Log = Callable[[str], None]
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def seed_everything(seed: int) -> None:
    """Seed Python, numpy and torch, so a run repeats exactly on the same machine."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def default_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy; ``(N, T, V)`` logits against ``(N, T)`` targets count every position."""
    if output.dim() == 3 and target.dim() == 2:
        return F.cross_entropy(output.reshape(-1, output.shape[-1]), target.reshape(-1))
    return F.cross_entropy(output, target)


def fit(
    model: nn.Module,
    loader: DataLoader,
    epochs: int,
    lr: float = 1e-3,
    test_loader: DataLoader | None = None,
    loss_fn: LossFn = default_loss,
    progress: bool = False,
    log: Log | None = None,
    weight_decay: float = 0.0,
    device: str | torch.device = "cpu",
) -> list[dict[str, float]]:
    """Train with Adam and a cosine schedule; return one record per epoch.

    Each record has ``epoch``, ``loss`` (mean training loss), ``seconds`` and, with a
    ``test_loader``, ``test_accuracy``. ``progress`` shows a tqdm bar per epoch. ``device``:
    ``"cpu"`` (default), ``"cuda"``, or ``"auto"`` (a GPU when one is present); the model is
    back on the CPU afterwards, where quantization and code generation run.
    """
    if epochs < 0:
        raise ValueError(f"epochs must be >= 0, got {epochs}")
    if not lr > 0:  # also refuses NaN
        raise ValueError(f"the learning rate must be positive, got {lr}")
    target = pick_device(device)
    model.to(target)
    try:
        return _fit_on(model, loader, epochs, lr, test_loader, loss_fn, progress, log,
                       weight_decay, target)  # fmt: skip
    finally:
        model.to("cpu")


def pick_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"``: the first CUDA GPU when one is present, else the CPU; others as given."""
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    chosen = torch.device(device)
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was asked for but no CUDA GPU is present; use 'auto'")
    return chosen


def _fit_on(
    model: nn.Module,
    loader: DataLoader,
    epochs: int,
    lr: float,
    test_loader: DataLoader | None,
    loss_fn: LossFn,
    progress: bool,
    log: Log | None,
    weight_decay: float,
    device: torch.device,
) -> list[dict[str, float]]:
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(epochs, 1))
    history: list[dict[str, float]] = []
    for epoch in range(epochs):
        model.train()
        total, seen, start = 0.0, 0, time.perf_counter()
        batches = tqdm(
            loader, desc=f"epoch {epoch + 1}/{epochs}", leave=False, disable=not progress
        )
        for x, y in batches:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            if not torch.isfinite(loss):
                raise FloatingPointError(
                    f"the training loss became {loss.item()} in epoch {epoch + 1}; lower the "
                    f"learning rate (now {lr})"
                )
            loss.backward()
            optimizer.step()
            total += loss.item() * len(y)
            seen += len(y)
            batches.set_postfix(loss=f"{total / max(seen, 1):.4f}")
        scheduler.step()
        record = {
            "epoch": epoch + 1,
            "loss": total / max(seen, 1),
            "seconds": time.perf_counter() - start,
        }
        if test_loader is not None:
            record["test_accuracy"] = accuracy(model, test_loader, device=device)
        history.append(record)
        if log:
            msg = f"epoch {epoch + 1}/{epochs}  loss {record['loss']:.4f}"
            if "test_accuracy" in record:
                msg += f"  test acc {record['test_accuracy']:.4f}"
            log(msg)
    model.eval()
    return history


def train(
    model: nn.Module,
    loader: DataLoader,
    epochs: int,
    lr: float = 1e-2,
    log: Log | None = None,
    test_loader: DataLoader | None = None,
) -> nn.Module:
    """Train (see :func:`fit`) and return the model, in eval mode."""
    fit(model, loader, epochs, lr=lr, test_loader=test_loader, log=log)
    return model


@torch.no_grad()
def predict(model: nn.Module, loader: DataLoader) -> torch.Tensor:
    """Model outputs for every sample of ``loader``, concatenated."""
    model.eval()
    return torch.cat([model(x) for x, _ in loader])


@torch.no_grad()
def accuracy(
    model: nn.Module, loader: DataLoader, device: str | torch.device | None = None
) -> float:
    """Top-1 accuracy over ``loader`` (over every position for sequence outputs).

    Batches go to ``device`` (default: where the model's parameters are)."""
    model.eval()
    if device is None:
        first = next(model.parameters(), None)
        device = first.device if first is not None else torch.device("cpu")
    correct = seen = 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        predicted = model(x).argmax(dim=-1)
        correct += int((predicted == y).sum())
        seen += y.numel()
    return correct / max(seen, 1)
