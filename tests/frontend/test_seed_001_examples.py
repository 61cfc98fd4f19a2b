"""Seed 001's extension guide, example by example, against mico.

Import lines are changed as ARCHITECTURE.md maps them (``torch_ir`` -> ``mico.ir``…); until
``mico/ir/__init__.py`` re-exports them, the names come from the modules that define them:
``extract_ir`` / ``export_model`` (``mico.frontend``), ``OpNode`` / ``NodeInfo`` /
``register_op`` / ``register_executor`` (``mico.ir.analyzer``). Every registration happens inside
``OpRegistry.scoped()`` so that no test leaks rules into another.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from mico.execute import execute_ir, verify_ir
from mico.frontend import export_model, extract_ir
from mico.ir.analyzer import IRGraph, NodeInfo, OpNode, register_executor, register_op
from mico.ir.graph import Value
from mico.ir.ops.registry import OpRegistry, get_conversion_fn, get_execution_fn
from mico.ir.serialize import load_ir, save_ir


# --------------------------------------------------------------------------- the custom op
@torch.library.custom_op("custom::fused_gate", mutates_args=())
def fused_gate(gate: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(gate) * value


@fused_gate.register_fake
def _fused_gate_fake(gate: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(value)


class GatedModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Linear(4, 4)
        self.value = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(fused_gate(self.gate(x), self.value(x)))


@pytest.fixture
def registry():
    with OpRegistry.scoped() as reg:
        yield reg


def _register_seed_fused_gate() -> tuple[Any, Any]:
    """Section 5, "Complete Example: Non-ATen Custom Op" (my_custom_ops.py), verbatim body."""

    @register_op("custom.fused_gate")
    def convert_fused_gate(node_info: NodeInfo) -> OpNode:
        return OpNode(
            name=node_info.name,
            op_type="custom.fused_gate",
            inputs=node_info.input_metas,
            outputs=node_info.output_metas,
            attrs=node_info.attrs,
        )

    @register_executor("custom.fused_gate")
    def execute_fused_gate(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
        """Fused gating: sigmoid(gate) * value."""
        gate = inputs[0]
        value = inputs[1]
        return [torch.sigmoid(gate) * value]

    return convert_fused_gate, execute_fused_gate


# --------------------------------------------------------------------------- section 2
def test_registry_structure_and_priority(registry) -> None:
    """2.1/2.2: conversion and execution rules live in one registry; absent means default."""
    assert get_conversion_fn("aten.conv2d.default") is None  # default conversion handles it
    assert get_execution_fn("aten.conv2d.default") is None  # the ATen fallback runs it
    convert, execute = _register_seed_fused_gate()
    assert get_conversion_fn("custom.fused_gate") is convert
    assert get_execution_fn("custom.fused_gate") is execute


def test_operator_name_patterns() -> None:
    """2.3: ``aten.<op_name>.<overload>``."""

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(1, 2, 3)
            self.fc = nn.Linear(2, 3)

        def forward(self, x):
            y = torch.softmax(self.fc(self.conv(x).mean((2, 3))), dim=1)
            return y + y

    ops = [n.op for n in extract_ir(Net(), (torch.randn(1, 1, 5, 5),)).nodes]
    assert ops == [
        "aten.conv2d.default",
        "aten.mean.dim",
        "aten.linear.default",
        "aten.softmax.int",
        "aten.add.Tensor",
    ]


# --------------------------------------------------------------------------- section 3
def test_basic_custom_executor(registry) -> None:
    """3.1: an executor for a non-ATen op (``some_operation`` made concrete: x * param)."""

    def some_operation(x: torch.Tensor, param: float) -> torch.Tensor:
        return x * param

    @register_executor("my_custom_op")
    def execute_my_custom_op(
        inputs: list[torch.Tensor], attrs: dict[str, Any]
    ) -> list[torch.Tensor]:
        """Execute my_custom_op."""
        x = inputs[0]
        param = attrs.get("param", 1.0)
        result = some_operation(x, param)
        return [result]  # Always return as list

    x = Value("x", _fp32((2, 3)))
    y = Value("y", _fp32((2, 3)))
    graph = IRGraph("g", inputs=[x], outputs=[y])
    graph.add(
        OpNode(name="n", op_type="my_custom_op", inputs=[x], outputs=[y], attrs={"param": 3.0})
    )
    data = torch.randn(2, 3)
    assert torch.equal(execute_ir(graph, [data])[0], data * 3.0)
    graph.nodes[0].attrs.clear()  # 8.3: the default applies
    assert torch.equal(execute_ir(graph, [data])[0], data)


def test_multi_output_executor(registry) -> None:
    """3.3: an executor returning two outputs."""

    @register_executor("my_op_with_two_outputs")
    def execute_my_op(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
        x = inputs[0]
        values, indices = x.topk(attrs.get("k", 1), dim=attrs.get("dim", -1))
        return [values, indices]  # Two outputs

    x = Value("x", _fp32((2, 5)))
    values = Value("values", _fp32((2, 2)))
    from mico.ir.dtypes import DataType
    from mico.ir.types import TensorType

    indices = Value("indices", TensorType((2, 2), DataType.INT64))
    graph = IRGraph("g", inputs=[x], outputs=[values, indices])
    graph.add(OpNode("topk", "my_op_with_two_outputs", [x], [values, indices], {"k": 2}))
    data = torch.randn(2, 5)
    got_values, got_indices = execute_ir(graph, data)
    expected = data.topk(2, dim=-1)
    assert torch.equal(got_values, expected.values) and torch.equal(got_indices, expected.indices)


# --------------------------------------------------------------------------- section 4
def test_custom_conversion_with_extra_info(registry) -> None:
    """4: a convert rule customizing the OpNode; 4.1/4.2: the NodeInfo it receives."""
    seen: list[NodeInfo] = []

    @register_op("aten.linear.default")  # stands for "my_custom_op": any op can be converted
    def convert_my_custom_op(node_info: NodeInfo) -> OpNode:
        """Custom conversion with extra processing."""
        seen.append(node_info)
        return OpNode(
            name=node_info.name,
            op_type="aten.linear.default",
            inputs=node_info.input_metas,
            outputs=node_info.output_metas,
            attrs={**node_info.attrs, "extra_info": "custom_value"},
        )

    model = nn.Sequential(nn.Linear(3, 2)).eval()
    x = torch.randn(4, 3)
    graph = extract_ir(model, (x,))
    (info,) = seen
    assert info.name == "linear" and info.op == "call_function"
    assert info.target is torch.ops.aten.linear.default
    assert [m.name for m in info.input_metas] == ["input", "0.weight", "0.bias"]
    assert [m.type.shape for m in info.output_metas] == [(4, 2)]
    assert info.attrs == {}  # linear has no non-tensor arguments
    assert graph.nodes[0].attrs == {"extra_info": "custom_value"}
    assert graph.nodes[0].op_type == "aten.linear.default"
    # extra attributes are metadata: the ATen fallback still runs the node
    assert torch.allclose(execute_ir(graph, x)[0], model(x))


# --------------------------------------------------------------------------- section 5
def test_complete_custom_op_example_end_to_end(registry, tmp_path) -> None:
    """5: ``custom.fused_gate`` (a torch.library op) extracts, saves, loads and executes."""
    _convert, execute = _register_seed_fused_gate()
    torch.manual_seed(0)
    model = GatedModel().eval()
    x = torch.randn(2, 4)
    graph = extract_ir(model, (x,))
    gate_nodes = [n for n in graph.nodes if n.op == "custom.fused_gate"]
    assert len(gate_nodes) == 1 and [v.name for v in gate_nodes[0].inputs] == ["linear", "linear_1"]
    calls: list[int] = []

    @register_executor("custom.fused_gate", override=True)
    def counting(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
        calls.append(1)
        return execute(inputs, attrs)

    loaded = load_ir(save_ir(graph, tmp_path / "gated.json"))
    out = execute_ir(loaded, x)[0]
    assert calls == [1]
    with torch.no_grad():
        assert torch.equal(out, model(x))
    assert verify_ir(loaded, model, (x,)).ok


def test_custom_op_without_registration_runs_through_its_schema() -> None:
    """Registration is optional even for a torch.library op: it has a schema."""
    model = GatedModel().eval()
    x = torch.randn(2, 4)
    graph = extract_ir(model, (x,))
    assert "custom.fused_gate.default" in [n.op for n in graph.nodes]
    with torch.no_grad():
        assert torch.equal(execute_ir(graph, x)[0], model(x))


# --------------------------------------------------------------------------- section 6
def test_module_organization_registers_on_import(registry) -> None:
    """6: registering happens when the module defining the rules is imported (here: called)."""
    assert get_execution_fn("custom.fused_gate") is None
    _register_seed_fused_gate()  # what ``import my_ops`` would do
    assert get_execution_fn("custom.fused_gate") is not None


# --------------------------------------------------------------------------- section 7
def test_debugging_tips(capsys) -> None:
    """7.1 FX graph, 7.2 registration, 7.3 ATen schema."""
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU())
    inputs = (torch.randn(1, 1, 5, 5),)

    exported = export_model(model, inputs, strict=False)

    # Print FX graph
    print(exported.graph_module.graph)

    # Check individual nodes
    for node in exported.graph_module.graph.nodes:
        if node.op == "call_function":
            print(f"Node: {node.name}")
            print(f"  Target: {node.target}")
            print(f"  Args: {node.args}")

    op_type = "my_custom_op"
    print(f"Conversion: {get_conversion_fn(op_type)}")
    print(f"Execution: {get_execution_fn(op_type)}")

    fn = torch.ops.aten.conv2d.default
    for arg in fn._schema.arguments:
        print(f"  {arg.name}: {arg.type} (kwarg_only={arg.kwarg_only})")

    out = capsys.readouterr().out
    assert "Node: conv2d" in out and "Target: aten.conv2d.default" in out
    assert "Conversion: None" in out and "  stride: List[int] (kwarg_only=False)" in out
    assert model.training, "export_model leaves the model's training flag as it was"


# --------------------------------------------------------------------------- section 8
def test_registering_an_aten_executor_replaces_the_fallback(registry) -> None:
    """8.1: a registered ATen executor is called instead of the fallback."""

    @register_executor("aten.relu.default")
    def fake_relu(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
        return [inputs[0].abs()]

    graph = extract_ir(nn.ReLU(), (torch.randn(3),))
    x = torch.tensor([-1.0, 2.0, -3.0])
    assert torch.equal(execute_ir(graph, x)[0], x.abs())


def _fp32(shape: tuple[int, ...]):
    from mico.ir.dtypes import DataType
    from mico.ir.types import TensorType

    return TensorType(shape, DataType.FP32)
