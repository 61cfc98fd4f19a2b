"""Fold BatchNorm into the Conv1d / Conv2d / Linear layer that feeds it.

In eval mode ``bn(conv(x)) == conv'(x)`` with ``w' = w * g`` and ``b' = (b - mean) * g + beta``
per output channel, ``g = gamma / sqrt(var + eps)``. Deployment needs it (one op instead of
two), and quantization should see the weights the device will hold.
"""

from __future__ import annotations

import copy
import itertools
import warnings
from typing import Any

import torch
from torch import nn

from mico.quant.layers import BitLayer
from mico.quant.order import QUANTIZABLE, _as_tuple

BATCHNORMS = (nn.BatchNorm1d, nn.BatchNorm2d)


def fold_bn_into(layer: nn.Module, bn: nn.modules.batchnorm._BatchNorm) -> None:
    """Fold ``bn``'s eval-mode transform into ``layer``'s weight and bias, in place."""
    if bn.running_mean is None or bn.running_var is None:
        raise ValueError("a BatchNorm without running statistics cannot be folded")
    with torch.no_grad():
        std = torch.sqrt(bn.running_var.to(torch.float64) + bn.eps)
        gamma = bn.weight.to(torch.float64) if bn.weight is not None else torch.ones_like(std)
        beta = bn.bias.to(torch.float64) if bn.bias is not None else torch.zeros_like(std)
        g = gamma / std
        weight = layer.weight.to(torch.float64)
        shape = (-1, *([1] * (weight.dim() - 1)))
        layer.weight.copy_((weight * g.reshape(shape)).to(layer.weight.dtype))
        old_bias = layer.bias.to(torch.float64) if layer.bias is not None else torch.zeros_like(std)
        new_bias = (old_bias - bn.running_mean.to(torch.float64)) * g + beta
        if layer.bias is None:
            layer.bias = nn.Parameter(new_bias.to(layer.weight.dtype))
        else:
            layer.bias.copy_(new_bias.to(layer.bias.dtype))


def _pairs_by_fx(model: nn.Module) -> list[tuple[str, str]]:
    import torch.fx

    class _Tracer(torch.fx.Tracer):
        def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
            return isinstance(m, (*QUANTIZABLE, BitLayer)) or super().is_leaf_module(m, qualname)

    graph = _Tracer().trace(model)
    calls: dict[str, int] = {}
    for node in graph.nodes:
        if node.op == "call_module":
            calls[str(node.target)] = calls.get(str(node.target), 0) + 1
    pairs = []
    for node in graph.nodes:
        if node.op != "call_module":
            continue
        bn = model.get_submodule(str(node.target))
        if not isinstance(bn, BATCHNORMS) or not node.args:
            continue
        src = node.args[0]
        if not isinstance(src, torch.fx.Node) or src.op != "call_module":
            continue
        layer = model.get_submodule(str(src.target))
        if (
            isinstance(layer, (*QUANTIZABLE, BitLayer))
            and len(src.users) == 1
            and calls[str(src.target)] == 1
            and calls[str(node.target)] == 1
        ):
            pairs.append((str(src.target), str(node.target)))
    return pairs


def _pairs_by_hooks(model: nn.Module, example_inputs: Any) -> list[tuple[str, str]]:
    """Pairs where a BatchNorm's input is exactly the tensor a layer just produced."""
    names = {id(m): n for n, m in model.named_modules()}
    produced: dict[int, str] = {}
    pairs: list[tuple[str, str]] = []
    calls: dict[str, int] = {}
    alive: list[torch.Tensor] = []  # ids stay unique while the outputs are referenced

    def after_layer(module: nn.Module, _inputs: Any, output: Any) -> None:
        calls[names[id(module)]] = calls.get(names[id(module)], 0) + 1
        if isinstance(output, torch.Tensor):
            alive.append(output)
            produced[id(output)] = names[id(module)]

    def before_bn(module: nn.Module, inputs: Any) -> None:
        calls[names[id(module)]] = calls.get(names[id(module)], 0) + 1
        src = produced.get(id(inputs[0])) if inputs else None
        if src is not None:
            pairs.append((src, names[id(module)]))

    handles = []
    for m in model.modules():
        if isinstance(m, (*QUANTIZABLE, BitLayer)):
            handles.append(m.register_forward_hook(after_layer))
        elif isinstance(m, BATCHNORMS):
            handles.append(m.register_forward_pre_hook(before_bn))
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(*_as_tuple(example_inputs))
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    return [(a, b) for a, b in pairs if calls.get(a) == 1 and calls.get(b) == 1]


def _pairs_by_sequence(model: nn.Module) -> list[tuple[str, str]]:
    """Adjacent (layer, BatchNorm) children of every ``nn.Sequential``."""
    pairs = []
    for prefix, module in model.named_modules():
        if not isinstance(module, nn.Sequential):
            continue
        children = list(module.named_children())
        for (a_name, a), (b_name, b) in itertools.pairwise(children):
            if isinstance(a, (*QUANTIZABLE, BitLayer)) and isinstance(b, BATCHNORMS):
                join = f"{prefix}." if prefix else ""
                pairs.append((join + a_name, join + b_name))
    return pairs


def _fuse_pairs(model: nn.Module, pairs: list[tuple[str, str]]) -> nn.Module:
    for layer_name, bn_name in pairs:
        layer = model.get_submodule(layer_name)
        bn = model.get_submodule(bn_name)
        if not isinstance(bn, BATCHNORMS):
            continue  # already folded (a pair found twice)
        if not bn.track_running_stats or bn.running_mean is None:
            warnings.warn(
                f"'{bn_name}' has no running statistics (track_running_stats=False) and is "
                "left unfolded",
                stacklevel=3,
            )
            continue
        if bn.num_features != layer.weight.shape[0]:
            continue
        fold_bn_into(layer, bn)
        parent_name, _, child = bn_name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, nn.Identity())
    return model


def fuse_model(model: nn.Module, example_inputs: Any = None, inplace: bool = False) -> nn.Module:
    """Fold every BatchNorm that directly follows a Conv1d / Conv2d / Linear; return the model.

    The pairs are found by ``torch.fx`` tracing; models fx cannot trace are run once on
    ``example_inputs`` (or a ``MiCoModel``'s own example) with hooks. A layer whose output also
    feeds something else, or that is called more than once, is left alone. Works on float and
    Bit* layers (the cached quantized weights are refreshed). By default a fused copy is
    returned; the result equals the original in eval mode.
    """
    fused = model if inplace else copy.deepcopy(model)
    try:
        pairs = _pairs_by_fx(fused)
    except Exception:  # fx cannot trace this model: fall back to running it
        if example_inputs is None and hasattr(fused, "example_input"):
            example_inputs = fused.example_input()
        pairs = (
            _pairs_by_hooks(fused, example_inputs)
            if example_inputs is not None
            else _pairs_by_sequence(fused)
        )
    return _fuse_pairs(fused, pairs)


def fuse_model_seq(model: nn.Module, inplace: bool = False) -> nn.Module:
    """Fold BatchNorms that follow a layer inside ``nn.Sequential`` containers (no tracing)."""
    fused = model if inplace else copy.deepcopy(model)
    return _fuse_pairs(fused, _pairs_by_sequence(fused))
