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
    qat_epochs: Annotated[
        int, typer.Option(min=0, help="Quantization-aware training epochs after calibration.")
    ] = 5,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the summary.")] = False,
) -> None:
    """Run the whole pipeline on the bundled 8x8 digits and verify C against Python.

    Trains a small CNN, quantizes it post-training with a mixed per-layer plan, emits a C
    project into OUT, builds it with the host compiler, runs every test sample and compares
    the C outputs with the Python reference. Exits 1 if any sample disagrees.
    """
    from mico.pipeline import DemoOptions, run_demo

    result = run_demo(
        DemoOptions(out_dir=out, seed=seed, plan=plan, epochs=epochs, qat_epochs=qat_epochs),
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
    """List the model zoo: input shape, default dataset, parameters, layers, MACs."""
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
    """List the datasets ``mico train --dataset`` accepts."""
    from mico.data import dataset_names

    for name in dataset_names():
        typer.echo(name)


@app.command()
@_friendly_errors
def train(
    model: Annotated[str, typer.Argument(help="Zoo model name (see `mico models`).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output directory.")] = Path("out/train"),
    dataset: Annotated[
        str | None, typer.Option(help="Dataset (default: the model's own, see `mico models`).")
    ] = None,
    root: Annotated[
        Path | None, typer.Option(help="Folder of on-disk datasets (default $MICO_DATA).")
    ] = None,
    resize: Annotated[int | None, typer.Option(help="Resize images to N x N.")] = None,
    epochs: Annotated[int, typer.Option(min=0, help="FP32 training epochs.")] = 10,
    lr: Annotated[float, typer.Option(help="Learning rate (Adam).")] = 1e-3,
    batch_size: Annotated[int, typer.Option(min=1)] = 64,
    seed: Annotated[int, typer.Option()] = 0,
    plan: Annotated[
        str | None,
        typer.Option(help="Quantize with layer=W/A,... (1-8 or 1.58) or a YAML plan file."),
    ] = None,
    method: Annotated[str, typer.Option(help="ptq (calibrate) or qat (fine-tune).")] = "ptq",
    qat_epochs: Annotated[int, typer.Option(min=0)] = 3,
    act_mode: Annotated[str, typer.Option(help="static or dynamic activation scales.")] = "static",
    per_channel: Annotated[bool, typer.Option(help="Per-channel weight scales.")] = False,
    lsq: Annotated[bool, typer.Option(help="Learn step sizes during QAT.")] = False,
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
) -> None:
    """Train a zoo model, quantize it (PTQ or QAT) and save checkpoints, plan and costs."""
    from mico.quant import QuantConfig
    from mico.train.run import TrainOptions, run_train

    dataset_options: dict[str, Any] = {}
    if root is not None:
        dataset_options["root"] = root
    if resize is not None:
        dataset_options["resize"] = resize
    config = QuantConfig(
        act_mode=act_mode,  # type: ignore[arg-type]
        weight_granularity="channel" if per_channel else "tensor",
        learned_step=lsq,
    )
    run_train(
        TrainOptions(
            model=model,
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
        ),
        log=typer.echo,
    )


def main() -> None:
    app()


if __name__ == "__main__":
    main()
