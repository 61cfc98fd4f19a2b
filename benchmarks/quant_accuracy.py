"""Accuracy of FP32, PTQ and QAT at several uniform bit-widths, and training time per epoch.

Run on demand (not a test):  python benchmarks/quant_accuracy.py [--epochs 15] [--out DIR]

For the digits CNN (``small_cnn`` on scikit-learn digits) and the mnist1d Conv1d net
(``mnist1d_cnn`` on generated MNIST-1D) it records: FP32 accuracy, W8A8 and W4A4 post-training
quantization (static calibrated scales), W4A4 and W2A2 quantization-aware training (fine-tuned
from the FP32 weights, straight-through estimator; and with learned step sizes), and seconds
per training epoch for FP32 and QAT. Figures go to ``benchmarks/results/quant_accuracy.json``
and ``.md``.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import time
from pathlib import Path
from typing import Any

import torch

from mico.data import load_dataset
from mico.models import from_zoo
from mico.quant import QuantConfig, apply_plan, calibrate
from mico.train import accuracy, fit, seed_everything

CASES = {
    "digits_cnn": ("small_cnn", "digits", {}),
    "mnist1d_conv1d": ("mnist1d_cnn", "mnist1d", {}),
}


def _uniform(model: torch.nn.Module, w: float, a: float) -> list[list[float]]:
    n = model.n_layers
    return [[w] * n, [a] * n]


def run_case(label: str, epochs: int, qat_epochs: int, seed: int) -> dict[str, Any]:
    zoo_name, dataset, kwargs = CASES[label]
    seed_everything(seed)
    split = load_dataset(dataset, seed=seed)
    train_loader, test_loader = split.loaders(batch_size=64, seed=seed)
    calib = [x for x, _ in train_loader][:8]
    model = from_zoo(zoo_name, **kwargs)
    history = fit(model, train_loader, epochs, lr=3e-3)
    result: dict[str, Any] = {
        "model": zoo_name,
        "dataset": dataset,
        "train_samples": len(split.x_train),
        "test_samples": len(split.x_test),
        "epochs": epochs,
        "fp32_accuracy": accuracy(model, test_loader),
        "fp32_seconds_per_epoch": sum(h["seconds"] for h in history) / max(epochs, 1),
    }
    static = QuantConfig(act_mode="static")
    for w, a in ((8, 8), (4, 4), (2, 2)):
        q = calibrate(apply_plan(model, _uniform(model, w, a), static), calib)
        result[f"w{w}a{a}_ptq_accuracy"] = accuracy(q, test_loader)
    for w, a in ((4, 4), (2, 2)):
        for tag, config in (("qat", static), ("qat_lsq", static.replace(learned_step=True))):
            seed_everything(seed)
            q = calibrate(apply_plan(copy.deepcopy(model), _uniform(model, w, a), config), calib)
            h = fit(q, train_loader, qat_epochs, lr=1e-3)
            result[f"w{w}a{a}_{tag}_accuracy"] = accuracy(q, test_loader)
            result[f"w{w}a{a}_{tag}_seconds_per_epoch"] = sum(r["seconds"] for r in h) / max(
                qat_epochs, 1
            )
    return result


def to_markdown(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    rows = [
        "# Quantization accuracy (mico benchmarks/quant_accuracy.py)",
        "",
        f"Run {meta['date']} on {meta['machine']}, torch {meta['torch']}, seed {meta['seed']}; "
        f"FP32 {meta['epochs']} epochs, QAT {meta['qat_epochs']} epochs fine-tuning from FP32.",
        "",
        "| case | FP32 | W8A8 PTQ | W4A4 PTQ | W4A4 QAT | W4A4 QAT+LSQ | W2A2 PTQ | W2A2 QAT "
        "| W2A2 QAT+LSQ | s/epoch FP32 | s/epoch QAT W4A4 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        rows.append(
            f"| {r['model']} on {r['dataset']} | {r['fp32_accuracy']:.4f} | "
            f"{r['w8a8_ptq_accuracy']:.4f} | {r['w4a4_ptq_accuracy']:.4f} | "
            f"{r['w4a4_qat_accuracy']:.4f} | {r['w4a4_qat_lsq_accuracy']:.4f} | "
            f"{r['w2a2_ptq_accuracy']:.4f} | {r['w2a2_qat_accuracy']:.4f} | "
            f"{r['w2a2_qat_lsq_accuracy']:.4f} | {r['fp32_seconds_per_epoch']:.2f} | "
            f"{r['w4a4_qat_seconds_per_epoch']:.2f} |"
        )
    rows += [
        "",
        "Seconds per epoch are wall-clock on a shared machine: compare them within one run only.",
    ]
    return "\n".join(rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--qat-epochs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    args = parser.parse_args()
    torch.set_num_threads(max(torch.get_num_threads(), 1))
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()} {platform.system()}, {torch.get_num_threads()} threads",
        "torch": torch.__version__,
        "seed": args.seed,
        "epochs": args.epochs,
        "qat_epochs": args.qat_epochs,
    }
    results = []
    for label in args.cases:
        print(f"running {label} …", flush=True)
        results.append(run_case(label, args.epochs, args.qat_epochs, args.seed))
        print(json.dumps(results[-1], indent=2), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "quant_accuracy.json").write_text(
        json.dumps({"meta": meta, "results": results}, indent=2) + "\n"
    )
    (args.out / "quant_accuracy.md").write_text(to_markdown(results, meta))
    print(f"wrote {args.out / 'quant_accuracy.md'}")


if __name__ == "__main__":
    main()
