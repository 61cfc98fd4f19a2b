"""The persistent study of mico tune: every evaluation a trial; resume re-evaluates nothing;
Ctrl-C and SIGKILL lose no finished trial; stale trials are failed and retried; worker processes
share one study (SQLite, and a real PostgreSQL server) with no duplicate and no loss."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from mico.errors import ConfigError
from mico.search import MiCoEval
from mico.search.study import StudyConfig, TrialRunner, open_study, sqlite_url
from mico.search.tune import parse_budgets, study_settings, tune

MICO = [sys.executable, "-c", "from mico.cli import main; main()"]


def _env() -> dict[str, str]:
    """The environment of a ``mico tune`` child, read when it starts: the autouse fixture's
    private $MICO_CACHE included (read at import, the children shared ~/.cache/mico, whose
    evaluations of earlier runs made a run finish before the test could interrupt it)."""
    return {**os.environ, "OMP_NUM_THREADS": "1"}  # tiny tensors: one thread per process


def _trials(url: str, name: str) -> list[optuna.trial.FrozenTrial]:
    if url.startswith("sqlite:///"):  # Optuna's reader writes its version rows when missing:
        path = url.removeprefix("sqlite:///")  # wait until the run has written them
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            if not db.execute("SELECT count(*) FROM alembic_version").fetchone()[0]:
                raise LookupError("the study is being created")
        finally:
            db.close()
    storage = optuna.storages.RDBStorage(url, skip_table_creation=True)  # a reader only
    return optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)


def _complete(trials: list) -> dict[int, tuple[str, float]]:
    return {t.number: (t.user_attrs["scheme"], t.value) for t in trials
            if t.state.name == "COMPLETE"}  # fmt: skip


def _evaluator(model, split, counter: list | None = None) -> MiCoEval:
    train_loader, test_loader = split.loaders(batch_size=64, seed=0)
    evaluator = MiCoEval(model, 1, train_loader, test_loader, None, data_name="digits")
    if counter is not None:
        real = evaluator.eval_ptq_acc

        def counted(qscheme):
            counter.append(evaluator.scheme_key(qscheme))
            return real(qscheme)

        evaluator.eval_ptq_acc = counted
    return evaluator


def test_resume_continues_the_study_and_reevaluates_nothing(trained_cnn, digits_split, tmp_path):
    config = StudyConfig(sqlite_url(tmp_path / "study.db"), "s")
    budgets = parse_budgets("bops=60%")
    calls: list[str] = []
    lines: list[str] = []
    ev = _evaluator(trained_cnn, digits_split, calls)
    first = tune(ev, budgets, "random", 4, [2, 4, 8], 0, lines.append, study=config)
    assert len(calls) == 4 and len(set(calls)) == 4
    done = _complete(_trials(config.url, "s"))
    assert sorted(s for s, _ in done.values()) == sorted(calls)
    assert [r["trial"] for r in first.trials] == sorted(done)
    assert sum("best feasible" in line for line in lines) == 4  # a progress line per trial
    with pytest.raises(ConfigError, match="pass --resume"):
        tune(_evaluator(trained_cnn, digits_split), budgets, "random", 4, [2, 4, 8], 0,
             print, study=config)  # fmt: skip
    with pytest.raises(ConfigError, match=r"other settings.*budgets"):
        tune(_evaluator(trained_cnn, digits_split), parse_budgets("bops=70%"), "random", 4,
             [2, 4, 8], 0, print, study=config, resume=True)  # fmt: skip
    calls.clear()
    ev = _evaluator(trained_cnn, digits_split, calls)
    more = tune(ev, budgets, "random", 6, [2, 4, 8], 0, print, study=config, resume=True)
    after = _complete(_trials(config.url, "s"))
    assert len(calls) == 2 and len(after) == 6  # the 4 finished ones came from the study
    assert all(after[n] == done[n] for n in done)
    assert more.best_accuracy >= first.best_accuracy
    calls.clear()
    tune(_evaluator(trained_cnn, digits_split, calls), budgets, "random", 6, [2, 4, 8], 0,
         print, study=config, resume=True)  # fmt: skip
    assert calls == []
    with pytest.raises(ConfigError, match="no study 'other'"):
        tune(ev, budgets, "random", 2, [2, 4, 8], 0, print,
             study=StudyConfig(config.url, "other"), resume=True)  # fmt: skip


def test_ctrl_c_fails_only_the_running_trial(trained_cnn, digits_split, tmp_path):
    config = StudyConfig(sqlite_url(tmp_path / "study.db"), "s")
    budgets = parse_budgets("bops=60%")
    ev = _evaluator(trained_cnn, digits_split)
    real, calls = ev.eval_ptq_acc, []

    def interrupted(qscheme):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(qscheme)

    ev.eval_ptq_acc = interrupted
    with pytest.raises(KeyboardInterrupt):
        tune(ev, budgets, "random", 5, [2, 4, 8], 0, print, study=config)
    trials = _trials(config.url, "s")
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE", "FAIL"]
    result = tune(_evaluator(trained_cnn, digits_split), budgets, "random", 5, [2, 4, 8], 0,
                  print, study=config, resume=True)  # fmt: skip
    trials = _trials(config.url, "s")
    assert len(_complete(trials)) == 5 and len(result.trials) == 6  # the failed one is listed
    assert trials[2].user_attrs["scheme"] in {s for s, _ in _complete(trials).values()}


def test_stale_trial_is_failed_and_retried(trained_cnn, digits_split, tmp_path):
    """A RUNNING trial whose heartbeat stopped (its worker died) is failed after the grace
    period and retried by the next worker that needs it."""
    config = StudyConfig(sqlite_url(tmp_path / "study.db"), "s", heartbeat=1, poll=0.05)
    ev = _evaluator(trained_cnn, digits_split)
    limits = {"bops": 1e12}
    study = open_study(config, study_settings(ev, "random", [2, 4, 8], limits, 0), False)
    scheme = [4] * 6
    dead = study.ask()  # what a killed worker leaves behind
    dead.set_user_attr("scheme", ev.scheme_key(scheme))
    dead.set_user_attr("qscheme", scheme)
    study._storage.record_heartbeat(dead._trial_id)
    runner = TrialRunner(study, config, ev, limits, 5, [2, 4, 8], log=lambda _m: None)
    start = time.monotonic()
    value = runner(scheme)
    assert time.monotonic() - start >= 1.5  # waited for the grace period, not evaluated twice
    trials = study.get_trials()
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE"]
    assert trials[1].system_attrs["failed_trial"] == 0 and trials[1].value == value
    assert runner(scheme) == value and len(study.get_trials()) == 2  # now answered at once


def _tune_cmd(out: Path, *extra: str) -> list[str]:
    return [*MICO, "tune", "small_cnn", "--epochs", "0", "--strategy", "random", "--budget",
            "bops=60%", "--no-compile", "--heartbeat", "1", "-o", str(out), *extra]  # fmt: skip


@pytest.mark.slow
def test_sigkill_then_resume_keeps_every_finished_trial(tmp_path):
    out = tmp_path / "run"
    url, name = sqlite_url(out / "study.db"), "run"
    proc = subprocess.Popen(_tune_cmd(out, "--trials", "6"), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=_env())  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if (out / "study.db").exists():
                try:
                    if len(_complete(_trials(url, name))) >= 2:
                        break
                except Exception:  # the study is being created
                    pass
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    before = _trials(url, name)
    finished = _complete(before)
    running = [t.number for t in before if t.state.name == "RUNNING"]
    labelled = [t.number for t in before if t.state.name == "RUNNING" and "scheme" in t.user_attrs]
    assert len(finished) >= 2
    resumed = subprocess.run(_tune_cmd(out, "--trials", "6", "--resume"), capture_output=True,
                             text=True, timeout=300, env=_env())  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    after = _trials(url, name)
    done = _complete(after)
    assert all(done[n] == finished[n] for n in finished)  # every finished trial kept as it was
    assert len(done) == 6 and len({s for s, _ in done.values()}) == 6
    for number in running:  # the trial killed mid-run: failed, then retried (once it had a
        assert after[number].state.name == "FAIL"  # scheme: it may die between ask and label)
    for number in labelled:
        assert any(t.system_attrs.get("failed_trial") == number for t in after
                   if t.state.name == "COMPLETE")  # fmt: skip
    assert (out / "best_plan.yaml").is_file()


def test_ctrl_c_on_the_command_line_keeps_the_study(tmp_path):
    out = tmp_path / "run"
    url, name = sqlite_url(out / "study.db"), "run"
    proc = subprocess.Popen(_tune_cmd(out, "--trials", "6"), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=_env())  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if len(_complete(_trials(url, name))) >= 1:
                    break
            except Exception:  # not created yet
                pass
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "keeps every finished trial" in err and "--resume" in err
    trials = _trials(url, name)
    assert len(_complete(trials)) >= 1
    assert all(t.state.name in ("COMPLETE", "FAIL") for t in trials)  # nothing left running


def _workers_of(pid: int) -> list[int]:
    """The spawned worker processes of ``pid`` (not multiprocessing's resource tracker)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and b"spawn_main" in cmdline and b"resource_tracker" not in cmdline:
            found.append(int(entry.name))
    return found


def _check_workers_study(out: Path, url: str, name: str, trials: int) -> list:
    trials_ = _trials(url, name)
    done = _complete(trials_)
    assert len(done) == trials  # no loss ...
    assert len({s for s, _ in done.values()}) == trials  # ... and no scheme evaluated twice
    assert {t.user_attrs["worker"] for t in trials_ if t.state.name == "COMPLETE"} <= {1, 2}
    retried = {t.system_attrs.get("failed_trial") for t in trials_ if t.state.name == "COMPLETE"}
    for t in trials_:  # anything else lost a claim race, was killed and then retried, or was
        # killed between asking and labelling (nothing evaluated; the run may finish before
        # the retry Optuna queues for it is asked for)
        unlabelled = t.state.name == "FAIL" and "scheme" not in t.user_attrs
        assert (t.state.name == "COMPLETE" or "mico_void" in t.user_attrs
                or t.number in retried or unlabelled)  # fmt: skip
    assert len((out / "trials.csv").read_text().splitlines()) == 1 + len(
        [t for t in trials_ if "mico_void" not in t.user_attrs]
    )
    return trials_


def _two_workers(out: Path, url: str, name: str, *extra: str) -> None:
    run = subprocess.run(_tune_cmd(out, "--trials", "5", "--workers", "2", *extra),
                         capture_output=True, text=True, timeout=600, env=_env())  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    _check_workers_study(out, url, name, 5)


@pytest.mark.slow
def test_two_workers_share_one_sqlite_study_one_killed(tmp_path):
    """Two workers on one SQLite study; one is killed (SIGKILL) once a trial has finished: the
    other fails its running trial after the grace period, retries it and finishes the run."""
    out = tmp_path / "run"
    url, name = sqlite_url(out / "study.db"), "run"
    proc = subprocess.Popen(_tune_cmd(out, "--trials", "5", "--workers", "2"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env())  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        victim = None
        while time.monotonic() < deadline and proc.poll() is None and victim is None:
            try:
                if len(_complete(_trials(url, name))) >= 1:
                    victim = _workers_of(proc.pid)[0]
            except Exception:  # the study is not there yet
                pass
            time.sleep(0.05)
        assert victim is not None, "no worker was seen finishing a trial"
        os.kill(victim, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr[-3000:]
    assert "exit -9" in stdout and "finished all 5 trials" in stdout
    _check_workers_study(out, url, name, 5)


@pytest.mark.slow
def test_two_workers_share_one_postgresql_study(postgres_url, tmp_path):
    out = tmp_path / "pgrun"
    _two_workers(out, postgres_url, "pg-study", "--storage", postgres_url, "--study", "pg-study")
    assert not (out / "study.db").exists()


def test_a_claim_waits_for_a_lower_unlabelled_trial(trained_cnn, digits_split, tmp_path):
    """A trial asked for but not labelled yet may be about to claim the same scheme: the next
    claim waits for its label; one never labelled (its worker died) is failed after the grace
    period, and the claim goes on."""
    config = StudyConfig(sqlite_url(tmp_path / "study.db"), "s", heartbeat=1, poll=0.05)
    ev = _evaluator(trained_cnn, digits_split)
    limits = {"bops": 1e12}
    study = open_study(config, study_settings(ev, "random", [2, 4, 8], limits, 0), False)
    study.ask()  # a worker killed between asking and labelling
    runner = TrialRunner(study, config, ev, limits, 5, [2, 4, 8], log=lambda _m: None)
    start = time.monotonic()
    runner([8] * 6)
    assert time.monotonic() - start >= 1.5
    assert [t.state.name for t in study.get_trials()] == ["FAIL", "COMPLETE"]


def test_nlp_gets_the_evaluations_it_needs(trained_cnn, digits_split, tmp_path):
    lines: list[str] = []
    config = StudyConfig(sqlite_url(tmp_path / "study.db"), "s")
    result = tune(_evaluator(trained_cnn, digits_split), parse_budgets("bops=50%"), "nlp", 2,
                  [2, 4, 8], 0, lines.append, study=config)  # fmt: skip
    assert any("--trials 2 raised to 8" in line for line in lines)
    done = _complete(_trials(config.url, "s"))  # the reference, 6 probes, the answer (if new)
    assert len(done) in (7, 8) and len(result.trials) == len(done)
    assert result.costs["bops"] <= result.budgets["bops"]


def test_a_bad_storage_is_named_without_its_password():
    with pytest.raises(ConfigError, match=r"u:\*\*\*@.*give a SQLAlchemy URL") as info:
        StudyConfig("postgresql+psycopg://u:secret@/db?host=/nonexistent", "x").storage()
    assert "secret" not in str(info.value)


def test_opening_a_storage_another_process_is_creating_retries(tmp_path, monkeypatch):
    """Two processes creating one study storage at once collide on Optuna's version rows (an
    IntegrityError for the later one): opening retries instead of failing the run."""
    real = optuna.storages.RDBStorage
    calls: list[int] = []

    class IntegrityError(Exception):  # what SQLAlchemy raises, by name
        pass

    def racing(*args, **kwargs):
        calls.append(1)
        if len(calls) <= 2:
            raise IntegrityError("UNIQUE constraint failed: alembic_version.version_num")
        return real(*args, **kwargs)

    monkeypatch.setattr(optuna.storages, "RDBStorage", racing)
    monkeypatch.setattr(time, "sleep", lambda _s: None)
    storage = StudyConfig(sqlite_url(tmp_path / "study.db"), "s").storage()
    assert isinstance(storage, real) and len(calls) == 3

    def broken(*args, **kwargs):
        raise ValueError("no such driver")

    monkeypatch.setattr(optuna.storages, "RDBStorage", broken)
    with pytest.raises(ConfigError, match=r"cannot open the study storage .*no such driver"):
        StudyConfig(sqlite_url(tmp_path / "other.db"), "s").storage()
