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
from mico.hw.opshape import MAC_KINDS, PATHS, OpShape, layers_as_ops, op_from_layer

#: features of conv and linear nodes (the target is log(latency / MACs))
FEATURES = (
    "log_macs", "log_bops", "log_params", "log_in", "log_out", "in_channels", "out_channels",
    "kernel", "stride", "groups_ratio", "w_bits", "a_bits", "wa_bricks", "log_macs_per_brick",
    "log_ic_per_group", "log_oc_per_group", "log_out_pixels", "log_reduction",
    "log_reduction_per_brick", "in_signed", "out_bits", "path", "lane_s", "log_lane_n",
    "log_out_per_lane_word", "log_in_plane", "one_d", "row_align", "path_popcount",
    "path_k_lanes", "path_table", "log_valid_share", "log_lane_fill", "input_row_align",
)  # fmt: skip
#: features of the other nodes (quantize, pooling, add, ...; the target is log(latency / elements))
OP_FEATURES = (
    "log_in", "log_out", "in_bits", "out_bits", "in_signed", "n_inputs", "kernel", "stride",
    "log_in_per_out", "op_code", "log_macs",
)  # fmt: skip
#: features an analytic accelerator target adds (its own cost terms, :func:`array_terms`)
ARRAY_FEATURES = (
    "log_compute_per_mac", "log_im2col_over_compute", "log_memory_over_compute",
    "log_fill_over_compute", "log_weight_passes", "log_memory_and_fill_over_compute",
    "log_compute", "log_memory",
)  # fmt: skip
#: feature sets: ``generic`` for targets that run C, ``bitfusion`` adds :data:`ARRAY_FEATURES`
FEATURE_SETS = ("generic", "bitfusion")
#: kinds of fewer shapes are scored on every held-out fold, larger ones on one
FOLDED_UNDER = 60
#: a program proxy's algorithms are chosen on its nodes held out by model, in this many folds
#: of the models (from as many models on; fewer: by shape)
MODEL_FOLDS = 5
#: the kind whose regressor predicts an op no regressor of its own was fitted for
OTHER = "other"
#: kinds that run the same C kernels share a regressor while they have few shapes: a Conv1d is
#: lowered to a conv2d node of height 1 (fitted apart, the zoo's few 1-D shapes predicted it
#: worse than the shared trees)
SHARED = {"conv1d": "conv2d"}
#: ... and from this many shapes (a profile's sampled 1-D layers) a regressor of their own,
#: fitted on their rows and the shared kind's, while the shared kind's is fitted on its own
#: rows alone: the 1-D rows' long rows and fallback paths pulled the 2-D predictions off,
#: and the 1-D layers alone were too few to predict a model of them
OWN_REGRESSOR_SHAPES = 20
#: 3: the 1-D features, the BitFusion feature set, ratio proxies; 4: the weight rows'
#: alignment and the kernel path's traits (depthwise pair forms, popcount); 5: the share of MACs
#: inside the input (padding) and the per-path cost candidates; 6: the channels' fill of lane
#: words and pairs (:func:`lane_fill`: the path costs' MAC terms count what the kernel runs),
#: the input rows' alignment (:func:`input_row_alignment`), the padding exact on every plane
PROXY_VERSION = 6


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


def path_traits(path: str) -> tuple[float, float, float]:
    """What a kernel path label says of its inner loop, as features a line can use (a path's
    own code, :func:`path_code`, only trees can split on): a popcount of bits (the binary
    kernels, the depthwise bit-sliced path), words of K lanes (1) or of 5 lanes (2) of the
    depthwise pair path, outputs by thresholds (1) or by table (2) of its forms
    (:func:`mico.hw.opshape.dwp_path`)."""
    popcount = float(path.startswith("bin_") or path == "dwbs")
    lanes = 2.0 if path.startswith("dwp_k5") else 1.0 if path.startswith("dwp_k") else 0.0
    table = 2.0 if path.endswith("_tab") else 1.0 if path.endswith("_thr") else 0.0
    return popcount, lanes, table


def row_alignment(op: OpShape) -> float:
    """How a weight row of ``op`` is aligned, as the power of two dividing its bits (0 to 5:
    a row of 561 4-bit weights starts inside a byte, 1 to 2 bits off, which the sub-byte
    kernels unpack slowly; 5: rows of whole words)."""
    row_bits = max(1, op.w_bits) * op.kh * op.kw * max(1, op.in_channels // max(1, op.groups))
    return float(min(5, (row_bits & -row_bits).bit_length() - 1))


def _valid_taps(size_in: int, size_out: int, kernel: int, stride: int, pad: int | None = None,
                dilation: int = 1) -> int:  # fmt: skip
    """How many of the ``size_out * kernel`` taps of one axis fall inside the input: tap ``t``
    of output ``o`` reads ``o * stride - pad + t * dilation``. ``pad`` None: the padding as the
    generator splits an unknown one (the extra pad at the end)."""
    if pad is None:
        pad = max(0, ((size_out - 1) * stride + kernel - size_in + 1) // 2)
    total = 0
    for o in range(size_out):
        start = o * stride - pad
        total += sum(0 <= start + t * dilation < size_in for t in range(kernel))
    return total


def _square(n: int) -> int:
    root = math.isqrt(max(0, n))
    return root if root * root == n else 0


def _guessed_axes(op: OpShape) -> list[tuple[int, int, int, int, int | None, int]]:
    """The axes of a conv node that does not record its planes (a record of mico before
    :attr:`OpShape.planes`): a 1-D row is exact, a 2-D plane is taken as square, and one that is
    not square gives no axes (every tap counted)."""
    plane = op.in_elements // max(1, op.in_channels)
    if op.kh == 1 and op.sh == 1 and op.kind == "conv1d":
        return [(plane, op.out_pixels, op.kw, op.sw, None, 1)]
    side_in, side_out = _square(plane), _square(op.out_pixels)
    if not side_in or not side_out:
        return []
    return [(side_in, side_out, op.kh, op.sh, None, 1), (side_in, side_out, op.kw, op.sw, None, 1)]


def valid_share(op: OpShape) -> float:
    """The share of a conv node's MACs whose taps fall inside its input (the kernels skip the
    padding's): a 3x3 layer on a 4x4 plane does 100 of its 144 taps per channel pair. Exact
    for a node that records its planes' sides, padding and dilation (:attr:`OpShape.planes`:
    every conv node of this mico, a 25x5 plane as well as a square one); a record without them
    is guessed (:func:`_guessed_axes`). Linear and 1x1 nodes: 1.0."""
    if op.kind == "linear" or op.in_channels <= 0 or op.kh * op.kw == 1:
        return 1.0
    if op.planes:
        axes = [(op.in_h, op.out_h, op.kh, op.sh, op.pad_h, op.dil_h),
                (op.in_w, op.out_w, op.kw, op.sw, op.pad_w, op.dil_w)]  # fmt: skip
    else:
        axes = _guessed_axes(op)
    share = 1.0
    for size_in, size_out, kernel, stride, pad, dilation in axes:
        taps = _valid_taps(size_in, size_out, kernel, stride, pad, dilation)
        share *= taps / max(1, size_out * kernel)
    return max(share, 1e-3)


def input_row_alignment(op: OpShape) -> float:
    """How a row of ``op``'s input is aligned, as the power of two dividing its bits (0 to 5;
    -1 when the node does not record its planes): the kernels unpack a conv's input a row span
    at a time, and a row of 49 2-bit codes (98 bits) starts off a byte boundary every other row,
    which costs more than rows of whole bytes (40 codes: 80 bits). A linear node's row is its
    input features."""
    if op.kind == "linear":
        width = op.in_channels
    elif op.planes:
        width = op.in_w
    else:
        return -1.0
    row_bits = max(1, width * max(1, op.in_bits))
    return float(min(5, (row_bits & -row_bits).bit_length() - 1))


#: kernel paths that run a conv's output channels in pairs (``mico_conv_chunk``: an odd one
#: out is computed twice)
PAIRED_PATHS = ("tiled", "tiled_sub")


def lane_fill(op: OpShape) -> float:
    """The share of the products a kernel runs that are a node's own (1.0 on every other path):
    the ``lanes`` kernels (``mico_conv_lanes``, ``mico_qlinear_lanes``) put F = 32 / w_bits
    output channels of a group in a weight word and run every lane of a block, so a group of 24
    channels on 2-bit weights (F = 16) runs two blocks of 16 lanes for 24 channels' products:
    0.75, its MACs costing as 32 channels' would; the im2col paths (:data:`PAIRED_PATHS`) run
    channels in pairs, an odd one out twice (5 channels: 5 / 6)."""
    per_group = max(1, op.out_channels // max(1, op.groups))
    if op.path in PAIRED_PATHS:
        per_word = 2
    elif op.path == "lanes" and 0 < op.w_bits <= 16:
        per_word = 32 // op.w_bits
    else:
        return 1.0
    return per_group / (math.ceil(per_group / per_word) * per_word)


def feature_set_of(target: str) -> str:
    """The feature set of ``target``'s proxy: ``bitfusion`` for the BitFusion cycle model
    (the built-in target and every ``analytic-bitfusion`` target file), else ``generic``."""
    from mico.errors import MicoError
    from mico.hw.measure import latency_kind

    try:
        kind = latency_kind(target)
    except MicoError:
        kind = target
    return "bitfusion" if kind == "bitfusion" else "generic"


@dataclass(frozen=True)
class ArrayCycles:
    """BitFusion's cost terms of one conv / linear node (:mod:`mico.hw.bitfusion`, default
    configuration), from the node's geometry and widths alone.

    * ``compute``: the array's tiles (``ceil(oc_g / cols)`` column tiles x output pixels x
      groups) times the cycles of one tile, the cheaper of channel-wise
      (``kh*kw*ceil(ic_g / (rows*perf))``) and one im2col reduction
      (``ceil(kh*kw*ic_g / (rows*perf))``, kept as ``im2col``), ``perf`` the fused engines per
      Fusion Unit at these widths (:meth:`~mico.hw.bitfusion.BitFusionConfig.perf`);
    * ``memory``: off-chip bits (weights, inputs once per weight pass when they overflow the
      input buffer, outputs at 8 bits) over the interface width, in cycles;
    * ``fill``: one array fill (rows + cols cycles) per weight pass (``passes``), the fixed
      cost that dominates tiny layers.
    """

    compute: int
    im2col: int
    memory: int
    fill: int
    passes: int

    @classmethod
    def of(cls, op: OpShape) -> ArrayCycles:
        from mico.hw.bitfusion import BitFusionConfig

        cfg = BitFusionConfig()
        w = min(max(1, op.w_bits), cfg.max_bits)
        a = min(max(1, op.in_bits), cfg.max_bits)
        groups = max(1, op.groups)
        ic_g = max(1, op.in_channels // groups)
        oc_g = max(1, op.out_channels // groups)
        lanes = cfg.rows * cfg.perf(w, a)
        k = op.kh * op.kw
        tiles = groups * math.ceil(oc_g / cfg.cols) * max(1, op.out_pixels)
        channelwise = tiles * k * math.ceil(ic_g / lanes)
        im2col = tiles * math.ceil(k * ic_g / lanes)
        weight_bits = op.out_channels * ic_g * k * w
        input_bits = op.in_elements * a
        passes = max(1, math.ceil(weight_bits / (8 * cfg.weight_buffer_bytes)))
        reads = 1 if input_bits <= 8 * cfg.input_buffer_bytes else passes
        traffic = weight_bits + reads * input_bits + op.out_elements * cfg.out_bits
        memory = math.ceil(traffic / cfg.interface_bits)
        fill = passes * (cfg.rows + cfg.cols)
        return cls(min(channelwise, im2col), im2col, memory, fill, passes)


def array_terms(op: OpShape) -> list[float]:
    """:class:`ArrayCycles` as the regressors see them (:data:`ARRAY_FEATURES`): each term
    relative to the compute cycles (the target of this feature set is log cycles over compute
    cycles, see :func:`scale_of`), the compute / memory balance and the sizes as logs."""
    cycles = ArrayCycles.of(op)
    compute = max(1, cycles.compute)
    macs = max(1, op.macs)
    return [
        math.log(compute / macs),
        math.log(max(1, cycles.im2col) / compute),
        math.log(max(1, cycles.memory) / compute),
        math.log(cycles.fill / compute),
        math.log(cycles.passes),
        math.log(max(1, cycles.memory + cycles.fill) / compute),
        math.log1p(cycles.compute),
        math.log1p(cycles.memory),
    ]


def scale_of(op: OpShape, feature_set: str = "generic") -> float:
    """What a node's latency is divided by before the log (the regressors predict the ratio):
    its MACs or elements (:attr:`OpShape.scale`: a cost per MAC stays in a narrow range), or,
    with the ``bitfusion`` feature set, a conv / linear node's compute cycles on the array
    (:class:`ArrayCycles`): what is left to learn is how far memory and the array's fill
    push a layer above its compute."""
    if feature_set == "bitfusion" and op.is_mac:
        return float(max(1, ArrayCycles.of(op).compute))
    return op.scale


def features(
    item: LayerShape | OpShape, extensions: tuple[str, ...] = (), feature_set: str = "generic"
) -> list[float]:
    """The proxy's feature vector of one conv / linear node (or layer): :data:`FEATURES`, then
    :data:`ARRAY_FEATURES` with the ``bitfusion`` feature set."""
    op = _as_op(item, extensions)
    if not op.is_mac:
        return op_features(op)
    extra = array_terms(op) if feature_set == "bitfusion" else []
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
        math.log(max(1.0, op.in_elements / max(1, op.in_channels))),
        float(op.kind == "conv1d"),
        row_alignment(op),
        *path_traits(op.path),
        math.log(valid_share(op)),
        math.log(lane_fill(op)),
        input_row_alignment(op),
        *extra,
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


def _vector(op: OpShape, feature_set: str = "generic") -> list[float]:
    return features(op, feature_set=feature_set) if op.is_mac else op_features(op)


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


class _Groups:
    """The mean target of a node's group, each group shrunk toward its parent: the kernel path,
    then the lane width, then 1-D or not, then the widths (conv / linear nodes); the op, then
    its input and output widths (other nodes). A group of ``n`` rows of mean ``m`` under a
    parent estimate ``p`` is ``(n m + prior p) / (n + prior)``; a group no row had keeps its
    parent's estimate.

    Built for the ratio proxy's cycles per instruction (:func:`fit_ratio_proxy`), a property of
    the kernel code a node runs: a tree on the size features carried the ratio of one model's
    layers to another's of another path (a left-out model's 2-D lanes layers took the 1-D
    lanes' 2.2 instead of their own 1.5), where a mean per path cannot leave the range its
    path was measured in."""

    def __init__(self, seed: int = 0, levels: Sequence[Sequence[int]] = (),
                 table: dict[tuple[float, ...], tuple[float, int]] | None = None,
                 prior: float = 1.0) -> None:  # fmt: skip
        self.levels = [list(level) for level in levels]
        self.table = dict(table or {})
        self.prior = float(prior)

    @staticmethod
    def levels_of(width: int) -> list[list[int]]:
        """The nested groups (column indices) of a feature vector this wide."""
        if width >= len(FEATURES):
            col = {name: i for i, name in enumerate(FEATURES)}
            order = [["path"], ["lane_s"], ["one_d"], ["w_bits", "a_bits"]]
        else:
            col = {name: i for i, name in enumerate(OP_FEATURES)}
            order = [["op_code"], ["in_bits"], ["out_bits"]]
        levels: list[list[int]] = [[]]
        for names in order:
            levels.append(levels[-1] + [col[n] for n in names])
        return levels

    def fit(self, x: np.ndarray, y: np.ndarray) -> _Groups:
        x = np.asarray(x, dtype=float)
        self.levels = self.levels_of(x.shape[1])
        sums: dict[tuple[float, ...], list[float]] = {}
        for row, target in zip(x, np.asarray(y, dtype=float), strict=True):
            for level in self.levels:
                entry = sums.setdefault(tuple(float(row[i]) for i in level), [0.0, 0])
                entry[0] += float(target)
                entry[1] += 1
        self.table = {key: (total / n, int(n)) for key, (total, n) in sums.items()}
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        out = []
        for row in np.asarray(x, dtype=float):
            estimate = 0.0
            for depth, level in enumerate(self.levels):
                found = self.table.get(tuple(float(row[i]) for i in level))
                if found is None:
                    break
                mean, n = found
                estimate = (
                    mean if depth == 0 else (n * mean + self.prior * estimate) / (n + self.prior)
                )
            out.append(estimate)
        return np.asarray(out, dtype=float)


class _GroupedForest:
    """A random forest on what the node's group mean (:class:`_Groups`: its kernel path, lane
    width, 1-D or not, widths) leaves: the mean carries a path's cost per MAC to layers of
    sizes its rows lack, where a forest on the ratio itself takes the nearest leaf's, often of
    another path; the forest adds what the geometry changes around that mean."""

    def __init__(self, seed: int = 0) -> None:
        self.groups = _Groups(seed)
        self.forest = _forest(seed)

    def fit(self, x: np.ndarray, y: np.ndarray) -> _GroupedForest:
        self.groups.fit(x, y)
        self.forest.fit(x, np.asarray(y, dtype=float) - self.groups.predict(x))
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.groups.predict(x) + self.forest.predict(x)


def cost_terms(x: np.ndarray) -> np.ndarray:
    """The counts a kernel's instructions add up from, per row of feature vectors (conv /
    linear: :data:`FEATURES`; other ops: :data:`OP_FEATURES`), recovered from the features'
    logs: conv / linear ``[MACs inside the input, MACs, requantized outputs, int32 outputs,
    output pixels, inputs, output channels, 1]`` (the inner loop over the taps it runs and the
    padding's it skips, the requantize and store of each output or its plain store, the loop
    over pixels or rows, the input's unpacking, the per-channel setup, the call); the MACs are
    the products the kernel runs, whole lane words on the channel lanes (:func:`lane_fill`);
    other ops ``[inputs, outputs, 1]``."""
    x = np.asarray(x, dtype=float)
    if x.shape[1] >= len(FEATURES):
        col = {name: i for i, name in enumerate(FEATURES)}
        macs = np.expm1(x[:, col["log_macs"]]) / np.exp(x[:, col["log_lane_fill"]])
        outputs = np.expm1(x[:, col["log_out"]])
        raw = x[:, col["out_bits"]] >= 32
        return np.column_stack([
            macs * np.exp(x[:, col["log_valid_share"]]),
            macs,
            np.where(raw, 0.0, outputs),
            np.where(raw, outputs, 0.0),
            np.exp(x[:, col["log_out_pixels"]]),
            np.expm1(x[:, col["log_in"]]),
            x[:, col["out_channels"]],
            np.ones(len(x)),
        ])  # fmt: skip
    col = {name: i for i, name in enumerate(OP_FEATURES)}
    return np.column_stack([np.expm1(x[:, col["log_in"]]), np.expm1(x[:, col["log_out"]]),
                            np.ones(len(x))])  # fmt: skip


def _row_scale(x: np.ndarray) -> np.ndarray:
    """What each row's target was divided by (:meth:`OpShape.scale`), from its features."""
    x = np.asarray(x, dtype=float)
    if x.shape[1] >= len(FEATURES):
        return np.maximum(1.0, np.round(np.expm1(x[:, FEATURES.index("log_macs")])))
    col = {name: i for i, name in enumerate(OP_FEATURES)}
    macs = np.round(np.expm1(x[:, col["log_macs"]]))
    elements = np.maximum(np.expm1(x[:, col["log_in"]]), np.expm1(x[:, col["log_out"]]))
    return np.where(macs > 0, np.maximum(1.0, macs), np.maximum(1.0, np.round(elements)))


class _PathCosts:
    """An analytic cost per kernel path: ``count = a MACs + b outputs + c pixels + d inputs +
    e channels + f`` (:func:`cost_terms`; other ops: ``a inputs + b outputs + c``), the
    coefficients non-negative and fitted to relative error (each row divided by its count),
    per group of :class:`_Groups`' levels (the path, then the lane width, 1-D or not, the
    widths; the op, then its widths). A group of fewer than ``min_rows`` rows per term takes
    its parent's coefficients. A line of the counts carries a path's per-MAC and per-output
    costs to sizes no row had (a tiny layer's fixed costs, a long row's per-pixel loop), where
    trees on the ratio take the nearest leaf's."""

    def __init__(self, seed: int = 0, min_rows: float = 2.0) -> None:
        self.min_rows = float(min_rows)
        self.levels: list[list[int]] = []
        self.table: dict[tuple[float, ...], np.ndarray] = {}

    def fit(self, x: np.ndarray, y: np.ndarray) -> _PathCosts:
        from scipy.optimize import nnls

        x = np.asarray(x, dtype=float)
        counts = np.exp(np.asarray(y, dtype=float)) * _row_scale(x)
        terms = cost_terms(x)
        self.levels = _Groups.levels_of(x.shape[1])
        keys: dict[tuple[float, ...], list[int]] = {}
        for i, row in enumerate(x):
            for level in self.levels:
                keys.setdefault(tuple(float(row[j]) for j in level), []).append(i)
        need = self.min_rows * terms.shape[1]
        self.table = {}
        for key, rows in sorted(keys.items(), key=lambda item: len(item[0])):
            if len(rows) < need and key:  # too few: the parent's (found at predict time)
                continue
            a = terms[rows] / counts[rows, None]
            norm = np.maximum(a.max(axis=0), 1e-12)  # columns of one size for the solver
            coef, _ = nnls(a / norm, np.ones(len(rows)))
            self.table[key] = coef / norm
        return self

    def counts(self, x: np.ndarray) -> np.ndarray:
        """The modelled count of each row (the deepest group fitted)."""
        x = np.asarray(x, dtype=float)
        terms = cost_terms(x)
        out = np.empty(len(x))
        for i, row in enumerate(x):
            coef = self.table.get((), np.zeros(terms.shape[1]))
            for level in self.levels[1:]:
                found = self.table.get(tuple(float(row[j]) for j in level))
                if found is None:
                    break
                coef = found
            out[i] = float(terms[i] @ coef)
        return np.maximum(out, 1.0)

    def predict(self, x: np.ndarray) -> np.ndarray:
        return np.log(self.counts(x) / _row_scale(x))


class _PathCostsForest:
    """:class:`_PathCosts` as a base and a random forest on what it leaves (the log of the
    measured count over the modelled one): the line carries each path's costs to any size,
    the forest adds what the geometry changes around it."""

    def __init__(self, seed: int = 0) -> None:
        self.base = _PathCosts(seed)
        self.forest = _forest(seed)

    def fit(self, x: np.ndarray, y: np.ndarray) -> _PathCostsForest:
        self.base.fit(x, y)
        self.forest.fit(x, np.asarray(y, dtype=float) - self.base.predict(x))
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.base.predict(x) + self.forest.predict(x)


#: the algorithms a proxy compares on held-out shapes
ALGORITHMS = {"forest": _forest, "xgboost": _booster, "linear": _Linear,
              "grouped": _GroupedForest, "costs": _PathCosts,
              "costs_forest": _PathCostsForest}  # fmt: skip
#: every algorithm a kind may keep (``groups``: the ratio proxy's, :func:`fit_ratio_proxy`)
ESTIMATORS: dict[str, Any] = {**ALGORITHMS, "groups": _Groups}
#: what the ratio proxy compares, on held-out *models* (its first when a kind has one model)
RATIO_CANDIDATES = ("groups", "forest", "xgboost", "linear")


@dataclass
class KindModel:
    """The regressor kept for one op kind and how it did on held-out shapes.

    It predicts ``log(latency / scale)``, ``scale`` being the node's MACs (conv, linear) or
    elements (other ops): a cost per MAC or per element stays in a narrow range, so the trees
    carry it to layers larger or smaller than any they saw, where a tree on the latency itself
    can only repeat the nearest leaf's (with the ``bitfusion`` feature set a conv / linear
    node's scale is its compute cycles on the array, :func:`scale_of`).
    """

    kind: str
    algorithm: str  # "forest", "xgboost" or "linear"
    estimator: Any
    holdout_mape: dict[str, float]
    rows: list[tuple[list[float], float]] = field(default_factory=list)
    #: the features it reads (:data:`FEATURE_SETS`)
    feature_set: str = "generic"

    def predict(
        self, items: Sequence[LayerShape | OpShape], extensions: tuple[str, ...] = ()
    ) -> np.ndarray:
        ops = [_as_op(item, extensions) for item in items]
        x = np.array([_vector(op, self.feature_set) for op in ops], dtype=float)
        scale = np.array([scale_of(op, self.feature_set) for op in ops], dtype=float)
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
    #: the features its regressors read (:data:`FEATURE_SETS`; ``bitfusion`` adds the cycle
    #: model's own terms)
    feature_set: str = "generic"
    #: a proxy of the same programs on another target (rv32 instructions under qemu) whose
    #: prediction of each node this one multiplies by the ratio its regressors predict (cycles
    #: per instruction on VexRiscv): :func:`fit_ratio_proxy`
    base: LatencyProxy | None = None

    def current(self) -> bool:
        """Whether mico still generates programs with the code this proxy was fitted on (the
        same generator and C kernels); if not, its figures describe older programs."""
        from mico.hw.keys import generator_hash, kernel_hashes

        if not self.fitted_with:
            return False
        same = self.fitted_with == {"generator": generator_hash(), "kernels": kernel_hashes()}
        return same and (self.base is None or self.base.current())

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
        if self.base is not None:  # the regressors gave ratio x scale: times the base's node
            below = self.base.predict_ops(ops)
            out = [v / scale_of(op, self.feature_set) * b
                   for v, op, b in zip(out, ops, below, strict=True)]  # fmt: skip
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
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps(self.to_data()))
        tmp.replace(out)
        return out

    def to_data(self) -> dict[str, Any]:
        """The proxy as the JSON-ready dictionary :meth:`save` writes."""
        data: dict[str, Any] = {
            "version": PROXY_VERSION, "target": self.target, "unit": self.unit,
            "overhead": self.overhead, "overhead_per_node": self.overhead_per_node,
            "programs": self.programs, "seed": self.seed, "kinds": {},
            "extensions": list(self.extensions), "fitted_with": self.fitted_with,
            "feature_set": self.feature_set,
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
            elif model.algorithm == "groups":
                entry["levels"] = model.estimator.levels
                entry["prior"] = model.estimator.prior
                entry["table"] = [[list(k), m, n] for k, (m, n) in model.estimator.table.items()]
            else:
                entry["rows"] = [[x, y] for x, y in model.rows]
            data["kinds"][kind] = entry
        if self.base is not None:
            data["base"] = self.base.to_data()
        return data

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
            return cls.from_data(json.loads(p.read_text()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(
                f"latency proxy {str(p)!r} cannot be read ({type(exc).__name__}: {exc}); fit it "
                "again with mico profile"
            ) from None

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> LatencyProxy:
        """A proxy from :meth:`to_data`'s dictionary (ValueError, KeyError or TypeError when
        it is not one)."""
        if data.get("version") != PROXY_VERSION:
            raise ValueError(f"version {data.get('version')}, this mico reads {PROXY_VERSION}")
        feature_set = str(data.get("feature_set", "generic"))
        if feature_set not in FEATURE_SETS:
            raise ValueError(f"feature set {feature_set!r}, this mico knows {FEATURE_SETS}")
        seed = int(data.get("seed", 0))
        kinds = {kind: _kind_from_data(kind, entry, seed, feature_set)
                 for kind, entry in data["kinds"].items()}  # fmt: skip
        base = cls.from_data(data["base"]) if data.get("base") else None
        return cls(data["target"], data["unit"], kinds, float(data["overhead"]), seed,
                   float(data.get("overhead_per_node", 0.0)), int(data.get("programs", 0)),
                   tuple(data.get("extensions", ())), dict(data.get("fitted_with", {})),
                   feature_set, base)  # fmt: skip


def _kind_from_data(kind: str, entry: dict[str, Any], seed: int, feature_set: str) -> KindModel:
    """One kind's regressor as :meth:`LatencyProxy.to_data` wrote it (a forest refitted)."""
    rows: list[tuple[list[float], float]] = []
    if entry["algorithm"] == "xgboost":
        from xgboost import XGBRegressor

        estimator: Any = XGBRegressor()
        estimator.load_model(bytearray(entry["booster"].encode()))
    elif entry["algorithm"] == "linear":
        estimator = _Linear(0, entry["coef"], entry["intercept"])
    elif entry["algorithm"] == "groups":
        table = {tuple(map(float, k)): (float(m), int(n)) for k, m, n in entry["table"]}
        estimator = _Groups(0, entry["levels"], table, entry["prior"])
    else:  # a forest (or a grouped one) refitted on its rows with its seed
        rows = [(list(x), float(y)) for x, y in entry["rows"]]
        estimator = ESTIMATORS[entry["algorithm"]](seed)
        estimator.fit(np.array([x for x, _ in rows]), np.array([y for _, y in rows]))
    return KindModel(kind, entry["algorithm"], estimator, dict(entry["holdout_mape"]), rows,
                     feature_set)  # fmt: skip


def _fit_kind(
    kind: str, rows: Sequence[tuple[OpShape, float]], seed: int, holdout: float,
    feature_set: str = "generic", chosen: str | None = None,
    labels: Sequence[str] | None = None, candidates: Sequence[str] | None = None,
    keep: str | None = None, scored: Sequence[bool] | None = None, every_fold: bool = False,
    model_folds: Sequence[str] | None = None,
) -> KindModel:  # fmt: skip
    """A forest, a boosted model and a line on one kind's rows; the one better on held-out
    shapes (``chosen``: that algorithm, fitted on every row without comparing, no held-out score:
    how a leave-one-out refit reuses the choice of the full fit).

    Held out by shape (every bit pair of a shape together), a ``holdout`` share of them; a kind
    of fewer than :data:`FOLDED_UNDER` shapes is scored on every fold of that size, so that
    each of its shapes is predicted once by a regressor that never saw it (one held-out shape
    made the score and the choice luck). ``labels`` (one per row, say the model a node belongs
    to): held out by label instead, every label once. ``candidates``: the algorithms compared
    (default :data:`ALGORITHMS`; the first is kept when none could be scored). ``keep``: the
    algorithm kept whatever the scores (which are still reported). ``scored``: one per row,
    whether its held-out prediction counts in the scores (all when None: a profile's
    single-layer programs train the regressors but, beside whole programs, do not choose
    them). ``every_fold``: score every fold whatever the number of shapes (a choice made on
    one fold of a few hundred shapes changed with the draw of the fold). ``model_folds``: one
    per row, the program's model of a node ("" for a single-layer row): the nodes are held out
    by model instead of by shape (:func:`_held_out_scores`)."""

    def xy(part: Sequence[tuple[OpShape, float]]) -> tuple[np.ndarray, np.ndarray]:
        x = np.array([_vector(op, feature_set) for op, _ in part], dtype=float)
        y = np.log(np.array([v / scale_of(op, feature_set) for op, v in part], dtype=float))
        return x, y

    names = tuple(candidates or ALGORITHMS)
    scores: dict[str, float] = {}
    if chosen is None:
        scores = _held_out_scores(kind, rows, seed, holdout, xy, feature_set, labels, names,
                                  scored, every_fold, model_folds)  # fmt: skip
    best = chosen or keep or (min(scores, key=scores.get) if scores else names[0])  # type: ignore[arg-type]
    # refit the winner on every shape: the held-out score stays the reported error
    x_all, y_all = xy(rows)
    final = ESTIMATORS[best](seed)
    final.fit(x_all, y_all)
    return KindModel(
        kind, best, final, scores,
        [(list(map(float, x)), float(y)) for x, y in zip(x_all, y_all, strict=True)],
        feature_set,
    )  # fmt: skip


def _held_out_scores(
    kind: str, rows: Sequence[tuple[OpShape, float]], seed: int, holdout: float,
    xy: Any, feature_set: str, labels: Sequence[str] | None = None,
    names: Sequence[str] = tuple(ALGORITHMS), scored: Sequence[bool] | None = None,
    every_fold: bool = False, model_folds: Sequence[str] | None = None,
) -> dict[str, float]:  # fmt: skip
    """MAPE of each algorithm on shapes held out fold by fold (none under 5 shapes), or, given
    ``labels``, on each label's rows held out in turn (none under 2 labels); ``scored``: the
    rows whose predictions count (all when None or when it names none). ``model_folds``: one
    per row, the model of a program's node ("" for a single-layer row): from
    :data:`MODEL_FOLDS` models on, the models are split in that many folds and each fold's
    nodes held out in turn (the single-layer rows always train), as a new model's nodes are."""
    counts = list(scored) if scored is not None and any(scored) else [True] * len(rows)
    models = sorted({m for m in model_folds or () if m})
    if labels is None and len(models) >= MODEL_FOLDS:
        np.random.default_rng([seed, zlib.crc32(kind.encode())]).shuffle(models)
        fold_of_model = {m: i % MODEL_FOLDS for i, m in enumerate(models)}
        row_fold = [fold_of_model.get(m, -1) for m in model_folds or ()]
        folds = MODEL_FOLDS
    elif labels is not None:
        fold_keys = sorted(set(labels))
        if len(fold_keys) < 2:
            return {}
        row_fold = [fold_keys.index(label) for label in labels]
        folds = len(fold_keys)
    else:
        shapes = sorted({_shape_key(op) for op, _ in rows}, key=repr)
        if len(shapes) < 5:
            return {}
        # the kind's own draw: its folds do not depend on which other kinds were fitted
        np.random.default_rng([seed, zlib.crc32(kind.encode())]).shuffle(shapes)
        folds = max(2, min(len(shapes), round(1 / max(holdout, 1e-9))))
        fold_of = {key: i % folds for i, key in enumerate(shapes)}
        row_fold = [fold_of[_shape_key(op)] for op, _ in rows]
        if len(shapes) >= FOLDED_UNDER and not every_fold:
            folds = 1
    predicted: dict[str, list[float]] = {name: [] for name in names}
    measured: list[float] = []
    for fold in range(folds):
        train = [row for row, f in zip(rows, row_fold, strict=True) if f != fold]
        test = [row for row, f, c in zip(rows, row_fold, counts, strict=True) if f == fold and c]
        if not train or not test:
            continue
        x_train, y_train = xy(train)
        x_test, _ = xy(test)
        scale = np.array([scale_of(op, feature_set) for op, _ in test])
        measured += [y for _, y in test]
        for name in names:
            estimator = ESTIMATORS[name](seed)
            estimator.fit(x_train, y_train)
            predicted[name] += list(np.exp(estimator.predict(x_test)) * scale)
    return {name: mape(values, measured) for name, values in predicted.items()}


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
    feature_set: str | None = None,
    algorithms: dict[str, str] | None = None,
    labels: Sequence[str] | None = None,
    candidates: Sequence[str] | None = None,
    keep: dict[str, str] | None = None,
) -> LatencyProxy:
    """Fit one regressor per kind; held-out *shapes* (all their bit pairs, fold by fold) measure
    the error.

    ``profile``: layers measured alone (:class:`LayerShape`, read as a single-layer program
    reads them) or nodes (:class:`OpShape`) with their latency. ``models``: whole programs
    measured node by node (:class:`mico.hw.modelprof.ModelRecord`): their nodes join the
    rows, the other ops get regressors of their own (and a fallback, ``other``, for ops never
    seen), and the per-model overhead is fitted on them (:func:`fit_model_overhead`).
    ``extensions``: the target's ISA extensions (None: its target file's, none if it has
    no file), which decide some layers' kernel paths. ``feature_set``: None for the target's
    own (:func:`feature_set_of`). ``algorithms``: kind -> algorithm kept without comparing
    (a leave-one-out refit taking the full fit's choices, four times faster; a kind not named
    is compared as usual). ``labels``: one per ``profile`` row (the model a node belongs to):
    the rows of each label are held out in turn instead of shapes (``models``' nodes are then
    labelled by their model). ``candidates``: the algorithms compared (default
    :data:`ALGORITHMS`). ``keep``: kind -> algorithm kept after the comparison, whose scores
    are still reported.
    """
    features_used = feature_set or feature_set_of(target)
    if features_used not in FEATURE_SETS:
        raise ConfigError(f"feature set '{features_used}': use one of {', '.join(FEATURE_SETS)}")
    exts = target_extensions(target) if extensions is None else tuple(extensions)
    tags = list(labels) if labels is not None else [""] * len(profile)
    if len(tags) != len(profile):
        raise ValueError(f"{len(tags)} labels for {len(profile)} profile rows")
    # (op, latency, label, scored): beside whole programs, single-layer rows train the
    # regressors but are not scored (the choice of each kind's algorithm is the programs')
    rows = [(_as_op(item, exts), float(y), tag, not models)
            for (item, y), tag in zip(profile, tags, strict=True)]  # fmt: skip
    for record in models:
        rows += [(op, float(v), record.model, True) for op, v in record.nodes
                 if op.path != "alias"]  # fmt: skip
    rows = [row for row in rows if row[1] > 0]
    if not rows:
        raise ConfigError(f"the {target} profile is empty; run mico profile --target {target}")
    by_kind: dict[str, list[tuple[OpShape, float, str, bool]]] = {}
    shapes: dict[str, set[tuple]] = {}
    for row in rows:
        shapes.setdefault(row[0].kind, set()).add(_shape_key(row[0]))
    own = {kind for kind in SHARED if len(shapes.get(kind, ())) >= OWN_REGRESSOR_SHAPES}
    for row in rows:
        kind = row[0].kind if row[0].kind in own else SHARED.get(row[0].kind, row[0].kind)
        by_kind.setdefault(kind, []).append(row)
    for kind in own:
        by_kind[kind] = by_kind[kind] + by_kind.get(SHARED[kind], [])
    others = [row for row in rows if not row[0].is_mac]
    if others:
        by_kind[OTHER] = others
    chosen = algorithms or {}
    kinds = {
        kind: _fit_kind(kind, [(op, y) for op, y, _, _ in part], seed, holdout, features_used,
                        chosen.get(kind), [r[2] for r in part] if labels is not None else None,
                        candidates, (keep or {}).get(kind), [r[3] for r in part], bool(models),
                        [r[2] for r in part] if labels is None and models else None)
        for kind, part in by_kind.items()
    }  # fmt: skip
    from mico.hw.keys import generator_hash, kernel_hashes

    fitted_with = {"generator": generator_hash(), "kernels": kernel_hashes()}
    proxy = LatencyProxy(target, unit, kinds, 0.0, seed, programs=len(models), extensions=exts,
                         fitted_with=fitted_with, feature_set=features_used)  # fmt: skip
    if models:
        fit_model_overhead(proxy, models)
    return proxy


def fit_ratio_proxy(
    models: Sequence[Any],
    base_models: Sequence[Any],
    base: LatencyProxy,
    target: str,
    unit: str,
    seed: int = 0,
    holdout: float = 0.2,
    algorithms: dict[str, str] | None = None,
    candidates: Sequence[str] | None = None,
) -> LatencyProxy:
    """A proxy of ``target`` that predicts each node as ``base``'s prediction times a ratio.

    VexRiscv runs the rv32 programs qemu counts, and its cycles per instruction stay in a
    narrow band per kernel path (about 1.2 to 2: multiply latency, load-use stalls, taken
    branches) while instructions per MAC vary tenfold: so a few slow cycle-accurate programs
    teach the ratio, and the rv32 proxy, fitted on many fast programs, carries the shapes.
    ``models``: ``target``'s programs measured node by node; ``base_models``: the same
    (model, plan) programs measured on the base's target (:class:`mico.hw.modelprof.ModelRecord`);
    a node's row is its ratio of the two counts.

    Per kind, ``candidates`` (default :data:`RATIO_CANDIDATES`: the mean ratio of the node's
    kernel path, lane width, 1-D or not and widths, :class:`_Groups`, and the usual regressors)
    are scored on held-out *models* (each model's nodes predicted by a fit on the others': the
    ratio a new model's layers get), the error of the cycles given the node's measured
    instructions. Conv and linear nodes keep the group means whatever the scores: their ratio
    is the kernel code's, and trees on the size features carried the ratio of small models'
    1-D lanes (2.2) to a larger model's 2-D lanes (1.5; cnn left out, 33 % off), a failure the
    other six small models, held out in turn, did not show (groups 11.7 %, forest 10.9 % on
    their conv nodes). The other ops keep the best scored. The per-model overhead is fitted on
    the programs as in :func:`fit_proxy`.
    """
    below = {(r.model, r.plan_name): {op.name: v for op, v in r.nodes} for r in base_models}
    rows: list[tuple[OpShape, float]] = []
    labels: list[str] = []
    matched = []
    for record in models:
        counts = below.get((record.model, record.plan_name))
        if not counts:
            continue
        matched.append(record)
        for op, value in record.nodes:
            under = counts.get(op.name, 0.0)
            if op.path != "alias" and value > 0 and under > 0:
                rows.append((op, value / under * scale_of(op)))
                labels.append(record.model)
    if not rows:
        raise ConfigError(
            f"no {target} program has a {base.target} record of the same model and plan; "
            f"profile both: mico profile --target {base.target}"
        )
    proxy = fit_proxy(rows, target, unit, seed, holdout, feature_set="generic",
                      algorithms=algorithms, labels=labels,
                      candidates=candidates or RATIO_CANDIDATES,
                      keep={kind: "groups" for kind in MAC_KINDS})  # fmt: skip
    proxy.base, proxy.programs = base, len(matched)
    fit_model_overhead(proxy, matched)
    return proxy


#: targets whose proxy is a ratio over another target's proxy (the same rv32 programs: VexRiscv
#: cycles = rv32 instructions x cycles per instruction, see :func:`fit_ratio_proxy`)
RATIO_BASE = {"vexriscv": "rv32"}


def same_programs(records: Sequence[Any], base_records: Sequence[Any]) -> list[Any]:
    """For each record, the latest base record of the same model and plan built from the same
    kernel files (every file both keys name hashes alike): the same program, counted on the
    base target. Records without such a partner are left out."""
    out = []
    for record in records:
        same = [
            b for b in base_records
            if (b.model, b.plan_name) == (record.model, record.plan_name)
            and all(b.key.kernels.get(f, h) == h for f, h in record.key.kernels.items())
        ]  # fmt: skip
        if same:
            out.append(same[-1])
    return out


def fit_target_proxy(
    rows: Sequence[tuple[Any, float]],
    records: Sequence[Any],
    target: str,
    unit: str,
    seed: int = 0,
    base_rows: Sequence[tuple[Any, float]] = (),
    base_records: Sequence[Any] = (),
) -> tuple[LatencyProxy, str]:
    """The proxy ``mico profile`` saves for ``target``, and a line saying which kind it is.

    A target of :data:`RATIO_BASE` whose programs have partners among ``base_records`` (the
    base target's profile, :func:`same_programs`) gets a ratio proxy over a base proxy fitted
    on ``base_rows`` and the latest base record of each model and plan: the base's many fast
    programs carry the shapes, the few slow cycle-accurate ones the ratio. Otherwise (another
    target, or no partner) the proxy is fitted directly on the target's own rows and records,
    and the line says why.
    """
    base_name = RATIO_BASE.get(target)
    if base_name and records:
        matched = same_programs(records, base_records)
        if matched:
            latest = {(r.model, r.plan_name): r for r in base_records}  # the file's order
            base = fit_proxy(base_rows, base_name, "instructions", seed=seed,
                             models=list(latest.values()))  # fmt: skip
            proxy = fit_ratio_proxy(records, matched, base, target, unit, seed=seed)
            return proxy, (
                f"ratio proxy over {base_name}'s ({len(matched)} of {len(records)} programs "
                f"also measured on {base_name})"
            )
        return fit_proxy(rows, target, unit, seed=seed, models=list(records)), (
            f"direct proxy: none of the {len(records)} programs has a {base_name} record built "
            f"from the same kernels; `mico profile --target {base_name}` with the same "
            f"--models and --plans gives the (more accurate) ratio proxy"
        )
    return fit_proxy(rows, target, unit, seed=seed, models=list(records)), "direct proxy"


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
