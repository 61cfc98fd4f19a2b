"""The ``mico`` command. Thin: parses options, calls :mod:`mico.pipeline`, reports errors."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from mico.errors import MicoError

F = TypeVar("F", bound=Callable[..., Any])
EXIT_USAGE = 2
#: set by ``mico --verbose``: errors also print their traceback (for bug reports)
_VERBOSE = {"on": False}

app = typer.Typer(
    name="mico",
    help="PyTorch model -> mixed-precision quantized C program, verified bit for bit.",
    no_args_is_help=True,
    add_completion=False,
)


def _friendly_errors(fn: F) -> F:
    """Turn a MicoError into one clear line on stderr and exit code 2 (no traceback).

    An ``OSError`` about a named file (a path the user gave) is reported the same way; any
    other exception is a bug in mico and keeps its traceback.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except MicoError as exc:
            if _VERBOSE["on"]:
                import traceback

                traceback.print_exc()
            typer.echo(f"error: {_one_line(str(exc))}", err=True)
            raise typer.Exit(EXIT_USAGE) from None
        except OSError as exc:
            if exc.filename is None:
                raise
            path = _one_line(repr(str(exc.filename)), 200)
            typer.echo(
                f"error: cannot use {path}: {exc.strerror or type(exc).__name__}; check the "
                "path (it must exist, be readable, and its folders be directories)",
                err=True,
            )
            raise typer.Exit(EXIT_USAGE) from None

    return wrapper  # type: ignore[return-value]


def _log(quiet: bool) -> Callable[[str], None]:
    """Where progress lines go: the terminal, or nowhere with --quiet."""
    return (lambda _message: None) if quiet else typer.echo


def _one_line(text: str, limit: int = 900) -> str:
    """``text`` on one line, cut to ``limit`` characters (an error line must stay readable)."""
    flat = " ".join(text.split("\n"))
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="Print only the summary.")]
ForceOpt = Annotated[
    bool,
    typer.Option(
        "--force", help="Replace OUT even when it holds files mico did not write (see docs)."
    ),
]


def _print_version(value: bool) -> None:
    if value:
        from mico import __version__

        typer.echo(f"mico {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", help="On an error, also print the traceback.")
    ] = False,
) -> None:
    """mico: train, quantize per layer, compile to C, build, run and verify."""
    _VERBOSE["on"] = verbose


@app.command()
@_friendly_errors
def demo(
    out: Annotated[
        Path,
        typer.Option("--out", "-o", help="Output directory (replaced atomically; see --force)."),
    ] = Path("out/demo"),
    seed: Annotated[
        int,
        typer.Option(min=0, max=2**32 - 1, help="Seed of the data split, weights and training."),
    ] = 0,
    plan: Annotated[
        str,
        typer.Option(
            help="Per-layer bits as layer=W/A,... (W: weights, A: input activations, 1-8 each), "
            "or a YAML plan file."
        ),
    ] = "conv1=8/8,conv2=4/4,fc=2/8",
    epochs: Annotated[int, typer.Option(min=0, help="FP32 training epochs.")] = 15,
    qat_epochs: Annotated[
        int, typer.Option(min=0, help="Quantization-aware training epochs after calibration.")
    ] = 5,
    target: Annotated[
        str,
        typer.Option(
            help="host, rv32 (also run under qemu-system-riscv32), or auto (rv32 when installed)."
        ),
    ] = "auto",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the summary.")] = False,
    force: ForceOpt = False,
) -> None:
    """Run the whole pipeline on the bundled 8x8 digits and verify C against Python.

    Trains a small CNN, quantizes it post-training with a mixed per-layer plan, emits a C
    project into OUT, builds it with the host compiler, runs every test sample and compares
    the C outputs with the Python reference. Exits 1 if any sample disagrees.

    Example: mico demo --plan conv1=8/8,conv2=4/4,fc=2/8 --target rv32
    """
    from mico.pipeline import DemoOptions, run_demo

    result = run_demo(
        DemoOptions(
            out_dir=out,
            seed=seed,
            plan=plan,
            epochs=epochs,
            qat_epochs=qat_epochs,
            target=target,
            force=force,
        ),
        log=(lambda _msg: None) if quiet else typer.echo,
    )
    assert result.report is not None
    typer.echo("\n" + result.report.summary_text())
    typer.echo(f"\nreport: {out / 'report.md'}  C project: {out}")
    if not result.ok:
        typer.echo(
            f"error: the C program disagrees with the Python reference on "
            f"{result.agreement.samples - result.agreement.exact} sample(s)",
            err=True,
        )
        raise typer.Exit(1)


@app.command("models")
@_friendly_errors
def models(
    layers: Annotated[
        bool, typer.Option("--layers", help="Also list each model's quantizable layers.")
    ] = False,
) -> None:
    """List the model zoo: input shape, default dataset, parameters, layers, MACs.

    Example: mico models --layers
    """
    from mico.models import from_zoo, model_zoo
    from mico.quant import model_costs

    typer.echo(f"{'model':<14} {'input':<12} {'dataset':<15} {'params':>8} {'layers':>6} MACs")
    for entry in model_zoo():
        model = from_zoo(entry.name)
        costs = model_costs(model)
        shape = "x".join(map(str, model.default_input_shape))
        params = sum(p.numel() for p in model.parameters())
        typer.echo(
            f"{entry.name:<14} {shape:<12} {entry.dataset:<15} {params:>8} "
            f"{len(costs.layers):>6} {costs.macs}"
        )
        if layers:
            typer.echo(f"  layers: {', '.join(c.name for c in costs.layers)}")


@app.command("datasets")
@_friendly_errors
def datasets() -> None:
    """List the datasets ``--dataset`` accepts: which are offline, which read files.

    Example: mico datasets
    """
    from mico.data import dataset_names
    from mico.registry import ModuleRegistry

    typer.echo(f"{'dataset':<17} {'source':<44} description")
    for name in dataset_names():
        meta = ModuleRegistry.get_metadata(name)
        source = (
            "offline (generated or bundled)"
            if meta.extra.get("offline")
            else "files under --root / $MICO_DATA (no download)"
        )
        typer.echo(f"{name:<17} {source:<44} {meta.summary}")


@app.command()
@_friendly_errors
def train(
    model: Annotated[
        str,
        typer.Argument(help="Zoo model name (see `mico models`) or path/to/file.py:ClassName."),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output directory.")] = Path("out/train"),
    model_args: ModelArgsOpt = None,
    input_shape: InputShapeOpt = None,
    dataset: Annotated[
        str | None, typer.Option(help="Dataset (default: the model's own, see `mico models`).")
    ] = None,
    root: Annotated[
        Path | None, typer.Option(help="Folder of on-disk datasets (default $MICO_DATA).")
    ] = None,
    resize: Annotated[int | None, typer.Option(help="Resize images to N x N.")] = None,
    epochs: Annotated[int, typer.Option(help="FP32 training epochs (0 or more).")] = 10,
    lr: Annotated[float, typer.Option(help="Learning rate (Adam), in (0, 10].")] = 1e-3,
    batch_size: Annotated[int, typer.Option(help="Samples per batch (1 or more).")] = 64,
    seed: Annotated[int, typer.Option()] = 0,
    plan: Annotated[
        str | None,
        typer.Option(help="Quantize with layer=W/A,... (1-8 or 1.58) or a YAML plan file."),
    ] = None,
    method: Annotated[str, typer.Option(help="ptq (calibrate) or qat (fine-tune).")] = "ptq",
    qat_epochs: Annotated[int, typer.Option(help="QAT epochs (0 or more).")] = 3,
    act_mode: Annotated[str, typer.Option(help="static or dynamic activation scales.")] = "static",
    per_channel: Annotated[bool, typer.Option(help="Per-channel weight scales.")] = False,
    lsq: Annotated[bool, typer.Option(help="Learn step sizes during QAT.")] = False,
    act_asymmetric: Annotated[
        bool,
        typer.Option(help="Zero-point (asymmetric) activation codes for skewed ranges (2+ bits)."),
    ] = False,
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
    quiet: QuietOpt = False,
    force: ForceOpt = False,
) -> None:
    """Train a zoo model (or your own, from a file), quantize it (PTQ or QAT) and save
    checkpoints, plan and costs.

    Example: mico train small_cnn --epochs 5 --plan 4/4 --method qat -o out/train
    """
    from mico.quant import QuantConfig
    from mico.train.options import check_train_numbers
    from mico.train.run import TrainOptions, run_train

    numbers = {"epochs": epochs, "lr": lr, "batch_size": batch_size, "qat_epochs": qat_epochs}
    numbers["seed"] = seed
    flags = {"resize": "--resize", **{k: "--" + k.replace("_", "-") for k in numbers}}
    check_train_numbers({**numbers, "resize": resize}, flags)  # one line naming the flag
    dataset_options: dict[str, Any] = {}
    if root is not None:
        dataset_options["root"] = root
    if resize is not None:
        dataset_options["resize"] = resize
    config = QuantConfig(
        act_mode=act_mode,  # type: ignore[arg-type]
        weight_granularity="channel" if per_channel else "tensor",
        learned_step=lsq,
        act_asymmetric=act_asymmetric,
    )
    from mico.errors import DatasetError

    options = TrainOptions(
        model=model,
        model_args=model_args,
        input_shape=input_shape,
        out_dir=out,
        dataset=dataset,
        dataset_options=dataset_options,
        epochs=epochs,
        lr=lr,
        batch_size=batch_size,
        seed=seed,
        plan=plan,
        method=method,  # type: ignore[arg-type]
        qat_epochs=qat_epochs,
        quant=config,
        progress=progress,
        force=force,
    )
    try:
        run_train(options, log=_log(quiet))
    except DatasetError as exc:  # name the CLI's flags, and the offline way out
        message = str(exc).replace("pass root=...", "pass --root DIR").replace("root=", "--root ")
        if dataset is None and "synthetic" not in message:
            message = message.rstrip(". ") + "; or train offline on data shaped to the model: "
            message += "--dataset synthetic"
        raise DatasetError(message) from None


def _deploy_options(
    model: str | None,
    checkpoint: Path | None,
    plan: str | None,
    mode: str | None,
    out: Path,
    name: str,
    dataset: str | None,
    samples: int,
    seed: int,
    per_channel: bool,
    **extra: Any,
) -> Any:
    from mico.deploy import DeployOptions

    return DeployOptions(
        model=model,
        checkpoint=checkpoint,
        plan=plan,
        mode=mode,
        out_dir=out,
        name=name,
        dataset=dataset,
        samples=samples,
        seed=seed,
        per_channel=per_channel,
        **extra,
    )


ModelArg = Annotated[
    str | None,
    typer.Argument(
        help="Zoo model name (see `mico models`), path/to/file.py:ClassName, or a saved "
        "torch.export program (.pt2); or use --checkpoint."
    ),
]
ModelArgsOpt = Annotated[
    str | None,
    typer.Option(help="Constructor arguments of a file's model: JSON object or YAML/JSON file."),
]
InputShapeOpt = Annotated[
    str | None,
    typer.Option(help="One sample's shape for a model from a file, e.g. 3,32,32 (no batch)."),
]
CheckpointOpt = Annotated[
    Path | None, typer.Option(help="A checkpoint written by `mico train` (quantized.pt).")
]
PlanOpt = Annotated[
    str | None,
    typer.Option(help="layer=W/A,..., a YAML plan file, or W/A for every layer (default 8/8)."),
]
ModeOpt = Annotated[
    str | None,
    typer.Option(
        help="dynamic (float between layers) or static (integer-only, packed); default: the "
        "checkpoint's own mode, else dynamic."
    ),
]
NameOpt = Annotated[str, typer.Option(help="C name of the model (files, symbols).")]
DatasetOpt = Annotated[
    str | None, typer.Option(help="Calibration/verification data (default: the model's).")
]
SamplesOpt = Annotated[int, typer.Option(min=1, help="Samples to calibrate and verify on.")]
SeedOpt = Annotated[
    int, typer.Option(min=0, max=2**32 - 1, help="Seed of the data split and sampling.")
]
PerChannelOpt = Annotated[bool, typer.Option(help="Per-channel weight scales.")]
ActAsymmetricOpt = Annotated[
    bool,
    typer.Option(
        help="Zero-point (asymmetric) activation codes for skewed ranges (2+ bits; zoo models, "
        "a checkpoint keeps its own setting)."
    ),
]

WeightsFileOpt = Annotated[
    bool,
    typer.Option(
        "--weights-file",
        help="Keep the constants out of the code: <name>.bin is a weights file the program "
        "loads at run time (replace it with `mico export-weights`, no recompiling).",
    ),
]

PatchOpt = Annotated[
    str,
    typer.Option(
        "--patch",
        help="auto: run the first high-resolution layers in row bands when that lowers the "
        "arena (recomputed border rows are reported); off: whole tensors.",
    ),
]


PreferOpt = Annotated[
    str,
    typer.Option(
        "--prefer",
        help="speed: the fast kernel paths (more code); size: the plain kernels only (the "
        "least flash, every layer slower).",
    ),
]


@app.command("compile")
@_friendly_errors
def compile_cmd(
    model: ModelArg = None,
    checkpoint: CheckpointOpt = None,
    plan: PlanOpt = None,
    mode: ModeOpt = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Project directory.")] = Path(
        "out/compile"
    ),
    name: NameOpt = "model",
    dataset: DatasetOpt = None,
    samples: SamplesOpt = 32,
    seed: SeedOpt = 0,
    per_channel: PerChannelOpt = False,
    act_asymmetric: ActAsymmetricOpt = False,
    model_args: ModelArgsOpt = None,
    input_shape: InputShapeOpt = None,
    quiet: QuietOpt = False,
    force: ForceOpt = False,
    weights_file: WeightsFileOpt = False,
    patch: PatchOpt = "off",
    prefer: PreferOpt = "speed",
) -> None:
    """Quantize (zoo model + plan) or load (checkpoint) a model and write its C project.

    The project holds the model's C source and header, packed weights, the kernels it uses,
    main.c and a Makefile (TARGET=host|rv32|rv64, DEBUG=1, SANITIZE=1), plus memory.json and
    memory_map.png (the arena against its lower bound).

    Example: mico compile resnet8 --plan 4/8 --mode static -o out/resnet8
    """
    from mico.deploy import compile_from_options

    options = _deploy_options(
        model, checkpoint, plan, mode, out, name, dataset, samples, seed, per_channel,
        force=force, model_args=model_args, input_shape=input_shape,
        act_asymmetric=act_asymmetric, weights_file=weights_file, patch=patch, prefer=prefer,
    )  # fmt: skip
    compiled, _ = compile_from_options(options, log=_log(quiet))
    project = compiled.project
    what, where = "flash", ""
    if project.weights_file:  # --weights-file: none in flash
        what, where = "constants", f"in {project.weights_file}, loaded at run time "
    typer.echo(
        f"wrote {len(project.files)} files to {out}: {what} {sum(project.flash.values())} B "
        f"{where}(weights {project.flash['weights']} B), arena {project.arena.size} B (lower bound "
        f"{project.arena.lower_bound} B)"
    )
    if project.prefer == "size":
        typer.echo("kernels: the plain ones only (--prefer size: least flash, every layer slower)")
    if project.patch and project.patch.get("patched"):
        p = project.patch
        typer.echo(
            f"patches: {len(p['stage'])} first ops in {p['bands']} bands of "
            f"{p['rows_per_band']} rows, arena {p['arena_without_patches']} -> "
            f"{p['arena_bytes']} B (LOAD-FA {p['load_fa']} B), {p['extra_macs']} MACs recomputed"
        )


@app.command("verify")
@_friendly_errors
def verify_cmd(
    model: ModelArg = None,
    checkpoint: CheckpointOpt = None,
    plan: PlanOpt = None,
    mode: ModeOpt = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Project directory.")] = Path(
        "out/verify"
    ),
    name: NameOpt = "model",
    dataset: DatasetOpt = None,
    samples: SamplesOpt = 32,
    seed: SeedOpt = 0,
    per_channel: PerChannelOpt = False,
    act_asymmetric: ActAsymmetricOpt = False,
    target: Annotated[
        list[str] | None,
        typer.Option(help="host, rv32, rv64 or vexriscv (cycle-accurate RTL core); repeatable."),
    ] = None,
    cc: Annotated[str, typer.Option(help="Host C compiler (gcc or clang).")] = "gcc",
    sanitize: Annotated[bool, typer.Option(help="Host build with ASan and UBSan.")] = False,
    model_args: ModelArgsOpt = None,
    input_shape: InputShapeOpt = None,
    quiet: QuietOpt = False,
    force: ForceOpt = False,
    per_layer: Annotated[
        bool,
        typer.Option(
            "--per-layer",
            help="Also count every node of sample 0 (rv32: instructions, vexriscv: cycles, host: "
            "callgrind instructions if valgrind is installed) into verify.md/json.",
        ),
    ] = False,
    weights_file: WeightsFileOpt = False,
    patch: PatchOpt = "off",
    prefer: PreferOpt = "speed",
) -> None:
    """Compile, build, run the samples on each target and compare with the Python reference.

    Static projects must match bit for bit, dynamic ones to 1e-5 relative. On a mismatch a
    debug build names the first layer whose output differs. Exits 1 if any target disagrees.

    Example: mico verify --checkpoint out/train/quantized.pt --target host --target rv32
    """
    from mico.deploy import run_verify

    options = _deploy_options(
        model, checkpoint, plan, mode, out, name, dataset, samples, seed, per_channel,
        targets=tuple(target or ["host"]), cc=cc, sanitize=sanitize, force=force,
        model_args=model_args, input_shape=input_shape, per_layer=per_layer,
        act_asymmetric=act_asymmetric, weights_file=weights_file, patch=patch, prefer=prefer,
    )  # fmt: skip
    result = run_verify(options, log=_log(quiet))
    if quiet:  # the summary: one line per target
        for r in result.results:
            typer.echo(f"{r.target}: {r.agreement.summary()}")
    if not result.ok:
        raise typer.Exit(1)


@app.command("export-weights")
@_friendly_errors
def export_weights_cmd(
    model: ModelArg = None,
    checkpoint: CheckpointOpt = None,
    project: Annotated[
        Path,
        typer.Option(help="The project compiled with --weights-file that will run the weights."),
    ] = Path("out/compile"),
    out: Annotated[Path, typer.Option("--out", "-o", help="The weights file to write.")] = Path(
        "model.bin"
    ),
    plan: PlanOpt = None,
    mode: ModeOpt = None,
    dataset: DatasetOpt = None,
    samples: SamplesOpt = 32,
    seed: SeedOpt = 0,
    per_channel: PerChannelOpt = False,
    act_asymmetric: ActAsymmetricOpt = False,
    model_args: ModelArgsOpt = None,
    input_shape: InputShapeOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Write the weights file of a model (other weights, same architecture, plan and mode) for
    a project compiled with --weights-file: its program runs it without recompiling. A model
    whose layout differs from the project's is refused, the difference named.

    Example: mico export-weights --checkpoint b/quantized.pt --project out/cnn -o b.bin
    """
    from mico.deploy import export_weights

    options = _deploy_options(
        model, checkpoint, plan, mode, Path("."), "model", dataset, samples, seed, per_channel,
        model_args=model_args, input_shape=input_shape, act_asymmetric=act_asymmetric,
    )  # fmt: skip
    read = export_weights(options, project, out, log=_log(quiet))
    bits = ", ".join(f"{k}={v}" for k, v in read.layer_bits().items())
    typer.echo(f"wrote {out}: {len(read.entries)} constants, weights bits {bits or '-'}, "
               f"fingerprint {read.fingerprint_hex[:16]}")  # fmt: skip


ops_app = typer.Typer(help="The operator registry: list ops, show one op's signature and rules.")
app.add_typer(ops_app, name="ops")


@ops_app.command("list")
@_friendly_errors
def ops_list(
    category: Annotated[
        str | None, typer.Option(help="Only this category (e.g. TensorOp).")
    ] = None,
    search: Annotated[str | None, typer.Option(help="Only ops matching these words.")] = None,
    mode: Annotated[
        str | None, typer.Option(help="Only ops this C mode compiles: dynamic or static.")
    ] = None,
) -> None:
    """Every registered op with its category, rules and the C modes that compile it.

    Example: mico ops list --mode static
    """
    import mico.codegen  # noqa: F401  (attaches the C emit rules)
    from mico.codegen.support import MODES, c_modes, ops_by_mode
    from mico.errors import RegistryError
    from mico.ir import OpRegistry
    from mico.ir.ops.registry import RULES
    from mico.quant import export_ops  # noqa: F401  (registers mico.bit_*)

    if mode is not None and mode not in MODES:
        raise RegistryError(f"unknown --mode '{mode}'; use --mode dynamic or --mode static")
    names = OpRegistry.search(search) if search else OpRegistry.list_ops(category)
    if search and category:
        names = [n for n in names if n in set(OpRegistry.list_ops(category))]
    if mode is not None:  # the mode's own list: ATen ops it lowers need no registration
        wanted = ops_by_mode()[mode]
        names = [n for n in wanted if n in set(names)] if (search or category) else wanted
    typer.echo(f"{'op':<36} {'category':<10} {'C modes':<16} rules")
    for name in names:
        registered = OpRegistry.is_registered(name)
        op = OpRegistry.get(name) if registered else None
        rules = ",".join(r for r in RULES if op and r in op.rules) or "schema"
        modes = ",".join(c_modes(name)) or "-"
        category_name = (op.category if op else "") or "-"
        typer.echo(f"{name:<36} {category_name:<10} {modes:<16} {rules}")
    typer.echo(
        f"{len(names)} registered op(s). Every other ATen op (aten.*) converts and executes "
        "through its schema (default rules): `mico ops info aten.NAME.OVERLOAD` shows it."
    )


@ops_app.command("info")
@_friendly_errors
def ops_info(name: Annotated[str, typer.Argument(help="Op name, e.g. tensor.add.")]) -> None:
    """One op: description, arguments, attributes and rules; ATen ops show their schema.

    Example: mico ops info aten.conv2d.default
    """
    import mico.codegen  # noqa: F401  (attaches the C emit rules)
    from mico.ir import OpRegistry
    from mico.quant import export_ops  # noqa: F401  (registers mico.bit_*)

    schema = _aten_schema(name)
    if OpRegistry.is_registered(name) and schema is None:
        typer.echo(OpRegistry.get(name).describe())
        return
    if schema is None:
        OpRegistry.get(name)  # raises RegistryError with close matches
    rules = sorted(OpRegistry.get(name).rules) if OpRegistry.is_registered(name) else []
    typer.echo(f"{name} (ATen, default rules: schema-driven conversion and execution)")
    typer.echo(f"schema: {schema}")
    if rules:
        typer.echo(f"registered rules: {', '.join(rules)}")


def _aten_schema(name: str) -> str | None:
    """The schema of ``aten.op.overload``, or None when it is not an ATen op."""
    import torch

    parts = name.split(".")
    if len(parts) != 3 or parts[0] != "aten":
        return None
    packet = getattr(torch.ops.aten, parts[1], None)
    overload = getattr(packet, parts[2], None) if packet is not None else None
    return None if overload is None else str(overload._schema)


from mico import cli_discovery, cli_hw, cli_run  # noqa: E402, F401  (registry; profile, targets, latency; run)


def main() -> None:
    """The ``mico`` command: a usage error (a flag out of range, a missing argument) is one
    ``error:`` line naming the flag and exit code 2, like every other refusal."""
    import sys

    from typer import _click as click  # typer vendors click (exceptions live there)

    try:
        result = app(standalone_mode=False)
    except click.exceptions.UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # `mico` alone: the help, as typer does
            typer.echo(exc.format_message())
            sys.exit(0)
        command = exc.ctx.command_path if exc.ctx is not None else "mico"
        typer.echo(f"error: {_one_line(exc.format_message())} (see `{command} --help`)", err=True)
        sys.exit(EXIT_USAGE)
    except KeyboardInterrupt:
        typer.echo("error: interrupted", err=True)
        sys.exit(130)
    sys.exit(result if isinstance(result, int) else 0)


if __name__ == "__main__":
    # `python -m mico.cli` runs this file as __main__, a second copy of the module: the other
    # command modules register on `mico.cli`'s app, so run that one (else `profile`, `latency`
    # ... are missing)
    from mico.cli import main as _main

    _main()
