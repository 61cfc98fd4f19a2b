"""``mico train``: train a zoo model, quantize it (PTQ or QAT) and save checkpoints and costs."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mico.atomic import atomic_directory, check_output_dir
from mico.data import load_dataset
from mico.errors import ConfigError, DatasetError, PlanError
from mico.models import from_zoo, zoo_entry
from mico.quant import QuantConfig, QuantPlan, apply_plan, as_plan, calibrate, model_costs
from mico.train.checkpoint import save_checkpoint
from mico.train.loop import accuracy, fit, seed_everything
from mico.train.options import check_train_numbers

Log = Callable[[str], None]


@dataclass
class TrainOptions:
    """What ``mico train`` does: model, data, epochs, and the optional quantization."""

    model: str
    out_dir: Path
    dataset: str | None = None  # default: the zoo entry's dataset
    dataset_options: dict[str, Any] = field(default_factory=dict)
    model_options: dict[str, Any] = field(default_factory=dict)
    model_args: str | dict[str, Any] | None = None  # a model from a file: its constructor args
    input_shape: str | None = None  # a model from a file: one sample's shape
    epochs: int = 10
    lr: float = 1e-3
    batch_size: int = 64
    seed: int = 0
    plan: str | None = None
    method: Literal["ptq", "qat"] = "ptq"
    qat_epochs: int = 3
    quant: QuantConfig = field(default_factory=QuantConfig)
    calibration_batches: int = 8
    progress: bool = False
    force: bool = False  # replace an output directory mico did not write


@dataclass
class TrainResult:
    out_dir: Path
    metrics: dict[str, Any]
    plan: QuantPlan | None


def run_train(options: TrainOptions, log: Log = print) -> TrainResult:
    """Train FP32, then (with a plan) quantize by PTQ or QAT; write checkpoints and a report."""
    check_train_numbers(vars(options))  # before any work
    check_output_dir(options.out_dir, force=options.force)
    seed_everything(options.seed)
    from mico.models.resolve import is_model_spec, resolve_model

    if is_model_spec(options.model):  # path/to/file.py:Class
        entry = None
        model, _ = resolve_model(options.model, options.model_args, options.input_shape)
        if options.dataset is None:
            raise DatasetError(
                f"{options.model} is a model from a file, which has no default dataset; pass "
                "--dataset (see `mico datasets`), e.g. --dataset synthetic for data shaped to "
                "the model"
            )
    else:
        if options.model_args is not None or options.input_shape is not None:
            raise ConfigError("--model-args and --input-shape apply to models from files only")
        entry = zoo_entry(options.model)
        model = from_zoo(options.model, **options.model_options)
    if options.method not in ("ptq", "qat"):
        raise PlanError(f"method must be 'ptq' or 'qat', got {options.method!r}")
    plan = None
    if options.plan is not None:  # check the plan before any training
        plan = as_plan(options.plan, model.quantize_layer_names())
    dataset = options.dataset or entry.dataset  # type: ignore[union-attr]
    if dataset == "synthetic" and getattr(model, "task", "") == "language":
        dataset = "synthetic_tokens"  # a language model learns token sequences
    split = load_dataset(dataset, seed=options.seed, **_shaped(dataset, model, options))
    expected = tuple(model.default_input_shape)
    if split.input_shape != expected:
        raise DatasetError(
            f"model '{options.model}' takes inputs of shape {expected} but dataset '{dataset}' "
            f"gives {split.input_shape}; pick a matching dataset or resize it "
            "(e.g. --resize 28 for digits into lenet)"
        )
    train_loader, test_loader = split.loaders(options.batch_size, seed=options.seed)
    log(
        f"training {options.model} on {dataset} ({len(split.x_train)} train / "
        f"{len(split.x_test)} test samples) for {options.epochs} epochs"
    )
    history = fit(
        model,
        train_loader,
        options.epochs,
        lr=options.lr,
        loss_fn=model.loss,
        progress=options.progress,
        log=lambda m: log("  " + m),
    )
    metrics: dict[str, Any] = {
        "model": options.model,
        "dataset": dataset,
        "fp32_accuracy": accuracy(model, test_loader),
        "history": history,
    }
    log(f"FP32 test accuracy {metrics['fp32_accuracy']:.4f}")
    quantized = None
    if plan is not None:
        quantized = apply_plan(model, plan, options.quant)
        batches = [x for x, _ in train_loader][: options.calibration_batches]
        calibrate(quantized, batches)
        if options.method == "qat":
            log(f"quantization-aware training with {plan.to_string()}")
            fit(
                quantized,
                train_loader,
                options.qat_epochs,
                lr=options.lr / 3,
                loss_fn=model.loss,
                progress=options.progress,
                log=lambda m: log("  " + m),
            )
        metrics["quantized_accuracy"] = accuracy(quantized, test_loader)
        metrics["plan"] = plan.to_string()
        metrics["method"] = options.method
        log(f"quantized ({options.method}) test accuracy {metrics['quantized_accuracy']:.4f}")
    costs = model_costs(quantized if quantized is not None else model)
    metrics["costs"] = costs.to_dict()["total"]
    with atomic_directory(options.out_dir, force=options.force, command="mico train") as tmp:
        save_checkpoint(model, tmp / "fp32.pt", dataset=dataset)
        if quantized is not None and plan is not None:
            save_checkpoint(quantized, tmp / "quantized.pt", dataset=dataset)
            (tmp / "plan.yaml").write_text(plan.to_yaml())
        (tmp / "costs.md").write_text(costs.to_markdown())
        (tmp / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    written = ["fp32.pt", "costs.md", "metrics.json"]
    if quantized is not None:
        written[1:1] = ["quantized.pt", "plan.yaml"]
    log(f"wrote {options.out_dir}: {', '.join(written)}")
    if quantized is None:
        log("no quantized.pt: pass --plan (e.g. --plan 4/4) to quantize after training")
    return TrainResult(options.out_dir, metrics, plan)


def _shaped(dataset: str, model: Any, options: TrainOptions) -> dict[str, Any]:
    """Reader options; the synthetic sets are shaped to the model (any zoo model trains
    offline): samples of its input shape and as many classes as it has outputs."""
    kwargs = dict(options.dataset_options)
    if dataset not in ("synthetic", "synthetic_tokens"):
        return kwargs
    for ignored in ("resize", "root"):
        kwargs.pop(ignored, None)
    shape = tuple(model.default_input_shape)
    if dataset == "synthetic_tokens":
        kwargs.setdefault("seq_len", shape[-1])
        kwargs.setdefault("vocab_size", getattr(model, "vocab_size", 64))
        return kwargs
    import torch

    with torch.no_grad():
        out = model.eval()(torch.zeros((1, *shape), dtype=model.input_dtype))
    model.train()
    kwargs.setdefault("shape", shape)
    kwargs.setdefault("num_classes", int(out.reshape(1, -1).shape[1]))
    return kwargs
