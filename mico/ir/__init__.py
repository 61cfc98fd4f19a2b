"""mico's typed IR: data types, tensor types, graphs and the operator registry."""

from mico.ir.dtypes import DataType
from mico.ir.graph import Graph, Node, Value
from mico.ir.ops.registry import OpRegistry
from mico.ir.types import TensorType

__all__ = ["DataType", "Graph", "Node", "OpRegistry", "TensorType", "Value"]
