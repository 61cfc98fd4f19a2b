"""How good are the searchers? Every strategy at 10/20/40 evaluations x 5 seeds against the
exhaustive optimum of the same evaluations (issue 14, "How we will know").

Run on demand (not a test):  python benchmarks/search.py [--seeds 5] [--cache-dir DIR]

For each model (``small_cnn`` and ``mlp``, both on scikit-learn digits, 3 quantizable layers)
it trains FP32 once (the checkpoint is saved in the cache folder and reused), then evaluates
the post-training-quantized accuracy (``MiCoEval``, ``ptq_acc``, static calibrated scales) of
EVERY scheme of widths {2, 4, 8} for weights and activations: 3^6 = 729 schemes. That table
is the reference (the exact best plan within each budget), and every strategy's evaluations
are then lookups in it: ``eval_f`` is memoized by scheme (and persisted as JSON in the cache
folder, keyed by the checkpoint's and the data's hashes), so runs are free and shared across
strategies, seeds and budgets. The objective is checked deterministic first (one scheme
evaluated twice from a fresh evaluator).

Budgets: BOPs <= 50% of W8A8 (the issue's), a tighter BOPs <= 25%, and the C project's flash
(``size``: packed weights, biases, scales, tables) with the weights at <= 50% of W8A8's.
Evaluation budgets E = 10/20/40: ``random`` gets ``n_iterations=E``; the model-based strategies
evaluate ``n_inits`` (their default: a third of ``n_iterations``, 2 to 10) plus
``n_iterations``, so they get the ``n_iterations`` with ``n_inits + n_iterations = E`` (8, 15,
30); ``nlp`` needs a fixed number (1 + layers x (widths-1) + 1 = 8) whatever E is. The
evaluations each run actually asked for (``eval_f`` calls) are counted and reported.
A 500-evaluation ``random`` search (5 seeds) is reported against the exhaustive optimum too.

A second part (``--part large``) takes a model where exhaustive search is impossible: the zoo's
DS-CNN (``dscnn``, 10 quantizable layers: a 10x4 conv, four depthwise-separable blocks, the
classifier; 16 channels) trained on digits (8x8; the model's pooling makes it size-agnostic).
Its 20 widths in {2, 4, 8} are 3^20 = 3.5e9 schemes, so the strategies search a 10-dimension
``DimTransform`` as seed 003 does for large models: W = A per layer under the BOPs budget
(BOPs = MACs x w x a), weights only (activations at 8 bits) under the weight-size budget.
Every strategy (random, nlp, mico, bayes, haq, regression) runs at 20 and 40 evaluations x
``--large-seeds`` seeds; the reference is the best feasible accuracy found by any run; for
each run: the accuracy returned, whether it is in budget, the evaluations until the best so
far is within 0.5 % of that reference, and the searcher's own wall time (evaluations
excluded; they are memoized). ``--part large`` keeps the small-model figures of an earlier
run in the JSON and Markdown.

Figures go to ``benchmarks/results/search.json``, ``search.md`` and ``search_trajectory.png``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mico.data import load_dataset
from mico.models import from_zoo
from mico.search import DimTransform, MiCoEval
from mico.search.strategies import STRATEGIES
from mico.train import accuracy, fit, seed_everything

MODELS = {"small_cnn": "digits", "mlp": "digits"}
QTYPES = [2, 4, 8]
EVAL_BUDGETS = (10, 20, 40)
REFERENCE_RANDOM = 500
GOAL = 0.995
RESULTS = Path(__file__).resolve().parent / "results"


def n_iterations_for(strategy: str, evaluations: int) -> int:
    """The ``n_iterations`` that makes a strategy evaluate ``evaluations`` schemes in all."""
    if strategy in ("random", "nlp"):
        return evaluations
    for n in range(evaluations, 0, -1):  # n + default n_inits(n) == evaluations
        if n + min(10, max(2, n // 3)) <= evaluations:
            return n
    return 1


class TableEval:
    """A ``MiCoEval`` whose ``eval_f`` is memoized by scheme (a dict, persisted as JSON) and
    whose costs are precomputed; every ``eval_f`` call is logged (scheme, accuracy)."""

    def __init__(self, evaluator: MiCoEval, path: Path) -> None:
        self.ev = evaluator
        self.path = path
        self.n_layers = evaluator.n_layers
        self.latency_target = evaluator.latency_target
        self.objective = "ptq_acc"
        self.key = evaluator.key_fields()
        self.acc: dict[tuple, float] = {}
        if path.exists():
            stored = json.loads(path.read_text())
            if stored.get("key") == self.key:
                self.acc = {tuple(json.loads(k)): v for k, v in stored["acc"].items()}
        self.costs: dict[str, dict[tuple, float]] = {"bops": {}, "size": {}}
        self.misses = 0
        self.miss_seconds = 0.0
        self.save_every = 0  # save the memo after this many new evaluations (0: never)
        self.log: list[tuple[tuple, float]] = []

    def save(self) -> None:
        data = {"key": self.key, "acc": {json.dumps(list(k)): v for k, v in self.acc.items()}}
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".evals.")
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.replace(tmp, self.path)

    def value(self, scheme: Any) -> float:
        key = tuple(int(b) for b in scheme)
        if key not in self.acc:
            self.misses += 1
            t0 = time.time()
            self.acc[key] = float(self.ev.eval_ptq_acc(list(key)))
            self.miss_seconds += time.time() - t0
            if self.save_every and self.misses % self.save_every == 0:
                self.save()
        return self.acc[key]

    def eval_f(self, scheme: Any) -> float:
        value = self.value(scheme)
        self.log.append((tuple(int(b) for b in scheme), value))
        return value

    def _cost(self, kind: str, scheme: Any) -> float:
        key = tuple(int(b) for b in scheme)
        table = self.costs[kind]
        if key not in table:
            table[key] = float(getattr(self.ev, f"eval_{kind}")(list(key)))
        return table[key]

    def eval_bops(self, scheme: Any) -> float:
        return self._cost("bops", scheme)

    def eval_size(self, scheme: Any) -> float:
        return self._cost("size", scheme)

    def eval_macs(self, scheme: Any) -> float:
        return self.ev.eval_macs(scheme)

    def eval_latency(self, scheme: Any, target: str | None = None) -> float:
        return self.ev.eval_latency(scheme, target)


def prepare(zoo: str, dataset: str, cache_dir: Path, epochs: int) -> tuple[TableEval, dict]:
    seed_everything(0)
    split = load_dataset(dataset, seed=0)
    train_loader, test_loader = split.loaders(batch_size=64, seed=0)
    model = from_zoo(zoo)
    ckpt = cache_dir / f"{zoo}_{dataset}_fp32.pth"
    t0 = time.time()
    if ckpt.exists():
        model.load(ckpt)
        trained = False
    else:
        fit(model, train_loader, epochs, lr=3e-3)
        model.save(ckpt)
        trained = True
    train_s = time.time() - t0
    fp32 = accuracy(model, test_loader)
    # fresh loaders: the evaluator's calibration batches must not depend on whether this
    # process trained (which advances the shuffling generator) or loaded the checkpoint
    train_loader, test_loader = split.loaders(batch_size=64, seed=0)
    ev = MiCoEval(model, 0, train_loader, test_loader, ckpt, objective="ptq_acc",
                  data_name=dataset, model_name=zoo)  # fmt: skip
    table = TableEval(ev, cache_dir / f"{zoo}_{dataset}_evals.json")
    n = ev.n_layers
    probe = [4] * n + [8] * n
    t0 = time.time()
    first = float(ev.eval_ptq_acc(probe))
    one_eval_s = time.time() - t0
    second = float(ev.eval_ptq_acc(probe))
    again = MiCoEval(model, 0, *split.loaders(batch_size=64, seed=0), ckpt, objective="ptq_acc")
    third = float(again.eval_ptq_acc(probe))
    info = {
        "model": zoo,
        "dataset": dataset,
        "layers": ev.layer_names,
        "train_samples": len(split.x_train),
        "test_samples": len(split.x_test),
        "fp32_epochs": epochs,
        "fp32_trained_this_run": trained,
        "fp32_seconds": round(train_s, 1),
        "fp32_accuracy": fp32,
        "seconds_per_evaluation": round(one_eval_s, 3),
        "determinism_check": {
            "scheme": probe,
            "values": [first, second, third],
            "deterministic": first == second == third,
        },
    }
    return table, info


def exhaustive(table: TableEval) -> dict[str, Any]:
    n = table.n_layers
    schemes = [list(s) for s in itertools.product(QTYPES, repeat=2 * n)]
    t0 = time.time()
    for i, s in enumerate(schemes):
        table.value(s)
        table.eval_bops(s)
        table.eval_size(s)
        if (i + 1) % 100 == 0:
            table.save()
    table.save()
    return {"schemes": len(schemes), "evaluated_now": table.misses,
            "seconds": round(time.time() - t0, 1)}  # fmt: skip


def run_one(
    table: TableEval, strategy: str, evaluations: int, seed: int, kind: str, budget: float,
    reference: float,
) -> dict[str, Any]:  # fmt: skip
    table.log = []
    searcher = STRATEGIES[strategy](table, qtypes=QTYPES, seed=seed)
    t0 = time.time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        best_x, best_y = searcher.search(
            n_iterations_for(strategy, evaluations), "ptq_acc", kind, budget
        )
    seconds = time.time() - t0
    best_x = [int(b) for b in best_x]
    cost = getattr(table, f"eval_{kind}")(best_x)
    so_far, best = [], 0.0  # best feasible accuracy seen after each evaluation (0: none yet)
    for scheme, value in table.log:
        if getattr(table, f"eval_{kind}")(scheme) <= budget:
            best = max(best, value)
        so_far.append(best / reference)
    return {
        "strategy": strategy,
        "evaluations_budget": evaluations,
        "seed": seed,
        "n_iterations": n_iterations_for(strategy, evaluations),
        "calls": len(table.log),
        "distinct": len({s for s, _ in table.log}),
        "best_x": best_x,
        "best_y": float(best_y),
        "best_y_is_table_value": float(best_y) == table.value(best_x),
        "best_x_feasible": cost <= budget,
        "fraction": float(best_y) / reference,
        "best_seen_fraction": so_far[-1] if so_far else 0.0,
        "trajectory": [round(v, 6) for v in so_far],
        "searcher_seconds": round(seconds, 3),
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    fr = np.array([r["fraction"] for r in runs])
    calls = np.array([r["calls"] for r in runs])
    return {
        "mean_fraction": float(fr.mean()),
        "min_fraction": float(fr.min()),
        "mean_calls": float(calls.mean()),
        "max_calls": int(calls.max()),
        "mean_distinct": float(np.mean([r["distinct"] for r in runs])),
        "all_feasible": all(r["best_x_feasible"] for r in runs),
        "all_consistent": all(r["best_y_is_table_value"] for r in runs),
    }


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models, budgets = list(results["models"]), results["budgets"]
    fig, axes = plt.subplots(
        len(models), len(budgets), figsize=(4.2 * len(budgets), 3.6 * len(models)),
        squeeze=False,
    )  # fmt: skip
    e = max(EVAL_BUDGETS)
    for ax, (model, kind) in zip(
        axes.ravel(), [(m, k) for m in models for k in budgets], strict=True
    ):
        block = results["models"][model]["budgets"][kind]
        for strategy in STRATEGIES:
            runs = [r for r in block["runs"] if r["strategy"] == strategy
                    and r["evaluations_budget"] == e]  # fmt: skip
            length = max(len(r["trajectory"]) for r in runs)
            traj = np.array([t + [t[-1]] * (length - len(t))
                             for t in (r["trajectory"] for r in runs)])  # fmt: skip
            ax.plot(np.arange(1, length + 1), traj.mean(axis=0), label=strategy, lw=1.4)
        ax.axhline(GOAL, color="k", ls=":", lw=0.8)
        ax.set_ylim(0.8, 1.005)
        ax.set_title(f"{model}, {budget_label(kind)}", fontsize=9)
        ax.set_xlabel("evaluations")
        ax.grid(alpha=0.3)
    for row in axes:
        row[0].set_ylabel("best feasible acc. / exhaustive best\n(mean of seeds)")
    axes[0][-1].legend(fontsize=7, loc="lower right")
    fig.suptitle(f"Best-so-far of {e}-evaluation runs (dotted: {GOAL:.1%})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def budget_label(name: str) -> str:
    kind, frac = name.split(":")
    if kind == "size":
        return f"size <= flash at {float(frac):.0%} of W8A8 weights"
    return f"{kind} <= {float(frac):.0%} of W8A8"


def budget_value(table: Any, kind: str, share: float) -> float:
    """The budget of ``kind`` at ``share``: of the W8A8 cost, except for ``size`` (the C
    project's flash), where only the packed weights scale with the widths: the budget is the
    other constants (biases, scales, tables) plus ``share`` of the W8A8 weights."""
    w8a8 = [8] * 2 * table.n_layers
    if kind != "size":
        return share * getattr(table, f"eval_{kind}")(w8a8)
    flash = table.ev.flash_bytes(w8a8)
    return float(sum(flash.values()) - flash["weights"] + share * flash["weights"])


def pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def to_markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    out = [
        "# Search strategies against the exhaustive optimum (mico benchmarks/search.py)",
        "",
        f"Run {meta['date']} on {meta['machine']}, mico {meta['mico_commit']}, Python "
        f"{meta['python']}, torch {meta['torch']}, scikit-learn {meta['sklearn']}, optuna "
        f"{meta['optuna']}, xgboost {meta['xgboost']}, numpy {meta['numpy']}. Total "
        f"{meta['total_seconds']:.0f} s.",
        "",
        "## Method",
        "",
        "* Models: "
        + "; ".join(
            f"`{m}` on {v['info']['dataset']} ({len(v['info']['layers'])} quantizable layers, "
            f"FP32 {v['info']['fp32_accuracy']:.4f} after {v['info']['fp32_epochs']} epochs, "
            f"{v['info']['test_samples']} test samples)"
            for m, v in results["models"].items()
        )
        + ".",
        "* Objective: `MiCoEval` `ptq_acc` (static calibrated scales, 8 calibration batches, "
        "test accuracy), widths {2, 4, 8} for weights and activations of each layer: "
        "3^6 = 729 schemes per model, all evaluated once (the reference is the exact optimum, "
        "stronger than a 500-evaluation random search). Every strategy's `eval_f` is then a "
        "lookup in that memo (persisted as JSON, keyed by the checkpoint's and data's hashes).",
        "* Determinism: one scheme (W4A8) evaluated twice by one evaluator and once by a fresh "
        "one gave the same accuracy: "
        + ", ".join(
            f"{m} {v['info']['determinism_check']['deterministic']}"
            for m, v in results["models"].items()
        )
        + ".",
        "* Cost of the table: "
        + "; ".join(
            f"{m} {v['info']['seconds_per_evaluation']} s per evaluation, "
            f"{v['info']['exhaustive']['evaluated_now']} of {v['info']['exhaustive']['schemes']} "
            f"evaluated in this run ({v['info']['exhaustive']['seconds']} s; the rest from the "
            "persisted memo of an earlier run)"
            for m, v in results["models"].items()
        )
        + ". A 6561-scheme space (mnist1d_cnn, 4 layers, 1.3 s per evaluation here) would "
        "take over 2 hours exhaustively, which is why both models have 3 layers.",
        "* Budgets: " + ", ".join(budget_label(b) for b in results["budgets"]) + " (BOPs 50% "
        "is the issue's; the others are a tighter and a different budget).",
        "* Evaluation budget E: `random` gets `n_iterations=E`; the model-based strategies "
        "(`mico`, `bayes`, `haq`, `regression`, `pareto`) evaluate `n_inits` (their default, a "
        "third of `n_iterations`, 2 to 10) plus `n_iterations`, so they are given 8/15/30 "
        "iterations for E = 10/20/40; `nlp` always asks for 1 + 3 layers x 2 + 1 = 8 "
        "evaluations. 'evals' in the table is the mean number of `eval_f` calls the runs "
        "actually made (a repeated scheme counts again).",
        "* Accuracy of a run = the accuracy of the plan `search` returned; fraction = that / the "
        "best accuracy among the feasible schemes of the exhaustive table. Seeds "
        f"{meta['seeds']}; mean and min over seeds.",
        "* Granularity: digits has 360 test samples, so one sample is 0.28% of accuracy (about "
        "0.3% of the best); the 99.5% goal allows the plan to get at most one test sample "
        "fewer right than the optimum.",
        "",
        "## Reference",
        "",
        "| model | budget | feasible schemes | exhaustive best | best plan (w..., a...) | "
        f"random-{REFERENCE_RANDOM} best (mean / min of seeds) |",
        "|---|---|---:|---:|---|---:|",
    ]
    for m, v in results["models"].items():
        for kind, b in v["budgets"].items():
            r5 = b["random_500"]
            out.append(
                f"| {m} | {budget_label(kind)} ({b['budget']:.0f}) | {b['feasible']} "
                f"| {b['reference']:.4f} "
                f"| {b['reference_plan']} | {pct(r5['mean_fraction'])} / "
                f"{pct(r5['min_fraction'])} ({r5['mean_calls']:.0f} evals) |"
            )
    out += ["", "## Best accuracy as a fraction of the exhaustive best", ""]
    head = (
        "| model | budget | strategy | "
        + " | ".join(f"E={e} mean | E={e} min | E={e} evals" for e in EVAL_BUDGETS)
        + " |"
    )
    out += [head, "|---|---|---|" + "---:|" * (3 * len(EVAL_BUDGETS))]
    for m, v in results["models"].items():
        for kind, b in v["budgets"].items():
            for s in STRATEGIES:
                cells = []
                for e in EVAL_BUDGETS:
                    t = b["summary"][s][str(e)]
                    cells += [pct(t["mean_fraction"]), pct(t["min_fraction"]),
                              f"{t['mean_calls']:.1f}"]  # fmt: skip
                out.append(f"| {m} | {budget_label(kind)} | {s} | " + " | ".join(cells) + " |")
    out += ["", "## Outcome", ""] + results["outcome"] + [""]
    out += [
        "![best-so-far](search_trajectory.png)",
        "",
        f"The plot: the best accuracy among the budget-feasible schemes evaluated so far, over the "
        f"evaluations of the E={max(EVAL_BUDGETS)} runs, mean of the seeds (0 before the first "
        "feasible one; a run that stopped early keeps its last value). `nlp`'s curve counts "
        "its sensitivity probes (one width everywhere but one layer) when they fit the budget; "
        "its `search` returns the integer program's answer. Returned plans are never worse "
        "than the best feasible scheme their run evaluated: " + str(results["never_worse"]) + ".",
        "",
    ]
    if "large" in results:
        out += large_markdown(results["large"])
    return "\n".join(out)


def outcome(results: dict[str, Any]) -> list[str]:
    lines = []
    for m, v in results["models"].items():
        for kind, b in v["budgets"].items():
            at20 = {s: b["summary"][s]["20"] for s in STRATEGIES}
            best = max(at20, key=lambda s: (at20[s]["mean_fraction"], at20[s]["min_fraction"],
                                            -at20[s]["mean_calls"]))  # fmt: skip
            t = at20[best]
            reach = [s for s in STRATEGIES if at20[s]["min_fraction"] >= GOAL]
            lines.append(
                f"* {m}, {budget_label(kind)}: best at E=20 is `{best}`, mean "
                f"{pct(t['mean_fraction'])}, min "
                f"{pct(t['min_fraction'])} ({t['mean_calls']:.1f} evals): goal >= {GOAL:.1%} "
                f"{'MET' if t['mean_fraction'] >= GOAL else 'NOT met'} on the mean; on every "
                f"seed by: {', '.join(f'`{s}`' for s in reach) or 'none'}."
            )
    settings = [(m, k) for m, v in results["models"].items() for k in v["budgets"]]
    lines.append(
        f"* Across all {len(settings)} settings at E=20 (no choice of strategy after the fact), "
        "worst mean / worst seed per strategy: "
        + "; ".join(
            f"`{s}` "
            + pct(min(results["models"][m]["budgets"][k]["summary"][s]["20"]["mean_fraction"]
                      for m, k in settings))
            + " / "
            + pct(min(results["models"][m]["budgets"][k]["summary"][s]["20"]["min_fraction"]
                      for m, k in settings))
            for s in STRATEGIES
        )
        + "."
    )  # fmt: skip
    bad = [
        (m, kind, s, e)
        for m, v in results["models"].items()
        for kind, b in v["budgets"].items()
        for s in STRATEGIES
        for e in EVAL_BUDGETS
        if not all(b["summary"][s][str(e)][c] for c in ("all_feasible", "all_consistent"))
    ]
    lines.append(
        "* Every returned plan was within its budget and its reported accuracy was the table's "
        "value."
        if not bad
        else f"* Infeasible or inconsistent returned plans in: {bad}."
    )
    return lines


# ----------------------------------------------------------------------------- the large model
LARGE = {"zoo": "dscnn", "kwargs": {"channels": 16, "n_blocks": 4, "num_classes": 10},
         "dataset": "digits", "input_shape": (1, 8, 8), "calibration_batches": 1}  # fmt: skip
LARGE_STRATEGIES = ("random", "nlp", "mico", "bayes", "haq", "regression")
LARGE_EVALS = (20, 40)
LARGE_BUDGETS = ("bops:0.25", "size:0.5")
WITHIN = 0.005  # "reached": best so far within 0.5 % of the best any run found


def large_transform(kind: str, n: int) -> DimTransform:
    """The seed's move for a large space: W = A per layer for BOPs (w x a), weights only
    (activations at 8 bits) for the weight size, which activations do not change."""
    return DimTransform.w_eq_a(n) if kind == "bops" else DimTransform.w_only(n, a_bits=8)


def prepare_large(cache_dir: Path, epochs: int) -> tuple[TableEval, dict]:
    seed_everything(0)
    dataset = LARGE["dataset"]
    split = load_dataset(dataset, seed=0)
    train_loader, test_loader = split.loaders(batch_size=64, seed=0)
    model = from_zoo(LARGE["zoo"], **LARGE["kwargs"])
    model.default_input_shape = LARGE["input_shape"]
    ckpt = cache_dir / f"{LARGE['zoo']}16x4_{dataset}_fp32.pth"
    t0 = time.time()
    trained = not ckpt.exists()
    if trained:
        fit(model, train_loader, epochs, lr=3e-3)
        model.save(ckpt)
    else:
        model.load(ckpt)
    train_s = time.time() - t0
    fp32 = accuracy(model, test_loader)
    train_loader, test_loader = split.loaders(batch_size=64, seed=0)
    ev = MiCoEval(model, 0, train_loader, test_loader, ckpt, objective="ptq_acc",
                  data_name=dataset, model_name=f"{LARGE['zoo']}16x4",
                  calibration_batches=LARGE["calibration_batches"])  # fmt: skip
    table = TableEval(ev, cache_dir / f"{LARGE['zoo']}16x4_{dataset}_evals.json")
    table.save_every = 25
    n = ev.n_layers
    t0 = time.time()
    w8a8 = float(ev.eval_ptq_acc([8] * 2 * n))
    info = {
        "model": f"{LARGE['zoo']}({', '.join(f'{k}={v}' for k, v in LARGE['kwargs'].items())})",
        "dataset": dataset,
        "layers": ev.layer_names,
        "schemes": 3 ** (2 * n),
        "train_samples": len(split.x_train),
        "test_samples": len(split.x_test),
        "calibration_batches": LARGE["calibration_batches"],
        "fp32_epochs": epochs,
        "fp32_trained_this_run": trained,
        "fp32_seconds": round(train_s, 1),
        "fp32_accuracy": fp32,
        "w8a8_ptq_accuracy": w8a8,
        "seconds_per_evaluation": round(time.time() - t0, 3),
    }
    return table, info


def run_large(table: TableEval, strategy: str, evaluations: int, seed: int, kind: str,
              budget: float) -> dict[str, Any]:  # fmt: skip
    table.log = []
    transform = large_transform(kind, table.n_layers)
    searcher = STRATEGIES[strategy](table, qtypes=QTYPES, seed=seed, dim_trans=transform)
    misses, miss_s = table.misses, table.miss_seconds
    t0 = time.time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        best_x, best_y = searcher.search(
            n_iterations_for(strategy, evaluations), "ptq_acc", kind, budget
        )
    wall = time.time() - t0
    evaluating = table.miss_seconds - miss_s
    cost = getattr(table, f"eval_{kind}")
    so_far, best = [], 0.0
    for scheme, value in table.log:
        if cost(scheme) <= budget:
            best = max(best, value)
        so_far.append(best)
    best_x = [int(b) for b in best_x]
    return {
        "strategy": strategy,
        "evaluations_budget": evaluations,
        "seed": seed,
        "space": repr(transform),
        "calls": len(table.log),
        "distinct": len({sch for sch, _ in table.log}),
        "new_evaluations": table.misses - misses,
        "best_x": best_x,
        "best_y": float(best_y),
        "best_x_feasible": cost(best_x) <= budget,
        "best_x_cost": cost(best_x),
        "best_seen": so_far[-1] if so_far else 0.0,
        "trajectory": [round(v, 6) for v in so_far],
        "searcher_seconds": round(wall - evaluating, 3),
        "evaluation_seconds": round(evaluating, 3),
    }


def reference_plan(owner: dict[str, Any], reference: float, table: TableEval,
                   cost: Any, budget: float) -> list[int]:  # fmt: skip
    """The plan of the reference: the one its run returned, or (when the run returned another
    plan) the first feasible memoized scheme of that accuracy."""
    if owner["best_y"] == reference:
        return list(owner["best_x"])
    return list(next(s for s, v in table.acc.items() if v == reference and cost(s) <= budget))


def evals_to_reach(trajectory: list[float], target: float) -> int | None:
    """The first evaluation (1-based) whose best so far is at least ``target``."""
    return next((i + 1 for i, v in enumerate(trajectory) if v >= target - 1e-12), None)


def large_part(cache_dir: Path, epochs: int, seeds: list[int]) -> dict[str, Any]:
    t_start = time.time()
    table, info = prepare_large(cache_dir, epochs)
    print(f"large: {info['model']} {len(info['layers'])} layers, FP32 {info['fp32_accuracy']:.4f}"
          f", {info['seconds_per_evaluation']} s/eval", flush=True)  # fmt: skip
    n = table.n_layers
    blocks: dict[str, Any] = {}
    for name in LARGE_BUDGETS:
        kind, frac = name.split(":")
        cost = getattr(table, f"eval_{kind}")
        budget = budget_value(table, kind, float(frac))
        runs = []
        for strategy in LARGE_STRATEGIES:
            for e in LARGE_EVALS:
                for seed in seeds:
                    runs.append(run_large(table, strategy, e, seed, kind, budget))
            print(f"  large {name} {strategy}: done ({time.time() - t_start:.0f} s, "
                  f"{table.misses} evaluated)", flush=True)  # fmt: skip
        table.save()
        reference = max(r["best_seen"] for r in runs)
        owner = max(runs, key=lambda r: (r["best_seen"], -r["calls"]))
        plan = reference_plan(owner, reference, table, cost, budget)
        for r in runs:
            r["evals_to_within"] = evals_to_reach(r["trajectory"], (1 - WITHIN) * reference)
            r["fraction"] = r["best_y"] / reference
        summary = {}
        for s in LARGE_STRATEGIES:
            summary[s] = {}
            for e in LARGE_EVALS:
                rs = [r for r in runs if r["strategy"] == s and r["evaluations_budget"] == e]
                reached = [r["evals_to_within"] for r in rs if r["evals_to_within"] is not None]
                summary[s][str(e)] = {
                    "mean_best": float(np.mean([r["best_y"] for r in rs])),
                    "min_best": float(np.min([r["best_y"] for r in rs])),
                    "mean_fraction": float(np.mean([r["fraction"] for r in rs])),
                    "all_feasible": all(r["best_x_feasible"] for r in rs),
                    "mean_calls": float(np.mean([r["calls"] for r in rs])),
                    "reached": f"{len(reached)}/{len(rs)}",
                    "mean_evals_to_within": float(np.mean(reached)) if reached else None,
                    "mean_searcher_seconds": float(np.mean([r["searcher_seconds"] for r in rs])),
                }
        blocks[name] = {
            "budget": budget,
            "w8a8_cost": cost([8] * 2 * n),
            "space": repr(large_transform(kind, n)),
            "reference": reference,
            "reference_plan": list(plan),
            "reference_found_by": f"{owner['strategy']} E={owner['evaluations_budget']} "
            f"seed {owner['seed']}",
            "summary": summary,
            "runs": runs,
        }
    info["evaluated"] = len(table.acc)
    info["evaluation_seconds_this_run"] = round(table.miss_seconds, 1)
    info["evaluated_this_run"] = table.misses
    return {"info": info, "budgets": blocks, "seeds": seeds,
            "total_seconds": round(time.time() - t_start, 1)}  # fmt: skip


def large_markdown(large: dict[str, Any]) -> list[str]:
    info = large["info"]
    out = [
        "",
        "## A model too large for exhaustive search (`--part large`)",
        "",
        f"* Model: `{info['model']}` on {info['dataset']} ({len(info['layers'])} quantizable "
        f"layers: {', '.join(info['layers'])}), FP32 {info['fp32_accuracy']:.4f} after "
        f"{info['fp32_epochs']} epochs ("
        + (
            f"{info['fp32_seconds']} s"
            if info["fp32_trained_this_run"]
            else "checkpoint of an earlier run"
        )
        + "), W8A8 PTQ "
        f"{info['w8a8_ptq_accuracy']:.4f}; {info['test_samples']} test samples, "
        f"{info['calibration_batches']} calibration batches of 64. Widths {{2, 4, 8}}: "
        f"{info['schemes']:.2e} schemes, about {info['seconds_per_evaluation']} s per "
        "evaluation here: exhaustive search is out of reach.",
        "* Space: a `DimTransform` of 10 dimensions, as seed 003 does for large models: "
        "W = A per layer under the BOPs budget, weights only (activations held at 8 bits) "
        "under the weight-size budget. The same transform for every strategy. The first "
        "evaluation of `mico`, `bayes` and `regression` is the widest uniform scheme within "
        "the budget (then random feasible ones); `random` and `haq` draw from the start.",
        "* Reference: the best budget-feasible accuracy any run evaluated (all strategies, "
        "evaluation budgets and seeds). 'evals to 0.5 %': the mean, over the runs that got "
        "there, of the evaluations until the best so far was within 0.5 % of that reference "
        "(reached: how many runs did). 'searcher s': the searcher's own wall time per run, the "
        "evaluations excluded (they are memoized and shared across runs, "
        f"{info['evaluated_this_run']} new ones took {info['evaluation_seconds_this_run']} s "
        f"in this run; {info['evaluated']} distinct schemes in all).",
        f"* `nlp` needs 1 + 10 dimensions x 2 lower widths + 1 = 22 evaluations whatever E is "
        f"(its E=20 runs use 22). Seeds {large['seeds']}; part total "
        f"{large['total_seconds']:.0f} s.",
        "",
        "| budget | space | reference (best found) | found by | best plan (w..., a...) |",
        "|---|---|---:|---|---|",
    ]
    for name, b in large["budgets"].items():
        out.append(
            f"| {budget_label(name)} ({b['budget']:.0f}) | {b['space']} | {b['reference']:.4f} "
            f"| {b['reference_found_by']} | {b['reference_plan']} |"
        )
    out += [
        "",
        "| budget | strategy | " + " | ".join(
            f"E={e} best (mean / min) | E={e} in budget | E={e} evals to 0.5 % (reached) "
            f"| E={e} searcher s" for e in LARGE_EVALS) + " |",
        "|---|---|" + "---:|---|---:|---:|" * len(LARGE_EVALS),
    ]  # fmt: skip
    for name, b in large["budgets"].items():
        for s in LARGE_STRATEGIES:
            cells = []
            for e in LARGE_EVALS:
                t = b["summary"][s][str(e)]
                reach = t["mean_evals_to_within"]
                cells += [
                    f"{t['mean_best']:.4f} / {t['min_best']:.4f}",
                    "yes" if t["all_feasible"] else "NO",
                    f"{reach:.1f} ({t['reached']})" if reach is not None else f"- ({t['reached']})",
                    f"{t['mean_searcher_seconds']:.2f}",
                ]
            out.append(f"| {budget_label(name)} | {s} | " + " | ".join(cells) + " |")
    out += ["", "### Outcome (large model)", ""] + large["outcome"] + [""]
    return out


def large_outcome(large: dict[str, Any]) -> list[str]:
    lines = []
    for name, b in large["budgets"].items():
        for e in LARGE_EVALS:
            at = {s: b["summary"][s][str(e)] for s in LARGE_STRATEGIES}
            ranked = sorted(at, key=lambda s: -at[s]["mean_best"])
            lines.append(
                f"* {budget_label(name)}, E={e}: "
                + ", ".join(f"`{s}` {at[s]['mean_best']:.4f}" for s in ranked)
                + f" (mean best accuracy; reference {b['reference']:.4f})."
            )
    bad = [(name, s, e) for name, b in large["budgets"].items() for s in LARGE_STRATEGIES
           for e in LARGE_EVALS if not b["summary"][s][str(e)]["all_feasible"]]  # fmt: skip
    lines.append("* Every returned plan was within its budget." if not bad
                 else f"* Plans over budget in: {bad}.")  # fmt: skip
    return lines


def versions() -> dict[str, str]:
    import optuna
    import sklearn
    import xgboost

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=Path(__file__).parent).stdout.strip()  # fmt: skip
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()} {platform.system()}, {torch.get_num_threads()} thread",
        "mico_commit": commit,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "sklearn": sklearn.__version__,
        "optuna": optuna.__version__,
        "xgboost": xgboost.__version__,
        "numpy": np.__version__,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--epochs", type=int, default=15, help="FP32 training epochs")
    p.add_argument("--cache-dir", type=Path,
                   default=Path(tempfile.gettempdir()) / "mico-search-bench")  # fmt: skip
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--models", nargs="+", default=list(MODELS))
    p.add_argument("--budgets", nargs="+", default=["bops:0.5", "bops:0.25", "size:0.5"],
                   help="cost:fraction of the W8A8 cost")  # fmt: skip
    p.add_argument("--part", choices=("all", "small", "large"), default="all",
                   help="small: the exhaustive 3-layer table; large: the DS-CNN comparison "
                   "(the other part's figures are kept from the results file)")  # fmt: skip
    p.add_argument("--large-seeds", type=int, default=2)
    p.add_argument("--large-epochs", type=int, default=20)
    args = p.parse_args(argv)
    previous: dict[str, Any] = {}
    if args.part != "all" and (args.out / "search.json").exists():
        previous = json.loads((args.out / "search.json").read_text())
    torch.set_num_threads(1)
    args.cache_dir.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    t_start = time.time()
    seeds = list(range(args.seeds))
    results: dict[str, Any] = {"budgets": args.budgets, "models": {}}
    if args.part != "small":
        results["large"] = large_part(args.cache_dir, args.large_epochs,
                                      list(range(args.large_seeds)))  # fmt: skip
        results["large"]["meta"] = versions()
        results["large"]["outcome"] = large_outcome(results["large"])
        print("\n".join(results["large"]["outcome"]), flush=True)
    elif "large" in previous:
        results["large"] = previous["large"]
    if args.part == "large" and previous.get("models"):
        for key in ("budgets", "models", "meta", "outcome", "never_worse"):
            results[key] = previous[key]
        _write_results(results, args.out, plot_small=False)
        return 0
    for zoo in args.models if args.part != "large" else []:
        table, info = prepare(zoo, MODELS[zoo], args.cache_dir, args.epochs)
        print(f"{zoo}: {info['seconds_per_evaluation']} s/eval, deterministic "
              f"{info['determinism_check']['deterministic']}", flush=True)  # fmt: skip
        info["exhaustive"] = exhaustive(table)
        print(f"{zoo}: exhaustive {info['exhaustive']}", flush=True)
        n = table.n_layers
        entry: dict[str, Any] = {"info": info, "budgets": {}}
        for name in args.budgets:
            kind, frac = name.split(":")
            cost = getattr(table, f"eval_{kind}")
            budget = budget_value(table, kind, float(frac))
            feasible = {s: a for s, a in table.acc.items() if cost(s) <= budget}
            reference = max(feasible.values())
            plan = max(feasible, key=feasible.__getitem__)
            runs = []
            for strategy in STRATEGIES:
                for e in EVAL_BUDGETS:
                    for seed in seeds:
                        runs.append(run_one(table, strategy, e, seed, kind, budget, reference))
                print(f"  {zoo} {name} {strategy}: done ({time.time() - t_start:.0f} s)",
                      flush=True)  # fmt: skip
            r500 = [run_one(table, "random", REFERENCE_RANDOM, seed, kind, budget, reference)
                    for seed in seeds]  # fmt: skip
            summary = {
                s: {str(e): summarize([r for r in runs if r["strategy"] == s
                                       and r["evaluations_budget"] == e]) for e in EVAL_BUDGETS}
                for s in STRATEGIES
            }  # fmt: skip
            for r in r500:
                r.pop("trajectory")
            entry["budgets"][name] = {
                "budget": budget,
                "w8a8_cost": cost([8] * 2 * n),
                "feasible": len(feasible),
                "reference": reference,
                "reference_plan": list(plan),
                "random_500": {**summarize(r500), "runs": r500},
                "summary": summary,
                "runs": runs,
            }
        if table.misses:
            table.save()
        results["models"][zoo] = entry
    results["meta"] = {**versions(), "seeds": seeds, "qtypes": QTYPES,
                       "evaluation_budgets": list(EVAL_BUDGETS),
                       "total_seconds": round(time.time() - t_start, 1)}  # fmt: skip
    results["outcome"] = outcome(results)
    results["never_worse"] = all(
        r["fraction"] >= r["best_seen_fraction"] - 1e-12
        for v in results["models"].values()
        for b in v["budgets"].values()
        for r in b["runs"]
    )
    _write_results(results, args.out, plot_small=True)
    print("\n".join(results["outcome"]))
    return 0


def _write_results(results: dict[str, Any], out: Path, plot_small: bool) -> None:
    if plot_small:
        plot(results, out / "search_trajectory.png")
    (out / "search.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "search.md").write_text(to_markdown(results))


if __name__ == "__main__":
    sys.exit(main())
