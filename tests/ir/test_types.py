"""Data types, value types, symbolic dimensions and expressions."""

import copy
import pickle

import numpy as np
import pytest
import torch

from mico import ir
from mico.errors import MicoError
from mico.ir import DataType, SymbolicDim, TensorType, TileType

ALL_NAMES = (
    ["BOOL"]
    + [f"INT{b}" for b in (1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64)]
    + [f"UINT{b}" for b in (1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64)]
    + ["FP16", "BF16", "FP32", "FP64"]
)


def test_every_seed_data_type_is_a_class_attribute():
    for name in ALL_NAMES:
        dtype = getattr(DataType, name)
        assert isinstance(dtype, DataType) and dtype.name == name
        assert DataType.parse(name) is dtype or DataType.parse(name) == dtype
        assert DataType.parse(str(dtype)) == dtype
    assert [d.name for d in DataType.all()] == ALL_NAMES
    assert DataType.int(4) is not None and DataType.int(4) == DataType.INT4
    assert DataType.uint(8) == DataType.UINT8 == DataType("uint", 8)
    assert DataType.parse("float32") == DataType.FP32 == DataType.parse("float")
    assert DataType.parse("bfloat16") == DataType.BF16
    assert repr(DataType.BF16) == "DataType.BF16" and str(DataType.BF16) == "bf16"


def test_bf16_and_torch_round_trip():
    bf16 = DataType.BF16
    assert bf16.is_float and bf16.signed and bf16.container_bytes == 2 and bf16.bits == 16
    assert bf16 != DataType.FP16 and bf16.name == "BF16"
    with pytest.raises(TypeError, match="bfloat16"):
        bf16.numpy()
    for dtype in DataType.all():
        t = dtype.to_torch()
        if dtype.is_sub_byte:
            assert t == (torch.int8 if dtype.kind == "int" else torch.uint8)
        else:
            assert DataType.from_torch(t) == dtype
    assert DataType.from_torch(torch.int4) == DataType.INT4
    assert DataType.from_torch(torch.uint3) == DataType.UINT3
    with pytest.raises(TypeError, match="has no mico DataType"):
        DataType.from_torch(torch.complex64)


def test_data_type_validation():
    for kind, bits in (("float", 8), ("int", 12), ("bfloat", 32), ("bool", 1), ("uint", 0)):
        with pytest.raises(ValueError):
            DataType(kind, bits)
    with pytest.raises(ValueError, match="unknown data type"):
        DataType.parse("fp8")
    assert DataType.INT64.numpy() == np.int64 and DataType.UINT4.numpy() == np.uint8
    assert DataType.BOOL.ctype == "uint8_t" and DataType.FP64.ctype == "double"
    assert DataType.INT4.container == DataType.INT8 and DataType.INT16.container == DataType.INT16


def test_both_tensor_type_constructor_forms():
    old = TensorType((1, 8), DataType.FP32)
    new = TensorType(DataType.FP32, [ir.ConstInt(1, DataType.INT32), 8])
    kw = TensorType(shape=[1, 8], dtype=DataType.FP32)
    assert old == new == kw and hash(old) == hash(new)
    assert old.shape == (1, 8) and str(old) == "fp32[1, 8]" and old.numel == 8 and old.nbytes == 32
    assert repr(old) == "TensorType(DataType.FP32, [1, 8])"
    assert TensorType(DataType.INT4, [2, 3]).nbytes == 6
    # torch spells "infer this size" as -1: in the static (shape-first) form it is an error
    with pytest.raises(ValueError, match=r"must be >= 0.*DYNAMIC_DIM"):
        TensorType((-1, 3), DataType.FP32)
    with pytest.raises(ValueError, match="must be >= 0"):
        TensorType(DataType.FP32, [-2])
    with pytest.raises(ValueError, match="needs a DataType"):
        TensorType((1, 2), "fp32")
    with pytest.raises(ValueError, match="a dimension must be"):
        TensorType(DataType.FP32, [1.5])


def test_types_are_immutable_and_hashable():
    t = TensorType(DataType.FP32, [2, 3])
    with pytest.raises(AttributeError):
        t.shape = (1,)
    with pytest.raises(AttributeError):
        DataType.FP32.bits = 16
    assert len({t, TensorType((2, 3), DataType.FP32), TileType(DataType.FP32, [2, 3])}) == 2
    assert TileType(DataType.FP32, [2, 3]) != t  # a tile is not a tensor
    assert ir.ScalarType(DataType.FP32) == ir.ScalarType(DataType.FP32)
    assert hash(ir.ScalarType(DataType.INT8)) == hash(ir.ScalarType(DataType.INT8))
    assert copy.deepcopy(t) == t and pickle.loads(pickle.dumps(t)) == t


def test_dynamic_dims_are_distinct_symbols_unless_shared():
    a = TensorType(DataType.FP32, [ir.DYNAMIC_DIM, 8])
    b = TensorType(DataType.FP32, [ir.DYNAMIC_DIM, 8])
    assert isinstance(a.shape[0], SymbolicDim)
    assert a.shape[0] != b.shape[0] and a != b  # the seed's flaw: every -1 equals every -1
    assert a == a and a.shape[0] == a.shape[0]
    batch = SymbolicDim("batch")
    c = TensorType(DataType.FP32, [batch, 8])
    d = TensorType((batch, 8), DataType.FP32)
    assert c == d and hash(c) == hash(d) and str(c) == "fp32[batch, 8]"
    n = ir.Var("n", ir.ScalarType(DataType.INT64))
    assert TensorType(DataType.FP32, [n, 2]) == TensorType(DataType.FP32, [n, 2])
    assert TensorType(DataType.FP32, [n]).shape[0].name == "n"
    # the same ConstInt(-1) object still means "unknown", a fresh symbol at each use
    dyn = ir.ConstInt(ir.DYNAMIC_DIM, DataType.INT32)
    assert TileType(DataType.FP32, [dyn]) != TileType(DataType.FP32, [dyn])
    # copies keep the symbol (it is an identity, not data)
    assert copy.deepcopy(c) == c
    assert not a.is_static and c.symbols == (batch,)


def test_numel_of_a_symbolic_shape_is_a_clear_error():
    t = TensorType(DataType.FP32, [SymbolicDim("batch"), 8])
    with pytest.raises(ir.SymbolicShapeError, match=r"numel of fp32\[batch, 8\].*batch"):
        _ = t.numel
    with pytest.raises(MicoError, match="symbolic"):
        _ = t.nbytes
    with pytest.raises(ValueError):
        _ = t.numel


def test_tile_type_rank_limit():
    assert TileType(DataType.FP16, [16, 16]).rank == 2
    assert TileType(DataType.FP16, [16]).rank == 1
    assert TileType(DataType.FP16, []).rank == 0
    with pytest.raises(ValueError, match=r"^TileType can have at most 2 dimensions, got 3$"):
        TileType(DataType.FP32, [1, 2, 3])
    assert str(TileType(DataType.FP16, [4, 4])) == "tile fp16[4, 4]"


def test_span_and_constants():
    span = ir.Span("model.py", 3, 7)
    assert span.file == "model.py" and span.line == 3 and span.column == 7
    assert str(span) == "model.py:3:7" and not ir.Span.unknown().is_known
    assert str(ir.Span.unknown()) == "<unknown>"
    c = ir.ConstInt(5, DataType.INT8, span)
    assert c.value == 5 and c.type == ir.ScalarType(DataType.INT8) and c.span is span
    assert c == ir.ConstInt(5, DataType.INT8) and int(c) == 5
    with pytest.raises(ValueError, match="does not fit int8"):
        ir.ConstInt(300, DataType.INT8)
    with pytest.raises(ValueError, match="integer DataType"):
        ir.ConstInt(1, DataType.FP32)
    with pytest.raises(ValueError, match="needs an int"):
        ir.ConstInt(1.5, DataType.INT32)
    assert ir.ConstFloat(0.5).type == ir.ScalarType(DataType.FP32)
    v = ir.Var("x", TensorType(DataType.FP32, [2]))
    assert v.span == ir.Span.unknown() and str(v) == "%x: fp32[2]"
    with pytest.raises(ValueError, match="IR type"):
        ir.Var("x", "fp32")
    with pytest.raises(ValueError, match="cannot be a dimension"):
        TensorType(DataType.FP32, [ir.Var("f", ir.ScalarType(DataType.FP32))])
