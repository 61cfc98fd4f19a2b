"""Reference execution and verification."""

from mico.execute.executor import execute_ir, execute_node, run_ir
from mico.execute.reference import run_graph
from mico.execute.verifier import Comparison, Divergence, VerifyReport, verify_ir
from mico.execute.verify import Agreement, compare_outputs

__all__ = [
    "Agreement",
    "Comparison",
    "Divergence",
    "VerifyReport",
    "compare_outputs",
    "execute_ir",
    "execute_node",
    "run_graph",
    "run_ir",
    "verify_ir",
]
