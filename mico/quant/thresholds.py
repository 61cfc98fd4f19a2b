"""Input quantization as a table of float32 thresholds, so C needs no float arithmetic.

The code :func:`mico.quant.arithmetic.quantize` gives a float32 ``x`` is a non-decreasing
function of ``x`` (``x * inv_scale`` with ``inv_scale > 0`` is a monotonic float32 operation,
rounding half away from zero and clamping are monotonic too). So for one scale and format,
``code(x) = qmin + #{j : t_j <= x}`` where ``t_1 <= ... <= t_(qmax - qmin)`` are the smallest
float32 values at which the code reaches ``qmin + j``. Those thresholds are found here by
bisection over the float32 lattice, with ``quantize`` itself as the oracle (on torch tensors,
as the reference executor calls it), so the table is exact by construction: no reasoning
about where ``x * inv_scale`` rounds is needed. Graph inputs are finite (NaN and Inf are
refused before a model runs, ``mico_first_nonfinite``); infinities still get qmin / qmax.

Floats are compared as *keys*: the int32 whose order is the float order
(:func:`f32_keys`). ``+0.0`` has key 0 and ``-0.0`` key -1; both give the same code, so a
threshold never falls between them unless the reference itself tells them apart.
The C side (``mico_quantize_f32_table`` in ``mico/csrc/mico_quant.c``) computes the same key
with three integer operations and binary-searches the table. Static programs use it for codes
of 1 to 3 bits; wider codes take :mod:`mico.quant.exact_input` (no table).
"""

from __future__ import annotations

import numpy as np
import torch

from mico.quant.arithmetic import QFormat, inv_scale_f32, quantize

#: the key of +inf: every finite float32 has a smaller key (NaN keys lie beyond +-inf's)
KEY_POS_INF = 0x7F800000
#: the key of -inf
KEY_NEG_INF = -0x7F800001
#: the padding entry of a C table: ``entry < key`` never holds for a non-NaN key
PAD = np.iinfo(np.int32).max


def f32_keys(x: np.ndarray) -> np.ndarray:
    """The ordered int32 keys of float32 values: ``key(a) < key(b)`` iff ``a < b`` (non-NaN),
    except that ``key(-0.0) = -1 < key(+0.0) = 0``.

    A float's bits read as int32 are in order for positive floats and in reverse order for
    negative ones; flipping the 31 magnitude bits of negative patterns turns that around.
    """
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.int32)
    return u ^ ((u >> 31) & np.int32(0x7FFFFFFF))


def key_floats(keys: np.ndarray) -> np.ndarray:
    """The float32 values of keys (:func:`f32_keys` is its own inverse on the bit patterns)."""
    k = np.asarray(keys, dtype=np.int64).astype(np.int32)
    return (k ^ ((k >> 31) & np.int32(0x7FFFFFFF))).view(np.float32)


def table_usable(scale: float) -> bool:
    """Whether the threshold table reproduces ``quantize`` at ``scale``: a finite float32
    reciprocal. (A scale below ~3e-39 has ``inv_scale = inf``, and ``0 * inf`` is NaN.)"""
    return bool(np.isfinite(inv_scale_f32(scale)))


def quantize_thresholds(scale: float, fmt: QFormat) -> np.ndarray:
    """The keys ``t_j`` (int64, ``j = 1 .. qmax - qmin``, non-decreasing) of the smallest
    float32 values whose code :func:`quantize` makes at least ``qmin + j``.

    A code no finite float reaches has the threshold :data:`KEY_POS_INF`. Raises ValueError
    when the scale has no finite float32 reciprocal (see :func:`table_usable`).
    """
    if not table_usable(scale):
        raise ValueError(f"scale {scale!r} has no finite float32 reciprocal; no threshold table")
    targets = np.arange(fmt.qmin + 1, fmt.qmax + 1, dtype=np.int64)
    # invariant: code(lo) < target <= code(hi), with -inf and +inf as sentinels taken to give
    # qmin and qmax; only finite floats strictly between them are ever evaluated
    lo = np.full(targets.shape, KEY_NEG_INF, dtype=np.int64)
    hi = np.full(targets.shape, KEY_POS_INF, dtype=np.int64)
    while True:
        open_ = hi - lo > 1
        if not open_.any():
            return hi
        mid = (lo + hi) // 2
        # the reference executor's own call (mico.quantize runs it on a float32 tensor)
        codes = quantize(torch.from_numpy(key_floats(mid)), scale, fmt).double().numpy()
        up = codes >= targets
        hi = np.where(open_ & up, mid, hi)
        lo = np.where(open_ & ~up, mid, lo)


def search_steps(fmt: QFormat) -> int:
    """Steps of the C binary search: ``bits`` (the table has ``2**bits - 1`` entries)."""
    return fmt.bits


def c_table(scale: float, fmt: QFormat) -> np.ndarray:
    """The int32 table ``mico_quantize_f32_table`` reads: ``t_j - 1``, padded with :data:`PAD`
    to ``2**bits - 1`` entries, so that ``code = qmin + #{j : table[j] < key}``; binary codes
    (no code 0: their two thresholds are one) take one entry and ``code = -1 + 2 * #{...}``.

    Storing ``t_j - 1`` turns each search step's ``t <= key`` into one ``slt`` on rv32.
    """
    t = quantize_thresholds(scale, fmt) - 1
    if fmt.binary:
        t = t[1:]
    size = 2 ** search_steps(fmt) - 1
    return np.concatenate([t, np.full(size - t.size, PAD, dtype=np.int64)]).astype(np.int32)


def codes_from_table(x: np.ndarray, table: np.ndarray, fmt: QFormat) -> np.ndarray:
    """The codes a C table gives float32 ``x`` (a Python model of the C search, for tests)."""
    keys = f32_keys(np.asarray(x, dtype=np.float32)).astype(np.int64)
    rank = np.searchsorted(np.asarray(table, dtype=np.int64), keys, side="left")
    return fmt.qmin + (2 * rank if fmt.binary else rank)
