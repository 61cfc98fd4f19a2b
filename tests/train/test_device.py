"""Training device selection (seed 003 trains on a GPU when present; the CPU is the default)."""

from __future__ import annotations

import pytest
import torch

from mico.data import digits_loaders
from mico.models import SmallCNN
from mico.train.loop import fit, pick_device


def test_auto_picks_what_is_present():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert pick_device("auto").type == expected
    assert pick_device("cpu").type == "cpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_cuda_without_a_gpu_is_a_clear_error():
    with pytest.raises(ValueError, match="no CUDA GPU is present; use 'auto'"):
        pick_device("cuda")


def test_training_on_auto_leaves_the_model_on_the_cpu():
    train_loader, test_loader = digits_loaders(batch_size=128)
    model = SmallCNN()
    history = model.train_loop(1, train_loader, test_loader, verbose=False, device="auto")
    assert len(history) == 1 and "test_accuracy" in history[0]
    assert all(p.device.type == "cpu" for p in model.parameters())


@pytest.mark.parametrize("lr", [0.0, -1.0, float("nan")])
def test_bad_learning_rates_are_refused(lr):
    train_loader, _ = digits_loaders(batch_size=128)
    with pytest.raises(ValueError, match="learning rate must be positive"):
        fit(SmallCNN(), train_loader, 1, lr=lr)
