"""Choosing quantization scales: max, mse, binary mean-magnitude, degenerate inputs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mico.quant.arithmetic import QFormat, dequantize, quantize
from mico.quant.scales import choose_scale

ALL_FORMATS = [QFormat(b, s) for b in range(1, 9) for s in (True, False)]
MULTIBIT_FORMATS = [f for f in ALL_FORMATS if not f.binary]


def _mse(x: np.ndarray, scale: float, fmt: QFormat) -> float:
    x64 = np.asarray(x, dtype=np.float64)
    q = quantize(np.asarray(x, dtype=np.float32), scale, fmt).astype(np.float64)
    return float(np.mean((q * scale - x64) ** 2))


@pytest.mark.parametrize("fmt", MULTIBIT_FORMATS, ids=str)
def test_max_maps_largest_magnitude_to_qmax(fmt: QFormat) -> None:
    rng = np.random.default_rng(fmt.bits)
    x = rng.normal(size=500).astype(np.float32)
    x[17] = -5.0 if fmt.signed else 5.0  # the largest magnitude (negative for signed)
    scale = choose_scale(x, fmt, "max")
    amax = 5.0 if fmt.signed else float(x.max())
    assert scale == pytest.approx(amax / fmt.qmax, rel=1e-6)
    q = quantize(x, scale, fmt)
    if fmt.signed:
        assert q[17] == fmt.qmin == -fmt.qmax
        assert np.abs(q).max() == fmt.qmax
    else:
        assert q.max() == fmt.qmax
        assert q.min() == 0


def test_max_unsigned_uses_maximum_not_magnitude() -> None:
    x = np.array([-10.0, 0.5, 2.0], dtype=np.float32)
    assert choose_scale(x, QFormat(4, False), "max") == pytest.approx(2.0 / 15)
    assert choose_scale(x, QFormat(4, True), "max") == pytest.approx(10.0 / 7)


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 400),
    sigma=st.floats(1e-3, 1e3),
    fmt=st.sampled_from(MULTIBIT_FORMATS),
)
def test_mse_error_never_exceeds_max(seed: int, n: int, sigma: float, fmt: QFormat) -> None:
    x = (np.random.default_rng(seed).normal(size=n) * sigma).astype(np.float32)
    s_max = choose_scale(x, fmt, "max")
    s_mse = choose_scale(x, fmt, "mse")
    assert 0 < s_mse <= s_max * (1 + 1e-9)  # mse only ever clips the range
    assert _mse(x, s_mse, fmt) <= _mse(x, s_max, fmt) * (1 + 1e-5) + 1e-30


def test_mse_clips_outliers_at_low_bits() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=5000).astype(np.float32)
    x[0] = 40.0  # one outlier
    fmt = QFormat(3, True)
    s_max, s_mse = choose_scale(x, fmt, "max"), choose_scale(x, fmt, "mse")
    assert s_mse < 0.5 * s_max
    assert _mse(x, s_mse, fmt) < 0.5 * _mse(x, s_max, fmt)


def test_default_method_is_mse() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=1000).astype(np.float32)
    fmt = QFormat(2, True)
    assert choose_scale(x, fmt) == choose_scale(x, fmt, "mse")
    assert choose_scale(x, fmt) != choose_scale(x, fmt, "max")


@pytest.mark.parametrize("method", ["max", "mse"])
def test_binary_uses_mean_magnitude(method: str) -> None:
    x = np.array([-3.0, 1.0, 0.5, -0.5, 0.0], dtype=np.float32)
    assert choose_scale(x, QFormat(1, True), method) == pytest.approx(1.0)  # 5.0 / 5
    y = np.array([[2.0, -6.0], [4.0, 0.0]], dtype=np.float32)
    assert choose_scale(y, QFormat(1, True), method) == pytest.approx(3.0)


@pytest.mark.parametrize("method", ["max", "mse"])
@pytest.mark.parametrize("fmt", ALL_FORMATS, ids=str)
def test_all_zero_returns_one(fmt: QFormat, method: str) -> None:
    assert choose_scale(np.zeros((4, 4), dtype=np.float32), fmt, method) == 1.0


@pytest.mark.parametrize("method", ["max", "mse"])
def test_empty_and_non_positive_unsigned_return_one(method: str) -> None:
    assert choose_scale(np.array([], dtype=np.float32), QFormat(8, True), method) == 1.0
    assert choose_scale(np.array([-3.0, -1.0]), QFormat(8, False), method) == 1.0


def test_returns_python_float() -> None:
    x = np.linspace(-1, 1, 11, dtype=np.float32)
    for method in ("max", "mse"):
        assert type(choose_scale(x, QFormat(4, True), method)) is float


@pytest.mark.parametrize("method", ["min-max", "MSE", "", "percent"])
def test_unknown_method(method: str) -> None:
    with pytest.raises(ValueError, match=r"unknown scale method.*use one of max, absmax") as info:
        choose_scale(np.ones(3, dtype=np.float32), QFormat(8, True), method)  # type: ignore[arg-type]
    assert repr(method) in str(info.value)


def test_dequantize_consistency_with_chosen_scale() -> None:
    """Values inside the max range reconstruct to within half a step."""
    x = np.linspace(-2.0, 2.0, 101, dtype=np.float32)
    fmt = QFormat(6, True)
    scale = choose_scale(x, fmt, "max")
    err = np.abs(dequantize(quantize(x, scale, fmt), scale) - x)
    assert err.max() <= scale / 2 * (1 + 1e-5)


def test_max_sees_largest_magnitude_of_large_inputs() -> None:
    x = np.full(200_001, 0.5, dtype=np.float32)
    x[1] = 100.0  # skipped by the stride-2 subsample
    assert choose_scale(x, QFormat(8, True), "max") == pytest.approx(100.0 / 127)
