"""Prepare an extracted graph for the dynamic (float between layers) C backend.

The dynamic mode compiles the graph ``extract_ir`` returns almost as it is: ``mico.bit_*``
nodes become quantized float-in/float-out kernels, ATen ops become float32 kernels. This pass
only decides memory:

* weights become constants (their data bound from ``IRGraph.weights``);
* views (flatten, view, unflatten, dropout in eval...) share their input's storage;
* elementwise ops run in place when their input dies there (it is not a graph input, nor
  used by any later node), so the arena can go below the bound of separate buffers;
* quantized layers get scratch arena for their input codes;
* means and sums become ``mico.reduce_f64``: float64 in index order, one rounding. torch leaves
  the order open, and one ulp of difference before a run-time quantizer can flip a code.
"""

from __future__ import annotations

import numpy as np
import torch

from mico.codegen.planner import SCRATCH_ATTR
from mico.errors import CompileError
from mico.ir.analyzer import IRGraph
from mico.ir.dtypes import DataType
from mico.ir.graph import Graph

#: ops whose output is their input's bytes under another shape (all tensors are contiguous)
VIEW_OPS = frozenset(
    {
        "aten.flatten.using_ints",
        "aten.view.default",
        "aten.reshape.default",
        "aten._unsafe_view.default",
        "aten.unflatten.int",
        "aten.squeeze.dim",
        "aten.squeeze.dims",
        "aten.squeeze.default",
        "aten.unsqueeze.default",
        "aten.alias.default",
        "aten.clone.default",
        "aten.contiguous.default",
        "aten.detach.default",
        "aten.dropout.default",
        "aten.feature_dropout.default",
        "aten.identity.default",
    }
)

#: ops that may write their output over their first input
INPLACE_OPS = frozenset(
    {
        "aten.relu.default",
        "aten.relu_.default",
        "aten.hardtanh.default",
        "aten.relu6.default",
        "aten.sigmoid.default",
        "aten.tanh.default",
        "aten.gelu.default",
        "aten.silu.default",
        "aten.elu.default",
        "aten.leaky_relu.default",
        "aten.hardswish.default",
        "aten.hardsigmoid.default",
        "aten.exp.default",
        "aten.neg.default",
        "aten.abs.default",
        "aten.sqrt.default",
        "aten.rsqrt.default",
        "aten.add.Tensor",
        "aten.sub.Tensor",
        "aten.mul.Tensor",
        "aten.div.Tensor",
        "aten.batch_norm.default",
        "aten._native_batch_norm_legit_no_training.default",
    }
)

#: float reductions whose summation order torch leaves open: mico fixes it (float64, index order)
ORDERED_REDUCTIONS = {
    "aten.mean.dim": "mean",
    "aten.mean.default": "mean",
    "aten.sum.dim_IntList": "sum",
    "aten.sum.default": "sum",
}

QUANTIZED_OPS = ("mico.bit_conv1d.default", "mico.bit_conv2d.default", "mico.bit_linear.default")


def prepare_dynamic(ir: IRGraph, inplace: bool = True) -> Graph:
    """Bind weights, mark views and in-place ops, size scratch; return the graph to emit."""
    _check_types(ir)
    for value in ir.params:
        if value.data is None and value.name in ir.weights:
            value.data = _numpy(ir.weights[value.name])
    for node in ir.nodes:
        if node.op in VIEW_OPS:
            if node.op.startswith("aten.dropout") and node.attrs.get("train"):
                raise CompileError(f"dropout at '{node.name}' runs in training mode; call .eval()")
            node.output.alias_of = node.inputs[0]
        if node.op in ORDERED_REDUCTIONS and node.attrs.get("dtype") is None:
            node.attrs["reduce"] = ORDERED_REDUCTIONS[node.op]
            node.op = "mico.reduce_f64"
        if node.op in QUANTIZED_OPS:
            if not node.attrs.get("dynamic", False):
                raise CompileError(
                    f"layer '{node.name}' has static activation scales; compile it with "
                    "mode='static' (integer-only), or quantize with act_mode='dynamic'"
                )
            node.plan[SCRATCH_ATTR] = node.inputs[0].type.numel
    if inplace:
        _mark_inplace(ir)
    return ir


def _numpy(tensor: torch.Tensor | np.ndarray) -> np.ndarray:
    if isinstance(tensor, torch.Tensor):
        return tensor.detach().cpu().numpy()
    return np.asarray(tensor)


def _token_input(graph: Graph) -> bool:
    """An int64 input read only by embedding lookups: token ids (the C program takes them as
    exact float32 integers)."""
    x = graph.inputs[0]
    readers = [n for n in graph.nodes if any(v.storage() is x for v in n.inputs)]
    return (
        x.type.dtype == DataType.INT64
        and bool(readers)
        and all(n.op == "aten.embedding.default" for n in readers)
    )


def _check_types(graph: Graph) -> None:
    if len(graph.inputs) != 1 or not (
        graph.inputs[0].type.dtype == DataType.FP32 or _token_input(graph)
    ):
        raise CompileError(
            "the C backend needs exactly one model input, float32 features or int64 token ids "
            "read by an embedding; got " + ", ".join(str(v.type) for v in graph.inputs)
        )
    if len(graph.outputs) != 1:
        raise CompileError(
            f"the C backend needs exactly one model output; the model returns "
            f"{len(graph.outputs)} tensors"
        )
    for node in graph.nodes:
        for value in node.outputs:
            if not value.type.is_static:
                raise CompileError(
                    f"'{node.name}' has a dynamic shape {value.type}; export with static shapes"
                )
            if value.type.dtype != DataType.FP32:
                where = f", in {node.origin}," if node.origin else ""
                raise CompileError(
                    f"'{node.name}' ({node.op}){where} produces {value.type.dtype}; the dynamic "
                    "C backend computes in float32 only (return float tensors: e.g. the logits "
                    "instead of their argmax)"
                )


def _mark_inplace(graph: Graph) -> None:
    """Let an elementwise op overwrite its first input when nothing reads that input later."""
    inputs = {id(v) for v in graph.inputs}
    for step, node in enumerate(graph.nodes):
        if node.op not in INPLACE_OPS or not node.inputs:
            continue
        x = node.inputs[0]
        base = x.storage()
        later = (v for n in graph.nodes[step + 1 :] for v in n.inputs)
        if (
            x.is_const
            or id(base) in inputs
            or x.type.shape != node.output.type.shape
            or any(v.storage() is base for v in graph.outputs)
            or any(v.storage() is base for v in node.inputs[1:])
            or any(v.storage() is base for v in later)
        ):
            continue
        node.output.alias_of = x
        node.attrs["inplace"] = True
