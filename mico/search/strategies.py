"""The search strategies by the names `mico tune --strategy` and configs use."""

from __future__ import annotations

from mico.search.bayes import BayesSearcher
from mico.search.haq import HAQSearcher
from mico.search.pareto import ParetoSearcher
from mico.search.regression import RegressionSearcher
from mico.search.searchers import NLPSearcher, QSearcher, RandomSearcher
from mico.search.surrogate import MiCoSearcher

#: name -> searcher class; every class takes ``(evaluator, qtypes=..., seed=...)`` and has the
#: seed's ``search(n_iterations, objective, constraint_type, constraint_value)``.
STRATEGIES: dict[str, type[QSearcher]] = {
    "random": RandomSearcher,
    "nlp": NLPSearcher,
    "mico": MiCoSearcher,
    "bayes": BayesSearcher,
    "haq": HAQSearcher,
    "regression": RegressionSearcher,
    "pareto": ParetoSearcher,
}
