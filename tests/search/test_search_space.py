"""Every strategy takes the search space the same way (``dim_trans=`` and ``fixed_layers=``,
as seed 003's ``MiCoSearcher(..., dim_trans=DimTransform(...))``), the random and NLP
searchers included: the evaluated schemes follow the transform and the answer fits."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from mico.errors import PlanError
from mico.search import DimTransform, NLPSearcher, RandomSearcher
from mico.search.strategies import STRATEGIES
from mico.search.tune import evaluations_needed

QTYPES = [2, 4, 8]


class Toy:
    """Six layers; accuracy 1 - sum(s_w 2^-w) - sum(s_a 2^-a); BOPs = sum MACs w a."""

    def __init__(self) -> None:
        self.n_layers = 6
        self.macs = np.array([900.0, 4000.0, 2500.0, 1500.0, 600.0, 100.0])
        self.params = np.array([40, 300, 900, 600, 200, 30])
        self.sw = np.array([0.9, 0.3, 0.1, 0.2, 0.3, 0.8])
        self.sa = np.array([0.6, 0.2, 0.2, 0.1, 0.2, 0.5])
        self.objective = "ptq_acc"
        self.latency_target = "bitfusion"
        self.history: list[list[Any]] = []

    def _split(self, scheme: Any) -> tuple[np.ndarray, np.ndarray]:
        s = np.asarray(scheme, dtype=float)
        return s[: self.n_layers], s[self.n_layers :]

    def eval_bops(self, scheme: Any) -> float:
        w, a = self._split(scheme)
        return float((self.macs * w * a).sum())

    def eval_size(self, scheme: Any) -> float:
        w, _ = self._split(scheme)
        return float(np.ceil(self.params * w / 8).sum())

    def eval_f(self, scheme: Any) -> float:
        w, a = self._split(scheme)
        self.history.append(list(scheme))
        return float(1 - (self.sw * 2.0**-w).sum() - (self.sa * 2.0**-a).sum())


def _half(ev: Toy, cost: str) -> float:
    return getattr(ev, f"eval_{cost}")([8] * 12) / 2


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_strategy_searches_through_a_transform_with_fixed_layers(name):
    ev = Toy()
    transform = DimTransform.w_eq_a(6)
    searcher = STRATEGIES[name](
        ev, n_inits=3, qtypes=QTYPES, seed=1, dim_trans=transform, fixed_layers={0: 8, -1: 8}
    )
    assert searcher.dim == 4
    budget = _half(ev, "bops")
    best_x, best_y = searcher.search(4, "ptq_acc", "bops", budget)
    assert len(best_x) == 12 and ev.eval_bops(best_x) <= budget
    assert best_y == Toy().eval_f(best_x)
    assert ev.history
    for scheme in ev.history:
        assert scheme[:6] == scheme[6:]  # W = A
        assert scheme[0] == scheme[5] == 8  # first and last layers held


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_a_transform_onto_another_layer_count_is_refused(name):
    with pytest.raises(PlanError, match=r"dim_trans maps to 10 widths.*out_dim=12"):
        STRATEGIES[name](Toy(), qtypes=QTYPES, dim_trans=DimTransform.full(5))


def test_random_search_draws_from_the_transformed_space():
    ev = Toy()
    transform = DimTransform.blocks(6, 3)  # layers (0,1), (2,3), (4,5): w and a apart
    searcher = RandomSearcher(ev, qtypes=QTYPES, seed=0, dim_trans=transform)
    budget = _half(ev, "size")
    best_x, _ = searcher.search(12, "ptq_acc", "size", budget)
    assert ev.eval_size(best_x) <= budget
    assert len(ev.history) == 12 == len({tuple(s) for s in ev.history})
    for s in ev.history:
        assert ev.eval_size(s) <= budget
        for i in (0, 2, 4, 6, 8, 10):
            assert s[i] == s[i + 1]  # each block of two layers shares its widths
    region = searcher.feasible_region
    assert region.draws >= region.feasible_draws >= 12


def test_random_search_accepts_a_share_of_w8a8_like_the_others():
    one, two = Toy(), Toy()
    a = RandomSearcher(one, qtypes=QTYPES, seed=3).search(5, "ptq_acc", "bops", 0.5)
    b = RandomSearcher(two, qtypes=QTYPES, seed=3).search(5, "ptq_acc", "bops", _half(two, "bops"))
    assert a == b and one.history == two.history


def test_nlp_defaults_to_one_width_per_layer_and_counts_its_evaluations():
    ev = Toy()
    searcher = NLPSearcher(ev, qtypes=QTYPES)
    assert searcher.dim == 6 and evaluations_needed(searcher) == 6 * 2 + 2
    best_x, _ = searcher.search(1, "ptq_acc", "bops", _half(ev, "bops"))
    assert best_x[:6] == best_x[6:]
    assert len(ev.history) <= searcher.evaluations_needed
    assert len({tuple(s) for s in ev.history}) == len(ev.history)  # none paid for twice


def test_nlp_with_weights_and_activations_apart_fits_a_product_cost():
    """BOPs multiply w and a: per-dimension costs do not add up, the answer is lowered until
    it fits, and it is at least as good as W = A per layer at the same budget."""
    ev = Toy()
    budget = 0.3 * ev.eval_bops([8] * 12)
    searcher = NLPSearcher(ev, qtypes=QTYPES, dim_trans=DimTransform.full(6))
    loss = searcher.sensitivities("ptq_acc")
    assert loss.shape == (12, 3) and (loss[:, -1] == 0).all() and (loss >= 0).all()
    best_x, best_y = searcher.search(1, "ptq_acc", "bops", budget)
    assert ev.eval_bops(best_x) <= budget
    assert searcher.evaluations_needed == 12 * 2 + 2
    tied = NLPSearcher(Toy(), qtypes=QTYPES).search(1, "ptq_acc", "bops", budget)
    assert best_y >= tied[1] - 0.02


def test_nlp_with_blocks_probes_each_block():
    ev = Toy()
    searcher = NLPSearcher(ev, qtypes=QTYPES, dim_trans=DimTransform.blocks(6, 2, w_eq_a=True))
    assert searcher.dim == 2
    best_x, _ = searcher.search(1, "ptq_acc", "size", _half(ev, "size"))
    assert ev.eval_size(best_x) <= _half(ev, "size")
    assert len(ev.history) <= 2 * 2 + 2
    for s in ev.history:
        assert len(set(s[:3])) == 1 and len(set(s[3:6])) == 1 and s[:6] == s[6:]


# ------------------------------------------------------------------------- mico tune's space
def test_parse_space_names_and_errors():
    from mico.search.tune import parse_space

    assert parse_space("full", 3).in_dim == 6
    assert parse_space("w=a", 3).expand([2, 4, 8]) == [2, 4, 8, 2, 4, 8]
    assert parse_space("w-only:4", 3).expand([2, 4, 8]) == [2, 4, 8, 4, 4, 4]
    assert parse_space("blocks:2:w=a", 4).expand([2, 8]) == [2, 2, 8, 8] * 2
    for bad in ("half", "blocks", "blocks:9", "blocks:2:x", "w-only:x"):
        with pytest.raises(PlanError, match=r"full, w-only\[:A\], w=a, blocks:K"):
            parse_space(bad, 4)


def test_tune_searches_the_space_it_is_given_and_the_study_records_it(
    trained_cnn, digits_split, tmp_path
):
    from mico.errors import ConfigError
    from mico.search import MiCoEval
    from mico.search.study import StudyConfig, sqlite_url
    from mico.search.tune import parse_budgets, tune

    train_loader, test_loader = digits_split.loaders(batch_size=64, seed=0)
    ev = MiCoEval(trained_cnn, 1, train_loader, test_loader, None, data_name="digits")
    config = StudyConfig(sqlite_url(tmp_path / "study.db"), "s")
    budgets = parse_budgets("bops=60%")
    result = tune(ev, budgets, "random", 4, [2, 4, 8], 0, lambda _m: None, study=config,
                  space="w=a", fixed_layers={0: 8})  # fmt: skip
    assert len(result.trials) == 4
    assert result.costs["bops"] <= result.budgets["bops"]
    for row in result.trials:
        w = [int(p.split("=")[1].split("/")[0]) for p in row["scheme"].split(",")]
        a = [int(p.split("=")[1].split("/")[1]) for p in row["scheme"].split(",")]
        assert w == a and w[0] == 8
    with pytest.raises(ConfigError, match=r"other settings \(space"):
        tune(ev, budgets, "random", 6, [2, 4, 8], 0, lambda _m: None, study=config,
             resume=True, space="full", fixed_layers={0: 8})  # fmt: skip
