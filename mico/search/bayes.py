"""``BayesSearcher``: Bayesian optimisation of the per-layer widths with Optuna.

Each search dimension is an ordinal parameter (the index of its width in ``qtypes``). The
sampler is Optuna's TPE (default) or its Gaussian-process sampler, seeded. The budget is an
Optuna constraint (``trial.set_constraint``, feasible when <= 0): a proposal over the budget is
never evaluated; it is told to the study as infeasible, and its repair (widths lowered until
it fits) is queued as the next trial, so the study learns both the infeasible region and the
accuracy on its boundary. The first ``n_inits`` trials are the widest uniform scheme within
the budget and feasible random schemes.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mico.errors import PlanError
from mico.search.dim_transform import DimTransform, SpaceSearcher
from mico.search.searchers import DEFAULT_QTYPES

SAMPLERS = ("tpe", "gp")


class BayesSearcher(SpaceSearcher):
    """Bayesian optimisation with Optuna (TPE or GP sampler), the budget as a constraint.

    ``n_inits + n_iterations`` evaluations at most, and at most
    ``trial_factor`` times as many trials (repeated or infeasible proposals cost no evaluation);
    ``patience`` trials in a row without a new scheme end the search (a spent budget)."""

    def __init__(
        self,
        evaluator: Any,
        n_inits: int | None = None,
        qtypes: Sequence[int | float] = DEFAULT_QTYPES,
        seed: int = 0,
        *,
        sampler: str = "tpe",
        trial_factor: int = 10,
        patience: int = 50,
        dim_trans: DimTransform | None = None,
        fixed_layers: Mapping[int, Any] | None = None,
    ) -> None:
        super().__init__(
            evaluator, n_inits, qtypes, seed, dim_trans=dim_trans, fixed_layers=fixed_layers
        )
        if sampler not in SAMPLERS:
            raise PlanError(f"unknown sampler {sampler!r}; use one of {', '.join(SAMPLERS)}")
        self.sampler = sampler
        self.trial_factor = max(1, int(trial_factor))
        self.patience = max(1, int(patience))
        self.study: Any = None

    def _make_sampler(self) -> Any:
        import optuna

        if self.sampler == "gp":
            return optuna.samplers.GPSampler(
                seed=self.seed, n_startup_trials=self.n_inits, deterministic_objective=True
            )
        return optuna.samplers.TPESampler(seed=self.seed, n_startup_trials=self.n_inits)

    def _search(
        self, n_iterations: int, objective: str, constraint_type: str, budget: float
    ) -> None:
        import optuna
        from optuna.distributions import IntDistribution

        names = [f"d{i}" for i in range(self.dim)]
        space = {name: IntDistribution(0, self.m - 1) for name in names}
        verbosity = optuna.logging.get_verbosity()
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                self.study = optuna.create_study(direction="maximize", sampler=self._make_sampler())
                for k in self.initial_samples(constraint_type, budget):
                    self.study.enqueue_trial(dict(zip(names, map(int, k), strict=True)))
                wanted = len(self.evaluated) + max(1, self.n_inits) + n_iterations
                limit = self.trial_factor * (max(1, self.n_inits) + n_iterations)
                stale = 0  # trials in a row without a new evaluation
                for _ in range(limit):
                    if len(self.evaluated) >= wanted or stale >= self.patience:
                        break
                    before = len(self.evaluated)
                    self._trial(names, space, objective, constraint_type, budget)
                    stale = 0 if len(self.evaluated) > before else stale + 1
        finally:
            optuna.logging.set_verbosity(verbosity)

    def _trial(
        self,
        names: list[str],
        space: dict[str, Any],
        objective: str,
        constraint_type: str,
        budget: float,
    ) -> None:
        trial = self.study.ask(space)
        k = np.array([trial.params[name] for name in names], dtype=int)
        cost = self.cost_of(k, constraint_type)
        trial.set_constraint("budget", (cost - budget) / budget)
        if cost <= budget:
            self.study.tell(trial, self.evaluate_k(k, objective, constraint_type))
            return
        # infeasible: told at the worst accuracy seen (never evaluated); its repair goes next
        self.study.tell(trial, min(self.evaluated.values(), default=0.0))
        fixed = self.repair(k, constraint_type, budget)
        if tuple(int(i) for i in fixed) not in self.evaluated:
            self.study.enqueue_trial(dict(zip(names, map(int, fixed), strict=True)))
