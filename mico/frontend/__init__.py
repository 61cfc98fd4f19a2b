"""torch -> IR: ``export_model`` / ``extract_ir`` (seed 001) and ``export_graph``."""

from mico.frontend.export import export_graph, export_model, extract_ir, program_to_ir
from mico.ir.analyzer import (
    IRGraph,
    NodeInfo,
    OpNode,
    TensorListRef,
    TensorMeta,
    find_rule,
    register_executor,
    register_op,
)

__all__ = [
    "IRGraph",
    "NodeInfo",
    "OpNode",
    "TensorListRef",
    "TensorMeta",
    "export_graph",
    "export_model",
    "extract_ir",
    "find_rule",
    "program_to_ir",
    "register_executor",
    "register_op",
]
