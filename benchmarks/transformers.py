"""The zoo's transformers in C: flash, arena, agreement and rv32 instructions, per mode.

Run on demand (not a test):  python benchmarks/transformers.py [--samples 2] [--out DIR]

For ``vit_tiny`` (dynamic and static, W8A8) and ``tinyllama`` (dynamic, W8A8) it compiles the
model, runs a few samples on the host and on rv32 (qemu ``-icount shift=0``), and records flash
(weights and everything else), the arena against its lower bound, the agreement with the Python
reference and the instructions per inference, plus host time per inference against PyTorch
eager (a ratio measured in one run). Figures go to ``benchmarks/results/transformers.json`` and
``.md``. Untrained weights: the figures are about cost and exactness, not accuracy.

Generation (``--only generation`` runs this part alone and keeps the other figures): ``mico
generate`` with ``tinyllama`` (float layers, the only ones the KV cache takes) on rv32, with and
without the KV cache: instructions per generated token (the first token includes the prompt's
positions), the cache's bytes and where they live, and that both programs' logits are bit-identical
and their tokens Python's.
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
from mico.targets import host, rv32

CASES = [("vit_tiny", "dynamic"), ("vit_tiny", "static"), ("tinyllama", "dynamic")]
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


def run_case(name: str, mode: str, samples: int, work: Path) -> dict[str, Any]:
    torch.manual_seed(0)
    model = from_zoo(name)
    quantize_model(model, "8/8", QuantConfig(act_mode=mode))
    model.eval()
    x = _samples(model, max(samples, 8), 1)
    if mode == "static":
        calibrate(model, [x])
    compiled = compile_model(model, x[:1], work / f"{name}_{mode}", "m", mode=mode,
                             calibration=[x])  # fmt: skip
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


def run_generation(work: Path, target: str = "rv32") -> dict[str, Any]:
    """tinyllama generating GEN_TOKENS tokens on ``target``, with and without the KV cache."""
    from mico.generate import generate

    runs = {}
    for cached in (True, False):
        torch.manual_seed(0)
        model = from_zoo("tinyllama")
        runs[cached] = generate(model, GEN_PROMPT, GEN_TOKENS, target=target,
                                work_dir=work / f"gen_{int(cached)}", log=lambda _m: None,
                                kv_cache=cached)  # fmt: skip
    on, off = runs[True], runs[False]
    entry: dict[str, Any] = {
        "model": "tinyllama (float layers)",
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
    entry["host"] = host_generation_speed(work)
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


def generation_markdown(g: dict[str, Any]) -> list[str]:
    m = g["memory"]
    where = "laid over the model's arena (no extra RAM)" if m["kv_in_arena"] else "own RAM"
    lines = [
        "",
        f"## Generation with a KV cache ({g['model']}, {g['target']})",
        "",
        f"`mico generate tinyllama --prompt {g['prompt']!r} --tokens {g['tokens']}` "
        f"({g['prompt_tokens']} prompt tokens); tokens agree with Python: "
        f"{g['tokens_agree_with_python']}; logits of the cached and uncached programs "
        f"bit-identical: {g['logits_bit_identical']}.",
        "",
        "| program | instructions, first token (prompt included) | instructions / later token |",
        "|---|---:|---:|",
    ]
    for key in ("cached", "uncached"):
        first, per = g.get(f"{key}_instructions_first"), g.get(f"{key}_instructions_per_token")
        lines.append(f"| {key} | {first:,} | {per:,} |" if first else f"| {key} | - | - |")
    h = g.get("host")
    if h:
        lines += [
            "",
            f"Host, {h['tokens']} tokens after the prompt: the C program {h['cached']} tokens/s "
            f"with the cache, {h['uncached']} without; PyTorch eager (`LLaMa.generate`, no "
            f"cache) {h['pytorch_eager']} tokens/s. The C figures include starting the program "
            "and encoding the prompt; PyTorch runs the context's own length each step (16 to 55 "
            "positions), the uncached C program always the padded 64-token window, with plain "
            "scalar float kernels. One run each on a shared machine (other jobs running): "
            "rough ratios; the rv32 counts are exact.",
        ]
    lines += [
        "",
        f"KV cache {m['kv_cache']:,} bytes + decode scratch {m['decode_scratch']:,} bytes, "
        f"{where}; model arena {m['model_arena']:,} bytes; prompt and context buffers "
        f"{m['prompt_buffers']:,} bytes (512-byte prompt limit); RAM in all {m['total_ram']:,} "
        "bytes. The cache is used while the context fits the 64-token window; beyond it every "
        "token runs the whole window (the uncached figure). Float layers on rv32imac are soft "
        "float; the W8A8 model above runs its window in 423 M instructions but is not cached "
        "(its activation scales span the window).",
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
    if "generation" in results:
        lines += generation_markdown(results["generation"])
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--only", choices=("models", "generation"), default=None)
    args = parser.parse_args()
    previous = args.out / "transformers.json"
    results = json.loads(previous.read_text()) if previous.is_file() else {}
    results["python"] = platform.python_version()
    with tempfile.TemporaryDirectory(prefix="mico-transformers-") as tmp:
        if args.only != "generation":
            results["samples"] = args.samples
            results["cases"] = [run_case(name, mode, args.samples, Path(tmp))
                                for name, mode in CASES]  # fmt: skip
        if args.only != "models" and rv32.available():
            results["generation"] = run_generation(Path(tmp))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "transformers.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "transformers.md").write_text(markdown(results))
    print(markdown(results))


if __name__ == "__main__":
    main()
