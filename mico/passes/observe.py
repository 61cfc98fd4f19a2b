"""Observe the real-valued range of every tensor of an IR graph on calibration samples.

The static lowering needs a scale for the tensors no quantized layer dictates (residual add
and concat inputs and outputs, pooled tensors, the model output): it runs the float version of
the graph -- the extracted IR, whose ``mico.bit_*`` nodes compute what the quantized PyTorch
model computes -- on the calibration samples and records every value's minimum and maximum.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from mico.errors import CalibrationError
from mico.execute.executor import run_ir
from mico.ir.graph import Graph, Node


def _samples(calibration: Iterable[Any]) -> list[torch.Tensor]:
    """Single samples (batch 1) from batches, ``(inputs, labels)`` pairs or arrays."""
    found: list[torch.Tensor] = []
    for batch in calibration:
        if isinstance(batch, list | tuple):
            batch = batch[0]
        tensor = batch if isinstance(batch, torch.Tensor) else torch.as_tensor(np.asarray(batch))
        if tensor.dim() == 0:
            raise CalibrationError("a calibration batch must have a batch dimension")
        found.extend(tensor[i : i + 1] for i in range(tensor.shape[0]))
    return found


def observe_ranges(graph: Graph, calibration: Iterable[Any]) -> dict[int, tuple[float, float]]:
    """``id(value) -> (min, max)`` over every input and node output of ``graph``.

    The graph is run one sample at a time (extracted graphs have batch size 1).
    """
    samples = _samples(calibration)
    if not samples:
        raise CalibrationError(
            "the static lowering got no calibration samples; pass a few input batches (the ones "
            "mico.quant.calibrate used are a good choice)"
        )
    ranges: dict[int, tuple[float, float]] = {}

    def record(key: int, tensor: Any) -> None:
        if not isinstance(tensor, torch.Tensor) or tensor.numel() == 0:
            return
        if not (tensor.dtype.is_floating_point or tensor.dtype in (torch.int32, torch.int64)):
            return
        lo, hi = float(tensor.min()), float(tensor.max())
        if key in ranges:
            old_lo, old_hi = ranges[key]
            lo, hi = min(lo, old_lo), max(hi, old_hi)
        ranges[key] = (lo, hi)

    def on_node(node: Node, results: list[torch.Tensor]) -> None:
        for value, tensor in zip(node.outputs, results, strict=False):
            record(id(value), tensor)

    for sample in samples:
        dtype = graph.inputs[0].type.dtype.to_torch() if graph.inputs else sample.dtype
        x = sample.to(dtype)
        if graph.inputs:
            record(id(graph.inputs[0]), x)
        run_ir(graph, [x] if len(graph.inputs) == 1 else x, on_node=on_node)
    return ranges
