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

Reading the study scales with what changed (:class:`StudyIndex`): mico reads only the columns it
needs (state, value and its own labels; not the widths stored as parameters) of the trials that
are new or were unfinished at the last look, in one SQL statement, and answers a scheme the
study holds from a dictionary. Optuna's own read (every trial with its parameters, as objects)
is bypassed: it took 9 s to resume a study of 5000 trials, and each answer then scanned them all.
Writes still go through Optuna.
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
        for attempt in range(5):  # another process creating the tables at the same moment
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
                racing = "already exists" in str(exc) or type(exc).__name__ == "IntegrityError"
                if not racing:  # (IntegrityError: both wrote Optuna's version rows at once)
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
        study = _uncached(optuna.load_study(study_name=config.name, storage=storage))
        old = study.user_attrs.get("mico_tune")
        held = len(StudyIndex(study).refresh().rows) if not resume else 0
        if held:
            raise ConfigError(
                f"study '{config.name}' in {_safe_url(config.url)} already holds "
                f"{held} trial(s); pass --resume to continue it, or use another "
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
            created = optuna.create_study(study_name=config.name, storage=storage,
                                          direction="maximize", load_if_exists=True)  # fmt: skip
            study = _uncached(created)
        except Exception as exc:
            raise ConfigError(f"cannot create study '{config.name}': {exc}") from None
    if "mico_tune" not in study.user_attrs:
        study.set_user_attr("mico_tune", settings)
    return study


def load(config: StudyConfig) -> Any:
    """The study of ``config`` (for workers and for reading results)."""
    optuna = _optuna()
    return _uncached(optuna.load_study(study_name=config.name, storage=config.storage()))


def _uncached(study: Any) -> Any:
    """``study`` talking to its database directly: Optuna wraps an RDB storage in a cache whose
    first read loads every trial with its parameters (``ask`` does it, to find waiting trials);
    mico reads through :class:`StudyIndex` instead, and the database answers Optuna's own
    queries by state."""
    backend = getattr(study._storage, "_backend", None)
    if backend is not None and hasattr(backend, "engine"):
        study._storage = backend
    return study


_USER_KEYS = ("scheme", "qscheme", "costs", "feasible", "cached", "worker", "mico_void")
_SYSTEM_KEYS = ("failed_trial",)


@dataclass
class TrialRow:
    """What mico reads of a trial (the attributes of Optuna's FrozenTrial it uses)."""

    _trial_id: int
    number: int
    state: Any  # optuna.trial.TrialState
    value: float | None
    user_attrs: dict[str, Any]
    system_attrs: dict[str, Any]
    datetime_start: Any = None

    @classmethod
    def of(cls, trial: Any) -> TrialRow:
        """The row of an Optuna FrozenTrial."""
        return cls(trial._trial_id, trial.number, trial.state, trial.value,
                   {k: v for k, v in trial.user_attrs.items() if k in _USER_KEYS},
                   {k: v for k, v in trial.system_attrs.items() if k in _SYSTEM_KEYS},
                   trial.datetime_start)  # fmt: skip


class _SqlReader:
    """Reads trial rows of one study from Optuna's RDB tables (read only), one statement."""

    # indexed lookups only: trials by primary key, values and attributes by (trial_id, key)
    QUERY = """
        SELECT t.trial_id, t.number, t.state, t.datetime_start, v.value, v.value_type,
               (SELECT s.value_json FROM trial_system_attributes s
                WHERE s.trial_id = t.trial_id AND s."key" = 'failed_trial') AS failed,
               u."key", u.value_json
        FROM trials t
        LEFT JOIN trial_values v ON v.trial_id = t.trial_id AND v.objective = 0
        LEFT JOIN trial_user_attributes u ON u.trial_id = t.trial_id AND u."key" IN :user_keys
        WHERE t.study_id = :study_id AND t.trial_id IN (
            SELECT trial_id FROM trials WHERE trial_id > :after
            UNION ALL SELECT trial_id FROM trials WHERE trial_id IN :unfinished)
    """

    def __init__(self, engine: Any, study_id: int) -> None:
        from sqlalchemy import bindparam, text

        self.engine, self.study_id = engine, study_id
        self.statement = text(self.QUERY).bindparams(
            bindparam("user_keys", expanding=True),
            bindparam("unfinished", expanding=True),
        )  # datetime_start stays as stored (text in SQLite): parsed when used

    @classmethod
    def of(cls, study: Any) -> _SqlReader | None:
        backend = getattr(study._storage, "_backend", study._storage)
        engine = getattr(backend, "engine", None)
        return None if engine is None else cls(engine, study._study_id)

    def read(self, after: int, unfinished: set[int]) -> list[TrialRow]:
        """Trials with an id above ``after`` or in ``unfinished``."""
        states = _optuna().trial.TrialState
        params = {"user_keys": list(_USER_KEYS), "study_id": self.study_id, "after": after,
                  "unfinished": sorted(unfinished) or [-1]}  # fmt: skip
        rows: dict[int, TrialRow] = {}
        with self.engine.connect() as connection:
            result = connection.execute(self.statement, params).all()
        for trial_id, number, state, start, value, kind, failed, key, value_json in result:
            row = rows.get(trial_id)
            if row is None:
                if kind == "INF_POS":
                    value = math.inf
                elif kind == "INF_NEG":
                    value = -math.inf
                system = {} if failed is None else {"failed_trial": json.loads(failed)}
                row = rows[trial_id] = TrialRow(trial_id, number, states[state], value, {},
                                                system, start)  # fmt: skip
            if key is not None:
                row.user_attrs[key] = json.loads(value_json)
        return list(rows.values())


class StudyIndex:
    """The trials of a study as mico needs them, read incrementally.

    :meth:`refresh` reads the trials that are new or were unfinished at the last read (a
    finished trial never changes), as Optuna's cache does, but only the state, the value and
    mico's labels, in one SQL statement; ``complete`` maps each scheme to its COMPLETE trial.
    A storage that is not a database is read through Optuna, whole, at each refresh."""

    def __init__(self, study: Any) -> None:
        self.study = study
        self.rows: dict[int, TrialRow] = {}  # by trial id
        self.complete: dict[str, TrialRow] = {}  # scheme -> its lowest-numbered COMPLETE trial
        self.counts: dict[str, int] = {}  # trials per state name
        self._after = -1  # highest id of a finished trial read
        self._unfinished: set[int] = set()
        self._sql = _SqlReader.of(study)

    def refresh(self) -> StudyIndex:
        """Read what changed since the last refresh; returns self."""
        fresh: list[TrialRow] | None = None
        if self._sql is not None:
            try:
                fresh = self._sql.read(self._after, self._unfinished)
            except Exception:  # an unknown schema: read through Optuna from now on
                self._sql = None
        if fresh is None:
            fresh = [TrialRow.of(t) for t in self.study.get_trials(deepcopy=False)]
        for row in fresh:
            self._add(row)
        return self

    def _add(self, row: TrialRow) -> None:
        old = self.rows.get(row._trial_id)
        if old is not None:
            self.counts[_state(old)] -= 1
        self.rows[row._trial_id] = row
        self.counts[_state(row)] = self.counts.get(_state(row), 0) + 1
        if row.state.is_finished():
            self._after = max(self._after, row._trial_id)
            self._unfinished.discard(row._trial_id)
        else:
            self._unfinished.add(row._trial_id)
        key = row.user_attrs.get("scheme")
        if _state(row) == "COMPLETE" and key is not None:
            held = self.complete.get(key)
            if held is None or row.number < held.number:
                self.complete[key] = row

    def count(self, state: str) -> int:
        """Trials in ``state`` (a TrialState name) at the last refresh."""
        return self.counts.get(state, 0)

    def trials(self, states: tuple[str, ...] | None = None) -> list[TrialRow]:
        """Trials in ``states`` (all by default), by number."""
        rows = [r for r in self.rows.values() if states is None or _state(r) in states]
        return sorted(rows, key=lambda r: r.number)

    def best_feasible(self) -> TrialRow | None:
        """The most accurate COMPLETE trial within every budget (lowest number on ties)."""
        best = None
        for t in self.trials(("COMPLETE",)):
            if t.user_attrs.get("feasible") and (best is None or t.value > best.value):
                best = t
        return best


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
    index: StudyIndex = field(default=None, repr=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        self._storage = self.study._storage
        self.index = StudyIndex(self.study)

    # ----------------------------------------------------------------- study reads
    def _trials(self, states: tuple[str, ...] = _LIVE) -> list[Any]:
        return self.index.refresh().trials(states)

    def _complete_value(self, key: str) -> float | None:
        row = self.index.refresh().complete.get(key)
        return None if row is None else float(row.value)

    def _fail_stale(self) -> None:
        optuna = _optuna()
        with contextlib.suppress(Exception):
            optuna.storages.fail_stale_trials(self.study)

    # ----------------------------------------------------------------- evaluation
    def __call__(self, qscheme: list[Any]) -> float:
        key = self.evaluator.scheme_key(qscheme)
        while True:
            check_interrupt()
            known = self._complete_value(key)  # a scheme the study holds: answered at once
            if known is not None:
                return known
            live = self.index.trials(_LIVE)
            same = [t for t in live if t.user_attrs.get("scheme") == key]  # running elsewhere
            if same or (not self.force and len(live) >= self.max_trials):
                if not same and self.index.count("COMPLETE") >= self.max_trials:
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
            start = _as_datetime(t.datetime_start)
            if start is not None and (now - start).total_seconds() > grace:
                with contextlib.suppress(Exception):  # another worker failed it first
                    self._storage.set_trial_state_values(
                        t._trial_id, state=_optuna().trial.TrialState.FAIL
                    )
        self._fail_stale()

    def _progress(self, number: int, value: float, costs: dict[str, float], ok: bool) -> None:
        best = self.index.refresh().best_feasible()
        done = self.index.count("COMPLETE")
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


def best_feasible(study: Any, index: StudyIndex | None = None) -> TrialRow | None:
    """The most accurate COMPLETE trial within every budget (lowest number on ties), or None
    (read through ``index`` when given, else a fresh one)."""
    return (index or StudyIndex(study)).refresh().best_feasible()


def trial_rows(
    study: Any, costs: list[str], index: StudyIndex | None = None
) -> list[dict[str, Any]]:
    """One row per finished trial (COMPLETE, or FAIL but not a voided claim), in order."""
    rows = []
    for t in (index or StudyIndex(study)).refresh().trials():
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
    space: str | None = None  # the search space (see mico.search.tune.parse_space)
    fixed_layers: dict[int, Any] | None = None  # layers held at widths


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
    *,
    space: str | None = None,
    fixed_layers: dict[int, Any] | None = None,
) -> TrialRunner:
    """Run ``strategy`` as one worker of the study until it holds ``trials`` finished trials
    or a round of the strategy finds nothing new (deterministic strategies end after one).
    ``space`` and ``fixed_layers`` shape the search space (:func:`mico.search.tune.searcher`)."""

    runner = TrialRunner(study, config, evaluator, limits, trials, qtypes, worker, log)
    evaluator.trial_runner = runner
    with interrupt_guard():
        _run_rounds(runner, evaluator, strategy, qtypes, limits, primary, trials, seed,
                    worker, log, space, fixed_layers)  # fmt: skip
        check_interrupt()
    return runner


def _run_rounds(
    runner: TrialRunner,
    evaluator: Any,
    strategy: str,
    qtypes: list[Any],
    limits: dict[str, float],
    primary: str,
    trials: int,
    seed: int,
    worker: int,
    log: Log,
    space: str | None,
    fixed_layers: dict[int, Any] | None,
) -> None:
    from mico.search.tune import searcher as make_searcher

    try:
        for round_ in range(1000):
            before = runner.new_trials
            searcher = make_searcher(evaluator, strategy, qtypes,
                                     seed + 7919 * worker + 104729 * round_, space,
                                     fixed_layers)  # fmt: skip
            try:
                searcher.search(trials, evaluator.objective, primary, limits[primary])
            except BudgetReached:
                log(f"{trials} trials finished: the budget of evaluations (--trials) is spent")
                break
            done = runner.index.refresh().count("COMPLETE")
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
               spec.primary, spec.trials, spec.seed, worker, log, space=spec.space,
               fixed_layers=spec.fixed_layers)  # fmt: skip


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
    done = StudyIndex(load(spec.study)).refresh().count("COMPLETE")
    shown = ", ".join(f"{n} (exit {c})" for n, c in bad)
    if done >= spec.trials and len(bad) < len(procs):
        log(f"{shown} stopped early; the other workers finished all {done} trials")
        return
    raise ConfigError(
        f"worker(s) failed: {shown}; the study keeps every finished trial: rerun with --resume"
    )


def _as_datetime(value: Any) -> Any:
    """A trial's start as a datetime (SQLite hands it over as text)."""
    import datetime

    if isinstance(value, str):
        return datetime.datetime.fromisoformat(value)
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    number = float(value)
    return int(number) if number.is_integer() else number


def settings_text(settings: dict[str, Any]) -> str:
    return json.dumps(settings, sort_keys=True)
