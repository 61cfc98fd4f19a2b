"""mico's typed IR: data types, value types, expressions, graphs and the operator registry.

Seed 002's API lives here (``from mico import ir``; ``from mico.ir import DataType``):
``ir.Span``, ``ir.ConstInt``, ``ir.Var``, ``ir.ScalarType``, ``ir.TensorType``, ``ir.TileType``,
``ir.DYNAMIC_DIM``, ``ir.create_op_call``, ``ir.is_op_registered``, ``ir.get_op``, and ops are
defined through ``ir.OpRegistry.register(name)``. See ``docs/ir.md``.
"""

from mico.ir.broadcast import BroadcastResult, broadcast_shapes
from mico.ir.dtypes import DataType
from mico.ir.expr import Call, ConstFloat, ConstInt, Expr, Span, Var
from mico.ir.graph import Graph, Node, Value
from mico.ir.ops import library as _library  # noqa: F401  (registers tensor.*, tile.*, mico.*)
from mico.ir.ops.registry import (
    ArgumentSpec,
    AttributeSpec,
    OpBuilder,
    OpDef,
    OpRegistry,
    create_op_call,
    describe,
    get_op,
    is_op_registered,
    list_ops,
    search,
)
from mico.ir.promotion import promote_types
from mico.ir.types import (
    DYNAMIC_DIM,
    InvalidTypeError,
    ScalarType,
    ShapedType,
    SymbolicDim,
    SymbolicShapeError,
    TensorType,
    TileType,
    Type,
)

__all__ = [
    "DYNAMIC_DIM",
    "ArgumentSpec",
    "AttributeSpec",
    "BroadcastResult",
    "Call",
    "ConstFloat",
    "ConstInt",
    "DataType",
    "Expr",
    "Graph",
    "InvalidTypeError",
    "Node",
    "OpBuilder",
    "OpDef",
    "OpRegistry",
    "ScalarType",
    "ShapedType",
    "Span",
    "SymbolicDim",
    "SymbolicShapeError",
    "TensorType",
    "TileType",
    "Type",
    "Value",
    "Var",
    "broadcast_shapes",
    "create_op_call",
    "describe",
    "get_op",
    "is_op_registered",
    "list_ops",
    "promote_types",
    "search",
]
