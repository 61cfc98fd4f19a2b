"""execute_ir (registered executors, schema fallback, clear errors) and verify_ir (per-output
report, first divergent node)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from mico.errors import MicoError, UnsupportedOpError
from mico.execute import execute_ir, verify_ir
from mico.execute.verifier import compare
from mico.frontend import export_graph, extract_ir
from mico.ir.analyzer import ExecutionError, IRGraph, OpNode, register_executor
from mico.ir.dtypes import DataType
from mico.ir.graph import Value
from mico.ir.ops.registry import OpRegistry
from mico.ir.types import TensorType


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        y = torch.relu(self.conv(x)).flatten(1)
        return torch.relu(self.fc(y))


@pytest.fixture
def net() -> Net:
    torch.manual_seed(0)
    return Net().eval()


@pytest.fixture
def x() -> torch.Tensor:
    return torch.randn(2, 1, 4, 4, generator=torch.Generator().manual_seed(1))


@pytest.fixture
def registry():
    with OpRegistry.scoped() as reg:
        yield reg


# --------------------------------------------------------------------------- execution
def test_every_aten_op_runs_through_the_schema_fallback(net: Net, x: torch.Tensor) -> None:
    graph = extract_ir(net, (x,))
    assert all(OpRegistry.rule(n.op, "execute") is None for n in graph.nodes)
    with torch.no_grad():
        assert torch.equal(execute_ir(graph, x)[0], net(x))
    # the graph export_graph builds (weights bound into the values) runs too
    bound = export_graph(net, x)
    with torch.no_grad():
        assert torch.equal(execute_ir(bound, [x])[0], net(x))


def test_weights_can_be_supplied_at_execution(net: Net, x: torch.Tensor) -> None:
    graph = extract_ir(net, (x,))
    zeros = {name: torch.zeros_like(t) for name, t in graph.weights.items()}
    assert torch.equal(execute_ir(graph, x, weights=zeros)[0], torch.zeros(2, 5))


def test_a_missing_weight_names_the_node_and_the_weight(net: Net, x: torch.Tensor) -> None:
    graph = extract_ir(net, (x,))
    del graph.weights["fc.weight"]
    with pytest.raises(
        ExecutionError,
        match=r"node 'linear' \(aten\.linear\.default\) reads weight 'fc\.weight', which is "
        r"missing",
    ):
        execute_ir(graph, x)


def _single(op: str, attrs: dict[str, Any] | None = None) -> IRGraph:
    a = Value("a", TensorType((3,), DataType.FP32))
    b = Value("b", TensorType((3,), DataType.FP32))
    graph = IRGraph("g", inputs=[a], outputs=[b])
    graph.add(OpNode("n0", op, [a], [b], attrs or {}))
    return graph


def test_an_unknown_op_without_fallback_is_a_clear_error() -> None:
    with pytest.raises(
        UnsupportedOpError,
        match=r"node 'n0' \(vendor\.warp\) has no execute rule.*"
        r"@register_executor\('vendor\.warp'\)",
    ):
        execute_ir(_single("vendor.warp"), torch.ones(3))
    with pytest.raises(UnsupportedOpError, match=r"aten\.no_such_op\.default"):
        execute_ir(_single("aten.no_such_op.default"), torch.ones(3))


def test_fallback_errors_name_the_node() -> None:
    graph = _single("aten.softmax.int")  # 'dim' is required and missing
    with pytest.raises(ExecutionError, match=r"node 'n0' \(aten\.softmax\.int\).*'dim'"):
        execute_ir(graph, torch.ones(3))
    assert torch.allclose(
        execute_ir(_single("aten.softmax.int", {"dim": 0}), torch.ones(3))[0],
        torch.full((3,), 1 / 3),
    )


def test_executor_failures_and_bad_results_name_the_node(registry) -> None:
    @register_executor("vendor.boom")
    def boom(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
        raise ZeroDivisionError("bad scale")

    @register_executor("vendor.two")
    def two(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
        return [inputs[0], inputs[0]]

    with pytest.raises(
        ExecutionError, match=r"failed at node 'n0' \(vendor\.boom\): ZeroDivisionError: bad scale"
    ):
        execute_ir(_single("vendor.boom"), torch.ones(3))
    with pytest.raises(ExecutionError, match=r"produced 2 result\(s\) for its 1 output"):
        execute_ir(_single("vendor.two"), torch.ones(3))


def test_inputs_are_checked_against_the_graph(net: Net, x: torch.Tensor) -> None:
    graph = extract_ir(net, (x,))
    with pytest.raises(ExecutionError, match=r"takes 1 input\(s\) \(x\), got 2"):
        execute_ir(graph, [x, x])
    with pytest.raises(ExecutionError, match=r"has shape \(2, 1, 4, 4\).*got \(3, 1, 4, 4\)"):
        execute_ir(graph, torch.zeros(3, 1, 4, 4))
    with pytest.raises(ExecutionError, match=r"has dtype fp32, got torch.float64"):
        execute_ir(graph, x.double())
    assert issubclass(ExecutionError, MicoError)


# --------------------------------------------------------------------------- verification
def test_verify_report_on_agreement(net: Net, x: torch.Tensor) -> None:
    report = verify_ir(extract_ir(net, (x,)), net, (x,))
    assert report.ok and bool(report)
    (out,) = report.outputs
    assert out.shape_match and out.dtype_match and out.max_abs_error == 0.0
    assert out.mean_abs_error == 0.0 and report.first_divergence is None
    assert "verify: OK" in report.summary()


def test_verify_pinpoints_the_first_divergent_node(net: Net, x: torch.Tensor, registry) -> None:
    graph = extract_ir(net, (x,))

    @register_executor("aten.linear.default")
    def wrong_linear(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
        x_, w, b = inputs
        return [torch.nn.functional.linear(x_, w, b) + 0.5]  # a deliberate bug

    report = verify_ir(graph, net, (x,))
    assert not report.ok
    assert report.outputs[0].max_abs_error > 0.1 and report.outputs[0].dtype_match
    div = report.first_divergence
    assert div is not None and div.node == "linear" and div.op == "aten.linear.default"
    assert "first divergence: node 'linear'" in report.summary()


def test_verify_reports_dtype_mismatches_as_failures(registry) -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU()).eval()
    x = torch.randn(2, 3)
    graph = extract_ir(model, (x,))

    @register_executor("aten.relu.default")
    def double_relu(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
        return [torch.relu(inputs[0]).double()]  # right values, wrong dtype

    report = verify_ir(graph, model, (x,))
    out = report.outputs[0]
    assert not report.ok and not out.dtype_match and out.shape_match
    assert out.max_abs_error < 1e-6
    assert "dtype torch.float64 != expected torch.float32" in report.summary()
    assert report.first_divergence is not None and report.first_divergence.node == "relu"


def test_verify_reports_shape_mismatches_and_execution_errors(registry) -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU()).eval()
    x = torch.randn(2, 3)
    graph = extract_ir(model, (x,))

    @register_executor("aten.relu.default")
    def flat_relu(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
        return [torch.relu(inputs[0]).flatten()]

    report = verify_ir(graph, model, (x,))
    assert not report.ok and not report.outputs[0].shape_match
    assert "shape (6,) != expected (2, 3)" in report.summary()

    del graph.weights["0.weight"]
    report = verify_ir(graph, model, (x,))
    assert not report.ok and "weight '0.weight', which is missing" in report.errors[0]


def test_compare_handles_special_values() -> None:
    nan_inf = torch.tensor([float("nan"), float("inf"), 1.0])
    assert compare("t", nan_inf, nan_inf.clone()).ok
    assert not compare("t", nan_inf, torch.tensor([0.0, float("inf"), 1.0])).ok
    assert compare("t", torch.tensor([1, 2]), torch.tensor([1, 2])).ok
    assert not compare("t", torch.tensor([1, 2]), torch.tensor([1, 3])).ok
