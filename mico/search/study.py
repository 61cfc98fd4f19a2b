"""One persistent Optuna study per ``mico tune`` run: every evaluation of every strategy is a trial.

The study lives in a database Optuna's :class:`~optuna.storages.RDBStorage` opens: by default a
SQLite file in the run directory (``study.db``), or any SQLAlchemy URL (``--storage
postgresql+psycopg://...``). A trial is committed when it finishes, so Ctrl-C, a crash or a
killed worker loses no finished trial; ``--resume`` runs the strategy again and every scheme the
study (or the evaluation cache) already holds is answered without evaluating it.

Protocol of one evaluation (:class:`TrialRunner`), safe with several worker processes:

1. a COMPLETE trial of the scheme answers at once; a RUNNING one (another worker) is waited for;
2. otherwise the worker asks for a trial and labels it with the scheme (``user_attrs``); a
   WAITING trial (the retry of a stale one) comes first and is evaluated as labelled;
3. the claim holds when no lower-numbered live trial has the same scheme and fewer than
   ``max_trials`` live trials precede it (a lower trial not labelled yet is waited for); a
   losing claim is failed (``mico_void``) and the worker starts over;
4. while evaluating, a thread records Optuna heartbeats; a trial whose worker died is failed
   after the grace period (:func:`optuna.storages.fail_stale_trials`, run by every worker while
   it waits and before it asks) and retried (:class:`~optuna.storages.RetryFailedTrialCallback`).
"""

from __future__ import annotations

import contextlib
import json
import math
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mico.errors import ConfigError, MicoError

Log = Callable[[str], None]
STUDY_FILE = "study.db"
_LIVE = ("RUNNING", "COMPLETE")


class BudgetReached(Exception):
    """The study holds ``max_trials`` finished trials: the strategy stops here."""


_STOP = threading.Event()  # Ctrl-C was pressed
_DEFER = threading.Event()  # the study is being written: Ctrl-C waits for the next safe point


@contextlib.contextmanager
def interrupt_guard() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt as usual and is also remembered: Python drops one that
    lands in a garbage-collection callback (SQLAlchemy has some), so the runner raises it again
    at its next safe point (:func:`check_interrupt`), after the running trial is recorded."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous in (signal.SIG_IGN, None):
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        _STOP.set()
        if not _DEFER.is_set():
            raise KeyboardInterrupt

    _STOP.clear()
    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        _STOP.clear()


def check_interrupt() -> None:
    """Raise the KeyboardInterrupt of a Ctrl-C that was deferred or swallowed on its way."""
    if _STOP.is_set():
        raise KeyboardInterrupt


@contextlib.contextmanager
def _deferred() -> Iterator[None]:
    """Study writes: a Ctrl-C meanwhile is raised after the block, never half-way through."""
    _DEFER.set()
    try:
        yield
    finally:
        _DEFER.clear()


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    """An evaluation inside :func:`_deferred`: Ctrl-C interrupts it at once."""
    _DEFER.clear()
    try:
        check_interrupt()
        yield
    finally:
        _DEFER.set()


def sqlite_url(path: str | Path) -> str:
    return f"sqlite:///{Path(path).resolve()}"


def _optuna() -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", message=".*[Hh]eartbeat.*")
    return optuna


@dataclass
class StudyConfig:
    """Where the study lives and how its workers share it."""

    url: str
    name: str
    heartbeat: int = 10  # seconds between heartbeats of a running trial
    grace: int | None = None  # seconds without a heartbeat before a trial is stale (2x beat)
    max_retry: int = 3  # retries of a trial whose worker died
    poll: float = 0.2  # seconds between looks at another worker's running trial

    @property
    def grace_seconds(self) -> int:
        """Seconds without a heartbeat before a running trial is stale (at least a beat + 1)."""
        return max(int(self.grace or 2 * self.heartbeat), int(self.heartbeat) + 1)

    def storage(self) -> Any:
        optuna = _optuna()
        kwargs: dict[str, Any] = {}
        if self.url.startswith("sqlite"):
            kwargs = {"connect_args": {"timeout": 60}}
        error = ""
        for attempt in range(3):  # another process creating the tables at the same moment
            try:
                return optuna.storages.RDBStorage(
                    self.url,
                    engine_kwargs=kwargs,
                    heartbeat_interval=max(1, int(self.heartbeat)),
                    grace_period=self.grace_seconds,
                    heartbeat_stale_trial_callback=optuna.storages.RetryFailedTrialCallback(
                        max_retry=self.max_retry
                    ),
                )
            except Exception as exc:  # SQLAlchemy: bad URL, missing driver, server down
                error = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}"
                if "already exists" not in str(exc):
                    break
                time.sleep(0.2 * (attempt + 1))
        raise ConfigError(
            f"cannot open the study storage {_safe_url(self.url)}: {error}; give a SQLAlchemy "
            "URL such as sqlite:///run/study.db or postgresql+psycopg://user@host/db"
        )


def _safe_url(url: str) -> str:
    """``url`` without a password."""
    import re

    return re.sub(r"(//[^:/@]+):[^@]*@", r"\1:***@", url)


def open_study(config: StudyConfig, settings: dict[str, Any], resume: bool) -> Any:
    """Create the study, or with ``resume`` load it; its settings must match the run's."""
    optuna = _optuna()
    storage = config.storage()
    names = {s.study_name for s in storage.get_all_studies()}
    if config.name in names:
        study = optuna.load_study(study_name=config.name, storage=storage)
        old = study.user_attrs.get("mico_tune")
        if not resume and study.trials:
            raise ConfigError(
                f"study '{config.name}' in {_safe_url(config.url)} already holds "
                f"{len(study.trials)} trial(s); pass --resume to continue it, or use another "
                "--out or --storage"
            )
        if old is not None and old != settings:
            diff = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k))
            raise ConfigError(
                f"study '{config.name}' was run with other settings ({', '.join(diff)}: "
                f"{', '.join(f'{old.get(k)!r} now {settings.get(k)!r}' for k in diff)}); "
                "resume it with the same model, checkpoint, data, strategy, bits and budgets"
            )
    else:
        if resume:
            raise ConfigError(
                f"--resume: there is no study '{config.name}' in {_safe_url(config.url)} to "
                "continue; run without --resume to start it"
            )
        try:
            study = optuna.create_study(study_name=config.name, storage=storage,
                                        direction="maximize", load_if_exists=True)  # fmt: skip
        except Exception as exc:
            raise ConfigError(f"cannot create study '{config.name}': {exc}") from None
    if "mico_tune" not in study.user_attrs:
        study.set_user_attr("mico_tune", settings)
    return study


def load(config: StudyConfig) -> Any:
    """The study of ``config`` (for workers and for reading results)."""
    optuna = _optuna()
    return optuna.load_study(study_name=config.name, storage=config.storage())


@contextlib.contextmanager
def heartbeat(storage: Any, trial_id: int, interval: float) -> Iterator[None]:
    """Record heartbeats of ``trial_id`` every ``interval`` seconds while the block runs."""
    storage.record_heartbeat(trial_id)
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(interval):
            with contextlib.suppress(Exception):  # a busy database: the next beat will do
                storage.record_heartbeat(trial_id)

    thread = threading.Thread(target=beat, name=f"mico-heartbeat-{trial_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _state(trial: Any) -> str:
    return trial.state.name


@dataclass
class TrialRunner:
    """Runs the objective evaluations of one worker as trials of the shared study."""

    study: Any
    config: StudyConfig
    evaluator: Any
    limits: dict[str, float]
    max_trials: int
    qtypes: list[Any]
    worker: int = 0
    log: Log = print
    new_trials: int = 0
    force: bool = False  # evaluate even when the budget is spent (the fallback scheme)
    _storage: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._storage = self.study._storage

    # ----------------------------------------------------------------- study reads
    def _trials(self, states: tuple[str, ...] = _LIVE) -> list[Any]:
        return [t for t in self.study.get_trials(deepcopy=False) if _state(t) in states]

    def _complete_value(self, key: str) -> float | None:
        for t in self._trials(("COMPLETE",)):
            if t.user_attrs.get("scheme") == key:
                return float(t.value)
        return None

    def _fail_stale(self) -> None:
        optuna = _optuna()
        with contextlib.suppress(Exception):
            optuna.storages.fail_stale_trials(self.study)

    # ----------------------------------------------------------------- evaluation
    def __call__(self, qscheme: list[Any]) -> float:
        key = self.evaluator.scheme_key(qscheme)
        while True:
            check_interrupt()
            trials = self._trials()
            done = [t for t in trials if _state(t) == "COMPLETE"]
            same = [t for t in trials if t.user_attrs.get("scheme") == key]
            if any(_state(t) == "COMPLETE" for t in same):
                return float(next(t.value for t in same if _state(t) == "COMPLETE"))
            if same or (not self.force and len(trials) >= self.max_trials):
                if not same and len(done) >= self.max_trials:
                    raise BudgetReached
                self._fail_stale()  # another worker's trial: wait (or fail it when it died)
                time.sleep(self.config.poll)
                continue
            self._fail_stale()
            value = self._claim_and_run(key, qscheme)
            if value is not None:
                return value

    def _claim_and_run(self, key: str, qscheme: list[Any]) -> float | None:
        """Ask for a trial and run it; the value when it was ``key``'s, else None (retry).

        Only the evaluation itself is interruptible: a Ctrl-C while the study is written waits
        until the trial is recorded (finished, or failed if its evaluation was cut short)."""
        fail = _optuna().trial.TrialState.FAIL
        with _deferred():
            trial = self.study.ask()
            try:
                with heartbeat(self._storage, trial._trial_id, self.config.heartbeat):
                    label = trial.user_attrs.get("scheme")
                    if label is None:  # a fresh trial: ours
                        label, scheme = key, list(qscheme)
                        self._label(trial, key, scheme)
                    else:  # the retry of a trial whose worker died
                        scheme = list(trial.user_attrs.get("qscheme") or qscheme)
                    void = self._void_reason(trial.number, label)
                    if void is not None:
                        trial.set_user_attr("mico_void", void)
                        self.study.tell(trial, state=fail)
                        return None
                    with _interruptible():
                        value = self.evaluator.objective_value(scheme)
                        costs = {c: float(self.evaluator_cost(scheme, c)) for c in self.limits}
                    feasible = all(costs[c] <= lim for c, lim in self.limits.items())
                    trial.set_user_attr("costs", costs)
                    trial.set_user_attr("feasible", feasible)
                    trial.set_user_attr("cached", bool(self.evaluator.last_from_cache))
                    trial.set_user_attr("worker", self.worker)
                    self.study.tell(trial, value)
            except BaseException:  # Ctrl-C or an error: the trial failed, nothing half-written
                with contextlib.suppress(Exception):
                    self.study.tell(trial, state=fail, skip_if_finished=True)
                raise
        self.new_trials += 1
        self._progress(trial.number, value, costs, feasible)
        check_interrupt()  # the trial is recorded: now stop if Ctrl-C was pressed
        return value if label == key else None

    def evaluator_cost(self, scheme: list[Any], cost: str) -> float:
        if cost == "latency":
            return float(self.evaluator.eval_latency(scheme))
        return float(getattr(self.evaluator, f"eval_{cost}")(scheme))

    def _label(self, trial: Any, key: str, scheme: list[Any]) -> None:
        trial.set_user_attr("scheme", key)
        trial.set_user_attr("qscheme", _plain(scheme))
        optuna = _optuna()
        names = [f"{n}.w" for n in self.evaluator.layer_names]
        names += [f"{n}.a" for n in self.evaluator.layer_names]
        choices = tuple(_plain(self.qtypes))
        dist = optuna.distributions.CategoricalDistribution(choices)
        for name, bits in zip(names, _plain(scheme), strict=False):
            if isinstance(bits, list) or bits not in choices:
                continue  # a nested or out-of-choice scheme: the label says it all
            self._storage.set_trial_param(trial._trial_id, name, dist.to_internal_repr(bits), dist)

    def _void_reason(self, number: int, key: str) -> str | None:
        """Why trial ``number`` must not run: a lower live trial holds its scheme, or the
        trials before it fill the budget. A lower trial not yet labelled (another worker between
        asking and labelling) is waited for, so two claims of one scheme always see each other;
        one left unlabelled past the grace period (its worker died there) is failed."""
        while True:
            before = [t for t in self._trials() if t.number < number]
            unlabelled = [t for t in before if "scheme" not in t.user_attrs]
            if not unlabelled:
                break
            self._fail_unlabelled(unlabelled)
            time.sleep(self.config.poll / 4)
        owner = [t.number for t in before if t.user_attrs.get("scheme") == key]
        if owner:
            return f"duplicate of trial {owner[0]}"
        if not self.force and len(before) >= self.max_trials:
            return f"{self.max_trials} trials already claimed"
        return None

    def _fail_unlabelled(self, trials: list[Any]) -> None:
        """Fail trials asked for but never labelled for longer than the grace period."""
        import datetime

        grace = self.config.grace_seconds
        now = datetime.datetime.now()
        for t in trials:
            if t.datetime_start is not None and (now - t.datetime_start).total_seconds() > grace:
                with contextlib.suppress(Exception):  # another worker failed it first
                    self._storage.set_trial_state_values(
                        t._trial_id, state=_optuna().trial.TrialState.FAIL
                    )
        self._fail_stale()

    def _progress(self, number: int, value: float, costs: dict[str, float], ok: bool) -> None:
        best = best_feasible(self.study)
        done = len(self._trials(("COMPLETE",)))
        shown = ", ".join(f"{c} {v:g}" for c, v in costs.items())
        tail = (
            f"best feasible {best.value:.4f} (trial {best.number})"
            if best is not None
            else "no feasible trial yet"
        )
        cached = " cached" if self.evaluator.last_from_cache else ""
        worker = f"[w{self.worker}] " if self.worker else ""
        self.log(
            f"{worker}trial {number} ({done}/{self.max_trials}): {self.evaluator.objective} "
            f"{value:.4f}{cached}, {shown}, {'feasible' if ok else 'over budget'}; {tail}"
        )


def best_feasible(study: Any) -> Any:
    """The most accurate COMPLETE trial within every budget (lowest number on ties), or None."""
    best = None
    for t in study.get_trials(deepcopy=False):
        if _state(t) != "COMPLETE" or not t.user_attrs.get("feasible"):
            continue
        if best is None or t.value > best.value:
            best = t
    return best


def trial_rows(study: Any, costs: list[str]) -> list[dict[str, Any]]:
    """One row per finished trial (COMPLETE, or FAIL but not a voided claim), in order."""
    rows = []
    for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        state = _state(t)
        if state not in ("COMPLETE", "FAIL") or "mico_void" in t.user_attrs:
            continue
        row: dict[str, Any] = {
            "trial": t.number,
            "state": state,
            "scheme": t.user_attrs.get("scheme", ""),
            "objective": t.value if state == "COMPLETE" else math.nan,
        }
        cost_values = t.user_attrs.get("costs") or {}
        row.update({c: cost_values.get(c, math.nan) for c in costs})
        row["feasible"] = bool(t.user_attrs.get("feasible", False))
        row["cached"] = bool(t.user_attrs.get("cached", False))
        row["worker"] = t.user_attrs.get("worker", 0)
        row["retry_of"] = t.system_attrs.get("failed_trial", "")
        rows.append(row)
    return rows


@dataclass
class WorkerSpec:
    """Everything a worker process needs to rebuild the evaluator and join the study."""

    study: StudyConfig
    weights: str  # fp32 checkpoint of the run (mico checkpoint or a state dict)
    model: str | None  # zoo name or file.py:Class (for state-dict checkpoints)
    dataset: str
    seed: int
    strategy: str
    qtypes: list[Any]
    limits: dict[str, float]
    primary: str
    trials: int
    cache: str | None
    evaluator_kwargs: dict[str, Any] = field(default_factory=dict)
    quiet: bool = False


def run_worker(
    evaluator: Any,
    study: Any,
    config: StudyConfig,
    strategy: str,
    qtypes: list[Any],
    limits: dict[str, float],
    primary: str,
    trials: int,
    seed: int,
    worker: int = 0,
    log: Log = print,
) -> TrialRunner:
    """Run ``strategy`` as one worker of the study until it holds ``trials`` finished trials
    or a round of the strategy finds nothing new (deterministic strategies end after one)."""

    runner = TrialRunner(study, config, evaluator, limits, trials, qtypes, worker, log)
    evaluator.trial_runner = runner
    with interrupt_guard():
        _run_rounds(runner, evaluator, study, strategy, qtypes, limits, primary, trials, seed,
                    worker, log)  # fmt: skip
        check_interrupt()
    return runner


def _run_rounds(
    runner: TrialRunner,
    evaluator: Any,
    study: Any,
    strategy: str,
    qtypes: list[Any],
    limits: dict[str, float],
    primary: str,
    trials: int,
    seed: int,
    worker: int,
    log: Log,
) -> None:
    from mico.search.strategies import STRATEGIES

    try:
        for round_ in range(1000):
            before = runner.new_trials
            searcher = STRATEGIES[strategy](
                evaluator, qtypes=qtypes, seed=seed + 7919 * worker + 104729 * round_
            )
            try:
                searcher.search(trials, evaluator.objective, primary, limits[primary])
            except BudgetReached:
                log(f"{trials} trials finished: the budget of evaluations (--trials) is spent")
                break
            done = sum(1 for t in study.get_trials(deepcopy=False) if _state(t) == "COMPLETE")
            if done >= trials or runner.new_trials == before:
                break
    finally:
        evaluator.trial_runner = None


def _worker_main(spec: WorkerSpec, worker: int) -> None:
    """Entry of a worker process (spawned): rebuild the evaluator, then :func:`run_worker`."""
    import torch

    from mico.data import load_dataset
    from mico.search import MiCoEval
    from mico.search.cache import EvalCache

    torch.set_num_threads(1)
    net = _load_net(spec.weights, spec.model)
    split = load_dataset(spec.dataset, seed=spec.seed)
    train_loader, test_loader = split.loaders(64, seed=spec.seed)
    cache = EvalCache(spec.cache) if spec.cache else None
    evaluator = MiCoEval(net, spec.evaluator_kwargs.pop("epochs", 1), train_loader, test_loader,
                         spec.weights, cache=cache, **spec.evaluator_kwargs)  # fmt: skip
    log: Log = (lambda _m: None) if spec.quiet else (lambda m: print(m, flush=True))
    study = load(spec.study)
    settings = study.user_attrs.get("mico_tune", {})
    mine = evaluator.key_fields()
    if any(settings.get(k) != v for k, v in mine.items()):
        raise ConfigError(
            f"worker {worker} rebuilt a different evaluator than the study's ({mine} vs "
            f"{ {k: settings.get(k) for k in mine} }); the model or data are not reproducible"
        )
    run_worker(evaluator, study, spec.study, spec.strategy, spec.qtypes, spec.limits,
               spec.primary, spec.trials, spec.seed, worker, log)  # fmt: skip


def _load_net(weights: str, model: str | None) -> Any:
    from mico.models.resolve import is_model_spec
    from mico.train.checkpoint import load_checkpoint, load_file_model_checkpoint

    if model is not None and is_model_spec(model) and not model.endswith(".pt2"):
        # a model from a file: its checkpoint records the arguments and shape it was built with
        return load_file_model_checkpoint(weights, model)
    try:
        return load_checkpoint(weights)
    except MicoError:
        if model is None:
            raise
    import torch

    from mico.models.resolve import resolve_model

    net, _ = resolve_model(model)
    net.load_state_dict(torch.load(weights, weights_only=True))
    return net


def run_workers(spec: WorkerSpec, workers: int, log: Log = print) -> None:
    """Run ``workers`` worker processes on the study and wait for them all.

    A worker that dies (killed, crashed) leaves its running trial to the others, which fail it
    after the grace period and retry it. When the study still finished ``spec.trials`` trials
    that is logged; otherwise it is an error naming the workers (the study keeps every
    finished trial for ``--resume``)."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_worker_main, args=(spec, k + 1), name=f"mico-tune-worker-{k + 1}")
             for k in range(workers)]  # fmt: skip
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join()
    except BaseException:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join()
        raise
    bad = [(p.name, p.exitcode) for p in procs if p.exitcode != 0]
    if not bad:
        return
    done = sum(1 for t in load(spec.study).get_trials(deepcopy=False) if _state(t) == "COMPLETE")
    shown = ", ".join(f"{n} (exit {c})" for n, c in bad)
    if done >= spec.trials and len(bad) < len(procs):
        log(f"{shown} stopped early; the other workers finished all {done} trials")
        return
    raise ConfigError(
        f"worker(s) failed: {shown}; the study keeps every finished trial: rerun with --resume"
    )


def _plain(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    number = float(value)
    return int(number) if number.is_integer() else number


def settings_text(settings: dict[str, Any]) -> str:
    return json.dumps(settings, sort_keys=True)
