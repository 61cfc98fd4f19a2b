"""``from_torch``: any ``nn.Module`` as a :class:`MiCoModel` (seed 003's route for outside models).

The wrapper adds what a zoo model has: a default example input, ``n_layers``, ``set_qscheme``,
``train_loop``/``test``, checkpoints. The wrapped module's layers keep their names under
``model.`` (``model.features.0``), which is what plans name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from mico.errors import ConfigError
from mico.models.base import MiCoModel


class TorchModel(MiCoModel):
    """A plain ``nn.Module`` with MiCo's training and quantization interface."""

    def __init__(
        self,
        model: nn.Module,
        input_shape: Sequence[int],
        input_dtype: torch.dtype = torch.float32,
        task: str = "classification",
    ) -> None:
        super().__init__()
        self.model = model
        self.default_input_shape = tuple(int(d) for d in input_shape)
        self.input_dtype = input_dtype
        self.task = task

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.model(*args, **kwargs)


def from_torch(
    model: nn.Module,
    input_shape: Sequence[int],
    input_dtype: torch.dtype = torch.float32,
    task: str = "classification",
) -> MiCoModel:
    """Wrap ``model`` so it trains, quantizes and compiles like a zoo model.

    ``input_shape`` is one sample's shape without the batch (``(3, 32, 32)``). The model must
    run on a zero input of that shape; a model that is already a ``MiCoModel`` is returned as is.
    """
    if isinstance(model, MiCoModel):
        return model
    if not isinstance(model, nn.Module):
        raise ConfigError(f"from_torch needs a torch.nn.Module, got {type(model).__name__}")
    shape = tuple(input_shape)
    if not shape or not all(isinstance(d, int) and d > 0 for d in shape):
        raise ConfigError(
            f"from_torch: input_shape must be positive sizes of one sample, got {shape}"
        )
    wrapped = TorchModel(model, shape, input_dtype, task)
    try:
        with torch.no_grad():
            was_training = model.training
            model.eval()
            wrapped(wrapped.example_input())
            model.train(was_training)
    except Exception as exc:
        raise ConfigError(
            f"from_torch: {type(model).__name__} does not run on an input of shape "
            f"(1, {', '.join(map(str, shape))}): {type(exc).__name__}: {str(exc)[:200]}"
        ) from None
    return wrapped
