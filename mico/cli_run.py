"""``mico run CONFIG.yaml``: the whole pipeline from one config file (registered on mico's app)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mico.cli import ForceOpt, _friendly_errors, app


@app.command("run")
@_friendly_errors
def run(
    config: Annotated[Path, typer.Argument(help="Run config (YAML): model, data, train, ...")],
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Run directory (default out/<name> of the config)."),
    ] = None,
    seed: Annotated[
        int | None, typer.Option(help="Override the config's seed (data split, weights).")
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the summary.")] = False,
    force: ForceOpt = False,
) -> None:
    """Run every stage a config describes (train, quantize, compile, verify) into one folder.

    Example: mico run examples/digits.yaml -o out/digits  (see docs/run.md for the format)
    """
    from mico.runconfig import load_run_config
    from mico.runner import run_config

    cfg = load_run_config(config)
    if seed is not None:
        cfg.seed = seed
    out_dir = out if out is not None else Path("out") / cfg.name
    result = run_config(cfg, out_dir, force=force, log=(lambda _m: None) if quiet else typer.echo)
    m = result.metrics
    typer.echo(
        f"{m['model']} {m['plan']}: FP32 {m['fp32_accuracy']:.4f}, C {m['c_accuracy']:.4f}; "
        f"report: {out_dir / 'report.md'}"
    )
    if not result.ok:
        typer.echo("error: the C program disagrees with the Python reference", err=True)
        raise typer.Exit(1)
