"""Mixed-precision search: the evaluator (``MiCoEval``), the search space (``DimTransform``)
and the searchers (random, NLP/ILP, surrogate, Bayesian, RL, regression, Pareto)."""

from mico.search.bayes import BayesSearcher
from mico.search.dim_transform import DimTransform, FeasibleRegion, SpaceSearcher
from mico.search.evaluator import MiCoEval
from mico.search.haq import HAQSearcher
from mico.search.pareto import ParetoPoint, ParetoSearcher, pareto_front
from mico.search.regression import RegressionSearcher
from mico.search.searchers import NLPSearcher, QSearcher, RandomSearcher
from mico.search.surrogate import MiCoSearcher

__all__ = [
    "BayesSearcher",
    "DimTransform",
    "FeasibleRegion",
    "HAQSearcher",
    "MiCoEval",
    "MiCoSearcher",
    "NLPSearcher",
    "ParetoPoint",
    "ParetoSearcher",
    "QSearcher",
    "RandomSearcher",
    "RegressionSearcher",
    "SpaceSearcher",
    "pareto_front",
]
