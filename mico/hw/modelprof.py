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
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mico.errors import ConfigError, MicoError
from mico.hw.keys import ProgramKey
from mico.hw.opshape import OpShape, graph_op_shapes
from mico.hw.profile import SCHEMA_VERSION

#: the plans each zoo model is measured at by default: uniform widths and a mixed plan
PLANS = ("W8A8", "W4A4", "W2A2", "mixed", "W4A8", "W8A4", "W2A8", "W1A1")
#: per-layer targets (mico verify's names) whose programs are counted node by node
TARGETS = ("rv32", "host", "vexriscv")
#: test samples a zoo program is calibrated on (its latency does not depend on them: a few
#: keep the calibration, most of a profile's Python time, short)
SAMPLES = 2


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
    #: the program measured (:mod:`mico.hw.keys`): when the record may be reused
    key: ProgramKey = field(default_factory=lambda: ProgramKey("", ""))

    def to_json(self) -> str:
        return json.dumps({
            "version": SCHEMA_VERSION, "model": self.model, "plan_name": self.plan_name,
            "release": self.release,
            "tail": self.tail, "seconds": self.seconds, "key": self.key.to_dict(),
            "nodes": [[op.to_dict(), value] for op, value in self.nodes],
        })  # fmt: skip

    @classmethod
    def from_json(cls, line: str) -> ModelRecord:
        data = json.loads(line)
        nodes = tuple((OpShape.from_dict(op), float(v)) for op, v in data["nodes"])
        return cls(data["model"], data["plan_name"], float(data["release"]), nodes,
                   float(data["tail"]), float(data.get("seconds", 0.0)),
                   ProgramKey.from_dict(data.get("key")))  # fmt: skip


def record_version(line: str) -> int | None:
    """The schema version a models file's line was written with (1 and 2 wrote none: 2), or
    None when the line is not a JSON object."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    return int(data.get("version", 2)) if isinstance(data, dict) else None


def read_records(path: Path) -> list[ModelRecord]:
    """Every record of a models file (a damaged last line, from an interrupted run, skipped).

    A record of another schema version is refused (:class:`~mico.errors.ConfigError`): its
    nodes carry the kernel path labels of that version (version 2 gave every form of the
    depthwise pair path one label), which a fit must not mix with this version's."""
    if not path.is_file():
        return []
    records = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        version = record_version(line)
        if version is not None and version != SCHEMA_VERSION:
            raise ConfigError(
                f"models profile {str(path)!r} line {number} is a record of schema version "
                f"{version} (kernel path labels of that version); this mico reads version "
                f"{SCHEMA_VERSION}: move the file away and measure the models again "
                "(mico profile --target T writes them to a file of this version)"
            )
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


@lru_cache(maxsize=64)
def layer_names(model: str) -> tuple[str, ...]:
    """The conv / linear layers of zoo ``model`` in execution order (what a plan names)."""
    from mico.deploy import DeployOptions, load_model
    from mico.hw.layers import model_layer_shapes

    probe = DeployOptions(model=model, mode="dynamic", out_dir=Path("unused"))
    quantized, _ = load_model(probe)
    return tuple(s.name for s in model_layer_shapes(quantized, quantized.example_input()))


def compile_program(
    model: str, plan_name: str, target: str, out_dir: Path, samples: int = SAMPLES
) -> tuple[Any, np.ndarray]:
    """Zoo ``model`` quantized statically under ``plan_name``, calibrated on ``samples`` of its
    test data and generated for ``target`` (its ISA extensions) into ``out_dir``: what
    ``mico compile`` does, without its reports (memory map, estimates), which a profile
    does not need."""
    from mico.codegen.compile import compile_model, token_example
    from mico.deploy import DeployOptions, load_model, samples_for
    from mico.hw.measure import generation_extensions
    from mico.quant import calibrate

    options = DeployOptions(
        model=model, plan=plan_text(plan_name, layer_names(model)), mode="static",
        out_dir=out_dir, samples=samples, force=True, targets=(target,),
    )  # fmt: skip
    quantized, zoo_name = load_model(options)
    inputs = samples_for(quantized, zoo_name, options)
    split = np.array_split(inputs, min(options.calibration_batches, len(inputs)))
    batches = [token_example(quantized, torch.from_numpy(b)) for b in split if len(b)]
    quantized.eval()
    calibrate(quantized, batches)
    compiled = compile_model(
        quantized, torch.from_numpy(inputs[:1]), out_dir, options.name, "static",
        calibration=batches, force=True, sample_inputs=inputs,
        isa_extensions=generation_extensions(target),
    )  # fmt: skip
    return compiled, inputs


def current_records(path: Path) -> list[ModelRecord]:
    """The records of ``path`` whose programs mico still generates (:meth:`ProgramKey.fresh`),
    the last one of each (model, plan)."""
    latest: dict[tuple[str, str], ModelRecord] = {}
    for record in read_records(path):
        if record.key.fresh():
            latest[(record.model, record.plan_name)] = record
    return list(latest.values())


def measure_model(
    model: str,
    plan_name: str,
    target: str = "rv32",
    samples: int = SAMPLES,
    timeout: float = 900,
    known: Sequence[ModelRecord] = (),
) -> ModelRecord:
    """Compile zoo ``model`` statically under ``plan_name`` and count it node by node on
    ``target`` (sample 0 of its test data).

    ``known``: earlier records of the same model and plan; when one of them measured a program
    identical to the one generated now (:meth:`ProgramKey.same_program`), its counts are
    returned under the new key without building or running anything.
    """
    from mico.hw.latency import per_layer
    from mico.hw.measure import generation_extensions, latency_kind
    from mico.hw.nodes import profiling_main

    if latency_kind(target) not in TARGETS:
        raise ConfigError(
            f"models are counted node by node on {', '.join(TARGETS)} (and target files of "
            f"their runners), not {target}"
        )
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mico-modelprof-") as tmp:
        compiled, inputs = compile_program(model, plan_name, target, Path(tmp) / model, samples)
        project = compiled.project
        key = ProgramKey.of_project(project.directory, profiling_main(project.name))
        ops = graph_op_shapes(compiled.graph, generation_extensions(target))
        shapes = {op.name: op for op in ops}
        same = next((r for r in reversed(known) if r.key.same_program(key)), None)
        if same is not None:  # measured before: the labels as now, the counts as measured
            nodes = tuple((shapes.get(op.name, op), v) for op, v in same.nodes)
            return replace(same, nodes=nodes, key=key,
                           seconds=round(time.perf_counter() - start, 1))  # fmt: skip
        _build(project, target)
        counted = per_layer(compiled, inputs[0], target, timeout=timeout)
    nodes = []
    tail = 0.0
    for row in counted.report.rows:
        if row.name == "(output copy)":
            tail = row.value
        elif row.name in shapes:
            nodes.append((shapes[row.name], row.value))
    return ModelRecord(model, plan_name, float(counted.release), tuple(nodes), tail,
                       round(time.perf_counter() - start, 1), key)  # fmt: skip


def _build(project: Any, target: str) -> None:
    """The release build of ``project`` for ``target``, as its own ``build`` makes it (the
    kernels' objects reused, :mod:`mico.hw.objcache`)."""
    from mico.hw.measure import latency_kind
    from mico.hw.objcache import build_for

    kind = latency_kind(target)
    variant = ""
    if kind == "vexriscv":
        from mico.hw.nodes import vexriscv_variant
        from mico.targets.catalog import get_target

        variant = vexriscv_variant(get_target(target).isa)
    build_for(project, kind, variant)


@dataclass
class ModelsRun:
    """What :func:`profile_models` did: the current record of every (model, plan) asked for,
    how many were measured, found identical to an earlier program, or reused unchanged."""

    records: list[ModelRecord]
    measured: int = 0
    same_program: int = 0
    reused: int = 0
    failed: list[str] = field(default_factory=list)  # "model plan: why"


def _measure_task(args: tuple[str, str, str, int, tuple[ModelRecord, ...]]) -> ModelRecord:
    """One (model, plan) in a worker process (one thread: the workers share the cores)."""
    torch.set_num_threads(1)
    model, plan, target, samples, known = args
    return measure_model(model, plan, target, samples, known=known)


def profile_models(
    path: Path,
    models: Sequence[str],
    plans: Sequence[str] = PLANS,
    target: str = "rv32",
    log: Callable[[str], None] = print,
    jobs: int = 1,
    samples: int = SAMPLES,
) -> ModelsRun:
    """The current record of every (model, plan), measuring those ``path`` lacks.

    A record in the file is reused when its program would be generated the same now
    (:meth:`ProgramKey.fresh`: the same generator, the same kernel files it compiled); the
    others are generated again and measured (unless the program is byte-identical to the
    recorded one). New records are appended as they finish; ``jobs`` programs are measured
    at once (worker processes).
    """
    stored = read_records(path)
    by_pair: dict[tuple[str, str], list[ModelRecord]] = {}
    for record in stored:
        by_pair.setdefault((record.model, record.plan_name), []).append(record)
    wanted = [(m, p) for m in models for p in plans]
    current: dict[tuple[str, str], ModelRecord] = {}
    for pair in wanted:
        fresh = [r for r in by_pair.get(pair, []) if r.key.fresh()]
        if fresh:
            current[pair] = fresh[-1]
    todo = [pair for pair in wanted if pair not in current]
    run = ModelsRun([], reused=len(wanted) - len(todo))
    path.parent.mkdir(parents=True, exist_ok=True)

    def done(record: ModelRecord) -> None:
        pair = (record.model, record.plan_name)
        known = by_pair.get(pair, [])
        if any(r.key.same_program(record.key) and r.release == record.release for r in known):
            run.same_program += 1
        else:
            run.measured += 1
        with path.open("a") as handle:
            handle.write(record.to_json() + "\n")
        current[pair] = record
        log(f"  {record.model} {record.plan_name}: {record.release:,.0f} "
            f"({record.seconds:.0f} s)")  # fmt: skip

    def failed(task: tuple, exc: Exception) -> None:
        run.failed.append(f"{task[0]} {task[1]}: {exc}")
        log(f"  {task[0]} {task[1]}: not measured ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0][:200]})")  # fmt: skip

    tasks = [(m, p, target, samples, tuple(by_pair.get((m, p), ()))) for m, p in todo]
    if jobs <= 1 or len(tasks) <= 1:
        for task in tasks:
            try:
                record = measure_model(*task[:4], known=task[4])
            except MicoError as exc:  # a plan this model cannot take: said, not fatal
                failed(task, exc)
                continue
            done(record)
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
            futures = {pool.submit(_measure_task, task): task for task in tasks}
            for future in as_completed(futures):
                try:
                    record = future.result()
                except MicoError as exc:
                    failed(futures[future], exc)
                    continue
                done(record)
    run.records = [current[pair] for pair in wanted if pair in current]
    return run


def run_models(
    path: Path,
    models: Sequence[str],
    plans: Sequence[str] = PLANS,
    target: str = "rv32",
    log: Callable[[str], None] = print,
    jobs: int = 1,
) -> list[ModelRecord]:
    """The current record of every (model, plan) (:func:`profile_models`), measuring what
    ``path`` lacks or holds only for other code."""
    return profile_models(path, models, plans, target, log, jobs).records
