"""The study is read incrementally (StudyIndex): what mico reads of each trial equals what
Optuna reads, new and changed trials are picked up, and a scheme the study holds is answered
without evaluating it again."""

from __future__ import annotations

import math
from typing import Any

import optuna
import pytest

from mico.errors import ConfigError
from mico.search.study import (
    StudyConfig,
    StudyIndex,
    TrialRunner,
    best_feasible,
    open_study,
    sqlite_url,
    trial_rows,
)

LAYERS = ["a", "b"]


class KeyOnly:
    """An evaluator that only names schemes: any evaluation is a test failure."""

    objective = "ptq_acc"
    last_from_cache = False
    layer_names = LAYERS
    n_layers = 2

    def scheme_key(self, scheme: list[Any]) -> str:
        pairs = zip(LAYERS, scheme[:2], scheme[2:], strict=True)
        return ",".join(f"{n}={w}/{a}" for n, w, a in pairs)

    def objective_value(self, scheme: list[Any]) -> float:
        raise AssertionError(f"{scheme} was evaluated although the study holds it")


def _labelled(study: Any, scheme: list[int], value: float | None, feasible: bool = True) -> Any:
    trial = study.ask()
    trial.set_user_attr("scheme", KeyOnly().scheme_key(scheme))
    trial.set_user_attr("qscheme", scheme)
    trial.set_user_attr("costs", {"bops": float(sum(scheme))})
    trial.set_user_attr("feasible", feasible)
    if value is not None:
        study.tell(trial, value)
    return trial


def _compare(index: StudyIndex, study: Any) -> None:
    frozen = {t._trial_id: t for t in optuna.load_study(
        study_name=study.study_name, storage=study._storage).get_trials()}  # fmt: skip
    assert set(index.rows) == set(frozen)
    for trial_id, row in index.rows.items():
        t = frozen[trial_id]
        assert (row.number, row.state, row.value) == (t.number, t.state, t.value)
        assert row.user_attrs == t.user_attrs
        assert row.system_attrs.get("failed_trial") == t.system_attrs.get("failed_trial")


@pytest.fixture
def study(tmp_path):
    config = StudyConfig(sqlite_url(tmp_path / "study.db"), "s")
    return config, open_study(config, {"layers": LAYERS}, resume=False)


def test_index_reads_what_optuna_reads_and_follows_changes(study):
    config, handle = study
    for i, bits in enumerate((2, 4, 8)):
        _labelled(handle, [bits] * 4, 0.5 + i / 10)
    running = _labelled(handle, [2, 4, 2, 4], None)
    failed = _labelled(handle, [4, 2, 4, 2], None)
    failed.set_user_attr("mico_void", "duplicate of trial 0")
    handle.tell(failed, state=optuna.trial.TrialState.FAIL)
    _labelled(handle, [8, 2, 8, 2], math.inf)
    index = StudyIndex(handle).refresh()
    _compare(index, handle)
    assert index.count("COMPLETE") == 4 and index.count("RUNNING") == 1
    assert set(index.complete) == {KeyOnly().scheme_key(s) for s in
                                   ([2] * 4, [4] * 4, [8] * 4, [8, 2, 8, 2])}  # fmt: skip
    # another worker finishes the running trial and adds one: a refresh picks both up
    other = open_study(config, {"layers": LAYERS}, resume=True)
    other.tell(running.number, 0.9)
    _labelled(other, [4, 8, 4, 8], 0.7, feasible=False)
    index.refresh()
    _compare(index, handle)
    assert index.count("COMPLETE") == 6 and index.count("RUNNING") == 0
    best = best_feasible(handle, index)
    assert best.number == 5 and best.value == math.inf  # the infeasible 0.7 is not a candidate
    rows = trial_rows(handle, ["bops"], index)
    assert [r["trial"] for r in rows] == [0, 1, 2, 3, 5, 6]  # the voided claim is left out


def test_a_scheme_the_study_holds_is_answered_without_evaluating(study):
    config, handle = study
    _labelled(handle, [4, 8, 4, 8], 0.75)
    runner = TrialRunner(handle, config, KeyOnly(), {"bops": 1e9}, 10, [2, 4, 8],
                         log=lambda _m: None)  # fmt: skip
    assert runner([4, 8, 4, 8]) == 0.75
    assert runner.new_trials == 0 and len(runner.index.rows) == 1


def test_a_storage_that_is_not_a_database_is_read_through_optuna():
    handle = optuna.create_study(direction="maximize")  # in memory
    _labelled(handle, [2, 2, 2, 2], 0.4)
    _labelled(handle, [8, 8, 8, 8], 0.8)
    index = StudyIndex(handle).refresh()
    assert index.count("COMPLETE") == 2 and best_feasible(handle).value == 0.8
    assert index.complete[KeyOnly().scheme_key([2] * 4)].value == 0.4


def test_a_study_with_trials_is_not_restarted_without_resume(study):
    config, handle = study
    _labelled(handle, [2] * 4, 0.5)
    with pytest.raises(ConfigError, match=r"already holds 1 trial\(s\); pass --resume"):
        open_study(config, {"layers": LAYERS}, resume=False)
