"""Training and evaluation loops."""

from mico.train.loop import accuracy, predict, train

__all__ = ["accuracy", "predict", "train"]
