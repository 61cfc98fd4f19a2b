"""The zoo's transformers in C: flash, arena, agreement and rv32 instructions, per mode.

Run on demand (not a test):  python benchmarks/transformers.py [--samples 2] [--out DIR]

For ``vit_tiny`` and ``tinyllama`` (dynamic and static, W8A8; ``--case tinyllama:static``
re-runs one case and keeps the others' figures; ``--only plans``: static W4A4, W4A8 and a
mixed plan with 1- and 2-bit weights) it compiles the model, runs a few samples on
the host and on rv32 (qemu ``-icount shift=0``), and records flash (weights and everything
else), the arena against its lower bound, the agreement with the Python reference and the
instructions per inference, plus host time per inference against PyTorch
eager (a ratio measured in one run). Figures go to ``benchmarks/results/transformers.json`` and
``.md``. Untrained weights: the figures are about cost and exactness, not accuracy.

Integer approximations (``--only accuracy``): the static tinyllama's integer kernels against
float, on a tinyllama trained briefly on synthetic token sequences (a Markov chain, so its logits
are peaked and top-1 means something): each integer op (embedding, RMSNorm, RoPE, causal softmax,
SiLU table, SwiGLU product) fed the quantized float input and compared with the float model's own
output of that op, in output LSBs; then the whole W8A8 program's logits against the float model
and against the PyTorch fake-quant model (top-1 agreement, max error, next-token accuracy).

Generation (``--only generation`` runs this part alone and keeps the other figures): ``mico
generate`` with ``tinyllama`` on rv32, float layers and the static W8A8 integer program, each with
and without its KV cache: instructions per generated token (the first token includes the
prompt's positions), the cache's bytes and where they live, and that both programs' logits are
bit-identical and their tokens Python's.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mico.codegen.compile import compile_model
from mico.models import from_zoo
from mico.quant import QuantConfig, calibrate, quantize_model
from mico.quant.order import quantizable_layers
from mico.targets import host, rv32

CASES = [("vit_tiny", "dynamic"), ("vit_tiny", "static"), ("tinyllama", "dynamic"),
         ("tinyllama", "static")]  # fmt: skip
GEN_PROMPT = "Once upon a time"
GEN_TOKENS = 32  # the check: 32 tokens identical in Python and C on rv32


def _samples(model: torch.nn.Module, n: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    shape = tuple(model.default_input_shape)
    if getattr(model, "task", "") == "language":
        return torch.randint(0, 512, (n, *shape), generator=gen).float()
    return torch.rand((n, *shape), generator=gen)


def _seconds(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


#: the issue's plans beside W8A8 (``--only plans``): W4A4, W4A8 and a mixed plan with 1- and
#: 2-bit weights (every layer's widths drawn from a fixed cycle, activations 4 or 8 bits)
PLANS = ("4/4", "4/8", "mixed")
MIXED_W, MIXED_A = (1, 2, 4, 8, 2, 4, 1, 2), (8, 8, 4, 8, 4, 8, 8, 4)


def _plan(model: torch.nn.Module, plan: str) -> Any:
    """``plan`` as quantize_model takes it: ``"W/A"`` or the mixed per-layer lists."""
    if plan != "mixed":
        return plan
    n = len(quantizable_layers(model, model.example_input()))
    return [[MIXED_W[i % len(MIXED_W)] for i in range(n)],
            [MIXED_A[i % len(MIXED_A)] for i in range(n)]]  # fmt: skip


def run_case(name: str, mode: str, samples: int, work: Path, plan: str = "8/8") -> dict[str, Any]:
    torch.manual_seed(0)
    model = from_zoo(name)
    quantize_model(model, _plan(model, plan), QuantConfig(act_mode=mode))
    model.eval()
    x = _samples(model, max(samples, 8), 1)
    if mode == "static":
        language = getattr(model, "task", "") == "language"
        calibrate(model, [x.long() if language else x])  # token ids as int64
    folder = work / f"{name}_{mode}_{plan.replace('/', '')}"
    compiled = compile_model(model, x[:1], folder, "m", mode=mode, calibration=[x])
    project = compiled.project
    data = x[:samples].numpy()
    reference = compiled.reference(data)
    host.build(project)
    out = host.run(project, data)
    exact = int((out.reshape(len(data), -1) == reference.reshape(len(data), -1)).all(1).sum())
    close = bool(np.allclose(out, reference, rtol=1e-5, atol=1e-6))
    entry: dict[str, Any] = {
        "model": name,
        "mode": mode,
        "plan": plan,
        "flash_weights": project.flash.get("weights", 0),
        "flash_total": sum(project.flash.values()),
        "arena_bytes": project.arena.size,
        "arena_lower_bound": project.arena.lower_bound,
        "host_exact": f"{exact}/{len(data)}",
        "host_within_1e-5": close,
    }
    eager_input = torch.from_numpy(data[:1])
    if getattr(model, "task", "") == "language":
        eager_input = eager_input.long()
    with torch.no_grad():
        eager = _seconds(lambda: compiled.model(eager_input))
    one = data[:1]
    c_time = _seconds(lambda: host.run(project, one))
    entry["host_time_vs_pytorch"] = round(c_time / eager, 2)
    if rv32.available():
        rv32.build(project)
        run = rv32.run(project, data)
        entry["rv32_exact"] = f"{int(np.array_equal(run.outputs, reference))}"
        entry["rv32_within_1e-5"] = bool(np.allclose(run.outputs, reference, rtol=1e-5, atol=1e-6))
        entry["rv32_instructions"] = run.instructions_per_inference
    return entry


#: the integer ops whose approximation the accuracy part measures, and what they replace
APPROXIMATIONS = {
    "mico.qembedding": "embedding lookup (table as 8-bit codes)",
    "mico.qrmsnorm": "RMSNorm (isqrt, fixed point)",
    "mico.qrope": "RoPE (Q14 tables, int32 products)",
    "mico.qsoftmax_prefix": "causal softmax (Q15 exp table, prefix)",
    "mico.lut": "SiLU (table of output codes)",
    "mico.qmul": "SwiGLU product (codes x codes, requantized)",
}


def _train_llama(steps: int = 150, seed: int = 0) -> tuple[torch.nn.Module, Any]:
    """A float tinyllama trained on a synthetic Markov chain of tokens (offline stand-in)."""
    from mico.data import synthetic_tokens

    torch.manual_seed(seed)
    model = from_zoo("tinyllama")
    data = synthetic_tokens(vocab_size=512, seq_len=64, n_train=1024, n_test=32, seed=seed)
    x, y = torch.from_numpy(data.x_train), torch.from_numpy(data.y_train)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        idx = torch.randint(0, len(x), (32,), generator=gen)
        loss = torch.nn.functional.cross_entropy(model(x[idx]).flatten(0, 1), y[idx].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval(), data


def _float_op(node: Any, args: list[torch.Tensor]) -> torch.Tensor | None:
    """The float op an integer LLaMa op replaces, on the reals of the codes it read (tables
    and weights as the op holds them): what the kernel would give with exact arithmetic."""
    from mico.passes.lower_llama import RMS_GAIN_FRAC, RMS_PRE, ROPE_FRAC

    a, out = node.attrs, node.output
    x = [t.to(torch.float64) * (v.scale or 1.0) for t, v in zip(args, node.inputs, strict=True)]
    if node.op == "mico.qrmsnorm":
        n, s_in = x[0].shape[-1], node.inputs[0].scale
        eps = a["eps_q"] * s_in * s_in / (4**RMS_PRE * n)
        weight = torch.tensor(a["g"], dtype=torch.float64) / 2**RMS_GAIN_FRAC * out.scale
        return x[0] * torch.rsqrt(x[0].pow(2).mean(-1, keepdim=True) + eps) * weight
    if node.op == "mico.qrope":
        shape = (a["positions"], a["half"])
        cos = torch.tensor(a["cos"], dtype=torch.float64).reshape(shape) / 2**ROPE_FRAC
        sin = torch.tensor(a["sin"], dtype=torch.float64).reshape(shape) / 2**ROPE_FRAC
        x0, x1 = x[0][..., 0::2], x[0][..., 1::2]
        return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], -1).flatten(-2)
    if node.op == "mico.qsoftmax_prefix":
        rows = x[0].shape[-2]
        limits = torch.tensor(a["limits"] * (rows // len(a["limits"])))
        keep = torch.arange(x[0].shape[-1])[None, :] < limits[:, None]
        return torch.softmax(x[0].masked_fill(~keep, float("-inf")), -1)
    if node.op == "mico.qmul":
        return x[0] * x[1]
    if node.op == "mico.lut":
        return torch.nn.functional.silu(x[0])
    return None


def run_accuracy(sequences: int = 8) -> dict[str, Any]:
    """Cost of each integer approximation of the static tinyllama (W8A8) against float."""
    import copy

    from mico.execute import run_graph
    from mico.execute.executor import run_ir
    from mico.ir import extract_ir
    from mico.ir.ops.registry import OpRegistry
    from mico.passes.lower_static import _StaticLowering
    from mico.quant import quantize

    float_model, data = _train_llama()
    model = quantize_model(copy.deepcopy(float_model), "8/8", QuantConfig(act_mode="static"))
    model.eval()
    calib = torch.from_numpy(data.x_train[:16])
    calibrate(model, [calib])
    ir = extract_ir(model, calib[:1])
    lowering = _StaticLowering(ir, [calib], None)
    graph = lowering.run()
    source_values = [*ir.inputs, *(v for n in ir.nodes for v in n.outputs)]
    source_name: dict[int, str] = {}  # lowered value -> the float value it stands for
    for value in source_values:
        lowered = lowering.env.get(id(value))
        if lowered is not None:
            source_name.setdefault(id(lowered), value.name)
    x_test = torch.from_numpy(data.x_test[:sequences])
    y_test = data.y_test[:sequences]

    per_op: dict[str, dict[str, float]] = {}
    for sample in x_test:
        floats: dict[str, torch.Tensor] = {}

        def record(node, results, floats=floats):
            for value, tensor in zip(node.outputs, results, strict=False):
                floats[value.name] = tensor.detach().to(torch.float64)

        run_ir(ir, [sample[None]], on_node=record)
        for node in graph.nodes:
            out_name = source_name.get(id(node.output))
            if node.op not in APPROXIMATIONS or out_name not in floats:
                continue
            execute = OpRegistry.require(node.op, "execute", "")
            args = []
            for value in node.inputs:
                if value.data is not None:
                    args.append(torch.from_numpy(np.asarray(value.data)))
                elif node.op == "mico.qembedding":
                    args.append(sample[None])
                else:  # the float model's own input, quantized as the integer op reads it
                    real_in = floats[source_name[id(value)]].float()
                    args.append(quantize(real_in, value.scale, value.qformat).to(torch.int64))
            codes = execute(args, node.attrs)[0].to(torch.float64)
            real = codes * node.output.scale
            expected = floats[out_name]
            # the ideal codes: the float result rounded (and clamped) to the output format
            ideal = quantize(expected.float(), node.output.scale, node.output.qformat).double()
            err = float((real - expected).abs().max())
            entry = per_op.setdefault(node.op, {"nodes": set(), "lsb": 0.0, "relative": 0.0,
                                                "ideal": 0.0, "differ": 0, "count": 0})  # fmt: skip
            entry["nodes"].add(node.name)
            entry["lsb"] = max(entry["lsb"], err / node.output.scale)
            span = float(expected.abs().max()) or 1.0
            entry["relative"] = max(entry["relative"], err / span)
            entry["ideal"] = max(entry["ideal"], float((codes - ideal).abs().max()))
            entry["differ"] += int((codes != ideal).sum())
            entry["count"] += codes.numel()
            # the kernel alone: the float op on the very codes it read, rounded to the output
            alone = _float_op(node, args)
            if alone is not None:
                alone_codes = quantize(alone.float(), node.output.scale, node.output.qformat)
                off = float((codes - alone_codes.double()).abs().max())
                entry["kernel"] = max(entry.get("kernel", 0.0), off)

    with torch.no_grad():
        reference = float_model(x_test).numpy()
        fake = model(x_test).numpy()
    integer = run_graph(graph, x_test)[0].numpy() * graph.outputs[0].scale
    span = float(reference.max() - reference.min())

    def compare(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
        return {"top1": float((a.argmax(-1) == b.argmax(-1)).mean()),
                "max_abs": float(np.abs(a - b).max()),
                "max_abs_relative": float(np.abs(a - b).max()) / span}  # fmt: skip

    return {
        "sequences": sequences,
        "per_op": {
            op: {
                "what": APPROXIMATIONS[op],
                "nodes": len(e["nodes"]),
                "max_error_lsb": round(e["lsb"], 3),
                "max_error_relative": round(e["relative"], 4),
                "max_codes_from_ideal": int(e["ideal"]),
                "share_not_ideal": round(e["differ"] / max(e["count"], 1), 4),
                "kernel_alone_max_codes": int(e.get("kernel", 0)),
            }
            for op, e in per_op.items()
        },
        "static_vs_float": compare(integer, reference),
        "fakequant_vs_float": compare(fake, reference),
        "static_vs_fakequant": compare(integer, fake),
        "next_token_accuracy": {
            "float": float((reference.argmax(-1) == y_test).mean()),
            "fakequant_w8a8": float((fake.argmax(-1) == y_test).mean()),
            "static_w8a8": float((integer.argmax(-1) == y_test).mean()),
        },
        "logits_range": span,
    }


def accuracy_markdown(a: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "## Static tinyllama: accuracy cost of the integer approximations (W8A8)",
        "",
        f"A tinyllama trained 150 steps on synthetic token sequences (a Markov chain with four "
        f"successors per token; an offline stand-in for TinyStories), {a['sequences']} test "
        "sequences of 64 tokens. Each integer op is fed the float model's own input, quantized "
        "as the op reads it. *Kernel alone*: its codes against the float op computed exactly on "
        "the very codes it read, rounded to the output format (0 is exact rounding: the cost of "
        "the integer approximation itself). *With input quantization*: against the float "
        "model's own output of that op rounded and clamped to the output format (adds the cost "
        "of reading 8-bit inputs: the residual stream's outliers leave few codes to a typical "
        "row, which RMSNorm's division amplifies). *vs float*: as reals against the float "
        "output, which the output format may also clip (the RMSNorm and SwiGLU outputs are the "
        "next layer's inputs, whose calibrated scales clip the rarest largest values, in the "
        "fake-quant model as here).",
        "",
        "| integer op | replaces | nodes | kernel alone: max codes off | with input quantization:"
        " max codes off | share off | max error vs float (output LSBs) | / max abs float |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for op, e in a["per_op"].items():
        alone = e.get("kernel_alone_max_codes", 0)
        lines.append(f"| `{op}` | {e['what']} | {e['nodes']} | {alone} | "
                     f"{e['max_codes_from_ideal']} | {e['share_not_ideal']:.2%} | "
                     f"{e['max_error_lsb']} | {e['max_error_relative']} |")  # fmt: skip
    acc = a["next_token_accuracy"]
    lines += [
        "",
        "| logits | top-1 agreement | max abs error | / float logits range |",
        "|---|---:|---:|---:|",
    ]
    for key, label in (("static_vs_float", "static W8A8 (C == Python) vs float"),
                       ("fakequant_vs_float", "PyTorch fake-quant W8A8 vs float"),
                       ("static_vs_fakequant", "static W8A8 vs fake-quant")):  # fmt: skip
        c = a[key]
        lines.append(f"| {label} | {c['top1']:.3f} | {c['max_abs']:.3f} | "
                     f"{c['max_abs_relative']:.3f} |")  # fmt: skip
    lines += [
        "",
        f"Next-token accuracy on the test sequences: float {acc['float']:.3f}, fake-quant "
        f"W8A8 {acc['fakequant_w8a8']:.3f}, static integer W8A8 {acc['static_w8a8']:.3f} "
        f"(the chain allows four successors: 0.25 is the best a model can do on average).",
    ]
    return lines


def _static_llama() -> tuple[torch.nn.Module, torch.Tensor]:
    """The zoo tinyllama, W8A8 with static activation scales, calibrated as run_case does."""
    torch.manual_seed(0)
    model = from_zoo("tinyllama")
    quantize_model(model, "8/8", QuantConfig(act_mode="static"))
    model.eval()
    x = _samples(model, 8, 1)
    calibrate(model, [x.long()])  # token ids as int64
    return model, x


def _generation_pair(label: str, make, work: Path, target: str, **kw: Any) -> dict[str, Any]:
    """One model generating GEN_TOKENS tokens on ``target`` with and without the KV cache:
    agreement, memory and instructions per token (``make`` builds a fresh model)."""
    from mico.generate import generate

    runs = {}
    for cached in (True, False):
        runs[cached] = generate(make(), GEN_PROMPT, GEN_TOKENS, target=target,
                                work_dir=work / f"gen_{label}_{int(cached)}", log=lambda _m: None,
                                kv_cache=cached, **kw)  # fmt: skip
    on, off = runs[True], runs[False]
    entry: dict[str, Any] = {
        "target": target,
        "prompt": GEN_PROMPT,
        "prompt_tokens": len(on.prompt_ids),
        "tokens": GEN_TOKENS,
        "tokens_agree_with_python": on.c_ids == on.python_ids == off.c_ids,
        "logits_bit_identical": on.c_logit_hashes == off.c_logit_hashes,
        "memory": on.memory,
    }
    for key, run in (("cached", on), ("uncached", off)):
        if run.instructions:
            entry[f"{key}_instructions_first"] = run.instructions[0]
            rest = run.instructions[1:]
            entry[f"{key}_instructions_per_token"] = round(sum(rest) / len(rest)) if rest else None
    return entry


def run_generation(work: Path, target: str = "rv32") -> dict[str, Any]:
    """tinyllama generating GEN_TOKENS tokens on ``target``, with and without the KV cache:
    float layers (and the host's speed), then the static W8A8 integer program."""

    def float_llama() -> torch.nn.Module:
        torch.manual_seed(0)
        return from_zoo("tinyllama")

    entry = {"model": "tinyllama (float layers)",
             **_generation_pair("float", float_llama, work, target)}  # fmt: skip
    entry["host"] = host_generation_speed(work)
    model, calibration = _static_llama()
    entry["static"] = {
        "model": "tinyllama (static W8A8, integer-only)",
        **_generation_pair(
            "static", lambda: model, work, target, mode="static", calibration=[calibration]
        ),
    }
    return entry


HOST_TOKENS = 40  # 16 prompt + 40 generated = 56: inside the 64-token window, so all cached


def host_generation_speed(work: Path, repeat: int = 5) -> dict[str, Any]:
    """Host tokens per second: the C program with and without the cache (process start and
    prompt encoding included) against PyTorch eager (``LLaMa.generate``: greedy, whole window
    per token, as the uncached program)."""
    import subprocess

    from mico.generate import generate

    speed: dict[str, Any] = {"tokens": HOST_TOKENS}
    for cached in (True, False):
        torch.manual_seed(0)
        directory = work / f"host_{int(cached)}"
        run = generate(from_zoo("tinyllama"), GEN_PROMPT, HOST_TOKENS, work_dir=directory,
                       log=lambda _m: None, kv_cache=cached)  # fmt: skip
        assert run.c_ids == run.python_ids
        program = [str(directory / "lm_generate"), GEN_PROMPT]
        seconds = _seconds(lambda p=program: subprocess.run(p, capture_output=True, check=True),
                           repeat)  # fmt: skip
        speed["cached" if cached else "uncached"] = round(HOST_TOKENS / seconds, 1)
    torch.manual_seed(0)
    model = from_zoo("tinyllama").eval()
    ids = torch.tensor([list(GEN_PROMPT.encode())])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one core, as the C program (and steadier on a shared machine)
    try:
        seconds = _seconds(lambda: model.generate(ids, HOST_TOKENS), repeat)
    finally:
        torch.set_num_threads(threads)
    speed["pytorch_eager"] = round(HOST_TOKENS / seconds, 1)
    return speed


def _instruction_rows(g: dict[str, Any], label: str) -> list[str]:
    rows = []
    for key in ("cached", "uncached"):
        first, per = g.get(f"{key}_instructions_first"), g.get(f"{key}_instructions_per_token")
        rows.append(f"| {label}, {key} | {first:,} | {per:,} |" if first else
                    f"| {label}, {key} | - | - |")  # fmt: skip
    return rows


def generation_markdown(g: dict[str, Any]) -> list[str]:
    m = g["memory"]
    where = "laid over the model's arena (no extra RAM)" if m["kv_in_arena"] else "own RAM"
    s = g.get("static")
    lines = [
        "",
        f"## Generation with a KV cache (tinyllama, {g['target']})",
        "",
        f"`mico generate tinyllama --prompt {g['prompt']!r} --tokens {g['tokens']}` "
        f"({g['prompt_tokens']} prompt tokens). Float layers: tokens agree with Python: "
        f"{g['tokens_agree_with_python']}; logits of the cached and uncached programs "
        f"bit-identical: {g['logits_bit_identical']}."
        + (
            f' Static W8A8 (integer-only; `generate(..., mode="static")`): tokens agree '
            f"with Python: {s['tokens_agree_with_python']}; int32 logits of the cached and "
            f"uncached programs bit-identical: {s['logits_bit_identical']}."
            if s
            else ""
        ),
        "",
        "| program | instructions, first token (prompt included) | instructions / later token |",
        "|---|---:|---:|",
        *_instruction_rows(g, "float layers"),
        *(_instruction_rows(s, "static W8A8") if s else []),
    ]
    h = g.get("host")
    if h:
        lines += [
            "",
            f"Host, float layers, {h['tokens']} tokens after the prompt: the C program "
            f"{h['cached']} tokens/s with the cache, {h['uncached']} without; PyTorch eager "
            f"(`LLaMa.generate`, no cache) {h['pytorch_eager']} tokens/s. The C figures include "
            "starting the program and encoding the prompt; PyTorch runs the context's own length "
            "each step (16 to 55 positions), the uncached C program always the padded 64-token "
            "window, with plain scalar float kernels. One run each on a shared machine (other "
            "jobs running): rough ratios; the rv32 counts are exact.",
        ]
    lines += [
        "",
        f"Float layers: KV cache {m['kv_cache']:,} bytes (float32) + decode scratch "
        f"{m['decode_scratch']:,} bytes, {where}; model arena {m['model_arena']:,} bytes; prompt "
        f"and context buffers {m['prompt_buffers']:,} bytes (512-byte prompt limit); RAM in all "
        f"{m['total_ram']:,} bytes. Float layers on rv32imac are soft float.",
    ]
    if s:
        sm = s["memory"]
        where = "laid over the model's arena" if sm["kv_in_arena"] else "own RAM"
        lines += [
            "",
            f"Static W8A8: KV cache {sm['kv_cache']:,} bytes (the keys and values as the "
            f"model's codes, one byte each at 8 bits) + decode scratch {sm['decode_scratch']:,} "
            f"bytes (one position's activations and the int32 logits), {where}; model arena "
            f"{sm['model_arena']:,} bytes; RAM in all {sm['total_ram']:,} bytes. Every scale is "
            "a compile-time constant, so the earlier positions' codes never change "
            "([mico.codegen.decode_static_c](../../mico/codegen/decode_static_c.py)).",
        ]
    lines += [
        "",
        "Both caches are used while the context fits the 64-token window; beyond it every "
        "token runs the whole window (the uncached figure).",
    ]
    return lines


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "# Transformers in C (W8A8, untrained weights)",
        "",
        "| model | mode | flash weights | flash total | arena (bound) | host == Python | "
        "rv32 instructions / inference | host time / PyTorch eager |",
        "|---|---|---:|---:|---:|---|---:|---:|",
    ]
    for e in results["cases"]:
        agree = e["host_exact"] + (" exact" if e["mode"] == "static" else ", within 1e-5")
        lines.append(
            f"| {e['model']} | {e['mode']} | {e['flash_weights']} | {e['flash_total']} | "
            f"{e['arena_bytes']} ({e['arena_lower_bound']}) | {agree} | "
            f"{e.get('rv32_instructions', '-'):,} | {e['host_time_vs_pytorch']} |"
        )
    lines += [
        "",
        "Host time includes starting the program (one sample per run), so it overstates the "
        "model's own time; rv32 instructions are exact (qemu `-icount shift=0`).",
    ]
    if results.get("plans"):
        lines += [
            "",
            "## Other plans, both modes (`--only plans`)",
            "",
            f"W4A4, W4A8 and a mixed plan (weights cycling through {MIXED_W}, activations "
            f"through {MIXED_A} layer by layer: 1- and 2-bit weights included), "
            f"{results.get('plan_samples', 2)} samples each on the host and on rv32 (qemu "
            "`-icount shift=0`), held to the "
            "Python reference: bit for bit in static mode, within 1e-5 (relative) in dynamic "
            "mode.",
            "",
            "| model | mode | plan | flash weights | flash total | arena | host == Python | "
            "rv32 == Python | rv32 instructions / inference |",
            "|---|---|---|---:|---:|---:|---|---|---:|",
        ]
        for e in results["plans"]:
            static = e.get("mode", "static") == "static"
            if static:
                host_agree = f"{e['host_exact']} exact"
                rv = {"1": "exact", "0": "NO"}.get(str(e.get("rv32_exact")), "-")
            else:
                host_agree = f"{e['host_exact']} exact, all within 1e-5: {e['host_within_1e-5']}"
                rv = {True: "within 1e-5", False: "NO"}.get(e.get("rv32_within_1e-5"), "-")
            lines.append(
                f"| {e['model']} | {e.get('mode', 'static')} | {e['plan']} | "
                f"{e['flash_weights']} | {e['flash_total']} | {e['arena_bytes']} | {host_agree} "
                f"| {rv} | {e.get('rv32_instructions', '-'):,} |"
            )
    if "accuracy" in results:
        lines += accuracy_markdown(results["accuracy"])
    if "generation" in results:
        lines += generation_markdown(results["generation"])
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument(
        "--only", choices=("models", "plans", "accuracy", "generation"), default=None
    )
    parser.add_argument(
        "--case",
        action="append",
        default=None,
        help="model:mode to re-run (keeps the other cases' figures)",
    )
    args = parser.parse_args()
    previous = args.out / "transformers.json"
    results = json.loads(previous.read_text()) if previous.is_file() else {}
    results["python"] = platform.python_version()
    with tempfile.TemporaryDirectory(prefix="mico-transformers-") as tmp:
        if args.only in (None, "models"):
            results["samples"] = args.samples
            chosen = [tuple(c.split(":")) for c in args.case] if args.case else CASES
            fresh = {(n, m): run_case(n, m, args.samples, Path(tmp)) for n, m in chosen}
            old = {(e["model"], e["mode"]): e for e in results.get("cases", [])}
            results["cases"] = [fresh.get(c) or old[c] for c in CASES if c in fresh or c in old]
        if args.only in (None, "plans"):
            results["plan_samples"] = args.samples
            results["plans"] = [
                run_case(name, mode, args.samples, Path(tmp), plan)
                for mode in ("static", "dynamic")
                for name in ("vit_tiny", "tinyllama")
                for plan in PLANS
            ]
        if args.only in (None, "accuracy"):
            results["accuracy"] = run_accuracy()
        if args.only in (None, "generation") and rv32.available():
            results["generation"] = run_generation(Path(tmp))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "transformers.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "transformers.md").write_text(markdown(results))
    print(markdown(results))


if __name__ == "__main__":
    main()
