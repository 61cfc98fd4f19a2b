"""``MiCoSearcher``: seed 003's surrogate search.

A regression model (random forest by default, XGBoost or a Gaussian process) learns accuracy
from the evaluated schemes (first ``n_inits``: the widest uniform scheme within the budget and
feasible random ones); each iteration scores a pool of feasible candidates (uniform draws
within the budget, repaired draws on its boundary, and neighbours of the best schemes) by the
predicted accuracy, an uncertainty bonus and a bonus for using the budget (the most accurate
schemes lie near the constraint's boundary), and evaluates the best candidate not yet seen.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from mico.errors import PlanError
from mico.search.dim_transform import DimTransform, SpaceSearcher
from mico.search.searchers import DEFAULT_QTYPES

SURROGATES = ("rf", "xgb", "gp")
_ALIASES = {"random_forest": "rf", "xgboost": "xgb", "bayes": "gp", "gaussian_process": "gp"}


class MiCoSearcher(SpaceSearcher):
    """Seed 003's surrogate search over feasible schemes (``surrogate``: rf, xgb or gp).

    ``explore`` weighs the surrogate's uncertainty (the spread of the forest's trees, the GP's
    standard deviation, or for XGBoost the distance to the nearest evaluated scheme);
    ``boundary_bonus`` rewards candidates within ``boundary_width`` of the budget. Both are in
    units of the spread of the accuracies seen so far.
    """

    def __init__(
        self,
        evaluator: Any,
        n_inits: int | None = None,
        qtypes: Sequence[int | float] = DEFAULT_QTYPES,
        seed: int = 0,
        *,
        surrogate: str = "rf",
        n_candidates: int = 256,
        explore: float = 1.0,
        boundary_bonus: float = 0.5,
        boundary_width: float = 0.1,
        dim_trans: DimTransform | None = None,
        fixed_layers: Mapping[int, Any] | None = None,
    ) -> None:
        super().__init__(
            evaluator, n_inits, qtypes, seed, dim_trans=dim_trans, fixed_layers=fixed_layers
        )
        surrogate = _ALIASES.get(surrogate, surrogate)
        if surrogate not in SURROGATES:
            raise PlanError(f"unknown surrogate {surrogate!r}; use one of {', '.join(SURROGATES)}")
        self.surrogate = surrogate
        self.n_candidates = int(n_candidates)
        self.explore = float(explore)
        self.boundary_bonus = float(boundary_bonus)
        self.boundary_width = float(boundary_width)

    # ----------------------------------------------------------------- the surrogate
    def _fit(self, x: np.ndarray, y: np.ndarray) -> Any:
        state = int(self.rng.integers(2**31))
        scaled = x / self.choices[-1]
        if self.surrogate == "rf":
            from sklearn.ensemble import RandomForestRegressor

            model = RandomForestRegressor(n_estimators=64, min_samples_leaf=1, random_state=state)
        elif self.surrogate == "xgb":
            from xgboost import XGBRegressor

            model = XGBRegressor(
                n_estimators=64, max_depth=3, learning_rate=0.2, random_state=state, n_jobs=1,
                verbosity=0,
            )  # fmt: skip
        else:
            from sklearn.gaussian_process import GaussianProcessRegressor
            from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

            kernel = ConstantKernel(1.0, (1e-3, 1e3)) * Matern(
                1.0, (1e-2, 1e2), nu=2.5
            ) + WhiteKernel(1e-4, (1e-8, 1e-1))
            model = GaussianProcessRegressor(kernel, normalize_y=True, random_state=state)
        with warnings.catch_warnings():  # a few samples rarely pin the GP's hyper-parameters
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit(scaled, y)
        return model

    def _predict(
        self, model: Any, x: np.ndarray, seen: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Predicted mean and uncertainty of candidates (widths, rows)."""
        scaled = x / self.choices[-1]
        if self.surrogate == "rf":
            trees = np.stack([t.predict(scaled) for t in model.estimators_])
            return trees.mean(axis=0), trees.std(axis=0)
        if self.surrogate == "gp":
            mean, std = model.predict(scaled, return_std=True)
            return mean, std
        mean = model.predict(scaled)
        distance = np.abs(scaled[:, None, :] - seen[None] / self.choices[-1]).sum(-1).min(1)
        return mean, distance / self.dim

    def acquisition(
        self, model: Any, ks: np.ndarray, y: np.ndarray, constraint_type: str, budget: float
    ) -> np.ndarray:
        """The score of candidate search vectors (rows of indices)."""
        seen, _ = self._data()
        mean, spread = self._predict(model, self.choices[ks], seen)
        scale = max(float(np.std(y)), 1e-3)
        if self.surrogate == "xgb":  # a distance in [0, 1]: in units of the accuracies' spread
            spread = spread * scale
        slack = (budget - self.costs_of(ks, constraint_type)) / budget
        near = np.clip(1.0 - slack / self.boundary_width, 0.0, 1.0)
        return mean + self.explore * spread + self.boundary_bonus * scale * near

    # ----------------------------------------------------------------- the search
    def _iteration_budget(self, iteration: int, constraint_type: str, budget: float) -> float:
        """The budget the proposal of ``iteration`` aims at (the budget itself here)."""
        return budget

    def _candidates(self, constraint_type: str, budget: float) -> np.ndarray:
        pool = [self.sample_feasible(self.n_candidates, constraint_type, budget)]
        ranked = sorted(self.evaluated, key=self.evaluated.__getitem__, reverse=True)
        for k in ranked[:4]:
            near = self.thin(self.neighbours(k), constraint_type)
            pool.append(near[self.costs_of(near, constraint_type) <= budget])
        ks = np.unique(np.concatenate(pool), axis=0)
        fresh = [i for i, k in enumerate(ks) if tuple(int(v) for v in k) not in self.evaluated]
        return ks[fresh]

    def _search(
        self, n_iterations: int, objective: str, constraint_type: str, budget: float
    ) -> None:
        for k in self.initial_samples(constraint_type, budget):
            self.evaluate_k(k, objective, constraint_type)
        for it in range(n_iterations):
            level = self._iteration_budget(it, constraint_type, budget)
            ks = self._candidates(constraint_type, level)
            if not len(ks):  # every feasible scheme found is evaluated: the space is spent
                if level < budget:
                    continue
                break
            x, y = self._data()
            model = self._fit(x, y)
            score = self.acquisition(model, ks, y, constraint_type, level)
            self.evaluate_k(ks[int(np.argmax(score))], objective, constraint_type)
