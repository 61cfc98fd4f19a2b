"""The quantizable layers of any ``nn.Module``, in the order the forward pass runs them.

Registration order (``named_modules``) is not execution order: a model may define its
classifier before its features. MiCo's ``[[w bits…], [a bits…]]`` lists follow execution
order, found by running an example input with hooks, or by ``torch.fx`` tracing when no
example is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from mico.errors import PlanError
from mico.quant.layers import BitLayer

QUANTIZABLE = (nn.Conv1d, nn.Conv2d, nn.Linear)


def _candidates(model: nn.Module) -> dict[int, str]:
    """id(module) -> first name, for every quantizable (or already quantized) module."""
    found: dict[int, str] = {}
    for name, module in model.named_modules():
        if isinstance(module, (*QUANTIZABLE, BitLayer)) and id(module) not in found:
            found[id(module)] = name
    return found


def _as_tuple(example_inputs: Any) -> tuple[Any, ...]:
    return example_inputs if isinstance(example_inputs, tuple | list) else (example_inputs,)


def _order_by_hooks(model: nn.Module, example_inputs: Any) -> list[str]:
    candidates = _candidates(model)
    order: list[str] = []
    seen: set[int] = set()

    def record(module: nn.Module, _inputs: Any) -> None:
        if id(module) not in seen:
            seen.add(id(module))
            order.append(candidates[id(module)])

    modules = {id(m): m for m in model.modules()}
    handles = [modules[i].register_forward_pre_hook(record) for i in candidates]
    was_training = model.training
    saved_modes = {}
    for m in model.modules():
        if isinstance(m, BitLayer):
            saved_modes[id(m)] = m.mode
            m.mode = "float"  # no observing, no calibration errors
    try:
        model.eval()  # never touch BN running statistics
        with torch.no_grad():
            model(*_as_tuple(example_inputs))
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
        for m in model.modules():
            if id(m) in saved_modes:
                m.mode = saved_modes[id(m)]
    return order


def _order_by_fx(model: nn.Module) -> list[str]:
    import torch.fx

    class _Tracer(torch.fx.Tracer):
        def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
            return isinstance(m, (*QUANTIZABLE, BitLayer)) or super().is_leaf_module(m, qualname)

    try:
        graph = _Tracer().trace(model)
    except Exception as exc:  # fx cannot trace data-dependent control flow
        raise PlanError(
            f"cannot find the execution order of {type(model).__name__}'s layers without an "
            f"example input (torch.fx tracing failed: {type(exc).__name__}: {exc}); pass "
            "example_inputs=… (a batch of one input)"
        ) from None
    candidates = set(_candidates(model).values())
    order: list[str] = []
    for node in graph.nodes:
        if node.op == "call_module" and node.target in candidates and node.target not in order:
            order.append(str(node.target))
    return order


def quantizable_layers(model: nn.Module, example_inputs: Any = None) -> list[str]:
    """Names of the Conv1d / Conv2d / Linear layers (or their Bit* versions), in execution order.

    With ``example_inputs`` the model runs once (eval mode, no gradients) with hooks; without,
    it is traced by ``torch.fx``. ``MiCoModel`` supplies its own example. A layer the forward
    pass never calls is not listed. Shared layers are listed once, at their first call.
    """
    if example_inputs is None and hasattr(model, "example_input"):
        example_inputs = model.example_input()
    if example_inputs is not None:
        return _order_by_hooks(model, example_inputs)
    return _order_by_fx(model)


def list_quantize_layers(model: nn.Module, example_inputs: Any = None) -> list[nn.Module]:
    """The quantizable layers themselves, in execution order (MiCo's ``list_quantize_layers``)."""
    return [model.get_submodule(n) for n in quantizable_layers(model, example_inputs)]


def layer_names_hint(names: Sequence[str], limit: int = 8) -> str:
    """A short listing of layer names for error messages."""
    shown = ", ".join(names[:limit])
    return shown + (f", … ({len(names)} in all)" if len(names) > limit else "")
