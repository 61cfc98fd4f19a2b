"""The searchers' entries in the module registry (category ``searcher``), loaded by
:func:`mico.registry.builtin.load_builtin`."""

from __future__ import annotations

from typing import Any


def register(registry: Any) -> None:
    from mico.search.bayes import BayesSearcher
    from mico.search.haq import HAQSearcher
    from mico.search.pareto import ParetoSearcher
    from mico.search.regression import RegressionSearcher
    from mico.search.searchers import NLPSearcher, RandomSearcher
    from mico.search.surrogate import MiCoSearcher

    for cls, name, tags in (
        (RandomSearcher, "random", ["sampling", "baseline"]),
        (NLPSearcher, "nlp", ["sensitivity", "integer-program", "milp"]),
        (MiCoSearcher, "mico", ["surrogate", "random-forest", "xgboost", "gaussian-process"]),
        (BayesSearcher, "bayes", ["bayesian", "optuna", "tpe", "gaussian-process"]),
        (HAQSearcher, "haq", ["reinforcement-learning", "policy-gradient", "haq"]),
        (RegressionSearcher, "regression", ["regression", "model-based"]),
        (ParetoSearcher, "pareto", ["multi-objective", "pareto", "surrogate"]),
    ):
        if registry.get_module(name) is None:
            registry.add(cls, name, "searcher", author="mico", tags=tags,
                         hardware_support=["host", "rv32", "rv64", "bitfusion"])  # fmt: skip
