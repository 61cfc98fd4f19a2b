"""Training and evaluation loops, seeding, checkpoints."""

from mico.train.checkpoint import Checkpoint, load_checkpoint, read_checkpoint, save_checkpoint
from mico.train.loop import accuracy, default_loss, fit, predict, seed_everything, train

__all__ = [
    "Checkpoint",
    "accuracy",
    "default_loss",
    "fit",
    "load_checkpoint",
    "predict",
    "read_checkpoint",
    "save_checkpoint",
    "seed_everything",
    "train",
]
