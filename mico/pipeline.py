"""Compositions of the stages. No logic of its own: each step is a call into one package."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from mico.atomic import atomic_directory, check_output_dir
from mico.codegen.project import CProject, check_model_name, emit_c_project
from mico.data import load_dataset
from mico.errors import BuildError, CompileError
from mico.execute import Agreement, compare_outputs, run_graph
from mico.frontend import extract_ir
from mico.ir.graph import Graph
from mico.models import SmallCNN
from mico.numerics import check_finite_parameters
from mico.passes import lower_static
from mico.quant import (
    QuantConfig,
    QuantPlan,
    apply_plan,
    bit_layers,
    calibrate,
    quantizable_layers,
)
from mico.report import Report, layer_rows
from mico.targets import host, rv32
from mico.train import accuracy, fit, train

Log = Callable[[str], None]
DEFAULT_PLAN = "conv1=8/8,conv2=4/4,fc=2/8"


def quantize_ptq(
    model: nn.Module,
    plan: QuantPlan,
    batches: list[torch.Tensor],
    config: QuantConfig | None = None,
) -> nn.Module:
    """Post-training quantization of a copy: apply the plan, calibrate scales on ``batches``."""
    return calibrate(apply_plan(model, plan, config), batches)


def lower_model(
    qmodel: nn.Module,
    example: torch.Tensor,
    name: str = "model",
    calibration: Sequence[torch.Tensor] | None = None,
) -> Graph:
    """Extract a calibrated static-mode model's IR and lower it to the integer-only graph.

    ``calibration`` (input batches) sets the scales of tensors no quantized layer dictates
    (residual adds, pooled tensors); it defaults to ``example``. The graph is traced on the
    first sample of ``example``: the C program computes one sample per call.
    """
    for layer_name, layer in bit_layers(qmodel).items():
        if layer.qconfig.act_mode != "static":
            raise CompileError(
                f"layer '{layer_name}' quantizes its inputs dynamically; the integer-only C "
                "backend needs static scales: quantize with QuantConfig(act_mode='static') and "
                "calibrate"
            )
        if not layer.calibrated or layer.mode != "quant":
            raise CompileError(
                f"layer '{layer_name}' is not calibrated; run mico.quant.calibrate first"
            )
    check_finite_parameters(qmodel)  # QAT may have diverged
    ir = extract_ir(qmodel, example[:1], name)
    return lower_static(ir, list(calibration) if calibration is not None else [example])


def top1(outputs: np.ndarray, labels: np.ndarray) -> float:
    return float((np.asarray(outputs).argmax(axis=1) == labels).mean()) if len(labels) else 0.0


@dataclass
class DemoOptions:
    """Options of ``mico demo``."""

    out_dir: Path = Path("out/demo")
    seed: int = 0
    plan: str = DEFAULT_PLAN
    epochs: int = 15
    channels: tuple[int, int] = (8, 16)
    calibration_batches: int = 8
    batch_size: int = 64
    name: str = "digits_cnn"
    quant: QuantConfig = field(default_factory=QuantConfig)
    qat_epochs: int = 5
    target: str = "auto"  # host always; rv32 too ("auto": when its toolchain is installed)
    qat_lr: float = 1e-3
    force: bool = False  # replace an output directory mico did not write


@dataclass
class DemoResult:
    out_dir: Path
    plan: QuantPlan
    agreement: Agreement
    metrics: dict[str, float | int] = field(default_factory=dict)
    report: Report | None = None

    @property
    def ok(self) -> bool:
        return self.agreement.all_exact


def run_demo(options: DemoOptions, log: Log = print) -> DemoResult:
    """Train, quantize, compile to C, build, run and verify on the bundled digits."""
    if options.target not in ("host", "rv32", "auto"):
        raise BuildError(f"unknown target '{options.target}'; use host, rv32 or auto")
    check_model_name(options.name)  # before any work
    check_output_dir(options.out_dir, force=options.force)
    torch.manual_seed(options.seed)
    model = SmallCNN(channels=options.channels)
    plan = QuantPlan.load(options.plan).validate_for(quantizable_layers(model))  # before work
    split = load_dataset("digits", seed=options.seed)
    train_loader, test_loader = split.loaders(options.batch_size, seed=options.seed)
    log(
        f"[1/5] training {type(model).__name__} on {split.name}: {len(split.x_train)} train / "
        f"{len(split.x_test)} test samples, {options.epochs} epochs"
    )
    train(model, train_loader, options.epochs, log=lambda m: log("      " + m))
    fp32_acc = accuracy(model, test_loader)

    log(f"[2/5] quantization with plan {plan.to_string()}")
    batches = [x for x, _ in train_loader][: options.calibration_batches]
    qmodel = quantize_ptq(model, plan, batches, options.quant)
    ptq_acc = accuracy(qmodel, test_loader)
    log(f"      post-training (calibrated) accuracy {ptq_acc:.4f}")
    if options.qat_epochs:
        log(f"      quantization-aware training, {options.qat_epochs} epochs")
        fit(qmodel, train_loader, options.qat_epochs, lr=options.qat_lr)
    fake_quant_acc = accuracy(qmodel, test_loader)
    graph = lower_model(qmodel, torch.from_numpy(split.x_test[:1]), options.name)
    reference = run_graph(graph, split.x_test)[0].numpy()
    quant_acc = top1(reference, split.y_test)
    log(f"      quantized accuracy {quant_acc:.4f} (FP32 {fp32_acc:.4f})")

    with atomic_directory(options.out_dir, force=options.force, command="mico demo") as tmp:
        log(f"[3/5] emitting C into {options.out_dir}")
        project = emit_c_project(graph, tmp, options.name, sample_inputs=split.x_test)
        log("[4/5] building with the host C compiler and running every test sample")
        host.build(project)
        c_out = host.run(project, split.x_test)
        agreement = compare_outputs(c_out, reference)
        device: dict[str, float | int] = {}
        if options.target == "rv32" or (options.target == "auto" and rv32.available()):
            log("      building for rv32 and running every sample under qemu-system-riscv32")
            rv32.build(project)
            on_device = rv32.run(project, split.x_test)
            device_agreement = compare_outputs(on_device.outputs, reference)
            sizes = rv32.model_sizes(project)
            device = {
                "rv32_exact_agreement": device_agreement.exact,
                "rv32_accuracy": top1(on_device.outputs, split.y_test),
                "rv32_instructions_per_inference": on_device.instructions_per_inference,
                "rv32_instructions_mean": float(on_device.instructions.mean()),
                "rv32_model_flash_bytes": sizes["flash"],
                "rv32_model_ram_bytes": sizes["ram"],
                "rv32_stack_bytes": on_device.stack_bytes,
            }
            if not device_agreement.all_exact:
                agreement = device_agreement  # the demo fails on any disagreement
            from mico.hw.nodes import node_costs

            # every node of sample 0 counted (an instrumented copy): the report's per-layer column
            counted = node_costs(project, "qemu-rv32", split.x_test[0])
            device["rv32_per_node_instructions"] = dict(counted.nodes)
        elif options.target == "auto":
            log("      rv32 skipped: " + rv32.missing_tools_hint())
        log("[5/5] report")
        (tmp / "plan.yaml").write_text(plan.to_yaml())
        (tmp / "graph.txt").write_text(str(graph) + "\n")
        metrics = {
            "fp32_accuracy": fp32_acc,
            "ptq_accuracy": ptq_acc,
            "fake_quant_accuracy": fake_quant_acc,
            "quantized_python_accuracy": quant_acc,
            "c_accuracy": top1(c_out, split.y_test),
            "samples": agreement.samples,
            "exact_agreement": agreement.exact,
            "top1_agreement": agreement.top1,
            "max_abs_diff": agreement.max_abs_diff,
            "flash_weight_bytes": project.weight_bytes,
            "flash_const_bytes": project.const_bytes,
            "fp32_weight_bytes": 4
            * sum(c.type.numel for c in graph.constants() if c.qformat is not None),
            "arena_bytes": project.arena.size,
            "arena_lower_bound": project.arena.lower_bound,
            **{
                f"host_{k.strip('.')}_bytes": v
                for k, v in host.section_sizes(project).items()
                if k in (".text", ".rodata", ".bss")
            },
            **device,
        }
        report = _demo_report(options, plan, project, graph, agreement, metrics)
        report.write(tmp)
    return DemoResult(options.out_dir, plan, agreement, metrics, report)


def _demo_report(
    options: DemoOptions,
    plan: QuantPlan,
    project: CProject,
    graph: Graph,
    agreement: Agreement,
    m: dict,
) -> Report:
    n = agreement.samples
    summary = [
        ("plan", plan.to_string()),
        ("FP32 accuracy (Python)", f"{m['fp32_accuracy']:.4f}"),
        ("post-training quantization accuracy", f"{m['ptq_accuracy']:.4f}"),
        ("quantized accuracy (Python reference)", f"{m['quantized_python_accuracy']:.4f}"),
        ("quantized accuracy (C on host)", f"{m['c_accuracy']:.4f}"),
        ("C/Python agreement, exact integers", f"{agreement.exact}/{n}"),
        ("C/Python agreement, top-1", f"{agreement.top1}/{n}"),
        (
            "flash: packed weights",
            f"{m['flash_weight_bytes']} B (FP32: {m['fp32_weight_bytes']} B)",
        ),
        ("flash: all constants (weights + int32 bias)", f"{m['flash_const_bytes']} B"),
        ("RAM: arena", f"{m['arena_bytes']} B"),
        (
            "RAM: arena lower bound (peak live bytes)",
            f"{m['arena_lower_bound']} B (ratio {project.arena.ratio:.2f})",
        ),
        *(
            [
                (
                    "rv32 (qemu): C/Python agreement, exact",
                    f"{m['rv32_exact_agreement']}/{n}",
                ),
                ("rv32: instructions per inference", f"{m['rv32_instructions_per_inference']}"),
                (
                    "rv32: model flash / RAM (code + weights / arena)",
                    f"{m['rv32_model_flash_bytes']} B / {m['rv32_model_ram_bytes']} B",
                ),
                *(
                    [("rv32: stack per inference (measured)", f"{m['rv32_stack_bytes']} B")]
                    if m.get("rv32_stack_bytes")
                    else []
                ),
            ]
            if "rv32_exact_agreement" in m
            else []
        ),
    ]
    data = {
        "options": {
            "seed": options.seed,
            "plan": plan.to_string(),
            "epochs": options.epochs,
            "qat_epochs": options.qat_epochs,
            "channels": list(options.channels),
        },
        "plan": {k: {"w": v.w, "a": v.a} for k, v in plan.items()},
        "metrics": m,
        "files": project.files,
    }
    from mico.hw.latency import estimate_program

    latency: dict[str, dict[str, float]] = {}
    if m.get("rv32_per_node_instructions"):
        latency["rv32_instructions"] = m["rv32_per_node_instructions"]
    estimate = estimate_program(graph)
    for target, entry in estimate.items():
        if target != "skipped":
            latency[f"{target}_estimated"] = {n["node"]: n["value"] for n in entry["nodes"]}
            data[f"{target}_latency_estimate"] = {
                k: v for k, v in entry.items() if k != "nodes"
            }  # the per-node values are in the layer rows
    return Report(
        "mico demo: digits CNN, mixed precision, C on host",
        summary,
        layer_rows(graph, project, latency),
        data,
    )
