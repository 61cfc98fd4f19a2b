"""``mico run CONFIG.yaml``: every stage of one run config, in order, into one run directory.

Stages: build the model (zoo name, layers config or user file), load data, train FP32,
quantize with the plan (PTQ or QAT), compile to C, build and run on each target, hold the C
outputs to the Python reference, report. Everything is checked before the first stage, and the
run directory appears only when every file in it is written.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from mico.atomic import atomic_directory, check_output_dir
from mico.errors import ConfigError, DatasetError
from mico.runconfig import RunConfig

Log = Callable[[str], None]


@dataclass
class RunResult:
    """What a run wrote and measured."""

    out_dir: Path
    metrics: dict[str, Any] = field(default_factory=dict)
    ok: bool = True


def build_model(config: RunConfig) -> tuple[nn.Module, str | None, str]:
    """The FP32 model, its zoo name (if any) and its default data set."""
    from mico.models import from_zoo, zoo_entry
    from mico.registry import ModelFactory

    torch.manual_seed(config.seed)
    spec = config.model
    if isinstance(spec, Mapping):
        if config.model_args:
            raise ConfigError("'model_args': only zoo models and files take model_args")
        model = ModelFactory.from_config(spec)
        if not getattr(model, "default_input_shape", ()):
            raise ConfigError("'model.input_shape': a layers config needs the sample shape")
        return model, None, config.dataset or "synthetic"
    if ":" in spec or spec.endswith((".py", ".pt2", ".pt")):
        try:
            from mico.models.resolve import resolve_model
        except ImportError:  # pragma: no cover - arrives with user-model support
            raise ConfigError(
                f"'model': {spec!r} names a file; this mico reads zoo names and layers configs"
            ) from None
        resolved = resolve_model(spec, model_args=config.model_args or None)
        return resolved[0], None, config.dataset or "synthetic"
    entry = zoo_entry(spec)
    return from_zoo(spec, **config.model_args), spec, entry.dataset


def _split(config: RunConfig, model: nn.Module, dataset: str):
    from mico.data import load_dataset

    shape = tuple(getattr(model, "default_input_shape", ()))
    options = dict(config.dataset_options)
    if dataset == "synthetic":
        options.setdefault("shape", shape)
        out_features = _output_size(model, shape)
        options.setdefault("num_classes", out_features)
    split = load_dataset(dataset, seed=config.seed, **options)
    if tuple(split.input_shape) != shape:
        raise DatasetError(
            f"the model takes samples of shape {shape} but dataset '{dataset}' gives "
            f"{tuple(split.input_shape)}; pick a matching dataset (data.dataset) or model"
        )
    return split


def _output_size(model: nn.Module, shape: tuple[int, ...]) -> int:
    with torch.no_grad():
        out = model.eval()(torch.zeros((1, *shape)))
    model.train()
    return int(out.reshape(1, -1).shape[1])


def _search_setup(config: RunConfig, model: nn.Module, train_loader: Any, test_loader: Any) -> Any:
    """The search's budgets, checked against the model before any training: an impossible
    budget is refused with the smallest feasible figure."""
    from mico.search import MiCoEval
    from mico.search.searchers import RandomSearcher
    from mico.search.tune import parse_budgets

    search = config.search or {}
    budgets = parse_budgets(search["budget"])
    probe = MiCoEval(model, 1, train_loader, test_loader, None, objective=search["objective"],
                     prefer=config.prefer)  # fmt: skip
    checker = RandomSearcher(probe, qtypes=search["bits"])
    full = [8] * (2 * probe.n_layers)
    for cost in ("flash", "ram_total"):  # kernel code / stack can make fewer bits cost more
        if any(b.cost == cost for b in budgets):
            probe.check_cost_falls_with_bits(cost, checker.qtypes)
    for b in budgets:
        checker._check_budget(b.cost, b.resolve(checker.cost(full, b.cost)))
    return budgets


def _run_search(
    config: RunConfig,
    budgets: Any,
    model: nn.Module,
    train_loader: Any,
    test_loader: Any,
    names: list[str],
    log: Log,
) -> tuple[Any, dict[str, Any]]:
    """Search the bit-widths of the trained model; its best plan is the one quantized next."""
    import copy

    from mico.quant import as_plan
    from mico.search import MiCoEval
    from mico.search.tune import tune

    search = config.search or {}
    log(f"      searching bit-widths: {search['strategy']}, {search['trials']} trial(s), "
        f"budget {search['budget']}")  # fmt: skip
    evaluator = MiCoEval(copy.deepcopy(model), 1, train_loader, test_loader, None,
                         objective=search["objective"], prefer=config.prefer)  # fmt: skip
    result = tune(evaluator, budgets, search["strategy"], search["trials"], search["bits"],
                  config.seed, log=lambda m: log("      " + m))  # fmt: skip
    plan = as_plan(list(result.best_scheme), names)
    log(f"      best plan {plan.to_string()}: {search['objective']} {result.best_accuracy:.4f}")
    summary = {
        "strategy": search["strategy"],
        "trials": len(result.trials),
        "budget": search["budget"],
        "budgets": result.budgets,
        "costs": result.costs,
        "best_accuracy": result.best_accuracy,
        "plan": plan.to_string(),
    }
    return plan, summary


def run_config(
    config: RunConfig, out_dir: Path, force: bool = False, log: Log = print
) -> RunResult:
    """Run every stage of ``config`` and write the results into ``out_dir``."""
    from mico.codegen.compile import compile_model
    from mico.codegen.project import check_model_name
    from mico.deploy import DeployOptions, _write_compile_report, verify_compiled
    from mico.pipeline import top1
    from mico.quant import QuantConfig, apply_plan, as_plan, calibrate, model_costs
    from mico.train.checkpoint import save_checkpoint
    from mico.train.loop import accuracy, fit, seed_everything

    check_model_name(config.c_name)
    final = check_output_dir(out_dir, force=force)
    seed_everything(config.seed)
    model, zoo_name, default_dataset = build_model(config)
    names = model.quantize_layer_names() if hasattr(model, "quantize_layer_names") else None
    if names is None:
        from mico.quant import quantizable_layers

        names = quantizable_layers(model, torch.zeros((1, *model.default_input_shape)))
    plan_text = config.plan or "8/8"
    if "=" not in plan_text and not plan_text.endswith((".yaml", ".yml")):
        plan_text = ",".join(f"{n}={plan_text}" for n in names)
    plan = as_plan(plan_text, names)  # checked before any training
    dataset = config.dataset or default_dataset
    split = _split(config, model, dataset)
    train_loader, test_loader = split.loaders(config.batch_size, seed=config.seed)
    searcher = None
    if config.search is not None:  # budgets checked before any training
        searcher = _search_setup(config, model, train_loader, test_loader)
    label = zoo_name or type(model).__name__
    log(f"[1/5] training {label} on {dataset} for {config.epochs} epoch(s)")
    fit(model, train_loader, config.epochs, lr=config.lr, log=lambda m: log("      " + m))
    fp32_acc = accuracy(model, test_loader)
    log(f"      FP32 test accuracy {fp32_acc:.4f}")

    search_summary: dict[str, Any] | None = None
    if searcher is not None:
        plan, search_summary = _run_search(
            config, searcher, model, train_loader, test_loader, names, log
        )
    log(f"[2/5] quantizing ({config.method}, {config.mode} activations): {plan.to_string()}")
    quant = QuantConfig(
        act_mode="static" if config.mode == "static" else "dynamic",
        weight_granularity="channel" if config.per_channel else "tensor",
        act_asymmetric=config.act_asymmetric,
    )
    qmodel = apply_plan(model, plan, quant)
    batches = [x for x, _ in train_loader][: config.calibration_batches]
    calibrate(qmodel, batches)
    if config.method == "qat" and config.qat_epochs:
        fit(
            qmodel,
            train_loader,
            config.qat_epochs,
            lr=config.lr / 3,
            log=lambda m: log("      " + m),
        )
    q_acc = accuracy(qmodel, test_loader)
    log(f"      quantized accuracy (Python) {q_acc:.4f}")

    samples = np.asarray(split.x_test[: config.samples], dtype=np.float32)
    labels = np.asarray(split.y_test[: config.samples])
    with atomic_directory(final, force=force, command="mico run") as tmp:
        log(f"[3/5] compiling to C ({config.mode} mode)")
        compiled = compile_model(
            qmodel.eval(),
            torch.from_numpy(samples[:1]),
            tmp / "c",
            config.c_name,
            config.mode,
            calibration=batches,
            extras=_write_compile_report,
            sample_inputs=samples,
            prefer=config.prefer,
        )
        log(f"[4/5] building and running on {', '.join(config.targets)}")
        options = DeployOptions(
            targets=config.targets,
            rtol=0.0 if config.mode == "static" else 1e-5,
            prefer=config.prefer,
        )
        result = verify_compiled(compiled, samples, options, log=lambda m: log("      " + m))
        from mico.targets import host

        c_out = host.run(compiled.project, samples)
        log("[5/5] report")
        costs = model_costs(qmodel)
        project = compiled.project
        metrics: dict[str, Any] = {
            "name": config.name,
            "model": label,
            "dataset": dataset,
            "plan": plan.to_string(),
            "mode": config.mode,
            "prefer": config.prefer,
            "fp32_accuracy": fp32_acc,
            "quantized_python_accuracy": q_acc,
            "c_accuracy": top1(c_out, labels),
            "verified_samples": len(samples),
            "targets": {
                r.target: {
                    "ok": r.ok,
                    "exact": r.agreement.exact,
                    "samples": r.agreement.samples,
                    "instructions_per_inference": r.instructions_per_inference,
                }
                for r in result.results
            },
            "flash_weight_bytes": project.weight_bytes,
            "flash_const_bytes": project.const_bytes,
            "arena_bytes": project.arena.size,
            "arena_lower_bound": project.arena.lower_bound,
            "bops": costs.to_dict()["total"].get("bops"),
        }
        if search_summary is not None:
            metrics["search"] = search_summary
        if zoo_name:  # checkpoints rebuild zoo models; other models keep their weights
            save_checkpoint(model, tmp / "fp32.pt", dataset=dataset)
            save_checkpoint(qmodel, tmp / "quantized.pt", dataset=dataset)
        else:
            torch.save(model.state_dict(), tmp / "fp32_state_dict.pt")
            torch.save(qmodel.state_dict(), tmp / "quantized_state_dict.pt")
        (tmp / "plan.yaml").write_text(plan.to_yaml())
        (tmp / "metrics.json").write_text(json.dumps(metrics, indent=2, default=str) + "\n")
        (tmp / "report.md").write_text(_report(metrics))
        if config.source is not None:
            (tmp / "run.yaml").write_text(config.source.read_text(encoding="utf-8"))
    log(f"wrote {final}")
    return RunResult(final, metrics, result.ok)


def _report(metrics: dict[str, Any]) -> str:
    lines = [
        f"# mico run: {metrics['name']}",
        "",
        f"Model `{metrics['model']}` on `{metrics['dataset']}`, plan `{metrics['plan']}`, "
        f"{metrics['mode']} mode.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| FP32 accuracy | {metrics['fp32_accuracy']:.4f} |",
        f"| quantized accuracy (Python) | {metrics['quantized_python_accuracy']:.4f} |",
        f"| C accuracy (host, {metrics['verified_samples']} samples) | "
        f"{metrics['c_accuracy']:.4f} |",
        f"| packed weights (flash) | {metrics['flash_weight_bytes']} B |",
        f"| arena (RAM) | {metrics['arena_bytes']} B (bound {metrics['arena_lower_bound']} B) |",
        "",
        "| target | C == Python reference | instructions / inference |",
        "|---|---|---|",
    ]
    for target, entry in metrics["targets"].items():
        instructions = entry["instructions_per_inference"] or "-"
        lines.append(f"| {target} | {entry['exact']}/{entry['samples']} | {instructions} |")
    search = metrics.get("search")
    if search:
        costs = ", ".join(
            f"{k} {v:g} (budget {search['budgets'][k]:g})" for k, v in search["costs"].items()
        )
        lines += [
            "",
            f"Plan searched with `{search['strategy']}` over {search['trials']} trial(s) under "
            f"`{search['budget']}`: {search['plan']}, {costs}; accuracy in the search "
            f"{search['best_accuracy']:.4f}.",
        ]
    return "\n".join(lines) + "\n"
