"""Every Python example of seed 002 (the operator registration system), imports changed to
``from mico import ir`` / ``from mico.ir import DataType``; plus its C++ registration example
written with the same fluent chain in Python."""

import pytest

from mico import ir
from mico.ir import DataType


def test_creating_tensors_and_tiles():
    span = ir.Span.unknown()

    # Create a 2D tensor [4, 8]
    dim4 = ir.ConstInt(4, DataType.INT32, span)
    dim8 = ir.ConstInt(8, DataType.INT32, span)
    tensor_type = ir.TensorType(DataType.FP32, [dim4, dim8])
    tensor_var = ir.Var("t", tensor_type, span)

    # Create a 2D tile [16, 16]
    dim16 = ir.ConstInt(16, DataType.INT32, span)
    tile_type = ir.TileType(DataType.FP16, [dim16, dim16])
    tile_var = ir.Var("tile", tile_type, span)

    assert tensor_var.type.shape == (4, 8) and tensor_var.type.dtype == DataType.FP32
    assert tile_var.type.shape == (16, 16) and tile_var.type.dtype == DataType.FP16


def test_using_operators(capsys):
    span = ir.Span.unknown()
    dim4 = ir.ConstInt(4, DataType.INT32, span)
    dim8 = ir.ConstInt(8, DataType.INT32, span)

    # Create tensor variables
    tensor_a = ir.Var("a", ir.TensorType(DataType.FP32, [dim4, dim8]), span)
    tensor_b = ir.Var("b", ir.TensorType(DataType.FP32, [dim8]), span)

    # Create tensor add operation (with automatic type deduction)
    result = ir.create_op_call("tensor.add", [tensor_a, tensor_b], span)

    # result.type is TensorType(FP32, [4, 8]) due to broadcasting
    print(result.type.dtype)  # FP32
    print(len(result.type.shape))  # 2

    assert result.type == ir.TensorType(DataType.FP32, [4, 8])
    assert result.type.dtype == DataType.FP32 and result.type.dtype.name == "FP32"
    assert capsys.readouterr().out.split() == ["fp32", "2"]
    assert result.op.name == "tensor.add" and result.args == [tensor_a, tensor_b]
    assert result.span is span


def test_query_operator_registry(capsys):
    # Check if operator is registered
    assert ir.is_op_registered("tensor.add")
    assert ir.is_op_registered("tile.mul")

    # Get operator instance
    op = ir.get_op("tensor.add")
    print(op.name)  # "tensor.add"
    assert capsys.readouterr().out.strip() == "tensor.add"


def test_dynamic_dimensions():
    # Use dynamic dimension constant
    assert ir.DYNAMIC_DIM == -1

    # Create tile with dynamic dimension
    span = ir.Span.unknown()
    dynamic_dim = ir.ConstInt(ir.DYNAMIC_DIM, DataType.INT32, span)
    tile_type = ir.TileType(DataType.FP32, [dynamic_dim, ir.ConstInt(16, DataType.INT32, span)])

    assert isinstance(tile_type.shape[0], ir.SymbolicDim) and tile_type.shape[1] == 16


def test_error_handling(capsys):
    span = ir.Span.unknown()
    dim1, dim2, dim3 = (ir.ConstInt(n, DataType.INT32, span) for n in (1, 2, 3))
    dim4 = ir.ConstInt(4, DataType.INT32, span)
    dim8 = ir.ConstInt(8, DataType.INT32, span)
    tensor_a = ir.Var("a", ir.TensorType(DataType.FP32, [dim4, dim8]), span)
    tensor = tensor_a
    scalar = ir.Var("s", ir.ScalarType(DataType.FP32), span)

    # Wrong argument count
    try:
        ir.create_op_call("tensor.add", [tensor_a], span)
    except Exception as e:
        print(e)  # "Operator 'tensor.add' expects 2 arguments, got 1"

    # Type mismatch
    try:
        ir.create_op_call("tensor.add", [scalar, tensor], span)
    except Exception as e:
        print(e)  # "TensorAdd: first argument must be a TensorType, got ScalarType"

    # Tile dimension constraint violation
    try:
        ir.TileType(DataType.FP32, [dim1, dim2, dim3])
    except Exception as e:
        print(e)  # "TileType can have at most 2 dimensions, got 3"

    assert capsys.readouterr().out.splitlines() == [
        "Operator 'tensor.add' expects 2 arguments, got 1",
        "TensorAdd: first argument must be a TensorType, got ScalarType",
        "TileType can have at most 2 dimensions, got 3",
    ]


def test_broadcasting_rules_of_the_seed():
    cases = {
        ((4, 8), (4, 8)): (4, 8),  # Exact match
        ((4, 8), (8,)): (4, 8),  # Missing left dimension = 1
        ((4, 1), (8,)): (4, 8),  # Size 1 broadcasts
        ((1, 8), (4, 8)): (4, 8),  # Size 1 broadcasts
    }
    for (a, b), out in cases.items():
        r = ir.broadcast_shapes(a, b)
        assert r.compatible and r.shape == out
    assert "dimension 8 vs 5" in ir.broadcast_shapes((4, 8), (5,)).message
    assert ir.broadcast_shapes((4, 8), (3, 5)).incompatible


def test_type_promotion_examples_of_the_seed():
    assert ir.promote_types(DataType.INT32, DataType.INT32) == DataType.INT32
    assert ir.promote_types(DataType.INT32, DataType.FP32) == DataType.FP32
    assert ir.promote_types(DataType.INT32, DataType.INT64) == DataType.INT64
    assert ir.promote_types(DataType.UINT32, DataType.INT32) == DataType.INT32


def test_cpp_registration_example_in_python():
    """The seed's REGISTER_OP("tensor.add") chain, as mico's fluent Python registry."""

    def deduce(args):
        assert len(args) == 2, "tensor.add requires exactly 2 arguments"
        tensor1, tensor2 = args[0].type, args[1].type
        result_dtype = ir.promote_types(tensor1.dtype, tensor2.dtype)
        broadcast_result = ir.broadcast_shapes(tensor1.shape, tensor2.shape)
        assert broadcast_result.success, "Incompatible shapes for broadcasting"
        return ir.TensorType(result_dtype, broadcast_result.shape)

    with ir.OpRegistry.scoped():
        (
            ir.OpRegistry.register("example.add")
            .set_op_category("TensorOp")
            .set_description("Element-wise addition of two tensors with broadcasting")
            .add_argument("lhs", "Left-hand side tensor (TensorType)")
            .add_argument("rhs", "Right-hand side tensor (TensorType)")
            .f_deduce_type(deduce)
        )
        span = ir.Span.unknown()
        a = ir.Var("a", ir.TensorType(DataType.FP32, [4, 8]), span)
        b = ir.Var("b", ir.TensorType(DataType.INT32, [8]), span)
        result = ir.create_op_call("example.add", [a, b], span)
        assert result.type == ir.TensorType(DataType.FP32, [4, 8])
        with pytest.raises(TypeError, match="ExampleAdd: second argument must be a TensorType"):
            ir.create_op_call("example.add", [a, ir.Var("s", ir.ScalarType(DataType.FP32))])
    assert not ir.is_op_registered("example.add")


def test_docs_ir_md_first_example_runs():
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "ir.md").read_text()
    first = re.findall(r"```python\n(.*?)```", text, flags=re.S)[0]
    exec(compile(first, "docs/ir.md", "exec"), {})
