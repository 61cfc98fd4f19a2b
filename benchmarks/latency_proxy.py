"""How far latency proxies are from the latency they stand in for, per target.

Run on demand (not a test):
    python benchmarks/latency_proxy.py [--samples 300] [--targets bitfusion,rv32] [--out DIR]

For ``bitfusion`` (the analytic cycle model) it profiles Latin-hypercube layer shapes of every
kind at every bit pair plus the zoo's layers; for a target that runs C (``rv32``: qemu
instructions; ``host``: callgrind instructions) it compiles every deployable zoo model under
several plans and counts each program node by node (``mico.hw.modelprof``; the records are
the ones ``mico profile --target T`` keeps in the cache, so a rerun with the same C kernels
measures nothing). It fits the proxy and reports two errors honestly:

* per kind, MAPE on held-out *shapes* (every bit pair of a shape held out together) or, on a
  program target, on the nodes of held-out *models* (5 folds of the zoo models);
* per deployable zoo model, at each plan, the error of the predicted total against the
  measured one — **leave one model out**: the proxy used for a model is fitted without that
  model's own layers or programs, as a new user's model would be (each kind's algorithm is
  the one the whole fit chose on held-out shapes, so a refit compares nothing: four times
  faster). On program targets the measured total is the release build's instructions per
  inference (sample 0), and the prediction covers every node (conv, pooling, adds, input
  quantization) plus the fitted per-model overhead; the profile's single-layer programs of
  sampled shapes (``mico profile --target T --ops conv1d --samples N``), when there are any
  for the current kernels, join every fit. VexRiscv's proxy is a ratio proxy over rv32's
  (:func:`mico.hw.proxy.fit_ratio_proxy`): both are left one model out.

Figures go to ``benchmarks/results/latency_proxy.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

import torch

from mico.codegen.compile import DEPLOYABLE_MODELS
from mico.hw import fit_proxy, mape, model_layer_shapes
from mico.hw.measure import backend
from mico.hw.profile import bit_pairs, sample_shapes
from mico.hw.proxy import RATIO_BASE, same_programs
from mico.models import from_zoo

KINDS = ("conv2d", "dwconv2d", "conv1d", "linear")
PLANS = {"W8A8": (8, 8), "W4A4": (4, 4), "W2A2": (2, 2)}


def _mixed(n: int) -> list[tuple[int, int]]:
    """8 bits at the ends, 4 and 2 alternating inside (a typical searched plan)."""
    inner = [(4, 4) if i % 2 else (2, 4) for i in range(n)]
    if n:
        inner[0] = inner[-1] = (8, 8)
    return inner


#: the algorithms of the per-kind tables (the ratio proxy's add ``groups``)
ALGORITHM_COLUMNS = ("forest", "xgboost", "linear", "grouped", "costs", "costs_forest")
#: their column titles
ALGORITHM_TITLES = {"groups": "groups", "forest": "random forest", "xgboost": "XGBoost",
                    "linear": "linear", "grouped": "grouped forest", "costs": "path costs",
                    "costs_forest": "path costs + forest"}  # fmt: skip
#: plans of the program targets: fitted on all, the whole-model table shows every one
PROGRAM_PLANS = ("W8A8", "W4A4", "W2A2", "mixed", "W4A8", "W8A4", "W2A8", "W1A1")
#: op kinds of a program only vit_tiny has (attention): leave it out and no other model shows
#: the proxy a matmul, softmax or layer norm, so its leave-one-out figure is reported apart
ALONE = ("vit_tiny",)


def _commit() -> dict[str, Any]:
    """The commit the kernels were measured at, and whether the C kernels differ from it."""
    import subprocess

    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        result = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                                check=False)  # fmt: skip
        return result.stdout.strip()

    return {
        "commit": git("rev-parse", "--short=10", "HEAD"),
        "commit_date": git("log", "-1", "--format=%cI"),
        "kernels_dirty": bool(git("status", "--porcelain", "--", "mico/csrc")),
    }


class _Fitter:
    """Fits a target's proxy on its records, whole or without one model's (leave one out,
    each kind's algorithm the whole fit's). A target of :data:`RATIO_BASE` gets a ratio proxy
    (:func:`mico.hw.proxy.fit_ratio_proxy`) over its base target's proxy, itself left one out
    alike, fitted on the base's records of every model."""

    def __init__(self, target: str, unit: str, seed: int, layers: list[Any],
                 records: list[Any], as_measured: bool = False) -> None:  # fmt: skip
        from mico.hw.modelprof import models_path, read_records
        from mico.hw.profile import profile_path, read_profile
        from mico.hw.programs import resolve_backend

        self.target, self.unit, self.seed = target, unit, seed
        self.layers, self.records = layers, records
        self.base_name = RATIO_BASE.get(target)
        self.chosen: dict[str, str] | None = None
        self.base_chosen: dict[str, str] | None = None
        if self.base_name:
            base = resolve_backend(self.base_name)
            path = profile_path(self.base_name, base.fingerprint)
            # as measured: the base's single-layer rows too, as its own section reads them
            self.base_layers = _latest_layers(path) if as_measured else read_profile(path)
            latest: dict[tuple[str, str], Any] = {}
            for r in read_records(models_path(path)):
                latest[(r.model, r.plan_name)] = r
            self.base_all = list(latest.values())
            self.base_matched = same_programs(records, read_records(models_path(path)))

    def fit(self, without: str = "") -> Any:
        from mico.hw.proxy import fit_ratio_proxy

        records = [r for r in self.records if r.model != without]
        if not self.base_name:
            proxy = fit_proxy(self.layers, self.target, self.unit, seed=self.seed,
                              models=records, algorithms=self.chosen)  # fmt: skip
            self.chosen = self.chosen or {k: m.algorithm for k, m in proxy.kinds.items()}
            return proxy
        base = fit_proxy(self.base_layers, self.base_name, "instructions", seed=self.seed,
                         models=[r for r in self.base_all if r.model != without],
                         algorithms=self.base_chosen)  # fmt: skip
        self.base_chosen = self.base_chosen or {k: m.algorithm for k, m in base.kinds.items()}
        matched = [r for r in self.base_matched if r.model != without]
        # the ratio's algorithms are chosen again on each fit's own models (held out model by
        # model): the left-out model plays no part in the choice
        return fit_ratio_proxy(records, matched, base, self.target, self.unit, seed=self.seed)

    def given_base(self, proxy: Any, record: Any) -> float | None:
        """A ratio proxy's prediction of ``record`` given the base target's measured count of
        each node (the program counted on the base, as qemu does in seconds) instead of the
        base proxy's: what the ratios alone are off by. None without a base record."""
        if proxy.base is None:
            return None
        partner = {(r.model, r.plan_name): r for r in self.base_matched}.get(
            (record.model, record.plan_name)
        )
        if partner is None:
            return None
        counts = {op.name: v for op, v in partner.nodes}
        ops = [op for op, _ in record.nodes]
        total = 0.0
        for op, mine, below in zip(ops, proxy.predict_ops(ops), proxy.base.predict_ops(ops),
                                   strict=True):  # fmt: skip
            if op.path != "alias" and below > 0:
                total += mine / below * counts.get(op.name, 0.0)
        return total + proxy.model_overhead(sum(op.path != "alias" for op in ops))

    def describe(self) -> dict[str, Any]:
        if not self.base_name:
            return {}
        return {
            "ratio_base": self.base_name,
            "base_programs": len(self.base_all),
            "base_matched": len(self.base_matched),
        }


def _as_measured(path: Path, models: list[str], plans: list[str]) -> Any:
    """The latest record of each (model, plan) in ``path`` as it was measured, fresh or not
    (a :class:`mico.hw.modelprof.ModelsRun` that measured nothing)."""
    from mico.hw.modelprof import ModelsRun, read_records

    latest = {(r.model, r.plan_name): r for r in read_records(path)}
    wanted = [latest[(m, p)] for m in models for p in plans if (m, p) in latest]
    return ModelsRun(wanted, reused=len(wanted))


def _latest_layers(path: Path) -> list[Any]:
    """The latest row of each layer and widths in a profile CSV, fresh or not."""
    from mico.hw.profile import _key, read_profile_rows

    return list({_key(layer): (layer, latency) for layer, latency, _ in
                 read_profile_rows(path)}.values())  # fmt: skip


def _stale_files(records: list[Any]) -> list[str]:
    """Kernel files whose current hash differs from the one a record compiled."""
    from mico.hw.keys import kernel_hashes

    now = kernel_hashes()
    return sorted({f for r in records for f, h in r.key.kernels.items() if now.get(f) != h})


def run_program(target: str, seed: int, models: list[str], plans: list[str],
                records_file: Path | None = None, jobs: int = 1,
                as_measured: bool = False) -> dict[str, Any]:  # fmt: skip
    """A program target: zoo models x plans counted node by node, proxies left one out
    (``as_measured``: the records and profile rows as they are, none measured again)."""
    from mico.hw.modelprof import models_path, profile_models
    from mico.hw.profile import profile_path, read_profile
    from mico.hw.programs import kernels_hash, resolve_backend

    start = time.perf_counter()
    measure = resolve_backend(target)
    path = records_file or models_path(profile_path(target, measure.fingerprint))
    hash_start = kernels_hash()
    stamp = _commit()
    if as_measured:
        run_ = _as_measured(path, models, plans)
    else:
        run_ = profile_models(path, models, plans, target, jobs=jobs)
    records = run_.records
    hash_end = kernels_hash()
    measured_seconds = sum(r.seconds for r in records)
    csv = profile_path(target, measure.fingerprint)
    layers = _latest_layers(csv) if as_measured else read_profile(csv)
    fitter = _Fitter(target, measure.unit, seed, layers, records, as_measured)
    full = fitter.fit()
    per_kind = {
        kind: {"kept": m.algorithm, "rows": len(m.rows) or None,
               **{f"{k}_mape": v for k, v in m.holdout_mape.items()}}
        for kind, m in sorted(full.kinds.items())
    }  # fmt: skip
    per_model: dict[str, dict[str, Any]] = {}
    for name in models:
        own = [r for r in records if r.model == name]
        if not own:
            continue
        proxy = fitter.fit(without=name)
        entry = {}
        for record in own:
            ops = [op for op, _ in record.nodes]
            predicted = proxy.predict_model(ops)
            layer_nodes = sum(v for op, v in record.nodes if op.is_mac)
            entry[record.plan_name] = {
                "measured": record.release,
                "predicted": round(predicted, 1),
                "error_pct": round(mape([predicted], [record.release]), 2),
                "non_mac_share_pct": round(100 * (1 - layer_nodes / record.release), 1),
                "nodes": len(ops),
            }
            given = fitter.given_base(proxy, record)
            if given is not None:  # the ratios alone: times the base's measured node counts
                entry[record.plan_name]["given_base"] = round(given, 1)
                entry[record.plan_name]["given_base_error_pct"] = round(
                    mape([given], [record.release]), 2
                )
        per_model[name] = entry
    errors = [e["error_pct"] for n, m in per_model.items() if n not in ALONE for e in m.values()]
    alone = [e["error_pct"] for n, m in per_model.items() if n in ALONE for e in m.values()]
    given = [e["given_base_error_pct"] for m in per_model.values() for e in m.values()
             if "given_base_error_pct" in e]  # fmt: skip
    return {
        "unit": measure.unit,
        "records": len(records),
        "layer_rows": len(layers),
        "as_measured": as_measured,
        "changed_since": _stale_files(records) if as_measured else [],
        **fitter.describe(),
        "records_file": path.name,
        **stamp,
        "measured_now": run_.measured,
        "regenerated_identical": run_.same_program,
        "reused_fresh": run_.reused,
        "jobs": jobs,
        "kernels_hash": hash_start[:12]
        + ("" if hash_end == hash_start else f" -> {hash_end[:12]} (changed while measuring)"),
        "measuring_seconds": round(measured_seconds, 1),
        "overhead": [round(full.overhead, 1), round(full.overhead_per_node, 2)],
        "per_kind_holdout": per_kind,
        "per_model_leave_one_out": per_model,
        "model_mape_pct": round(sum(errors) / len(errors), 2) if errors else None,
        "model_max_pct": round(max(errors), 2) if errors else None,
        "alone_mape_pct": round(sum(alone) / len(alone), 2) if alone else None,
        **(
            {
                "given_base_mape_pct": round(sum(given) / len(given), 2),
                "given_base_max_pct": round(max(given), 2),
            }
            if given
            else {}
        ),
        "seconds": round(time.perf_counter() - start, 1),
    }


def run(samples: int, seed: int, targets: list[str], models_arg: str = "",
        plans: tuple[str, ...] = PROGRAM_PLANS,
        records: dict[str, Path] | None = None, jobs: int = 1,
        as_measured: bool = False) -> dict[str, Any]:  # fmt: skip
    results: dict[str, Any] = {
        "samples": samples,
        "seed": seed,
        "python": platform.python_version(),
        "targets": {},
    }
    started = time.perf_counter()
    models = {name: from_zoo(name) for name in DEPLOYABLE_MODELS}
    layers = {name: model_layer_shapes(m, m.example_input()) for name, m in models.items()}
    for target in targets:
        if target != "bitfusion":
            names = models_arg.split(",") if models_arg else list(DEPLOYABLE_MODELS)
            results["targets"][target] = run_program(target, seed, names, list(plans),
                                                     (records or {}).get(target), jobs,
                                                     as_measured)  # fmt: skip
            continue
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
        chosen = {kind: m.algorithm for kind, m in full.kinds.items()}
        per_model: dict[str, dict[str, Any]] = {}
        for name, model_layers in layers.items():
            others = [r for other, rows in zoo_rows.items() if other != name for r in rows]
            proxy = fit_proxy(random_rows + others, target, bf.unit, seed=seed, algorithms=chosen)
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
            "model_max_pct": round(max(errors), 2),
            "feature_set": full.feature_set,
            "seconds": round(time.perf_counter() - start, 1),
        }
    results["seconds"] = round(time.perf_counter() - started, 1)
    return results


def program_markdown(target: str, r: dict[str, Any]) -> list[str]:
    """The section of a program target."""
    lines = [
        f"## {target} ({r['unit']}; {r['records']} compiled programs counted node by node; "
        f"fitting and leave-one-out {r['seconds']} s, the records took "
        f"{r['measuring_seconds']:.0f} s to measure)",
        "",
        f"Records: `{r['records_file']}` (C kernels hash {r['kernels_hash']}). Per-model "
        f"overhead fitted: {r['overhead'][0]:+,.0f} {r['overhead'][1]:+.2f} per node.",
        "",
    ]
    if r.get("layer_rows"):
        lines += [
            f"Single-layer programs of the profile's sampled shapes joined the fit: "
            f"{r['layer_rows']} rows (never a zoo model's layers).",
            "",
        ]
    if r.get("ratio_base"):
        lines += [
            f"Ratio proxy: each node is the {r['ratio_base']} proxy's instructions times the "
            f"cycles per instruction predicted for it (`fit_ratio_proxy`); the "
            f"{r['ratio_base']} proxy is fitted on {r['base_programs']} programs (left one "
            f"model out as well), the ratios on the {r['base_matched']} programs of this "
            f"target whose {r['ratio_base']} record compiled the same kernel files. Per kind, "
            "the mean ratio of the node's kernel path, lane width, 1-D or not and widths "
            "(`groups`, each group shrunk toward its parent) and the three regressors are "
            "scored on held-out *models* (each model's nodes predicted by a fit on the "
            "others'); conv and linear nodes keep the groups whatever the scores, the other "
            "ops the best scored, chosen again in each leave-one-model-out fit without the "
            "left-out model. Per-kind errors below are those of the cycles given the node's "
            "measured instructions.",
            "",
        ]
    if r.get("note"):  # written by hand into the JSON: how the records came to be
        lines += [r["note"], ""]
    if r.get("as_measured"):
        changed = ", ".join(f"`{f}`" for f in r.get("changed_since", [])) or "none"
        lines += [
            "Records as measured (`--as-measured`: none measured again"
            + (f"; measured at {r['measured_at']}" if r.get("measured_at") else "")
            + f"); kernel files changed since they were measured: {changed}.",
            "",
        ]
    if "commit" in r:
        dirty = " plus uncommitted kernel edits" if r.get("kernels_dirty") else ""
        moved = "changed while measuring" in str(r["kernels_hash"])
        where = (
            "the records measured after other sessions changed the kernels mid-run are of "
            "those kernels (each record is keyed by its own program)"
            if moved
            else "every record is the program mico generated there"
        )
        verb = "Measured"
        if r.get("as_measured"):
            verb, where = "Fitted", "on the records as measured before it"
        lines += [
            f"{verb} at commit `{r['commit']}` ({r['commit_date']}){dirty}: {where} "
            f"({r['measured_now']} measured in this run, "
            f"{r['regenerated_identical']} regenerated byte-identical to an earlier record, "
            f"{r['reused_fresh']} reused unchanged; {r['jobs']} worker(s)).",
            "",
        ]
    groups = any("groups_mape" in k for k in r["per_kind_holdout"].values())
    columns = ALGORITHM_COLUMNS if not groups else ("groups", "forest", "xgboost", "linear")
    # a section of an older proxy has no cost candidates' scores: their columns are left out
    kinds = r["per_kind_holdout"].values()
    algorithms = tuple(a for a in columns if any(f"{a}_mape" in k for k in kinds))
    held = (
        "held-out models (– : one model, not held out)"
        if groups
        else "held-out nodes (on a program target, a kind of nodes of at least 5 models: the "
        "nodes of 5 folds of the models held out in turn, single-layer rows always training; "
        "otherwise held-out shapes; – : under 5 shapes, not held out)"
        if "costs" in algorithms  # proxy version 5: its choice is on held-out models' nodes
        else "held-out shapes (– : under 5 shapes, not held out)"
    )
    lines += [
        "Per kind (conv1d shares conv2d's regressor, `other` is the fallback of ops without "
        f"their own), MAPE on {held}:",
        "",
        "| kind | kept | rows | " + " | ".join(ALGORITHM_TITLES[a] for a in algorithms) + " |",
        "|---|---|---:|" + "---:|" * len(algorithms),
    ]
    for kind, k in r["per_kind_holdout"].items():
        cells = ["–" if f"{a}_mape" not in k else f"{k[f'{a}_mape']:.1f} %" for a in algorithms]
        lines.append(f"| {kind} | {k['kept']} | {k['rows'] or '-'} | {' | '.join(cells)} |")
    lines += [
        "",
        "Whole programs, leave-one-model-out (the proxy never saw the model's programs); "
        "measured: the release build's count for sample 0; non-MAC share: the part of the "
        "count outside conv and linear nodes:",
        "",
        "| model | plan | nodes | non-MAC share | measured | predicted | error |"
        + (" given rv32's counts |" if "given_base_mape_pct" in r else ""),
        "|---|---|---:|---:|---:|---:|---:|" + ("---:|" if "given_base_mape_pct" in r else ""),
    ]
    for model, plans in r["per_model_leave_one_out"].items():
        for plan, e in plans.items():
            given = f" {e['given_base_error_pct']:.2f} % |" if "given_base_error_pct" in e else ""
            lines.append(
                f"| {model} | {plan} | {e['nodes']} | {e['non_mac_share_pct']:.1f} % | "
                f"{e['measured']:,.0f} | {e['predicted']:,.0f} | {e['error_pct']:.2f} % |" + given
            )
    present = [m for m in ALONE if m in r["per_model_leave_one_out"]]
    lines += [
        "",
        f"Mean whole-program error: **{r['model_mape_pct']:.2f} %** (max {r['model_max_pct']:.1f} "
        f"%) over every model"
        + (f" but {', '.join(present)}" if present else "")
        + (
            f", whose attention ops (matmul, softmax, layer norm) no other zoo model has: "
            f"{r['alone_mape_pct']:.1f} % on it."
            if r["alone_mape_pct"] is not None
            else "."
        ),
        "",
    ]
    if "given_base_mape_pct" in r:
        lines += [
            f"Given each node's measured {r['ratio_base']} count instead of the "
            f"{r['ratio_base']} proxy's (the program counted under qemu, seconds, where "
            f"{target} takes minutes), the predicted ratios alone are "
            f"**{r['given_base_mape_pct']:.2f} %** off (max {r['given_base_max_pct']:.1f} %): "
            f"the rest of the error is the {r['ratio_base']} proxy's.",
            "",
        ]
    return lines


def _order(target: str) -> int:
    known = ("bitfusion", "rv32", "rv32zbb", "host", "vexriscv")
    return known.index(target) if target in known else len(known)


def markdown(results: dict[str, Any]) -> str:
    lines = ["# Latency proxies against their targets", ""]
    if results.get("seconds"):
        lines += [f"Runtime: {results['seconds']:.0f} s.", ""]
    for target, r in results["targets"].items():
        if "records" in r:
            lines += program_markdown(target, r)
            continue
        lines += [
            f"## {target} ({r['unit']}; {r['profile_rows']} profiled layer x bit cases, "
            f"{r['seconds']} s)",
            "",
            "Features: the generic ones plus the cycle model's own terms (`ArrayCycles`: the "
            "array's compute cycles by its tiling, off-chip traffic cycles, one fill per "
            "weight pass), and the regressors predict log(cycles / compute cycles)."
            if r.get("feature_set") == "bitfusion"
            else "Features: the generic ones (MACs, BOPs-like terms, geometry, widths).",
            "",
            "Per layer kind, MAPE on held-out shapes:",
            "",
            "| kind | kept | random forest | XGBoost | linear |",
            "|---|---|---:|---:|---:|",
        ]
        for kind, k in r["per_kind_holdout"].items():
            cells = [
                "–" if f"{a}_mape" not in k else f"{k[f'{a}_mape']:.1f} %"
                for a in ("forest", "xgboost", "linear")
            ]
            lines.append(f"| {kind} | {k['kept']} | {' | '.join(cells)} |")
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
        worst = f" (max {r['model_max_pct']:.2f} %)" if "model_max_pct" in r else ""
        lines += ["", f"Mean whole-model error: **{r['model_mape_pct']:.2f} %**{worst}.", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--targets", default="bitfusion,rv32")
    parser.add_argument("--models", default="", help="program targets: zoo models (default all)")
    parser.add_argument("--plans", default=",".join(PROGRAM_PLANS), help="program targets")
    parser.add_argument(
        "--records",
        action="append",
        default=[],
        help="TARGET=FILE: a program target's models file (default: the cache's, for the "
        "current C kernels); missing (model, plan) records are measured into it",
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--jobs", type=int, default=1, help="programs measured at once")
    parser.add_argument(
        "--as-measured", action="store_true",
        help="program targets: the records as they were measured, none measured again (a "
        "later commit that changed a kernel file, say a comment, is listed in the results)",
    )  # fmt: skip
    parser.add_argument(
        "--replace", action="store_true",
        help="write only these targets (default: merge them into the results file's others)",
    )  # fmt: skip
    args = parser.parse_args()
    torch.set_num_threads(1)
    records = {k: Path(v) for k, v in (item.split("=", 1) for item in args.records)}
    results = run(args.samples, args.seed, args.targets.split(","), args.models,
                  tuple(args.plans.split(",")), records, args.jobs, args.as_measured)  # fmt: skip
    previous = args.out / "latency_proxy.json"
    if not args.replace and previous.is_file():  # keep the other targets' sections
        old = json.loads(previous.read_text())
        for target, new in results["targets"].items():
            # where records kept as measured came from (written by hand once) stays
            before = old.get("targets", {}).get(target, {})
            if new.get("as_measured") and before.get("measured_at"):
                new.setdefault("measured_at", before["measured_at"])
            if before.get("note") and before.get("commit") == new.get("commit"):
                new.setdefault("note", before["note"])
        merged = {**old.get("targets", {}), **results["targets"]}
        results["targets"] = {k: merged[k] for k in sorted(merged, key=_order)}
        results["seconds"] = None  # per target: each section says its own
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latency_proxy.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "latency_proxy.md").write_text(markdown(results))
    print(markdown(results))


if __name__ == "__main__":
    main()
