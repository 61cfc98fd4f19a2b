"""Multi-objective search: the Pareto front of accuracy against one or two costs.

:func:`pareto_front` keeps the non-dominated entries of a searcher's history (no other entry is
at least as accurate and at most as costly in every cost, and better in one).
:class:`ParetoSearcher` is the surrogate search with a moving budget: its iterations cycle
through budget levels from the cheapest scheme up to the budget, so the evaluated schemes spread
along the front; ``search`` still returns the seed's ``(best_x, best_y)`` within the budget and
leaves the front in ``searcher.front``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mico.errors import PlanError
from mico.search.dim_transform import DimTransform
from mico.search.searchers import DEFAULT_QTYPES
from mico.search.surrogate import MiCoSearcher


@dataclass(frozen=True)
class ParetoPoint:
    scheme: list[Any]
    value: float
    costs: tuple[float, ...]


def pareto_front(
    history: Sequence[tuple[list[Any], float, float]],
    costs: Sequence[Sequence[float]] | None = None,
) -> list[ParetoPoint]:
    """The non-dominated entries of ``history`` (``(scheme, value, cost)``, value maximised),
    against ``costs`` (one row of costs per entry, minimised; default: each entry's cost),
    sorted by the first cost. Repeated schemes count once."""
    rows = [[c] for _, _, c in history] if costs is None else [list(c) for c in costs]
    if len(rows) != len(history):
        raise PlanError(
            f"pareto_front needs one row of costs per entry: {len(rows)} for {len(history)}"
        )
    points: dict[tuple, ParetoPoint] = {}
    for (scheme, value, _), row in zip(history, rows, strict=True):
        points.setdefault(
            tuple(scheme), ParetoPoint(list(scheme), float(value), tuple(map(float, row)))
        )
    items = list(points.values())
    if not items:
        return []
    v = np.array([p.value for p in items])
    c = np.array([p.costs for p in items])
    front = []
    for i in range(len(items)):
        no_worse = (v >= v[i]) & (c <= c[i]).all(axis=1)
        better = (v > v[i]) | (c < c[i]).any(axis=1)
        if not (no_worse & better).any():
            front.append(items[i])
    return sorted(front, key=lambda p: (p.costs, -p.value))


class ParetoSearcher(MiCoSearcher):
    """Multi-objective surrogate search: the Pareto front of accuracy against the constraint
    (and ``second_cost``, e.g. ``"size"``) in ``front``, over ``n_levels`` budget levels."""

    def __init__(
        self,
        evaluator: Any,
        n_inits: int | None = None,
        qtypes: Sequence[int | float] = DEFAULT_QTYPES,
        seed: int = 0,
        *,
        second_cost: str | None = None,
        n_levels: int = 5,
        surrogate: str = "rf",
        dim_trans: DimTransform | None = None,
        fixed_layers: Mapping[int, Any] | None = None,
    ) -> None:
        super().__init__(
            evaluator, n_inits, qtypes, seed, surrogate=surrogate, dim_trans=dim_trans,
            fixed_layers=fixed_layers,
        )  # fmt: skip
        self.second_cost = second_cost
        self.n_levels = max(1, int(n_levels))
        self.front: list[ParetoPoint] = []

    def _iteration_budget(self, iteration: int, constraint_type: str, budget: float) -> float:
        cheapest = self.cost_of([0] * self.dim, constraint_type)
        share = (iteration % self.n_levels + 1) / self.n_levels  # the last level is the budget
        return cheapest + share * (budget - cheapest)

    def pareto(self, cost_types: Sequence[str]) -> list[ParetoPoint]:
        """The front of the evaluated schemes against any costs."""
        rows = [[self.cost(s, c) for c in cost_types] for s, _, _ in self.history]
        return pareto_front(self.history, rows)

    def _search(
        self, n_iterations: int, objective: str, constraint_type: str, budget: float
    ) -> None:
        super()._search(n_iterations, objective, constraint_type, budget)
        kinds = [constraint_type] + ([self.second_cost] if self.second_cost else [])
        self.front = self.pareto(kinds)
