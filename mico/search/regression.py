"""``RegressionSearcher``: fit accuracy as a function of the per-layer widths, then maximise
the fit within the budget.

The model is linear in per-dimension features of the widths, fitted by ridge least squares:
``linear`` (b), ``quadratic`` (b, b^2, the default) or ``exp`` (b, 4^-b: quantization noise
falls as 4^-b). After ``n_inits`` feasible schemes (the widest uniform one and random ones),
each iteration refits, maximises the
prediction by hill climbing over feasible neighbours (one width changed, or one step moved from
one dimension to another along the budget) from the best schemes so far and a few random ones,
and evaluates the best maximum not yet evaluated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mico.errors import PlanError
from mico.search.dim_transform import DimTransform, SpaceSearcher
from mico.search.searchers import DEFAULT_QTYPES

MODELS = ("linear", "quadratic", "exp")


class RegressionSearcher(SpaceSearcher):
    """Regression of accuracy on the per-layer widths, maximised within the budget (``model``:
    linear, quadratic or exp; ridge ``alpha``)."""

    def __init__(
        self,
        evaluator: Any,
        n_inits: int | None = None,
        qtypes: Sequence[int | float] = DEFAULT_QTYPES,
        seed: int = 0,
        *,
        model: str = "quadratic",
        alpha: float = 1e-3,
        n_starts: int = 8,
        dim_trans: DimTransform | None = None,
        fixed_layers: Mapping[int, Any] | None = None,
    ) -> None:
        super().__init__(
            evaluator, n_inits, qtypes, seed, dim_trans=dim_trans, fixed_layers=fixed_layers
        )
        if model not in MODELS:
            raise PlanError(f"unknown regression model {model!r}; use one of {', '.join(MODELS)}")
        self.model = model
        self.alpha = float(alpha)
        self.n_starts = int(n_starts)
        self.coef: np.ndarray | None = None

    def features(self, bits: np.ndarray) -> np.ndarray:
        """Per-dimension features of widths (rows), with a leading column of ones."""
        b = np.atleast_2d(bits) / self.choices[-1]
        columns = [b]
        if self.model == "quadratic":
            columns.append(b**2)
        elif self.model == "exp":
            columns.append(4.0 ** -np.atleast_2d(bits))
        return np.hstack([np.ones((b.shape[0], 1)), *columns])

    def fit(self, bits: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Ridge least squares (the intercept unpenalised); the coefficients."""
        phi = self.features(bits)
        penalty = self.alpha * np.eye(phi.shape[1])
        penalty[0, 0] = 0.0
        self.coef = np.linalg.solve(phi.T @ phi + penalty, phi.T @ (y - y.mean()))
        self.coef[0] += y.mean()
        return self.coef

    def predict(self, ks: np.ndarray) -> np.ndarray:
        """Predicted objective of search vectors (rows of indices)."""
        if self.coef is None:
            raise PlanError("RegressionSearcher.predict needs a fitted model: run search first")
        return self.features(self.choices[np.atleast_2d(ks)]) @ self.coef

    def _search(
        self, n_iterations: int, objective: str, constraint_type: str, budget: float
    ) -> None:
        for k in self.initial_samples(constraint_type, budget):
            self.evaluate_k(k, objective, constraint_type)
        for _ in range(n_iterations):
            bits, y = self._data()
            self.fit(bits, y)
            ranked = sorted(self.evaluated, key=self.evaluated.__getitem__, reverse=True)
            starts = [np.array(k) for k in ranked[: self.n_starts // 2]]
            starts += list(self.sample_feasible(self.n_starts // 2 + 1, constraint_type, budget))
            tops = np.array(
                [self.climb(self.predict, s, constraint_type, budget) for s in starts], dtype=int
            )
            pick = self._fresh_best(tops, constraint_type, budget)
            if pick is None:
                break  # every feasible scheme near the model's maxima is evaluated
            self.evaluate_k(pick, objective, constraint_type)

    def _fresh_best(
        self, tops: np.ndarray, constraint_type: str, budget: float
    ) -> np.ndarray | None:
        """The best predicted maximum not yet evaluated, else the best fresh feasible
        neighbour of one, else a fresh feasible random scheme."""
        for pool in (tops, np.concatenate([self.neighbours(k) for k in tops])):
            pool = self.thin(pool, constraint_type)
            pool = pool[self.costs_of(pool, constraint_type) <= budget]
            fresh = [k for k in pool if tuple(int(i) for i in k) not in self.evaluated]
            if fresh:
                fresh_arr = np.array(fresh, dtype=int)
                return fresh_arr[int(np.argmax(self.predict(fresh_arr)))]
        for k in self.sample_feasible(16, constraint_type, budget):
            if tuple(int(i) for i in k) not in self.evaluated:
                return k
        return None
