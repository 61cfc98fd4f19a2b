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
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mico.errors import ConfigError
from mico.hw.layers import LayerShape
from mico.hw.opshape import PATHS, OpShape, layers_as_ops, op_from_layer

#: features of conv and linear nodes (the target is log(latency / MACs))
FEATURES = (
    "log_macs", "log_bops", "log_params", "log_in", "log_out", "in_channels", "out_channels",
    "kernel", "stride", "groups_ratio", "w_bits", "a_bits", "wa_bricks", "log_macs_per_brick",
    "log_ic_per_group", "log_oc_per_group", "log_out_pixels", "log_reduction",
    "log_reduction_per_brick", "in_signed", "out_bits", "path", "lane_s", "log_lane_n",
    "log_out_per_lane_word",
)  # fmt: skip
#: features of the other nodes (quantize, pooling, add, ...; the target is log(latency / elements))
OP_FEATURES = (
    "log_in", "log_out", "in_bits", "out_bits", "in_signed", "n_inputs", "kernel", "stride",
    "log_in_per_out", "op_code", "log_macs",
)  # fmt: skip
#: the kind whose regressor predicts an op no regressor of its own was fitted for
OTHER = "other"
#: kinds that run the same C kernels share a regressor: a Conv1d is lowered to a conv2d node of
#: height 1 (fitted apart, conv1d's few shapes predicted it worse than the shared trees)
SHARED = {"conv1d": "conv2d"}
PROXY_VERSION = 2


def _as_op(item: LayerShape | OpShape, extensions: tuple[str, ...] = ()) -> OpShape:
    """A profile row's layer as an :class:`OpShape` (a layer measured alone reads signed
    inputs and leaves its output unrequantized) on a target of these ISA extensions."""
    if isinstance(item, OpShape):
        return item
    return op_from_layer(item, in_signed=True, extensions=tuple(extensions))


def path_code(path: str) -> float:
    """A kernel path as a feature: its index in :data:`PATHS`, or a stable code of its name
    for a path added since (every path the generator emits gets a code of its own)."""
    if path in PATHS:
        return float(PATHS.index(path))
    return float(100 + zlib.crc32(path.encode()) % 1009)


def features(item: LayerShape | OpShape, extensions: tuple[str, ...] = ()) -> list[float]:
    """The proxy's feature vector of one conv / linear node (or layer)."""
    op = _as_op(item, extensions)
    if not op.is_mac:
        return op_features(op)
    w, a = max(1, op.w_bits), max(1, op.in_bits)
    bricks = math.ceil(w / 2) * math.ceil(a / 2)
    k = op.kh * op.kw
    reduction = k * max(1, op.in_channels // max(1, op.groups))
    oc_per_group = max(1, op.out_channels // max(1, op.groups))
    words = oc_per_group / (32 / w) if op.lane_s else oc_per_group
    return [
        math.log1p(op.macs),
        math.log1p(op.macs * w * a),
        math.log1p(op.out_channels * reduction),
        math.log1p(op.in_elements),
        math.log1p(op.out_elements),
        float(op.in_channels),
        float(op.out_channels),
        float(k),
        float(op.sh * op.sw),
        op.groups / max(1, op.in_channels),
        float(w),
        float(a),
        float(bricks),
        math.log1p(op.macs * bricks / 16),
        math.log(max(1, op.in_channels // max(1, op.groups))),
        math.log(oc_per_group),
        math.log(max(1, op.out_pixels)),
        math.log(reduction),
        math.log(reduction * bricks / 16),
        float(op.in_signed),
        float(op.out_bits),
        path_code(op.path),
        float(op.lane_s),
        math.log1p(op.lane_n),
        math.log(max(1.0, words)),
    ]


def op_features(op: OpShape) -> list[float]:
    """The feature vector of a node that is not a conv / linear layer."""
    return [
        math.log1p(op.in_elements),
        math.log1p(op.out_elements),
        float(op.in_bits),
        float(op.out_bits),
        float(op.in_signed),
        float(op.n_inputs),
        float(op.kh * op.kw),
        float(op.sh * op.sw),
        math.log((1 + op.in_elements) / (1 + op.out_elements)),
        float(zlib.crc32(op.kind.encode()) % 1009),  # a stable code of the op, for the fallback
        math.log1p(op.macs),
    ]


def _vector(op: OpShape) -> list[float]:
    return features(op) if op.is_mac else op_features(op)


def mape(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """Mean absolute percentage error, in percent."""
    p, m = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    if len(m) == 0:
        return float("nan")
    return float(np.mean(np.abs(p - m) / np.maximum(np.abs(m), 1e-12)) * 100)


def _shape_key(op: OpShape) -> tuple:
    """A node's geometry without its widths: every bit pair of one shape is held out together."""
    return (op.kind, op.in_elements, op.out_elements, op.n_inputs, op.in_channels,
            op.out_channels, op.kh, op.kw, op.sh, op.sw, op.groups, op.out_pixels)  # fmt: skip


def _forest(seed: int) -> Any:
    from sklearn.ensemble import RandomForestRegressor

    return RandomForestRegressor(n_estimators=200, min_samples_leaf=1, random_state=seed, n_jobs=1)


def _booster(seed: int) -> Any:
    from xgboost import XGBRegressor

    return XGBRegressor(n_estimators=400, max_depth=6, learning_rate=0.05, subsample=0.9,
                        random_state=seed, n_jobs=1, verbosity=0)  # fmt: skip


class _Linear:
    """Least squares on the features (ridge-damped): a third candidate, for kinds with few
    shapes, where a line extrapolates better than the trees' nearest leaf."""

    def __init__(self, seed: int = 0, coef: Sequence[float] = (), intercept: float = 0.0) -> None:
        self.coef = np.asarray(coef, dtype=float)
        self.intercept = float(intercept)

    def fit(self, x: np.ndarray, y: np.ndarray) -> _Linear:
        from sklearn.linear_model import Ridge

        model = Ridge(alpha=1.0).fit(x, y)
        self.coef, self.intercept = np.asarray(model.coef_, dtype=float), float(model.intercept_)
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x, dtype=float) @ self.coef + self.intercept


ALGORITHMS = {"forest": _forest, "xgboost": _booster, "linear": _Linear}


@dataclass
class KindModel:
    """The regressor kept for one op kind and how it did on held-out shapes.

    It predicts ``log(latency / scale)``, ``scale`` being the node's MACs (conv, linear) or
    elements (other ops): a cost per MAC or per element stays in a narrow range, so the trees
    carry it to layers larger or smaller than any they saw, where a tree on the latency itself
    can only repeat the nearest leaf's.
    """

    kind: str
    algorithm: str  # "forest", "xgboost" or "linear"
    estimator: Any
    holdout_mape: dict[str, float]
    rows: list[tuple[list[float], float]] = field(default_factory=list)

    def predict(
        self, items: Sequence[LayerShape | OpShape], extensions: tuple[str, ...] = ()
    ) -> np.ndarray:
        ops = [_as_op(item, extensions) for item in items]
        x = np.array([_vector(op) for op in ops], dtype=float)
        scale = np.array([op.scale for op in ops], dtype=float)
        return np.exp(self.estimator.predict(x)) * scale


_LOADED: dict[tuple[str, int, int], LatencyProxy] = {}


@dataclass
class LatencyProxy:
    """Per-kind regressors plus a per-model overhead; predicts a model's latency from its
    nodes (:func:`mico.hw.opshape.graph_op_shapes`) or, short of a graph, its layers."""

    target: str
    unit: str
    kinds: dict[str, KindModel]
    overhead: float = 0.0
    seed: int = 0
    #: per node of the program: what the per-node counts hold that the release build does not
    #: (the markers' calls, negative) and what no node holds (the input check, the call)
    overhead_per_node: float = 0.0
    #: how many whole programs it was fitted on (0: layers alone, it knows no other nodes)
    programs: int = 0
    #: the target's ISA extensions: the kernel paths of layers and graphs are the ones the
    #: generator emits for them (binary layers: cpop with Zbb, SWAR without)
    extensions: tuple[str, ...] = ()
    #: the generator and kernel files it was fitted with (:meth:`current` compares them)
    fitted_with: dict[str, Any] = field(default_factory=dict)

    def current(self) -> bool:
        """Whether mico still generates programs with the code this proxy was fitted on (the
        same generator and C kernels); if not, its figures describe older programs."""
        from mico.hw.keys import generator_hash, kernel_hashes

        if not self.fitted_with:
            return False
        return self.fitted_with == {"generator": generator_hash(), "kernels": kernel_hashes()}

    def predict_ops(self, ops: Sequence[OpShape]) -> list[float]:
        """Predicted latency of each node (a view such as a reshape costs nothing; an op with
        no regressor of its own takes the fallback one; a conv / linear kind the profile never
        saw is an error)."""
        out = [0.0] * len(ops)
        by_kind: dict[str, list[int]] = {}
        for i, op in enumerate(ops):
            if op.path == "alias":
                continue
            kind = op.kind
            if kind not in self.kinds and SHARED.get(kind) in self.kinds:
                kind = SHARED[kind]
            if kind not in self.kinds and not op.is_mac and OTHER in self.kinds:
                kind = OTHER
            by_kind.setdefault(kind, []).append(i)
        for kind, indices in by_kind.items():
            if kind not in self.kinds:
                from mico.hw.profile import OP_KINDS

                op_name = next((o for o, k in OP_KINDS.items() if k == kind), kind)
                raise ConfigError(
                    f"the {self.target} latency proxy has no model of '{kind}' layers; profile "
                    f"them: mico profile --target {self.target} --ops {op_name}"
                )
            predictions = self.kinds[kind].predict([ops[i] for i in indices], self.extensions)
            for i, value in zip(indices, predictions, strict=True):
                out[i] = float(value)
        return out

    def predict_layers(self, layers: Sequence[LayerShape]) -> list[float]:
        """Predicted latency of each conv / linear layer of a model (in execution order: the
        first is taken to read signed codes, the others unsigned ones; see
        :func:`mico.hw.opshape.layers_as_ops`)."""
        return self.predict_ops(layers_as_ops(list(layers), self.extensions))

    def model_overhead(self, nodes: int) -> float:
        """The fitted per-model overhead of a program of ``nodes`` counted nodes."""
        return self.overhead + self.overhead_per_node * nodes

    def predict_model(self, layers: Sequence[LayerShape | OpShape]) -> float:
        """Sum of the predictions plus the fitted per-model overhead. Given a graph's nodes
        (:class:`OpShape`) that is the whole program; given layers, only its conv / linear
        layers (no pooling, adds or input quantization)."""
        items = list(layers)
        if items and all(isinstance(i, OpShape) for i in items):  # a program's nodes
            ops = [i for i in items if isinstance(i, OpShape)]
            counted = sum(op.path != "alias" for op in ops)
            return float(sum(self.predict_ops(ops)) + self.model_overhead(counted))
        layer_list = [i for i in items if isinstance(i, LayerShape)]
        return float(sum(self.predict_layers(layer_list)) + self.overhead)

    def predict_graph(self, graph: Any) -> float:
        """The whole program of a lowered graph: every node plus the per-model overhead."""
        from mico.hw.opshape import graph_op_shapes

        return self.predict_model(graph_op_shapes(graph, self.extensions))

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> Path:
        """Write the proxy as JSON (boosted trees in XGBoost's JSON, forests as their rows)."""
        data: dict[str, Any] = {
            "version": PROXY_VERSION, "target": self.target, "unit": self.unit,
            "overhead": self.overhead, "overhead_per_node": self.overhead_per_node,
            "programs": self.programs, "seed": self.seed, "kinds": {},
            "extensions": list(self.extensions), "fitted_with": self.fitted_with,
        }  # fmt: skip
        for kind, model in self.kinds.items():
            entry: dict[str, Any] = {
                "algorithm": model.algorithm,
                "holdout_mape": model.holdout_mape,
            }
            if model.algorithm == "xgboost":
                entry["booster"] = model.estimator.get_booster().save_raw("json").decode()
            elif model.algorithm == "linear":
                entry["coef"] = list(map(float, model.estimator.coef))
                entry["intercept"] = model.estimator.intercept
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
        """Read a proxy written by :meth:`save` (remembered per file version: a forest is
        refitted on load, which a search asking for every scheme must not repeat)."""
        p = Path(path)
        try:
            stat = p.stat()
            key = (str(p.resolve()), stat.st_mtime_ns, stat.st_size)
        except OSError:
            key = None
        if key is not None and key in _LOADED:
            return _LOADED[key]
        proxy = cls._read(p)
        if key is not None:
            if len(_LOADED) >= 8:  # a few targets' proxies at a time; keep memory flat
                _LOADED.clear()
            _LOADED[key] = proxy
        return proxy

    @classmethod
    def _read(cls, p: Path) -> LatencyProxy:
        try:
            data = json.loads(p.read_text())
            if data.get("version") != PROXY_VERSION:
                raise ValueError(f"version {data.get('version')}, this mico reads {PROXY_VERSION}")
            kinds = {}
            for kind, entry in data["kinds"].items():
                if entry["algorithm"] == "xgboost":
                    from xgboost import XGBRegressor

                    estimator = XGBRegressor()
                    estimator.load_model(bytearray(entry["booster"].encode()))
                    rows = []
                elif entry["algorithm"] == "linear":
                    estimator = _Linear(0, entry["coef"], entry["intercept"])
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
                   int(data.get("seed", 0)), float(data.get("overhead_per_node", 0.0)),
                   int(data.get("programs", 0)),
                   tuple(data.get("extensions", ())),
                   dict(data.get("fitted_with", {})))  # fmt: skip


def _fit_kind(
    kind: str, rows: Sequence[tuple[OpShape, float]], seed: int, holdout: float,
    rng: np.random.Generator,
) -> KindModel:  # fmt: skip
    """A forest and a boosted model on one kind's rows; the one better on held-out shapes."""
    shapes = sorted({_shape_key(op) for op, _ in rows}, key=repr)
    rng.shuffle(shapes)
    n_test = max(1, int(len(shapes) * holdout)) if len(shapes) >= 5 else 0
    test_keys = set(shapes[:n_test])
    train = [(op, y) for op, y in rows if _shape_key(op) not in test_keys]
    test = [(op, y) for op, y in rows if _shape_key(op) in test_keys]

    def xy(part: Sequence[tuple[OpShape, float]]) -> tuple[np.ndarray, np.ndarray]:
        x = np.array([_vector(op) for op, _ in part], dtype=float)
        y = np.log(np.array([v / op.scale for op, v in part], dtype=float))
        return x, y

    x_train, y_train = xy(train)
    scores: dict[str, float] = {}
    if test:
        x_test, _ = xy(test)
        scale = np.array([op.scale for op, _ in test])
        for algorithm, make in ALGORITHMS.items():
            estimator = make(seed)
            estimator.fit(x_train, y_train)
            predicted = np.exp(estimator.predict(x_test)) * scale
            scores[algorithm] = mape(predicted, [y for _, y in test])
    best = min(scores, key=scores.get) if scores else "forest"  # type: ignore[arg-type]
    # refit the winner on every shape: the held-out score stays the reported error
    x_all, y_all = xy(rows)
    final = ALGORITHMS[best](seed)
    final.fit(x_all, y_all)
    return KindModel(
        kind, best, final, scores,
        [(list(map(float, x)), float(y)) for x, y in zip(x_all, y_all, strict=True)],
    )  # fmt: skip


def target_extensions(target: str) -> tuple[str, ...]:
    """The ISA extensions ``target``'s programs are generated with
    (:func:`mico.hw.measure.generation_extensions`; none for a name without a target file)."""
    from mico.errors import MicoError
    from mico.hw.measure import generation_extensions

    try:
        return generation_extensions(target)
    except MicoError:
        return ()


def fit_proxy(
    profile: Sequence[tuple[LayerShape | OpShape, float]],
    target: str,
    unit: str,
    seed: int = 0,
    holdout: float = 0.2,
    models: Sequence[Any] = (),
    extensions: Sequence[str] | None = None,
) -> LatencyProxy:
    """Fit one regressor per kind; held-out *shapes* (all their bit pairs) measure the error.

    ``profile``: layers measured alone (:class:`LayerShape`, read as a single-layer program
    reads them) or nodes (:class:`OpShape`) with their latency. ``models``: whole programs
    measured node by node (:class:`mico.hw.modelprof.ModelRecord`): their nodes join the
    rows, the other ops get regressors of their own (and a fallback, ``other``, for ops never
    seen), and the per-model overhead is fitted on them (:func:`fit_model_overhead`).
    ``extensions``: the target's ISA extensions (None: its target file's, none if it has
    no file), which decide some layers' kernel paths.
    """
    exts = target_extensions(target) if extensions is None else tuple(extensions)
    rows: list[tuple[OpShape, float]] = [(_as_op(item, exts), float(y)) for item, y in profile]
    for record in models:
        rows += [(op, float(v)) for op, v in record.nodes if op.path != "alias"]
    rows = [(op, y) for op, y in rows if y > 0]
    if not rows:
        raise ConfigError(f"the {target} profile is empty; run mico profile --target {target}")
    rng = np.random.default_rng(seed)
    by_kind: dict[str, list[tuple[OpShape, float]]] = {}
    for op, latency in rows:
        by_kind.setdefault(SHARED.get(op.kind, op.kind), []).append((op, latency))
    others = [(op, y) for op, y in rows if not op.is_mac]
    if others:
        by_kind[OTHER] = others
    kinds = {kind: _fit_kind(kind, part, seed, holdout, rng) for kind, part in by_kind.items()}
    from mico.hw.keys import generator_hash, kernel_hashes

    fitted_with = {"generator": generator_hash(), "kernels": kernel_hashes()}
    proxy = LatencyProxy(target, unit, kinds, 0.0, seed, programs=len(models), extensions=exts,
                         fitted_with=fitted_with)  # fmt: skip
    if models:
        fit_model_overhead(proxy, models)
    return proxy


def fit_model_overhead(proxy: LatencyProxy, models: Sequence[Any]) -> tuple[float, float]:
    """Fit ``overhead + overhead_per_node * nodes`` to the release counts of measured programs
    minus the sum of their measured nodes (least squares; the markers make it negative)."""
    n = np.array([sum(op.path != "alias" for op, _ in r.nodes) for r in models], dtype=float)
    gap = np.array([r.release - sum(v for _, v in r.nodes) for r in models], dtype=float)
    # programs whose counted nodes do not add up to the release count (code outside any node,
    # such as a generator's loop) say nothing of the markers: leave them out of the fit
    sound = np.abs(gap) <= 32 * n + 1000  # the markers' glue is under 32 per node
    if sound.any():
        n, gap = n[sound], gap[sound]
    if len(n) >= 2 and np.ptp(n) > 0:
        per_node, constant = np.polyfit(n, gap, 1)
    else:
        per_node, constant = 0.0, float(np.median(gap)) if len(gap) else 0.0
    proxy.overhead, proxy.overhead_per_node = float(constant), float(per_node)
    return proxy.overhead, proxy.overhead_per_node


def fit_overhead(
    proxy: LatencyProxy, models: Sequence[tuple[Sequence[LayerShape], float]]
) -> float:
    """Set the proxy's per-model overhead: the median of measured minus summed predictions."""
    if not models:
        return proxy.overhead
    gaps = [measured - sum(proxy.predict_layers(layers)) for layers, measured in models]
    proxy.overhead = float(np.median(gaps))
    return proxy.overhead
