"""Whole compiled models measured node by node: the in-context training set of program proxies.

A layer measured alone (:mod:`mico.hw.programs`) reads signed inputs, writes an unrequantized
output and sits next to no pooling or add: inside a model the same layer often takes another
kernel path and the nodes between layers cost as much as small layers. So program proxies also
learn from real compiled zoo models: each (model, plan) is compiled statically, its release
build counted on sample 0 and every node counted in the instrumented build
(:func:`mico.hw.latency.per_layer`); each node is stored with its :class:`OpShape`. Records
are appended to a JSON-lines file as they are measured (keyed by model and plan name), so an
interrupted run resumes.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mico.errors import ConfigError
from mico.hw.opshape import OpShape, graph_op_shapes

#: the plans each zoo model is measured at by default: uniform widths and a mixed plan
PLANS = ("W8A8", "W4A4", "W2A2", "mixed", "W4A8", "W8A4", "W2A8")
#: per-layer targets (mico verify's names) whose programs are counted node by node
TARGETS = ("rv32", "host", "vexriscv")


def plan_text(plan_name: str, layers: Sequence[str]) -> str:
    """A plan string for ``layers``: ``WxAy`` uniform, or ``mixed`` (8/8 at both ends, 4/4 and
    2/4 alternating inside)."""
    if plan_name == "mixed":
        bits = ["2/4" if i % 2 else "4/4" for i in range(len(layers))]
        if bits:
            bits[0] = bits[-1] = "8/8"
        return ",".join(f"{layer}={b}" for layer, b in zip(layers, bits, strict=True))
    if len(plan_name) != 4 or plan_name[0] != "W" or plan_name[2] != "A":
        raise ConfigError(f"plan name '{plan_name}': use WxAy (W4A8) or mixed")
    return ",".join(f"{layer}={plan_name[1]}/{plan_name[3]}" for layer in layers)


def models_path(profile: Path) -> Path:
    """The models file kept beside a profile CSV (same target, configuration and kernels)."""
    return profile.with_suffix(".models.jsonl")


@dataclass(frozen=True)
class ModelRecord:
    """One (model, plan) measured on a target: the release count and every node's."""

    model: str
    plan_name: str
    release: float
    nodes: tuple[tuple[OpShape, float], ...]
    tail: float
    seconds: float = 0.0

    def to_json(self) -> str:
        return json.dumps({
            "model": self.model, "plan_name": self.plan_name, "release": self.release,
            "tail": self.tail, "seconds": self.seconds,
            "nodes": [[op.to_dict(), value] for op, value in self.nodes],
        })  # fmt: skip

    @classmethod
    def from_json(cls, line: str) -> ModelRecord:
        data = json.loads(line)
        nodes = tuple((OpShape.from_dict(op), float(v)) for op, v in data["nodes"])
        return cls(data["model"], data["plan_name"], float(data["release"]), nodes,
                   float(data["tail"]), float(data.get("seconds", 0.0)))  # fmt: skip


def read_records(path: Path) -> list[ModelRecord]:
    """Every record of a models file (a damaged last line, from an interrupted run, skipped)."""
    if not path.is_file():
        return []
    records = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(ModelRecord.from_json(line))
        except (ValueError, KeyError, TypeError):
            lines = len(path.read_text().splitlines())
            if number == lines:
                continue  # the run was interrupted while writing it
            raise ConfigError(
                f"models profile {str(path)!r} line {number} is damaged; move the file away"
            ) from None
    return records


def measure_model(
    model: str, plan_name: str, target: str = "rv32", samples: int = 8, timeout: float = 900
) -> ModelRecord:
    """Compile zoo ``model`` statically under ``plan_name`` and count it node by node on
    ``target`` (sample 0 of its test data)."""
    from mico.deploy import DeployOptions, compile_from_options, load_model
    from mico.hw.latency import per_layer
    from mico.hw.layers import model_layer_shapes

    if target not in TARGETS:
        raise ConfigError(f"models are counted node by node on {', '.join(TARGETS)}, not {target}")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mico-modelprof-") as tmp:
        probe = DeployOptions(model=model, mode="dynamic", out_dir=Path(tmp) / "unused")
        quantized, _ = load_model(probe)
        names = [s.name for s in model_layer_shapes(quantized, quantized.example_input())]
        options = DeployOptions(
            model=model, plan=plan_text(plan_name, names), mode="static",
            out_dir=Path(tmp) / model, samples=samples, force=True,
        )  # fmt: skip
        compiled, inputs = compile_from_options(options, log=lambda _m: None)
        _build(compiled.project, target)
        counted = per_layer(compiled, inputs[0], target, timeout=timeout)
    shapes = {op.name: op for op in graph_op_shapes(compiled.graph)}
    nodes = []
    tail = 0.0
    for row in counted.report.rows:
        if row.name == "(output copy)":
            tail = row.value
        elif row.name in shapes:
            nodes.append((shapes[row.name], row.value))
    return ModelRecord(model, plan_name, float(counted.release), tuple(nodes), tail,
                       round(time.perf_counter() - start, 1))  # fmt: skip


def _build(project: Any, target: str) -> None:
    if target == "rv32":
        from mico.targets import rv32

        rv32.build(project)
    elif target == "host":
        from mico.targets import host

        host.build(project)
    else:
        from mico.hw.nodes import vexriscv_variant
        from mico.targets import vexriscv
        from mico.targets.catalog import get_target

        vexriscv.build(project, vexriscv_variant(get_target(target).isa))


def run_models(
    path: Path,
    models: Sequence[str],
    plans: Sequence[str] = PLANS,
    target: str = "rv32",
    log: Callable[[str], None] = print,
) -> list[ModelRecord]:
    """Measure every (model, plan) not yet in ``path``, appending each record as it is done;
    returns every record of the file."""
    done = {(r.model, r.plan_name) for r in read_records(path)}
    path.parent.mkdir(parents=True, exist_ok=True)
    for model in models:
        for plan in plans:
            if (model, plan) in done:
                continue
            record = measure_model(model, plan, target)
            with path.open("a") as handle:
                handle.write(record.to_json() + "\n")
            done.add((model, plan))
            log(f"  {model} {plan}: {record.release:,.0f} ({record.seconds:.0f} s)")
    return read_records(path)
