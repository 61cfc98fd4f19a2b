"""``mico compile`` and ``mico verify``: a quantized model to a C project, then proof.

Compositions only: the model comes from the zoo or a checkpoint (:mod:`mico.train`), the plan
from :mod:`mico.quant`, the project from :mod:`mico.codegen.compile`, the runs from
:mod:`mico.targets` and the comparisons from :mod:`mico.execute`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from mico.codegen.compile import (
    DEPLOYABLE_MODELS,
    DYNAMIC_ONLY_MODELS,
    MODES,
    CompiledModel,
    check_float_input,
    compile_model,
    token_example,
    token_vocabulary,
)
from mico.codegen.memory_map import memory_map_rows, plot_memory_map
from mico.errors import BuildError, CompileError, DatasetError, MicoError
from mico.execute.layerwise import LayerDifference, first_difference
from mico.execute.verify import Agreement, compare_outputs
from mico.userfiles import path_kind

Log = Callable[[str], None]
TARGETS = ("host", "rv32", "rv64", "vexriscv")


@dataclass
class DeployOptions:
    """Which model, how to quantize and compile it, and where to run it."""

    model: str | None = None  # a zoo model name ...
    checkpoint: Path | None = None  # ... or a checkpoint written by `mico train`
    plan: str | None = None  # for a zoo model: layer=W/A,... or uniform "W/A" (default 8/8)
    mode: str | None = None  # None: the checkpoint's mode (static if it holds static scales)
    out_dir: Path = Path("out/compile")
    name: str = "model"
    dataset: str | None = None  # calibration and verification samples (default: the model's)
    samples: int = 32
    calibration_batches: int = 4
    seed: int = 0
    per_channel: bool = False
    act_asymmetric: bool = False  # zero-point activation codes (QuantConfig.act_asymmetric)
    targets: tuple[str, ...] = ("host",)
    cc: str = "gcc"
    sanitize: bool = False
    rtol: float = 1e-5
    force: bool = False  # replace an output directory mico did not write
    samples_origin: str = ""  # set by samples_for: which data the samples are (for reports)
    model_args: str | None = None  # constructor arguments of a model from a file (JSON/YAML)
    input_shape: str | None = None  # one sample's shape, for models from files
    per_layer: bool = False  # verify: count every node of sample 0 (host, rv32, vexriscv)
    weights_file: bool = False  # constants in <name>.bin, loaded at run time (not compiled in)
    patch: str = "off"  # "auto": the first layers in row bands when that lowers the arena
    prefer: str = "speed"  # "size": the plain kernels only (least flash, slower)


@dataclass
class TargetResult:
    target: str
    agreement: Agreement
    instructions_per_inference: int | None = None
    cycles_per_inference: int | None = None  # cycle-accurate targets (vexriscv)
    #: bytes of stack an inference used below main (rv32, measured; "> N": deeper than the probe)
    stack_bytes: str | None = None
    difference: LayerDifference | None = None
    per_layer: dict[str, Any] | None = None  # options.per_layer: rows and check (or why none)
    outputs: np.ndarray | None = field(default=None, repr=False)  # what the program computed

    @property
    def ok(self) -> bool:
        return self.agreement.all_exact or (
            self.agreement.rtol > 0 and self.agreement.all_within_tolerance
        )


@dataclass
class DeployResult:
    compiled: CompiledModel
    results: list[TargetResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)


def _uniform(text: str, names: list[str]) -> str:
    """``"4/8"`` means every layer at W4/A8; a path or anything else is left to QuantPlan.load."""
    if "=" in text or text.endswith((".yaml", ".yml")) or path_kind(text) != "missing":
        return text
    if not re.fullmatch(r"[^=,/\s]+/[^=,/\s]+", text.strip()):
        return text  # neither W/A nor a file: QuantPlan.load names the problem
    return ",".join(f"{name}={text}" for name in names)


def checkpoint_mode(model: nn.Module) -> str:
    """The mode a loaded model compiles in by default: static when its layers hold calibrated
    static activation scales (as `mico train` writes them), else dynamic."""
    from mico.quant import bit_layers

    layers = bit_layers(model).values()
    if layers and all(layer.qconfig.act_mode == "static" for layer in layers):
        return "static"
    return "dynamic"


def load_model(options: DeployOptions) -> tuple[nn.Module, str | None]:
    """The quantized model to compile and the name of its zoo entry (when known)."""
    from mico.quant import QuantConfig, quantize_model
    from mico.train.checkpoint import load_checkpoint, read_checkpoint

    if options.mode is not None and options.mode not in MODES:
        raise CompileError(f"unknown mode '{options.mode}'; use --mode {' or --mode '.join(MODES)}")
    from mico.models.resolve import is_model_spec

    if options.model is not None and options.checkpoint is not None:
        if not is_model_spec(options.model):
            raise CompileError(
                "give a zoo model name or --checkpoint, not both (a checkpoint of a zoo model "
                "rebuilds it); only a model from a file is named beside its checkpoint"
            )
        from mico.train.checkpoint import load_file_model_checkpoint

        model = load_file_model_checkpoint(
            options.checkpoint, options.model, options.model_args, options.input_shape
        )
        if options.mode is None:
            options.mode = checkpoint_mode(model)
        return model, None
    if (options.model is None) == (options.checkpoint is None):
        raise CompileError("give a zoo model name or --checkpoint (one of them)")
    if options.checkpoint is not None:
        model = load_checkpoint(options.checkpoint)
        if options.mode is None:
            options.mode = checkpoint_mode(model)
        return model, read_checkpoint(options.checkpoint).zoo_name
    options.mode = options.mode or "dynamic"
    torch.manual_seed(options.seed)
    from mico.models.resolve import resolve_model

    model, zoo_name = resolve_model(options.model, options.model_args, options.input_shape)
    names = model.quantize_layer_names()
    if not names:  # a saved program: its layers are graph calls, compiled in float
        return model, zoo_name
    config = QuantConfig(
        act_mode="static" if options.mode == "static" else "dynamic",
        weight_granularity="channel" if options.per_channel else "tensor",
        act_asymmetric=options.act_asymmetric,
    )
    quantize_model(model, _uniform(options.plan or "8/8", names), config)
    return model, zoo_name


def samples_for(
    model: nn.Module, zoo_name: str | None, options: DeployOptions, log: Log | None = None
) -> np.ndarray:
    """Verification (and calibration) inputs: the model's dataset when it is available,
    otherwise seeded random inputs of the model's shape (named in the log).

    A dataset given explicitly (``options.dataset``) whose samples do not have the model's
    input shape is a DatasetError naming both shapes, never a silent switch to random inputs.
    """
    from mico.data import load_dataset
    from mico.models import zoo_entry

    shape = tuple(getattr(model, "default_input_shape", ()))
    dataset = options.dataset or (zoo_entry(zoo_name).dataset if zoo_name else None)
    why = short = "the model has no dataset"
    if dataset is not None:
        try:
            split = load_dataset(dataset, seed=options.seed)
        except DatasetError as exc:
            if options.dataset is not None:
                raise
            why = f"its dataset is not available ({exc})"
            short = f"dataset '{dataset}' is not on disk"
        else:
            found = tuple(split.input_shape)
            if not shape or found == shape:
                options.samples_origin = f"test samples of dataset '{dataset}'"
                return np.asarray(split.x_test[: options.samples], dtype=np.float32)
            if options.dataset is not None:
                raise DatasetError(
                    f"dataset '{dataset}' has samples of shape {found}, but the model takes "
                    f"{shape}; pick a dataset of the model's input shape (see `mico models`) or "
                    "leave out --dataset"
                )
            why = short = f"its dataset '{dataset}' has samples of shape {found}, not {shape}"
    if not shape:
        raise DatasetError("the model has no default input shape; pass --dataset")
    reason = " ".join(why.split())[:300]
    options.samples_origin = (
        f"seeded random inputs, not real data ({short}): the agreement figures hold, top-1 "
        "is not an accuracy"
    )
    if log is not None:
        log(f"using {options.samples} seeded random inputs of shape {shape}: {reason}")
    rng = np.random.default_rng(options.seed)
    vocab = token_vocabulary(model)
    if vocab is not None:  # token ids, as the exact float32 integers the C program reads
        return rng.integers(0, vocab, (options.samples, *shape)).astype(np.float32)
    return rng.standard_normal((options.samples, *shape)).astype(np.float32)


def compile_from_options(
    options: DeployOptions, log: Log = print
) -> tuple[CompiledModel, np.ndarray]:
    """Load, calibrate (static mode) and compile; return the project and the samples."""
    from mico.atomic import check_output_dir
    from mico.codegen.linked_paths import check_preference
    from mico.codegen.project import check_model_name
    from mico.quant import calibrate

    check_model_name(options.name)  # before any work
    check_preference(options.prefer)
    check_output_dir(options.out_dir, force=options.force)
    model, zoo_name = load_model(options)
    samples = samples_for(model, zoo_name, options, log)
    batches = [torch.from_numpy(b) for b in np.array_split(samples, options.calibration_batches)]
    batches = [token_example(model, b) for b in batches if len(b)]  # token ids: int64
    example = torch.from_numpy(samples[:1])
    try:
        check_float_input(model, options.mode)  # before calibration runs on float samples
        if options.mode == "static" and options.checkpoint is None:
            model.eval()
            calibrate(model, batches)
        shown = getattr(model, "model", model)  # a user's module inside mico's wrapper
        kind = type(shown if isinstance(shown, nn.Module) else model).__name__
        log(f"compiling {kind} ({options.mode} mode) into {options.out_dir}")
        compiled = compile_model(
            model,
            example,
            options.out_dir,
            options.name,
            options.mode,
            calibration=batches,
            force=options.force,
            extras=_write_compile_report,
            sample_inputs=samples,
            weights_file=options.weights_file,
            isa_extensions=generation_extensions(options.targets),
            patch=options.patch,
            prefer=options.prefer,
        )
    except MicoError as exc:
        deployable = list(DEPLOYABLE_MODELS)
        if options.mode == "dynamic":
            deployable += DYNAMIC_ONLY_MODELS
        if zoo_name is None or zoo_name in deployable:
            raise
        also = (
            f"; {', '.join(DYNAMIC_ONLY_MODELS)} in --mode dynamic"
            if options.mode == "static"
            else ""
        )
        raise type(exc)(
            f"zoo model '{zoo_name}' is not deployable yet ({options.mode} mode; deployable: "
            f"{', '.join(deployable)}{also}): {exc}"
        ) from exc
    return compiled, samples


def _write_compile_report(compiled: CompiledModel) -> None:
    """``memory.json`` (arena, bound, offsets) and ``memory_map.png`` beside the sources
    (called while the project is still in its temporary directory)."""
    project = compiled.project
    arena = project.arena
    data: dict[str, Any] = {
        "mode": compiled.mode,
        "arena_bytes": arena.size,
        "arena_lower_bound": arena.lower_bound,
        "arena_ratio": arena.ratio,
        "flash": project.flash,
        "buffers": memory_map_rows(arena),
        "patch": project.patch,
    }
    (project.directory / "memory.json").write_text(json.dumps(data, indent=2) + "\n")
    plot_memory_map(arena, project.directory / "memory_map.png", title=project.name)
    if compiled.mode == "static":  # the proxies are fitted on static programs
        from mico.hw.latency import estimate_program

        estimate = estimate_program(compiled.graph)
        if any(k != "skipped" for k in estimate):
            (project.directory / "latency_estimate.json").write_text(
                json.dumps(estimate, indent=2) + "\n"
            )


@dataclass
class TargetRun:
    """One target's outputs and, where it counts them, instructions and cycles per inference."""

    outputs: np.ndarray
    instructions: int | None = None
    cycles: int | None = None
    stack: str | None = None  # bare-metal rv32: the deepest stack of an inference ("> N": more)


def run_on_target(
    compiled: CompiledModel, samples: np.ndarray, target: str, options: DeployOptions
) -> TargetRun:
    """Build for ``target`` and run ``samples`` (instructions and cycles: the largest count of
    one inference, as counts differ only where kernels branch on data)."""
    from mico.targets import host, rv32, rv64

    project = compiled.project
    target = runner_kind(target)
    if target == "host":
        host.build(project, cc=options.cc, sanitize=options.sanitize)
        return TargetRun(host.run(project, samples))
    if target == "rv32":
        rv32.build(project)
        run = rv32.run(project, samples)
        depth = run.stack_bytes
        stack = None if depth is None else f"{'> ' if run.stack_beyond_probe else ''}{depth}"
        return TargetRun(run.outputs, run.instructions_per_inference, stack=stack)
    if target == "rv64":
        rv64.build(project)
        return TargetRun(rv64.run(project, samples))
    if target == "vexriscv":
        from mico.targets import vexriscv

        vexriscv.build(project)
        vex = vexriscv.run(project, samples)
        counted = len(vex.instructions) > 0  # the largest counts, as rv32 reports them
        return TargetRun(
            vex.outputs,
            int(np.max(vex.instructions)) if counted else None,
            int(np.max(vex.cycles)) if counted else None,
        )
    raise BuildError(f"unknown target '{target}'; use one of {', '.join(TARGETS)}")


def verify_compiled(
    compiled: CompiledModel,
    samples: np.ndarray,
    options: DeployOptions,
    log: Log = print,
) -> DeployResult:
    """Run the project on every target and hold its outputs to the Python reference.

    Static projects must match bit for bit; dynamic ones to ``rtol``. On a mismatch, a debug
    build on the host finds the first layer whose output differs.
    """
    from mico.targets import host

    reference = compiled.reference(samples)
    eager = compiled.pytorch(samples).reshape(len(samples), -1)
    same = (reference.reshape(len(samples), -1).argmax(axis=1) == eager.argmax(axis=1)).sum()
    log(
        f"Python reference vs PyTorch eager: top-1 {int(same)}/{len(samples)} (the reference is "
        f"the {compiled.mode} graph the C was emitted from)"
    )
    result = DeployResult(compiled)
    for target in options.targets:
        run = run_on_target(compiled, samples, target, options)
        outputs, instructions = run.outputs, run.instructions
        agreement = compare_outputs(outputs, reference, rtol=options.rtol)
        entry = TargetResult(target, agreement, instructions, run.cycles, outputs=outputs)
        entry.stack_bytes = run.stack
        _log_segments(compiled, outputs, reference, options.rtol, target, log)
        if not entry.ok:
            c = np.asarray(outputs).reshape(len(outputs), -1)
            r = np.asarray(reference).reshape(len(reference), -1)
            gap = np.abs(c.astype(np.float64) - r.astype(np.float64))
            bad = int(np.argmax(np.nan_to_num(gap, nan=np.inf).max(axis=1)))
            records = host.run_debug(compiled.project, samples[bad])
            entry.difference = first_difference(compiled.graph, records, samples[bad], options.rtol)
        if options.per_layer:
            entry.per_layer = per_layer_hook(compiled, samples, target, log)
        result.results.append(entry)
        extra = f", {instructions} instructions/inference" if instructions else ""
        if entry.cycles_per_inference:
            extra += f", {entry.cycles_per_inference} cycles/inference"
        if entry.stack_bytes:
            extra += f", stack {entry.stack_bytes} B"
        log(f"{target}: {agreement.summary()}{extra}")
        if entry.difference is not None:
            log(f"{target}: {entry.difference}")
    return result


def per_layer_hook(
    compiled: CompiledModel, samples: np.ndarray, target: str, log: Log
) -> dict[str, Any]:
    """``mico verify --per-layer``: every node of sample 0 counted on ``target``
    (:func:`mico.hw.latency.per_layer`), or why it is not (rv64; host without valgrind)."""
    import shutil

    from mico.hw.latency import PER_LAYER_RUNNERS, per_layer

    if runner_kind(target) not in PER_LAYER_RUNNERS:  # rv32zbb counts as rv32 does
        why = "qemu-user counts no instructions" if target == "rv64" else "it counts nothing"
        log(f"{target}: no per-layer figures ({why})")
        return {"skipped": why}
    if target == "host" and shutil.which("valgrind") is None:
        why = "valgrind is not installed (apt-get install valgrind): callgrind counts the host"
        log(f"{target}: no per-layer figures ({why})")
        return {"skipped": why}
    measured = per_layer(compiled, samples[0], target)
    log(f"{target}: per layer: {measured.check_text()}")
    data = measured.to_dict()
    if compiled.mode == "static":
        from mico.hw.latency import estimate_program

        estimate = estimate_program(compiled.graph, [target]).get(target)
        if estimate is not None:  # the fitted proxy's estimate beside each measured node
            by_node = {row["node"]: row["value"] for row in estimate["nodes"]}
            for row in data["layers"]:
                if row["node"] in by_node:
                    row["estimated"] = by_node[row["node"]]
            error = 100.0 * (estimate["total"] - measured.release) / max(measured.release, 1)
            data["estimate"] = {"total": estimate["total"], "error_pct": round(error, 2),
                                "proxy": estimate["proxy"]}  # fmt: skip
            log(f"{target}: the fitted proxy estimates {estimate['total']:,.0f} ({error:+.1f} % "
                "against the release build)")  # fmt: skip
    return data


def _log_segments(
    compiled: CompiledModel, outputs: Any, reference: Any, rtol: float, target: str, log: Log
) -> None:
    """A model with several outputs: the agreement of each one, on its own line."""
    segments = getattr(compiled.graph, "output_segments", None) or []
    if len(segments) < 2:
        return
    c = np.asarray(outputs).reshape(len(outputs), -1)
    r = np.asarray(reference).reshape(len(reference), -1)
    for seg in segments:
        part = slice(seg["offset"], seg["offset"] + seg["size"])
        agreement = compare_outputs(c[:, part], r[:, part], rtol=rtol)
        log(f"{target}: {seg['name']} {seg['shape']}: {agreement.summary()}")


#: the runners of target files that mico verify builds and runs, as the built-in target names
RUNNER_KINDS = {"host": "host", "qemu-rv32": "rv32", "qemu-rv64": "rv64",
                "verilator-vexriscv": "vexriscv"}  # fmt: skip


def runner_kind(target: str) -> str:
    """How ``target`` is built and run: a built-in target's own name, or the one its target
    file's runner stands for (a board added as a file, e.g. an rv32 core with Zbb)."""
    if target in TARGETS:
        return target
    from mico.errors import MicoError
    from mico.targets.catalog import get_target

    try:
        spec = get_target(target)
    except MicoError:
        spec = None
    if spec is None or spec.runner not in RUNNER_KINDS:
        raise BuildError(
            f"unknown target '{target}'; use one of {', '.join(TARGETS)} or a target file whose "
            f"runner is {', '.join(RUNNER_KINDS)} (mico targets)"
        )
    return RUNNER_KINDS[spec.runner]


def device_extensions(targets: Sequence[str]) -> tuple[str, ...]:
    """The ISA extensions every device target among ``targets`` has (the host is not one:
    the kernels' portable paths build there), from their target files; none without a
    device target."""
    from mico.targets.catalog import get_target

    sets = [set(get_target(t).extensions) for t in targets if runner_kind(t) != "host"]
    return tuple(sorted(set.intersection(*sets))) if sets else ()


def generation_extensions(targets: Sequence[str]) -> tuple[str, ...]:
    """The extensions a project is generated with: with a device target among ``targets``,
    what every device target has (:func:`device_extensions`: a project that runs on a device
    never takes host kernels); for the host alone (``mico compile``, ``mico verify`` without
    ``--target``), the host's own (``xautovec``: the GEMM kernels of mico_host_gemm.c, which
    forward to the portable kernels when the project is built for another target)."""
    from mico.targets.catalog import get_target

    if not targets or any(runner_kind(t) != "host" for t in targets):
        return device_extensions(targets)
    return tuple(sorted(set.intersection(*(set(get_target(t).extensions) for t in targets))))


def run_verify(options: DeployOptions, log: Log = print) -> DeployResult:
    """Compile, then verify on every target in ``options.targets``."""
    for target in options.targets:
        runner_kind(target)  # an unknown target is refused before any work
    compiled, samples = compile_from_options(options, log)
    result = verify_compiled(compiled, samples, options, log)
    paths = write_verify_report(result, options)
    log(f"report: {paths[0]} and {paths[1].name}")
    return result


def _per_layer_lines(target: str, per_layer: dict[str, Any]) -> list[str]:
    """The per-layer section of ``verify.md`` for one target."""
    if "skipped" in per_layer:
        return ["", f"## {target}: per layer", "", f"Not measured: {per_layer['skipped']}."]
    unit = per_layer["unit"]
    estimate = per_layer.get("estimate")
    extra = " estimated (proxy) |" if estimate else ""
    lines = [
        "", f"## {target}: per layer ({unit}, sample 0)", "",
        f"| # | node | op | layer | {unit} | share |{extra}",
        "|---:|---|---|---|---:|---:|" + ("---:|" if estimate else ""),
    ]  # fmt: skip
    for i, row in enumerate(per_layer["layers"], start=1):
        cell = ""
        if estimate:
            cell = f" {row['estimated']:,.0f} |" if "estimated" in row else " - |"
        lines.append(
            f"| {i} | {row['node']} | {row['op']} | {row['layer'] or '-'} | {row['value']:,.0f} | "
            f"{row['share']:.1f}% |{cell}"
        )
    low, high = per_layer["glue_bounds"]
    total_cell = f" **{estimate['total']:,.0f}** |" if estimate else ""
    lines += [
        f"| | **total** | | | **{per_layer['total']:,.0f}** | 100.0% |{total_cell}",
        "",
        f"Includes: {per_layer['includes']}.",
        "",
        f"Check: the rows sum to {per_layer['total']:,.0f} {unit}, the release build counts "
        f"{per_layer['release']:,} on the same sample; the difference (glue) is "
        f"{per_layer['glue']:+,} ({per_layer['glue_per_node']:+.1f} per node), accepted "
        f"{low:+,}..{high:+,}: **{'ok' if per_layer['ok'] else 'FAILED'}**. The glue is "
        f"{per_layer['glue_is']}.",
    ]
    if estimate:
        lines += [
            "",
            f"Estimated: the fitted proxy ({estimate['proxy']}) predicts {estimate['total']:,.0f} "
            f"{unit} for the whole program, {estimate['error_pct']:+.1f} % against the release "
            "build (its total includes its per-model overhead; the rows are its per-node "
            "predictions, never measurements).",
        ]
    return lines


def write_verify_report(result: DeployResult, options: DeployOptions) -> tuple[Path, Path]:
    """``verify.md`` and ``verify.json`` in the project folder: per target, agreement with the
    Python reference, instructions per inference and the first differing layer, if any."""
    project = result.compiled.project
    rows = []
    for r in result.results:
        a = r.agreement
        rows.append({
            "target": r.target,
            "ok": r.ok,
            "samples": a.samples,
            "exact": a.exact,
            "top1": a.top1,
            "max_abs_diff": float(a.max_abs_diff),
            "rtol": a.rtol,
            "instructions_per_inference": r.instructions_per_inference,
            "cycles_per_inference": r.cycles_per_inference,
            "stack_bytes": r.stack_bytes,
            "first_difference": None if r.difference is None else str(r.difference),
        })  # fmt: skip
        if r.per_layer is not None:
            rows[-1]["per_layer"] = r.per_layer
    data = {
        "model": options.model or str(options.checkpoint),
        "mode": result.compiled.mode,
        "plan": options.plan,
        "samples": options.samples_origin,
        "ok": result.ok,
        "flash": project.flash,
        "arena_bytes": project.arena.size,
        "arena_lower_bound": project.arena.lower_bound,
        "targets": rows,
    }
    lines = [
        f"# mico verify: {data['model']} ({data['mode']} mode)",
        "",
        f"Result: **{'the C program agrees with Python' if result.ok else 'DISAGREEMENT'}**; "
        f"flash {sum(project.flash.values())} B, arena {project.arena.size} B "
        f"(lower bound {project.arena.lower_bound} B).",
        "",
        f"Samples: {options.samples_origin or 'as given'}.",
        "",
        "| target | bit-exact | top-1 | max abs diff | instructions / inference | cycles / "
        "inference | stack (B) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['target']} | {row['exact']}/{row['samples']} | {row['top1']}/"
            f"{row['samples']} | {row['max_abs_diff']:.3g} | "
            f"{row['instructions_per_inference'] or '-'} | {row['cycles_per_inference'] or '-'} | "
            f"{row['stack_bytes'] or '-'} |"
        )
    if any(row["stack_bytes"] for row in rows):
        note = ("Stack: the deepest any inference went below `main` (rv32: measured under qemu "
                "by painting the stack), RAM beside the arena and the model's data.")  # fmt: skip
        lines += ["", note]
    for row in rows:
        if row["first_difference"]:
            lines += ["", f"{row['target']}: {row['first_difference']}"]
    for row in rows:
        if "per_layer" in row:
            lines += _per_layer_lines(row["target"], row["per_layer"])
    md, js = project.directory / "verify.md", project.directory / "verify.json"
    for path, text in ((md, "\n".join(lines) + "\n"), (js, json.dumps(data, indent=2) + "\n")):
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return md, js


def export_weights(options: DeployOptions, project: Path, output: Path, log: Log = print) -> Any:
    """``mico export-weights``: the weights file of ``options``' model for ``project`` (compiled
    with ``--weights-file``), written atomically to ``output``; the project's program runs it
    without recompiling. A model whose layout differs (architecture, plan, mode) is refused
    with the first difference named. Returns the file as read back (WeightsFile)."""
    import tempfile

    from mico.atomic_files import write_file_atomically
    from mico.codegen.weights_file import project_fingerprint, read_weights_file
    from mico.errors import WeightsFileError

    expected = project_fingerprint(project)
    manifest = json.loads((Path(project) / "mico.json").read_text())
    memory = Path(project) / "memory.json"  # the project's mode, for a zoo model given none
    if options.mode is None and options.checkpoint is None and memory.is_file():
        options.mode = json.loads(memory.read_text()).get("mode")
    options.name, options.weights_file, options.force = manifest["name"], True, False
    with tempfile.TemporaryDirectory(prefix="mico-export-") as tmp:
        options.out_dir = Path(tmp) / "project"
        compiled, _ = compile_from_options(options, log)
        made = compiled.project.directory / f"{options.name}.bin"
        if read_weights_file(made).fingerprint_hex != expected:
            mine = json.loads((compiled.project.directory / "mico.json").read_text())
            raise WeightsFileError(
                f"the model's weights file does not fit project {project} (fingerprint "
                f"mismatch): {_layout_difference(manifest, mine)}; export a model of the "
                "project's architecture, plan and mode, or recompile the project"
            )
        write_file_atomically(output, made.read_bytes())
    log(f"wrote {output} ({Path(output).stat().st_size} B) for {project}")
    return read_weights_file(output, expected)


def _layout_difference(project: dict[str, Any], model: dict[str, Any]) -> str:
    """The first constant whose layout differs between two manifests, in words."""
    ours = project["weights_file"]["constants"]
    theirs = model["weights_file"]["constants"]

    def shown(c: dict[str, Any]) -> str:
        codes = f"{'int' if c['signed'] else 'uint'}{c['bits']} codes, " if c["bits"] else ""
        return f"{c['kind']} {codes}{c['count']} x {c['ctype']} at offset {c['offset']}"

    for a, b in zip(ours, theirs, strict=False):
        if a != b:
            if a["symbol"] != b["symbol"]:
                return f"the project has '{a['symbol']}' where the model has '{b['symbol']}'"
            return f"'{a['symbol']}' is {shown(a)} in the project, {shown(b)} in the model"
    if len(ours) != len(theirs):
        return f"the project has {len(ours)} constants, the model {len(theirs)}"
    return (
        "the constants are laid out alike but the program differs (shapes, activation formats, "
        "scales compiled into the code or kernels)"
    )
