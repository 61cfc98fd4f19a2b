"""``MiCoModel``: the base of every zoo model, with MiCo's training / quantization interface.

Any ``nn.Module`` can be quantized with :func:`mico.quant.quantize_model`; a ``MiCoModel`` adds
the seed framework's conveniences on top: ``n_layers``, ``set_qscheme``, ``train_loop``, ``test``,
checkpoints that remember the model and its plan, and a default example input.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from mico.quant import (
    QuantConfig,
    QuantPlan,
    list_quantize_layers,
    quantizable_layers,
    quantize_model,
)


class MiCoModel(nn.Module):
    """Base class of the zoo models.

    Subclasses set ``default_input_shape`` (one sample, no batch dimension) and, for token
    inputs, ``input_dtype = torch.long``. Language models set ``task = "language"``: their
    outputs are ``(N, T, vocab)`` logits and targets ``(N, T)`` next tokens.
    """

    default_input_shape: tuple[int, ...] = ()
    input_dtype: torch.dtype = torch.float32
    task: str = "classification"
    zoo_name: str | None = None

    def __new__(cls, *args: Any, **kwargs: Any) -> MiCoModel:
        model = super().__new__(cls)
        # The constructor arguments, so that a checkpoint can rebuild the same model.
        object.__setattr__(model, "init_args", (args, dict(kwargs)))
        return model

    # ----------------------------------------------------------------- inputs and layers
    def example_input(self, batch_size: int = 1) -> torch.Tensor:
        """A zero input of the model's default shape (token 0 for language models)."""
        if not self.default_input_shape:
            raise NotImplementedError(
                f"{type(self).__name__} does not set default_input_shape: set it to one "
                "sample's shape without the batch, e.g. `default_input_shape = (1, 28, 28)` in "
                "the class or `self.default_input_shape = (1, 28, 28)` in __init__"
            )
        return torch.zeros((batch_size, *self.default_input_shape), dtype=self.input_dtype)

    @property
    def n_layers(self) -> int:
        """The number of quantizable layers (Conv1d, Conv2d, Linear), counted on a forward pass.

        Seed-style subclasses may assign it (``self.n_layers = 5``); the assigned value must
        match the count once the model can run, so a wrong number never reaches a search.
        """
        declared = self.__dict__.get("_declared_n_layers")
        if declared is not None and not self.default_input_shape:
            return declared
        counted = len(self.quantize_layer_names())
        if declared is not None and declared != counted:
            from mico.errors import PlanError

            raise PlanError(
                f"{type(self).__name__} sets n_layers = {declared} but has {counted} quantizable "
                "layers (Conv1d, Conv2d, Linear); remove the assignment or correct it"
            )
        return counted

    @n_layers.setter
    def n_layers(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            from mico.errors import PlanError

            raise PlanError(f"n_layers must be a non-negative integer, got {value!r}")
        self.__dict__["_declared_n_layers"] = value

    def quantize_layer_names(self) -> list[str]:
        """Names of the quantizable layers in execution order."""
        return quantizable_layers(self, self.example_input())

    def get_qlayers(self) -> list[nn.Module]:
        """The quantizable layers themselves, in execution order."""
        return list_quantize_layers(self, self.example_input())

    # ----------------------------------------------------------------- quantization
    def set_qscheme(
        self,
        qscheme: Sequence[Sequence[float]] | QuantPlan | str,
        config: QuantConfig | None = None,
        **options: Any,
    ) -> MiCoModel:
        """Quantize in place: ``[[w bits…], [a bits…]]`` in execution order, or a plan.

        Activations default to ``dynamic`` scales (computed per inference, as in MiCo), so
        the model trains (QAT) and evaluates right away; pass ``act_mode="static"`` and
        calibrate for integer-only deployment. ``options`` are :class:`QuantConfig` fields.
        """
        if config is None:
            config = QuantConfig(**{"act_mode": "dynamic", **options})
        elif options:
            config = config.replace(**options)
        quantize_model(self, qscheme, config=config, example_inputs=self.example_input())
        return self

    # ----------------------------------------------------------------- training
    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Cross-entropy over classes (over every position for language models)."""
        if self.task == "language":
            logits = output.reshape(-1, output.shape[-1])
            return nn.functional.cross_entropy(logits, target.reshape(-1))
        return nn.functional.cross_entropy(output, target)

    def train_loop(
        self,
        epochs: int,
        train_loader: DataLoader,
        test_loader: DataLoader | None = None,
        lr: float = 1e-3,
        verbose: bool = True,
        *,
        weight_decay: float = 0.0,
        log: Callable[[str], None] | None = None,
        device: str | torch.device = "cpu",
    ) -> list[dict[str, float]]:
        """Train with Adam and a cosine schedule; return per-epoch loss (and test accuracy).

        ``device="auto"`` trains on a GPU when one is present (the model returns to the CPU).
        """
        from mico.train.loop import fit  # late import: mico.train imports the models

        return fit(
            self,
            train_loader,
            epochs,
            lr=lr,
            test_loader=test_loader,
            loss_fn=self.loss,
            progress=verbose,
            log=log if log is not None else (print if verbose else None),
            weight_decay=weight_decay,
            device=device,
        )

    def test(self, test_loader: DataLoader) -> float:
        """Top-1 accuracy on ``test_loader`` (per token for language models)."""
        from mico.train.loop import accuracy

        return accuracy(self, test_loader)

    def test_quantized(
        self, test_loader: DataLoader, qscheme: Sequence[Sequence[float]] | None = None
    ) -> float:
        """Accuracy with quantization on; the model itself is left as it is.

        A quantized model is tested as quantized. A float model is tested on a copy quantized
        with ``qscheme`` (default: W8A8 everywhere, the seed's "INT8 accuracy") with dynamic
        activation scales, so nothing needs calibrating.
        """
        import copy

        from mico.quant import bit_layers
        from mico.train.loop import accuracy

        if bit_layers(self) and qscheme is None:
            return accuracy(self, test_loader)
        model = copy.deepcopy(self)
        n = len(model.quantize_layer_names())
        model.set_qscheme(qscheme if qscheme is not None else [[8] * n, [8] * n])
        return accuracy(model, test_loader)

    # ----------------------------------------------------------------- checkpoints
    def save(self, path: str | Path, **extra: Any) -> Path:
        """Write a checkpoint recording the model, its arguments, plan and mico version."""
        from mico.train.checkpoint import save_checkpoint

        return save_checkpoint(self, path, **extra)

    def load(self, path: str | Path, strict: bool = True) -> MiCoModel:
        """Load a :meth:`save` checkpoint into this model, refusing one of another model."""
        from mico.train.checkpoint import load_checkpoint

        load_checkpoint(path, self, strict=strict)
        return self
