"""The memory map of an arena plan: a picture (PNG) and a table of per-buffer offsets.

The picture puts the schedule on the x axis (a buffer occupies its lifetime, steps ``start``
to ``end`` inclusive) and arena offsets in bytes on the y axis: one rectangle per buffer,
labelled with its name where the label fits, a line at the arena size and one at the lower
bound (the peak of simultaneously live bytes), so the planner's gap is visible at a glance.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mico.codegen.planner import ArenaPlan

_FONT = 7  # label font size, points
_CHAR_WIDTH = 0.6  # average character width, in font sizes


def memory_map_rows(plan: ArenaPlan) -> list[dict[str, Any]]:
    """One row per buffer (name, offset, size, start, end, and ``overwrites``: the buffer it is
    written over in place, or None), sorted by offset then lifetime."""
    rows = [
        {
            "name": b.name,
            "offset": int(plan.offsets[b.name]),
            "size": int(b.size),
            "start": int(b.start),
            "end": int(b.end),
            "overwrites": plan.ties[b.name][0] if b.name in plan.ties else None,
        }
        for b in plan.buffers
    ]
    return sorted(rows, key=lambda r: (r["offset"], r["start"], r["name"]))


def _title(plan: ArenaPlan, title: str | None) -> str:
    figures = (
        f"arena {plan.size} B, lower bound {plan.lower_bound} B, "
        f"ratio {plan.ratio:.3f}, align {plan.align}"
    )
    return f"{title}\n{figures}" if title else figures


def _format_bits(bits: object) -> str:
    from mico.quant.arithmetic import format_bits

    try:
        return format_bits(bits)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(bits)


def plot_memory_map(
    plan: ArenaPlan,
    path: str | Path,
    title: str | None = None,
    bits: Mapping[str, object] | None = None,
) -> Path:
    """Draw ``plan`` as a PNG at ``path`` (written atomically) and return the path.

    ``bits`` optionally maps buffer names to their storage bit-width (packed activations):
    buffers are then coloured by width, with a legend, and labels show the width.
    """
    from matplotlib import colormaps
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch, Rectangle
    from matplotlib.ticker import MaxNLocator

    path = Path(path)
    rows = memory_map_rows(plan)
    steps_lo = min((r["start"] for r in rows), default=0)
    steps_hi = max((r["end"] for r in rows), default=0) + 1
    top = max(plan.size, plan.lower_bound, max((r["offset"] + r["size"] for r in rows), default=0))

    fig = Figure(figsize=(10, 6), dpi=100, layout="constrained")
    ax = fig.subplots()
    ax.set_xlim(steps_lo, steps_hi)
    ax.set_ylim(0, top * 1.06 if top else 1)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("schedule step (buffer lifetime)")
    ax.set_ylabel("arena offset (bytes)")
    ax.set_title(_title(plan, title), fontsize=10)

    tab20 = colormaps["tab20"]
    palette = [
        tab20(i) for i in (0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19)
    ]
    widths = sorted(
        {str(_format_bits(bits[r["name"]])) for r in rows if bits and r["name"] in bits}
    )
    colour_of_width = {w: palette[i % len(palette)] for i, w in enumerate(widths)}
    # The axes' size in points, to decide whether a label fits in its rectangle.
    fig_w, fig_h = fig.get_size_inches() * 72
    ax_w, ax_h = 0.75 * fig_w, 0.75 * fig_h  # the legend sits to the right
    span_x, span_y = steps_hi - steps_lo, ax.get_ylim()[1]
    for i, r in enumerate(rows):
        width_bits = _format_bits(bits[r["name"]]) if bits and r["name"] in bits else None
        if width_bits is not None:
            colour = colour_of_width[width_bits]
        else:  # without widths a colour per buffer; with them, grey for buffers without one
            colour = "lightgrey" if colour_of_width else palette[i % len(palette)]
        x0, x1 = r["start"], r["end"] + 1
        ax.add_patch(
            Rectangle(
                (x0, r["offset"]),
                x1 - x0,
                r["size"],
                facecolor=colour,
                edgecolor="black",
                linewidth=0.5,
                alpha=0.7,
            )
        )
        label = r["name"] if width_bits is None else f"{r['name']} ({width_bits}b)"
        box_w = (x1 - x0) / span_x * ax_w
        box_h = r["size"] / span_y * ax_h
        if box_h >= 1.3 * _FONT and box_w >= len(label) * _FONT * _CHAR_WIDTH + 2:
            ax.text(
                (x0 + x1) / 2,
                r["offset"] + r["size"] / 2,
                label,
                ha="center",
                va="center",
                fontsize=_FONT,
                clip_on=True,
            )
    handles: list[Any] = [
        ax.axhline(plan.size, color="red", linewidth=1.2, label=f"arena {plan.size} B"),
        ax.axhline(
            plan.lower_bound,
            color="green",
            linestyle="--",
            linewidth=1.2,
            label=f"lower bound {plan.lower_bound} B",
        ),
    ]
    handles += [Patch(facecolor=c, alpha=0.7, label=f"{w} bit") for w, c in colour_of_width.items()]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    if not rows:
        ax.text(0.5, 0.5, "no buffers", transform=ax.transAxes, ha="center", va="center")

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".png", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, format="png")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
