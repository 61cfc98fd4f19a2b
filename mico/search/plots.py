"""The pictures of a ``mico tune`` run (matplotlib, Agg canvas, files written atomically).

* ``trajectory.png``: objective of each trial and the best feasible so far, by evaluation;
* ``pareto.png``: objective against the primary cost, feasible and over-budget trials apart,
  the budget as a line and the Pareto front of the feasible trials;
* ``bits.png``: the best plan's bit-width per layer, weights and activations, as a heat-map.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _save(fig: Any, path: Path) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".png", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, format="png")
        mask = os.umask(0o022)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _figure(size: tuple[float, float] = (7, 4.5)) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=size, dpi=100, layout="constrained")


def _finished(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("state", "COMPLETE") == "COMPLETE"
            and not math.isnan(float(r["objective"]))]  # fmt: skip


def plot_trajectory(rows: Sequence[dict[str, Any]], path: str | Path, objective: str) -> Path:
    """Each trial's objective (dots) and the best feasible so far (steps), by evaluation."""
    rows = _finished(rows)
    fig = _figure()
    ax = fig.subplots()
    xs = list(range(1, len(rows) + 1))
    best: list[float] = []
    current = math.nan
    for r in rows:
        if r.get("feasible", True) and (math.isnan(current) or r["objective"] > current):
            current = float(r["objective"])
        best.append(current)
    pairs = list(zip(xs, rows, strict=True))
    ok = [(x, r["objective"]) for x, r in pairs if r.get("feasible", True)]
    bad = [(x, r["objective"]) for x, r in pairs if not r.get("feasible", True)]
    if ok:
        ax.scatter(*zip(*ok, strict=True), s=14, color="tab:blue", label="feasible trial")
    if bad:
        ax.scatter(*zip(*bad, strict=True), s=14, marker="x", color="tab:red", label="over budget")
    ax.step(xs, best, where="post", color="black", label="best feasible so far")
    ax.set_xlabel("evaluations")
    ax.set_ylabel(objective)
    ax.set_title(f"mico tune: {len(rows)} evaluations")
    if rows:
        ax.legend(loc="best", fontsize=8)
    return _save(fig, Path(path))


def plot_pareto(
    rows: Sequence[dict[str, Any]], path: str | Path, cost: str, budget: float, objective: str
) -> Path:
    """Objective against ``cost``: feasible / over-budget trials, budget line, Pareto front."""
    rows = [r for r in _finished(rows) if not math.isnan(float(r.get(cost, math.nan)))]
    fig = _figure()
    ax = fig.subplots()
    ok = [(float(r[cost]), float(r["objective"])) for r in rows if r.get("feasible", True)]
    bad = [(float(r[cost]), float(r["objective"])) for r in rows if not r.get("feasible", True)]
    if ok:
        ax.scatter(*zip(*ok, strict=True), s=16, color="tab:blue", label="feasible")
        front, top = [], -math.inf
        for c, v in sorted(ok, key=lambda p: (p[0], -p[1])):
            if v > top:
                front.append((c, v))
                top = v
        ax.step(*zip(*front, strict=True), where="post", color="tab:blue", alpha=0.6,
                label="Pareto front")  # fmt: skip
    if bad:
        ax.scatter(*zip(*bad, strict=True), s=16, marker="x", color="tab:red", label="infeasible")
    ax.axvline(budget, color="gray", linestyle="--", label=f"{cost} budget {budget:g}")
    ax.set_xlabel(cost)
    ax.set_ylabel(objective)
    ax.set_title(f"{objective} vs {cost}")
    ax.legend(loc="best", fontsize=8)
    return _save(fig, Path(path))


def plot_bits(layer_names: Sequence[str], scheme: Sequence[Any], path: str | Path) -> Path:
    """The plan's widths as a 2 x layers heat-map (rows: weights, activations)."""
    import numpy as np

    n = len(layer_names)
    flat = list(scheme)
    if len(flat) == 2 and all(isinstance(x, list | tuple) for x in flat):
        flat = [*flat[0], *flat[1]]
    grid = np.array([[float(b) for b in flat[:n]], [float(b) for b in flat[n:]]])
    fig = _figure((max(4.0, 0.8 * n + 2), 2.8))
    ax = fig.subplots()
    image = ax.imshow(grid, cmap="viridis", vmin=1, vmax=8, aspect="auto")
    for (i, j), bits in np.ndenumerate(grid):
        text = "1.58" if math.isclose(bits, 1.58) else f"{bits:g}"
        ax.text(j, i, text, ha="center", va="center", color="white" if bits < 5 else "black")
    ax.set_xticks(range(n), list(layer_names), rotation=45, ha="right", fontsize=8)
    ax.set_yticks([0, 1], ["weights", "activations"])
    ax.set_title("bits per layer (best plan)")
    fig.colorbar(image, ax=ax, label="bits")
    return _save(fig, Path(path))
