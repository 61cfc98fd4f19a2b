"""torch model -> mico IR, through ``torch.export``.

Every ATen call becomes an IR node named after its overload (``aten.conv2d.default``). Tensor
arguments become inputs; every other schema argument becomes an attribute, defaults filled in,
so no op needs its own converter. An op that does need one registers a ``convert`` rule
(``@register_op``), which receives a :class:`NodeInfo` and returns a :class:`Node`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from mico.errors import UnsupportedOpError
from mico.ir.dtypes import DataType
from mico.ir.graph import Graph, Node, Value
from mico.ir.ops.registry import OpRegistry
from mico.ir.types import TensorType


@dataclass
class NodeInfo:
    """What a convert rule gets for one FX node (seed 001's ``NodeInfo``)."""

    name: str
    op_type: str
    target: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    inputs: list[Value]
    outputs: list[Value]
    attrs: dict[str, Any] = field(default_factory=dict)


def _tensor_type(meta_val: Any, where: str) -> TensorType:
    if not isinstance(meta_val, torch.Tensor):
        raise UnsupportedOpError(
            f"{where} produces {type(meta_val).__name__}, not a tensor; only single-tensor "
            "outputs are supported"
        )
    return TensorType(tuple(meta_val.shape), DataType.from_torch(meta_val.dtype))


def _schema_inputs_and_attrs(
    node: torch.fx.Node, values: dict[str, Value]
) -> tuple[list[Value], dict[str, Any]]:
    """Split a call's arguments by its schema: tensors to inputs, the rest to attributes."""
    schema = node.target._schema
    inputs: list[Value] = []
    attrs: dict[str, Any] = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args):
            value = node.args[i]
        elif arg.name in node.kwargs:
            value = node.kwargs[arg.name]
        elif arg.has_default_value():
            value = arg.default_value
        else:
            value = None
        if isinstance(value, torch.fx.Node):
            inputs.append(values[value.name])
        elif isinstance(value, list | tuple) and any(isinstance(v, torch.fx.Node) for v in value):
            raise UnsupportedOpError(
                f"{node.target} at node '{node.name}' takes a list of tensors ('{arg.name}'); "
                "register a convert rule with @register_op to support it"
            )
        else:
            attrs[arg.name] = list(value) if isinstance(value, tuple) else value
    return inputs, attrs


def export_graph(model: nn.Module, example_input: torch.Tensor, name: str = "model") -> Graph:
    """Export ``model`` (in eval mode) on ``example_input`` to an IR :class:`Graph`.

    Parameters and buffers become constant values named by their module path
    (``conv1.weight``), so later passes can find the layer each weight belongs to.
    """
    model = model.eval()
    try:
        exported = torch.export.export(model, (example_input,))
    except Exception as exc:  # torch raises many types here; name the model and the cause
        raise UnsupportedOpError(
            f"torch.export could not trace {type(model).__name__}: {exc}. Data-dependent Python "
            "control flow is the usual cause; make forward() a straight-line computation"
        ) from exc
    signature = exported.graph_signature
    state = dict(exported.state_dict)
    state.update(getattr(exported, "constants", {}) or {})
    const_names = {
        **signature.inputs_to_parameters,
        **signature.inputs_to_buffers,
        **getattr(signature, "inputs_to_lifted_tensor_constants", {}),
    }
    graph = Graph(name)
    values: dict[str, Value] = {}
    for node in exported.graph.nodes:
        if node.op == "placeholder":
            if node.name in const_names:
                fqn = const_names[node.name]
                data = state[fqn].detach().cpu().numpy()
                values[node.name] = Value(fqn, _tensor_type(node.meta["val"], fqn), data=data)
            else:
                value = Value(node.name, _tensor_type(node.meta["val"], node.name))
                values[node.name] = value
                graph.inputs.append(value)
        elif node.op == "call_function":
            op_type = str(node.target)
            if not isinstance(node.target, torch._ops.OpOverload):
                raise UnsupportedOpError(
                    f"node '{node.name}' calls {node.target}, which is not an ATen op; "
                    "register a convert rule with @register_op"
                )
            out = Value(node.name, _tensor_type(node.meta.get("val"), f"{op_type} ({node.name})"))
            inputs, attrs = _schema_inputs_and_attrs(node, values)
            convert = OpRegistry.rule(op_type, "convert")
            if convert is not None:
                info = NodeInfo(
                    node.name,
                    op_type,
                    node.target,
                    tuple(node.args),
                    dict(node.kwargs),
                    inputs,
                    [out],
                    attrs,
                )
                ir_node = convert(info)
            else:
                ir_node = Node(node.name, op_type, inputs, [out], attrs)
            graph.add(ir_node)
            for produced in ir_node.outputs:
                values[produced.name] = produced
        elif node.op == "output":
            results = node.args[0]
            graph.outputs = [values[r.name] for r in results]
        else:
            raise UnsupportedOpError(f"unexpected FX node kind '{node.op}' at '{node.name}'")
    return graph.validate()
