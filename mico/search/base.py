"""The seed's searcher base (:class:`QSearcher`) and the default bit choices, apart from the
strategies so that the search space (:mod:`mico.search.dim_transform`) and every strategy can
build on it without importing each other."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mico.errors import PlanError

DEFAULT_QTYPES = (2, 4, 6, 8)


def refuse_rising_cost(
    cost: str, budget: float, qtypes: Sequence[Any], cheapest: float, cost_at: Any
) -> None:
    """Raise when the scheme of the fewest bits (``cheapest``) is over ``budget`` but a wider
    uniform scheme (``cost_at(q)``) is not: the cost rises at fewer bits (``flash``: the code
    of sub-byte kernel paths), which the searchers' repairs (lowering widths) cannot handle."""
    fits = [q for q in qtypes[1:] if cost_at(q) <= budget]
    if fits:
        raise PlanError(
            f"the {cost} budget {budget:g} is below the scheme of {qtypes[0]} bits everywhere "
            f"({cheapest:g}) but not of {fits[0]} bits: {cost} does not fall with fewer bits for "
            f"this model, and the searchers assume it does; search only the widths where it "
            f"does, e.g. --bits {','.join(str(q) for q in fits)}"
        )


class QSearcher:
    """The seed's searcher base: an evaluator, initial samples and the bit choices."""

    def __init__(
        self,
        evaluator: Any,
        n_inits: int = 10,
        qtypes: Sequence[int | float] = DEFAULT_QTYPES,
        seed: int = 0,
    ) -> None:
        if not qtypes:
            raise PlanError("qtypes must hold at least one bit-width, e.g. [2, 4, 8]")
        self.evaluator = evaluator
        self.n_inits = int(n_inits)
        self.qtypes = sorted(qtypes)
        self.rng = np.random.default_rng(seed)
        self.n = evaluator.n_layers
        self.history: list[tuple[list[Any], float, float]] = []  # (scheme, objective, cost)

    # ----------------------------------------------------------------- helpers
    def cost(self, scheme: Sequence[Any], constraint_type: str) -> float:
        """The ``constraint_type`` cost of a scheme, from the evaluator."""
        if constraint_type == "latency":
            return float(self.evaluator.eval_latency(list(scheme), self.evaluator.latency_target))
        return float(getattr(self.evaluator, f"eval_{constraint_type}")(list(scheme)))

    def _check_budget(self, constraint_type: str, constraint_value: float) -> None:
        low = [self.qtypes[0]] * (2 * self.n)
        cheapest = self.cost(low, constraint_type)
        if cheapest > constraint_value:
            wider = lambda q: self.cost([q] * (2 * self.n), constraint_type)  # noqa: E731
            refuse_rising_cost(constraint_type, constraint_value, self.qtypes, cheapest, wider)
            raise PlanError(
                f"the {constraint_type} budget {constraint_value:g} is below the cheapest scheme "
                f"of bit-widths {self.qtypes} ({cheapest:g} at {self.qtypes[0]} bits everywhere); "
                f"raise the budget to at least {cheapest:g} or allow fewer bits"
            )

    def _evaluate(self, scheme: list[Any], objective: str, cost: float) -> float:
        self.evaluator.objective = objective
        value = float(self.evaluator.eval_f(scheme))
        self.history.append((list(scheme), value, cost))
        return value

    def _best(self, constraint_value: float) -> tuple[list[Any], float]:
        feasible = [h for h in self.history if h[2] <= constraint_value]
        scheme, value, _ = max(feasible, key=lambda h: h[1])
        return scheme, value

    def search(
        self, n_iterations: int, objective: str, constraint_type: str, constraint_value: float
    ) -> tuple[list[Any], float]:
        """The seed's call: the best scheme found within the budget and its objective."""
        raise NotImplementedError


def plain_bits(bits: Any) -> int | float:
    """A width as an int when it is whole (8, not 8.0; ternary stays 1.58)."""
    value = float(bits)
    return int(value) if value.is_integer() else value
