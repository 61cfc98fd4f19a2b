"""The search space of the strategies: :class:`DimTransform` and :class:`SpaceSearcher`.

A searcher explores a vector ``x`` of ``in_dim`` bit-widths; :class:`DimTransform` maps it to
MiCo's flat scheme ``[w bits..., a bits...]`` (``out_dim = 2 * n_layers``). Shrinking the space
(seed 003's ``DimTransform(in_dim, out_dim, method="expand")``):

* ``DimTransform.full(n)``: every weight and activation width is searched (``2n`` values);
* ``DimTransform.w_only(n, a_bits=8)``: weights only, activations held at ``a_bits``;
* ``DimTransform.w_eq_a(n)``: one width per layer for its weights and activations;
* ``DimTransform.blocks(n, n_blocks)``: consecutive layers share widths in ``n_blocks`` blocks;
* ``transform.with_fixed({0: 8, -1: 8})``: layers held at a width (first/last-layer rules).

:class:`SpaceSearcher` is the base of the surrogate, Bayesian, RL, regression and Pareto
searchers: the bit choices come from ``qtypes`` (the target's widths), the transform from
``dim_trans`` and ``fixed_layers``, costs are screened with exact per-layer cost tables (BOPs,
size, MACs and BitFusion cycles add up over layers; checked, else every cost is computed), and
sampling and repair are bounded, so a tight budget never makes a searcher spin.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mico.errors import PlanError
from mico.search.base import DEFAULT_QTYPES, QSearcher, refuse_rising_cost

FIXED = -1  # group index of a scheme position held at a fixed width
NOT_COSTS = ("f", "constraint", "ptq_acc", "qat_acc")  # eval_* methods that are not costs


class DimTransform:
    """Map a search vector ``x`` (``in_dim`` widths) to a scheme of ``out_dim`` widths.

    ``groups[j]`` is the index of ``x`` that scheme position ``j`` takes, or ``FIXED`` for a
    position held at ``fixed[j]``. The seed's constructor ``DimTransform(in_dim, out_dim,
    method="expand")`` splits the scheme into ``in_dim`` contiguous blocks of equal widths;
    ``method="identity"`` needs ``in_dim == out_dim``.
    """

    def __init__(
        self,
        in_dim: int | None = None,
        out_dim: int | None = None,
        method: str = "expand",
        *,
        groups: Sequence[int] | None = None,
        fixed: Mapping[int, int | float] | None = None,
    ) -> None:
        if groups is None:
            if in_dim is None or out_dim is None:
                raise PlanError("DimTransform needs in_dim and out_dim, or groups=")
            groups = _method_groups(int(in_dim), int(out_dim), method)
        self.groups = [int(g) for g in groups]
        self.fixed = {int(j): _plain(b) for j, b in (fixed or {}).items()}
        used = sorted({g for g in self.groups if g != FIXED})
        if used != list(range(len(used))):
            raise PlanError(f"DimTransform groups must number 0..k-1 without gaps; got {used}")
        for j, g in enumerate(self.groups):
            if g == FIXED and j not in self.fixed:
                raise PlanError(f"scheme position {j} is fixed but has no width in fixed=")
        self.in_dim = len(used)
        self.out_dim = len(self.groups)
        if self.in_dim == 0:
            raise PlanError("DimTransform leaves nothing to search: every layer is fixed")

    # ----------------------------------------------------------------- constructors
    @classmethod
    def full(cls, n_layers: int) -> DimTransform:
        """Every weight and activation width searched."""
        return cls(groups=list(range(2 * n_layers)))

    @classmethod
    def w_only(cls, n_layers: int, a_bits: int | float = 8) -> DimTransform:
        """Weight widths searched, activations held at ``a_bits``."""
        n = n_layers
        return cls(groups=list(range(n)) + [FIXED] * n, fixed={n + i: a_bits for i in range(n)})

    @classmethod
    def w_eq_a(cls, n_layers: int) -> DimTransform:
        """One width per layer, for its weights and its activations."""
        return cls(groups=list(range(n_layers)) * 2)

    @classmethod
    def blocks(cls, n_layers: int, n_blocks: int, w_eq_a: bool = False) -> DimTransform:
        """Consecutive layers share their widths in ``n_blocks`` blocks (weights and
        activations apart, or together with ``w_eq_a``)."""
        if not 1 <= n_blocks <= n_layers:
            raise PlanError(f"n_blocks must be between 1 and {n_layers} layers; got {n_blocks}")
        block = [i * n_blocks // n_layers for i in range(n_layers)]
        acts = block if w_eq_a else [b + n_blocks for b in block]
        return cls(groups=block + acts)

    def with_fixed(self, fixed_layers: Mapping[int, Any]) -> DimTransform:
        """This transform with layers held at widths: ``{0: 8}`` (weights and activations) or
        ``{-1: (8, 8)}`` (w, a); negative indices count from the last layer."""
        if self.out_dim % 2:
            raise PlanError("fixed_layers needs a transform onto [w..., a...] (even out_dim)")
        n = self.out_dim // 2
        groups, fixed = list(self.groups), dict(self.fixed)
        for layer, bits in fixed_layers.items():
            i = int(layer) + (n if int(layer) < 0 else 0)
            if not 0 <= i < n:
                raise PlanError(f"fixed layer {layer} is out of range for {n} layers")
            w, a = bits if isinstance(bits, tuple | list) else (bits, bits)
            for j, b in ((i, w), (n + i, a)):
                groups[j], fixed[j] = FIXED, _plain(b)
        renumber = {g: k for k, g in enumerate(sorted({g for g in groups if g != FIXED}))}
        return DimTransform(groups=[renumber.get(g, FIXED) for g in groups], fixed=fixed)

    # ----------------------------------------------------------------- mapping
    def expand(self, x: Sequence[Any]) -> list[int | float]:
        """The scheme ``[w..., a...]`` of a search vector."""
        if len(x) != self.in_dim:
            raise PlanError(f"DimTransform expects {self.in_dim} values; got {len(x)}")
        return [self.fixed[j] if g == FIXED else _plain(x[g]) for j, g in enumerate(self.groups)]

    __call__ = expand

    def reduce(self, scheme: Sequence[Any]) -> list[int | float]:
        """The search vector of a scheme (the first position of each group)."""
        if len(scheme) != self.out_dim:
            raise PlanError(f"DimTransform expects a scheme of {self.out_dim}; got {len(scheme)}")
        x: list[Any] = [None] * self.in_dim
        for j, g in enumerate(self.groups):
            if g != FIXED and x[g] is None:
                x[g] = _plain(scheme[j])
        return x

    def expand_array(self, values: np.ndarray) -> np.ndarray:
        """Schemes (rows) of search vectors (rows of ``values``), vectorised."""
        values = np.atleast_2d(values)
        out = np.empty((values.shape[0], self.out_dim), dtype=float)
        for j, g in enumerate(self.groups):
            out[:, j] = self.fixed[j] if g == FIXED else values[:, g]
        return out

    def __repr__(self) -> str:
        return f"DimTransform(in_dim={self.in_dim}, out_dim={self.out_dim}, fixed={self.fixed})"


def _method_groups(in_dim: int, out_dim: int, method: str) -> list[int]:
    if method == "identity":
        if in_dim != out_dim:
            raise PlanError(f"method 'identity' needs in_dim == out_dim; got {in_dim}, {out_dim}")
        return list(range(out_dim))
    if method == "expand":
        if not 1 <= in_dim <= out_dim:
            raise PlanError(
                f"method 'expand' needs 1 <= in_dim <= out_dim; got {in_dim}, {out_dim}"
            )
        return [j * in_dim // out_dim for j in range(out_dim)]
    raise PlanError(f"unknown DimTransform method {method!r}; use 'expand' or 'identity'")


@dataclass
class FeasibleRegion:
    """What a searcher learnt of the budget's feasible region."""

    constraint: str
    budget: float
    cheapest: float
    draws: int  # random search vectors drawn (uniformly; from the policy for HAQ)
    feasible_draws: int  # of which within the budget
    distinct_feasible: int  # distinct feasible schemes found (drawn, repaired or proposed)

    @property
    def share(self) -> float:
        """The share of the draws within the budget (for uniform draws, of the space)."""
        return self.feasible_draws / self.draws if self.draws else math.nan


class _LayerCosts:
    """``cost(scheme) = base + sum_i delta[i, w_i, a_i]``: exact for costs additive over layers."""

    def __init__(self, base: float, delta: np.ndarray, values: np.ndarray) -> None:
        self.base, self.delta, self.values = base, delta, values

    def __call__(self, schemes: np.ndarray) -> np.ndarray:
        n = schemes.shape[1] // 2
        w = np.searchsorted(self.values, schemes[:, :n])
        a = np.searchsorted(self.values, schemes[:, n:])
        return self.base + self.delta[np.arange(n), w, a].sum(axis=1)


class SpaceSearcher(QSearcher):
    """Base of the strategies: search vectors are indices into ``qtypes`` (``k[d]`` picks
    ``qtypes[k[d]]``), mapped to schemes by ``dim_trans`` with ``fixed_layers`` applied.

    ``search`` takes the seed's call; ``constraint=`` is accepted for ``constraint_type=``, and a
    ``constraint_value`` in (0, 1] is read as a share of the W8A8 cost (no real cost of a model
    is below 1). Evaluations: ``n_inits`` initial schemes, then ``n_iterations`` proposals (at
    most; a budget that leaves fewer distinct schemes ends the search early). Without
    ``n_inits``, a third of ``n_iterations`` (2 to 10), so that a trial budget such as
    ``mico tune --trials 10`` leaves room for the model's proposals.
    """

    REPAIR_DRAWS = 64  # uniform draws per wanted sample before repairing
    STALE_REPAIRS = 16  # repairs in a row that find nothing new end a sampling round
    #: costs that may add up over layers (checked); others (``ram``, ``ram_total``, ``flash``)
    #: are computed per scheme: sampling and neighbourhoods are thinned to ``EXACT_LIMIT``
    #: schemes, and at most ``EXACT_PER_EVAL`` new schemes are costed per evaluation (the rest
    #: count as over the budget until the next evaluation)
    ADDITIVE = ("bops", "size", "macs", "latency")
    EXACT_LIMIT = 16
    EXACT_PER_EVAL = 48

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
        super().__init__(evaluator, n_inits=10 if n_inits is None else n_inits, qtypes=qtypes,
                         seed=seed)  # fmt: skip
        self.auto_inits = n_inits is None
        self.seed = int(seed)
        transform = dim_trans if dim_trans is not None else DimTransform.full(self.n)
        if transform.out_dim != 2 * self.n:
            raise PlanError(
                f"dim_trans maps to {transform.out_dim} widths but the model has {self.n} "
                f"layers: use out_dim={2 * self.n} ([w..., a...])"
            )
        if fixed_layers:
            transform = transform.with_fixed(fixed_layers)
        self.dim_trans = transform
        self.dim = transform.in_dim
        self.choices = np.array([float(q) for q in self.qtypes])
        self.m = len(self.choices)
        self.evaluated: dict[tuple[int, ...], float] = {}
        self._costs: dict[tuple[str, tuple[int, ...]], float] = {}
        self._tables: dict[str, _LayerCosts | None] = {}
        self._exact_left = self.EXACT_PER_EVAL
        self._draws = self._feasible_draws = 0
        self._feasible_seen: set[tuple[int, ...]] = set()
        self.constraint_type: str | None = None
        self.budget: float | None = None

    # ----------------------------------------------------------------- mapping and costs
    def scheme_of(self, k: Sequence[int]) -> list[int | float]:
        return self.dim_trans.expand([self.qtypes[int(i)] for i in k])

    def cost_of(self, k: Sequence[int], constraint_type: str) -> float:
        """The exact cost of a search vector (cached)."""
        key = (constraint_type, tuple(int(i) for i in k))
        if key not in self._costs:
            self._costs[key] = self.cost(self.scheme_of(k), constraint_type)
        return self._costs[key]

    def costs_of(self, ks: np.ndarray, constraint_type: str) -> np.ndarray:
        """Costs of many search vectors (rows): per-layer tables when the cost is additive."""
        ks = np.atleast_2d(np.asarray(ks, dtype=int))
        table = self._table(constraint_type)
        if table is None:
            return np.array([self._exact(k, constraint_type) for k in ks])
        return table(self.dim_trans.expand_array(self.choices[ks]))

    def _exact(self, k: Sequence[int], constraint_type: str) -> float:
        if (constraint_type, tuple(int(i) for i in k)) not in self._costs:
            if self._exact_left <= 0:
                return math.inf  # unknown until the next evaluation grants more
            self._exact_left -= 1
        return self.cost_of(k, constraint_type)

    def _table(self, constraint_type: str) -> _LayerCosts | None:
        if constraint_type in self._tables:
            return self._tables[constraint_type]
        if constraint_type not in self.ADDITIVE:
            self._tables[constraint_type] = None
            return None
        n, t = self.n, self.dim_trans
        values = np.array(
            sorted({float(q) for q in self.qtypes} | set(map(float, t.fixed.values())))
        )
        low = t.expand([self.qtypes[0]] * self.dim)
        base = self.cost(low, constraint_type)
        delta = np.zeros((n, len(values), len(values)))
        for i in range(n):
            ws = [t.fixed[i]] if t.groups[i] == FIXED else self.qtypes
            acts = [t.fixed[n + i]] if t.groups[n + i] == FIXED else self.qtypes
            shared = t.groups[i] == t.groups[n + i] != FIXED
            for w in ws:
                for a in acts:
                    if shared and w != a:
                        continue
                    scheme = list(low)
                    scheme[i], scheme[n + i] = w, a
                    vw, va = np.searchsorted(values, [float(w), float(a)])
                    delta[i, vw, va] = self.cost(scheme, constraint_type) - base
        table = _LayerCosts(base, delta, values)
        probe = self.rng.integers(0, self.m, (2, self.dim))  # check additivity on two schemes
        exact = np.array([self.cost(self.scheme_of(k), constraint_type) for k in probe])
        if not np.allclose(table(t.expand_array(self.choices[probe])), exact, rtol=1e-9):
            table = None
        self._tables[constraint_type] = table
        return table

    def exact_only(self, constraint_type: str) -> bool:
        """Whether every cost must be computed scheme by scheme (no per-layer table)."""
        return self._table(constraint_type) is None

    def thin(self, ks: np.ndarray, constraint_type: str) -> np.ndarray:
        """``ks``, or a random ``EXACT_LIMIT`` of them when costs are computed one by one."""
        if len(ks) <= self.EXACT_LIMIT or not self.exact_only(constraint_type):
            return ks
        return ks[np.sort(self.rng.choice(len(ks), self.EXACT_LIMIT, replace=False))]

    def _check_budget(self, constraint_type: str, constraint_value: float) -> None:
        cheapest = self.cost_of([0] * self.dim, constraint_type)
        if cheapest > constraint_value:
            refuse_rising_cost(constraint_type, constraint_value, self.qtypes, cheapest,
                               lambda q: self.cost_of([self.qtypes.index(q)] * self.dim,
                                                      constraint_type))  # fmt: skip
            held = f" with layers held at {self.dim_trans.fixed}" if self.dim_trans.fixed else ""
            raise PlanError(
                f"the {constraint_type} budget {constraint_value:g} is below the cheapest scheme "
                f"of bit-widths {self.qtypes}{held} ({cheapest:g} at {self.qtypes[0]} bits "
                f"everywhere); raise the budget to at least {cheapest:g} or allow fewer bits"
            )

    # ----------------------------------------------------------------- sampling
    def repair(
        self, k: Sequence[int], constraint_type: str, budget: float, order: str = "random"
    ) -> np.ndarray:
        """Lower widths one step at a time until ``k`` fits: a random dimension (weighted by
        its cost saving when costs come from tables) or, with ``order="cyclic"``, layer by
        layer as HAQ does."""
        k = np.array(k, dtype=int)
        cost = float(self.costs_of(k, constraint_type)[0])
        d = 0
        for _ in range(self.dim * self.m + 1):
            if cost <= budget:
                return k
            if order == "cyclic":
                while k[d % self.dim] == 0:
                    d += 1
                pick = d % self.dim
                d += 1
            elif self.exact_only(constraint_type):
                pick = int(self.rng.choice(np.flatnonzero(k > 0)))
            else:
                down = np.flatnonzero(k > 0)
                lowered = np.repeat(k[None], len(down), axis=0)
                lowered[np.arange(len(down)), down] -= 1
                saving = np.maximum(cost - self.costs_of(lowered, constraint_type), 0) + 1e-12
                pick = int(self.rng.choice(down, p=saving / saving.sum()))
            k[pick] -= 1
            cost = float(self.costs_of(k, constraint_type)[0])
        return np.zeros(self.dim, dtype=int)  # all lowest: fits, as the budget check proved

    def sample_feasible(self, count: int, constraint_type: str, budget: float) -> np.ndarray:
        """Up to ``count`` distinct feasible search vectors: uniform draws within the budget,
        topped up with repaired draws (bounded; the space may hold fewer)."""
        count = max(1, count)
        per = self.REPAIR_DRAWS
        if self.exact_only(constraint_type):
            count, per = min(count, self.EXACT_LIMIT), 1
        draws = self.rng.integers(0, self.m, (per * count, self.dim))
        costs = self.costs_of(draws, constraint_type)
        fits = costs <= budget
        self._draws += len(draws)
        self._feasible_draws += int(fits.sum())
        found: dict[tuple[int, ...], None] = {}
        for k in draws[fits]:
            found.setdefault(tuple(int(i) for i in k))
            if len(found) >= count:
                break
        stale = 0  # repairs in a row that found nothing new: the region is spent
        for k in draws[~fits][: 4 * count]:
            if len(found) >= count or stale >= self.STALE_REPAIRS:
                break
            key = tuple(int(i) for i in self.repair(k, constraint_type, budget))
            stale = stale + 1 if key in found else 0
            found.setdefault(key)
        self._feasible_seen.update(found)
        return np.array(list(found), dtype=int).reshape(-1, self.dim)

    def uniform_feasible(self, constraint_type: str, budget: float) -> np.ndarray:
        """The widest single width for every dimension that fits the budget: the uniform plan
        an engineer tries first (all-lowest fits, as the budget check proved)."""
        for k in range(self.m - 1, 0, -1):
            vector = np.full(self.dim, k, dtype=int)
            if self.cost_of(vector, constraint_type) <= budget:
                return vector
        return np.zeros(self.dim, dtype=int)

    def initial_samples(self, constraint_type: str, budget: float) -> np.ndarray:
        """The ``n_inits`` first vectors of a model-based search: the widest uniform vector in
        budget, then distinct feasible draws (:meth:`sample_feasible`). Under a tight budget
        random draws rarely give every layer a middle width, yet that plan is often the best
        (found by benchmarks/search.py on a 10-layer DS-CNN)."""
        count = max(1, self.n_inits)
        uniform = self.uniform_feasible(constraint_type, budget)
        drawn = self.sample_feasible(count, constraint_type, budget)
        rest = [k for k in drawn if not np.array_equal(k, uniform)][: count - 1]
        return np.array([uniform, *rest], dtype=int).reshape(-1, self.dim)

    def neighbours(self, k: Sequence[int]) -> np.ndarray:
        """Every search vector one width away in one dimension, and every one-step move of
        width from one dimension to another (the moves along a budget's boundary)."""
        k = np.asarray(k, dtype=int)
        out = []
        for d in range(self.dim):
            for c in range(self.m):
                if c != k[d]:
                    v = k.copy()
                    v[d] = c
                    out.append(v)
        ups = [d for d in range(self.dim) if k[d] < self.m - 1]
        downs = [d for d in range(self.dim) if k[d] > 0]
        for u in ups:
            for d in downs:
                if u != d:
                    v = k.copy()
                    v[u] += 1
                    v[d] -= 1
                    out.append(v)
        return np.array(out, dtype=int).reshape(-1, self.dim)

    def climb(
        self,
        score: Callable[[np.ndarray], np.ndarray],
        start: Sequence[int],
        constraint_type: str,
        budget: float,
        max_steps: int = 50,
    ) -> np.ndarray:
        """Best-improvement hill climbing of ``score`` over feasible neighbours."""
        k = np.asarray(start, dtype=int)
        best = float(score(k[None])[0])
        for _ in range(max_steps):
            near = self.thin(self.neighbours(k), constraint_type)
            if not len(near):
                break
            near = near[self.costs_of(near, constraint_type) <= budget]
            if not len(near):
                break
            values = score(near)
            i = int(np.argmax(values))
            if values[i] <= best + 1e-12:
                break
            k, best = near[i], float(values[i])
        return k

    # ----------------------------------------------------------------- evaluation
    def evaluate_k(self, k: Sequence[int], objective: str, constraint_type: str) -> float:
        """The objective of a search vector; each distinct scheme is evaluated once."""
        key = tuple(int(i) for i in k)
        if key not in self.evaluated:
            self._exact_left = self.EXACT_PER_EVAL
            cost = self.cost_of(key, constraint_type)
            table = self._tables.get(constraint_type)
            if table is not None and not math.isclose(
                float(self.costs_of(np.array(key), constraint_type)[0]), cost, rel_tol=1e-9
            ):
                self._tables[constraint_type] = None  # it does not add up: cost each scheme
            budget = self.budget if constraint_type == self.constraint_type else None
            if budget is not None and cost > budget:  # proposed on a wrong cost table
                fixed = tuple(int(i) for i in self.repair(key, constraint_type, budget))
                return self.evaluate_k(fixed, objective, constraint_type)
            self.evaluated[key] = self._evaluate(self.scheme_of(key), objective, cost)
        return self.evaluated[key]

    def _data(self) -> tuple[np.ndarray, np.ndarray]:
        """Evaluated search vectors (as widths) and their objective values."""
        keys = list(self.evaluated)
        x = self.choices[np.array(keys, dtype=int).reshape(-1, self.dim)]
        return x, np.array([self.evaluated[k] for k in keys])

    @property
    def feasible_region(self) -> FeasibleRegion | None:
        if self.constraint_type is None or self.budget is None:
            return None
        return FeasibleRegion(
            self.constraint_type,
            self.budget,
            self.cost_of([0] * self.dim, self.constraint_type),
            self._draws,
            self._feasible_draws,
            len(self._feasible_seen | set(self.evaluated)),
        )

    # ----------------------------------------------------------------- the seed's call
    def search(
        self,
        n_iterations: int,
        objective: str = "ptq_acc",
        constraint_type: str | None = None,
        constraint_value: float | None = None,
        *,
        constraint: str | None = None,
    ) -> tuple[list[Any], float]:
        constraint_type = constraint_type or constraint
        if constraint_type is None or constraint_value is None:
            raise PlanError(
                "search needs a constraint type and value, e.g. search(40, 'ptq_acc', 'bops', "
                "0.5 * evaluator.eval_bops([8] * 2 * n))"
            )
        if not callable(getattr(self.evaluator, f"eval_{constraint_type}", None)):
            known = sorted(
                name[5:]
                for name in dir(self.evaluator)
                if name.startswith("eval_") and name[5:] not in NOT_COSTS
            )
            raise PlanError(
                f"unknown constraint {constraint_type!r}; this evaluator costs schemes in: "
                f"{', '.join(known)}"
            )
        budget = float(constraint_value)
        if 0 < budget <= 1:  # the seed's "constraint_value=0.5  # 50% of INT8 BOPs"
            budget *= self.cost([8] * (2 * self.n), constraint_type)
        self._check_budget(constraint_type, budget)
        self.constraint_type, self.budget = constraint_type, budget
        if self.auto_inits:
            self.n_inits = min(10, max(2, int(n_iterations) // 3))
        self._search(max(0, int(n_iterations)), objective, constraint_type, budget)
        if not any(c <= budget for _, _, c in self.history):
            self.evaluate_k([0] * self.dim, objective, constraint_type)
        return self._best(budget)

    def _search(
        self, n_iterations: int, objective: str, constraint_type: str, budget: float
    ) -> None:
        raise NotImplementedError


def _plain(bits: Any) -> int | float:
    value = float(bits)
    return int(value) if value.is_integer() else value
