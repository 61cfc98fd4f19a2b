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


@app.command("generate")
@_friendly_errors
def generate(
    model: Annotated[
        str | None, typer.Argument(help="A zoo language model (tinyllama), or use --checkpoint.")
    ] = None,
    checkpoint: Annotated[
        Path | None, typer.Option(help="A checkpoint of a language model (mico train).")
    ] = None,
    prompt: Annotated[str, typer.Option(help="The text to continue.")] = "Once upon a time",
    tokens: Annotated[int, typer.Option(help="How many tokens to generate.")] = 16,
    target: Annotated[str, typer.Option(help="Where the C program runs: host.")] = "host",
    seed: Annotated[int, typer.Option(help="Seed of an untrained zoo model's weights.")] = 0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the texts.")] = False,
) -> None:
    """Generate text greedily in Python and in the model's C program; show both and where
    they part (if they do). Exits 1 when they differ.

    Example: mico generate --checkpoint out/llm/fp32.pt --prompt "Once upon a time" --tokens 32
    """
    import torch

    from mico.errors import ConfigError
    from mico.generate import decode, tokenizer_for
    from mico.generate import generate as run_generation

    if (model is None) == (checkpoint is None):
        raise ConfigError("give a zoo model name or --checkpoint (one of them)")
    extra: dict = {}
    if checkpoint is not None:
        from mico.train.checkpoint import load_checkpoint, read_checkpoint

        net = load_checkpoint(checkpoint)
        extra = read_checkpoint(checkpoint).extra
    else:
        from mico.models import from_zoo

        torch.manual_seed(seed)
        net = from_zoo(model)
    tokenizer = tokenizer_for(net, extra)
    ids = tokenizer.encode(prompt)
    log = (lambda _m: None) if quiet else typer.echo
    result = run_generation(net, ids, tokens, target=target, log=log)
    python_text = decode(tokenizer, result.python_ids)
    c_text = decode(tokenizer, result.c_ids)
    typer.echo(f"prompt: {prompt!r}")
    typer.echo(f"python: {python_text!r}  ids {result.python_ids}")
    typer.echo(f"C ({target}): {c_text!r}  ids {result.c_ids}")
    diff = result.first_difference
    if diff is None:
        typer.echo(f"the C program generated the same {tokens} tokens")
        return
    typer.echo(
        f"error: first difference at generated token {diff}: Python "
        f"{result.python_ids[diff] if diff < len(result.python_ids) else '-'}, C "
        f"{result.c_ids[diff] if diff < len(result.c_ids) else '-'}",
        err=True,
    )
    raise typer.Exit(1)
