"""Hardware commands: ``mico profile`` (measure layer shapes × bit pairs on a target and fit
its latency proxy), ``mico targets`` (the target files and their availability) and
``mico latency`` (a model's per-layer latency on a target)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mico.cli import (
    CheckpointOpt,
    DatasetOpt,
    InputShapeOpt,
    ModelArg,
    ModelArgsOpt,
    PlanOpt,
    QuietOpt,
    SeedOpt,
    _friendly_errors,
    _log,
    app,
)

TargetsDirOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--targets-dir",
        help="A folder of target YAML files (repeatable; also $MICO_TARGETS_DIR).",
    ),
]


def _number(text: str) -> float | str:
    """``"8"`` as 8.0 for check_bits; anything else as written (``t`` is ternary)."""
    try:
        return float(text)
    except ValueError:
        return text.strip()


#: the plans ``mico profile --models`` measures (mico.hw.modelprof.PLANS)
MODEL_PLANS = ("W8A8", "W4A4", "W2A2", "mixed", "W4A8", "W8A4", "W2A8", "W1A1")


@app.command("profile")
@_friendly_errors
def profile(
    target: Annotated[
        str,
        typer.Option(
            help="A target of `mico targets`: bitfusion (its cycle model), or one that runs C "
            "(host, rv32, vexriscv, boards: single-layer programs, seconds each)."
        ),
    ] = "bitfusion",
    ops: Annotated[
        str, typer.Option(help="Layer kinds: conv2d, dwconv, conv1d, linear (comma-separated).")
    ] = "conv2d,dwconv,conv1d,linear",
    samples: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=100_000,
            help="Random shapes per run (0: none; default: 200, or 0 on rv32, host and "
            "vexriscv, whose profile is the zoo's programs).",
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the Latin-hypercube shape samples.")] = 0,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Profile CSV (default: the cache, see --help of docs)."),
    ] = None,
    fit: Annotated[bool, typer.Option(help="Fit and save the latency proxy afterwards.")] = True,
    zoo: Annotated[
        bool,
        typer.Option(
            help="Include the zoo: its models' layers (bitfusion), or its models compiled "
            "whole (rv32, host, vexriscv; see --models)."
        ),
    ] = True,
    bits: Annotated[
        str | None,
        typer.Option(help="Widths to profile, each against each (default: the target's)."),
    ] = None,
    models: Annotated[
        str | None,
        typer.Option(
            help="Zoo models compiled whole and counted node by node (rv32, host, vexriscv; "
            "default: every deployable zoo model; 'none': skip)."
        ),
    ] = None,
    plans: Annotated[
        str,
        typer.Option(help="Plans the --models are measured at: WxAy (W4A8) or mixed."),
    ] = ",".join(MODEL_PLANS),
    targets_dir: TargetsDirOpt = None,
    jobs: Annotated[
        int,
        typer.Option(
            "--jobs",
            "-j",
            min=1,
            max=64,
            help="Programs measured at once (worker processes on rv32, host, vexriscv: "
            "single-layer programs, then --models).",
        ),
    ] = 1,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the summary.")] = False,
) -> None:
    """Measure layer shapes × bit pairs on TARGET (resumable), then fit its latency proxy.

    Shapes are the zoo's real layers plus Latin-hypercube samples; rows already in the profile
    are kept, so an interrupted run resumes. The proxy's error on held-out shapes is printed.
    On targets that run C each random shape is a single-layer program, its own node counted,
    and the zoo's models are compiled whole under each of --plans and counted node by node
    (the proxy learns the nodes in context: kernel paths, pooling, adds, input quantization,
    and the per-model overhead); those records are kept beside the profile and resume too.
    A record is reused while the program it measured is still the one mico generates (the
    same generator and the same kernel files it compiles: a change to another kernel file
    keeps it); the others are measured again, --jobs at a time.

    Example: mico profile --target bitfusion --ops conv2d,linear --samples 100
    """
    from mico.errors import ConfigError, PlanError
    from mico.hw.modelprof import TARGETS as MODEL_TARGETS
    from mico.hw.modelprof import models_path, plan_text, profile_models
    from mico.hw.profile import (
        BINARY_ONLY_KINDS,
        OP_KINDS,
        SIGN_WEIGHT_KINDS,
        SMALL_LAYER_MACS,
        bit_pairs,
        profile_path,
        read_profile,
        run_profile,
        sample_shapes,
    )
    from mico.hw.programs import resolve_backend
    from mico.hw.proxy import fit_target_proxy
    from mico.quant.arithmetic import check_bits

    kinds = []
    for op in (o.strip() for o in ops.split(",") if o.strip()):
        if op not in OP_KINDS:
            raise ConfigError(f"unknown --ops entry '{op}'; use {', '.join(OP_KINDS)}")
        kinds.append(OP_KINDS[op])
    if not kinds:
        raise ConfigError("--ops is empty; name at least one of " + ", ".join(OP_KINDS))
    measure = resolve_backend(target, targets_dir or [])
    widths = measure.bits
    if bits is not None:
        try:
            widths = tuple(
                check_bits(_number(b), "--bits entry") for b in bits.split(",") if b.strip()
            )
        except PlanError as exc:
            raise ConfigError(str(exc)) from None
        unknown = [b for b in widths if b not in measure.bits]
        if unknown or not widths:
            raise ConfigError(
                f"--bits {bits!r}: target '{target}' is profiled at "
                f"{', '.join(f'{b:g}' for b in measure.bits)}; pick among them"
            )
    path = out or profile_path(target, measure.fingerprint)
    log = (lambda _m: None) if quiet else typer.echo
    whole = target in MODEL_TARGETS  # the zoo as whole programs, not layers alone
    if samples is None:
        samples = 0 if whole else 200
    layers_of_zoo = zoo and not whole
    programs = measure.keyed is not None  # single-layer programs: small layers, W1A1 too
    small = SMALL_LAYER_MACS if programs else None
    shapes = (
        sample_shapes(kinds, samples, seed=seed, include_zoo=layers_of_zoo, max_macs=small)
        if samples or layers_of_zoo
        else []
    )
    extra = measure.extra_pairs if bits is None else ()
    pairs = bit_pairs(widths, extra)
    # single-layer programs: linear layers at the extra pairs only (W1A1: the small binary
    # layers the zoo lacks); the zoo's programs have the others, which measured alone misled
    # the fit (one row of odd in-features looked like another's path)
    # (given --bits, or on a target without W1A1, they are measured at the widths asked for)
    binary_only = [s for s in shapes if programs and extra and s.kind in BINARY_ONLY_KINDS]
    shapes = [s for s in shapes if s not in binary_only]
    log(f"profiling {len(shapes)} shapes x {len(pairs)} bit pairs"
        + (f" and {len(binary_only)} x {len(extra)}" if binary_only else "")
        + f" on {target} into {path}")  # fmt: skip
    result = run_profile(measure.measure, shapes, pairs, path, log=log, keyed=measure.keyed,
                         jobs=jobs)  # fmt: skip
    if binary_only:
        more = run_profile(measure.measure, binary_only, list(extra), path, log=log,
                           keyed=measure.keyed, jobs=jobs)  # fmt: skip
        result.measured += more.measured
        result.reused += more.reused
    # ... and the one-group convolutions at the sign-weight pairs too (W1A8: the sign tables,
    # mico_qconv2d_sign_lut, which the zoo's plans do not run)
    sign_pairs = list(measure.sign_pairs) if bits is None and programs else []
    signed = [s for s in shapes if sign_pairs and s.kind in SIGN_WEIGHT_KINDS]
    if signed:
        log(f"and {len(signed)} convolutions x {len(sign_pairs)} sign-weight pairs")
        more = run_profile(measure.measure, signed, sign_pairs, path, log=log,
                           keyed=measure.keyed, jobs=jobs)  # fmt: skip
        result.measured += more.measured
        result.reused += more.reused
    typer.echo(f"{path}: {result.measured} measured, {result.reused} already there")
    records = []
    names = _model_names(models if zoo or models else "none", target)
    if names:
        plan_names = [p.strip() for p in plans.split(",") if p.strip()]
        for name in plan_names:
            plan_text(name, [])  # a bad plan name fails before anything runs
        records_path = models_path(path)
        log(f"measuring {len(names)} models x {len(plan_names)} plans on {target} into "
            f"{records_path}")  # fmt: skip
        run = profile_models(records_path, names, plan_names, target, log=log, jobs=jobs)
        records = run.records
        typer.echo(
            f"{records_path}: {run.measured} measured, {run.same_program} regenerated "
            f"identical, {run.reused} reused"
            + (f", {len(run.failed)} not measurable (see above)" if run.failed else "")
        )
    if fit:
        rows = read_profile(path)
        if not rows and not records:
            raise ConfigError(f"nothing measured for {target}: give --samples or --models")
        base_rows, base_records = _ratio_base_profile(target, targets_dir or [])
        proxy, kind = fit_target_proxy(rows, records, target, measure.unit, seed=seed,
                                       base_rows=base_rows, base_records=base_records)  # fmt: skip
        saved = proxy.save(path.with_suffix(".proxy.json"))
        typer.echo(f"  {kind}")
        for kind, model in sorted(proxy.kinds.items()):
            errors = ", ".join(f"{k} {v:.1f}%" for k, v in sorted(model.holdout_mape.items()))
            typer.echo(f"  {kind:<9} kept {model.algorithm:<8} held-out MAPE: {errors or '-'}")
        if records:
            typer.echo(f"  per-model overhead: {proxy.overhead:+,.0f} "
                       f"{proxy.overhead_per_node:+,.1f} per node")  # fmt: skip
        typer.echo(f"proxy: {saved}")


def _ratio_base_profile(target: str, targets_dir: list[Path]) -> tuple[list, list]:
    """The stored profile of the target ``target``'s ratio proxy stands on (its layer rows and
    its program records, oldest first), or nothing when it has none."""
    from mico.hw.modelprof import models_path, read_records
    from mico.hw.profile import profile_path, read_profile
    from mico.hw.programs import resolve_backend
    from mico.hw.proxy import RATIO_BASE

    base_name = RATIO_BASE.get(target)
    if base_name is None:
        return [], []
    path = profile_path(base_name, resolve_backend(base_name, targets_dir).fingerprint)
    return read_profile(path), read_records(models_path(path))


def _model_names(models: str | None, target: str) -> list[str]:
    """The zoo models ``mico profile --models`` names (none on targets not counted per node)."""
    from mico.codegen.compile import DEPLOYABLE_MODELS
    from mico.errors import ConfigError
    from mico.hw.modelprof import TARGETS

    if models is not None and models.strip().lower() == "none":
        return []
    if target not in TARGETS:
        if models is not None:
            raise ConfigError(
                f"--models: whole models are counted node by node on {', '.join(TARGETS)}, "
                f"not '{target}'"
            )
        return []
    if models is None:
        return list(DEPLOYABLE_MODELS)
    names = [m.strip() for m in models.split(",") if m.strip()]
    unknown = [m for m in names if m not in DEPLOYABLE_MODELS]
    if unknown:
        raise ConfigError(
            f"--models: {', '.join(unknown)} not in the deployable zoo "
            f"({', '.join(DEPLOYABLE_MODELS)})"
        )
    return names


def _size_text(size: int | None) -> str:
    """Bytes as KiB/MiB when whole, '-' for no limit."""
    if size is None:
        return "-"
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def _bits_text(bits: tuple[float, ...]) -> str:
    """``1-8,1.58``: runs of whole widths as ranges, ternary as 1.58."""
    whole = sorted(int(b) for b in bits if float(b).is_integer())
    parts, start = [], None
    for i, b in enumerate(whole):
        start = b if start is None else start
        if i + 1 == len(whole) or whole[i + 1] != b + 1:
            parts.append(str(b) if b == start else f"{start}-{b}")
            start = None
    parts += [f"{b:g}" for b in bits if not float(b).is_integer()]
    return ",".join(parts)


@app.command("targets")
@_friendly_errors
def targets(
    targets_dir: TargetsDirOpt = None,
    available_only: Annotated[
        bool, typer.Option("--available", help="Only the targets whose tools are installed.")
    ] = False,
) -> None:
    """List the targets (one YAML file each): hardware, bit-widths, runner, cost model, and
    whether their tools are installed here (and if not, what to install).

    A new board is a file: drop NAME.yaml in a folder given with --targets-dir or
    $MICO_TARGETS_DIR (see docs/latency.md, "Target files").

    Example: mico targets --targets-dir boards/
    """
    from rich.console import Console
    from rich.table import Table

    from mico.targets.catalog import availability, load_catalog

    catalog = load_catalog(targets_dir or [])
    table = Table(title=f"{len(catalog)} target(s)", title_justify="left")
    for column in ("name", "isa", "flash", "ram", "W bits", "A bits", "runner", "cost",
                   "available"):  # fmt: skip
        table.add_column(column, no_wrap=column != "isa", overflow="fold")
    shown, notes = 0, []
    for name in sorted(catalog):
        spec = catalog[name]
        ok, why = availability(spec)
        if available_only and not ok:
            continue
        shown += 1
        isa = "+".join([spec.isa, *spec.extensions])
        table.add_row(
            name, isa, _size_text(spec.flash_bytes), _size_text(spec.ram_bytes),
            _bits_text(spec.weight_bits), _bits_text(spec.activation_bits), spec.runner,
            spec.cost, "yes" if ok else "no",
        )  # fmt: skip
        if not ok:
            notes.append(f"{name}: not available: {why}")
    Console(width=120, highlight=False, soft_wrap=False).print(table)
    for note in notes:
        typer.echo(note)
    if available_only and not shown:
        typer.echo("no target is available here; `mico targets` says what each one needs")


@app.command("latency")
@_friendly_errors
def latency(
    model: ModelArg = None,
    plan: PlanOpt = None,
    target: Annotated[str, typer.Option(help="A target of `mico targets`.")] = "bitfusion",
    mode: Annotated[
        str,
        typer.Option(
            help="measured: run the program (host, rv32, vexriscv) or the analytic model "
            "(bitfusion); proxy: a fitted latency proxy's predictions."
        ),
    ] = "measured",
    png: Annotated[Path | None, typer.Option(help="Also draw a bar chart into this PNG.")] = None,
    checkpoint: CheckpointOpt = None,
    c_mode: Annotated[
        str | None,
        typer.Option(
            "--c-mode", help="C mode of the program measured: static (default) or dynamic."
        ),
    ] = None,
    proxy: Annotated[
        Path | None, typer.Option(help="A proxy JSON (default: the one mico profile fitted).")
    ] = None,
    targets_dir: TargetsDirOpt = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Keep the measured C project here (default: temp)."),
    ] = None,
    dataset: DatasetOpt = None,
    samples: Annotated[
        int, typer.Option(min=1, help="Samples to calibrate on and to run (measured mode).")
    ] = 8,
    repeats: Annotated[int, typer.Option(min=1, help="Timed runs (host wall time).")] = 5,
    seed: SeedOpt = 0,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Also write the report as JSON here.")
    ] = None,
    model_args: ModelArgsOpt = None,
    input_shape: InputShapeOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Per-layer latency of MODEL under PLAN on TARGET: a table (value and share of the
    total) and the total, with what the total includes; --png draws it.

    bitfusion: the analytic cycle model per conv/linear layer. host, rv32, vexriscv: the
    generated C program, every node of one inference counted (callgrind on the host, instret
    under qemu, clock cycles on the VexRiscv RTL), plus the release build's count per
    inference. --mode proxy: a fitted proxy.

    Example: mico latency small_cnn --plan 4/8 --target rv32 --png latency.png
    """
    import json
    import tempfile

    import torch

    from mico.deploy import DeployOptions, compile_from_options, load_model
    from mico.errors import BuildError, ConfigError
    from mico.hw.latency import (
        MODES,
        analytic_report,
        check_plan,
        plot_report,
        program_report,
        proxy_report,
    )
    from mico.hw.layers import model_layer_shapes
    from mico.targets.catalog import availability, get_target

    if mode not in MODES:
        raise ConfigError(f"unknown --mode '{mode}'; use --mode {' or --mode '.join(MODES)}")
    spec = get_target(target, targets_dir or [])
    log = _log(quiet)
    program = mode == "measured" and spec.runner in ("host", "qemu-rv32", "verilator-vexriscv")
    if mode == "measured" and not program and spec.runner != "analytic-bitfusion":
        raise ConfigError(
            f"mico latency cannot measure on target '{target}' (runner {spec.runner}): "
            "qemu-user counts no instructions (its wall time is the emulator's); use a host, "
            "qemu-rv32, verilator-vexriscv or analytic-bitfusion target, or --mode proxy"
        )
    if mode == "measured":
        ok, why = availability(spec)
        if not ok:
            raise BuildError(f"target '{target}' is not available here: {why}")

    def options(out_dir: Path, c_mode: str | None) -> DeployOptions:
        return DeployOptions(
            model=model, checkpoint=checkpoint, plan=plan, out_dir=out_dir, dataset=dataset,
            samples=samples, seed=seed, model_args=model_args, input_shape=input_shape,
            force=True, mode=c_mode,
        )  # fmt: skip

    with tempfile.TemporaryDirectory(prefix="mico-latency-") as tmp:
        project_dir = out or Path(tmp) / "project"
        # the layers' geometry and widths (dynamic: no calibration needed to run it once)
        quantized, _ = load_model(options(project_dir, "dynamic" if checkpoint is None else None))
        example_of = getattr(quantized, "example_input", None)
        if example_of is None:
            shape = tuple(getattr(quantized, "default_input_shape", ()))
            if not shape:
                raise ConfigError("the model has no default input shape; pass --input-shape")
            example = torch.zeros((1, *shape))
        else:
            example = example_of()
        layers = model_layer_shapes(quantized, example)
        check_plan(layers, spec)
        if mode == "proxy" and spec.runner == "analytic-bitfusion":
            report = proxy_report(layers, spec, proxy)
        elif mode == "proxy":  # the program's graph: every node, on its kernel path
            default = "static" if checkpoint is None else None
            compiled, _ = compile_from_options(options(project_dir, c_mode or default), log)
            report = proxy_report(layers, spec, proxy, graph=compiled.graph)
        elif not program:
            report = analytic_report(layers, spec)
        else:
            default = "static" if checkpoint is None else None  # a checkpoint: its own mode
            compiled, inputs = compile_from_options(options(project_dir, c_mode or default), log)
            log(f"measuring {compiled.project.name} on {target} ({spec.runner})")
            report = program_report(compiled, inputs, spec, layers, repeats=repeats)
    if checkpoint is not None:
        title = f"{checkpoint} (its plan) on {target}"
    else:
        title = f"{model} ({plan or '8/8'}) on {target}"
    typer.echo(f"latency of {title}: {report.unit}, {mode}")
    typer.echo(report.table())
    if png is not None:
        typer.echo(f"chart: {plot_report(report, png, title=title)}")
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(report.to_dict(), indent=2) + "\n")
        typer.echo(f"report: {json_out}")
