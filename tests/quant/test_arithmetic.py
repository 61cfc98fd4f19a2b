"""The quantization arithmetic: code ranges, rounding, quantize/requantize, multipliers."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from mico.errors import PlanError
from mico.quant.arithmetic import (
    INT32_MAX,
    INT32_MIN,
    QFormat,
    check_bits,
    dequantize,
    fake_quantize,
    inv_scale_f32,
    quantize,
    quantize_bias,
    quantize_multiplier,
    requantize,
    round_half_away,
)

ALL_FORMATS = [QFormat(b, s) for b in range(1, 9) for s in (True, False)]
formats = st.sampled_from(ALL_FORMATS)


# --------------------------------------------------------------------------- QFormat ranges


@pytest.mark.parametrize(
    ("bits", "signed", "qmin", "qmax"),
    [
        (8, True, -127, 127),
        (4, True, -7, 7),
        (3, True, -3, 3),
        (2, True, -1, 1),  # ternary
        (1, True, -1, 1),  # binary {-1, +1}
        (8, False, 0, 255),
        (4, False, 0, 15),
        (2, False, 0, 3),
        (1, False, 0, 1),
    ],
)
def test_qformat_ranges(bits: int, signed: bool, qmin: int, qmax: int) -> None:
    fmt = QFormat(bits, signed)
    assert (fmt.qmin, fmt.qmax) == (qmin, qmax)


@pytest.mark.parametrize("bits", range(2, 9))
def test_signed_multibit_is_symmetric_narrow(bits: int) -> None:
    fmt = QFormat(bits, True)
    assert fmt.qmin == -fmt.qmax == -(2 ** (bits - 1) - 1)
    assert not fmt.binary


@pytest.mark.parametrize("bits", range(1, 9))
def test_unsigned_range_is_full(bits: int) -> None:
    fmt = QFormat(bits, False)
    assert (fmt.qmin, fmt.qmax) == (0, 2**bits - 1)
    assert not fmt.binary


def test_only_signed_one_bit_is_binary() -> None:
    assert QFormat(1, True).binary
    assert not QFormat(1, False).binary
    assert not QFormat(2, True).binary


def test_qformat_str_and_ctype() -> None:
    assert str(QFormat(8, True)) == "int8"
    assert str(QFormat(3, False)) == "uint3"
    assert QFormat(4, True).ctype == "int8_t"
    assert QFormat(4, False).ctype == "uint8_t"


@pytest.mark.parametrize("bits", [0, 9, -1])
def test_qformat_rejects_out_of_range_bits(bits: int) -> None:
    with pytest.raises(PlanError, match=r"1\.\.8"):
        QFormat(bits, True)


# --------------------------------------------------------------------------- check_bits


@pytest.mark.parametrize("bits", range(1, 9))
def test_check_bits_accepts_1_to_8(bits: int) -> None:
    assert check_bits(bits) == bits
    result = check_bits(np.int64(bits))
    assert result == bits
    assert type(result) is int


@pytest.mark.parametrize("bits", [0, 9])
def test_check_bits_rejects_out_of_range(bits: int) -> None:
    with pytest.raises(PlanError) as info:
        check_bits(bits, "weight bit-width")
    msg = str(info.value)
    assert "1..8" in msg
    assert "weight bit-width" in msg
    assert str(bits) in msg


@pytest.mark.parametrize("bits", [True, False, 2.5, "4", None])
def test_check_bits_rejects_non_integers(bits: object) -> None:
    with pytest.raises(PlanError) as info:
        check_bits(bits)  # type: ignore[arg-type]
    msg = str(info.value)
    assert "is not a whole number" in msg
    assert "1 to 8" in msg and "1..8" in msg
    assert "1.58 (ternary)" in msg
    assert repr(bits) in msg


def test_plan_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        check_bits(0)


# --------------------------------------------------------------------------- round_half_away

TIES = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.0, 0.4, -0.4, 0.6, -0.6, 3.0, -3.0]
ROUNDED = [1.0, 2.0, 3.0, -1.0, -2.0, -3.0, 0.0, 0.0, -0.0, 1.0, -1.0, 3.0, -3.0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_round_half_away_numpy(dtype: type) -> None:
    out = round_half_away(np.array(TIES, dtype=dtype))
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, np.array(ROUNDED, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_round_half_away_torch(dtype: torch.dtype) -> None:
    out = round_half_away(torch.tensor(TIES, dtype=dtype))
    assert isinstance(out, torch.Tensor)
    assert out.dtype == dtype
    assert out.tolist() == ROUNDED


def test_round_half_away_differs_from_bankers_rounding() -> None:
    v = np.array([0.5, 2.5, -0.5, -2.5], dtype=np.float32)
    assert np.round(v).tolist() == [0.0, 2.0, -0.0, -2.0]  # numpy: ties to even
    assert round_half_away(v).tolist() == [1.0, 3.0, -1.0, -3.0]


def test_round_half_away_just_below_half_rounds_down() -> None:
    below_half = np.nextafter(np.float32(0.5), np.float32(0.0))  # 0.49999997
    assert round_half_away(np.array([below_half], dtype=np.float32)).tolist() == [0.0]


# --------------------------------------------------------------------------- quantize

f32_arrays = hnp.arrays(
    np.float32,
    hnp.array_shapes(min_dims=1, max_dims=2, max_side=16),
    elements=st.floats(-1e4, 1e4, allow_nan=False, allow_infinity=False, width=32),
)
scales = st.floats(1e-4, 1e2, allow_nan=False, allow_infinity=False)


@settings(max_examples=200, deadline=None)
@given(x=f32_arrays, scale=scales, fmt=formats)
def test_quantize_codes_integral_in_range_and_numpy_matches_torch(
    x: np.ndarray, scale: float, fmt: QFormat
) -> None:
    q_np = quantize(x, scale, fmt)
    q_t = quantize(torch.from_numpy(x.copy()), scale, fmt)
    assert isinstance(q_np, np.ndarray)
    assert isinstance(q_t, torch.Tensor)
    assert q_np.dtype == np.float32
    assert q_t.dtype == torch.float32
    assert q_np.shape == x.shape
    assert np.all(q_np == np.round(q_np))
    assert q_np.min() >= fmt.qmin
    assert q_np.max() <= fmt.qmax
    if fmt.binary:
        assert set(np.unique(q_np).tolist()) <= {-1.0, 1.0}
    np.testing.assert_array_equal(q_np, q_t.numpy())


@settings(max_examples=200, deadline=None)
@given(x=f32_arrays, scale=scales, fmt=formats)
def test_quantize_matches_c_reference(x: np.ndarray, scale: float, fmt: QFormat) -> None:
    """Reference, element by element, in the C kernel's float32 arithmetic (mico_quant.c):
    ``v = x * inv_scale``; ``a = fabsf(v)``, ``r = floorf(a)``, ``r += 1`` when ``a - r >= 0.5f``,
    with the sign of v; clamp."""
    inv = np.float32(1.0 / scale)
    expected = []
    for xi in x.ravel():
        v = np.float32(xi * inv)
        if fmt.binary:
            expected.append(1.0 if v >= 0 else -1.0)
            continue
        mag = np.float32(abs(v))
        r = float(np.floor(mag))
        r = r + 1 if np.float32(mag - np.float32(r)) >= np.float32(0.5) else r
        r = -r if v < 0 else r
        expected.append(float(min(max(r, fmt.qmin), fmt.qmax)))
    got = quantize(x, scale, fmt).ravel()
    assert got.tolist() == expected


def test_quantize_known_values() -> None:
    x = np.array([-1.0, -0.25, -0.125, 0.0, 0.125, 0.3, 2.0], dtype=np.float32)
    # x / 0.25 = [-4, -1, -0.5, 0, 0.5, 1.2, 8]
    np.testing.assert_array_equal(quantize(x, 0.25, QFormat(3, True)), [-3, -1, -1, 0, 1, 1, 3])
    np.testing.assert_array_equal(quantize(x, 0.25, QFormat(3, False)), [0, 0, 0, 0, 1, 1, 7])
    np.testing.assert_array_equal(quantize(x, 0.25, QFormat(1, True)), [-1, -1, -1, 1, 1, 1, 1])
    np.testing.assert_array_equal(quantize(x, 0.25, QFormat(8, True)), [-4, -1, -1, 0, 1, 1, 8])


def test_quantize_binary_zero_is_plus_one() -> None:
    x = np.array([0.0, -0.0, -1e-30, 1e-30], dtype=np.float32)
    np.testing.assert_array_equal(quantize(x, 1.0, QFormat(1, True)), [1, 1, -1, 1])
    t = torch.tensor([0.0, -0.0, -1e-30, 1e-30])
    assert quantize(t, 1.0, QFormat(1, True)).tolist() == [1.0, 1.0, -1.0, 1.0]


@pytest.mark.parametrize("scale", [0.0, -1.0, math.inf, math.nan])
def test_quantize_rejects_bad_scale(scale: float) -> None:
    with pytest.raises(ValueError, match="positive finite"):
        quantize(np.ones(3, dtype=np.float32), scale, QFormat(8, True))
    with pytest.raises(ValueError, match="positive finite"):
        inv_scale_f32(scale)


def test_inv_scale_is_float32_reciprocal() -> None:
    inv = inv_scale_f32(0.1)
    assert isinstance(inv, np.float32)
    assert inv == np.float32(10.0)


def test_dequantize_multiplies_by_scale() -> None:
    np.testing.assert_array_equal(dequantize(np.array([-3.0, 0.0, 2.0]), 0.5), [-1.5, 0.0, 1.0])


# --------------------------------------------------------------------------- requantize


def _requant_reference(acc: int, m: int, shift: int, fmt: QFormat) -> int:
    exact = Fraction(acc * m, 2**shift)
    mag = abs(exact)
    r = int(mag + Fraction(1, 2))  # floor for non-negative: ties go up in magnitude
    r = -r if exact < 0 else r
    if fmt.binary:
        return 1 if r >= 0 else -1
    return min(max(r, fmt.qmin), fmt.qmax)


accs = st.lists(st.integers(-(2**24) + 1, 2**24 - 1), min_size=1, max_size=32)
reals = st.floats(1e-6, 1e3, exclude_min=True, exclude_max=True, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(acc=accs, real=reals, fmt=formats)
def test_requantize_matches_exact_reference(acc: list[int], real: float, fmt: QFormat) -> None:
    m, shift = quantize_multiplier(real)
    got = requantize(np.array(acc, dtype=np.int32), m, shift, fmt)
    assert got.dtype == np.int64
    assert got.tolist() == [_requant_reference(a, m, shift, fmt) for a in acc]


@settings(max_examples=100, deadline=None)
@given(shift=st.integers(1, 40), fmt=formats, k=st.integers(-200, 200))
def test_requantize_exact_ties_round_away(shift: int, fmt: QFormat, k: int) -> None:
    """acc * m / 2**shift exactly k + 1/2 (m = 1 * 2**(shift-1) scaled) rounds away from zero."""
    m = 2 ** (shift - 1)  # multiplier of exactly 1/2
    acc = np.array([2 * k + 1], dtype=np.int64)  # (2k+1)/2 = k + 1/2
    got = int(requantize(acc, m, shift, fmt)[0])
    expected = _requant_reference(2 * k + 1, m, shift, fmt)
    assert got == expected
    raw = k + 1 if k >= 0 else k  # away from zero
    if not fmt.binary:
        assert got == min(max(raw, fmt.qmin), fmt.qmax)


def test_requantize_known_values() -> None:
    m, shift = quantize_multiplier(0.5)
    assert (m, shift) == (2**30, 31)
    acc = np.array([-5, -3, -1, 0, 1, 3, 5, 1000, -1000])
    np.testing.assert_array_equal(
        requantize(acc, m, shift, QFormat(8, True)), [-3, -2, -1, 0, 1, 2, 3, 127, -127]
    )
    np.testing.assert_array_equal(
        requantize(acc, m, shift, QFormat(4, False)), [0, 0, 0, 0, 1, 2, 3, 15, 0]
    )
    np.testing.assert_array_equal(
        requantize(acc, m, shift, QFormat(1, True)), [-1, -1, -1, 1, 1, 1, 1, 1, -1]
    )


# --------------------------------------------------------------------------- quantize_multiplier

normal_reals = st.floats(2.0**-31, 2.0**29, allow_nan=False, allow_infinity=False)


@settings(max_examples=200, deadline=None)
@given(real=normal_reals)
def test_quantize_multiplier_precision(real: float) -> None:
    m, shift = quantize_multiplier(real)
    assert isinstance(m, int)
    assert isinstance(shift, int)
    assert 2**30 <= m < 2**31
    assert 1 <= shift <= 62
    approx = Fraction(m, 2**shift)
    rel = abs(approx - Fraction(real)) / Fraction(real)
    assert rel < Fraction(1, 2**29)


@pytest.mark.parametrize(
    ("real", "expected"),
    [(1.0, (2**30, 30)), (0.5, (2**30, 31)), (0.75, (3 * 2**29, 31)), (2.0**-20, (2**30, 50))],
)
def test_quantize_multiplier_exact_powers(real: float, expected: tuple[int, int]) -> None:
    assert quantize_multiplier(real) == expected


def test_quantize_multiplier_mantissa_rounding_up_to_one() -> None:
    real = 1.0 - 2.0**-40  # mantissa rounds to 2**31, renormalised to 2**30 with shift - 1
    m, shift = quantize_multiplier(real)
    assert (m, shift) == (2**30, 30)


def test_quantize_multiplier_tiny_caps_shift() -> None:
    m, shift = quantize_multiplier(2.0**-40)
    assert shift == 62
    assert m == 2**22
    assert Fraction(m, 2**shift) == Fraction(2) ** -40


@pytest.mark.parametrize("real", [0.0, -1.0, -1e-9, math.inf, -math.inf, math.nan])
def test_quantize_multiplier_rejects_non_positive_or_non_finite(real: float) -> None:
    with pytest.raises(ValueError, match="positive and finite"):
        quantize_multiplier(real)


def test_quantize_multiplier_rejects_too_large() -> None:
    with pytest.raises(ValueError, match="too large"):
        quantize_multiplier(2.0**30)


# --------------------------------------------------------------------------- quantize_bias


def test_quantize_bias_rounds_half_away_from_zero() -> None:
    bias = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49, -0.49, 0.0])
    np.testing.assert_array_equal(quantize_bias(bias, 1.0), [1, 2, 3, -1, -2, -3, 0, 0, 0])


def test_quantize_bias_divides_by_scale_and_clamps() -> None:
    out = quantize_bias(np.array([0.3, -0.3, 1e12, -1e12]), 0.1)
    assert out.dtype == np.int64
    assert out.tolist() == [3, -3, INT32_MAX, INT32_MIN]


# --------------------------------------------------------------------------- fake_quantize


@pytest.mark.parametrize(
    "fmt", [QFormat(8, True), QFormat(3, True), QFormat(4, False), QFormat(1, True)]
)
def test_fake_quantize_forward_and_straight_through_gradient(fmt: QFormat) -> None:
    torch.manual_seed(0)
    x = (torch.randn(4, 5) * 2).requires_grad_(True)
    scale = 0.25
    y = fake_quantize(x, scale, fmt)
    codes = quantize(x.detach(), scale, fmt)
    torch.testing.assert_close(y.detach(), dequantize(codes, scale), rtol=1e-6, atol=1e-6)
    # the output really is quantized (not the identity)
    assert not torch.allclose(y.detach(), x.detach())
    y.sum().backward()
    assert x.grad is not None
    assert torch.equal(x.grad, torch.ones_like(x))


def test_fake_quantize_gradient_passes_through_clamped_values() -> None:
    x = torch.tensor([-100.0, 0.1, 100.0], requires_grad=True)
    y = fake_quantize(x, 1.0, QFormat(2, True))
    assert y.detach().tolist() == [-1.0, 0.0, 1.0]
    (y * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert x.grad is not None
    assert x.grad.tolist() == [1.0, 2.0, 3.0]
