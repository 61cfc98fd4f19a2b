"""The reference executor: runs an IR graph op by op through each op's ``execute`` rule.

On a lowered ``mico.*`` graph it computes, in Python, exactly the integers the C program must
produce: that is the Python reference the C output is held to.
"""

from __future__ import annotations

import numpy as np
import torch

from mico.errors import MicoError
from mico.ir.graph import Graph
from mico.ir.ops.registry import OpRegistry
from mico.numerics import check_finite_samples


def run_graph(graph: Graph, *inputs: np.ndarray | torch.Tensor) -> list[torch.Tensor]:
    """Execute ``graph`` on batched inputs (batch dimension first); return its outputs."""
    if len(inputs) != len(graph.inputs):
        raise MicoError(
            f"graph '{graph.name}' takes {len(graph.inputs)} input(s), got {len(inputs)}"
        )
    env: dict[int, torch.Tensor] = {}
    for value, data in zip(graph.inputs, inputs, strict=True):
        tensor = torch.as_tensor(np.asarray(data)) if not isinstance(data, torch.Tensor) else data
        check_finite_samples(tensor, f"input '{value.name}' sample")
        if tuple(tensor.shape[1:]) != value.type.shape[1:]:
            raise MicoError(
                f"input '{value.name}' expects samples of shape {value.type.shape[1:]}, got "
                f"{tuple(tensor.shape[1:])}"
            )
        env[id(value)] = tensor
    for node in graph.nodes:
        execute = OpRegistry.require(
            node.op, "execute", "register one with @register_executor to run it in Python"
        )
        args = [
            torch.from_numpy(np.asarray(v.data)) if v.is_const else env[id(v)] for v in node.inputs
        ]
        results = execute(args, node.attrs)
        if len(results) != len(node.outputs):
            raise MicoError(
                f"the executor of {node.op} returned {len(results)} results for "
                f"{len(node.outputs)} outputs at '{node.name}'"
            )
        for value, result in zip(node.outputs, results, strict=True):
            env[id(value)] = result
    return [env[id(v)] for v in graph.outputs]
