"""Whole-model quantization: list the quantizable layers, apply a plan, calibrate (PTQ)."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

from mico.errors import CalibrationError
from mico.quant.layers import BitConv2d, BitLayer, BitLinear
from mico.quant.plan import QuantPlan
from mico.quant.scales import ScaleMethod

QUANTIZABLE = (nn.Conv2d, nn.Linear)


def quantizable_layers(model: nn.Module) -> list[str]:
    """Names of the layers a plan gives bit-widths to (Conv2d and Linear), in module order."""
    return [name for name, m in model.named_modules() if isinstance(m, QUANTIZABLE)]


def bit_layers(model: nn.Module) -> dict[str, BitLayer]:
    return {name: m for name, m in model.named_modules() if isinstance(m, BitLayer)}


def apply_plan(model: nn.Module, plan: QuantPlan, scale_method: ScaleMethod = "mse") -> nn.Module:
    """A copy of ``model`` whose Conv2d / Linear layers are Bit* layers with the plan's bits.

    The plan is validated against the model first; the original model is left untouched.
    """
    plan = plan.validate_for(quantizable_layers(model))
    qmodel = copy.deepcopy(model)
    for name, bits in plan.items():
        parent_name, _, child = name.rpartition(".")
        parent = qmodel.get_submodule(parent_name) if parent_name else qmodel
        layer = getattr(parent, child)
        convert = BitConv2d if isinstance(layer, nn.Conv2d) else BitLinear
        setattr(parent, child, convert.from_float(layer, bits.w, bits.a, scale_method))
    return qmodel


def calibrate(
    qmodel: nn.Module, batches: Iterable[torch.Tensor], max_batches: int | None = None
) -> nn.Module:
    """Post-training calibration: observe inputs on ``batches``, fix every scale, enter ``quant``.

    Layers are calibrated one after another, each with the layers before it already quantized,
    so every scale is chosen for the values that layer really receives on the device.
    """
    layers = bit_layers(qmodel)
    if not layers:
        raise CalibrationError("the model has no Bit* layers; call mico.quant.apply_plan first")
    data = []
    for i, batch in enumerate(batches):
        if max_batches is not None and i >= max_batches:
            break
        data.append(batch[0] if isinstance(batch, list | tuple) else batch)
    if not data:
        raise CalibrationError("calibration got no batches; pass a non-empty iterable of inputs")
    was_training = qmodel.training
    qmodel.eval()
    for layer in layers.values():
        layer.mode = "float"
    with torch.no_grad():
        for layer in layers.values():
            layer.begin_calibration()
            for x in data:
                qmodel(x)
            layer.end_calibration()
    qmodel.train(was_training)
    return qmodel


@contextmanager
def float_mode(qmodel: nn.Module) -> Iterator[nn.Module]:
    """Temporarily run every Bit* layer in FP32 (for graph export)."""
    layers = bit_layers(qmodel)
    saved = {name: layer.mode for name, layer in layers.items()}
    for layer in layers.values():
        layer.mode = "float"
    try:
        yield qmodel
    finally:
        for name, layer in layers.items():
            layer.mode = saved[name]
