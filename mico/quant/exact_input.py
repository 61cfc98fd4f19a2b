"""Input quantization in integers without a table: the constants of ``mico_quantize_f32_exact``.

:func:`mico.quant.arithmetic.quantize` computes ``v = x * inv_scale`` in float32, rounds it half
away from zero and clamps. For a scale known when the program is generated, C can get the same
code from one 32x32 -> high-32 multiply (``mulhu`` on rv32) and shifts, where the threshold table
of :mod:`mico.quant.thresholds` costs ``4 * (2**bits - 1)`` bytes of flash (1020 at 8 bits).

Why it is exact. A normal float32 ``x = mx * 2**(ex - 150)`` (``mx`` the 24-bit significand with
its hidden bit) and ``inv_scale = mi * 2**(ei - 150)`` (normalised the same way, even when the
float is subnormal) have the exact product ``P * 2**E``, ``P = mx * mi`` in ``[2**46, 2**48)``,
``E = ex + ei - 300``. float32 returns ``RNE24(P) * 2**E`` (or infinity, or a subnormal: both far
from any code boundary that matters). Every ``k + 0.5`` below ``2**22`` is a float32 with an even
significand (for ``k = 0`` too, seen from the binade below), so the 24-bit rounding reaches it
exactly from ``k + 0.5 - ulp / 2`` on (ties go to the even ``k + 0.5``); with ``ulp / 2 =
2**(22 + n + E)``, ``n = [P >= 2**47]``, the rounded magnitude half away from zero is

    ``r = floor((P + 2**(22 + n) + 2**(s - 1)) / 2**s)``,  ``s = -E``.

C computes ``h = floor(P / 2**22)`` as the high word of ``(mx << 8) * (mi << 2)``; both added
terms are whole multiples of ``2**22``, so ``r = ((h + 1 + n) >> (s - 23) + 1) >> 1`` with
``n = h >> 25``; the shift ``s - 23 = k - ex`` with ``k = 277 - ei`` is clamped to ``[0, 31]``
(0: ``r >= 2**23``, beyond every code; 31: ``r = 0``, and there ``v < 0.5``). The sign of ``x``
is applied to ``r``, then the clamp to ``[qmin, qmax]``. Zeros and subnormal inputs (exponent
field 0) read as ``mx = 2**23 + f``, a value below the smallest normal float: their code is 0
whenever the reference gives the smallest normal (and its negative) code 0, which
:func:`exact_params` checks with the reference itself; a scale that fails (``inv_scale`` above
about ``2**125``) keeps the table. NaN and +-Inf never reach the kernel (a program refuses
them before it runs, ``mico_first_nonfinite``): it would read +-Inf as +-2**128, which clamps
to qmax / qmin like the reference's infinite product unless ``inv_scale`` is below about
``2**-120``.

:func:`codes_exact` is the same integer arithmetic in numpy (the C kernel's model, for tests).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mico.quant.arithmetic import QFormat, inv_scale_f32, quantize

#: ``k = K_BASE - ei``: the right shift of ``h`` (before the last halving) is ``k - ex``
K_BASE = 277
#: the smallest normal float32, 2**-126
SMALLEST_NORMAL = np.float32(2.0**-126)
#: the code widths whose static input quantization takes the exact kernel: fewer instructions
#: than the table from 4 bits on (rv32: 8 bits 24 vs 43, 4 bits 23.6 vs 26.1); 3- and 2-bit
#: codes keep their table (28 / 12 bytes, 28.2 / 17.6 vs 29.2 / 23.4; benchmarks/input_quant.py)
EXACT_MIN_BITS = 4


@dataclass(frozen=True)
class ExactQuant:
    """The fields of the C struct ``MicoQuantExact``."""

    m: int  # inv_scale's 24-bit significand times 4 (26 bits)
    k: int  # K_BASE - inv_scale's (normalised) exponent
    qmin: int
    span: int  # qmax - qmin

    def c_fields(self) -> dict[str, int]:
        return {"m": self.m, "k": self.k, "qmin": self.qmin, "span": self.span}


def _significand(inv: np.float32) -> tuple[int, int]:
    """``(mi, ei)`` with ``inv = mi * 2**(ei - 150)``, ``mi`` in ``[2**23, 2**24)``."""
    u = int(np.asarray(inv, dtype=np.float32).view(np.uint32))
    field, frac = (u >> 23) & 0xFF, u & 0x7FFFFF
    if field:
        return frac | 0x800000, field
    shift = 24 - frac.bit_length()  # a subnormal: normalise, the exponent goes below 1
    return frac << shift, 1 - shift


def _zero_below_normals(scale: float, fmt: QFormat) -> bool:
    """Whether the reference gives code 0 to +-2**-126, hence (monotonic) to every subnormal
    and zero input."""
    x = torch.tensor([SMALLEST_NORMAL, -SMALLEST_NORMAL], dtype=torch.float32)
    return bool(torch.all(quantize(x, scale, fmt) == 0))


def exact_params(scale: float, fmt: QFormat) -> ExactQuant | None:
    """The constants of the exact kernel at ``scale``, or None where it does not apply: 1-bit
    codes (binary or not; their table is one entry), an ``inv_scale`` that is 0 or infinite in
    float32, or subnormal inputs that would not all round to code 0 (``inv_scale`` above about
    ``2**125``)."""
    if fmt.bits < 2:  # 1-bit codes: a table of one entry
        return None
    inv = inv_scale_f32(scale)
    if not (np.isfinite(inv) and inv > 0) or not _zero_below_normals(scale, fmt):
        return None
    mi, ei = _significand(inv)
    return ExactQuant(m=mi << 2, k=K_BASE - ei, qmin=fmt.qmin, span=fmt.qmax - fmt.qmin)


def exact_preferred(fmt: QFormat) -> bool:
    """Whether static input quantization to ``fmt`` takes the exact kernel (when
    :func:`exact_params` allows) rather than the threshold table."""
    return not fmt.binary and fmt.bits >= EXACT_MIN_BITS


def codes_exact(x: np.ndarray, p: ExactQuant) -> np.ndarray:
    """The codes ``mico_quantize_f32_exact_b*`` gives float32 ``x`` (its integer steps in numpy;
    for tests)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.int64)
    mx = ((u << 8) & 0xFFFFFFFF) | 0x80000000
    h = (mx * p.m) >> 32  # mulhu: below 2**26
    h = h + (h >> 25) + 1
    sh = np.clip(p.k - ((u >> 23) & 0xFF), 0, 31)
    r = ((h >> sh) + 1) >> 1
    t = np.where(u >> 31 == 1, -r, r) - p.qmin
    return p.qmin + np.clip(t, 0, p.span)
