"""``mico tune``: search per-layer bit-widths of a model under budgets, write the best plan.

One budget per cost (``bops``, ``size``, ``macs``, ``latency``), given as an absolute figure
with units (``size=4KB``, ``bops=1.5M``) or as a share of the W8A8 cost (``bops=50%``). The
searcher optimises against the first budget and every result is checked against all of them.
The run directory (written whole, see :mod:`mico.atomic`) holds ``best_plan.yaml`` (loadable by
``mico compile --plan``), ``trials.csv`` and ``report.md`` / ``report.json``.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mico.errors import PlanError

Log = Callable[[str], None]
COSTS = ("bops", "size", "macs", "latency")
UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "kb": 1e3, "mb": 1e6, "kib": 1024, "mib": 2**20}


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


def tune(
    evaluator: Any,
    budgets: list[Budget],
    strategy: str = "nlp",
    trials: int = 10,
    qtypes: list[int] | None = None,
    seed: int = 0,
    log: Log = print,
) -> TuneResult:
    """Search with ``strategy`` against the first budget; every budget is respected."""
    from mico.search.strategies import STRATEGIES as strategies

    if strategy not in strategies:
        raise PlanError(
            f"unknown strategy {strategy!r}; choose one of: {', '.join(sorted(strategies))}"
        )
    searcher = strategies[strategy](evaluator, qtypes=qtypes or [2, 4, 8], seed=seed)
    n = evaluator.n_layers
    full = [8] * (2 * n)
    limits = {b.cost: b.resolve(searcher.cost(full, b.cost)) for b in budgets}
    for cost, limit in limits.items():
        searcher._check_budget(cost, limit)  # refused before any training or evaluation
    primary = budgets[0].cost
    log(f"searching {n} layers x {searcher.qtypes} with {strategy} under "
        + ", ".join(f"{k} <= {v:g}" for k, v in limits.items()))  # fmt: skip
    best_x, best_y = searcher.search(trials, evaluator.objective, primary, limits[primary])
    for cost, limit in limits.items():  # secondary budgets: keep the best scheme within all
        if searcher.cost(best_x, cost) > limit:
            fits = [(s, v) for s, v, _ in searcher.history
                    if all(searcher.cost(s, c) <= lim for c, lim in limits.items())]  # fmt: skip
            if not fits:
                best_x = [searcher.qtypes[0]] * (2 * n)
                best_y = evaluator.eval_f(best_x)
            else:
                best_x, best_y = max(fits, key=lambda t: t[1])
            break
    rows = []
    for i, (s, v, _) in enumerate(searcher.history):
        row: dict[str, Any] = {"trial": i, "scheme": " ".join(map(str, s)), "objective": v}
        row.update({c: searcher.cost(s, c) for c in limits})
        rows.append(row)
    costs = {c: searcher.cost(best_x, c) for c in limits}
    return TuneResult(list(best_x), float(best_y), costs, limits, rows)


def write_run(result: TuneResult, layer_names: list[str], out: Path) -> None:
    """``best_plan.yaml``, ``trials.csv``, ``report.md`` and ``report.json`` into ``out``."""
    from mico.quant import as_plan

    plan = as_plan(result.best_scheme, layer_names)
    (out / "best_plan.yaml").write_text(plan.to_yaml())
    with (out / "trials.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(result.trials[0]) if result.trials else
                                ["trial"])  # fmt: skip
        writer.writeheader()
        writer.writerows(result.trials)
    data = {
        "best_plan": plan.to_string(),
        "best_accuracy": result.best_accuracy,
        "costs": result.costs,
        "budgets": result.budgets,
        "evaluations": len(result.trials),
    }
    (out / "report.json").write_text(json.dumps(data, indent=2) + "\n")
    lines = [
        "# mico tune",
        "",
        f"Best plan `{plan.to_string()}`: accuracy {result.best_accuracy:.4f} after "
        f"{len(result.trials)} evaluations.",
        "",
        "| cost | best plan | budget |",
        "|---|---:|---:|",
        *[f"| {c} | {result.costs[c]:g} | {result.budgets[c]:g} |" for c in result.costs],
        "",
    ]
    (out / "report.md").write_text("\n".join(lines))
