"""The zoo's transformers in C: flash, arena, agreement and rv32 instructions, per mode.

Run on demand (not a test):  python benchmarks/transformers.py [--samples 2] [--out DIR]

For ``vit_tiny`` (dynamic and static, W8A8) and ``tinyllama`` (dynamic, W8A8) it compiles the
model, runs a few samples on the host and on rv32 (qemu ``-icount shift=0``), and records flash
(weights and everything else), the arena against its lower bound, the agreement with the Python
reference and the instructions per inference, plus host time per inference against PyTorch
eager (a ratio measured in one run). Figures go to ``benchmarks/results/transformers.json`` and
``.md``. Untrained weights: the figures are about cost and exactness, not accuracy.
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
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mico-transformers-") as tmp:
        cases = [run_case(name, mode, args.samples, Path(tmp)) for name, mode in CASES]
    results = {"python": platform.python_version(), "samples": args.samples, "cases": cases}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "transformers.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "transformers.md").write_text(markdown(results))
    print(markdown(results))


if __name__ == "__main__":
    main()
