"""Bit-width searchers (seed 003): ``searcher.search(n_iterations, objective, constraint_type,
constraint_value) -> (best_x, best_y)``.

A scheme is MiCo's flat ``[w bits..., a bits...]``. Costs (``bops``, ``size``, ``macs``,
``latency``) come from :class:`~mico.search.MiCoEval` and need no training; the objective
(accuracy) is what evaluations pay for. A budget smaller than the cheapest scheme of the bit
choices is refused before any evaluation, with the smallest feasible figure in the message.

Both searchers here take the search space as every strategy does (``dim_trans=``, a
:class:`~mico.search.DimTransform`, and ``fixed_layers=``):

* :class:`RandomSearcher` samples search vectors that fit the budget (rejection, bounded
  attempts) and keeps the most accurate;
* :class:`NLPSearcher` measures each search dimension's sensitivity (the accuracy lost when
  only that dimension takes a width) and solves an integer program (``scipy.optimize.milp``)
  for the widths of least total loss within the budget, then evaluates the answer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mico.search.base import DEFAULT_QTYPES, QSearcher, plain_bits
from mico.search.dim_transform import DimTransform, SpaceSearcher

__all__ = ["DEFAULT_QTYPES", "NLPSearcher", "QSearcher", "RandomSearcher"]


class RandomSearcher(SpaceSearcher):
    """Feasible random sampling: the most accurate of ``n_iterations`` distinct search
    vectors drawn uniformly among those within the budget (``dim_trans``: the space drawn
    from, default every weight and activation width)."""

    MAX_TRIES = 2_000  # draws per sample when each cost is computed scheme by scheme
    TABLE_TRIES = 50_000  # draws per sample when costs come from per-layer tables (vectorised)
    BATCH = 256

    def __init__(
        self,
        evaluator: Any,
        n_inits: int | None = None,
        qtypes: Sequence[int | float] = DEFAULT_QTYPES,
        seed: int = 0,
        *,
        dim_trans: DimTransform | None = None,
        fixed_layers: Mapping[int, Any] | None = None,
    ) -> None:
        super().__init__(
            evaluator, n_inits, qtypes, seed, dim_trans=dim_trans, fixed_layers=fixed_layers
        )

    def draw_feasible(
        self, constraint_type: str, budget: float, seen: set[tuple[int, ...]] | None = None
    ) -> np.ndarray | None:
        """A uniform search vector within the budget, not one of ``seen``; None when the
        bounded number of draws finds none."""
        seen = seen if seen is not None else set()
        exact = self.exact_only(constraint_type)
        tries = self.MAX_TRIES if exact else self.TABLE_TRIES
        while tries > 0:
            count = 1 if exact else min(self.BATCH, tries)
            draws = self.rng.integers(0, self.m, (count, self.dim))
            if exact:
                costs = np.array([self.cost_of(draws[0], constraint_type)])
            else:
                costs = self.costs_of(draws, constraint_type)
            for k, cost in zip(draws, costs, strict=True):
                tries -= 1
                self._draws += 1
                if cost > budget:
                    continue
                self._feasible_draws += 1
                key = tuple(int(i) for i in k)
                self._feasible_seen.add(key)
                if key not in seen:
                    return k
        return None

    def _search(
        self, n_iterations: int, objective: str, constraint_type: str, budget: float
    ) -> None:
        """``n_iterations`` distinct feasible vectors evaluated (fewer only when the budget
        admits fewer, or the draws find no new one); a tight budget falls back to the cheapest
        vector and never spins."""
        seen: set[tuple[int, ...]] = set()
        for _ in range(max(1, n_iterations)):
            k = self.draw_feasible(constraint_type, budget, seen)
            if k is None:
                k = np.zeros(self.dim, dtype=int)
                if tuple(int(i) for i in k) in seen:
                    break  # the feasible region is spent
            seen.add(tuple(int(i) for i in k))
            self.evaluate_k(k, objective, constraint_type)


class NLPSearcher(SpaceSearcher):
    """Sensitivity per search dimension and an integer program (the seed's NLP searcher,
    solved exactly with HiGHS through ``scipy.optimize.milp``).

    The default space is one width per layer for its weights and activations
    (``DimTransform.w_eq_a``); any ``dim_trans`` works. The program adds the costs of the
    dimensions, which is exact for BOPs, size and MACs when weights and activations share a
    dimension; when its answer is over the budget all the same (W and A apart, or a cost that
    does not add up), widths are lowered one step at a time where the least accuracy is lost
    per unit of cost saved, until it fits. ``n_iterations`` is not used: the search evaluates
    the all-highest reference, one probe per dimension and lower width, and the answer."""

    def __init__(
        self,
        evaluator: Any,
        n_inits: int | None = None,
        qtypes: Sequence[int | float] = DEFAULT_QTYPES,
        seed: int = 0,
        *,
        dim_trans: DimTransform | None = None,
        fixed_layers: Mapping[int, Any] | None = None,
    ) -> None:
        if dim_trans is None:
            dim_trans = DimTransform.w_eq_a(evaluator.n_layers)
        super().__init__(
            evaluator, n_inits, qtypes, seed, dim_trans=dim_trans, fixed_layers=fixed_layers
        )
        self.loss: np.ndarray | None = None

    @property
    def evaluations_needed(self) -> int:
        """Evaluations a search makes: the reference, the probes and the answer."""
        return self.dim * (self.m - 1) + 2

    def _probe(self, k: Sequence[int], objective: str) -> float:
        """The objective of a sensitivity probe (over the budget or not), evaluated once."""
        key = tuple(int(i) for i in k)
        if key not in self.evaluated:
            table = self._tables.get(self.constraint_type or "")
            cost = math.inf  # unknown unless cheap: a probe is not meant as an answer
            if table is not None and self.constraint_type is not None:
                cost = float(self.costs_of(np.array(key), self.constraint_type)[0])
            self.evaluated[key] = self._evaluate(self.scheme_of(key), objective, cost)
        return self.evaluated[key]

    def sensitivities(self, objective: str, top: int | float | None = None) -> np.ndarray:
        """``loss[d, k]``: accuracy lost when only dimension d takes width qtypes[k] (every
        other at ``top``, default the widest)."""
        t = self.m - 1 if top is None else self.qtypes.index(plain_bits(top))
        reference = self._probe([t] * self.dim, objective)
        loss = np.zeros((self.dim, self.m))
        for d in range(self.dim):
            for k in range(self.m):
                if k == t:
                    continue
                vector = [t] * self.dim
                vector[d] = k
                loss[d, k] = max(0.0, reference - self._probe(vector, objective))
        self.loss = loss
        return loss

    def dim_costs(self, constraint_type: str) -> np.ndarray:
        """``cost[d, k]``: the cost of dimension d at width qtypes[k] (others at the lowest),
        the lowest scheme's cost shared evenly, so that the costs of a vector add up to it."""
        base = self.cost_of([0] * self.dim, constraint_type)
        vectors = np.zeros((self.dim * self.m, self.dim), dtype=int)
        for d in range(self.dim):
            vectors[d * self.m : (d + 1) * self.m, d] = np.arange(self.m)
        if self.exact_only(constraint_type):
            costs = np.array([self.cost_of(v, constraint_type) for v in vectors])
        else:
            costs = self.costs_of(vectors, constraint_type)
        return costs.reshape(self.dim, self.m) - base + base / self.dim

    def solve(self, loss: np.ndarray, costs: np.ndarray, budget: float) -> np.ndarray | None:
        """The widths (indices per dimension) of least total loss whose costs add up to at
        most ``budget``; None when the program has no answer."""
        from scipy.optimize import Bounds, LinearConstraint, milp

        n, m = loss.shape
        one_each = np.zeros((n, n * m))
        for i in range(n):
            one_each[i, i * m : (i + 1) * m] = 1
        result = milp(
            c=loss.ravel(),
            constraints=[
                LinearConstraint(one_each, 1, 1),
                LinearConstraint(costs.ravel()[None], -np.inf, budget),
            ],
            integrality=np.ones(n * m),
            bounds=Bounds(0, 1),
        )
        if result.x is None:
            return None
        return result.x.reshape(n, m).argmax(axis=1).astype(int)

    def fit_budget(
        self, k: np.ndarray, loss: np.ndarray, constraint_type: str, budget: float
    ) -> np.ndarray:
        """Lower widths until ``k`` fits, each step where the least accuracy is lost per unit
        of exact cost saved (bounded; the all-lowest vector fits, as the budget check proved)."""
        k = np.array(k, dtype=int)
        for _ in range(self.dim * self.m):
            cost = self.cost_of(k, constraint_type)
            if cost <= budget:
                return k
            best, pick = math.inf, -1
            for d in np.flatnonzero(k > 0):
                lower = k.copy()
                lower[d] -= 1
                saved = cost - self.cost_of(lower, constraint_type)
                if saved <= 0:
                    continue
                ratio = (loss[d, lower[d]] - loss[d, k[d]]) / saved
                if ratio < best:
                    best, pick = ratio, int(d)
            if pick < 0:
                break
            k[pick] -= 1
        return np.zeros(self.dim, dtype=int)

    def _search(
        self, n_iterations: int, objective: str, constraint_type: str, budget: float
    ) -> None:
        loss = self.sensitivities(objective)
        costs = self.dim_costs(constraint_type)
        k = self.solve(loss, costs, budget)
        k = np.zeros(self.dim, dtype=int) if k is None else k
        k = self.fit_budget(k, loss, constraint_type, budget)
        key = tuple(int(i) for i in k)
        cost = self.cost_of(key, constraint_type)
        if key in self.evaluated:  # the answer is a probe: its accuracy is known already
            if not any(list(s) == self.scheme_of(key) and c <= budget for s, _, c in self.history):
                self.history.append((self.scheme_of(key), self.evaluated[key], cost))
        else:
            self.evaluate_k(key, objective, constraint_type)
