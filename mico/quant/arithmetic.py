"""The quantization arithmetic, written once.

How a real number becomes a b-bit integer code, and how an int32 accumulator is rescaled to the
next layer's codes. Fake-quant layers (torch), the reference executor (numpy) and the C kernels in
``mico/csrc/mico_quant.h`` all follow these functions; tests hold the C output to them bit for bit.

Rules
-----
* Codes: ``unsigned`` b-bit codes span ``[0, 2**b - 1]``; ``signed`` codes with b >= 2 are
  symmetric, ``[-(2**(b-1) - 1), 2**(b-1) - 1]`` (so 2-bit signed is ternary); signed 1-bit codes
  are binary ``{-1, +1}`` (the sign, zero counts as +1). Asymmetric (zero-point) codes are
  unsigned codes shifted by their zero point z: ``[-z, 2**b - 1 - z]`` (see :class:`QFormat`).
* Rounding: half away from zero, evaluated in float32 as ``x * inv_scale`` where
  ``inv_scale = float32(1 / scale)``: a C compiler reproduces that exactly.
* Requantization: ``acc * M`` with ``M = m * 2**-shift``, ``m`` a 31-bit integer, computed in 64-bit
  integers and rounded half away from zero, then clamped to the output code range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from mico.errors import PlanError, brief

MIN_BITS = 1
MAX_BITS = 8
INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
MULTIPLIER_BITS = 31  # m lies in [2**30, 2**31)
MAX_SHIFT = 62


TERNARY = 1.58
"""The ternary bit-width (log2 3), as MiCo writes it: codes {-1, 0, +1} stored in 2 bits."""

BitWidth = int | float
_BITS_HELP = f"an integer from {MIN_BITS} to {MAX_BITS} or {TERNARY} (ternary)"


def is_ternary(bits: object) -> bool:
    """True for MiCo's ternary bit-width 1.58 (or the words ``ternary`` / ``t``)."""
    if isinstance(bits, str):
        return bits.strip().lower() in ("t", "ternary", "1.58")
    if isinstance(bits, bool) or not isinstance(bits, int | float | np.integer | np.floating):
        return False
    if isinstance(bits, int | np.integer) and not -1 < int(bits) < 3:  # float() of 10**400 fails
        return False
    return math.isclose(float(bits), TERNARY, abs_tol=1e-6)


def check_bits(bits: object, what: str = "bit-width", ternary: bool = True) -> BitWidth:
    """Return ``bits`` as an ``int`` in [1, 8] (or :data:`TERNARY`), else raise PlanError.

    ``ternary=False`` is for storage widths, which are always whole numbers.
    """
    if ternary and is_ternary(bits):
        return TERNARY
    allowed = _BITS_HELP if ternary else f"an integer from {MIN_BITS} to {MAX_BITS}"
    whole = isinstance(bits, int | np.integer) or (
        isinstance(bits, float | np.floating) and float(bits).is_integer()
    )
    if isinstance(bits, bool) or not whole:
        raise PlanError(
            f"{what} {brief(bits)} is not a whole number; use {allowed} "
            f"(the range {MIN_BITS}..{MAX_BITS})"
        )
    if not MIN_BITS <= int(bits) <= MAX_BITS:
        raise PlanError(
            f"{what} is {brief(bits)}, outside the allowed range {MIN_BITS}..{MAX_BITS}; "
            f"use {allowed}"
        )
    return int(bits)


def storage_bits(bits: BitWidth) -> int:
    """Bits one code occupies when packed: 2 for ternary, else the bit-width itself."""
    return 2 if is_ternary(bits) else int(check_bits(bits))


def format_bits(bits: BitWidth) -> str:
    """``8``, ``4``… or ``1.58`` for ternary: the form plans are written in."""
    return str(TERNARY) if is_ternary(bits) else str(int(bits))


@dataclass(frozen=True)
class QFormat:
    """The integer code range of a b-bit quantized value.

    ``zero`` (unsigned formats of 2 or more bits only) makes the format *asymmetric*: codes are
    the shifted codes ``c = q - zero`` of the textbook zero-point scheme
    ``q = clamp(round(x / s) + zero, 0, 2**b - 1)``, so they span ``[-zero, 2**b - 1 - zero]``
    and ``x ~= s * c``. Code 0 is still the real 0 (padding, bias, ReLU need no correction);
    only storage adds the zero point back (a packed field holds ``c + zero``).
    """

    bits: int
    signed: bool
    zero: int = 0

    def __post_init__(self) -> None:
        check_bits(self.bits, "code width", ternary=False)
        if isinstance(self.zero, bool) or not isinstance(self.zero, int | np.integer):
            raise PlanError(f"a zero point is an integer, got {brief(self.zero)}")
        if self.zero:
            if self.signed or self.bits < 2:
                raise PlanError(
                    f"a zero point ({self.zero}) needs unsigned codes of 2 or more bits, not "
                    f"{'int' if self.signed else 'uint'}{self.bits}; binary and ternary "
                    "activations are always symmetric"
                )
            if not 0 <= int(self.zero) <= 2**self.bits - 1:
                raise PlanError(
                    f"zero point {self.zero} is outside [0, {2**self.bits - 1}] for "
                    f"{self.bits}-bit codes"
                )
            object.__setattr__(self, "zero", int(self.zero))

    @classmethod
    def for_bits(cls, bits: BitWidth, signed: bool, zero: int = 0) -> QFormat:
        """The code format of a layer bit-width: ternary is signed 2-bit ({-1, 0, +1}).

        ``zero`` applies to unsigned codes of 2 or more bits (asymmetric activations).
        """
        if is_ternary(bits):
            return cls(2, True)
        return cls(storage_bits(bits), signed, 0 if signed else int(zero))

    @classmethod
    def asymmetric(cls, bits: int, zero: int) -> QFormat:
        """Shifted codes ``[-zero, 2**bits - 1 - zero]`` (zero 0: plain unsigned codes)."""
        return cls(int(bits), False, int(zero))

    @property
    def binary(self) -> bool:
        """Signed 1-bit codes are {-1, +1}: there is no zero."""
        return self.signed and self.bits == 1

    @property
    def is_asymmetric(self) -> bool:
        """Codes with a non-zero zero point (stored as ``code + zero``)."""
        return self.zero != 0

    @property
    def negative(self) -> bool:
        """Whether codes can be negative (signed, or asymmetric)."""
        return self.signed or self.zero > 0

    @property
    def qmin(self) -> int:
        if not self.signed:
            return -self.zero
        return -1 if self.binary else -(2 ** (self.bits - 1) - 1)

    @property
    def qmax(self) -> int:
        if not self.signed:
            return 2**self.bits - 1 - self.zero
        return 1 if self.binary else 2 ** (self.bits - 1) - 1

    @property
    def ctype(self) -> str:
        """The C type one unpacked code is stored in."""
        if self.zero:
            return "int16_t"
        return "int8_t" if self.signed else "uint8_t"

    def __str__(self) -> str:
        base = f"{'int' if self.signed else 'uint'}{self.bits}"
        return f"{base}z{self.zero}" if self.zero else base


def _xp(x: Any) -> Any:
    """The array module of ``x``: torch for tensors, numpy otherwise."""
    return torch if isinstance(x, torch.Tensor) else np


def round_half_away(v: Any) -> Any:
    """Round to the nearest integer, ties away from zero (C's ``roundf``), in ``v``'s precision.

    Computed as ``f = floor(|v|)`` plus one when ``|v| - f >= 0.5``: the fractional part is exact
    in binary floating point, so unlike ``floor(|v| + 0.5)`` nothing rounds twice (the float
    just below 0.5 goes to 0). ``mico_round_half_away`` in C does the same operations.
    """
    xp = _xp(v)
    a = xp.abs(v)
    f = xp.floor(a)
    half = v.new_tensor(0.5) if xp is torch else np.asarray(0.5, dtype=np.asarray(v).dtype)
    r = xp.where(a - f >= half, f + 1, f)
    return xp.where(v < 0, -r, r)


def inv_scale_f32(scale: float) -> np.float32:
    """The float32 reciprocal that every quantizer multiplies by."""
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"a quantization scale must be a positive finite number, got {scale}")
    return np.float32(1.0 / float(scale))


def _inv_scales(scale: Any, xp: Any) -> Any:
    """float32 reciprocals of a scalar or per-channel scale (``1/scale`` in float64, rounded).

    Dividing in float64 and rounding once to float32 equals C's float32 ``1.0f / s`` for
    float32 ``s``, so run-time (dynamic) scales reproduce exactly too.
    """
    if xp is torch and isinstance(scale, torch.Tensor):
        s64 = scale.detach().to(torch.float64)
        if not bool(torch.all((s64 > 0) & torch.isfinite(s64))):
            raise ValueError("quantization scales must be positive finite numbers")
        return (1.0 / s64).to(torch.float32)
    if np.ndim(scale) == 0:
        inv = inv_scale_f32(float(scale))
        return torch.tensor(float(inv), dtype=torch.float32) if xp is torch else inv
    s64 = np.asarray(scale, dtype=np.float64)
    if not np.all((s64 > 0) & np.isfinite(s64)):
        raise ValueError("quantization scales must be positive finite numbers")
    inv = (1.0 / s64).astype(np.float32)
    return torch.from_numpy(inv) if xp is torch else inv


def quantize(x: Any, scale: Any, fmt: QFormat) -> Any:
    """Real values to integer codes (same dtype as ``x``, integral values), float32 rounding.

    Works on numpy arrays and torch tensors alike; the arithmetic is float32 in both.
    ``scale`` is a positive number or an array broadcastable against ``x`` (per channel).
    """
    xp = _xp(x)
    inv = _inv_scales(scale, xp)
    v = x.to(torch.float32) * inv if xp is torch else np.asarray(x, dtype=np.float32) * inv
    if fmt.binary:
        one = v.new_tensor(1.0) if xp is torch else np.float32(1.0)
        return xp.where(v >= 0, one, -one)
    return xp.clip(round_half_away(v), fmt.qmin, fmt.qmax)


def dequantize(q: Any, scale: Any) -> Any:
    """Integer codes back to reals."""
    return q * scale


def scale_f32(scale: Any) -> torch.Tensor:
    """A scale (number, array or tensor) as the float32 tensor that dequantizes codes."""
    if isinstance(scale, torch.Tensor):
        return scale.detach().to(torch.float32)
    return torch.as_tensor(np.asarray(scale, dtype=np.float32))


def fake_quantize(x: torch.Tensor, scale: Any, fmt: QFormat) -> torch.Tensor:
    """Quantize-dequantize with a straight-through gradient (for calibration and QAT).

    The value is exactly ``codes * float32(scale)``; the gradient with respect to ``x`` is 1.
    """
    q = quantize(x.detach(), scale, fmt) * scale_f32(scale)
    return q + (x - x.detach())  # exactly q (x - x is 0), gradient 1 with respect to x


def lsq_fake_quantize(x: torch.Tensor, step: torch.Tensor, fmt: QFormat) -> torch.Tensor:
    """Fake-quantize with a learned step size (LSQ, Esser et al. 2020).

    The value is exactly :func:`fake_quantize` with ``scale = step``; gradients follow LSQ:
    straight through inside the code range for ``x``, and for ``step`` the scaled
    ``round(v) - v`` (inside) or the clamp bound (outside), ``v = x / step``.
    """
    step = step.abs().clamp_min(1e-12)
    top = max(fmt.qmax, -fmt.qmin, 1)
    grad_scale = 1.0 / math.sqrt(max(x.numel() // max(step.numel(), 1), 1) * top)
    s = step * grad_scale + (step - step * grad_scale).detach()  # value step, scaled gradient
    v = torch.clamp(x / s, fmt.qmin, fmt.qmax)
    if fmt.binary:
        rounded = torch.where(v >= 0, torch.ones_like(v), -torch.ones_like(v))
    else:
        rounded = torch.round(v)
    soft = (v + (rounded - v).detach()) * s
    exact = quantize(x.detach(), step.detach(), fmt) * step.detach().to(torch.float32)
    return exact + (soft - soft.detach())  # exact value, LSQ gradients


def dynamic_scale(x: torch.Tensor, fmt: QFormat, absmean: bool = False) -> torch.Tensor:
    """Per-sample scales computed at run time (dynamic activations), float32, shape (N, 1, …).

    ``max |x| / qmax`` over each sample (``max x`` for unsigned codes), or ``mean |x|`` for
    binary and ternary codes. An all-zero sample gets scale 1, and so does a sample of values so
    tiny (denormal) that the scale's float32 reciprocal would overflow: its codes are all 0
    instead of ``0 * inf = NaN`` (the C kernel applies the same rule).
    """
    flat = x.detach().to(torch.float32).reshape(x.shape[0], -1)
    if absmean:  # float64 sum, one rounding: C sums in any order and gets the same float32
        s = (flat.abs().to(torch.float64).sum(dim=1) / flat.shape[1]).to(torch.float32)
    else:
        amax = flat.abs().amax(dim=1) if fmt.signed else flat.clamp_min(0).amax(dim=1)
        s = amax / torch.tensor(float(fmt.qmax), dtype=torch.float32)
    inv = (1.0 / s.to(torch.float64)).to(torch.float32)  # as quantize computes it
    s = torch.where((s > 0) & torch.isfinite(inv), s, torch.ones_like(s))
    return s.reshape(x.shape[0], *([1] * (x.dim() - 1)))


def dynamic_asymmetric(x: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample scales and zero points of asymmetric codes, float32, shapes (N, 1, ...).

    Over each sample, with ``lo = min(min x, 0)`` and ``hi = max(max x, 0)`` (float32):
    ``s = (hi - lo) / (2**b - 1)`` and ``z = clamp(round_half_away(-lo * float32(1 / s)), 0,
    2**b - 1)``, every step in float32 as ``mico_dyn_quantize`` computes it in C. An all-zero
    (or denormal) sample gets ``s = 1, z = 0``. Codes are then ``quantize(x, s, fmt)`` with
    ``fmt = QFormat.asymmetric(bits, z)``, i.e. :func:`quantize_shifted`.
    """
    flat = x.detach().to(torch.float32).reshape(x.shape[0], -1)
    zero_f = torch.zeros((), dtype=torch.float32)
    lo = torch.minimum(flat.amin(dim=1), zero_f)
    hi = torch.maximum(flat.amax(dim=1), zero_f)
    top = float(2 ** int(bits) - 1)
    s = (hi - lo) / torch.tensor(top, dtype=torch.float32)
    inv = (1.0 / s.to(torch.float64)).to(torch.float32)
    ok = (s > 0) & torch.isfinite(inv)
    s = torch.where(ok, s, torch.ones_like(s))
    inv = torch.where(ok, inv, torch.ones_like(inv))
    z = torch.clamp(round_half_away(-lo * inv), 0.0, top)
    z = torch.where(ok, z, torch.zeros_like(z))
    shape = (x.shape[0], *([1] * (x.dim() - 1)))
    return s.reshape(shape), z.reshape(shape)


def quantize_shifted(x: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int) -> Any:
    """Asymmetric codes with per-sample zero points: ``clamp(round(x / s), -z, 2**b - 1 - z)``.

    The same float32 arithmetic as :func:`quantize`; ``scale`` and ``zero`` broadcast against
    ``x`` (as :func:`dynamic_asymmetric` returns them).
    """
    inv = _inv_scales(scale, torch)
    v = round_half_away(x.to(torch.float32) * inv)
    return torch.minimum(torch.maximum(v, -zero), float(2 ** int(bits) - 1) - zero)


def quantize_multiplier(real: float) -> tuple[int, int]:
    """Split a positive real multiplier into ``(m, shift)`` with ``real ~= m * 2**-shift``.

    ``m`` is in ``[2**30, 2**31)`` unless the multiplier is so small that every result rounds
    to zero, in which case ``m`` may shrink (shift is capped at 62).
    """
    if not (real > 0 and math.isfinite(real)):
        raise ValueError(f"a requantization multiplier must be positive and finite, got {real}")
    mantissa, exponent = math.frexp(real)  # real = mantissa * 2**exponent, mantissa in [0.5, 1)
    m = round(mantissa * (1 << MULTIPLIER_BITS))
    shift = MULTIPLIER_BITS - exponent
    if m == 1 << MULTIPLIER_BITS:  # mantissa rounded up to 1.0
        m //= 2
        shift -= 1
    if shift < 1:
        raise ValueError(
            f"requantization multiplier {real:g} is too large (>= 2**30); the scales of "
            "consecutive layers are inconsistent"
        )
    if shift > MAX_SHIFT:
        m >>= shift - MAX_SHIFT
        shift = MAX_SHIFT
    return int(m), int(shift)


def requantize(acc: np.ndarray, m: int, shift: int, fmt: QFormat) -> np.ndarray:
    """Rescale int32 accumulators to output codes: ``clamp(round_half_away(acc * m / 2**shift))``.

    Pure 64-bit integer arithmetic, identical to ``mico_requant`` in C.
    """
    a = np.asarray(acc, dtype=np.int64)
    v = a * np.int64(m)
    r = (np.abs(v) + np.int64(1 << (shift - 1))) >> np.int64(shift)
    r = np.where(v < 0, -r, r)
    if fmt.binary:
        return np.where(r >= 0, 1, -1).astype(np.int64)
    return np.clip(r, fmt.qmin, fmt.qmax).astype(np.int64)


def quantize_bias(bias: np.ndarray, scale: float) -> np.ndarray:
    """Bias to int32 at the accumulator's scale (``s_in * s_w``), rounded half away from zero."""
    q = round_half_away(np.asarray(bias, dtype=np.float64) / float(scale))
    return np.clip(q, INT32_MIN, INT32_MAX).astype(np.int64)
