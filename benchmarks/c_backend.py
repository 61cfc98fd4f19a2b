"""The C backend on the model zoo: flash and RAM against their bounds, speed, agreement.

Run on demand (not a test):

    python benchmarks/c_backend.py [--models a,b] [--modes dynamic,static] [--samples 16]
                                   [--rv32-models small_cnn,mlp | all] [--no-rv32]
                                   [--out benchmarks/results]
    python benchmarks/c_backend.py --grid [--sanitize] [--models ...] [--modes ...]

The default run compiles every deployable zoo model (fresh seeded weights, random inputs of
the model's shape) under four plans -- uniform W8A8, W4A4, W2A2 and a seeded random mixed plan
(weights from {2, 4, 8} bits, activations from {4, 8}) -- in each execution mode, and records
(``--maps`` also draws each arena's memory map to ``c_backend_maps/``):

* flash: the constants the project holds (packed weights, biases, scales, shape parameters)
  against the packed bound ``sum(ceil(params * w_bits / 8))`` (ternary: 2 bits) plus the
  biases and scales, and their ratio;
* arena: the planned arena against the planner's lower bound (peak live bytes), their ratio,
  and the arena against the same model's W8A8 arena (so packed activations show);
* host time per inference of the C program against PyTorch eager (the model the C computes,
  batch 1, one thread) on the same inputs, as a ratio measured in one run: the C program runs
  N samples and 1 sample, the difference removes process start-up;
* rv32 (qemu, ``-icount``): instructions per inference (the largest over 4 samples) and per
  MAC, and the model's own flash and RAM (``mico.targets.rv32.model_sizes``), for a subset of
  small models by default;
* agreement of the C outputs with the Python reference (static: bit-exact; dynamic: within
  the float tolerance).

``--grid`` runs the issue's verification grid instead: every deployable model x {uniform 1..8
bits, ternary, 3 random mixed plans} x modes: compile, host build (``--sanitize``: with ASan and
UBSan), run 8 samples, agreement; results go to ``c_backend_grid.{json,md}``. ``--cc clang``
builds with clang instead (results get a ``_clang`` suffix). ``--host-kernels`` generates the
projects as ``mico compile`` does for the host alone (its ``xautovec`` kernels, mico_host_gemm.c)
instead of the portable kernels every device runs (results get a ``_host_kernels`` suffix).
``--merge`` keeps the existing results' cases outside this run's models and modes (each case
records the commit and date it ran at, and the tables say when they mix runs), so a subset can
be rerun without losing the rest. Builds reuse compiled kernel objects (``$MICO_BUILD_CACHE``,
:mod:`mico.hw.objcache`); when it is unset, the run keeps one cache of its own for its duration.

A failing (model, plan, mode) is recorded with its error message; the run goes on.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import platform
import random
import shutil
import subprocess
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mico.codegen.compile import DEPLOYABLE_MODELS, MODES, CompiledModel, compile_model
from mico.codegen.makefile import executable
from mico.codegen.memory_map import plot_memory_map
from mico.execute import compare_outputs
from mico.models import from_zoo
from mico.quant import calibrate, model_costs
from mico.quant.arithmetic import TERNARY, format_bits
from mico.targets import host, rv32
from mico.targets.io import BUILD_CACHE_ENV

#: token models (random float inputs are no token ids) are measured by benchmarks/transformers.py
DEPLOYABLE = [m for m in DEPLOYABLE_MODELS if m != "tinyllama"]
RV32_DEFAULT = ["small_cnn", "mlp", "mnist1d_cnn", "kws_conv1d", "dscnn", "lenet"]
RV32_SAMPLES = 4
GRID_SAMPLES = 8
CALIBRATION_BATCHES = 2
CALIBRATION_BATCH_SIZE = 8
ERROR_CHARS = 3000
C_TIMING_SECONDS = 0.5  # the C program's timed work per run, beyond process start-up
MIN_TIMING_SAMPLES = 20
MAX_TIMING_PASSES = 1000

Plan = tuple[list[float], list[float]]


# ----------------------------------------------------------------------------- plans
def uniform(n: int, w: float, a: float) -> Plan:
    return [w] * n, [a] * n


def mixed(n: int, seed: int, model: str, index: int = 0) -> Plan:
    """A random per-layer plan, seeded by (seed, model, index): weights 2/4/8, activations 4/8."""
    rng = random.Random(f"{seed}:{model}:{index}")
    return [rng.choice((2, 4, 8)) for _ in range(n)], [rng.choice((4, 8)) for _ in range(n)]


def grid_mixed(n: int, seed: int, model: str, index: int) -> Plan:
    """A random plan over every width (1..8 and ternary) for the verification grid."""
    rng = random.Random(f"grid:{seed}:{model}:{index}")
    widths = [1, TERNARY, 2, 3, 4, 5, 6, 7, 8]
    return [rng.choice(widths) for _ in range(n)], [rng.choice(widths) for _ in range(n)]


def benchmark_plans(n: int, seed: int, model: str) -> dict[str, Plan]:
    return {
        "W8A8": uniform(n, 8, 8),
        "W4A4": uniform(n, 4, 4),
        "W2A2": uniform(n, 2, 2),
        "mixed": mixed(n, seed, model),
    }


def grid_plans(n: int, seed: int, model: str) -> dict[str, Plan]:
    plans = {f"W{b}A{b}": uniform(n, b, b) for b in range(1, 9)}
    plans["ternary"] = uniform(n, TERNARY, TERNARY)
    for i in range(3):
        plans[f"mixed{i}"] = grid_mixed(n, seed, model, i)
    return plans


def plan_text(plan: Plan) -> str:
    """``w/a`` per layer, the form a plan is read in: ``8/8,4/8,2/4``."""
    return ",".join(f"{format_bits(w)}/{format_bits(a)}" for w, a in zip(*plan, strict=True))


# ----------------------------------------------------------------------------- helpers
def error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    if not str(exc):
        text += "\n" + "".join(traceback.format_exception(exc))[-ERROR_CHARS:]
    return text[:ERROR_CHARS]


def random_inputs(shape: tuple[int, ...], count: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((count, *shape)).astype(np.float32)


def quantized(
    base: torch.nn.Module, plan: Plan, mode: str, calib: list[torch.Tensor]
) -> tuple[torch.nn.Module, Plan]:
    """A copy of ``base`` quantized with ``plan`` in ``mode`` (static: calibrated).

    A ternary activation width the layers reject falls back to 8 bits (the plan returned is
    the one applied).
    """
    model = copy.deepcopy(base)
    try:
        model.set_qscheme([list(plan[0]), list(plan[1])], act_mode=mode)
    except Exception:
        if TERNARY not in plan[1]:
            raise
        plan = (plan[0], [8 if a == TERNARY else a for a in plan[1]])
        model = copy.deepcopy(base)
        model.set_qscheme([list(plan[0]), list(plan[1])], act_mode=mode)
    model.eval()
    if mode == "static":
        calibrate(model, calib)
    return model, plan


def stage(record: dict[str, Any], name: str, fn: Callable[[], Any]) -> Any:
    """Run ``fn``; on failure store its error under ``record['errors'][name]`` and return None."""
    start = time.perf_counter()
    try:
        return fn()
    except Exception as exc:  # a benchmark records failures, it does not stop on them
        record.setdefault("errors", {})[name] = error_text(exc)
        return None
    finally:
        record.setdefault("seconds", {})[name] = round(time.perf_counter() - start, 3)


def agreement_record(c_out: np.ndarray, reference: np.ndarray, mode: str) -> dict[str, Any]:
    agreement = compare_outputs(c_out, reference)
    return {
        "summary": agreement.summary(),
        "samples": agreement.samples,
        "exact": agreement.exact,
        "top1": agreement.top1,
        "max_abs_diff": agreement.max_abs_diff,
        "max_rel_diff": agreement.max_rel_diff,
        "all_exact": agreement.all_exact,
        "all_within_tolerance": agreement.all_within_tolerance,
        # the criterion: static bit-exact, dynamic within the float tolerance
        "agrees": agreement.all_exact if mode == "static" else agreement.all_within_tolerance,
    }


def flash_record(compiled: CompiledModel, example: torch.Tensor) -> dict[str, Any]:
    flash = dict(compiled.project.flash)
    costs = model_costs(compiled.model, example)
    packed = costs.weight_bytes
    bound = packed + flash.get("bias", 0) + flash.get("scales", 0)
    total = sum(flash.values())
    return {
        **flash,  # weights, bias, scales, params (int32 shape parameters)
        "total": total,
        "packed_weights": packed,
        "bound": bound,
        "weights_ratio": flash["weights"] / packed if packed else 1.0,
        "ratio": total / bound if bound else 1.0,
        "macs": costs.macs,
        "weight_count": costs.params,
    }


def _stack_bound(compiled: CompiledModel) -> int | None:
    """The static rv32 stack bound of the compiled program (None: it cannot be bounded)."""
    from mico.errors import MicoError
    from mico.hw.stack import program_stack

    try:
        return program_stack(compiled.graph, compiled.project.name,
                             prefer=compiled.project.prefer).bytes  # fmt: skip
    except MicoError:
        return None


def _placement(compiled: CompiledModel) -> dict[str, Any] | None:
    """The project's scratch placement (mico.json)."""
    manifest = json.loads((compiled.project.directory / "mico.json").read_text())
    return manifest.get("scratch_placement")


def arena_record(compiled: CompiledModel) -> dict[str, Any]:
    arena = compiled.project.arena
    return {"size": arena.size, "lower_bound": arena.lower_bound, "ratio": arena.ratio}


# ----------------------------------------------------------------------------- timing
def _time_program(exe: Path, inputs: Path, outputs: Path, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        result = subprocess.run(
            [str(exe), str(inputs), str(outputs)], capture_output=True, check=False
        )
        elapsed = time.perf_counter() - start
        if result.returncode != 0:
            raise RuntimeError(
                f"{exe.name} failed (exit {result.returncode}): "
                f"{(result.stdout + result.stderr).decode(errors='replace')[-ERROR_CHARS:]}"
            )
        best = min(best, elapsed)
    return best


def _write(samples: np.ndarray, path: Path) -> None:
    np.ascontiguousarray(samples, dtype="<f4").tofile(path)


def _repeat(samples: np.ndarray, count: int) -> np.ndarray:
    """The first ``count`` samples of ``samples`` repeated over and over."""
    passes = -(-count // len(samples))
    return np.tile(samples, (passes,) + (1,) * (samples.ndim - 1))[:count]


def time_c(
    compiled: CompiledModel, samples: np.ndarray, repeats: int
) -> tuple[dict[str, Any], np.ndarray]:
    """Seconds per inference of the built host program, (t(n) - t(1)) / (n - 1), best of runs,
    and the distinct samples it ran.

    ``n`` is sized so the timed work takes about ``C_TIMING_SECONDS`` beyond process start-up:
    a large model runs a prefix of ``samples`` (at least ``MIN_TIMING_SAMPLES``), a small one,
    whose microseconds would drown in start-up jitter, runs them several times over.
    """
    project = compiled.project
    exe = project.directory / executable(project.name, "host")
    with tempfile.TemporaryDirectory(prefix="mico-bench-") as tmp:
        many, one, out = Path(tmp) / "many.bin", Path(tmp) / "one.bin", Path(tmp) / "out.bin"
        _write(samples[:1], one)
        t_one = _time_program(exe, one, out, repeats)
        cap = len(samples) * MAX_TIMING_PASSES
        count = min(MIN_TIMING_SAMPLES, len(samples))
        while True:  # grow n until the work beyond start-up takes long enough to measure
            _write(_repeat(samples, count), many)
            work = _time_program(exe, many, out, 1) - t_one
            if work >= C_TIMING_SECONDS / 2 or count >= cap:
                break
            count = min(cap, int(count * min(10.0, max(2.0, C_TIMING_SECONDS / max(work, 1e-4)))))
        distinct = samples[: min(count, len(samples))]
        t_many = _time_program(exe, many, out, repeats)
    seconds = (t_many - t_one) / max(count - 1, 1)
    return {"seconds": seconds, "inferences": count, "distinct_samples": len(distinct)}, distinct


def time_torch(model: torch.nn.Module, samples: np.ndarray, repeats: int) -> float:
    """Seconds per inference of PyTorch eager, batch 1, on the same samples (best of runs)."""
    inputs = [torch.from_numpy(s[None].copy()) for s in samples]
    best = float("inf")
    with torch.inference_mode():
        for x in inputs[:3]:  # warm-up
            model(x)
        for _ in range(repeats):
            start = time.perf_counter()
            for x in inputs:
                model(x)
            best = min(best, time.perf_counter() - start)
    return best / max(len(inputs), 1)


# ----------------------------------------------------------------------------- one case
def run_case(
    model_name: str,
    plan_name: str,
    plan: Plan,
    mode: str,
    base: torch.nn.Module,
    options: argparse.Namespace,
    workdir: Path,
    with_rv32: bool,
) -> dict[str, Any]:
    example = base.example_input()
    shape = tuple(example.shape[1:])
    calib = [
        torch.from_numpy(random_inputs(shape, CALIBRATION_BATCH_SIZE, options.seed + 100 + i))
        for i in range(CALIBRATION_BATCHES)
    ]
    record: dict[str, Any] = {"model": model_name, "plan": plan_name, "mode": mode}
    result = stage(record, "quantize", lambda: quantized(base, plan, mode, calib))
    if result is None:
        record["plan_bits"] = plan_text(plan)
        return record
    qmodel, applied = result
    record["plan_bits"] = plan_text(applied)
    out_dir = workdir / f"{model_name}_{plan_name}_{mode}"
    compiled: CompiledModel | None = stage(
        record,
        "compile",
        lambda: compile_model(
            qmodel,
            example,
            out_dir,
            name="m",
            mode=mode,
            calibration=calib,
            isa_extensions=isa_extensions(options),
        ),
    )
    if compiled is None:
        return record
    record["flash"] = stage(record, "costs", lambda: flash_record(compiled, example))
    record["arena"] = arena_record(compiled)
    if options.maps:
        picture = options.out / "c_backend_maps" / f"{model_name}_{plan_name}_{mode}.png"
        title = f"{model_name} {plan_name} {mode}"
        if stage(record, "map", lambda: plot_memory_map(compiled.project.arena, picture, title)):
            record["arena"]["map"] = str(picture.relative_to(options.out))
    samples = random_inputs(shape, options.samples, options.seed + 1)

    def host_check() -> dict[str, Any]:
        host.build(compiled.project, cc=options.cc, sanitize=options.sanitize)
        return agreement_record(
            host.run(compiled.project, samples), compiled.reference(samples), mode
        )

    record["agreement"] = stage(record, "host", host_check)
    timed = not options.grid and not options.sanitize and options.timing_samples > 1
    if record["agreement"] is not None and timed:
        timing = random_inputs(shape, options.timing_samples, options.seed + 2)

        def host_timing() -> dict[str, Any]:
            c, distinct = time_c(compiled, timing, options.repeats)
            eager = time_torch(compiled.model, distinct, options.repeats)
            return {
                "samples": len(distinct),
                "c_inferences": c["inferences"],
                "c_seconds_per_inference": c["seconds"],
                "torch_seconds_per_inference": eager,
                "ratio": c["seconds"] / eager if eager > 0 else None,
            }

        record["host_time"] = stage(record, "timing", host_timing)
    if with_rv32:

        def rv32_check() -> dict[str, Any]:
            rv32.build(compiled.project)
            few = samples[:RV32_SAMPLES]
            run = rv32.run(compiled.project, few)
            instructions = run.instructions_per_inference
            macs = (record.get("flash") or {}).get("macs") or 0
            return {
                "instructions_per_inference": instructions,
                "instructions": run.instructions.tolist(),
                "instructions_per_mac": instructions / macs if macs else None,
                # the grid checks agreement: no separate size link (every source compiled again)
                "sizes": None if options.grid else rv32.model_sizes(compiled.project),
                "stack_bytes": run.stack_bytes,
                # the static bound of the same program (mico.hw.stack), and where the kernels'
                # scratch went (arena or stack, per kernel family)
                "stack_bound": _stack_bound(compiled) if mode == "static" else None,
                "scratch_placement": _placement(compiled),
                "agreement": agreement_record(run.outputs, compiled.reference(few), mode),
            }

        record["rv32"] = stage(record, "rv32", rv32_check)
    shutil.rmtree(out_dir, ignore_errors=True)
    return record


def run_model(
    model_name: str, options: argparse.Namespace, workdir: Path, with_rv32: bool
) -> list[dict[str, Any]]:
    torch.manual_seed(options.seed)
    base = from_zoo(model_name).eval()
    n = base.n_layers
    plans = (
        grid_plans(n, options.seed, model_name)
        if options.grid
        else benchmark_plans(n, options.seed, model_name)
    )
    if options.plans:
        unknown = sorted(set(options.plans) - set(plans))
        if unknown:
            raise SystemExit(f"unknown plan {unknown[0]}; choose from {', '.join(plans)}")
        plans = {name: plan for name, plan in plans.items() if name in options.plans}
    records = []
    for mode in options.modes:
        int8_arena = None
        for plan_name, plan in plans.items():
            start = time.perf_counter()
            record = run_case(model_name, plan_name, plan, mode, base, options, workdir, with_rv32)
            arena = record.get("arena")
            if plan_name == "W8A8" and arena:
                int8_arena = arena["size"]
            if arena and int8_arena:
                arena["int8_arena"] = int8_arena
                arena["vs_int8"] = arena["size"] / int8_arena
            records.append(record)
            status = "ok" if not record.get("errors") else f"errors in {sorted(record['errors'])}"
            agreement = (record.get("agreement") or {}).get("summary", "-")
            print(
                f"  {model_name:12s} {plan_name:7s} {mode:7s} {time.perf_counter() - start:6.1f}s "
                f"{status}; {agreement}",
                flush=True,
            )
    return records


# ----------------------------------------------------------------------------- reports
def _fmt_ratio(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _short_error(record: dict[str, Any]) -> str:
    errors = record.get("errors") or {}
    if not errors:
        return ""
    where, text = next(iter(errors.items()))
    first = text.strip().splitlines()[0] if text.strip() else text
    first = first.replace("|", "/")
    return f"{where}: {first[:120]}"


def _agreement_cell(record: dict[str, Any]) -> str:
    agreement = record.get("agreement")
    if not agreement:
        return "ERROR " + _short_error(record)
    mark = "✓" if agreement["agrees"] else "✗"
    n = agreement["samples"]
    text = f"{mark} {agreement['exact']}/{n} exact, top-1 {agreement['top1']}/{n}"
    if not agreement["all_exact"]:
        text += f", max rel {agreement['max_rel_diff']:.2g}"
    return text


def benchmark_markdown(records: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    rows = [
        "# C backend (mico benchmarks/c_backend.py)",
        "",
        f"Run {meta['date']} on {meta['machine']}, torch {meta['torch']}, {meta['cc']}, seed "
        f"{meta['seed']}; fresh seeded weights, random N(0, 1) inputs of each model's shape; "
        f"{meta['samples']} samples for agreement, up to {meta['timing_samples']} for timing.",
        "",
        "* **flash / bound**: every constant of the project (packed weights, biases, scales, "
        "shape parameters) against Σ ceil(params·w_bits/8) (ternary 2 bits) + biases + scales.",
        "* **arena / bound**: the planned arena against the peak of live bytes (< 1 where ops run "
        "in place); **vs W8A8**: the arena against the same model's W8A8 arena in the same mode.",
        "* **C / PyTorch**: host time per inference of the C program (-O2) divided by PyTorch "
        "eager's (the quantized model the C computes, batch 1, one thread) on the same inputs, "
        "measured in one run; < 1 means the C is faster. The C time is (t(n) - t(1)) / (n - 1) "
        f"with n sized for about {C_TIMING_SECONDS:g} s of work (a small model's inputs are "
        "repeated, a large model runs fewer of them), best of the runs.",
        "* **rv32**: rv32imac under qemu -icount, retired instructions per inference (largest "
        "over 4 samples) and per MAC; flash/RAM of the model code, weights and arena alone; "
        "stack: the deepest an inference went below `main` (measured: main.c paints the stack).",
        "* **agreement**: C against the Python reference (static: bit-exact integer outputs; "
        "dynamic: float outputs within rtol 1e-5); ✓ when the mode's criterion holds.",
        "",
        *_runs_text(records),
    ]
    # every mode the records hold (a --merge run of one mode keeps the other's cases)
    modes = [m for m in ("dynamic", "static") if any(r["mode"] == m for r in records)]
    for mode in modes:
        chosen = [r for r in records if r["mode"] == mode]
        if not chosen:
            continue
        rows += [
            f"## {mode} mode",
            "",
            "| model | plan | MACs | flash B | bound B | flash/bound | arena B | bound B "
            "| arena/bound | vs W8A8 | C/PyTorch | rv32 instr/inf | instr/MAC | rv32 flash/RAM B "
            "| stack B | stack bound B | agreement |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r in chosen:
            flash, arena = r.get("flash") or {}, r.get("arena") or {}
            timing, v = r.get("host_time") or {}, r.get("rv32") or {}
            sizes = v.get("sizes") or {}
            rv32_cells = [
                f"{v['instructions_per_inference']:,}" if v else "-",
                _fmt_ratio(v.get("instructions_per_mac")) if v else "-",
                f"{sizes['flash']:,}/{sizes['ram']:,}" if sizes else "-",
                f"{v['stack_bytes']:,}" if v.get("stack_bytes") else "-",
                f"{v['stack_bound']:,}" if v.get("stack_bound") else "-",
            ]
            if "rv32" in (r.get("errors") or {}):
                rv32_cells = ["error", "-", "-", "-", "-"]
            rows.append(
                "| "
                + " | ".join(
                    [
                        r["model"],
                        r["plan"],
                        f"{flash['macs']:,}" if flash else "-",
                        f"{flash['total']:,}" if flash else "-",
                        f"{flash['bound']:,}" if flash else "-",
                        _fmt_ratio(flash.get("ratio"), 3) if flash else "-",
                        f"{arena['size']:,}" if arena else "-",
                        f"{arena['lower_bound']:,}" if arena else "-",
                        _fmt_ratio(arena.get("ratio"), 3) if arena else "-",
                        _fmt_ratio(arena.get("vs_int8")) if arena else "-",
                        f"{timing['ratio']:.3g}" if timing.get("ratio") is not None else "-",
                        *rv32_cells,
                        _agreement_cell(r),
                    ]
                )
                + " |"
            )
        rows.append("")
    mixed_plans = {(r["model"], r["plan_bits"]) for r in records if r["plan"] == "mixed"}
    if mixed_plans:
        rows += ["Mixed plans (w/a per layer, execution order):", ""]
        rows += [f"* {m}: `{bits}`" for m, bits in sorted(mixed_plans)]
        rows.append("")
    rows += _failures(records)
    return "\n".join(rows) + "\n"


def _failures(records: list[dict[str, Any]]) -> list[str]:
    failed = [r for r in records if r.get("errors")]
    disagree = [
        r
        for r in records
        if (r.get("agreement") and not r["agreement"]["agrees"])
        or ((r.get("rv32") or {}).get("agreement", {}).get("agrees") is False)
    ]
    if not failed and not disagree:
        return ["Every case compiled, ran and agreed with its reference.", ""]
    rows = ["## Problems", ""]
    for r in failed:
        rows.append(f"* {r['model']} {r['plan']} {r['mode']}: {_short_error(r)}")
    for r in disagree:
        host_summary = (r.get("agreement") or {}).get("summary", "-")
        rv32_summary = ((r.get("rv32") or {}).get("agreement") or {}).get("summary", "-")
        rows.append(
            f"* {r['model']} {r['plan']} {r['mode']} disagrees: host {host_summary}; "
            f"rv32 {rv32_summary}"
        )
    rows.append("")
    return rows


def isa_extensions(options: argparse.Namespace) -> tuple[str, ...]:
    """The ISA extensions the projects are generated for (kernel paths chosen from them)."""
    return (*(("xautovec",) if options.host_kernels else ()), *options.isa)


def _kernels_text(meta: dict[str, Any]) -> str:
    """Which kernels the grid's projects were generated with."""
    extensions = meta.get("isa_extensions", [])
    if "xautovec" in extensions:
        return "the host's own kernels (xautovec: mico_host_gemm.c, as `mico compile` for the host)"
    if extensions:
        names = ", ".join(extensions)
        return (
            f"the device kernels generated for ISA extensions {names} (zbb: binary layers "
            "count with cpop; on the host, its portable C equivalent)"
        )
    return "the portable kernels every device target runs (no ISA extensions)"


def _modes_of(records: list[dict[str, Any]], meta: dict[str, Any]) -> list[str]:
    """The modes to tabulate: this run's, then any a merged earlier run added."""
    return list(dict.fromkeys([*meta["modes"], *(r["mode"] for r in records if r["mode"] != "-")]))


def _runs_text(records: list[dict[str, Any]]) -> list[str]:
    """Which run (commit, date) each model's cases come from, when the table mixes runs."""
    runs: dict[str, list[str]] = {}
    per_model: dict[str, set[str]] = {}
    for r in records:
        per_model.setdefault(r["model"], set()).add(r.get("run", ""))
    by_mode = any(len(v) > 1 for v in per_model.values())  # a model's modes from two runs
    for r in records:
        run = r.get("run", "an earlier run (not recorded)")
        run = f"{run}, {r['mode']} mode" if by_mode else run
        models = runs.setdefault(run, [])
        if r["model"] not in models:
            models.append(r["model"])
    if len(runs) <= 1:
        return [f"Every case ran at {next(iter(runs))}.", ""] if runs else []
    lines = ["The cases come from several runs (`--merge`):", ""]
    lines += [f"- {run}: {', '.join(models)}" for run, models in runs.items()]
    return [*lines, ""]


def merged_records(
    old: list[dict[str, Any]],
    new: list[dict[str, Any]],
    models: list[str],
    modes: list[str],
    plans: list[str] | None = None,
) -> list[dict[str, Any]]:
    """``new`` plus the ``old`` cases outside this run's models x modes (x plans, when the run
    took only some), in model order."""

    def rerun(r: dict[str, Any]) -> bool:
        if r["model"] not in models or r["mode"] not in (*modes, "-"):
            return False
        return not plans or r["plan"] in (*plans, "-")

    kept = [r for r in old if not rerun(r)]
    order = list(dict.fromkeys([*(r["model"] for r in old), *models]))
    plan_order = list(dict.fromkeys(r["plan"] for r in [*old, *new]))
    return sorted(
        [*kept, *new], key=lambda r: (order.index(r["model"]), plan_order.index(r["plan"]))
    )


def grid_markdown(records: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    plans = list(dict.fromkeys(r["plan"] for r in records))
    rows = [
        "# C backend verification grid (mico benchmarks/c_backend.py --grid)",
        "",
        f"Run {meta['date']} on {meta['machine']}, {meta['cc']}"
        f"{' with ASan + UBSan' if meta['sanitize'] else ''}, seed {meta['seed']}, "
        f"{_kernels_text(meta)}; "
        f"{meta['samples']} random samples per case. A cell is the number of samples that agree "
        "(static: bit-exact; dynamic: within rtol 1e-5), ✓ when all do, ERR when a stage failed.",
        "",
    ]
    rows += _runs_text(records)
    for mode in _modes_of(records, meta):
        chosen = [r for r in records if r["mode"] == mode]
        if not chosen:
            continue
        models = list(dict.fromkeys(r["model"] for r in chosen))
        rows += _agreement_table(
            f"## {mode} mode", "cases agree", chosen, mode, plans, models, lambda r: r
        )
        ran = [r for r in chosen if "rv32" in r]  # the same cases built for rv32imac, under qemu
        if ran:
            title = f"### {mode} mode on rv32 (qemu, {RV32_SAMPLES} samples a case)"
            rows += _agreement_table(
                title, "agree", ran, mode, plans, models, lambda r: r.get("rv32") or {}
            )
    rows += _failures(records)
    return "\n".join(rows) + "\n"


def _agreement_table(
    title: str,
    verb: str,
    cases: list[dict[str, Any]],
    mode: str,
    plans: list[str],
    models: list[str],
    where: Callable[[dict[str, Any]], dict[str, Any]],
) -> list[str]:
    """A model x plan table of one mode's cases: each cell the agreement of ``where(case)``
    (the host's record, or its rv32 run), ✓ when it holds, ERR when that stage failed."""
    ok = sum(1 for r in cases if (where(r).get("agreement") or {}).get("agrees"))
    rows = [
        f"{title}: {ok}/{len(cases)} {verb}",
        "",
        "| model | " + " | ".join(plans) + " |",
        "|---|" + "---|" * len(plans),
    ]
    for model in models:
        cells = []
        for plan in plans:
            r = next((x for x in cases if x["model"] == model and x["plan"] == plan), None)
            a = where(r).get("agreement") if r is not None else None
            if r is None:
                cells.append("")
            elif not a:
                cells.append("ERR")
            else:
                agree = a["exact"] if mode == "static" else max(a["exact"], _within(a))
                cells.append("✓" if a["agrees"] else f"✗ {agree}/{a['samples']}")
        rows.append(f"| {model} | " + " | ".join(cells) + " |")
    return [*rows, ""]


def _within(agreement: dict[str, Any]) -> int:
    return agreement["samples"] if agreement["all_within_tolerance"] else agreement["exact"]


def write_results(
    out: Path, stem: str, records: list[dict[str, Any]], meta: dict[str, Any], grid: bool
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    payload = json.dumps({"meta": meta, "results": records}, indent=2, default=str) + "\n"
    markdown = grid_markdown(records, meta) if grid else benchmark_markdown(records, meta)
    for path, text in ((out / f"{stem}.json", payload), (out / f"{stem}.md", markdown)):
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)


# ----------------------------------------------------------------------------- main
def _names(text: str, allowed: list[str], what: str) -> list[str]:
    if text == "all":
        return list(allowed)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise SystemExit(f"unknown {what}: {', '.join(unknown)}; choose from {', '.join(allowed)}")
    return names


def _earlier_records(path: Path) -> list[dict[str, Any]]:
    """The cases of an earlier results file, each stamped with its run (none if no file)."""
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    when = data.get("meta", {}).get("date", "an unknown date")
    return [{"run": f"an earlier run ({when})", **r} for r in data["results"]]


def _git_commit() -> str:
    """The short commit the run measures ("unknown" outside a git checkout)."""
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
        cwd=Path(__file__).parent, check=False,
    )  # fmt: skip
    return out.stdout.strip() or "unknown"


@contextlib.contextmanager
def _build_cache(tmp: str) -> Iterator[None]:
    """Builds reuse kernel objects: the user's ``$MICO_BUILD_CACHE``, else one for this run."""
    if os.environ.get(BUILD_CACHE_ENV):
        yield
        return
    os.environ[BUILD_CACHE_ENV] = str(Path(tmp) / "objects")
    try:
        yield
    finally:
        del os.environ[BUILD_CACHE_ENV]


def _compiler_version(cc: str) -> str:
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, check=False)
        return out.stdout.splitlines()[0] if out.stdout else cc
    except OSError:
        return cc


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="all", help="comma-separated zoo names, or all")
    parser.add_argument("--modes", default=",".join(MODES), help="dynamic,static")
    parser.add_argument(
        "--plans", default="", help="only these plans, e.g. W1A1,mixed0 (default: every one)"
    )
    parser.add_argument("--samples", type=int, default=None, help="samples for agreement")
    parser.add_argument("--timing-samples", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3, help="timing runs (best is kept)")
    parser.add_argument("--rv32", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--rv32-models", default=",".join(RV32_DEFAULT), help="names or all")
    parser.add_argument("--grid", action="store_true", help="the full verification grid")
    parser.add_argument("--sanitize", action="store_true", help="host builds with ASan+UBSan")
    parser.add_argument("--cc", default=host.DEFAULT_CC, help="host C compiler (gcc or clang)")
    parser.add_argument(
        "--host-kernels", action="store_true", help="the host's own kernels (xautovec)"
    )
    parser.add_argument(
        "--isa", default="", help="ISA extensions the projects are generated for, e.g. zbb "
        "(binary layers' cpop kernels; results get a _zbb suffix)",
    )  # fmt: skip
    parser.add_argument("--maps", action="store_true", help="memory-map PNGs of every arena")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument(
        "--merge", action="store_true",
        help="keep the existing results' cases outside these models and modes",
    )  # fmt: skip
    options = parser.parse_args(argv)
    options.models = _names(options.models, DEPLOYABLE, "models")
    options.modes = _names(options.modes, list(MODES), "modes")
    options.isa = [e.strip().lower() for e in options.isa.split(",") if e.strip()]
    options.plans = [p.strip() for p in options.plans.split(",") if p.strip()]
    if options.samples is None:
        options.samples = GRID_SAMPLES if options.grid else 16
    use_rv32 = (not options.grid) if options.rv32 is None else options.rv32
    if use_rv32 and not rv32.available():
        print(f"rv32 target unavailable ({rv32.missing_tools_hint()}); skipping rv32")
        use_rv32 = False
    rv32_models = set(_names(options.rv32_models, DEPLOYABLE, "rv32 models")) if use_rv32 else set()

    torch.set_num_threads(1)
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()} {platform.system()}, {os.cpu_count()} cpus",
        "torch": torch.__version__,
        "cc": _compiler_version(options.cc),
        "seed": options.seed,
        "modes": options.modes,
        "models": options.models,
        "samples": options.samples,
        "timing_samples": 0 if options.grid or options.sanitize else options.timing_samples,
        "sanitize": options.sanitize,
        "rv32_models": sorted(rv32_models),
        "grid": options.grid,
        "isa_extensions": list(isa_extensions(options)),
    }
    stem = "c_backend_grid" if options.grid else "c_backend"
    if options.cc != host.DEFAULT_CC:  # a second compiler's results sit beside gcc's
        stem += "_" + Path(options.cc).name
    if options.host_kernels:
        stem += "_host_kernels"
    stem += "".join(f"_{ext}" for ext in options.isa)
    if options.grid and rv32_models:
        stem += "_rv32"
    previous = options.out / f"{stem}.json"
    old = _earlier_records(previous) if options.merge else []
    run = f"{_git_commit()} ({meta['date']})"
    records: list[dict[str, Any]] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mico-c-backend-") as tmp, _build_cache(tmp):
        for name in options.models:
            print(f"{name} …", flush=True)
            workdir = Path(tmp) / name
            try:
                new = run_model(name, options, workdir, name in rv32_models)
            except Exception as exc:  # building the model itself failed
                errors = {"model": error_text(exc)}
                new = [{"model": name, "plan": "-", "mode": "-", "errors": errors}]
            records += [{**r, "run": run} for r in new]
            meta["seconds"] = round(time.perf_counter() - started, 1)
            merged = merged_records(old, records, options.models, options.modes, options.plans)
            write_results(options.out, stem, merged, meta, options.grid)
    print(f"wrote {options.out / (stem + '.md')} in {meta.get('seconds', 0)} s")


if __name__ == "__main__":
    main()
