"""Run an IR graph (seed 001's ``execute_ir``).

Each node runs through its registered ``execute`` rule (overloads matched explicitly, see
:func:`mico.ir.analyzer.find_rule`); a node without one whose op names a torch operator
(``aten.*``, ``torch.library`` custom ops) runs through the **schema fallback**, which rebuilds
the call from the node's inputs and attributes by schema argument name. So every op the
extractor produces runs without registration.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from mico.errors import MicoError, UnsupportedOpError
from mico.ir.analyzer import (
    ExecutionError,
    call_with_schema,
    find_rule,
    flatten_results,
    resolve_torch_op,
)
from mico.ir.dtypes import DataType
from mico.ir.graph import Graph, Node, Value

#: Called after each node with the node and its output tensors (for verification).
NodeHook = Callable[[Node, list[torch.Tensor]], None]


def _as_tensor(data: Any) -> torch.Tensor:
    if isinstance(data, torch.Tensor):
        return data
    return torch.as_tensor(np.asarray(data))


def _input_list(graph: Graph, inputs: Any) -> list[torch.Tensor]:
    if isinstance(inputs, torch.Tensor | np.ndarray):
        items = [inputs]
    elif isinstance(inputs, list | tuple):
        items = list(inputs)
    else:
        raise ExecutionError(
            f"graph '{graph.name}' takes a tensor or a list of tensors, got {type(inputs).__name__}"
        )
    if len(items) != len(graph.inputs):
        raise ExecutionError(
            f"graph '{graph.name}' takes {len(graph.inputs)} input(s) "
            f"({', '.join(v.name for v in graph.inputs)}), got {len(items)}"
        )
    tensors = []
    for value, item in zip(graph.inputs, items, strict=True):
        tensor = _as_tensor(item)
        expected = value.type.shape
        if len(expected) != tensor.dim() or any(
            isinstance(d, int) and d != n for d, n in zip(expected, tensor.shape, strict=True)
        ):
            raise ExecutionError(
                f"input '{value.name}' of graph '{graph.name}' has shape {tuple(expected)} (the "
                f"graph was exported for it), got {tuple(tensor.shape)}; extract the IR again "
                "with an example input of this shape"
            )
        try:
            dtype = DataType.from_torch(tensor.dtype)
        except (TypeError, KeyError, ValueError):
            dtype = None
        if dtype != value.type.dtype:
            raise ExecutionError(
                f"input '{value.name}' of graph '{graph.name}' has dtype {value.type.dtype}, got "
                f"{tensor.dtype}"
            )
        tensors.append(tensor)
    return tensors


def _weights_of(graph: Graph, weights: Mapping[str, Any] | None) -> dict[str, Any]:
    found: dict[str, Any] = dict(getattr(graph, "weights", None) or {})
    if weights:
        found.update(weights)
    return found


def execute_node(node: Node, args: list[Any]) -> list[torch.Tensor]:
    """Run one node on its input tensors: its ``execute`` rule, else the schema fallback."""
    where = f"node '{node.name}' ({node.op})"
    rule = find_rule(node.op, "execute")
    if rule is not None:
        try:
            results = rule(args, node.attrs)
        except MicoError:
            raise
        except Exception as exc:
            name = getattr(rule, "__qualname__", repr(rule))
            raise ExecutionError(
                f"the executor {name} failed at {where}: {type(exc).__name__}: {exc}"
            ) from exc
        if isinstance(results, torch.Tensor):
            results = [results]
        elif not isinstance(results, list | tuple):
            raise ExecutionError(
                f"the executor of {where} returned {type(results).__name__}; an executor returns "
                "a list of tensors, one per output"
            )
        results = list(results)
    else:
        op = resolve_torch_op(node.op)
        if op is None:
            raise UnsupportedOpError(
                f"{where} has no execute rule and '{node.op}' is not a torch operator; register "
                f"one with @register_executor('{node.op}')"
            )
        try:
            results = flatten_results(call_with_schema(op, args, node.attrs, where))
        except MicoError:
            raise
        except Exception as exc:
            raise ExecutionError(
                f"running {where} through its schema failed: {type(exc).__name__}: {exc}"
            ) from exc
    if len(results) != len(node.outputs):
        raise ExecutionError(
            f"{where} produced {len(results)} result(s) for its {len(node.outputs)} output(s)"
        )
    return results


def check_result(node: Node, value: Value, result: Any) -> None:
    """A node's result must have the shape and dtype its output value declares.

    A graph whose declared types disagree with what it computes (a damaged IR file, a wrong
    ``infer`` rule) would otherwise run on and lie downstream: planners size buffers and C
    code is emitted from the declared types.
    """
    if not isinstance(result, torch.Tensor):
        return
    declared = value.type.shape
    if len(declared) != result.dim() or any(
        isinstance(d, int) and d != n for d, n in zip(declared, result.shape, strict=True)
    ):
        raise ExecutionError(
            f"node '{node.name}' ({node.op}) computed output '{value.name}' of shape "
            f"{tuple(result.shape)}, but the graph declares {tuple(declared)}; the graph's types "
            "are wrong (extract or save the IR again)"
        )
    try:
        container = value.type.dtype.to_torch()
    except (KeyError, TypeError, ValueError):
        return
    if result.dtype != container:
        raise ExecutionError(
            f"node '{node.name}' ({node.op}) computed output '{value.name}' as {result.dtype}, "
            f"but the graph declares {value.type.dtype} ({container}); the graph's types are "
            "wrong (extract or save the IR again)"
        )


def run_ir(
    ir: Graph,
    inputs: Any,
    weights: Mapping[str, Any] | None = None,
    on_node: NodeHook | None = None,
    *,
    check_types: bool = True,
) -> list[torch.Tensor]:
    """:func:`execute_ir` with a hook called after every node.

    ``check_types=False`` lets a node's result differ from its declared type (the verifier
    runs that way, to report the mismatch against the model instead of stopping at it).
    """
    args = _input_list(ir, inputs)
    table = _weights_of(ir, weights)
    env: dict[int, Any] = {id(v): t for v, t in zip(ir.inputs, args, strict=True)}

    def read(value: Value, node: Node | None) -> Any:
        if id(value) in env:
            return env[id(value)]
        if value.name in table and value.producer is None:
            tensor = _as_tensor(table[value.name])
        elif value.data is not None:
            tensor = _as_tensor(value.data)
        else:
            user = f"node '{node.name}' ({node.op})" if node else f"graph '{ir.name}'"
            if value.producer is None:
                raise ExecutionError(
                    f"{user} reads weight '{value.name}', which is missing: pass it in weights= "
                    "(state-dict name -> tensor) or load the IR with its weights file"
                )
            raise ExecutionError(f"{user} reads '{value.name}' before it is computed")
        env[id(value)] = tensor
        return tensor

    with torch.no_grad():
        for node in ir.nodes:
            results = execute_node(node, [read(v, node) for v in node.inputs])
            for value, result in zip(node.outputs, results, strict=True):
                if check_types:
                    check_result(node, value, result)
                env[id(value)] = result
            if on_node is not None:
                on_node(node, results)
        return [read(v, None) for v in ir.outputs]


def execute_ir(
    ir: Graph, inputs: Any, weights: Mapping[str, Any] | None = None
) -> list[torch.Tensor]:
    """Execute ``ir`` on ``inputs`` (a tensor or a list, one per graph input); return its outputs.

    Weights are looked up by name in ``weights``, then in ``ir.weights`` (an
    :class:`~mico.ir.analyzer.IRGraph`), then in the values' own ``data``. Every node's result
    must have the shape and dtype its output declares, else an ``ExecutionError`` names the node.
    """
    return run_ir(ir, inputs, weights)
