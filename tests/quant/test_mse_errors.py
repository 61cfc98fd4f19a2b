"""The MSE scale search's buffered error computation equals the plain expression bit for bit."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mico.quant.arithmetic import QFormat, round_half_away
from mico.quant.scales import _MSE_GRID, _squared_errors


def _plain(x: np.ndarray, fmt: QFormat, scales: np.ndarray) -> np.ndarray:
    """The errors as one expression: the definition the buffered version must reproduce."""
    inv = (1.0 / scales).astype(np.float32)[:, None]
    q = np.clip(round_half_away(x[None, :] * inv), fmt.qmin, fmt.qmax)
    return np.mean((q * scales[:, None] - x[None, :]) ** 2, axis=1)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 2000),
    bits=st.integers(2, 8),
    signed=st.booleans(),
    seed=st.integers(0, 2**16),
    spread=st.floats(1e-6, 1e6),
)
def test_squared_errors_equal_the_plain_expression(n, bits, signed, seed, spread):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * spread).astype(np.float32)
    fmt = QFormat(bits, signed)
    full = max(float(np.abs(x).max()), 1e-30) / fmt.qmax
    scales = full * _MSE_GRID
    x[::5] = (np.float32(rng.integers(-9, 10)) + np.float32(0.5)) * np.float32(scales[7])  # ties
    np.testing.assert_array_equal(_squared_errors(x, fmt, scales), _plain(x, fmt, scales))


def test_squared_errors_at_halves_zeros_and_chunks():
    """Exact halves (ties go away from zero), the float below 0.5, signed zeros, and more
    values than one chunk of ratios holds."""
    x = np.float32([0.5, -0.5, 1.5, -1.5, 0.49999997, -0.49999997, 0.0, -0.0, 7.5, -8.5, 1e3])
    for fmt in (QFormat(4, True), QFormat(3, False), QFormat(3, False, 2)):
        scales = np.array([1.0, 0.5, 0.25, 0.1])
        np.testing.assert_array_equal(_squared_errors(x, fmt, scales), _plain(x, fmt, scales))
    big = np.random.default_rng(0).standard_normal(60_000).astype(np.float32)
    scales = 0.05 * _MSE_GRID  # 46 ratios in two chunks (33 and 13)
    fmt = QFormat(8, True)
    np.testing.assert_array_equal(_squared_errors(big, fmt, scales), _plain(big, fmt, scales))
