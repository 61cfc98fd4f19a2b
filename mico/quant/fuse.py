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
import torch.fx
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


def _outputs(model: nn.Module, example: tuple[Any, ...]) -> list[torch.Tensor]:
    """The model's eval-mode float outputs on ``example`` (Bit* layers run unquantized)."""
    bits = [m for m in model.modules() if isinstance(m, BitLayer)]
    modes = [m.mode for m in bits]
    was_training = model.training
    try:
        for m in bits:
            m.mode = "float"
        model.eval()
        with torch.no_grad():
            out = model(*example)
    finally:
        model.train(was_training)
        for m, mode in zip(bits, modes, strict=True):
            m.mode = mode
    flat = out if isinstance(out, tuple | list) else (out,)
    return [t for t in flat if isinstance(t, torch.Tensor)]


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x.shape != y.shape:
            return False
        if x.is_floating_point():
            scale = 1.0 + float(x.abs().max()) if x.numel() else 1.0
            if float((x - y).abs().max()) > 1e-4 * scale:
                return False
        elif not torch.equal(x, y):
            return False
    return True


def _probe(model: nn.Module, example_inputs: Any) -> tuple[Any, ...] | None:
    """Inputs to check folds with: the given example, or random data of the model's shape."""
    if example_inputs is not None:
        return _as_tuple(example_inputs)
    if not hasattr(model, "example_input"):
        return None
    example = model.example_input(2)
    if example.is_floating_point():
        example = torch.randn(example.shape, generator=torch.Generator().manual_seed(0))
    return (example,)


def _fuse_pairs(
    model: nn.Module,
    pairs: list[tuple[str, str]],
    probe: tuple[Any, ...] | None,
    structural: bool,
) -> nn.Module:
    """Fold each pair; unless the pair is structurally certain, check it on ``probe``.

    Pairs found by running the model (hooks) and every Linear + BatchNorm1d pair (a BN over
    another dimension than the features would fold wrongly) are verified: folded, run, and
    reverted if the output changes.
    """
    reference = None
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
        check = not structural or isinstance(layer, nn.Linear)
        if check and probe is None:
            warnings.warn(
                f"'{bn_name}' after '{layer_name}' is left unfolded: checking the fold needs an "
                "example input (pass example_inputs=...)",
                stacklevel=3,
            )
            continue
        if check and reference is None:
            reference = _outputs(model, probe)
        saved_weight = layer.weight.detach().clone()
        saved_bias = None if layer.bias is None else layer.bias.detach().clone()
        fold_bn_into(layer, bn)
        parent_name, _, child = bn_name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, nn.Identity())
        if check and not _same(reference, _outputs(model, probe)):
            with torch.no_grad():  # revert: this BN did not act on the layer's output channels
                layer.weight.copy_(saved_weight)
                if saved_bias is None:
                    layer.bias = None
                else:
                    layer.bias.copy_(saved_bias)
            setattr(parent, child, bn)
    return model


def fuse_model(model: nn.Module, example_inputs: Any = None, inplace: bool = False) -> nn.Module:
    """Fold every BatchNorm that directly follows a Conv1d / Conv2d / Linear; return the model.

    Pairs are found by ``torch.fx`` tracing; models fx cannot trace are run once on
    ``example_inputs`` (or random data shaped like a ``MiCoModel``'s example) with hooks, and
    each such fold is checked on that input and undone if it changes the output (e.g. when the
    layer's output also feeds a residual path). Linear + BatchNorm pairs are always checked. A
    layer whose output also feeds something else, or that is called twice, is left alone.
    Works on float and Bit* layers. By default a fused copy is returned; in eval mode it
    computes what the original computes.
    """
    fused = model if inplace else copy.deepcopy(model)
    probe = _probe(fused, example_inputs)
    try:
        pairs = _pairs_by_fx(fused)
    except Exception:  # fx cannot trace this model (control flow…): fall back to running it
        pairs = None
    if pairs is not None:
        return _fuse_pairs(fused, pairs, probe, structural=True)
    if probe is not None:
        return _fuse_pairs(fused, _pairs_by_hooks(fused, probe), probe, structural=False)
    return _fuse_pairs(fused, _pairs_by_sequence(fused), probe, structural=True)


def fuse_model_seq(
    model: nn.Module, example_inputs: Any = None, inplace: bool = False
) -> nn.Module:
    """Fold BatchNorms that follow a layer inside ``nn.Sequential`` containers (no tracing)."""
    fused = model if inplace else copy.deepcopy(model)
    probe = _probe(fused, example_inputs)
    return _fuse_pairs(fused, _pairs_by_sequence(fused), probe, structural=True)
