"""Mixed-precision search: the evaluator (``MiCoEval``); strategies arrive with their issue."""

from mico.search.evaluator import MiCoEval

__all__ = ["MiCoEval"]
