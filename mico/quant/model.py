"""Whole-model quantization of any ``nn.Module``: apply a plan, calibrate (PTQ), switch modes."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mico.errors import CalibrationError, PlanError
from mico.numerics import check_finite_parameters, check_finite_samples
from mico.quant.config import QuantConfig
from mico.quant.layers import BitLayer, bit_layer_for
from mico.quant.order import _as_tuple, quantizable_layers
from mico.quant.plan import QuantPlan
from mico.userfiles import path_kind

PlanLike = QuantPlan | Mapping[str, Any] | Sequence[Any] | str | Path


def bit_layers(model: nn.Module) -> dict[str, BitLayer]:
    """Every Bit* layer of ``model`` by name (registration order)."""
    return {name: m for name, m in model.named_modules() if isinstance(m, BitLayer)}


#: ``W/A`` with no layer name: the same widths for every layer
_UNIFORM = re.compile(r"^[^=,/\s]+/[^=,/\s]+\Z")


def as_plan(plan: PlanLike, layer_names: Sequence[str]) -> QuantPlan:
    """Any accepted plan form, checked against the model's layers and put in their order.

    Forms: a :class:`QuantPlan`; ``name=W/A,…`` text or a YAML file path; ``W/A`` alone for
    every layer (``"4/4"``, ``"1.58/8"``); a mapping ``{name: {w, a}}`` / ``{name: (w, a)}``;
    MiCo's ``[[w…], [a…]]``; or a flat ``[w…, a…]`` of twice the layer count (a searcher's point).
    """
    if (
        isinstance(plan, str)
        and _UNIFORM.match(plan.strip())
        and not plan.strip().endswith((".yaml", ".yml"))
        and path_kind(plan.strip()) in ("missing", "too-long")
    ):
        plan = ",".join(f"{name}={plan.strip()}" for name in layer_names)
    if isinstance(plan, QuantPlan):
        parsed = plan
    elif isinstance(plan, str | Path):
        parsed = QuantPlan.load(plan)
    elif isinstance(plan, Mapping):
        parsed = QuantPlan.from_dict(plan)
    elif isinstance(plan, Sequence):
        items = list(plan)
        nested = len(items) == 2 and all(
            isinstance(i, Sequence) and not isinstance(i, str) for i in items
        )
        if not nested:
            n = len(layer_names)
            if len(items) != 2 * n:
                raise PlanError(
                    f"a flat qscheme needs {2 * n} bit-widths (weights then activations of "
                    f"the model's {n} quantizable layers), got {len(items)}"
                )
            items = [items[:n], items[n:]]
        parsed = QuantPlan.from_qscheme(items, layer_names)
    else:
        raise PlanError(
            f"cannot read a quantization plan from {type(plan).__name__}; give a QuantPlan, "
            "'layer=W/A,…' text, a YAML path, a mapping or [[w bits…], [a bits…]]"
        )
    return parsed.validate_for(layer_names)


def quantize_model(
    model: nn.Module,
    plan: PlanLike,
    config: QuantConfig | None = None,
    example_inputs: Any = None,
    *,
    use_bias: bool = True,
) -> nn.Module:
    """Quantize ``model`` in place: its Conv1d / Conv2d / Linear layers become Bit* layers.

    Works for any module. Layers are ordered by execution (see
    :func:`~mico.quant.order.quantizable_layers`), which is the order of a ``[[w…], [a…]]``
    plan. Already quantized layers get their new bit-widths (static scales chosen for other
    widths are dropped). With ``act_mode="dynamic"`` the model runs quantized at once; static
    activations need :func:`calibrate`. Returns ``model``.
    """
    config = config or QuantConfig()
    names = quantizable_layers(model, example_inputs)
    if not names:
        raise PlanError(
            f"{type(model).__name__} has no quantizable layers (Conv1d, Conv2d or Linear) "
            "that its forward pass uses"
        )
    checked = as_plan(plan, names)
    for name, bits in checked.items():
        layer = model.get_submodule(name)
        if isinstance(layer, BitLayer):
            if layer.qconfig != config:
                layer = _rebuild(layer, bits.w, bits.a, config, use_bias)
                _set_submodule(model, name, layer)
            layer.set_bits(bits.w, bits.a)
        else:
            new = bit_layer_for(layer).from_float(layer, bits.w, bits.a, config, bias=use_bias)
            layer = new.train(layer.training)  # a model in eval mode stays in eval mode
            _set_submodule(model, name, layer)
        layer.layer_name = name
        layer.mode = "quant"
    return model


def _rebuild(layer: BitLayer, w: Any, a: Any, config: QuantConfig, use_bias: bool) -> BitLayer:
    """A fresh Bit* layer with another config, same weights (and signedness)."""
    new = type(layer).from_float(layer, w, a, config, bias=use_bias)  # type: ignore[attr-defined]
    new.act_signed = layer.act_signed
    return new.train(layer.training)


def _set_submodule(model: nn.Module, name: str, module: nn.Module) -> None:
    """Replace ``name`` everywhere it is reachable (a shared layer stays shared)."""
    old = model.get_submodule(name)
    for parent in model.modules():
        for child_name, child in list(parent._modules.items()):  # every alias, not unique ones
            if child is old:
                setattr(parent, child_name, module)


def apply_plan(
    model: nn.Module,
    plan: PlanLike,
    config: QuantConfig | None = None,
    example_inputs: Any = None,
) -> nn.Module:
    """A quantized *copy* of ``model``; the original is left untouched.

    Unlike :func:`quantize_model` the layers stay in ``float`` mode until :func:`calibrate`
    (post-training quantization).
    """
    qmodel = quantize_model(copy.deepcopy(model), plan, config, example_inputs)
    for layer in bit_layers(qmodel).values():
        layer.mode = "float"
    return qmodel


def replace_quantize_layers(
    model: nn.Module,
    weight_q: Sequence[float],
    act_q: Sequence[float],
    quant_aware: bool = False,
    device: torch.device | str | None = None,
    use_bias: bool = True,
) -> nn.Module:
    """MiCo's form of :func:`quantize_model`: per-layer lists of weight and activation bits.

    Activations are quantized dynamically, as in MiCo; ``quant_aware=True`` also learns the
    weight step sizes (LSQ) during training. ``use_bias=False`` builds the layers without bias.
    """
    config = QuantConfig(act_mode="dynamic", learned_step=quant_aware)
    quantize_model(model, [list(weight_q), list(act_q)], config, use_bias=use_bias)
    if device is not None:
        model.to(device)
    return model


def set_to_qforward(model: nn.Module) -> nn.Module:
    """Run every Bit* layer quantized (MiCo's ``set_to_qforward``)."""
    for layer in bit_layers(model).values():
        layer.mode = "quant"
    return model


def calibrate(
    qmodel: nn.Module, batches: Iterable[Any], max_batches: int | None = None
) -> nn.Module:
    """Post-training calibration: observe inputs on ``batches``, fix every scale, enter ``quant``.

    Layers are calibrated one after another in execution order, each with the layers before
    it already quantized, so every scale fits the values that layer really receives on the
    device. ``batches`` yields inputs or ``(inputs, labels)`` pairs.
    """
    layers = bit_layers(qmodel)
    if not layers:
        raise CalibrationError(
            "the model has no Bit* layers; quantize it first (mico.quant.quantize_model)"
        )
    data = []
    for i, batch in enumerate(batches):
        if max_batches is not None and i >= max_batches:
            break
        data.append(batch[0] if isinstance(batch, list | tuple) else batch)
    if not data:
        raise CalibrationError("calibration got no batches; pass a non-empty iterable of inputs")
    check_finite_parameters(qmodel)
    for i, batch in enumerate(data):
        check_finite_samples(batch, f"calibration batch {i}: sample")
    order = [n for n in quantizable_layers(qmodel, data[0][:1]) if n in layers]
    order += [n for n in layers if n not in order]
    was_training = qmodel.training
    qmodel.eval()
    for layer in layers.values():
        layer.mode = "float"
    try:
        with torch.no_grad():
            for name in order:
                layers[name].begin_calibration()
                for x in data:
                    qmodel(*_as_tuple(x))
                layers[name].end_calibration()
    finally:
        qmodel.train(was_training)
    return qmodel


def prepare_export(model: nn.Module) -> nn.Module:
    """Fix every Bit* layer's weight scales from the current weights, before ``torch.export``.

    Quantized layers then export as single ``mico.bit_*`` operators with their scales as
    attributes (see :mod:`mico.quant.export_ops`). Call it again after the weights change.
    """
    from mico.quant import export_ops  # noqa: F401  (registers the operators)

    for layer in bit_layers(model).values():
        layer.prepare_export()
    return model


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
