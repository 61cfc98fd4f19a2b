"""Input quantization by one integer multiply, no table (mico.quant.exact_input,
mico_quantize_f32_exact_b*): its integer model and the C kernels (host, rv32) give the codes of
mico.quant.quantize at random floats, every code threshold and its float32 neighbours, products
exactly at k + 0.5 and at the 24-bit rounding's own ties, products rounding up to a power of
two, the clamps and far beyond, +-0, subnormals and the largest finite floats, over scales whose
float32 reciprocal takes every kind of significand and very large and very small exponents."""

from __future__ import annotations

import shutil
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mico.codegen.emitters import emit_quantize
from mico.quant.arithmetic import QFormat, inv_scale_f32, quantize
from mico.quant.exact_input import (
    EXACT_MIN_BITS,
    K_BASE,
    codes_exact,
    exact_params,
    exact_preferred,
)
from mico.quant.thresholds import KEY_POS_INF, key_floats, quantize_thresholds
from mico.targets import rv32
from tests.benchmark_modules import load_benchmark

input_quant = load_benchmark("input_quant")

F32_MAX = float(np.finfo(np.float32).max)
#: zeros, subnormals (the smallest, the largest), the smallest normal and its neighbour, the
#: largest finite floats, both signs
SPECIALS = np.float32(
    [0.0, 2.0**-149, 2.0**-126 - 2.0**-149, 2.0**-126, 2.0**-126 + 2.0**-149, 1e-30, 1e30,
     F32_MAX, np.nextafter(np.float32(F32_MAX), np.float32(0))]
)  # fmt: skip
SPECIALS = np.concatenate([SPECIALS, -SPECIALS])


def formats(widths: tuple[int, ...] = (5, 6, 7, 8)) -> st.SearchStrategy[QFormat]:
    """Signed, unsigned and asymmetric codes (every zero point) of the given widths."""

    def build(bits: int, kind: str, zero_frac: float) -> QFormat:
        if kind == "asymmetric":
            return QFormat(bits, False, round(zero_frac * (2**bits - 1)))
        return QFormat(bits, kind == "signed")

    return st.builds(
        build,
        st.sampled_from(widths),
        st.sampled_from(["signed", "unsigned", "asymmetric"]),
        st.floats(0, 1),
    )


def _scale_of(field: int, frac: int) -> float:
    """A scale whose float32 reciprocal is the float of exponent field ``field`` and fraction
    ``frac`` (1 / inv in float64 rounds back to inv)."""
    inv = np.uint32((field << 23) | frac).view(np.float32)
    return 1.0 / float(inv)


#: fractions of the reciprocal's significand: 0, all ones, alternating, single bits, few
#: odd factors (exact ties need the odd part to divide 2k + 1), then any
_FRACS = [0, 0x7FFFFF, 0x2AAAAA, 0x555555, 1, 0x400000, 0x400001, 0x200000, 0x600000]

scales = st.one_of(
    st.floats(1e-6, 1e3).map(float),  # calibrated inputs
    st.builds(_scale_of, st.integers(1, 254), st.sampled_from(_FRACS)),
    st.builds(_scale_of, st.integers(1, 254), st.integers(0, 2**23 - 1)),
    st.builds(  # reciprocals near the ends of the float32 range: huge and tiny scales
        _scale_of, st.integers(1, 20) | st.integers(230, 254), st.integers(0, 2**23 - 1)
    ),
    st.sampled_from(
        [
            1.0,
            1 / 3,
            2**-20,
            1e-30,
            1e-37,
            2.0**-125,
            2.0**-124,
            1e30,
            1e37,
            1e38,
            3e38,
            F32_MAX,
            2.0**127,
        ]
    ),
)


def _f32(value: Fraction) -> np.float32 | None:
    """``value`` as a float32 when it is one exactly, else None."""
    if abs(value) > F32_MAX:
        return None
    f = np.float32(float(value))
    return f if Fraction(float(f)) == value else None


def _around(target: Fraction, inv: Fraction, steps: int = 2) -> list[np.float32]:
    """The float32 nearest ``target / inv`` and its ``steps`` neighbours on each side."""
    v = float(target / inv)
    if not abs(v) <= F32_MAX:
        return []
    x = np.float32(v)
    out = [x]
    lo = hi = x
    with np.errstate(over="ignore"):  # past the largest float: inf, dropped later
        for _ in range(steps):
            lo = np.nextafter(lo, np.float32(-np.inf))
            hi = np.nextafter(hi, np.float32(np.inf))
            out += [lo, hi]
    return out


def edge_inputs(scale: float, fmt: QFormat) -> np.ndarray:
    """The float32 inputs where an error would show, positive and negative (finite only)."""
    inv = Fraction(float(inv_scale_f32(scale)))
    top = max(fmt.qmax, -fmt.qmin) + 2
    values: list = []
    t = quantize_thresholds(scale, fmt)  # every code threshold and its neighbours
    at = key_floats(t[t < KEY_POS_INF])
    with np.errstate(over="ignore"):
        values += [at, np.nextafter(at, np.float32(-np.inf)), np.nextafter(at, np.float32(np.inf))]
    for k in range(top):
        half = Fraction(2 * k + 1, 2)
        ulp = Fraction(2) ** (half.numerator.bit_length() - half.denominator.bit_length() - 23)
        if k == 0:
            ulp /= 2  # values just below 0.5 lie in the binade below it
        # the product exactly k + 0.5, and exactly halfway between k + 0.5 and its float32
        # neighbours (the ties of the 24-bit rounding); each exists when x is a float32
        for target in (half, half - ulp / 2, half + ulp, half + ulp / 2, half - ulp):
            x = _f32(target / inv)
            if x is not None:
                values.append([x])
        values.append(_around(half, inv, 1))
    for j in range(-3, 10):  # products that round up to a power of two
        values.append(_around(Fraction(2) ** j, inv, 3))
    for bound in (fmt.qmax, fmt.qmin, 10 * top, 1000 * top):  # the clamps and beyond
        values.append(_around(Fraction(bound), inv))
    values.append(SPECIALS)
    x = np.concatenate([np.asarray(v, dtype=np.float32).ravel() for v in values if len(v)])
    x = x[np.isfinite(x)]
    return np.concatenate([x, -x]).astype(np.float32)


def reference(x: np.ndarray, scale: float, fmt: QFormat) -> np.ndarray:
    """What the reference executor computes (mico.quantize on a float32 tensor)."""
    return quantize(torch.from_numpy(np.ascontiguousarray(x)), scale, fmt).numpy().astype(np.int64)


# ----------------------------------------------------------------------------- the integer model
@settings(max_examples=150, deadline=None)
@given(
    scales,
    formats((2, 3, 4, 5, 6, 7, 8)),
    st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), max_size=64),
)
def test_integer_model_gives_the_reference_codes(scale, fmt, floats):
    p = exact_params(scale, fmt)
    if p is None:  # only for reciprocals above ~2**125, where subnormals round to +-1
        assert float(inv_scale_f32(scale)) >= 2.0**124
        return
    rng = np.random.default_rng(len(floats))
    spread = np.clip(rng.standard_normal(128) * scale * (fmt.qmax + 2), -F32_MAX, F32_MAX)
    x = np.concatenate([np.float32(floats), spread.astype(np.float32), edge_inputs(scale, fmt)])
    np.testing.assert_array_equal(codes_exact(x, p), reference(x, scale, fmt))


def test_params_and_where_they_do_not_apply():
    p = exact_params(1.0, QFormat(8, True))
    assert (p.m, p.k, p.qmin, p.span) == (2**23 << 2, K_BASE - 127, -127, 254)
    p = exact_params(1 / 3, QFormat(6, False, 20))  # inv 3.0: significand 1.5 * 2**23
    assert (p.m, p.k, p.qmin, p.span) == (3 * 2**22 << 2, K_BASE - 128, -20, 63)
    sub = exact_params(1e38, QFormat(8, True))  # a subnormal reciprocal, normalised
    assert sub is not None and 2**25 <= sub.m < 2**26 and sub.k > K_BASE - 1
    # the smallest normal float times 2**126 is 1: subnormal inputs would get +-1, keep the table
    assert exact_params(2.0**-126, QFormat(8, True)) is None
    assert exact_params(2.0**-120, QFormat(8, True)) is not None
    assert (
        exact_params(0.1, QFormat(1, True)) is None and exact_params(0.1, QFormat(1, False)) is None
    )
    assert exact_preferred(QFormat(8, False, 3)) and not exact_preferred(QFormat(3, True))
    assert EXACT_MIN_BITS == 4


# ----------------------------------------------------------------------------- C kernels
def _c_cases(pairs: list[tuple[float, QFormat]]) -> list:
    cases = []
    for scale, fmt in pairs:
        if exact_params(scale, fmt) is not None:
            cases.append(input_quant.Case(f"{fmt} {scale!r}", fmt, scale, edge_inputs(scale, fmt)))
    return cases


def _check(cases: list, target: str, results: list[dict] | None = None) -> list[dict]:
    """Run the cases (one program) unless ``results`` holds their runs; the exact path must
    give the reference codes."""
    if results is None:
        results = input_quant.run_cases(cases, target)
    for case, got in zip(cases, results, strict=True):
        ref = reference(case.x, case.scale, case.fmt)
        np.testing.assert_array_equal(got["exact"][1], ref, err_msg=case.label)
    return results


#: every width 2..8, signed / unsigned / asymmetric, over reciprocals of every significand kind
#: and of tiny, ordinary and huge magnitude
FIXED = [
    (_scale_of(field, frac), fmt)
    for i, (field, frac) in enumerate(
        [
            (127, 0),
            (130, 0x7FFFFF),
            (120, 0x2AAAAA),
            (134, 0x555555),
            (1, 0x123456),
            (254, 0x7FFFFF),
            (251, 0x400001),
            (20, 0x600000),
            (160, 0x3C0000),
        ]
    )
    for fmt in [QFormat(b, i % 2 == 0) for b in (2, 4, 5, 8)]
    + [QFormat(b, False, (2**b - 1) * (i + 1) // 10) for b in (3, 6, 7)]
]


EXTRA = [
    (0.037, QFormat(8, False, 77)),
    (1e38, QFormat(8, True)),
    (3e38, QFormat(5, False)),
    (2.0**-124, QFormat(6, True)),
]


def _byte_tail_cases() -> list:
    x = np.float32([0.0, 0.3, -0.7, 1e9, -1e9, 0.5, 2.5])
    return [
        input_quant.Case(f"{b}-bit {n}", QFormat(b, b % 2 == 0), 0.1, x[:n])
        for b in (2, 3, 4, 5, 6, 7, 8)
        for n in (1, 3, 7)
    ]


@pytest.fixture(scope="module")
def host_runs() -> dict[str, tuple[list, list[dict]]]:
    """The fixed host cases of this module built into one program and run once (one build
    instead of one per test): per group, the cases and their runs."""
    groups = {"edges": _c_cases([*FIXED, *EXTRA]), "byte tails": _byte_tail_cases()}
    results = iter(input_quant.run_cases([c for cases in groups.values() for c in cases], "host"))
    return {name: (cases, [next(results) for _ in cases]) for name, cases in groups.items()}


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_c_kernel_on_the_host_at_every_edge(host_runs):
    cases, results = host_runs["edges"]
    # only the largest reciprocal (2**128 - 2**104: subnormal inputs reach +-1) is left out
    assert len(cases) == len(FIXED) + len(EXTRA) - 7
    _check(cases, "host", results)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
@settings(max_examples=4, deadline=None)
@given(st.lists(st.tuples(scales, formats()), min_size=8, max_size=8))
def test_c_kernel_on_the_host_at_random_scales(pairs):
    _check(_c_cases(pairs), "host")


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_c_kernel_tensors_ending_inside_a_byte(host_runs):
    cases, results = host_runs["byte tails"]
    assert len(cases) == 21
    _check(cases, "host", results)


@pytest.mark.skipif(not rv32.available(), reason="needs the rv32 toolchain and qemu")
def test_c_kernel_on_rv32():
    cases = _c_cases(FIXED[::5])
    for case, got in zip(cases, _check(cases, "rv32"), strict=True):
        if case.fmt.bits >= EXACT_MIN_BITS:  # where programs take it: fewer instructions
            assert got["exact"][0] < got["table"][0] < got["float"][0], case.label


# ----------------------------------------------------------------------------- emission
class _Ctx:
    """The parts of EmitContext emit_quantize uses, recording what it defines."""

    def __init__(self) -> None:
        self.structs: dict[str, str] = {}
        self.tables: list[str] = []

    def const_struct(self, ctype: str, name: str, fields: str) -> str:
        self.structs[name] = f"{ctype} {fields}"
        return name

    def const_int32(self, name: str, data: np.ndarray, kind: str = "bias") -> str:
        self.tables.append(name)
        return name

    def need(self, source: str) -> None:
        pass

    def buffer(self, value: object) -> str:
        return "buf"


def _emit(scale: float, fmt: QFormat) -> tuple[str, _Ctx]:
    from types import SimpleNamespace

    out = SimpleNamespace(type=SimpleNamespace(numel=10))
    node = SimpleNamespace(
        name="q", attrs={"qformat": fmt, "scale": scale}, inputs=[None], output=out
    )
    ctx = _Ctx()
    (line,) = emit_quantize(node, ctx)
    return line, ctx


def test_emitter_picks_the_kernel_by_width_and_scale():
    line, ctx = _emit(0.02, QFormat(8, True))
    assert line.startswith("mico_quantize_f32_exact_b8(") and "&q_exact" in line
    assert not ctx.tables and ".m = " in ctx.structs["q_exact"]
    line, ctx = _emit(0.02, QFormat(4, False, 3))
    assert line.startswith("mico_quantize_f32_exact_b4(") and not ctx.tables
    line, ctx = _emit(0.02, QFormat(3, True))  # narrow: the table (28 bytes) is faster
    assert line.startswith("mico_quantize_f32_table_b3(") and ctx.tables == ["q_thresholds"]
    line, ctx = _emit(2.0**-126, QFormat(8, True))  # subnormal inputs reach code 1: the table
    assert line.startswith("mico_quantize_f32_table_b8(")
