"""Bit-width searchers (seed 003): ``searcher.search(n_iterations, objective, constraint_type,
constraint_value) -> (best_x, best_y)``.

A scheme is MiCo's flat ``[w bits..., a bits...]``. Costs (``bops``, ``size``, ``macs``,
``latency``) come from :class:`~mico.search.MiCoEval` and need no training; the objective
(accuracy) is what evaluations pay for. A budget smaller than the cheapest scheme of the bit
choices is refused before any evaluation, with the smallest feasible figure in the message.

* :class:`RandomSearcher` samples schemes that fit the budget (rejection, bounded attempts)
  and keeps the most accurate;
* :class:`NLPSearcher` measures each layer's sensitivity (the accuracy lost when only that
  layer takes a width) and solves an integer program (``scipy.optimize.milp``) for the widths
  of least total loss within the budget, then evaluates the answer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from mico.errors import PlanError

DEFAULT_QTYPES = (2, 4, 6, 8)


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
        if constraint_type == "latency":
            return float(self.evaluator.eval_latency(list(scheme), self.evaluator.latency_target))
        return float(getattr(self.evaluator, f"eval_{constraint_type}")(list(scheme)))

    def _check_budget(self, constraint_type: str, constraint_value: float) -> None:
        low = [self.qtypes[0]] * (2 * self.n)
        cheapest = self.cost(low, constraint_type)
        if cheapest > constraint_value:
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
        raise NotImplementedError


class RandomSearcher(QSearcher):
    """Feasible random sampling: the most accurate of ``n_iterations`` schemes in budget."""

    MAX_TRIES = 2_000

    def sample_feasible(
        self, constraint_type: str, constraint_value: float, seen: set[tuple] | None = None
    ) -> list[Any] | None:
        """A random scheme within the budget, not one of ``seen``; None after MAX_TRIES draws."""
        for _ in range(self.MAX_TRIES):
            w = list(self.rng.choice(self.qtypes, self.n))
            a = list(self.rng.choice(self.qtypes, self.n))
            scheme = [_plain(b) for b in w + a]
            if seen is not None and tuple(scheme) in seen:
                continue
            if self.cost(scheme, constraint_type) <= constraint_value:
                return scheme
        return None

    def search(
        self, n_iterations: int, objective: str, constraint_type: str, constraint_value: float
    ) -> tuple[list[Any], float]:
        """``n_iterations`` distinct feasible schemes evaluated (fewer only when the budget
        admits fewer, or MAX_TRIES draws find no new one)."""
        self._check_budget(constraint_type, constraint_value)
        seen: set[tuple] = set()
        for _ in range(max(1, int(n_iterations))):
            scheme = self.sample_feasible(constraint_type, constraint_value, seen)
            if scheme is None:  # a tight budget: fall back to the cheapest scheme, never spin
                scheme = [self.qtypes[0]] * (2 * self.n)
                if tuple(scheme) in seen:
                    break  # the feasible region is spent
            seen.add(tuple(scheme))
            self._evaluate(scheme, objective, self.cost(scheme, constraint_type))
        return self._best(constraint_value)


class NLPSearcher(QSearcher):
    """Per-layer sensitivity and an integer program (the seed's NLP searcher, solved exactly
    with HiGHS through ``scipy.optimize.milp``). Weights and activations of a layer take the
    same width here; the costs are additive over layers, as BOPs, size and MACs are."""

    def sensitivities(self, objective: str, top: int | float) -> np.ndarray:
        """``loss[i, k]``: accuracy lost when only layer i takes width qtypes[k]."""
        reference = self._evaluate([top] * (2 * self.n), objective, math.inf)
        loss = np.zeros((self.n, len(self.qtypes)))
        for i in range(self.n):
            for k, bits in enumerate(self.qtypes):
                if bits == top:
                    continue
                w = [top] * self.n
                w[i] = bits
                value = self._evaluate(w + w, objective, math.inf)
                loss[i, k] = max(0.0, reference - value)
        return loss

    def layer_costs(self, constraint_type: str) -> np.ndarray:
        """``cost[i, k]``: the cost of layer i at width qtypes[k] (others at the lowest)."""
        low = self.qtypes[0]
        base = self.cost([low] * (2 * self.n), constraint_type)
        costs = np.zeros((self.n, len(self.qtypes)))
        for i in range(self.n):
            for k, bits in enumerate(self.qtypes):
                w = [low] * self.n
                w[i] = bits
                costs[i, k] = self.cost(w + w, constraint_type) - base + base / self.n
        return costs

    def search(
        self, n_iterations: int, objective: str, constraint_type: str, constraint_value: float
    ) -> tuple[list[Any], float]:
        from scipy.optimize import Bounds, LinearConstraint, milp

        self._check_budget(constraint_type, constraint_value)
        loss = self.sensitivities(objective, self.qtypes[-1])
        costs = self.layer_costs(constraint_type)
        n, m = loss.shape
        one_each = np.zeros((n, n * m))
        for i in range(n):
            one_each[i, i * m : (i + 1) * m] = 1
        result = milp(
            c=loss.ravel(),
            constraints=[
                LinearConstraint(one_each, 1, 1),
                LinearConstraint(costs.ravel()[None], -np.inf, constraint_value),
            ],
            integrality=np.ones(n * m),
            bounds=Bounds(0, 1),
        )
        if result.x is None:
            scheme = [self.qtypes[0]] * (2 * n)
        else:
            choice = result.x.reshape(n, m).argmax(axis=1)
            widths = [_plain(self.qtypes[k]) for k in choice]
            scheme = widths + widths
        cost = self.cost(scheme, constraint_type)
        if cost > constraint_value:  # additive costs are exact for BOPs/size/MACs; be safe
            scheme = [self.qtypes[0]] * (2 * n)
            cost = self.cost(scheme, constraint_type)
        probed = [h for h in self.history if list(h[0]) == list(scheme)]
        if probed:  # the program chose a sensitivity probe: its accuracy is known already
            self.history.append((list(scheme), probed[0][1], cost))
        else:
            self._evaluate(scheme, objective, cost)
        return self._best(constraint_value)


def _plain(bits: Any) -> int | float:
    value = float(bits)
    return int(value) if value.is_integer() else value
