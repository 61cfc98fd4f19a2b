"""mico's typed IR: data types, value types, expressions, graphs and the operator registry.

Seed 002's API lives here (``from mico import ir``; ``from mico.ir import DataType``):
``ir.Span``, ``ir.ConstInt``, ``ir.Var``, ``ir.ScalarType``, ``ir.TensorType``, ``ir.TileType``,
``ir.DYNAMIC_DIM``, ``ir.create_op_call``, ``ir.is_op_registered``, ``ir.get_op``, and ops are
defined through ``ir.OpRegistry.register(name)``. See ``docs/ir.md``.
"""

from mico.ir.analyzer import IRGraph, NodeInfo, OpNode, TensorListRef, TensorMeta
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
from mico.ir.serialize import IRFormatError, load_ir, save_ir
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

# seed 001's entry points live in mico.frontend / mico.execute, which import mico.ir: lazy
_LAZY = {
    "export_model": "mico.frontend.export",
    "extract_ir": "mico.frontend.export",
    "execute_ir": "mico.execute.executor",
    "verify_ir": "mico.execute.verifier",
    "VerifyReport": "mico.execute.verifier",
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mico.ir' has no attribute {name!r}")


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
    "IRFormatError",
    "IRGraph",
    "InvalidTypeError",
    "Node",
    "NodeInfo",
    "OpBuilder",
    "OpDef",
    "OpNode",
    "OpRegistry",
    "ScalarType",
    "ShapedType",
    "Span",
    "SymbolicDim",
    "SymbolicShapeError",
    "TensorListRef",
    "TensorMeta",
    "TensorType",
    "TileType",
    "Type",
    "Value",
    "Var",
    "VerifyReport",
    "broadcast_shapes",
    "create_op_call",
    "describe",
    "execute_ir",
    "export_model",
    "extract_ir",
    "get_op",
    "is_op_registered",
    "list_ops",
    "load_ir",
    "promote_types",
    "save_ir",
    "search",
    "verify_ir",
]
