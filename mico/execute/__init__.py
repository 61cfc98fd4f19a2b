"""Reference execution and verification."""

from mico.execute.reference import run_graph
from mico.execute.verify import Agreement, compare_outputs

__all__ = ["Agreement", "compare_outputs", "run_graph"]
