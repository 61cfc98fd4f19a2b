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

app = typer.Typer(
    name="mico",
    help="PyTorch model -> mixed-precision quantized C program, verified bit for bit.",
    no_args_is_help=True,
    add_completion=False,
)


def _friendly_errors(fn: F) -> F:
    """Turn a MicoError into one clear line on stderr and exit code 2 (no traceback)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except MicoError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(EXIT_USAGE) from None

    return wrapper  # type: ignore[return-value]


@app.callback()
def _root() -> None:
    """mico: train, quantize per layer, compile to C, build, run and verify."""


@app.command()
@_friendly_errors
def demo(
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Output directory (replaced atomically).")
    ] = Path("out/demo"),
    seed: Annotated[int, typer.Option(help="Seed of the data split, weights and training.")] = 0,
    plan: Annotated[
        str,
        typer.Option(
            help="Per-layer bits as layer=W/A,... (W: weights, A: input activations, 1-8 each), "
            "or a YAML plan file."
        ),
    ] = "conv1=8/8,conv2=4/4,fc=2/8",
    epochs: Annotated[int, typer.Option(min=0, help="FP32 training epochs.")] = 15,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the summary.")] = False,
) -> None:
    """Run the whole pipeline on the bundled 8x8 digits and verify C against Python.

    Trains a small CNN, quantizes it post-training with a mixed per-layer plan, emits a C
    project into OUT, builds it with the host compiler, runs every test sample and compares
    the C outputs with the Python reference. Exits 1 if any sample disagrees.
    """
    from mico.pipeline import DemoOptions, run_demo

    result = run_demo(
        DemoOptions(out_dir=out, seed=seed, plan=plan, epochs=epochs),
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
def models() -> None:
    """List the models of the zoo and their quantizable layers (the names a plan uses)."""
    from mico.models import create_model, model_names
    from mico.quant import quantizable_layers

    for name in model_names():
        typer.echo(f"{name}: {', '.join(quantizable_layers(create_model(name)))}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
