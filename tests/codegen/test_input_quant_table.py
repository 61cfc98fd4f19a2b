"""Input quantization by thresholds (mico.quant.thresholds, mico_quantize_f32_table*): the
table reproduces mico.quant.quantize at random floats and at every threshold and its float32
neighbours, +-0, subnormals and clamped extremes; the C kernels give the same codes on the host
(and on rv32 under qemu); static models emit the table kernel (codes below 4 bits) or the exact
integer kernel (test_input_quant_exact.py) and stay bit-exact."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mico.codegen import emit_c_project
from mico.codegen.emitters import quantize_exact_kernel, quantize_table_kernel
from mico.execute import run_graph
from mico.ir.ops import mico_ops
from mico.pipeline import lower_model, quantize_ptq
from mico.quant import QuantPlan
from mico.quant.arithmetic import QFormat, quantize
from mico.quant.exact_input import exact_preferred
from mico.quant.thresholds import (
    KEY_NEG_INF,
    KEY_POS_INF,
    PAD,
    c_table,
    codes_from_table,
    f32_keys,
    key_floats,
    quantize_thresholds,
    table_usable,
)
from mico.targets import host, rv32
from tests.benchmark_modules import load_benchmark

input_quant = load_benchmark("input_quant")

EXTREMES = np.float32(
    [0.0, -0.0, 1e-45, -1e-45, 1.1754942e-38, -1.1754942e-38, 1.1754944e-38, 3.4028235e38,
     -3.4028235e38, 1e30, -1e30, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5]
)  # fmt: skip


def formats() -> st.SearchStrategy[QFormat]:
    """Every code format: signed (binary, ternary, symmetric), unsigned, asymmetric."""

    def build(bits: int, kind: str, zero_frac: float) -> QFormat:
        if kind == "asymmetric" and bits >= 2:
            return QFormat(bits, False, round(zero_frac * (2**bits - 1)))
        return QFormat(bits, kind == "signed")

    return st.builds(
        build,
        st.integers(1, 8),
        st.sampled_from(["signed", "unsigned", "asymmetric"]),
        st.floats(0, 1),
    )


scales = st.one_of(
    st.floats(1e-6, 1e3).map(float),  # calibrated inputs
    st.sampled_from([1.0, 0.5, 1 / 3, 2**-20, 1e-30, 1e-38, 3e-39, 1e30, 1e38, 3e38]),
)


def edge_values(scale: float, fmt: QFormat) -> np.ndarray:
    """Every finite threshold and its float32 neighbours, plus the extremes."""
    t = quantize_thresholds(scale, fmt)
    t = t[t < KEY_POS_INF]
    at = key_floats(t)
    with np.errstate(over="ignore"):
        around = [at, np.nextafter(at, np.float32(-np.inf)), np.nextafter(at, np.float32(np.inf))]
    values = np.concatenate([*around, EXTREMES]).astype(np.float32)
    return values[np.isfinite(values)]


def reference(x: np.ndarray, scale: float, fmt: QFormat) -> np.ndarray:
    """What the reference executor computes (mico.quantize on a float32 tensor)."""
    return quantize(torch.from_numpy(np.ascontiguousarray(x)), scale, fmt).numpy().astype(np.int64)


# ----------------------------------------------------------------------------- keys
@settings(max_examples=200, deadline=None)
@given(
    st.floats(width=32, allow_nan=False),
    st.floats(width=32, allow_nan=False),
)
def test_keys_order_like_floats(a, b):
    ka, kb = (int(k) for k in f32_keys(np.float32([a, b])))
    if a == b == 0:  # +-0 compare equal; only their keys tell them apart (-0.0 below)
        assert (ka == kb) == (math.copysign(1, a) == math.copysign(1, b))
    else:
        assert (ka < kb) == (a < b) and (ka == kb) == (a == b)
    assert KEY_NEG_INF <= ka <= KEY_POS_INF
    back = key_floats(np.int64([ka]))
    assert back.view(np.int32)[0] == np.float32(a).view(np.int32)


def test_zero_keys_and_sentinels():
    keys = f32_keys(np.float32([-0.0, 0.0, -np.inf, np.inf]))
    assert keys.tolist() == [-1, 0, KEY_NEG_INF, KEY_POS_INF]


# ----------------------------------------------------------------------------- the table
@settings(max_examples=60, deadline=None)
@given(scales, formats(), st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False),
                                   max_size=64))  # fmt: skip
def test_table_reproduces_the_reference(scale, fmt, floats):
    if not table_usable(scale):
        with pytest.raises(ValueError, match="no finite float32 reciprocal"):
            quantize_thresholds(scale, fmt)
        return
    table = c_table(scale, fmt)
    assert table.dtype == np.int32 and table.size == 2**fmt.bits - 1
    assert np.all(np.diff(table.astype(np.int64)) >= 0)
    x = np.concatenate([np.float32(floats), edge_values(scale, fmt)]).astype(np.float32)
    rng = np.random.default_rng(len(floats))
    spread = np.clip(rng.standard_normal(256) * scale * (fmt.qmax + 2), -3e38, 3e38)
    x = np.concatenate([x, spread.astype(np.float32)])
    np.testing.assert_array_equal(codes_from_table(x, table, fmt), reference(x, scale, fmt))


@settings(max_examples=40, deadline=None)
@given(scales.filter(table_usable), formats())
def test_thresholds_are_the_first_floats_of_each_code(scale, fmt):
    t = quantize_thresholds(scale, fmt)
    finite = t < KEY_POS_INF
    if not finite.any():
        return
    targets = np.arange(fmt.qmin + 1, fmt.qmax + 1)[finite]
    at = reference(key_floats(t[finite]), scale, fmt)
    below = reference(key_floats(t[finite] - 1), scale, fmt)
    assert np.all(at >= targets) and np.all(below < targets)


def test_binary_and_zero_points():
    # binary: the sign, zero (either zero) counts as +1
    x = np.float32([-1e-45, -0.0, 0.0, 1e-45, -3.0, 3.0])
    table = c_table(0.1, QFormat(1, True))
    assert table.size == 1
    assert codes_from_table(x, table, QFormat(1, True)).tolist() == [-1, 1, 1, 1, -1, 1]
    # asymmetric: shifted codes [-zero, 2**b - 1 - zero], clamped at both ends
    fmt = QFormat(4, False, 5)
    codes = codes_from_table(np.float32([-1e9, -0.0, 1e9]), c_table(0.25, fmt), fmt)
    assert codes.tolist() == [-5, 0, 10]
    # signed 8-bit: one padding entry that no key exceeds
    assert c_table(0.1, QFormat(8, True))[-1] == PAD


# ----------------------------------------------------------------------------- C kernels
C_FORMATS = [QFormat(b, s) for b in range(1, 9) for s in (True, False)] + [
    QFormat(2, False, 1), QFormat(3, False, 2), QFormat(4, False, 7), QFormat(8, False, 77),
    QFormat(6, False, 63),
]  # fmt: skip


def _edge_cases() -> list:
    cases = []
    for i, fmt in enumerate(C_FORMATS):
        scale = [0.037, 1.0, 1 / 3, 1e-30, 2e30][i % 5]
        x = edge_values(scale, fmt)
        cases.append(input_quant.Case(str(fmt), fmt, scale, x))
    return cases


def _byte_tail_cases() -> list:
    return [
        input_quant.Case(f"{b}-bit", QFormat(b, False), 0.1, np.float32([0.0, 0.1, 0.25])[:n])
        for b in (1, 2, 4)
        for n in (1, 3)
    ]


@pytest.fixture(scope="module")
def host_runs() -> dict[str, list[tuple]]:
    """The host cases of this module built into one program and run once (one build instead
    of one per test): per group, ``(case, its runs by path)``."""
    groups = {"edges": _edge_cases(), "byte tails": _byte_tail_cases()}
    results = iter(input_quant.run_cases([c for cases in groups.values() for c in cases], "host"))
    return {name: [(c, next(results)) for c in cases] for name, cases in groups.items()}


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_c_kernels_give_the_reference_codes_at_every_edge(host_runs):
    for case, got in host_runs["edges"]:
        ref = reference(case.x, case.scale, case.fmt)
        for path in case.paths():
            np.testing.assert_array_equal(got[path][1], ref, err_msg=f"{case.label} {path}")


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_c_codes_of_tensors_ending_inside_a_byte(host_runs):
    assert len(host_runs["byte tails"]) == 6
    for case, got in host_runs["byte tails"]:
        for path in case.paths():
            assert got[path][1].tolist() == reference(case.x, 0.1, case.fmt).tolist()


@pytest.mark.skipif(not rv32.available(), reason="needs the rv32 toolchain and qemu")
def test_c_kernels_on_rv32():
    cases = _edge_cases()[::3]
    for case, got in zip(cases, input_quant.run_cases(cases, "rv32"), strict=True):
        ref = reference(case.x, case.scale, case.fmt)
        for path in case.paths():
            np.testing.assert_array_equal(got[path][1], ref, err_msg=f"{case.label} {path}")
        assert got["table"][0] < got["float"][0]  # fewer instructions retired


# ----------------------------------------------------------------------------- whole models
@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
@pytest.mark.parametrize(
    "plan",
    ["conv1=8/8,conv2=4/4,fc=2/8", "conv1=2/6,conv2=4/4,fc=4/4", "conv1=4/3,conv2=4/4,fc=4/4"],
)
def test_static_model_quantizes_its_input_without_floats(
    plan, trained_cnn, calibration_batches, digits_split, tmp_path
):
    model = quantize_ptq(trained_cnn, QuantPlan.parse(plan), calibration_batches)
    graph = lower_model(model, torch.zeros(1, 1, 8, 8), "cnn")
    (node,) = [n for n in graph.nodes if n.op == mico_ops.QUANTIZE]
    project = emit_c_project(graph, tmp_path / "c", "cnn")
    source = (tmp_path / "c" / "cnn.c").read_text()
    fmt, scale = node.attrs["qformat"], node.attrs["scale"]
    # 4 bits and more: the exact integer kernel, no table; narrower codes: the table
    wide = exact_preferred(fmt)
    kernel = quantize_exact_kernel(fmt) if wide else quantize_table_kernel(fmt)
    assert f"{kernel}(" in source and "mico_quantize_f32(" not in source
    assert ("_thresholds" in source) != wide
    host.build(project)
    # real samples, then samples made of the input node's thresholds and their neighbours
    edges = np.resize(edge_values(scale, fmt), (6, 64)).reshape(6, 1, 8, 8)
    samples = np.concatenate([digits_split.x_test[:16], edges]).astype(np.float32)
    np.testing.assert_array_equal(host.run(project, samples), run_graph(graph, samples)[0].numpy())
