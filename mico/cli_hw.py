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
