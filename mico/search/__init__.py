"""Mixed-precision search: the evaluator (``MiCoEval``) and searchers (random, NLP/ILP)."""

from mico.search.evaluator import MiCoEval
from mico.search.searchers import NLPSearcher, QSearcher, RandomSearcher

__all__ = ["MiCoEval", "NLPSearcher", "QSearcher", "RandomSearcher"]
