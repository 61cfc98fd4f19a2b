"""The static (integer-only) mode's LLaMa ops and their reference semantics (``execute``).

Like :mod:`mico.ir.ops.mico_ops`, the arithmetic here *is* the Python reference of the C
kernels (``mico/csrc/mico_llama.c``); every step is an integer operation both sides repeat:

``mico.qembedding``
    token ids (the graph input) -> rows of a table of codes (stored packed, in the output's
    format, so a lookup is a copy of codes).
``mico.qrmsnorm``
    ``x / sqrt(mean(x**2) + eps) * weight`` over the last dim: with ``n`` codes ``c`` per row,
    ``dev = isqrt((sum(c**2) << 2P) + eps_q)`` is ``2**P`` times the row's root sum of squares,
    ``y = round(c * 2**P * k / dev)`` the normalised value in Q``F`` (``k = sqrt(n) * 2**F``),
    and ``out = round(y * g[j] / 2**shift)`` applies the weight and the output scale
    (``g``: fixed point, per channel).
``mico.qrope``
    rotary embedding of interleaved pairs ``(x[2i], x[2i+1])`` at position ``t``:
    ``x0 * C - x1 * S`` and ``x0 * S + x1 * C`` with ``C``, ``S`` the cos / sin tables in
    Q``frac`` (int32 accumulators), then one requantization (``out``, see ``mico_ops``).
``mico.qsoftmax_prefix``
    the integer softmax of ``mico.qsoftmax`` over the first ``limits[r % len(limits)]`` codes of
    row ``r`` only, the rest of the row set to code 0: an additive causal mask of zeros and
    large negatives (whose ``exp`` is 0 in float) as exact integer arithmetic.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from mico.ir.ops.mico_ops import finish
from mico.ir.ops.registry import OpRegistry, register_executor

QEMBEDDING = "mico.qembedding"
QRMSNORM = "mico.qrmsnorm"
QROPE = "mico.qrope"
QSOFTMAX_PREFIX = "mico.qsoftmax_prefix"

OpRegistry.define(QEMBEDDING, "token ids -> rows of a packed table of codes (a copy of codes)")
OpRegistry.define(
    QRMSNORM,
    "integer RMSNorm over the last dim: integer square root of the sum of squares, fixed-point "
    "weight, requantized",
)
OpRegistry.define(
    QROPE,
    "rotary position embedding of interleaved pairs: Q14 cos/sin tables per position, int32 "
    "accumulators, requantized",
)
OpRegistry.define(
    QSOFTMAX_PREFIX,
    "integer softmax over a prefix of each row (a causal mask): Q15 exp table, masked codes 0",
)


def _isqrt(values: np.ndarray) -> np.ndarray:
    """floor(sqrt(v)) of non-negative int64 values, exactly."""
    flat = [math.isqrt(int(v)) for v in np.asarray(values, dtype=np.int64).ravel()]
    return np.asarray(flat, dtype=np.int64).reshape(np.shape(values))


def _div_round(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """round(a / b), half away from zero, for b > 0 (int64)."""
    q = (np.abs(a) + b // 2) // b
    return np.where(a < 0, -q, q)


def _round_shift(v: np.ndarray, shift: int) -> np.ndarray:
    """v / 2**shift rounded half away from zero (mico_round_shift)."""
    mag = (np.abs(v) + (1 << (shift - 1))) >> shift
    return np.where(v < 0, -mag, mag)


def embedding_codes(ids: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Rows ``table[ids]`` (what mico_qembedding copies)."""
    return np.asarray(table, dtype=np.int64)[np.asarray(ids).astype(np.int64)]


def rmsnorm_codes(codes: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    """The integer RMSNorm of ``codes`` over the last axis (what mico_qrmsnorm computes)."""
    x = np.asarray(codes, dtype=np.int64)
    pre = int(attrs["pre"])
    q = ((x * x).sum(axis=-1, keepdims=True) << (2 * pre)) + int(attrs["eps_q"])
    dev = _isqrt(q)
    y = np.where(dev == 0, 0, _div_round((x << pre) * int(attrs["k"]), np.maximum(dev, 1)))
    v = _round_shift(y * np.asarray(attrs["g"], dtype=np.int64), int(attrs["shift"]))
    if attrs.get("binary"):  # binary {-1, +1} outputs: the sign, zero counting as +1
        return np.where(v >= 0, 1, -1).astype(np.int64)
    lo, hi = attrs["clamp"]
    return np.clip(v, lo, hi)


def rope_codes(codes: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    """The integer rotary embedding of ``codes`` (..., T, 2P) (what mico_qrope computes)."""
    x = np.asarray(codes, dtype=np.int64)
    t, half = int(attrs["positions"]), int(attrs["half"])
    cos = np.asarray(attrs["cos"], dtype=np.int64).reshape(t, half)
    sin = np.asarray(attrs["sin"], dtype=np.int64).reshape(t, half)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    acc = np.empty_like(x)
    acc[..., 0::2] = x0 * cos - x1 * sin
    acc[..., 1::2] = x0 * sin + x1 * cos
    return finish(acc, attrs["out"]).numpy()


def prefix_softmax_codes(
    codes: np.ndarray, exp_q15: np.ndarray, qmax: int, limits: list[int]
) -> np.ndarray:
    """The integer softmax of each row's first ``limits[r % len(limits)]`` codes (what
    mico_qsoftmax_prefix computes); codes past the limit are 0."""
    c = np.asarray(codes, dtype=np.int64)
    n = c.shape[-1]
    rows = c.reshape(-1, n)
    lim = np.asarray(limits, dtype=np.int64)
    lim = np.tile(lim, rows.shape[0] // len(lim) + 1)[: rows.shape[0], None]
    inside = np.arange(n)[None, :] < lim
    top = np.where(inside, rows, np.iinfo(np.int64).min).max(axis=-1, keepdims=True)
    d = np.minimum(top - np.where(inside, rows, top), len(exp_q15) - 1)
    e = np.where(inside, np.asarray(exp_q15, dtype=np.int64)[d], 0)
    total = e.sum(axis=-1, keepdims=True)
    out = (2 * e * qmax + total) // (2 * total)
    return out.reshape(c.shape)


@register_executor(QEMBEDDING)
def execute_qembedding(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
    ids, table = inputs
    return [torch.from_numpy(embedding_codes(ids.numpy(), table.numpy()))]


@register_executor(QRMSNORM)
def execute_qrmsnorm(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
    return [torch.from_numpy(rmsnorm_codes(inputs[0].numpy(), attrs))]


@register_executor(QROPE)
def execute_qrope(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
    return [torch.from_numpy(rope_codes(inputs[0].numpy(), attrs))]


@register_executor(QSOFTMAX_PREFIX)
def execute_qsoftmax_prefix(
    inputs: list[torch.Tensor], attrs: dict[str, Any]
) -> list[torch.Tensor]:
    out = prefix_softmax_codes(
        inputs[0].numpy(), np.asarray(attrs["exp_q15"]), int(attrs["qmax"]), attrs["limits"]
    )
    return [torch.from_numpy(out)]
