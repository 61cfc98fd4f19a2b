"""Fake quantization against an independent exact reference (Python integers and fractions).

The reference follows the documented rule, not mico's code: ``inv = float32(1 / scale)``,
``v = float32(float32(x) * inv)``, codes = round half away from zero of ``v``, clamped to the
QFormat range (binary: the sign, 0 -> +1), value = ``float32(code * float32(scale))``. Every
rounding to float32 is done here with integer arithmetic on :class:`fractions.Fraction`.
"""

from __future__ import annotations

import math
import zlib
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mico.quant.arithmetic import (
    TERNARY,
    QFormat,
    dynamic_scale,
    fake_quantize,
    lsq_fake_quantize,
    quantize,
    storage_bits,
)
from mico.quant.config import QuantConfig
from mico.quant.layers import BitConv1d, BitConv2d, BitLinear
from mico.quant.model import calibrate

TERNARY_FORMATS = [QFormat.for_bits(TERNARY, True), QFormat.for_bits(TERNARY, False)]
ALL_FORMATS = [QFormat(b, s) for b in range(1, 9) for s in (True, False)]
FORMATS_WITH_TERNARY = ALL_FORMATS + TERNARY_FORMATS
formats = st.sampled_from(FORMATS_WITH_TERNARY)

# --------------------------------------------------------------------------- exact reference


def f32(value: Fraction) -> Fraction:
    """Round an exact rational to the nearest float32 (ties to even), subnormals included."""
    if value == 0:
        return Fraction(0)
    sign = -1 if value < 0 else 1
    a = abs(value)
    e = a.numerator.bit_length() - a.denominator.bit_length() - 24
    while a >= Fraction(2) ** (e + 24):
        e += 1
    while a < Fraction(2) ** (e + 23):
        e -= 1
    e = max(e, -149)  # below the normal range the quantum stays 2**-149
    m = a / Fraction(2) ** e
    n = math.floor(m)
    rest = m - n
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and n % 2 == 1):
        n += 1
    return sign * n * Fraction(2) ** e


def ref_code(x: float, scale: float, fmt: QFormat) -> int:
    """The integer code of one float32 ``x`` at a float32 ``scale``."""
    inv = f32(1 / Fraction(scale))
    v = f32(Fraction(x) * inv)
    if fmt.binary:
        return 1 if v >= 0 else -1
    mag = abs(v)
    n = math.floor(mag)
    if mag - n >= Fraction(1, 2):
        n += 1
    code = n if v >= 0 else -n
    return min(max(code, fmt.qmin), fmt.qmax)


def ref_value(code: int, scale: float) -> Fraction:
    """``code * float32(scale)`` as float32 arithmetic does it."""
    return f32(code * Fraction(scale))


def exact(t: torch.Tensor) -> list[Fraction]:
    return [Fraction(float(v)) for v in t.detach().reshape(-1).tolist()]


def test_reference_f32_rounding_agrees_with_numpy() -> None:
    rng = np.random.default_rng(0)
    values = np.concatenate(
        [rng.normal(size=300) * 10.0 ** rng.integers(-40, 30, size=300), [1e-45, 3e-39, 0.1]]
    )
    for v in values:
        assert f32(Fraction(float(v))) == Fraction(float(np.float32(v))), v
    # a tie rounds to even: 1 + 2**-24 lies halfway between 1 and 1 + 2**-23
    assert f32(Fraction(1) + Fraction(1, 2**24)) == 1
    assert f32(Fraction(1) + Fraction(3, 2**24)) == 1 + Fraction(2, 2**23)


# --------------------------------------------------------------------------- strategies

f32_scales = st.floats(0.0009765625, 50.0, width=32, allow_nan=False, allow_infinity=False)


def _in_range_units(fmt: QFormat) -> st.SearchStrategy[float]:
    """Multiples of the scale whose codes are not clamped from above (binary: |u| in [.5, 2])."""
    if fmt.binary:
        return st.tuples(st.sampled_from([-1.0, 1.0]), st.floats(0.5, 2.0)).map(
            lambda p: p[0] * p[1]
        )
    low = -50.0 if not fmt.signed else fmt.qmin - 0.49  # unsigned: negatives clamp to 0 exactly
    return st.floats(low, fmt.qmax + 0.49, allow_nan=False)


@st.composite
def in_range_case(draw: st.DrawFn) -> tuple[QFormat, float, np.ndarray]:
    fmt = draw(formats)
    scale = draw(f32_scales)
    units = draw(st.lists(_in_range_units(fmt), min_size=1, max_size=40))
    x = (np.asarray(units, dtype=np.float64) * scale).astype(np.float32)
    return fmt, scale, x


wide_values = st.lists(
    st.floats(-1024.0, 1024.0, width=32, allow_nan=False, allow_infinity=False),
    min_size=1,
    max_size=40,
)


# --------------------------------------------------------------------------- per tensor


@settings(max_examples=50, deadline=None)
@given(fmt=formats, scale=f32_scales, values=wide_values)
def test_codes_equal_exact_reference_over_the_whole_range(
    fmt: QFormat, scale: float, values: list[float]
) -> None:
    x = torch.tensor(values, dtype=torch.float32)
    codes = quantize(x, scale, fmt)
    assert [int(c) for c in codes.tolist()] == [ref_code(v, scale, fmt) for v in x.tolist()]


@settings(max_examples=50, deadline=None)
@given(case=in_range_case())
def test_fake_quantize_equals_codes_times_f32_scale_exactly(
    case: tuple[QFormat, float, np.ndarray],
) -> None:
    fmt, scale, x_np = case
    x = torch.from_numpy(x_np)
    expected = [ref_value(ref_code(v, scale, fmt), scale) for v in x_np.tolist()]
    assert exact(fake_quantize(x, scale, fmt)) == expected
    # the same with the scale given as a float32 tensor / a numpy scalar
    assert exact(fake_quantize(x, torch.tensor(scale), fmt)) == expected
    assert exact(fake_quantize(x, np.float32(scale), fmt)) == expected


def test_fake_quantize_exact_for_clamped_and_binary_values() -> None:
    """Clamped codes and binary codes too: ``x + (q - x)`` would not be exactly ``q`` there."""
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(200, generator=g) * 10, torch.tensor([1000.0001, -123.456])])
    scale = float(np.float32(0.0123))
    for fmt in FORMATS_WITH_TERNARY:
        expected = [ref_value(ref_code(v, scale, fmt), scale) for v in x.tolist()]
        assert exact(fake_quantize(x, scale, fmt)) == expected, str(fmt)
        xg = x.clone().requires_grad_(True)
        out = fake_quantize(xg, scale, fmt)
        assert exact(out) == expected, str(fmt)
        out.sum().backward()
        assert xg.grad is not None
        assert torch.equal(xg.grad, torch.ones_like(x))  # straight through everywhere


@settings(max_examples=50, deadline=None)
@given(fmt=formats, scale=f32_scales, values=wide_values)
def test_lsq_forward_equals_exact_reference_and_fake_quantize(
    fmt: QFormat, scale: float, values: list[float]
) -> None:
    x = torch.tensor(values, dtype=torch.float32)
    out = lsq_fake_quantize(x, torch.tensor(scale), fmt)
    codes = [ref_code(v, scale, fmt) for v in values]
    assert exact(out) == [ref_value(c, scale) for c in codes]
    # where fake_quantize is exact (x within a factor 2 of its value, or a zero code) the two
    # are identical
    fake = fake_quantize(x, scale, fmt)
    values_q = [float(ref_value(c, scale)) for c in codes]
    mask = torch.tensor(
        [
            q == 0 or q / 2 <= v <= 2 * q or 2 * q <= v <= q / 2
            for q, v in zip(values_q, values, strict=True)
        ]
    )
    assert torch.equal(out[mask], fake[mask])


@pytest.mark.parametrize("fmt", [QFormat(1, True), QFormat(3, True), QFormat(4, False)], ids=str)
def test_lsq_gradients_reach_step_and_input(fmt: QFormat) -> None:
    torch.manual_seed(0)
    x = (torch.randn(64) * 2).requires_grad_(True)
    step = torch.tensor(0.3, requires_grad=True)
    y = lsq_fake_quantize(x, step, fmt)
    (y * torch.linspace(0.5, 1.5, 64)).sum().backward()
    assert step.grad is not None
    assert float(step.grad) != 0.0
    assert x.grad is not None
    assert bool((x.grad != 0).any())
    if not fmt.binary:
        # straight through inside the code range, zero where the code is clamped
        v = x.detach() / 0.3
        inside = (v >= fmt.qmin) & (v <= fmt.qmax)
        assert bool((x.grad[~inside] == 0).all())
        torch.testing.assert_close(x.grad[inside], torch.linspace(0.5, 1.5, 64)[inside])


def test_lsq_per_channel_step_gets_one_gradient_per_channel() -> None:
    torch.manual_seed(1)
    x = torch.randn(3, 2, 4).requires_grad_(True)
    step = torch.tensor([0.1, 0.2, 0.4]).reshape(3, 1, 1).requires_grad_(True)
    fmt = QFormat(4, True)
    y = lsq_fake_quantize(x, step, fmt)
    y.square().sum().backward()
    assert step.grad is not None
    assert step.grad.shape == step.shape
    assert bool((step.grad != 0).all())
    np_scales = np.asarray([0.1, 0.2, 0.4], dtype=np.float32)
    for c in range(3):
        s = float(np_scales[c])
        expected = [ref_value(ref_code(v, s, fmt), s) for v in x[c].reshape(-1).tolist()]
        assert exact(y[c]) == expected


# --------------------------------------------------------------------------- per channel


@st.composite
def per_channel_case(draw: st.DrawFn) -> tuple[QFormat, list[float], np.ndarray]:
    fmt = draw(formats)
    channels = draw(st.integers(1, 4))
    scales = draw(st.lists(f32_scales, min_size=channels, max_size=channels))
    units = draw(st.lists(_in_range_units(fmt), min_size=channels * 8, max_size=channels * 8))
    u = np.asarray(units, dtype=np.float64).reshape(channels, 2, 2, 2)
    x = (u * np.asarray(scales, dtype=np.float64).reshape(-1, 1, 1, 1)).astype(np.float32)
    return fmt, scales, x


@settings(max_examples=50, deadline=None)
@given(case=per_channel_case())
def test_per_channel_scales_exact(case: tuple[QFormat, list[float], np.ndarray]) -> None:
    fmt, scales, x_np = case
    x = torch.from_numpy(x_np)
    expected = []
    for c, s in enumerate(scales):
        expected += [ref_value(ref_code(v, s, fmt), s) for v in x_np[c].reshape(-1).tolist()]
    s_np = np.asarray(scales, dtype=np.float32).reshape(-1, 1, 1, 1)
    assert exact(fake_quantize(x, s_np, fmt)) == expected
    assert exact(fake_quantize(x, torch.from_numpy(s_np), fmt)) == expected
    codes = quantize(x, s_np, fmt)
    assert codes.shape == x.shape
    # lsq with the same per-channel steps has the same value
    assert exact(lsq_fake_quantize(x, torch.from_numpy(s_np), fmt)) == expected


# --------------------------------------------------------------------------- dynamic scales


@settings(max_examples=50, deadline=None)
@given(
    fmt=formats,
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 4),
    absmean=st.booleans(),
    zero_row=st.booleans(),
)
def test_dynamic_scale_is_per_sample(
    fmt: QFormat, seed: int, n: int, absmean: bool, zero_row: bool
) -> None:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, 5, generator=g) * torch.rand(n, 1, 1, generator=g) * 10
    if zero_row:
        x[0] = 0.0
    s = dynamic_scale(x, fmt, absmean=absmean)
    assert s.shape == (n, 1, 1)
    assert s.dtype == torch.float32
    batch = fake_quantize(x, s, fmt)
    for i in range(n):
        xi = x[i : i + 1]
        si = dynamic_scale(xi, fmt, absmean=absmean)
        assert torch.equal(si, s[i : i + 1])
        assert torch.equal(fake_quantize(xi, si, fmt), batch[i : i + 1])
        row = xi.reshape(-1)
        if not bool(row.any()):
            assert float(si) == 1.0  # an all-zero sample gets scale 1
            continue
        if absmean:
            assert float(si) == pytest.approx(float(row.abs().double().mean()), rel=1e-5)
        else:
            amax = row.abs().max() if fmt.signed else row.clamp_min(0).max()
            if float(amax) == 0:
                assert float(si) == 1.0
                continue
            assert Fraction(float(si)) == f32(Fraction(float(amax)) / fmt.qmax)
            codes = quantize(xi, si, fmt)
            if not fmt.binary:  # the largest magnitude lands on the largest code
                assert float(codes.abs().max()) == fmt.qmax


# --------------------------------------------------------------------------- formats


@pytest.mark.parametrize("signed", [True, False])
@pytest.mark.parametrize("bits", [TERNARY, 1.58, "ternary", "t"])
def test_ternary_format_is_signed_two_bit(bits: object, signed: bool) -> None:
    fmt = QFormat.for_bits(bits, signed)  # type: ignore[arg-type]
    assert fmt == QFormat(2, True)
    assert (fmt.qmin, fmt.qmax, fmt.binary) == (-1, 1, False)
    assert storage_bits(TERNARY) == 2
    codes = quantize(torch.tensor([-5.0, -0.6, -0.4, 0.0, 0.4, 0.6, 5.0]), 1.0, fmt)
    assert codes.tolist() == [-1, -1, 0, 0, 0, 1, 1]


@pytest.mark.parametrize("bits", range(1, 9))
def test_for_bits_integer_widths(bits: int) -> None:
    assert QFormat.for_bits(bits, True) == QFormat(bits, True)
    assert QFormat.for_bits(bits, False) == QFormat(bits, False)


# --------------------------------------------------------------------------- layers


def _codes_np(x: np.ndarray, scale: np.ndarray | float, fmt: QFormat) -> np.ndarray:
    """Vectorised reference codes: float32 product, then round half away in float64 (exact)."""
    inv = np.float32(1.0) / np.asarray(scale, dtype=np.float64)
    v = np.asarray(x, dtype=np.float32) * inv.astype(np.float32)  # one float32 rounding
    v64 = v.astype(np.float64)
    if fmt.binary:
        return np.where(v64 >= 0, 1, -1).astype(np.int64)
    mag = np.abs(v64)
    n = np.floor(mag)
    n = np.where(mag - n >= 0.5, n + 1, n)
    return np.clip(np.where(v64 < 0, -n, n), fmt.qmin, fmt.qmax).astype(np.int64)


LAYER_CASES = {
    "conv2d-10x4-groups-stride-dilation": (
        lambda cfg, w, a: BitConv2d(
            4,
            6,
            (10, 4),
            stride=(2, 1),
            padding=(3, 1),
            dilation=(1, 2),
            groups=2,
            w_bits=w,
            a_bits=a,
            config=cfg,
        ),
        (3, 4, 20, 11),
    ),
    "conv2d-depthwise": (
        lambda cfg, w, a: BitConv2d(
            5, 5, 3, padding=1, groups=5, bias=True, w_bits=w, a_bits=a, config=cfg
        ),
        (2, 5, 6, 7),
    ),
    "conv2d-no-bias-stride2": (
        lambda cfg, w, a: BitConv2d(
            3, 4, (3, 5), stride=2, padding=(0, 2), bias=False, w_bits=w, a_bits=a, config=cfg
        ),
        (2, 3, 9, 9),
    ),
    "conv1d-dilated-strided": (
        lambda cfg, w, a: BitConv1d(
            3, 5, 5, stride=2, padding=2, dilation=2, w_bits=w, a_bits=a, config=cfg
        ),
        (2, 3, 30),
    ),
    "conv1d-depthwise-multiplier": (
        lambda cfg, w, a: BitConv1d(3, 6, 3, groups=3, w_bits=w, a_bits=a, config=cfg),
        (2, 3, 12),
    ),
    "linear-2d": (lambda cfg, w, a: BitLinear(12, 7, w_bits=w, a_bits=a, config=cfg), (4, 12)),
    "linear-sequence": (
        lambda cfg, w, a: BitLinear(12, 7, w_bits=w, a_bits=a, config=cfg),
        (2, 5, 12),
    ),
}
VARIANTS = [  # (w_bits, a_bits, signed input, weight granularity, weight method)
    (8, 8, True, "tensor", "mse"),
    (4, 3, False, "channel", "mse"),
    (TERNARY, 4, True, "channel", "absmax"),
    (1, 2, False, "tensor", "absmax"),
    (2, 8, True, "tensor", "mse"),
    (5, TERNARY, False, "channel", "absmax"),
    (3, 1, True, "channel", "mse"),
    (6, 1, False, "tensor", "absmax"),
]


@pytest.mark.parametrize(
    "variant", VARIANTS, ids=lambda v: f"W{v[0]}A{v[1]}-{'s' if v[2] else 'u'}-{v[3]}-{v[4]}"
)
@pytest.mark.parametrize("case", list(LAYER_CASES))
def test_quant_layer_equals_integer_computation(
    case: str, variant: tuple[float, float, bool, str, str]
) -> None:
    w_bits, a_bits, signed_input, granularity, method = variant
    bits = (w_bits, a_bits)
    build, shape = LAYER_CASES[case]
    torch.manual_seed(zlib.crc32(f"{case}-{variant}".encode()))
    config = QuantConfig(weight_granularity=granularity, weight_method=method, act_method="minmax")
    layer = build(config, *bits)
    with torch.no_grad():
        if layer.bias is not None:
            layer.bias.uniform_(-0.5, 0.5)
    x = torch.randn(shape) if signed_input else torch.rand(shape) * 3
    calibrate(nn.Sequential(layer), [x])
    assert layer.mode == "quant"
    fmt_a = layer.a_fmt
    assert fmt_a.signed == (signed_input or bits[1] == TERNARY)
    with torch.no_grad():
        out = layer(x).double()

    sa = layer.act_scale
    assert sa is not None
    sw = np.asarray(layer.weight_scale, dtype=np.float64)
    xc = _codes_np(x.numpy(), np.float32(sa), fmt_a)
    w_np = layer.weight.detach().numpy()
    sw_b = sw.reshape(-1, *([1] * (w_np.ndim - 1))) if sw.ndim else sw
    wc = _codes_np(w_np, sw_b, layer.w_fmt)
    np.testing.assert_array_equal(wc, layer.weight_codes())
    assert wc.min() >= layer.w_fmt.qmin and wc.max() <= layer.w_fmt.qmax
    assert xc.min() >= fmt_a.qmin and xc.max() <= fmt_a.qmax

    xt, wt = torch.from_numpy(xc).double(), torch.from_numpy(wc).double()
    if isinstance(layer, BitLinear):
        acc = xt @ wt.T
        channel_shape: tuple[int, ...] = (-1,)
    else:
        conv = F.conv2d if isinstance(layer, BitConv2d) else F.conv1d
        acc = conv(xt, wt, None, layer.stride, layer.padding, layer.dilation, layer.groups)
        channel_shape = (-1, *([1] * (xt.dim() - 2)))
    assert bool((acc == acc.round()).all())  # integer accumulators
    w_scale = torch.from_numpy(sw.astype(np.float32).astype(np.float64))
    expected = (
        acc * float(np.float32(sa)) * (w_scale.reshape(channel_shape) if sw.ndim else w_scale)
    )
    if layer.bias is not None:
        expected = expected + layer.bias.detach().double().reshape(channel_shape)
    assert out.shape == expected.shape
    tol = 1e-5 * max(float(expected.abs().max()), 1e-12)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=tol)
