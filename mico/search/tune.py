"""``mico tune``: search per-layer bit-widths of a model under budgets, write the best plan.

One budget per cost (``bops``, ``size``, ``flash``, ``macs``, ``latency``, ``ram``,
``ram_total``), given as an absolute figure with units (``size=4KB``, ``flash=128KiB``,
``bops=1.5M``) or as a share of the W8A8 cost (``bops=50%``). ``size`` counts the C project's
constants, ``flash`` the whole rv32 program (constants, kernel code, runtime:
:mod:`mico.hw.codesize`); ``ram`` the C arena, ``ram_total`` the whole rv32 program's RAM
(arena, static data, runtime, stack bound: :func:`mico.hw.stack.program_ram`).
The searcher optimises against the first budget and every result is checked against all of them.

Every evaluation is a trial of one persistent Optuna study (:mod:`mico.search.study`), shared
by ``--workers`` processes and continued by ``--resume``; values come from the evaluation cache
(:mod:`mico.search.cache`) when it holds them. The run directory holds ``study.db`` (unless
``--storage`` puts the study elsewhere), ``best_plan.yaml`` (loadable by ``mico compile
--plan``), ``trials.csv``, ``report.md`` / ``report.json``, ``trajectory.png``, ``pareto.png``,
``bits.png`` and ``c/``: the C project of the best plan, verified on the host.
"""

from __future__ import annotations

import csv
import json
import math
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mico.atomic_files import write_file_atomically
from mico.errors import ConfigError, PlanError

Log = Callable[[str], None]
COSTS = ("bops", "size", "flash", "macs", "latency", "ram", "ram_total")
UNITS = {"": 1, "b": 1, "k": 1e3, "m": 1e6, "g": 1e9, "kb": 1e3, "mb": 1e6, "kib": 1024,
         "mib": 2**20}  # fmt: skip


@dataclass
class Budget:
    cost: str
    value: float | None = None  # absolute
    share: float | None = None  # of the W8A8 cost

    def resolve(self, w8a8: float) -> float:
        return self.value if self.value is not None else w8a8 * float(self.share or 1.0)


def parse_budgets(text: str) -> list[Budget]:
    """``"bops=50%,size=4KB"`` as budgets; a mistake names the entry and the form."""
    budgets: list[Budget] = []
    for entry in (e.strip() for e in text.split(",") if e.strip()):
        name, sep, raw = entry.partition("=")
        name = name.strip().lower()
        if not sep or name not in COSTS:
            raise PlanError(
                f"budget entry {entry!r} must be COST=VALUE with COST one of {', '.join(COSTS)} "
                "(e.g. bops=50% or size=4KB)"
            )
        raw = raw.strip().lower()
        match = re.fullmatch(r"([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*(%|[a-z]*)", raw)
        if not match or (match.group(2) not in UNITS and match.group(2) != "%"):
            raise PlanError(
                f"budget {entry!r}: {raw!r} is not a number with an optional unit "
                f"({', '.join(u for u in UNITS if u)} or %)"
            )
        number, unit = float(match.group(1)), match.group(2)
        if not number > 0:
            raise PlanError(f"budget {entry!r} must be positive")
        if any(b.cost == name for b in budgets):
            raise PlanError(f"budget for {name} is given twice")
        if unit == "%":
            budgets.append(Budget(name, share=number / 100))
        else:
            budgets.append(Budget(name, value=number * UNITS[unit]))
    if not budgets:
        raise PlanError("give at least one budget, e.g. --budget bops=50%")
    return budgets


@dataclass
class TuneResult:
    best_scheme: list[Any]
    best_accuracy: float
    costs: dict[str, float]
    budgets: dict[str, float]
    trials: list[dict[str, Any]] = field(default_factory=list)
    best_trial: int | None = None
    study: str = ""
    storage: str = ""
    objective: str = "ptq_acc"
    verification: dict[str, Any] | None = None

    @property
    def primary(self) -> str:
        return next(iter(self.budgets))


def study_settings(evaluator: Any, strategy: str, qtypes: list[Any], limits: dict[str, float],
                   seed: int, space: str | None = None,
                   fixed_layers: dict[int, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """What a study's trials depend on; ``--resume`` must give the same. (The search space
    is recorded only when it is not the strategy's default, so older studies still resume.)"""
    fields = evaluator.key_fields()
    settings = {
        **fields,
        "layers": list(evaluator.layer_names),
        "strategy": strategy,
        "bits": [float(q) for q in qtypes],
        "budgets": {k: float(v) for k, v in limits.items()},
        "seed": int(seed),
    }
    if space is not None:
        settings["space"] = space
    if fixed_layers:
        settings["fixed_layers"] = {  # (w, a) as a JSON list, however it was given
            str(k): list(v) if isinstance(v, tuple | list) else [v, v]
            for k, v in sorted(fixed_layers.items())
        }
    return settings


SPACES = ("full", "w-only", "w=a", "blocks")


def parse_space(text: str, n_layers: int) -> Any:
    """A :class:`~mico.search.DimTransform` from its name: ``full`` (every weight and
    activation width), ``w-only`` or ``w-only:A`` (weights, activations held at A bits,
    default 8), ``w=a`` (one width per layer), ``blocks:K`` or ``blocks:K:w=a`` (K blocks of
    consecutive layers share their widths)."""
    from mico.search.dim_transform import DimTransform

    name, _, rest = text.strip().lower().partition(":")
    try:
        if name == "full" and not rest:
            return DimTransform.full(n_layers)
        if name == "w=a" and not rest:
            return DimTransform.w_eq_a(n_layers)
        if name == "w-only":
            return DimTransform.w_only(n_layers, a_bits=float(rest) if rest else 8)
        if name == "blocks" and rest:
            count, _, tied = rest.partition(":")
            if tied in ("", "w=a"):
                return DimTransform.blocks(n_layers, int(count), w_eq_a=tied == "w=a")
    except ValueError:
        pass
    raise PlanError(
        f"search space {text!r} is not one of: full, w-only[:A], w=a, blocks:K[:w=a] "
        f"(K from 1 to {n_layers} layers)"
    )


def parse_fixed_layers(text: str, layer_names: list[str]) -> dict[int, Any]:
    """``--fixed-layers`` as ``{layer index: (w, a)}``: entries ``KEY=W`` (weights and
    activations) or ``KEY=W/A``, separated by commas; KEY is a layer's name, its index (``0``,
    ``-1`` from the end) or ``first`` / ``last``. E.g. ``first=8,last=8/8,conv2=4/8``."""
    from mico.quant.plan import _bits

    n = len(layer_names)
    fixed: dict[int, Any] = {}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        key, sep, value = entry.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise PlanError(
                f"--fixed-layers entry {entry!r} is not KEY=W or KEY=W/A (e.g. first=8, "
                "last=8/8, conv1=4/8)"
            )
        if key in ("first", "last"):
            index = 0 if key == "first" else n - 1
        elif key in layer_names:
            index = layer_names.index(key)
        else:
            try:
                index = int(key)
            except ValueError:
                raise PlanError(
                    f"--fixed-layers: {key!r} is not a layer of this model; use first, last, "
                    f"an index from {-n} to {n - 1} or one of: {', '.join(layer_names[:8])}"
                    + (" ..." if n > 8 else "")
                ) from None
            if not -n <= index < n:
                raise PlanError(
                    f"--fixed-layers: layer index {index} is out of range for {n} layers "
                    f"(use {-n} to {n - 1})"
                )
            index %= n
        w_text, _, a_text = value.partition("/")
        name = layer_names[index]
        bits = (_bits(w_text, name, "weight"), _bits(a_text or w_text, name, "activation"))
        if index in fixed and fixed[index] != bits:
            raise PlanError(f"--fixed-layers: layer {name!r} is given twice, with different widths")
        fixed[index] = bits
    return fixed


def searcher(
    evaluator: Any,
    strategy: str,
    qtypes: list[Any] | None,
    seed: int,
    space: str | None = None,
    fixed_layers: dict[int, Any] | None = None,
) -> Any:
    """The searcher of ``strategy`` over ``space`` (default: the strategy's own, W = A per
    layer for nlp and every width for the others) with ``fixed_layers`` held."""
    from mico.search.strategies import STRATEGIES

    if strategy not in STRATEGIES:
        raise PlanError(
            f"unknown strategy {strategy!r}; choose one of: {', '.join(sorted(STRATEGIES))}"
        )
    kwargs: dict[str, Any] = {"qtypes": qtypes or [2, 4, 8], "seed": seed}
    if space is not None:
        kwargs["dim_trans"] = parse_space(space, evaluator.n_layers)
    if fixed_layers:
        kwargs["fixed_layers"] = fixed_layers
    return STRATEGIES[strategy](evaluator, **kwargs)


def evaluations_needed(searcher: Any) -> int | None:
    """Evaluations a strategy cannot stop short of, when it has such a count: the NLP
    searcher's reference, one probe per search dimension and lower width, and its answer."""
    from mico.search.searchers import NLPSearcher

    if type(searcher) is NLPSearcher:
        return searcher.evaluations_needed
    return None


def tune(
    evaluator: Any,
    budgets: list[Budget],
    strategy: str = "nlp",
    trials: int = 10,
    qtypes: list[int] | None = None,
    seed: int = 0,
    log: Log = print,
    *,
    study: Any = None,
    resume: bool = False,
    workers: int = 1,
    spec: Any = None,
    space: str | None = None,
    fixed_layers: dict[int, Any] | None = None,
) -> TuneResult:
    """Search with ``strategy`` against the first budget; every budget is respected.

    ``space`` (:func:`parse_space`: full, w-only, w=a, blocks:K) shrinks the search space of
    a large model as seed 003's ``DimTransform`` does; ``fixed_layers`` holds layers at widths
    (``{0: 8, -1: 8}``: the first and last layer at W8A8). Both are settings of the study.

    ``study`` (:class:`~mico.search.study.StudyConfig`) is where the trials go (default: a
    study in a temporary SQLite file); ``resume`` continues it; ``workers`` > 1 runs that many
    processes (``spec``, a :class:`~mico.search.study.WorkerSpec`, says how to rebuild them).
    At most ``trials`` trials finish (all workers together, resumes included); the NLP
    strategy gets at least the evaluations it needs (:func:`evaluations_needed`).
    """
    from mico.search.study import StudyConfig, open_study, run_worker, run_workers, sqlite_url

    if workers > 1 and spec is None:
        raise ConfigError("workers > 1 need a WorkerSpec (how each process rebuilds the model)")
    first = searcher(evaluator, strategy, qtypes, seed, space, fixed_layers)
    qtypes = list(first.qtypes)
    n = evaluator.n_layers
    full = [8] * (2 * n)
    limits = {b.cost: b.resolve(first.cost(full, b.cost)) for b in budgets}
    for cost, limit in limits.items():
        first._check_budget(cost, limit)  # refused before any training or evaluation
    primary = budgets[0].cost
    needed = evaluations_needed(first)
    if needed is not None and needed > trials:
        log(f"{strategy} needs {needed} evaluations for {n} layers x {len(qtypes)} widths: "
            f"--trials {trials} raised to {needed}")  # fmt: skip
        trials = needed
    log(f"searching {n} layers x {qtypes} with {strategy} under "
        + ", ".join(f"{k} <= {v:g}" for k, v in limits.items()))  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="mico-study-") as scratch:
        config = study or StudyConfig(sqlite_url(Path(scratch) / "study.db"), "mico-tune")
        settings = study_settings(evaluator, strategy, qtypes, limits, seed, space,
                                  fixed_layers)  # fmt: skip
        handle = open_study(config, settings, resume)
        if workers > 1:
            spec.study, spec.limits, spec.primary, spec.trials = config, limits, primary, trials
            spec.qtypes, spec.space, spec.fixed_layers = qtypes, space, fixed_layers
            log(f"{workers} workers on study '{config.name}'")
            run_workers(spec, workers, log)
        else:
            run_worker(evaluator, handle, config, strategy, qtypes, limits, primary, trials,
                       seed, 0, log, space=space, fixed_layers=fixed_layers)  # fmt: skip
        return _result(evaluator, handle, config, qtypes, limits, trials, log)


def _result(evaluator: Any, handle: Any, config: Any, qtypes: list[Any],
            limits: dict[str, float], trials: int, log: Log) -> TuneResult:  # fmt: skip
    """The best feasible trial of the study (the cheapest scheme, evaluated, if none fits)."""
    from mico.search.study import StudyIndex, TrialRunner, best_feasible, trial_rows

    index = StudyIndex(handle)
    best = best_feasible(handle, index)
    if best is None:
        log("no trial fits every budget: evaluating the cheapest scheme")
        runner = TrialRunner(handle, config, evaluator, limits, trials, qtypes, 0, log)
        runner.force = True
        runner([qtypes[0]] * (2 * evaluator.n_layers))
        best = best_feasible(handle, index)
    if best is None:
        raise PlanError(
            f"even the cheapest scheme ({qtypes[0]} bits everywhere) exceeds a budget; raise "
            + ", ".join(f"{k} {v:g}" for k, v in limits.items())
        )
    rows = trial_rows(handle, list(limits), index)
    return TuneResult(
        list(best.user_attrs["qscheme"]),
        float(best.value),
        {c: float(v) for c, v in best.user_attrs["costs"].items()},
        limits,
        rows,
        best.number,
        config.name,
        _shown_url(config.url),
        evaluator.objective,
    )


def _shown_url(url: str) -> str:
    from mico.search.study import _safe_url

    return _safe_url(url)


def compile_best(evaluator: Any, scheme: list[Any], directory: Path, samples: Any,
                 log: Log = print, labels: Any = None) -> dict[str, Any]:  # fmt: skip
    """The C project of ``scheme`` (trained weights, calibrated) in ``directory``, as ``mico
    compile`` writes it, run on the host against the Python reference (``mico verify``).

    With ``labels`` (one per sample: pass the whole test set), the plan's accuracy is measured
    again from the C program's own outputs (``c_accuracy``) and from the integer Python
    reference the C was emitted from (``reference_accuracy``); in static mode the two are equal
    by construction, since the outputs are bit-identical."""
    import numpy as np
    import torch

    from mico.codegen.compile import compile_model
    from mico.deploy import (
        DeployOptions,
        _write_compile_report,
        verify_compiled,
        write_verify_report,
    )

    samples = np.asarray(samples, dtype=np.float32)
    model = evaluator._fresh(scheme).eval()
    plan = evaluator.scheme_key(scheme)
    example = torch.from_numpy(samples[:1])
    log(f"compiling the best plan ({evaluator.mode} mode) into {directory}")
    compiled = compile_model(model, example, directory, "model", evaluator.mode,
                             calibration=evaluator._calibration, force=True,
                             extras=_write_compile_report, sample_inputs=samples,
                             prefer=getattr(evaluator, "prefer", "speed"))  # fmt: skip
    origin = f"{len(samples)} test samples of {evaluator.data_name}"
    options = DeployOptions(model=evaluator.model_name, plan=plan, mode=evaluator.mode,
                            out_dir=directory, samples=len(samples), targets=("host",),
                            samples_origin=origin,
                            prefer=getattr(evaluator, "prefer", "speed"))  # fmt: skip
    result = verify_compiled(compiled, samples, options, log)
    write_verify_report(result, options)
    agreement = result.results[0].agreement
    project = compiled.project
    accuracies: dict[str, Any] = {}
    labels = None if labels is None else np.asarray(labels)
    if labels is not None and labels.shape == (len(samples),):  # one class per sample
        c_outputs = np.asarray(result.results[0].outputs).reshape(len(samples), -1)
        reference = np.asarray(compiled.reference(samples)).reshape(len(samples), -1)
        accuracies = {
            "c_accuracy": float((c_outputs.argmax(axis=1) == labels).mean()),
            "reference_accuracy": float((reference.argmax(axis=1) == labels).mean()),
        }
        log(
            f"accuracy of the C program on {len(samples)} test samples: "
            f"{accuracies['c_accuracy']:.4f} (Python integer reference "
            f"{accuracies['reference_accuracy']:.4f})"
        )
    return {
        "directory": directory.name,
        "mode": evaluator.mode,
        "target": "host",
        "ok": bool(result.ok),
        "samples": int(agreement.samples),
        "exact": int(agreement.exact),
        "max_abs_diff": float(agreement.max_abs_diff),
        "weights_bytes": int(project.flash["weights"]),
        "flash_bytes": int(sum(project.flash.values())),
        "arena_bytes": int(project.arena.size),
        **accuracies,
    }


def write_run(result: TuneResult, layer_names: list[str], out: Path) -> None:
    """``best_plan.yaml``, ``trials.csv``, ``report.md`` / ``report.json`` and the plots
    (``trajectory.png``, ``pareto.png``, ``bits.png``) into ``out``, each file atomically."""
    import io

    from mico.quant import as_plan
    from mico.search.plots import plot_bits, plot_pareto, plot_trajectory

    plan = as_plan(result.best_scheme, layer_names)
    write_file_atomically(out / "best_plan.yaml", plan.to_yaml())
    buffer = io.StringIO()
    fields = list(result.trials[0]) if result.trials else ["trial"]
    writer = csv.DictWriter(buffer, fieldnames=fields)
    writer.writeheader()
    writer.writerows(result.trials)
    write_file_atomically(out / "trials.csv", buffer.getvalue())
    plot_trajectory(result.trials, out / "trajectory.png", result.objective)
    primary = result.primary
    plot_pareto(result.trials, out / "pareto.png", primary, result.budgets[primary],
                result.objective)  # fmt: skip
    plot_bits(layer_names, result.best_scheme, out / "bits.png")
    finished = [t for t in result.trials if t.get("state", "COMPLETE") == "COMPLETE"]
    data = {
        "best_plan": plan.to_string(),
        "best_accuracy": result.best_accuracy,
        "best_trial": result.best_trial,
        "objective": result.objective,
        "costs": result.costs,
        "budgets": result.budgets,
        "evaluations": len(finished),
        "failed_trials": len(result.trials) - len(finished),
        "cached": sum(1 for t in finished if t.get("cached")),
        "study": {"name": result.study, "storage": result.storage},
        "verification": result.verification,
        "files": ["best_plan.yaml", "trials.csv", "trajectory.png", "pareto.png", "bits.png"]
        + ([f"{result.verification['directory']}/"] if result.verification else []),
    }
    report = json.dumps(data, indent=2, default=_json_default) + "\n"
    write_file_atomically(out / "report.json", report)
    lines = [
        "# mico tune",
        "",
        f"Best plan `{plan.to_string()}` (trial {result.best_trial}): {result.objective} "
        f"{result.best_accuracy:.4f} after {len(finished)} evaluations "
        f"({data['cached']} from the cache, {data['failed_trials']} failed).",
        "",
        "| cost | best plan | budget |",
        "|---|---:|---:|",
        *[f"| {c} | {result.costs[c]:g} | {result.budgets[c]:g} |" for c in result.costs],
        "",
        f"Study `{result.study}` in `{result.storage}`.",
        "",
        "![trajectory](trajectory.png) ![pareto](pareto.png) ![bits](bits.png)",
        "",
    ]
    lines += _verification_lines(result.verification)
    write_file_atomically(out / "report.md", "\n".join(lines))


def _verification_lines(v: dict[str, Any] | None) -> list[str]:
    if v is None:
        return ["The best plan was not compiled (--no-compile).", ""]
    if v["ok"] and v["exact"] == v["samples"]:
        verdict = (f"identical to the Python reference on all {v['samples']} samples "
                   "(bit-exact)")  # fmt: skip
    elif v["ok"]:
        verdict = f"within tolerance of the Python reference ({v['exact']}/{v['samples']} exact)"
    else:
        verdict = (f"DIFFERENT from the Python reference ({v['exact']}/{v['samples']} exact, "
                   f"max abs diff {v['max_abs_diff']:.3g})")  # fmt: skip
    lines = [
        "## C project",
        "",
        f"`{v['directory']}/` ({v['mode']} mode): weights {v['weights_bytes']} B, flash "
        f"{v['flash_bytes']} B, arena {v['arena_bytes']} B. On the {v['target']}: {verdict}.",
        "",
    ]
    if "c_accuracy" in v:
        lines += [
            f"Accuracy of the C program on {v['samples']} test samples: {v['c_accuracy']:.4f} "
            f"(the Python integer reference: {v['reference_accuracy']:.4f}; the search measured "
            "the quantized PyTorch model, whose rounding differs slightly).",
            "",
        ]
    return lines


def _json_default(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    return str(value)
