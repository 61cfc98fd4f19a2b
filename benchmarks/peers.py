"""Peers, side by side: mico against TensorFlow Lite Micro, LiteRT and ExecuTorch.

Run on demand (not a test), in a separate virtual environment holding the peers (see
docs/peers.md; ``pip install -e '.[peers]'``):

    python benchmarks/peers.py [--out benchmarks/results] [--models lenet,dscnn,...]

The same seeded float models (random weights, the same for every tool) go through each tool:

* mico: W8A8, W4A4 and W2A2 static, per-channel weights, compiled to C for the host (the
  GEMM kernels of ``mico_host_gemm.c``; W8A8 also with the portable kernels every target
  builds), built by the generated Makefile (host: -O3), timed natively
  (``mico.targets.host.profile``), arena and flash from the compiled project.
* LiteRT (``ai-edge-litert``): an int8 ``.tflite`` made by ``litert-torch`` from a PT2E
  quantized graph (symmetric int8, per-channel weights, static activations), run once with the
  builtin kernels only and once with the XNNPACK delegate.
* TensorFlow Lite Micro (``tflite-micro`` wheel): the same ``.tflite``, arena measured with the
  recording allocator.
* ExecuTorch: a ``.pte`` from PT2E with the XNNPACK quantizer, lowered once without a delegate
  (portable kernels) and once to XNNPACK; planned memory from the program's memory plan.

Latency is batch 1, one thread, median of repeats, and reported as a ratio to PyTorch eager
fp32 timed in the same run. Agreement: top-1 against the float PyTorch model, and each tool
against its own reference (see docs/peers.md). A tool that fails to install, convert or run
is recorded with its error. Results: ``peers.{md,json,png}``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
SEED = 0
CALIBRATION = 32  # seeded inputs that set every tool's activation scales
EVAL = 16  # other seeded inputs on which outputs are compared
REPEATS = 7  # timed repeats; the median is reported
MIN_TIMED = 0.05  # seconds of work in one timed repeat (calls are looped to reach it)
PEERS = ("ai-edge-litert", "litert-torch", "tflite-micro", "executorch", "torchao", "torch")
# MobileNetV2 as published (Sandler et al. 2018): (expansion, channels, repeats, first stride)
MOBILENETV2_IMAGENET = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


# ---------------------------------------------------------------------------- models
def mobilenetv2_035_96() -> nn.Module:
    """MobileNetV2-0.35 at 96x96 with 2 classes (the Visual Wake Words setting): mico's
    MobileNetV2 with the published stage table and a stride-2 stem."""
    from mico.models.layers import ConvBNReLU
    from mico.models.mobilenet import MobileNetV2

    model = MobileNetV2(3, 2, 0.35, MOBILENETV2_IMAGENET, 32, 1280)
    stem = model.features[0][0]
    model.features[0] = ConvBNReLU(3, stem.out_channels, 3, 2, activation="relu6")
    model.default_input_shape = (3, 96, 96)
    return model


def zoo(name: str) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        from mico.models import from_zoo

        return from_zoo(name)

    return make


MODELS: dict[str, Callable[[], nn.Module]] = {
    "lenet": zoo("lenet"),
    "resnet8": zoo("resnet8"),
    "dscnn": zoo("dscnn"),
    "mobilenetv2_035_96": mobilenetv2_035_96,
}


def float_model(name: str) -> nn.Module:
    """The seeded float model, its BatchNorm statistics set from seeded data so that the
    activations have realistic ranges (random weights: no training)."""
    torch.manual_seed(SEED)
    model = MODELS[name]()
    shape = tuple(model.default_input_shape)
    x = torch.from_numpy(inputs(shape, CALIBRATION, SEED + 1))
    model.train()
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.momentum = None  # cumulative average over the batches below
    with torch.no_grad():
        for batch in torch.split(x, 8):
            model(batch)
    return model.eval()


def inputs(shape: tuple[int, ...], count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, *shape)).astype(np.float32)


# ---------------------------------------------------------------------------- helpers
def median_seconds(call: Callable[[], Any]) -> float:
    """Median wall time of one ``call``: a few warm-up calls, then ``REPEATS`` timed repeats,
    each looping the call until ``MIN_TIMED`` seconds of work."""
    for _ in range(3):
        call()
    start = time.perf_counter()
    call()
    once = max(time.perf_counter() - start, 1e-7)
    loops = max(1, int(MIN_TIMED / once))
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(loops):
            call()
        times.append((time.perf_counter() - start) / loops)
    return float(np.median(times))


def top1(a: np.ndarray, b: np.ndarray) -> int:
    a = np.asarray(a, dtype=np.float64).reshape(len(a), -1)
    b = np.asarray(b, dtype=np.float64).reshape(len(b), -1)
    return int((a.argmax(axis=1) == b.argmax(axis=1)).sum())


def max_abs(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, dtype=np.float64).reshape(len(a), -1)
    b = np.asarray(b, dtype=np.float64).reshape(len(b), -1)
    return float(np.abs(a - b).max())


def exact(a: np.ndarray, b: np.ndarray) -> int:
    a = np.asarray(a, dtype=np.float64).reshape(len(a), -1)
    b = np.asarray(b, dtype=np.float64).reshape(len(b), -1)
    return int((a == b).all(axis=1).sum())


def brief(exc: BaseException) -> str:
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text[:300]


def version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


@contextlib.contextmanager
def captured_output():
    """Capture what C++ code prints on file descriptors 1 and 2 (the TFLM allocation report)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        for fd in saved:
            os.dup2(tmp.fileno(), fd)
        box: dict[str, str] = {}
        try:
            yield box
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy_fd in saved.items():
                os.dup2(copy_fd, fd)
                os.close(copy_fd)
            tmp.seek(0)
            box["text"] = tmp.read().decode(errors="replace")


def row(model: str, tool: str, **fields: Any) -> dict[str, Any]:
    base = {
        "model": model,
        "tool": tool,
        "status": "ok",
        "arena_bytes": None,
        "arena_what": "",
        "flash_bytes": None,
        "flash_what": "",
        "latency_s": None,
        "ratio_vs_torch": None,
        "top1_vs_fp32": None,
        "samples": EVAL,
        "own_reference": "",
        "own_top1": None,  # top-1 agreement with the tool's own reference
        "note": "",
    }
    base.update(fields)
    return base


def failed(model: str, tool: str, stage: str, exc: BaseException) -> dict[str, Any]:
    traceback.print_exception(exc, file=sys.stderr)
    return row(model, tool, status=f"failed ({stage}): {brief(exc)}")


# ---------------------------------------------------------------------------- mico
def run_mico(name: str, model: nn.Module, calib: np.ndarray, x: np.ndarray, ref: np.ndarray,
             bits: str, work: Path, portable: bool = False) -> dict[str, Any]:  # fmt: skip
    """mico at ``bits`` (every layer), generated for the host (its GEMM kernels, the
    generated Makefile's host flags: -O3), or with ``portable`` the kernels every target
    builds (those tuned for rv32), at the same flags."""
    from mico.codegen.compile import compile_model
    from mico.deploy import generation_extensions
    from mico.quant import QuantConfig, calibrate, quantize_model
    from mico.targets import host

    tool = f"mico W{bits[0]}A{bits[2]}" + (" portable" if portable else "")
    extensions = () if portable else generation_extensions(["host"])
    qmodel = copy.deepcopy(model)
    stage = "compile"
    try:
        plan = ",".join(f"{layer}={bits}" for layer in qmodel.quantize_layer_names())
        quantize_model(qmodel, plan, QuantConfig(act_mode="static", weight_granularity="channel"))
        batches = [torch.from_numpy(b) for b in np.array_split(calib, 4)]
        qmodel.eval()
        calibrate(qmodel, batches)
        start = time.perf_counter()
        compiled = compile_model(
            qmodel, torch.from_numpy(x[:1]), work / f"mico_{name}_{bits[0]}{bits[2]}", "model",
            "static", calibration=batches, force=True, sample_inputs=x[:1],
            isa_extensions=extensions,
        )  # fmt: skip
        seconds = time.perf_counter() - start
        project = compiled.project
        stage = "build"
        host.build(project)  # the generated Makefile's host CFLAGS: -O3
        stage = "run"
        out = host.run(project, x)
        reference = compiled.reference(x)
        stage = "profile"
        prof = host.profile(project, x[:2], repeats=REPEATS)
    except Exception as exc:
        return failed(name, tool, stage, exc)
    same = exact(out, reference)
    return row(
        name, tool,
        arena_bytes=int(project.arena.size),
        arena_what="planned activation arena (mico memory plan)",
        flash_bytes=int(sum(project.flash.values())),
        flash_what="constants: " + ", ".join(f"{k} {v}" for k, v in project.flash.items() if v),
        latency_s=prof.wall_median,
        top1_vs_fp32=top1(out, ref),
        own_reference=f"bit-exact {same}/{len(x)} vs mico's Python reference",
        own_top1=top1(out, reference),
        note=f"native C, gcc -O3, {'portable kernels' if portable else 'host kernels'}; "
        f"{steady_instructions(prof.instructions)} instructions/inference; compile {seconds:.0f} s",
    )  # fmt: skip


def steady_instructions(counts: np.ndarray) -> str:
    """The last sample's instruction count (every inference after the first costs the same),
    and the first's when it differs (the host kernels lay out a layer's weights on its first
    call)."""
    first, last = int(counts[0]), int(counts[-1])
    return f"{last}" if first == last else f"{last} (first inference {first})"


# ---------------------------------------------------------------------------- LiteRT / TFLM
def litert_model(model: nn.Module, calib: np.ndarray, x: np.ndarray, path: Path):
    """PT2E int8 (symmetric, per-channel weights, static activations) through litert-torch;
    returns the quantized torch module (its reference) and writes the ``.tflite``."""
    import litert_torch
    from litert_torch.quantize.pt2e_quantizer import (
        PT2EQuantizer,
        get_symmetric_quantization_config,
    )
    from litert_torch.quantize.quant_config import QuantConfig

    quantizer = PT2EQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=True, is_dynamic=False)
    )
    example = (torch.from_numpy(x[:1]),)
    graph = pt2e_quantized(model, quantizer, calib, x, fold_quantize=False)
    edge = litert_torch.convert(graph, example, quant_config=QuantConfig(pt2e_quantizer=quantizer))
    edge.export(str(path))
    return graph


def pt2e_functions():
    try:
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    except ImportError:
        from torch.ao.quantization.quantize_pt2e import convert_pt2e, prepare_pt2e
    return prepare_pt2e, convert_pt2e


def pt2e_quantized(
    model: nn.Module, quantizer: Any, calib: np.ndarray, x: np.ndarray, **convert: Any
) -> Any:
    """``model`` exported for batch 1, prepared with ``quantizer``, calibrated on ``calib``
    one sample at a time and converted (PT2E): the int8 graph both peers lower."""
    prepare_pt2e, convert_pt2e = pt2e_functions()
    example = (torch.from_numpy(x[:1]),)
    graph = torch.export.export(copy.deepcopy(model).eval(), example).module()
    graph = prepare_pt2e(graph, quantizer)
    with torch.no_grad():
        for sample in calib:
            graph(torch.from_numpy(sample[None]))
    return convert_pt2e(graph, **convert)


def batch_of_one(graph: Callable, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return np.concatenate([graph(torch.from_numpy(s[None])).numpy() for s in x])


def litert_interpreter(path: Path, xnnpack: bool):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    if xnnpack:
        interp = Interpreter(model_path=str(path), num_threads=1)
    else:
        interp = Interpreter(
            model_path=str(path), num_threads=1,
            experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
        )  # fmt: skip
    interp.allocate_tensors()
    return interp


def qparams(details: dict[str, Any]) -> tuple[float, int] | None:
    """(scale, zero point) of a quantized input or output tensor (LiteRT or TFLM details)."""
    if np.dtype(details["dtype"]).kind == "f":
        return None
    if "quantization_parameters" in details:
        q = details["quantization_parameters"]
        return float(np.ravel(q["scales"])[0]), int(np.ravel(q["zero_points"])[0])
    scale, zero = details["quantization"]
    return float(scale), int(zero)


def to_input(sample: np.ndarray, details: dict[str, Any]) -> np.ndarray:
    """A float sample as the tensor wants it: quantized with its scale when it is integer."""
    x = sample.reshape(details["shape"])
    q = qparams(details)
    if q is None:
        return x.astype(details["dtype"])
    info = np.iinfo(details["dtype"])
    codes = np.clip(np.round(x / q[0]) + q[1], info.min, info.max)
    return codes.astype(details["dtype"])


def from_output(value: np.ndarray, details: dict[str, Any]) -> np.ndarray:
    """An output tensor as float (dequantized when it is integer)."""
    q = qparams(details)
    if q is None:
        return np.asarray(value, dtype=np.float32)
    return ((np.asarray(value, dtype=np.float32) - q[1]) * q[0]).astype(np.float32)


def litert_runner(interp) -> Callable[[np.ndarray], np.ndarray]:
    inp = interp.get_input_details()[0]
    out = interp.get_output_details()[0]

    def run(sample: np.ndarray) -> np.ndarray:
        interp.set_tensor(inp["index"], to_input(sample[None], inp))
        interp.invoke()
        return from_output(interp.get_tensor(out["index"]), out)

    return run


def tflm_runner(path: Path):
    from tflite_micro.python.tflite_micro import runtime

    interp = runtime.Interpreter.from_file(
        str(path), arena_size=16 * 1024 * 1024,
        intrepreter_config=runtime.InterpreterConfig.kAllocationRecording,
    )  # fmt: skip
    inp, out = interp.get_input_details(0), interp.get_output_details(0)

    def run(sample: np.ndarray) -> np.ndarray:
        interp.set_input(to_input(sample[None], inp), 0)
        interp.invoke()
        return from_output(interp.get_output(0), out)

    return interp, run


def tflm_arena(interp) -> tuple[int | None, str]:
    """Bytes the recording allocator reports (its printed allocation summary)."""
    with captured_output() as box:
        interp.print_allocations()
    text = box.get("text", "")
    total = re.search(r"\[RecordingMicroAllocator\] Arena allocation total (\d+) bytes", text)
    if total:
        return int(total.group(1)), "recording allocator: arena allocation total"
    return None, "recording allocator printed no total: " + " ".join(text.split())[:200]


def run_litert_family(name: str, model: nn.Module, calib: np.ndarray, x: np.ndarray,
                      ref: np.ndarray, work: Path) -> list[dict[str, Any]]:  # fmt: skip
    path = work / f"{name}_int8.tflite"
    tools = ("LiteRT builtin", "LiteRT XNNPACK", "TFLM")
    try:
        start = time.perf_counter()
        graph = litert_model(model, calib, x, path)
        seconds = time.perf_counter() - start
    except Exception as exc:
        return [failed(name, t, "litert-torch PT2E convert", exc) for t in tools]
    flash = path.stat().st_size
    quantized = batch_of_one(graph, x)
    rows: list[dict[str, Any]] = []
    builtin_out = None
    for tool, xnnpack in (("LiteRT builtin", False), ("LiteRT XNNPACK", True)):
        try:
            interp = litert_interpreter(path, xnnpack)
            run = litert_runner(interp)
            step = qparams(interp.get_output_details()[0])
            out = np.concatenate([run(s) for s in x])
            latency = median_seconds(lambda run=run: run(x[0]))
        except Exception as exc:
            rows.append(failed(name, tool, "run", exc))
            continue
        if xnnpack and builtin_out is not None:
            own = (
                f"{exact(out, builtin_out)}/{len(x)} identical to LiteRT builtin "
                f"(max |d| {max_abs(out, builtin_out):.3g}); "
            )
        else:
            own = ""
        own += (
            f"top-1 {top1(out, quantized)}/{len(x)}, max |d| {max_abs(out, quantized):.3g} vs "
            "the PT2E torch graph" + (f" (output step {step[0]:.3g})" if step else "")
        )
        builtin_out = out if not xnnpack else builtin_out
        rows.append(row(
            name, tool, flash_bytes=flash, flash_what=".tflite file (int8, litert-torch PT2E)",
            arena_what="not exposed by the LiteRT Python API",
            latency_s=latency, top1_vs_fp32=top1(out, ref), own_reference=own,
            own_top1=top1(out, quantized),
            note=f"through the Python binding, num_threads=1; convert {seconds:.0f} s",
        ))  # fmt: skip
    try:
        interp, run = tflm_runner(path)
        out = np.concatenate([run(s) for s in x])
        arena, what = tflm_arena(interp)
        latency = median_seconds(lambda: run(x[0]))
    except Exception as exc:
        rows.append(failed(name, "TFLM", "run", exc))
        return rows
    own = (
        f"{exact(out, builtin_out)}/{len(x)} identical to LiteRT builtin on the same .tflite"
        f" (max |d| {max_abs(out, builtin_out):.3g})"
        if builtin_out is not None
        else f"top-1 {top1(out, quantized)}/{len(x)} vs the PT2E torch graph"
    )
    rows.append(row(
        name, "TFLM", arena_bytes=arena, arena_what=what, flash_bytes=flash,
        flash_what=".tflite file (same as LiteRT)", latency_s=latency,
        top1_vs_fp32=top1(out, ref), own_reference=own, own_top1=top1(out, quantized),
        note="tflite-micro Python wheel (reference kernels), through its binding",
    ))  # fmt: skip
    return rows


# ---------------------------------------------------------------------------- ExecuTorch
def executorch_programs(model: nn.Module, calib: np.ndarray, x: np.ndarray):
    """PT2E with the XNNPACK quantizer, then two lowerings: none (portable) and XNNPACK."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from executorch.exir import to_edge_transform_and_lower

    quantizer = XNNPACKQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=True, is_dynamic=False)
    )
    example = (torch.from_numpy(x[:1]),)
    graph = pt2e_quantized(model, quantizer, calib, x)
    programs: dict[str, Any] = {}
    for tool, partitioner in (
        ("ExecuTorch portable", []),
        ("ExecuTorch XNNPACK", [XnnpackPartitioner()]),
    ):
        try:
            if not partitioner:
                import executorch.kernels.quantized  # noqa: F401  (q/dq out variants)
            exported = torch.export.export(graph, example)
            manager = to_edge_transform_and_lower(exported, partitioner=partitioner)
            programs[tool] = manager.to_executorch()
        except Exception as exc:
            programs[tool] = exc
    return graph, programs


def planned_bytes(manager) -> int:
    plan = manager.executorch_program.execution_plan[0]
    return int(sum(plan.non_const_buffer_sizes))


def run_executorch(name: str, model: nn.Module, calib: np.ndarray, x: np.ndarray,
                   ref: np.ndarray) -> list[dict[str, Any]]:  # fmt: skip
    tools = ("ExecuTorch portable", "ExecuTorch XNNPACK")
    try:
        graph, programs = executorch_programs(model, calib, x)
    except Exception as exc:
        return [failed(name, t, "PT2E quantize", exc) for t in tools]
    quantized = batch_of_one(graph, x)
    rows = []
    for tool in tools:
        manager = programs[tool]
        if isinstance(manager, Exception):
            rows.append(failed(name, tool, "lower", manager))
            continue
        try:
            from executorch.runtime import Runtime

            method = Runtime.get().load_program(manager.buffer).load_method("forward")

            def run(sample: np.ndarray, method=method) -> np.ndarray:
                return method.execute([torch.from_numpy(sample[None])])[0].numpy()

            out = np.concatenate([run(s) for s in x])
            latency = median_seconds(lambda run=run: run(x[0]))
        except Exception as exc:
            rows.append(failed(name, tool, "run", exc))
            continue
        rows.append(row(
            name, tool, arena_bytes=planned_bytes(manager),
            arena_what="planned memory (sum of the program's non-constant buffers)"
            + ("; XNNPACK's own workspace is not in the plan" if "XNNPACK" in tool else ""),
            flash_bytes=len(manager.buffer), flash_what=".pte file",
            latency_s=latency, top1_vs_fp32=top1(out, ref),
            own_reference=f"top-1 {top1(out, quantized)}/{len(x)}, max |d| "
            f"{max_abs(out, quantized):.3g} vs the PT2E torch graph",
            own_top1=top1(out, quantized),
            note="executorch.runtime Python binding, one thread"
            + ("" if "XNNPACK" in tool else "; int8 through q/dq ops, float kernels"),
        ))  # fmt: skip
    return rows


# ---------------------------------------------------------------------------- driver
def run_model(
    name: str, work: Path, tools: set[str], save: Callable[[list[dict[str, Any]]], None]
) -> list[dict[str, Any]]:
    model = float_model(name)
    shape = tuple(model.default_input_shape)
    calib = inputs(shape, CALIBRATION, SEED + 1)
    x = inputs(shape, EVAL, SEED + 2)
    with torch.no_grad():
        ref = model(torch.from_numpy(x)).numpy()
        sample = torch.from_numpy(x[:1])
        torch_s = median_seconds(lambda: model(sample))
    print(f"[{name}] input {shape}, PyTorch eager fp32 {torch_s * 1e3:.3f} ms", flush=True)
    rows = Rows(torch_s)
    rows.append(row(
        name, "PyTorch eager fp32", latency_s=torch_s, ratio_vs_torch=1.0,
        flash_bytes=sum(p.numel() * 4 for p in model.parameters()),
        flash_what="float32 parameters", top1_vs_fp32=len(x),
        own_reference="the float reference itself", note="batch 1, torch.set_num_threads(1)",
    ))  # fmt: skip
    save(rows)
    if "litert" in tools:
        rows += run_litert_family(name, model, calib, x, ref, work)
        print(f"[{name}] LiteRT/TFLM: {[r['status'][:40] for r in rows[-3:]]}", flush=True)
        save(rows)
    if "executorch" in tools:
        rows += run_executorch(name, model, calib, x, ref)
        print(f"[{name}] ExecuTorch: {[r['status'][:40] for r in rows[-2:]]}", flush=True)
        save(rows)
    if "mico" in tools:
        for bits in MICO_BITS:
            rows.append(run_mico(name, model, calib, x, ref, bits, work))
            print(f"[{name}] {rows[-1]['tool']}: {rows[-1]['status']}", flush=True)
            save(rows)
    if "mico-portable" in tools:
        rows.append(run_mico(name, model, calib, x, ref, "8/8", work, portable=True))
        print(f"[{name}] {rows[-1]['tool']}: {rows[-1]['status']}", flush=True)
        save(rows)
    return rows


class Rows(list):
    """One model's rows: each row's latency ratio to PyTorch is set as it is added."""

    def __init__(self, torch_s: float) -> None:
        super().__init__()
        self.torch_s = torch_s

    def append(self, item: dict[str, Any]) -> None:
        self._ratio(item)
        super().append(item)

    def __iadd__(self, items):  # type: ignore[override]
        for item in items:
            self.append(item)
        return self

    def _ratio(self, item: dict[str, Any]) -> None:
        if item["latency_s"] is not None:
            item["ratio_vs_torch"] = item["latency_s"] / self.torch_s


#: the widths mico runs every model at (every layer)
MICO_BITS = ("8/8", "4/4", "2/2")

ORDER = (
    "PyTorch eager fp32",
    "mico W8A8",
    "mico W4A4",
    "mico W2A2",
    "mico W8A8 portable",
    "TFLM",
    "LiteRT builtin",
    "LiteRT XNNPACK",
    "ExecuTorch portable",
    "ExecuTorch XNNPACK",
)


def environment() -> dict[str, Any]:
    def git(*args: str) -> str:
        result = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return result.stdout.strip()

    dirty = git("status", "--porcelain", "--", "mico")
    gcc = subprocess.run(["gcc", "--version"], capture_output=True, text=True).stdout
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": cpu_name(),
        "cores": os.cpu_count(),
        "mico_commit": git("rev-parse", "--short", "HEAD"),
        "mico_tree_dirty": bool(dirty),
        "gcc": gcc.splitlines()[0] if gcc else None,
        "packages": {p: version(p) for p in PEERS},
        "torch_threads": torch.get_num_threads(),
    }


def cpu_name() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n / 1024:.1f} KiB"


def write_markdown(
    path: Path,
    rows: list[dict[str, Any]],
    env: dict[str, Any],
    seconds: float,
    complete: bool = True,
) -> None:
    lines = [
        "# Peers, side by side",
        "",
        "mico against TensorFlow Lite Micro, LiteRT and ExecuTorch on the same seeded models "
        "(`python benchmarks/peers.py`; how to run it and what each column means: "
        "[docs/peers.md](../../docs/peers.md)).",
        "",
        *([] if complete else ["**Partial results: the run had not finished.**", ""]),
        "| model | tool | arena / planned memory | flash (model) | latency | x PyTorch fp32 | "
        "top-1 vs fp32 | vs its own reference |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"| {r['model']} | {r['tool']} | - | - | - | - | - | {r['status']} |")
            continue
        latency = f"{r['latency_s'] * 1e3:.3f} ms" if r["latency_s"] is not None else "-"
        ratio = f"{r['ratio_vs_torch']:.2f}" if r["ratio_vs_torch"] is not None else "-"
        t1 = f"{r['top1_vs_fp32']}/{r['samples']}" if r["top1_vs_fp32"] is not None else "-"
        lines.append(
            f"| {r['model']} | {r['tool']} | {fmt_bytes(r['arena_bytes'])} | "
            f"{fmt_bytes(r['flash_bytes'])} | {latency} | {ratio} | {t1} | "
            f"{r['own_reference']} |"
        )
    packages = ", ".join(f"{k} {v or 'not installed'}" for k, v in env["packages"].items())
    lines += [
        "",
        "## Methodology",
        "",
        f"- Models: seeded random weights (seed {SEED}), BatchNorm statistics from seeded "
        "inputs; no training, so top-1 is agreement with the float model, not accuracy. "
        "LeNet-5 1x28x28, ResNet8 3x32x32 and DS-CNN 1x49x10 are mico's zoo models; "
        "MobileNetV2-0.35 is mico's MobileNetV2 class with the published stage table, a "
        "stride-2 stem, 96x96x3 input and 2 classes.",
        f"- Every tool is calibrated on the same {CALIBRATION} seeded N(0,1) inputs and compared "
        f"on {EVAL} others.",
        "- mico: static activations, per-channel weights, W8A8, W4A4 and W2A2 (every layer); "
        "C generated for the host (its `xautovec` capability: the int16 GEMM kernels of "
        "`mico_host_gemm.c`), and W8A8 once more with the portable kernels every target "
        "builds (`portable`, tuned for rv32); built by the generated Makefile (host: gcc -O3, "
        "no -march) and timed natively by "
        "`mico.targets.host.profile` (a long run minus the start-up). The own-reference "
        "check is the bit-exact comparison of the C outputs with mico's Python reference.",
        "- LiteRT / TFLM: int8 through litert-torch PT2E (symmetric, per-channel weights, "
        "static activations); the `.tflite` has int8 input and output, so the float samples "
        "are quantized with its input scale and outputs dequantized with its output scale "
        "(inside the timed call, as a caller would). LiteRT runs with `num_threads=1`, once with "
        "`BUILTIN_WITHOUT_DEFAULT_DELEGATES` and once with its default XNNPACK delegate. "
        "TFLM runs the same file with the recording allocator; its arena figure is the "
        "allocator's total. LiteRT's Python API exposes no arena figure.",
        "- ExecuTorch: PT2E with the XNNPACK quantizer (symmetric, per-channel, static); "
        "lowered without a partitioner (portable kernels: the int8 graph runs as q/dq around "
        "float kernels) and with the XNNPACK partitioner. Planned memory is the sum of the "
        "program's non-constant buffers from its memory plan; flash is the `.pte` size.",
        f"- Latency: batch 1, one thread, median of {REPEATS} repeats of at least "
        f"{MIN_TIMED * 1e3:.0f} ms of looped calls. Peers and PyTorch are timed through their "
        "Python bindings (a few microseconds of call overhead per inference, which matters "
        "for the smallest models); mico is timed as a native program. The ratio divides by "
        "PyTorch eager fp32 timed in the same run; below 1 is faster than PyTorch.",
        f"- Machine: {env['processor']} ({env['cores']} cores, shared with other work, so "
        "absolute times are noisy; compare within a model), "
        f"Python {env['python']}, {env['gcc']}.",
        f"- Versions: {packages}; mico {env['mico_commit']}"
        + (" (with uncommitted changes in mico/ at run time)" if env["mico_tree_dirty"] else "")
        + ".",
        f"- The whole run took {seconds / 60:.1f} minutes.",
    ]
    odd = [
        r for r in rows
        if r["status"] == "ok" and r.get("own_top1") is not None and r["own_top1"] < r["samples"]
    ]  # fmt: skip
    if odd:
        lines += [
            "",
            "## Disagreements with a tool's own reference",
            "",
            "Rows whose top-1 differs from the quantized graph they were converted or compiled "
            "from (mico: its Python reference; LiteRT, TFLM, ExecuTorch: the PT2E torch graph). "
            "Compare max |d| with the output step: a difference of one or two steps is "
            "rounding, many steps is a different computation.",
            "",
        ]
        lines += [
            f"- {r['model']} / {r['tool']}: top-1 {r['own_top1']}/{r['samples']} against the "
            f"quantized graph it was made from; {r['own_reference']}."
            for r in odd
        ]
    measured = {r["model"]: r.get("run") for r in rows}
    if len(set(measured.values())) > 1:
        lines += ["", "## Runs", ""]
        lines += [f"- {m}: measured in the run started {when}" for m, when in measured.items()]
    notes = [r for r in rows if r["status"] == "ok" and r["note"]]
    if notes:
        lines += ["", "## Notes per row", ""]
        lines += [f"- {r['model']} / {r['tool']}: {r['note']}" for r in notes]
    path.write_text("\n".join(lines) + "\n")


def write_plot(path: Path, rows: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r["model"] for r in rows))
    tools = [t for t in dict.fromkeys(r["tool"] for r in rows) if t != "PyTorch eager fp32"]
    fig, axes = plt.subplots(2, 1, figsize=(11, 8))
    width = 0.8 / max(1, len(tools))
    colors = plt.get_cmap("tab10")
    for i, tool in enumerate(tools):
        lat, mem = [], []
        for m in models:
            r = next((r for r in rows if r["model"] == m and r["tool"] == tool), None)
            ok = r is not None and r["status"] == "ok"
            lat.append(r["ratio_vs_torch"] if ok and r["ratio_vs_torch"] else np.nan)
            mem.append(r["arena_bytes"] / 1024 if ok and r["arena_bytes"] else np.nan)
        pos = np.arange(len(models)) + (i - (len(tools) - 1) / 2) * width
        axes[0].bar(pos, lat, width, label=tool, color=colors(i))
        axes[1].bar(pos, mem, width, label=tool, color=colors(i))
    axes[0].axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    axes[0].set_yscale("log")
    axes[0].set_ylabel("latency / PyTorch eager fp32 (log)")
    axes[0].set_title("Host latency, batch 1, one thread (lower is better; dashed: PyTorch)")
    axes[1].set_yscale("log")
    axes[1].set_ylabel("KiB (log)")
    axes[1].set_title("Arena / planned memory (missing bar: not reported or failed)")
    for ax in axes:
        ax.set_xticks(np.arange(len(models)), models)
        ax.grid(axis="y", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, fontsize=8, ncol=len(handles), loc="lower center")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument(
        "--tools", default="mico,mico-portable,litert,executorch",
        help="mico (host kernels, W8A8/W4A4/W2A2), mico-portable (W8A8 with the kernels "
        "every target builds), litert (LiteRT builtin and XNNPACK, TFLM), executorch",
    )  # fmt: skip
    parser.add_argument("--work", type=Path, default=None, help="keep generated files here")
    parser.add_argument(
        "--merge", action="store_true",
        help="keep the other models' rows of the existing peers.json (each model's rows still "
        "come from one run)",
    )  # fmt: skip
    parser.add_argument(
        "--replot", action="store_true", help="rewrite peers.md and peers.png from peers.json"
    )
    args = parser.parse_args(argv)
    if args.replot:
        data = json.loads((args.out / "peers.json").read_text())
        write_markdown(args.out / "peers.md", data["rows"], data["environment"],
                       data["seconds"], data.get("complete", True))  # fmt: skip
        write_plot(args.out / "peers.png", data["rows"])
        return 0
    torch.set_num_threads(1)
    names = [m for m in args.models.split(",") if m]
    unknown = [m for m in names if m not in MODELS]
    if unknown:
        parser.error(f"unknown model {unknown[0]}; choose from {', '.join(MODELS)}")
    tools = set(args.tools.split(","))
    start = time.perf_counter()
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    done: list[dict[str, Any]] = []
    kept: list[dict[str, Any]] = []
    previous = args.out / "peers.json"
    if args.merge and previous.exists():
        old = json.loads(previous.read_text())
        began = time.gmtime(previous.stat().st_mtime - old["seconds"])
        kept = [r for r in old["rows"] if r["model"] not in names]
        for r in kept:
            r.setdefault("run", time.strftime("%Y-%m-%d %H:%M UTC", began))
    order = list(dict.fromkeys([*MODELS]))
    env = environment()
    args.out.mkdir(parents=True, exist_ok=True)

    def save(current: list[dict[str, Any]], complete: bool = False) -> None:
        """Write every result so far (a run cut short keeps what it measured)."""
        for r in current:
            r.setdefault("run", stamp)
        rows = sorted(
            kept + done + list(current),
            key=lambda r: (order.index(r["model"]), ORDER.index(r["tool"])),
        )
        seconds = time.perf_counter() - start
        data = {"environment": env, "seconds": seconds, "complete": complete, "rows": rows}
        (args.out / "peers.json").write_text(json.dumps(data, indent=2) + "\n")
        write_markdown(args.out / "peers.md", rows, env, seconds, complete)
        write_plot(args.out / "peers.png", rows)

    with tempfile.TemporaryDirectory(prefix="mico-peers-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for name in names:
            done += run_model(name, work, tools, save)
    save([], complete=True)
    seconds = time.perf_counter() - start
    print(f"wrote {args.out / 'peers.md'}, peers.json and peers.png ({seconds / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
