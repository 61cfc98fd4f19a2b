"""``mico profile``: measure layer shapes × bit pairs on a target and fit its latency proxy."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mico.cli import _friendly_errors, app


@app.command("profile")
@_friendly_errors
def profile(
    target: Annotated[
        str, typer.Option(help="Target to profile (bitfusion; see docs/latency.md).")
    ] = "bitfusion",
    ops: Annotated[
        str, typer.Option(help="Layer kinds: conv2d, dwconv, conv1d, linear (comma-separated).")
    ] = "conv2d,dwconv,conv1d,linear",
    samples: Annotated[int, typer.Option(min=1, max=100_000, help="Random shapes per run.")] = 200,
    seed: Annotated[int, typer.Option(help="Seed of the Latin-hypercube shape samples.")] = 0,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Profile CSV (default: the cache, see --help of docs)."),
    ] = None,
    fit: Annotated[bool, typer.Option(help="Fit and save the latency proxy afterwards.")] = True,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the summary.")] = False,
) -> None:
    """Measure layer shapes × bit pairs on TARGET (resumable), then fit its latency proxy.

    Shapes are the zoo's real layers plus Latin-hypercube samples; rows already in the profile
    are kept, so an interrupted run resumes. The proxy's error on held-out shapes is printed.

    Example: mico profile --target bitfusion --ops conv2d,linear --samples 100
    """
    from mico.errors import ConfigError
    from mico.hw.measure import backend
    from mico.hw.profile import (
        OP_KINDS,
        bit_pairs,
        profile_path,
        read_profile,
        run_profile,
        sample_shapes,
    )
    from mico.hw.proxy import fit_proxy

    kinds = []
    for op in (o.strip() for o in ops.split(",") if o.strip()):
        if op not in OP_KINDS:
            raise ConfigError(f"unknown --ops entry '{op}'; use {', '.join(OP_KINDS)}")
        kinds.append(OP_KINDS[op])
    if not kinds:
        raise ConfigError("--ops is empty; name at least one of " + ", ".join(OP_KINDS))
    measure = backend(target)
    path = out or profile_path(target, measure.fingerprint)
    log = (lambda _m: None) if quiet else typer.echo
    shapes = sample_shapes(kinds, samples, seed=seed)
    pairs = bit_pairs(measure.bits)
    log(f"profiling {len(shapes)} shapes x {len(pairs)} bit pairs on {target} into {path}")
    result = run_profile(measure.measure, shapes, pairs, path, log=log)
    typer.echo(f"{path}: {result.measured} measured, {result.reused} already there")
    if fit:
        proxy = fit_proxy(read_profile(path), target, measure.unit, seed=seed)
        saved = proxy.save(path.with_suffix(".proxy.json"))
        for kind, model in sorted(proxy.kinds.items()):
            errors = ", ".join(f"{k} {v:.1f}%" for k, v in sorted(model.holdout_mape.items()))
            typer.echo(f"  {kind:<9} kept {model.algorithm:<8} held-out MAPE: {errors or '-'}")
        typer.echo(f"proxy: {saved}")


TargetsDirOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--targets-dir",
        help="A folder of target YAML files (repeatable; also $MICO_TARGETS_DIR).",
    ),
]


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
