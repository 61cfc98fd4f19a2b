"""The search strategies (surrogate, Bayesian, RL, regression, Pareto) on a cheap deterministic
evaluator whose accuracy is a known function of the widths, so the optimum is known exactly:
feasibility under BOPs and size budgets, reproducibility, tight and impossible budgets,
DimTransform and fixed layers, and Pareto fronts."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from mico.errors import PlanError
from mico.search import (
    BayesSearcher,
    DimTransform,
    HAQSearcher,
    MiCoSearcher,
    ParetoSearcher,
    RandomSearcher,
    RegressionSearcher,
    pareto_front,
)
from mico.search.strategies import STRATEGIES

QTYPES = [2, 4, 8]
NEW = ["mico", "bayes", "haq", "regression", "pareto"]


class FakeEval:
    """Five layers; accuracy 1 - sum(s_w 2^-w) - sum(s_a 2^-a); additive BOPs and size."""

    def __init__(self) -> None:
        self.n_layers = 5
        self.macs = np.array([1000.0, 4000.0, 2000.0, 500.0, 100.0])
        self.params = np.array([50, 400, 800, 300, 40])
        self.sw = np.array([0.8, 0.3, 0.2, 0.3, 0.9])
        self.sa = np.array([0.5, 0.2, 0.2, 0.2, 0.4])
        self.objective = "ptq_acc"
        self.latency_target = "bitfusion"
        self.history: list[tuple[list[Any], float]] = []

    def _split(self, scheme: Any) -> tuple[np.ndarray, np.ndarray]:
        s = np.asarray(scheme, dtype=float)
        return s[: self.n_layers], s[self.n_layers :]

    def eval_bops(self, scheme: Any) -> float:
        w, a = self._split(scheme)
        return float((self.macs * w * a).sum())

    def eval_size(self, scheme: Any) -> float:
        w, _ = self._split(scheme)
        return float(np.ceil(self.params * w / 8).sum())

    def eval_macs(self, scheme: Any) -> float:
        return float(self.macs.sum())

    def eval_latency(self, scheme: Any, target: str | None = None) -> float:
        w, a = self._split(scheme)
        return float((self.macs * np.maximum(w, a) / 8).sum() + 10)

    def eval_f(self, scheme: Any) -> float:
        w, a = self._split(scheme)
        value = float(1 - (self.sw * 2.0**-w).sum() - (self.sa * 2.0**-a).sum())
        self.history.append((list(scheme), value))
        return value

    def optimum(self, constraint: str, budget: float) -> float:
        grid = np.array(list(itertools.product(QTYPES, repeat=10)), dtype=float)
        w, a = grid[:, :5], grid[:, 5:]
        acc = 1 - (self.sw * 2.0**-w).sum(1) - (self.sa * 2.0**-a).sum(1)
        cost = {"bops": (self.macs * w * a).sum(1), "size": np.ceil(self.params * w / 8).sum(1)}
        return float(acc[cost[constraint] <= budget].max())


def _cost(ev: FakeEval, constraint: str):
    return getattr(ev, f"eval_{constraint}")


def _half(ev: FakeEval, constraint: str) -> float:
    return _cost(ev, constraint)([8] * 10) / 2


@pytest.mark.parametrize("name", sorted(STRATEGIES))
@pytest.mark.parametrize("constraint", ["bops", "size"])
def test_every_strategy_fits_half_the_w8a8_budget(name, constraint):
    ev = FakeEval()
    budget = _half(ev, constraint)
    searcher = STRATEGIES[name](ev, n_inits=4, qtypes=QTYPES, seed=0)
    best_x, best_y = searcher.search(6, "ptq_acc", constraint, budget)
    assert len(best_x) == 10 and set(best_x) <= set(QTYPES)
    assert _cost(ev, constraint)(best_x) <= budget
    assert best_y == FakeEval().eval_f(best_x)  # the reported accuracy is the scheme's
    assert all(cost <= budget for _, _, cost in searcher.history if cost != float("inf"))


@pytest.mark.parametrize("name", NEW)
def test_strategies_are_reproducible_with_a_seed(name):
    runs = []
    for seed in (3, 3, 4):
        ev = FakeEval()
        searcher = STRATEGIES[name](ev, n_inits=4, qtypes=QTYPES, seed=seed)
        best = searcher.search(6, "ptq_acc", "bops", _half(ev, "bops"))
        runs.append((best, [h[0] for h in ev.history]))
    assert runs[0] == runs[1]
    assert runs[0][1] != runs[2][1]  # another seed explores other schemes


@pytest.mark.parametrize(
    "make",
    [
        lambda ev: MiCoSearcher(ev, n_inits=3, qtypes=QTYPES, surrogate="xgb"),
        lambda ev: MiCoSearcher(ev, n_inits=3, qtypes=QTYPES, surrogate="gp"),
        lambda ev: BayesSearcher(ev, n_inits=3, qtypes=QTYPES, sampler="gp"),
    ],
    ids=["mico-xgb", "mico-gp", "bayes-gp"],
)
def test_surrogate_and_sampler_options(make):
    first, second = FakeEval(), FakeEval()
    budget = _half(first, "bops")
    best_x, _ = make(first).search(3, "ptq_acc", "bops", budget)
    assert first.eval_bops(best_x) <= budget
    make(second).search(3, "ptq_acc", "bops", budget)
    assert first.history == second.history  # seeded: the same schemes in the same order


def test_model_based_strategies_beat_random_sampling():
    """Twenty evaluations each, three seeds: the mean gap to the true optimum."""
    ev = FakeEval()
    budget = _half(ev, "bops")
    best = ev.optimum("bops", budget)

    def gap(name: str) -> float:
        gaps = []
        for seed in range(3):
            searcher = STRATEGIES[name](FakeEval(), n_inits=5, qtypes=QTYPES, seed=seed)
            iterations = 20 if name == "random" else 15
            gaps.append(best - searcher.search(iterations, "ptq_acc", "bops", budget)[1])
        return float(np.mean(gaps))

    gaps = {name: gap(name) for name in ("random", "mico", "bayes", "regression")}
    assert gaps["random"] > 0.05
    for name in ("mico", "bayes", "regression"):
        assert gaps[name] < gaps["random"], (name, gaps)
    assert gaps["regression"] < 0.03  # the model's form fits this objective


def test_haq_policy_learns_from_rewards():
    ev = FakeEval()
    searcher = HAQSearcher(ev, n_inits=5, qtypes=QTYPES, seed=0)
    searcher.search(95, "ptq_acc", "bops", _half(ev, "bops"))
    rewards = searcher.rewards  # one per episode; repeated schemes are rewarded, not evaluated
    assert len(rewards) >= len(searcher.evaluated) and len(searcher.evaluated) <= 100
    assert len(rewards) <= HAQSearcher.EPISODES_PER_EVALUATION * 100
    assert np.mean(rewards[-20:]) > np.mean(rewards[:20]) + 0.05
    assert np.allclose(searcher.policy().sum(axis=1), 1.0)


def test_haq_enforcement_lowers_layers_in_order():
    ev = FakeEval()
    searcher = HAQSearcher(ev, qtypes=QTYPES)
    top = [2] * searcher.dim
    budget = ev.eval_bops([4] + [8] * 9)
    fixed = searcher.enforce(top, "bops", budget)
    assert list(fixed) == [1] + [2] * 9  # the first layer's weights went down one step


@pytest.mark.parametrize("name", NEW)
def test_tight_budget_terminates_feasibly(name):
    ev = FakeEval()
    cheapest = ev.eval_bops([2] * 10)
    budget = cheapest * 1.02  # only a handful of schemes fit
    searcher = STRATEGIES[name](ev, n_inits=10, qtypes=QTYPES, seed=0)
    best_x, _ = searcher.search(30, "ptq_acc", "bops", budget)
    assert ev.eval_bops(best_x) <= budget
    assert len(ev.history) <= 40
    region = searcher.feasible_region
    assert region.cheapest == cheapest and region.budget == budget
    assert 1 <= region.distinct_feasible < 20
    assert region.share < 0.01


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_impossible_budget_is_refused_before_evaluating(name):
    ev = FakeEval()
    cheapest = ev.eval_bops([2] * 10)
    searcher = STRATEGIES[name](ev, qtypes=QTYPES, seed=0)
    with pytest.raises(PlanError, match=rf"at least {cheapest:g}"):
        searcher.search(5, "ptq_acc", "bops", cheapest - 1)
    assert ev.history == []


def test_initial_samples_default_to_a_third_of_the_iterations():
    ev = FakeEval()
    searcher = MiCoSearcher(ev, qtypes=QTYPES)
    searcher.search(9, "ptq_acc", "bops", _half(ev, "bops"))
    assert searcher.n_inits == 3 and len(ev.history) == 12
    ev = FakeEval()
    searcher = MiCoSearcher(ev, n_inits=5, qtypes=QTYPES)  # as given, the seed's way
    searcher.search(3, "ptq_acc", "bops", _half(ev, "bops"))
    assert searcher.n_inits == 5 and len(ev.history) == 8


def test_unknown_constraint_is_refused_before_evaluating():
    ev = FakeEval()
    with pytest.raises(PlanError, match=r"unknown constraint 'latency_proxy'.*bops, latency"):
        MiCoSearcher(ev, qtypes=QTYPES).search(5, "ptq_acc", "latency_proxy", 1000.0)
    assert ev.history == []


def test_fixed_layers_raise_the_cheapest_scheme():
    ev = FakeEval()
    searcher = MiCoSearcher(ev, qtypes=QTYPES, fixed_layers={0: 8})
    cheapest = ev.eval_bops([8, 2, 2, 2, 2, 8, 2, 2, 2, 2])
    with pytest.raises(PlanError, match=rf"held at .*at least {cheapest:g}"):
        searcher.search(5, "ptq_acc", "bops", cheapest - 1)
    assert ev.history == []


def test_seed_call_forms_keyword_constraint_and_share_of_w8a8():
    one, two = FakeEval(), FakeEval()
    a = RegressionSearcher(one, n_inits=4, qtypes=QTYPES).search(
        n_iterations=4, objective="ptq_acc", constraint="bops", constraint_value=0.5
    )
    b = RegressionSearcher(two, n_inits=4, qtypes=QTYPES).search(
        4, "ptq_acc", "bops", _half(two, "bops")
    )
    assert a == b
    with pytest.raises(PlanError, match="constraint type and value"):
        RegressionSearcher(FakeEval(), qtypes=QTYPES).search(4, "ptq_acc")


# ------------------------------------------------------------------------- DimTransform
def test_dim_transform_shapes():
    n = 5
    x = [2, 4, 8, 4, 2]
    assert DimTransform.full(n).in_dim == 10
    assert DimTransform.w_eq_a(n).expand(x) == x + x
    assert DimTransform.w_only(n, a_bits=8).expand(x) == x + [8] * 5
    blocks = DimTransform.blocks(n, 2)
    assert (blocks.in_dim, blocks.out_dim) == (4, 10)
    assert blocks.expand([2, 8, 4, 6]) == [2, 2, 2, 8, 8, 4, 4, 4, 6, 6]
    assert DimTransform.blocks(n, 2, w_eq_a=True).expand([2, 8]) == [2, 2, 2, 8, 8] * 2
    seed = DimTransform(in_dim=20, out_dim=100, method="expand")  # seed 003's example
    scheme = seed.expand(list(range(20)))
    assert len(scheme) == 100 and scheme[:5] == [0] * 5 and scheme[-1] == 19
    assert seed.reduce(scheme) == list(range(20))
    fixed = DimTransform.w_eq_a(n).with_fixed({0: 8, -1: (8, 6)})
    assert fixed.in_dim == 3
    assert fixed.expand([2, 4, 2]) == [8, 2, 4, 2, 8, 8, 2, 4, 2, 6]
    assert np.array_equal(fixed.expand_array(np.array([[2, 4, 2]]))[0], fixed.expand([2, 4, 2]))


def test_dim_transform_errors():
    with pytest.raises(PlanError, match="expects 4 values"):
        DimTransform.blocks(5, 2).expand([2, 4])
    with pytest.raises(PlanError, match="in_dim <= out_dim"):
        DimTransform(in_dim=12, out_dim=10)
    with pytest.raises(PlanError, match="unknown DimTransform method"):
        DimTransform(in_dim=2, out_dim=10, method="squeeze")
    with pytest.raises(PlanError, match="out of range"):
        DimTransform.full(5).with_fixed({5: 8})
    with pytest.raises(PlanError, match="nothing to search"):
        DimTransform.w_eq_a(2).with_fixed({0: 8, 1: 8})
    with pytest.raises(PlanError, match="out_dim=10"):
        MiCoSearcher(FakeEval(), dim_trans=DimTransform.full(4))


@pytest.mark.parametrize("name", NEW)
def test_every_new_strategy_searches_through_a_transform(name):
    ev = FakeEval()
    transform = DimTransform.w_eq_a(5)
    searcher = STRATEGIES[name](
        ev, n_inits=4, qtypes=QTYPES, seed=0, dim_trans=transform, fixed_layers={0: 8, -1: 8}
    )
    assert searcher.dim == 3
    budget = _half(ev, "bops")
    best_x, _ = searcher.search(5, "ptq_acc", "bops", budget)
    assert ev.eval_bops(best_x) <= budget
    for scheme, _ in ev.history:
        assert scheme[:5] == scheme[5:]  # W = A
        assert scheme[0] == scheme[4] == 8  # first and last layers held


def test_costs_that_do_not_add_up_are_computed_exactly():
    class PaddedSize(FakeEval):
        def eval_size(self, scheme: Any) -> float:  # a 64-byte alignment of the whole blob
            return float(np.ceil(super().eval_size(scheme) / 64) * 64)

    ev = PaddedSize()
    budget = _half(ev, "size")
    searcher = MiCoSearcher(ev, n_inits=4, qtypes=QTYPES)
    best_x, _ = searcher.search(3, "ptq_acc", "size", budget)
    assert searcher._tables["size"] is None  # not additive: every cost computed
    assert ev.eval_size(best_x) <= budget
    assert all(ev.eval_size(s) <= budget for s, _ in ev.history)


@pytest.mark.parametrize("name", NEW)
def test_a_cost_with_interactions_never_lets_an_over_budget_scheme_be_evaluated(name):
    class Coupled(FakeEval):
        def eval_bops(self, scheme: Any) -> float:  # layers 1 and 2 at 8 bits cost extra
            extra = 60000.0 if scheme[1] == 8 and scheme[2] == 8 else 0.0
            return super().eval_bops(scheme) + extra

    ev = Coupled()
    budget = _half(ev, "bops")
    searcher = STRATEGIES[name](ev, n_inits=5, qtypes=QTYPES, seed=0)
    best_x, _ = searcher.search(10, "ptq_acc", "bops", budget)
    assert searcher.exact_only("bops")  # found out, from the probes or an evaluated scheme
    assert all(ev.eval_bops(scheme) <= budget for scheme, _ in ev.history)
    assert ev.eval_bops(best_x) <= budget


# ------------------------------------------------------------------------- Pareto
def test_pareto_front_keeps_exactly_the_non_dominated():
    history = [
        ([1], 0.90, 10.0),
        ([2], 0.80, 5.0),
        ([3], 0.85, 12.0),  # dominated by [1]
        ([4], 0.70, 5.0),  # dominated by [2]
        ([5], 0.95, 20.0),
        ([1], 0.90, 10.0),  # repeated
    ]
    front = pareto_front(history)
    assert [p.scheme for p in front] == [[2], [1], [5]]
    two = pareto_front(history, [[10, 1], [5, 9], [12, 0], [5, 9], [20, 9], [10, 1]])
    assert {tuple(p.scheme) for p in two} == {(1,), (2,), (3,), (5,)}  # [3] is smallest in size
    with pytest.raises(PlanError, match="one row of costs per entry"):
        pareto_front(history, [[1]])


def test_pareto_searcher_front_is_non_dominated_and_spread():
    ev = FakeEval()
    budget = _half(ev, "bops")
    searcher = ParetoSearcher(ev, n_inits=4, qtypes=QTYPES, seed=0, second_cost="size")
    best_x, best_y = searcher.search(12, "ptq_acc", "bops", budget)
    assert ev.eval_bops(best_x) <= budget
    front = searcher.front
    assert len(front) >= 3
    evaluated = {tuple(s): (v, (ev.eval_bops(s), ev.eval_size(s))) for s, v, _ in searcher.history}

    def dominates(a: tuple, b: tuple) -> bool:
        (va, ca), (vb, cb) = a, b
        no_worse = va >= vb and all(x <= y for x, y in zip(ca, cb, strict=True))
        return no_worse and a != b

    on_front = {tuple(p.scheme) for p in front}
    for p in front:
        assert evaluated[tuple(p.scheme)] == (p.value, p.costs)  # accuracy, bops, size
        assert p.costs[0] <= budget
        assert not any(dominates(other, (p.value, p.costs)) for other in evaluated.values())
    for scheme, point in evaluated.items():  # everything else is dominated by the front
        if scheme not in on_front:
            assert any(dominates((p.value, p.costs), point) or (p.value, p.costs) == point
                       for p in front)  # fmt: skip
    points = [(p.value, p.costs) for p in front]
    assert best_y == max(v for v, c in points if c[0] <= budget)
    evaluated_costs = [c for _, _, c in searcher.history]
    assert min(evaluated_costs) < 0.6 * budget  # lower budget levels were explored


def test_strategies_are_registered_searchers():
    from mico.registry import ModuleRegistry

    names = {m.name for m in ModuleRegistry.list_modules(category="searcher")}
    assert set(STRATEGIES) <= names
    assert ModuleRegistry.get_module("haq") is HAQSearcher


def test_random_searcher_still_runs_beside_them():
    ev = FakeEval()
    best_x, _ = RandomSearcher(ev, qtypes=QTYPES).search(3, "ptq_acc", "bops", _half(ev, "bops"))
    assert ev.eval_bops(best_x) <= _half(ev, "bops")


class ArenaEval(FakeEval):
    """A ``ram`` cost as the C arena: the largest pair of adjacent activations, not a sum."""

    def __init__(self) -> None:
        super().__init__()
        self.ram_calls = 0

    def eval_ram(self, scheme: Any) -> float:
        self.ram_calls += 1
        _, a = self._split(scheme)
        size = np.array([784, 1600, 800, 120, 84]) * a / 8
        return float(max(size[:-1] + size[1:]))


@pytest.mark.parametrize("name", NEW)
def test_costs_computed_scheme_by_scheme_are_few(name):
    ev = ArenaEval()
    budget = ev.eval_ram([8] * 10) * 0.6
    searcher = STRATEGIES[name](ev, n_inits=4, qtypes=QTYPES, seed=0)
    best_x, _ = searcher.search(4, "ptq_acc", "ram", budget)
    assert searcher.exact_only("ram")
    assert ev.eval_ram(best_x) <= budget
    evaluations = len(ev.history)
    assert evaluations == 8
    # schemes costed: a bounded allowance per evaluation, plus the evaluated and the cheapest
    assert ev.ram_calls <= searcher.EXACT_PER_EVAL * (evaluations + 1) + evaluations + 2


def test_nlp_never_evaluates_a_scheme_twice():
    from mico.search import NLPSearcher

    ev = FakeEval()
    full = ev.eval_bops([8] * 10)
    # a budget where only the tiny last layer can drop: the program's answer is a probe
    budget = full - 0.5 * ev.macs[4] * 64
    best_x, _ = NLPSearcher(ev, qtypes=[2, 8]).search(10, "ptq_acc", "bops", budget)
    evaluated = [tuple(s) for s, _ in ev.history]
    assert len(evaluated) == len(set(evaluated))  # no scheme paid for twice
    assert ev.eval_bops(best_x) <= budget and tuple(best_x) in set(evaluated)


def test_random_search_evaluates_as_many_distinct_schemes_as_asked():
    from mico.search import RandomSearcher

    ev = FakeEval()
    budget = ev.eval_bops([8] * 10)  # everything fits: 3^10 schemes
    RandomSearcher(ev, qtypes=QTYPES, seed=0).search(40, "ptq_acc", "bops", budget)
    assert len(ev.history) == 40 == len({tuple(s) for s, _ in ev.history})
    tight = FakeEval()  # a budget only the cheapest scheme meets: one evaluation, no spin
    cheapest = tight.eval_bops([2] * 10)
    RandomSearcher(tight, qtypes=QTYPES, seed=0).search(40, "ptq_acc", "bops", cheapest)
    assert [tuple(s) for s, _ in tight.history] == [tuple([2] * 10)]


def test_haq_spends_its_whole_evaluation_budget():
    ev = FakeEval()
    budget = 0.5 * ev.eval_bops([8] * 10)
    STRATEGIES["haq"](ev, qtypes=QTYPES, seed=0, n_inits=2).search(18, "ptq_acc", "bops", budget)
    assert len({tuple(s) for s, _ in ev.history}) == len(ev.history) == 20
