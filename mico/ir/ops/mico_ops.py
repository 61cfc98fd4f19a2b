"""The quantized ``mico.*`` operators and their reference semantics (``execute`` rules).

These are what the C kernels implement: the execute rules *are* the Python reference of the
static (integer-only) mode. Executors take and return torch tensors (batch first): codes and
accumulators as int64, reals as float32. Integer convolutions run in float64, which is exact
while every partial sum stays below 2**53 (int32 accumulators guarantee that).

Codes are held unpacked here; how they are stored (packed at their bit-width, LSB first) is a
concern of the C side only.

How a result is stored (the ``requant`` attribute of ``qconv2d`` / ``qlinear``, the ``out``
attribute of the other ops) is one dict, :func:`out_spec`:

``qformat``
    the code format of the result, or ``None`` for int32 results;
``scale``
    the real value of one unit of the result;
``m``, ``shift``
    the fixed-point multiplier(s) ``m * 2**-shift`` the value is rescaled by (rounded half away
    from zero, :func:`mico.quant.arithmetic.requantize`), one pair per tensor or one per channel
    (a list); ``None`` keeps the value's scale (a copy, a clamp, a widening to int32);
``clamp``
    ``[lo, hi]``: the final clamp in the result's units (fused ReLU6 / hardtanh bounds, or the
    code range).

``qconv2d`` / ``qlinear`` also take ``relu``: the accumulator is clamped at 0 before rescaling.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from mico.ir.ops.registry import OpRegistry, register_executor
from mico.quant.arithmetic import INT32_MAX, INT32_MIN, QFormat, quantize, requantize

QUANTIZE = "mico.quantize"
QCONV2D = "mico.qconv2d"
QLINEAR = "mico.qlinear"
MAXPOOL2D = "mico.maxpool2d"
RESHAPE = "mico.reshape"
REQUANT = "mico.requant"
ADD = "mico.qadd"
CONCAT = "mico.concat"
MEAN = "mico.mean"
COPY = "mico.copy"
AVGPOOL2D = "mico.qavgpool2d"
LUT = "mico.lut"
QMUL = "mico.qmul"
QMATMUL = "mico.qmatmul"
QSOFTMAX = "mico.qsoftmax"
QLAYERNORM = "mico.qlayernorm"
GATHER = "mico.gather"
ADAPTAVG = "mico.qadaptavg"

OpRegistry.define(
    QUANTIZE, "float32 input -> integer codes (float32 rounding, half away from zero)"
)
OpRegistry.define(
    QCONV2D, "integer 2-D convolution, int32 bias, fused ReLU/clamp, per-channel requantization"
)
OpRegistry.define(
    QLINEAR, "integer fully-connected layer, int32 bias, fused ReLU/clamp, requantization"
)
OpRegistry.define(MAXPOOL2D, "2-D max pooling on integer codes")
OpRegistry.define(RESHAPE, "view with a new shape; shares its input's memory")
OpRegistry.define(
    REQUANT, "elementwise rescale of codes/int32 (per tensor or channel), clamp, widen to int32"
)
OpRegistry.define(
    ADD,
    "residual add of two code tensors, rescaled to one output scale with fixed-point "
    "multipliers (one shared shift), fused clamp",
)
OpRegistry.define(CONCAT, "concatenation of code tensors, each rescaled to the output format")
OpRegistry.define(MEAN, "mean over trailing dims: integer sum, then requantization")
OpRegistry.define(COPY, "strided gather of codes (transpose, permute, slice), optional rescale")
OpRegistry.define(
    AVGPOOL2D, "2-D average pooling on codes: window sums, one multiplier per window size"
)
OpRegistry.define(
    LUT,
    "elementwise function of codes by table lookup (sigmoid, tanh, GELU, SiLU, ...): one "
    "output code per input code, computed once at compile time",
)


# --------------------------------------------------------------------------- arithmetic
def code_range(fmt: QFormat | None) -> tuple[int, int]:
    """The range of a result: the code range, or int32's."""
    return (INT32_MIN, INT32_MAX) if fmt is None else (fmt.qmin, fmt.qmax)


def out_spec(
    qformat: QFormat | None,
    scale: float,
    m: list[int] | None = None,
    shift: list[int] | None = None,
    clamp: list[int] | None = None,
) -> dict[str, Any]:
    """How a result is stored (see the module docstring)."""
    return {
        "qformat": qformat,
        "scale": float(scale),
        "m": None if m is None else [int(v) for v in m],
        "shift": None if shift is None else [int(v) for v in shift],
        "clamp": list(code_range(qformat)) if clamp is None else [int(clamp[0]), int(clamp[1])],
    }


def rescale(values: np.ndarray, m: int, shift: int, fmt: QFormat | None) -> np.ndarray:
    """``values * m / 2**shift`` rounded half away from zero: to codes (``fmt``) or int32.

    Codes are :func:`mico.quant.arithmetic.requantize`; int32 results round the same way and
    saturate at the int32 range.
    """
    if fmt is not None:
        return requantize(values, int(m), int(shift), fmt)
    v = np.asarray(values, dtype=np.int64) * np.int64(m)
    r = (np.abs(v) + np.int64(1 << (int(shift) - 1))) >> np.int64(shift)
    return np.clip(np.where(v < 0, -r, r), INT32_MIN, INT32_MAX).astype(np.int64)


def finish(acc: Any, spec: dict[str, Any] | None, relu: bool = False, axis: int = 1) -> Any:
    """Store accumulators (or codes) as ``spec`` says: ReLU, rescale per tensor or per channel
    (``axis``), clamp. ``spec`` None keeps int32 accumulators unchanged."""
    a = np.asarray(acc.numpy() if isinstance(acc, torch.Tensor) else acc, dtype=np.int64)
    if relu:
        a = np.maximum(a, 0)
    if spec is None:
        return torch.from_numpy(np.ascontiguousarray(a))
    fmt = spec.get("qformat")
    m, shift = spec.get("m"), spec.get("shift")
    if m is not None:
        ms, ss = np.atleast_1d(m), np.atleast_1d(shift)
        if ms.size == 1:
            a = rescale(a, int(ms[0]), int(ss[0]), fmt)
        else:
            out = np.empty_like(a)
            for c in range(ms.size):
                index = [slice(None)] * a.ndim
                index[axis] = slice(c, c + 1)
                out[tuple(index)] = rescale(a[tuple(index)], int(ms[c]), int(ss[c]), fmt)
            a = out
    lo, hi = spec.get("clamp") or code_range(fmt)
    return torch.from_numpy(np.ascontiguousarray(np.clip(a, lo, hi).astype(np.int64)))


# --------------------------------------------------------------------------- executors
@register_executor(QUANTIZE)
def execute_quantize(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
    return [quantize(inputs[0].to(torch.float32), attrs["scale"], attrs["qformat"]).to(torch.int64)]


@register_executor(QCONV2D)
def execute_qconv2d(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
    x, w, b = (t.to(torch.float64) for t in inputs)
    acc = F.conv2d(
        x,
        w,
        b,
        stride=attrs["stride"],
        padding=attrs["padding"],
        dilation=attrs["dilation"],
        groups=attrs["groups"],
    )
    return [finish(acc.round().to(torch.int64), attrs.get("requant"), attrs.get("relu", False))]


@register_executor(QLINEAR)
def execute_qlinear(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
    x, w, b = (t.to(torch.float64) for t in inputs)
    acc = F.linear(x, w, b).round().to(torch.int64)
    return [finish(acc, attrs.get("requant"), attrs.get("relu", False), axis=-1)]


@register_executor(MAXPOOL2D)
def execute_maxpool2d(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
    out = F.max_pool2d(
        inputs[0].to(torch.float64),
        attrs["kernel_size"],
        attrs["stride"],
        attrs["padding"],
        attrs["dilation"],
    )
    return [out.to(torch.int64)]


@register_executor(RESHAPE)
def execute_reshape(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
    x = inputs[0]
    return [x.reshape(x.shape[0], *attrs["shape"][1:])]


@register_executor(REQUANT)
def execute_requant(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
    return [finish(inputs[0].to(torch.int64), attrs["out"], axis=int(attrs.get("axis", 1)))]


OpRegistry.define(QMUL, "elementwise product of two code tensors, requantized")
OpRegistry.define(QMATMUL, "batched matrix product of two code tensors, requantized")


@register_executor(QMUL)
def execute_qmul(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
    a, b = (t.to(torch.int64) for t in inputs)
    return [finish(a * b, attrs["out"])]


@register_executor(QMATMUL)
def execute_qmatmul(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
    a, b = (t.to(torch.float64) for t in inputs)  # exact: int32 accumulators < 2**53
    return [finish(torch.matmul(a, b).round().to(torch.int64), attrs["out"])]


OpRegistry.define(
    QSOFTMAX,
    "integer softmax over the last dim: Q15 exp table of distances to the row maximum, "
    "output codes round(e * qmax / sum)",
)


def softmax_codes(codes: np.ndarray, exp_q15: np.ndarray, qmax: int) -> np.ndarray:
    """The integer softmax of ``codes`` over the last axis (what mico_softmax.c computes)."""
    c = np.asarray(codes, dtype=np.int64)
    d = np.minimum(c.max(axis=-1, keepdims=True) - c, len(exp_q15) - 1)
    e = np.asarray(exp_q15, dtype=np.int64)[d]
    total = e.sum(axis=-1, keepdims=True)
    return (2 * e * qmax + total) // (2 * total)


@register_executor(QSOFTMAX)
def execute_qsoftmax(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
    out = softmax_codes(inputs[0].numpy(), np.asarray(attrs["exp_q15"]), int(attrs["qmax"]))
    return [torch.from_numpy(out)]


OpRegistry.define(
    QLAYERNORM,
    "integer LayerNorm over the last dim: exact centring, integer square root, fixed-point "
    "gamma and beta, requantized",
)


def _div_round(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """round(a / b), half away from zero, for b > 0 (int64)."""
    q = (np.abs(a) + b // 2) // b
    return np.where(a < 0, -q, q)


def layernorm_codes(codes: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    """The integer LayerNorm of ``codes`` over the last axis (what mico_layernorm.c computes)."""
    import math

    x = np.asarray(codes, dtype=np.int64)
    n = x.shape[-1]
    c = n * x - x.sum(axis=-1, keepdims=True)
    q = (c * c).sum(axis=-1, keepdims=True) + int(attrs["eps_q"])
    dev = np.vectorize(lambda v: math.isqrt(int(v)), otypes=[np.int64])(q)
    safe = np.maximum(dev, 1)
    y = np.where(dev == 0, 0, _div_round(c * int(attrs["k"]), safe))
    acc = y * np.asarray(attrs["g"], dtype=np.int64) + np.asarray(attrs["b"], dtype=np.int64)
    shift = int(attrs["shift"])
    mag = (np.abs(acc) + (1 << (shift - 1))) >> shift
    v = np.where(acc < 0, -mag, mag)
    if attrs.get("binary"):  # binary {-1, +1} outputs: the sign, zero counting as +1
        return np.where(v >= 0, 1, -1).astype(np.int64)
    lo, hi = attrs["clamp"]
    return np.clip(v, lo, hi)


@register_executor(QLAYERNORM)
def execute_qlayernorm(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
    return [torch.from_numpy(layernorm_codes(inputs[0].numpy(), attrs))]


OpRegistry.define(GATHER, "copy of codes through an index table, -1 takes the fill code (padding)")


@register_executor(GATHER)
def execute_gather(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
    x = inputs[0].to(torch.int64).reshape(inputs[0].shape[0], -1)
    index = torch.tensor(attrs["index"], dtype=torch.int64)
    gathered = x[:, index.clamp(min=0)]
    out = torch.where(index >= 0, gathered, torch.full_like(gathered, int(attrs["fill"])))
    return [out.reshape(inputs[0].shape[0], *attrs["shape"])]


OpRegistry.define(
    ADAPTAVG, "adaptive average pooling with uneven windows: sums, one multiplier per count"
)


def adaptive_bounds(size: int, out: int) -> tuple[list[int], list[int]]:
    """torch's adaptive windows: [floor(i*size/out), ceil((i+1)*size/out)) for each i."""
    starts = [(i * size) // out for i in range(out)]
    ends = [-((-(i + 1) * size) // out) for i in range(out)]
    return starts, ends


@register_executor(ADAPTAVG)
def execute_adaptavg(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
    x = inputs[0].to(torch.int64)  # (N, C, H, W)
    rs, re, cs, ce = attrs["rows"][0], attrs["rows"][1], attrs["cols"][0], attrs["cols"][1]
    spec = attrs["out"]
    out = torch.zeros((*x.shape[:2], len(rs), len(cs)), dtype=torch.int64)
    for i in range(len(rs)):
        for j in range(len(cs)):
            sums = x[:, :, rs[i] : re[i], cs[j] : ce[j]].sum(dim=(2, 3))
            count = (re[i] - rs[i]) * (ce[j] - cs[j])
            one = {**spec, "m": [spec["m"][count - 1]], "shift": [spec["shift"][count - 1]]}
            out[:, :, i, j] = finish(sums, one)
    return [out]


@register_executor(LUT)
def execute_lut(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
    table = torch.tensor(attrs["table"], dtype=torch.int64)
    return [table[inputs[0].to(torch.int64) - int(attrs["in_min"])]]


@register_executor(ADD)
def execute_add(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
    a, b = (np.asarray(t.numpy(), dtype=np.int64) for t in inputs)
    m_a, m_b = attrs["m"]
    v = a * np.int64(m_a) + b * np.int64(m_b)
    r = rescale(v, 1, attrs["shift"], attrs["qformat"])
    lo, hi = attrs["clamp"]
    return [torch.from_numpy(np.clip(r, lo, hi).astype(np.int64))]


@register_executor(CONCAT)
def execute_concat(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
    fmt: QFormat = attrs["qformat"]
    parts = []
    batch = max(int(x.shape[0]) for x in inputs)
    inputs = [x.expand(batch, *x.shape[1:]) if x.shape[0] == 1 else x for x in inputs]  # consts
    for x, part in zip(inputs, attrs["parts"], strict=True):
        x = x.to(torch.int64)
        if part is not None:
            x = finish(x, out_spec(fmt, attrs["scale"], [part["m"]], [part["shift"]]))
        parts.append(x)
    return [torch.cat(parts, dim=attrs["dim"])]


@register_executor(MEAN)
def execute_mean(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
    x = inputs[0].to(torch.int64)
    total = x.sum(dim=list(attrs["dims"]), keepdim=bool(attrs.get("keepdim", False)))
    return [finish(total, attrs["out"])]


@register_executor(COPY)
def execute_copy(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
    x = inputs[0].to(torch.int64)
    rows = []
    for sample in x:
        flat = sample.reshape(-1).clone()
        rows.append(flat.as_strided(attrs["shape"], attrs["strides"], attrs["offset"]).clone())
    out = torch.stack(rows) if rows else x.new_empty((0, *attrs["shape"]))
    spec = attrs.get("out")
    return [out if spec is None else finish(out, spec)]


@register_executor(AVGPOOL2D)
def execute_avgpool2d(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
    """Window sums (exact, as a depthwise convolution with ones); the window's input count
    selects the multiplier (``m[count - 1]``) when padding is not counted."""
    x = inputs[0].to(torch.float64)
    k, stride, padding = attrs["kernel_size"], attrs["stride"], attrs["padding"]
    channels = x.shape[1]
    ones = torch.ones((channels, 1, *k), dtype=torch.float64)
    sums = F.conv2d(x, ones, None, stride, padding, 1, channels).round().to(torch.int64)
    if attrs.get("count_include_pad", True):
        counts = torch.full_like(sums, k[0] * k[1])
    else:
        inside = torch.ones((1, 1, *x.shape[2:]), dtype=torch.float64)
        counts = F.conv2d(inside, ones[:1], None, stride, padding).round().to(torch.int64)
        counts = counts.expand_as(sums)
    spec = attrs["out"]
    out = torch.zeros_like(sums)
    for count in range(1, k[0] * k[1] + 1):
        mask = counts == count
        if bool(mask.any()):
            one = {**spec, "m": [spec["m"][count - 1]], "shift": [spec["shift"][count - 1]]}
            out[mask] = finish(sums[mask], one)
    return [out]
