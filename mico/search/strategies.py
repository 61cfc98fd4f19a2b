"""The search strategies by the names `mico tune --strategy` and configs use."""

from __future__ import annotations

from mico.search.searchers import NLPSearcher, QSearcher, RandomSearcher

#: name -> searcher class; every class takes ``(evaluator, qtypes=..., seed=...)`` and has the
#: seed's ``search(n_iterations, objective, constraint_type, constraint_value)``.
STRATEGIES: dict[str, type[QSearcher]] = {
    "random": RandomSearcher,
    "nlp": NLPSearcher,
}
