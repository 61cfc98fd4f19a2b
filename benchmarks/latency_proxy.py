"""How far latency proxies are from the latency they stand in for, per target.

Run on demand (not a test):  python benchmarks/latency_proxy.py [--samples 300] [--out DIR]

For each target with a per-layer measurement backend (today: ``bitfusion``, the analytic cycle
model) it profiles Latin-hypercube layer shapes of every kind at every bit pair, fits the proxy
and reports two errors honestly:

* per layer kind, MAPE on held-out *shapes* (every bit pair of a shape held out together);
* per deployable zoo model, at W8A8, W4A4, W2A2 and a mixed plan, the error of the summed
  prediction against the measured total — **leave one model out**: the proxy used for a model is
  fitted without that model's own layers, as a new user's model would be.

Figures go to ``benchmarks/results/latency_proxy.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

from mico.codegen.compile import DEPLOYABLE_MODELS
from mico.hw import fit_proxy, mape, model_layer_shapes
from mico.hw.measure import backend
from mico.hw.profile import bit_pairs, sample_shapes
from mico.models import from_zoo

KINDS = ("conv2d", "dwconv2d", "conv1d", "linear")
PLANS = {"W8A8": (8, 8), "W4A4": (4, 4), "W2A2": (2, 2)}


def _mixed(n: int) -> list[tuple[int, int]]:
    """8 bits at the ends, 4 and 2 alternating inside (a typical searched plan)."""
    inner = [(4, 4) if i % 2 else (2, 4) for i in range(n)]
    if n:
        inner[0] = inner[-1] = (8, 8)
    return inner


def run(samples: int, seed: int, targets: list[str]) -> dict[str, Any]:
    results: dict[str, Any] = {
        "samples": samples,
        "seed": seed,
        "python": platform.python_version(),
        "targets": {},
    }
    models = {name: from_zoo(name) for name in DEPLOYABLE_MODELS}
    layers = {name: model_layer_shapes(m, m.example_input()) for name, m in models.items()}
    for target in targets:
        start = time.perf_counter()
        bf = backend(target)
        pairs = bit_pairs(bf.bits)
        random_shapes = sample_shapes(KINDS, samples, seed=seed, include_zoo=False)
        random_rows = [(s.with_bits(w, a), bf.measure(s.with_bits(w, a)))
                       for s in random_shapes for w, a in pairs]  # fmt: skip
        zoo_rows = {
            name: [(s.with_bits(w, a), bf.measure(s.with_bits(w, a))) for s in ls for w, a in pairs]
            for name, ls in layers.items()
        }
        full = fit_proxy(random_rows + [r for rows in zoo_rows.values() for r in rows], target,
                         bf.unit, seed=seed)  # fmt: skip
        per_kind = {
            kind: {"kept": m.algorithm, **{f"{k}_mape": v for k, v in m.holdout_mape.items()}}
            for kind, m in sorted(full.kinds.items())
        }
        per_model: dict[str, dict[str, Any]] = {}
        for name, model_layers in layers.items():
            others = [r for other, rows in zoo_rows.items() if other != name for r in rows]
            proxy = fit_proxy(random_rows + others, target, bf.unit, seed=seed)
            entry = {}
            plans = {**{k: [v] * len(model_layers) for k, v in PLANS.items()},
                     "mixed": _mixed(len(model_layers))}  # fmt: skip
            for plan_name, bits in plans.items():
                shaped = [s.with_bits(w, a) for s, (w, a) in zip(model_layers, bits, strict=True)]
                measured = sum(bf.measure(s) for s in shaped)
                predicted = proxy.predict_model(shaped)
                entry[plan_name] = {
                    "measured": measured,
                    "predicted": round(predicted, 1),
                    "error_pct": round(mape([predicted], [measured]), 2),
                }
            per_model[name] = entry
        errors = [e["error_pct"] for m in per_model.values() for e in m.values()]
        results["targets"][target] = {
            "unit": bf.unit,
            "profile_rows": len(random_rows),
            "per_kind_holdout": per_kind,
            "per_model_leave_one_out": per_model,
            "model_mape_pct": round(sum(errors) / len(errors), 2),
            "seconds": round(time.perf_counter() - start, 1),
        }
    return results


def markdown(results: dict[str, Any]) -> str:
    lines = ["# Latency proxies against their targets", ""]
    for target, r in results["targets"].items():
        lines += [
            f"## {target} ({r['unit']}; {r['profile_rows']} profiled layer x bit cases, "
            f"{r['seconds']} s)",
            "",
            "Per layer kind, MAPE on held-out shapes:",
            "",
            "| kind | kept | random forest | XGBoost |",
            "|---|---|---:|---:|",
        ]
        for kind, k in r["per_kind_holdout"].items():
            forest = k.get("forest_mape", float("nan"))
            boost = k.get("xgboost_mape", float("nan"))
            lines.append(f"| {kind} | {k['kept']} | {forest:.1f} % | {boost:.1f} % |")
        lines += [
            "",
            "Whole models, leave-one-model-out (the proxy never saw the model's layers):",
            "",
            "| model | plan | measured | predicted | error |",
            "|---|---|---:|---:|---:|",
        ]
        for model, plans in r["per_model_leave_one_out"].items():
            for plan, e in plans.items():
                lines.append(
                    f"| {model} | {plan} | {e['measured']:.0f} | {e['predicted']:.0f} | "
                    f"{e['error_pct']:.2f} % |"
                )
        lines += ["", f"Mean whole-model error: **{r['model_mape_pct']:.2f} %**.", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--targets", default="bitfusion")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    results = run(args.samples, args.seed, args.targets.split(","))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latency_proxy.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "latency_proxy.md").write_text(markdown(results))
    print(markdown(results))


if __name__ == "__main__":
    main()
