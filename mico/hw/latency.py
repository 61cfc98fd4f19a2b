"""A model's latency on a target, layer by layer: what ``mico latency`` prints and draws.

Three ways to get the figures, by the target's runner (:mod:`mico.targets.catalog`) and mode:

* ``measured`` on ``analytic-bitfusion``: BitFusion's cycle model per conv/linear layer;
* ``measured`` on ``host`` / ``qemu-rv32`` / ``verilator-vexriscv``: the generated C program
  itself, every node of one inference counted in an instrumented build (:mod:`mico.hw.nodes`),
  next to the release build's instructions (VexRiscv: cycles) per inference (and, on the host,
  wall time);
* ``proxy``: a fitted latency proxy's prediction per layer (:mod:`mico.hw.proxy`).

Each report says what its total includes.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mico.errors import ConfigError, MicoError
from mico.hw.layers import LayerShape
from mico.quant.arithmetic import format_bits
from mico.targets.catalog import TargetSpec

MODES = ("measured", "proxy")


@dataclass(frozen=True)
class LatencyRow:
    """One layer (or program node) and its latency in the report's unit."""

    name: str
    op: str
    bits: str  # "W/A", or "" for ops without weights
    value: float


@dataclass(frozen=True)
class LatencyReport:
    """Per-layer latency of a model on a target, the unit, and what the total covers."""

    target: TargetSpec
    mode: str
    unit: str
    rows: tuple[LatencyRow, ...]
    includes: str
    notes: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return float(sum(row.value for row in self.rows))

    @property
    def seconds(self) -> float | None:
        """The total in seconds when the unit is cycles and the target's clock is known."""
        if self.unit.endswith("cycles") and self.target.frequency_hz:
            return self.total / self.target.frequency_hz
        return None

    def share(self, row: LatencyRow) -> float:
        """``row``'s part of the total, in percent."""
        return 100.0 * row.value / self.total if self.total else 0.0

    def table(self) -> str:
        """The report as fixed-width text: one line per row, then the total."""
        width = max([len("layer"), *(len(r.name) for r in self.rows)])
        ops = max([len("op"), *(len(r.op) for r in self.rows)])
        unit = self.unit
        lines = [
            f"{'#':>3}  {'layer':<{width}}  {'op':<{ops}}  {'W/A':<5}  {unit:>14}  {'share':>6}"
        ]
        for i, row in enumerate(self.rows, start=1):
            lines.append(
                f"{i:>3}  {row.name:<{width}}  {row.op:<{ops}}  {row.bits:<5}  "
                f"{_number(row.value):>14}  {self.share(row):>5.1f}%"
            )
        lines.append(
            f"{'':>3}  {'total':<{width}}  {'':<{ops}}  {'':<5}  {_number(self.total):>14}  "
            f"{100.0 if self.total else 0.0:>5.1f}%"
        )
        seconds = self.seconds
        if seconds is not None:
            lines.append(f"= {seconds * 1e6:.2f} us at {self.target.frequency_hz / 1e6:g} MHz")
        lines.append(f"total includes: {self.includes}")
        lines += list(self.notes)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target.name,
            "mode": self.mode,
            "unit": self.unit,
            "total": self.total,
            "includes": self.includes,
            "layers": [
                {"name": r.name, "op": r.op, "bits": r.bits, "value": r.value,
                 "share": self.share(r)}
                for r in self.rows
            ],
            **self.extra,
        }  # fmt: skip


def _number(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() or abs(value) >= 100 else f"{value:.3g}"


def _bits(layer: LayerShape) -> str:
    return f"{format_bits(layer.w_bits)}/{format_bits(layer.a_bits)}"


def check_plan(layers: Sequence[LayerShape], target: TargetSpec) -> None:
    """Every layer's widths must be ones the target runs (its file's ``bits``)."""
    for layer in layers:
        target.check_bits(layer.w_bits, layer.a_bits, layer.name)


def analytic_report(layers: Sequence[LayerShape], target: TargetSpec) -> LatencyReport:
    """BitFusion's cycle model, per conv/linear layer (``analytic-bitfusion`` runner)."""
    from mico.hw.bitfusion import BitFusionConfig, model_cycles

    config = BitFusionConfig(frequency_hz=target.frequency_hz or BitFusionConfig.frequency_hz)
    estimate = model_cycles(layers, config)
    rows = tuple(
        LatencyRow(layer.name, layer.kind, _bits(layer), float(cycles.cycles))
        for layer, cycles in zip(layers, estimate.layers, strict=True)
    )
    bound = sum(c.bound == "memory" for c in estimate.layers)
    return LatencyReport(
        target, "measured", "cycles", rows,
        "the conv and linear layers, run back to back at batch 1 (BitFusion's cycle model "
        "has no pooling, activation or other ops between layers)",
        (f"{bound} of {len(rows)} layer(s) are memory-bound",),
    )  # fmt: skip


def proxy_report(
    layers: Sequence[LayerShape],
    target: TargetSpec,
    proxy_path: Path | None = None,
    graph: Any = None,
) -> LatencyReport:
    """A fitted latency proxy's prediction per layer plus its per-model overhead.

    Given the lowered ``graph`` of the program (:func:`mico.codegen.compile.lower`), a proxy
    fitted on whole programs (``mico profile`` on rv32, host, vexriscv) predicts every node,
    with the kernel path each conv / linear node takes; without it, only the conv and linear
    ``layers``."""
    from mico.hw.proxy import LatencyProxy

    path = proxy_path or default_proxy_path(target)
    if not path.is_file():
        raise ConfigError(
            f"no latency proxy for target '{target.name}' at '{path}'; fit one with mico profile "
            f"--target {target.name} or pass --proxy FILE"
        )
    proxy = LatencyProxy.load(path)
    rows: list[LatencyRow] = []
    bits = {layer.name: _bits(layer) for layer in layers}
    whole = graph is not None and proxy.programs > 0
    if whole:
        from mico.hw.opshape import graph_op_shapes

        ops = graph_op_shapes(graph, target.extensions)
        predictions = proxy.predict_ops(ops)
        for op, value in zip(ops, predictions, strict=True):
            if op.path != "alias":
                rows.append(LatencyRow(op.layer or op.name, op.kind, bits.get(op.layer, ""),
                                       value))  # fmt: skip
        counted = sum(op.path != "alias" for op in ops)
        rows.append(LatencyRow("(per-model overhead)", "-", "", proxy.model_overhead(counted)))
        includes = (
            "the proxy's predictions for every node of the program (quantize, conv, pooling, "
            "add, ...; each conv / linear node on the kernel path the generator picks) plus its "
            "fitted per-model overhead"
        )
    else:
        predictions = proxy.predict_layers(layers)
        rows = [
            LatencyRow(layer.name, layer.kind, _bits(layer), value)
            for layer, value in zip(layers, predictions, strict=True)
        ]
        if proxy.overhead:
            rows.append(LatencyRow("(per-model overhead)", "-", "", proxy.overhead))
        includes = (
            "the proxy's predictions for the conv and linear layers plus its fitted per-model "
            "overhead"
        )
        if proxy.programs:
            includes += " (not the program's other nodes: pooling, adds, input quantization)"
    errors = {
        kind: min(model.holdout_mape.values())
        for kind, model in proxy.kinds.items()
        if model.holdout_mape
    }
    notes = (
        "proxy held-out-shape MAPE: "
        + (", ".join(f"{k} {v:.1f}%" for k, v in sorted(errors.items())) or "not measured"),
        f"proxy: {path}",
    )
    if proxy.programs and not proxy.current():  # a program proxy: programs change with mico
        notes += (
            "the proxy was fitted on programs of other kernels or generator code: run mico "
            f"profile --target {target.name} again (it measures only what changed)",
        )
    return LatencyReport(
        target, "proxy", f"{proxy.unit} (predicted)", tuple(rows), includes, notes,
    )  # fmt: skip


def default_proxy_path(target: TargetSpec) -> Path:
    """Where ``mico profile --target NAME`` saves the target's proxy."""
    from mico.hw.measure import BACKENDS
    from mico.hw.profile import profile_path
    from mico.hw.programs import PROGRAM_RUNNERS, program_backend

    if target.name in BACKENDS:
        fingerprint = BACKENDS[target.name]().fingerprint
    elif target.runner in PROGRAM_RUNNERS:
        fingerprint = program_backend(target).fingerprint
    else:
        fingerprint = BACKENDS["bitfusion"]().fingerprint
    return profile_path(target.name, fingerprint).with_suffix(".proxy.json")


def program_report(
    compiled: Any,
    samples: np.ndarray,
    target: TargetSpec,
    layers: Sequence[LayerShape] = (),
    repeats: int = 5,
) -> LatencyReport:
    """Measure the compiled C program on a ``host``, ``qemu-rv32`` or ``verilator-vexriscv``
    target: each node of one inference in an instrumented build, and the release build's
    instructions (cycles on VexRiscv) per inference."""
    from mico.hw.nodes import node_costs
    from mico.targets import host, rv32

    project = compiled.project
    samples = np.asarray(samples, dtype=np.float32)
    by_node = {node.name: node for node in compiled.graph.nodes}
    bits = {layer.name: _bits(layer) for layer in layers}
    costs = node_costs(project, target.runner, samples[0], isa=target.isa)
    rows = []
    for name, count in costs.nodes:
        node = by_node.get(name)
        layer = node.attrs.get("layer") if node is not None else None
        op = node.op.removeprefix("mico.") if node is not None else "?"
        rows.append(LatencyRow(layer or name, op, bits.get(layer or "", ""), float(count)))
    rows.append(LatencyRow("(output copy)", "memcpy", "", float(costs.tail)))
    extra: dict[str, Any] = {}
    if target.runner == "host":
        host.build(project)
        profile = host.profile(project, samples, repeats=repeats)
        release = profile.instructions_per_inference
        first = int(profile.instructions[0])
        extra["first_inference_instructions"] = profile.first_inference
        low, high = profile.wall_spread
        wall = (
            f"wall time per inference (native, {repeats} runs of "
            f"{profile.inferences_per_timed_run} inferences): median "
            f"{profile.wall_median * 1e6:.2f} us, min {low * 1e6:.2f} us, max {high * 1e6:.2f} us"
        )
        extra["wall_seconds"] = {"median": profile.wall_median, "min": low, "max": high}
        how = "callgrind"
    elif target.runner == "verilator-vexriscv":
        from mico.hw.nodes import vexriscv_variant
        from mico.targets import vexriscv

        variant = vexriscv_variant(target.isa)
        vexriscv.build(project, variant)
        run = vexriscv.run(project, samples, variant)
        release, first = run.cycles_per_inference, int(run.cycles[0])
        wall = (
            f"instructions per inference: {run.instructions_per_inference:,} "
            f"({run.instructions_per_inference / max(release, 1):.2f} per cycle)"
        )
        how = f"VexRiscv {variant} RTL under verilator, mcycle"
    else:
        rv32.build(project)
        run = rv32.run(project, samples)
        release, first = run.instructions_per_inference, int(run.instructions[0])
        wall = ""
        how = "qemu -icount, instret"
    unit = "cycles" if target.runner == "verilator-vexriscv" else "instructions"
    extra[f"release_{unit}_per_inference"] = release
    extra[f"release_{unit}_sample0"] = first
    total = int(sum(row.value for row in rows))
    notes = [
        f"release build: {release:,} {unit} per inference (largest of {len(samples)} "
        f"samples, {how}); on sample 0 {first:,}",
        f"the rows come from an instrumented build of sample 0 (a marker after every node): "
        f"{total:,}, {total - first:+,} against the release build",
    ]
    if target.runner == "host":
        notes.append(
            f"counted after a warm-up inference on sample 0, which took "
            f"{extra['first_inference_instructions']:,} instructions (the host kernels lay out "
            "each layer's weights on its first call, once per program run)"
        )
    if wall:
        notes.append(wall)
    fit = memory_note(project, target)
    if fit:
        notes.append(fit)
    return LatencyReport(
        target, "measured", unit, tuple(rows),
        f"everything {project.name}_run executes for one inference: the first row also holds "
        "the input check, the last the copy of the output to the caller; no start-up, no I/O",
        tuple(notes), extra,
    )  # fmt: skip


def memory_note(project: Any, target: TargetSpec) -> str:
    """The model's flash and RAM against the target's, when the target file limits them.

    On ``qemu-rv32`` (and rv32imac VexRiscv) targets the sizes are the model and kernels
    linked alone for rv32 (:func:`mico.targets.rv32.model_sizes`), and the RAM adds the
    static bound of the run function's stack (:func:`mico.hw.stack.project_stack`: the
    kernels' frames are RAM the device must have, several KB on some paths); elsewhere the
    constants and the arena.
    """
    if target.flash_bytes is None and target.ram_bytes is None:
        return ""
    rv32imac = target.runner == "verilator-vexriscv" and target.isa == "rv32imac"
    ram_parts = ""
    if target.runner == "qemu-rv32" or rv32imac:
        from mico.hw.stack import project_stack
        from mico.targets.rv32 import model_sizes

        sizes = model_sizes(project)
        stack = project_stack(project).bytes if target.ram_bytes is not None else 0
        used = {"flash": sizes["flash"], "RAM": sizes["ram"] + stack}
        ram_parts = f": data + bss {sizes['ram']:,} B, stack bound {stack:,} B"
        how = "the model and kernels linked alone for rv32, and the run function's stack"
    else:
        used = {"flash": project.const_bytes, "RAM": project.arena.size}
        how = "constants and arena"
    parts, over = [], []
    for what, limit in (("flash", target.flash_bytes), ("RAM", target.ram_bytes)):
        if limit is None:
            continue
        detail = ram_parts if what == "RAM" else ""
        parts.append(
            f"{what} {used[what]:,} B of {limit:,} B ({100 * used[what] / limit:.1f}%{detail})"
        )
        if used[what] > limit:
            over.append(what)
    verdict = f"DOES NOT FIT the {' and '.join(over)}" if over else "fits"
    return f"memory ({how}): {', '.join(parts)}: {verdict}"


def plot_report(report: LatencyReport, path: str | Path, title: str = "") -> Path:
    """A horizontal bar chart of the rows (value and share) as a PNG, written atomically."""
    from matplotlib.figure import Figure

    out = Path(path)
    rows = list(report.rows)
    height = max(2.5, 0.35 * len(rows) + 1.5)
    fig = Figure(figsize=(9, height), dpi=100, layout="constrained")
    ax = fig.subplots()
    labels = [f"{r.name} ({r.bits})" if r.bits else r.name for r in rows]
    values = [r.value for r in rows]
    positions = np.arange(len(rows))
    ax.barh(positions, values, color="tab:blue", alpha=0.8)
    ax.set_yticks(positions, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(report.unit)
    for y, row in zip(positions, rows, strict=True):
        ax.text(row.value, y, f" {report.share(row):.1f}%", va="center", fontsize=7)
    if values:
        ax.set_xlim(0, max(values) * 1.15 or 1)
    head = title or f"latency on {report.target.name} ({report.mode})"
    ax.set_title(f"{head}: total {_number(report.total)} {report.unit}", fontsize=10)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".png", dir=out.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, format="png")
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


#: ``mico verify`` names of the targets whose programs are counted per node, and their runners
PER_LAYER_RUNNERS = {"host": "host", "rv32": "qemu-rv32", "vexriscv": "verilator-vexriscv"}
#: the check of per-layer rows against the release build. Instruction counts (host, rv32) are
#: exact and the glue is the markers' call sequences: at most this many instructions per marker
#: (measured: 8-9 per marker on rv32, 17 on the host, on small_cnn, lenet and dscnn)
GLUE_INSTRUCTIONS_PER_NODE = 32
#: cycles (VexRiscv) also move with the code layout (the instrumented program's code sits at
#: other addresses, so its 4 KiB caches conflict differently) and the stalls the markers cause:
#: the glue may be negative, and the check accepts this share of the release count either way
#: (measured: -2.8 % to +0.8 % on small_cnn, lenet and dscnn)
GLUE_CYCLES_SHARE = 0.05
GLUE = {
    "instructions": "the per-node markers' call sequences: passing the node's name, buffer and "
    "size, the call and the return, and the marker's entry and exit around its counter reads",
    "cycles": "the per-node markers' call sequences (as for instructions), the stalls they "
    "cause and the instrumented program's other code layout (its caches conflict differently): "
    "either sign",
}


@dataclass(frozen=True)
class PerLayer:
    """One inference of a compiled program counted node by node, held to the release build.

    ``report`` has one row per node of ``<name>_run`` (the instrumented build, sample 0) plus
    the output copy, each row's ``bits`` holding the node's plan layer name (or "");
    ``release`` is the release build's count for the same sample; ``glue`` = the rows' sum
    minus ``release``: what the per-node markers add (:data:`GLUE`).
    """

    report: LatencyReport
    release: int
    nodes: int

    @property
    def glue(self) -> int:
        return int(self.report.total) - self.release

    @property
    def bounds(self) -> tuple[int, int]:
        """The glue the check accepts: 0 to :data:`GLUE_INSTRUCTIONS_PER_NODE` per marker for
        instructions, :data:`GLUE_CYCLES_SHARE` of the release count either way for cycles."""
        if self.report.unit == "cycles":
            share = int(GLUE_CYCLES_SHARE * self.release)
            return -share, share
        return 0, GLUE_INSTRUCTIONS_PER_NODE * self.nodes

    @property
    def ok(self) -> bool:
        """The rows sum to the release figure plus a glue within :attr:`bounds`."""
        low, high = self.bounds
        return low <= self.glue <= high

    def check_text(self) -> str:
        unit, glue = self.report.unit, self.glue
        low, high = self.bounds
        return (
            f"the rows sum to {int(self.report.total):,} {unit}; the release build counts "
            f"{self.release:,} on the same sample: glue {glue:+,} ({glue / max(self.nodes, 1):+.1f}"
            f" per node marker, {100 * glue / max(self.release, 1):+.2f} %), accepted "
            f"{low:+,}..{high:+,}: {'ok' if self.ok else 'FAILED'}"
        )

    def to_dict(self) -> dict[str, Any]:
        data = self.report.to_dict()
        return {
            "unit": data["unit"],
            "sample": 0,
            "layers": [
                {
                    "node": r["name"],
                    "op": r["op"],
                    "layer": r["bits"],
                    "value": r["value"],
                    "share": r["share"],
                }
                for r in data["layers"]
            ],
            "total": data["total"],
            "release": self.release,
            "glue": self.glue,
            "glue_per_node": self.glue / max(self.nodes, 1),
            "glue_bounds": list(self.bounds),
            "glue_is": GLUE[self.report.unit],
            "ok": self.ok,
            "includes": data["includes"],
        }


def _counted_per_node(target: str) -> bool:
    """Whether ``target``'s file names a runner whose programs are counted node by node."""
    from mico.targets.catalog import get_target

    try:
        return get_target(target).runner in PER_LAYER_RUNNERS.values()
    except MicoError:
        return False


def per_layer(compiled: Any, sample: np.ndarray, target: str, timeout: float = 600) -> PerLayer:
    """Count every node of one inference of ``compiled`` on ``target`` (a ``mico verify``
    target: host under callgrind, rv32 under qemu, vexriscv on the RTL core) and the release
    build's count for the same sample. The release build must be built already (verify did)."""
    from mico.hw.nodes import node_costs, vexriscv_variant
    from mico.targets import host, rv32
    from mico.targets.catalog import get_target

    if target not in PER_LAYER_RUNNERS and not _counted_per_node(target):
        raise ConfigError(
            f"per-layer counts are measured on {', '.join(PER_LAYER_RUNNERS)} (and target files "
            f"of their runners), not '{target}'"
            + (" (qemu-user counts no instructions)" if target == "rv64" else "")
        )
    spec = get_target(target)
    project = compiled.project
    sample = np.asarray(sample, dtype=np.float32)
    costs = node_costs(project, spec.runner, sample, isa=spec.isa, timeout=timeout)
    by_node = {node.name: node for node in compiled.graph.nodes}
    rows = []
    for name, count in costs.nodes:
        node = by_node.get(name)
        layer = node.attrs.get("layer") if node is not None else None
        op = node.op.removeprefix("mico.") if node is not None else "?"
        rows.append(LatencyRow(name, op, layer or "", float(count)))
    rows.append(LatencyRow("(output copy)", "memcpy", "", float(costs.tail)))
    one = sample[None]
    if spec.runner == "host":
        with tempfile.TemporaryDirectory(prefix="mico-per-layer-") as tmp:
            counts, _ = host.steady_callgrind_counts(project, one, Path(tmp), timeout)
            release = int(counts[0])
    elif spec.runner == "verilator-vexriscv":
        from mico.targets import vexriscv

        release = int(vexriscv.run(project, one, vexriscv_variant(spec.isa), timeout).cycles[0])
    else:
        release = int(rv32.run(project, one, timeout).instructions[0])
    unit = "cycles" if spec.runner == "verilator-vexriscv" else "instructions"
    report = LatencyReport(
        spec, "measured", unit, tuple(rows),
        f"everything {project.name}_run executes for one inference (sample 0) in a build with a "
        "marker after every node: the first row also holds the input check, the last the copy "
        "of the output to the caller",
    )  # fmt: skip
    return PerLayer(report, release, len(costs.nodes))


#: targets whose fitted proxies ``mico compile`` and ``mico verify`` use for estimates
ESTIMATE_TARGETS = ("rv32", "host", "vexriscv")


def estimate_program(graph: Any, targets: Sequence[str] = ESTIMATE_TARGETS) -> dict[str, Any]:
    """Per-node latency *estimates* of a lowered program from each target's fitted proxy
    (``mico profile --target T``), for the targets that have one; nothing is run.

    Returns ``{target: {"estimated": True, "unit", "total", "nodes": [...], "proxy",
    "holdout_mape"}}``; a target whose proxy is missing or unreadable is left out (its reason
    under ``"skipped"``), so a compile never fails for want of a proxy.
    """
    from mico.hw.opshape import graph_op_shapes
    from mico.hw.proxy import LatencyProxy
    from mico.targets.catalog import get_target

    out: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    ops_by_isa: dict[tuple[str, ...], list] = {}
    for name in targets:
        try:
            spec = get_target(name)
            path = default_proxy_path(spec)
        except MicoError as exc:
            skipped[name] = str(exc)
            continue
        if not path.is_file():
            skipped[name] = f"no fitted proxy (mico profile --target {name})"
            continue
        try:
            proxy = LatencyProxy.load(path)
            if not proxy.programs:
                skipped[name] = "its proxy was fitted on single layers only, not whole programs"
                continue
            exts = tuple(spec.extensions)  # the kernel paths this target's program takes
            if exts not in ops_by_isa:
                ops_by_isa[exts] = graph_op_shapes(graph, exts)
            ops = ops_by_isa[exts]
            values = proxy.predict_ops(ops)
        except MicoError as exc:
            skipped[name] = str(exc)
            continue
        counted = sum(op.path != "alias" for op in ops)
        overhead = proxy.model_overhead(counted)
        total = float(sum(values) + overhead)
        nodes = [
            {"node": op.name, "op": op.kind, "layer": op.layer, "path": op.path,
             "value": round(v, 1), "share": 100.0 * v / total if total else 0.0}
            for op, v in zip(ops, values, strict=True)
            if op.path != "alias"
        ]  # fmt: skip
        out[name] = {
            "estimated": True,
            "unit": f"{proxy.unit} (estimated)",
            "total": round(total, 1),
            "overhead": round(overhead, 1),
            "nodes": nodes,
            "proxy": str(path),
            "holdout_mape": {
                kind: round(min(m.holdout_mape.values()), 2)
                for kind, m in sorted(proxy.kinds.items())
                if m.holdout_mape
            },
        }
    if skipped:
        out["skipped"] = skipped
    return out
