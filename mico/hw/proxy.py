"""Latency proxies: regressors fitted on a profile predict a layer's latency in microseconds.

One regressor per layer kind, trained on ``log(latency)`` (latencies span orders of magnitude
and errors are relative): a random forest and an XGBoost model are both fitted and the one with
the lower held-out error is kept. Features are the layer's MACs and BOPs-like terms, its
geometry and its widths. A proxy is saved as JSON (XGBoost's own format for the boosted trees;
a random forest is refitted from the saved training rows with its seed, so nothing is unpickled).

The error is reported honestly: MAPE on held-out shapes (shapes never seen in training, all
their bit pairs held out together) per kind, and on whole models against their measured sum.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mico.errors import ConfigError
from mico.hw.layers import LayerShape, storage_bits

FEATURES = (
    "log_macs", "log_bops", "log_params", "log_in", "log_out", "in_channels", "out_channels",
    "kernel", "stride", "groups_ratio", "w_bits", "a_bits", "wa_bricks", "log_macs_per_brick",
    "log_ic_per_group", "log_oc_per_group", "log_out_pixels", "log_reduction",
    "log_reduction_per_brick",
)  # fmt: skip
PROXY_VERSION = 1


def features(layer: LayerShape) -> list[float]:
    """The proxy's feature vector of one layer."""
    w, a = storage_bits(layer.w_bits), storage_bits(layer.a_bits)
    bricks = math.ceil(w / 2) * math.ceil(a / 2)
    reduction = layer.kernel[0] * layer.kernel[1] * layer.in_channels / layer.groups
    return [
        math.log1p(layer.macs),
        math.log1p(layer.macs * w * a),
        math.log1p(layer.params),
        math.log1p(layer.input_elements),
        math.log1p(layer.output_elements),
        float(layer.in_channels),
        float(layer.out_channels),
        float(layer.kernel[0] * layer.kernel[1]),
        float(layer.stride[0] * layer.stride[1]),
        layer.groups / max(1, layer.in_channels),
        float(w),
        float(a),
        float(bricks),
        math.log1p(layer.macs * bricks / 16),
        math.log(layer.in_channels / layer.groups),
        math.log(layer.out_channels / layer.groups),
        math.log(layer.out_size[0] * layer.out_size[1]),
        math.log(reduction),
        math.log(reduction * bricks / 16),
    ]


def mape(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """Mean absolute percentage error, in percent."""
    p, m = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    if len(m) == 0:
        return float("nan")
    return float(np.mean(np.abs(p - m) / np.maximum(np.abs(m), 1e-12)) * 100)


def _shape_key(layer: LayerShape) -> tuple:
    return (layer.kind, layer.in_channels, layer.out_channels, layer.kernel, layer.stride,
            layer.groups, layer.in_size, layer.out_size)  # fmt: skip


def _forest(seed: int) -> Any:
    from sklearn.ensemble import RandomForestRegressor

    return RandomForestRegressor(n_estimators=200, min_samples_leaf=1, random_state=seed, n_jobs=1)


def _booster(seed: int) -> Any:
    from xgboost import XGBRegressor

    return XGBRegressor(n_estimators=400, max_depth=6, learning_rate=0.05, subsample=0.9,
                        random_state=seed, n_jobs=1, verbosity=0)  # fmt: skip


@dataclass
class KindModel:
    """The regressor kept for one layer kind and how it did on held-out shapes."""

    kind: str
    algorithm: str  # "forest" or "xgboost"
    estimator: Any
    holdout_mape: dict[str, float]
    rows: list[tuple[list[float], float]] = field(default_factory=list)

    def predict(self, layers: Sequence[LayerShape]) -> np.ndarray:
        x = np.array([features(layer) for layer in layers], dtype=float)
        return np.exp(self.estimator.predict(x))


@dataclass
class LatencyProxy:
    """Per-kind regressors plus a per-model overhead; predicts a model's latency from layers."""

    target: str
    unit: str
    kinds: dict[str, KindModel]
    overhead: float = 0.0
    seed: int = 0

    def predict_layers(self, layers: Sequence[LayerShape]) -> list[float]:
        """Predicted latency of each layer (a kind the profile never saw is an error)."""
        out = [0.0] * len(layers)
        by_kind: dict[str, list[int]] = {}
        for i, layer in enumerate(layers):
            by_kind.setdefault(layer.kind, []).append(i)
        for kind, indices in by_kind.items():
            if kind not in self.kinds:
                from mico.hw.profile import OP_KINDS

                op = next((o for o, k in OP_KINDS.items() if k == kind), kind)
                raise ConfigError(
                    f"the {self.target} latency proxy has no model of '{kind}' layers; profile "
                    f"them: mico profile --target {self.target} --ops {op}"
                )
            predictions = self.kinds[kind].predict([layers[i] for i in indices])
            for i, value in zip(indices, predictions, strict=True):
                out[i] = float(value)
        return out

    def predict_model(self, layers: Sequence[LayerShape]) -> float:
        """Sum of the layer predictions plus the fitted per-model overhead."""
        return float(sum(self.predict_layers(layers)) + self.overhead)

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> Path:
        """Write the proxy as JSON (boosted trees in XGBoost's JSON, forests as their rows)."""
        data: dict[str, Any] = {
            "version": PROXY_VERSION, "target": self.target, "unit": self.unit,
            "overhead": self.overhead, "seed": self.seed, "kinds": {},
        }  # fmt: skip
        for kind, model in self.kinds.items():
            entry: dict[str, Any] = {
                "algorithm": model.algorithm,
                "holdout_mape": model.holdout_mape,
            }
            if model.algorithm == "xgboost":
                entry["booster"] = model.estimator.get_booster().save_raw("json").decode()
            else:
                entry["rows"] = [[x, y] for x, y in model.rows]
            data["kinds"][kind] = entry
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(out)
        return out

    @classmethod
    def load(cls, path: str | Path) -> LatencyProxy:
        """Read a proxy written by :meth:`save`."""
        p = Path(path)
        try:
            data = json.loads(p.read_text())
            if data.get("version") != PROXY_VERSION:
                raise ValueError(f"version {data.get('version')}")
            kinds = {}
            for kind, entry in data["kinds"].items():
                if entry["algorithm"] == "xgboost":
                    from xgboost import XGBRegressor

                    estimator = XGBRegressor()
                    estimator.load_model(bytearray(entry["booster"].encode()))
                    rows = []
                else:
                    rows = [(list(x), float(y)) for x, y in entry["rows"]]
                    estimator = _forest(int(data.get("seed", 0)))
                    estimator.fit(np.array([x for x, _ in rows]), np.array([y for _, y in rows]))
                kinds[kind] = KindModel(kind, entry["algorithm"], estimator,
                                        dict(entry["holdout_mape"]), rows)  # fmt: skip
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(
                f"latency proxy {str(p)!r} cannot be read ({type(exc).__name__}: {exc}); fit it "
                "again with mico profile"
            ) from None
        return cls(data["target"], data["unit"], kinds, float(data["overhead"]),
                   int(data.get("seed", 0)))  # fmt: skip


def fit_proxy(
    profile: Sequence[tuple[LayerShape, float]],
    target: str,
    unit: str,
    seed: int = 0,
    holdout: float = 0.2,
) -> LatencyProxy:
    """Fit one regressor per kind; held-out *shapes* (all their bit pairs) measure the error."""
    if not profile:
        raise ConfigError(f"the {target} profile is empty; run mico profile --target {target}")
    rng = np.random.default_rng(seed)
    by_kind: dict[str, list[tuple[LayerShape, float]]] = {}
    for layer, latency in profile:
        if latency > 0:
            by_kind.setdefault(layer.kind, []).append((layer, latency))
    kinds = {}
    for kind, rows in by_kind.items():
        shapes = sorted({_shape_key(layer) for layer, _ in rows})
        rng.shuffle(shapes)
        n_test = max(1, int(len(shapes) * holdout)) if len(shapes) >= 5 else 0
        test_keys = set(shapes[:n_test])
        train = [(layer, y) for layer, y in rows if _shape_key(layer) not in test_keys]
        test = [(layer, y) for layer, y in rows if _shape_key(layer) in test_keys]
        x_train = np.array([features(layer) for layer, _ in train], dtype=float)
        y_train = np.log(np.array([y for _, y in train], dtype=float))
        scores: dict[str, float] = {}
        fitted: dict[str, Any] = {}
        for algorithm, make in (("forest", _forest), ("xgboost", _booster)):
            estimator = make(seed)
            estimator.fit(x_train, y_train)
            fitted[algorithm] = estimator
            if test:
                x_test = np.array([features(layer) for layer, _ in test], dtype=float)
                predicted = np.exp(estimator.predict(x_test))
                scores[algorithm] = mape(predicted, [y for _, y in test])
        best = min(scores, key=scores.get) if scores else "xgboost"
        # refit the winner on every shape: the held-out score stays the reported error
        x_all = np.array([features(layer) for layer, _ in rows], dtype=float)
        y_all = np.log(np.array([y for _, y in rows], dtype=float))
        final = (_forest if best == "forest" else _booster)(seed)
        final.fit(x_all, y_all)
        kinds[kind] = KindModel(
            kind, best, final, scores,
            [(list(map(float, x)), float(y)) for x, y in zip(x_all, y_all, strict=True)],
        )  # fmt: skip
    return LatencyProxy(target, unit, kinds, 0.0, seed)


def fit_overhead(
    proxy: LatencyProxy, models: Sequence[tuple[Sequence[LayerShape], float]]
) -> float:
    """Set the proxy's per-model overhead: the median of measured minus summed predictions."""
    if not models:
        return proxy.overhead
    gaps = [measured - sum(proxy.predict_layers(layers)) for layers, measured in models]
    proxy.overhead = float(np.median(gaps))
    return proxy.overhead
