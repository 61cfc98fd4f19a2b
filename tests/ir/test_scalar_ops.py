"""Seed 002's ScalarOp category and seed 001's ``node.op_type`` on extracted graphs."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from mico import ir
from mico.errors import TypeDeductionError
from mico.ir import DataType, OpRegistry


def scalar(name, dtype):
    return ir.Var(name, ir.ScalarType(dtype))


def test_scalar_ops_are_their_own_category():
    assert ir.list_ops("ScalarOp") == ["scalar.add", "scalar.div", "scalar.mul", "scalar.sub"]
    assert OpRegistry.get("scalar.add").category == "ScalarOp"


@pytest.mark.parametrize(
    ("a", "b", "result"),
    [
        (DataType.INT32, DataType.FP32, DataType.FP32),
        (DataType.INT8, DataType.INT32, DataType.INT32),
    ],
)
def test_promotion_follows_the_tensor_rules(a, b, result):
    call = ir.create_op_call("scalar.mul", [scalar("a", a), scalar("b", b)])
    assert call.type == ir.ScalarType(result)


def test_tensors_and_bools_are_refused():
    tensor = ir.Var("t", ir.TensorType(DataType.FP32, [2]))
    with pytest.raises(TypeDeductionError, match="ScalarAdd: first argument must be a ScalarType"):
        ir.create_op_call("scalar.add", [tensor, scalar("b", DataType.FP32)])
    with pytest.raises(TypeDeductionError, match="bool operands are not supported"):
        ir.create_op_call("scalar.add", [scalar("a", DataType.BOOL), scalar("b", DataType.BOOL)])


@given(st.integers(-1000, 1000), st.integers(-1000, 1000).filter(lambda v: v != 0))
def test_integer_division_truncates_like_c(a, b):
    run = OpRegistry.rule("scalar.div", "execute")
    (out,) = run([torch.tensor(a, dtype=torch.int32), torch.tensor(b, dtype=torch.int32)], {})
    assert int(out) == int(a / b)  # toward zero


def test_extracted_nodes_expose_op_type():
    from mico.ir import extract_ir
    from mico.models import from_zoo

    model = from_zoo("small_cnn")
    graph = extract_ir(model, model.example_input())
    assert [n.op_type for n in graph.nodes] == [n.op for n in graph.nodes]
    assert graph.nodes[0].op_type == "aten.conv2d.default"
