"""The static mode's LLaMa kernels (mico_llama.c) against their Python arithmetic
(mico.ir.ops.llama_ops), value by value through a small C harness, over random shapes, code
formats and scales: integer RMSNorm, rotary embedding, the prefix (causal) softmax and the
embedding lookup; saturation included (tiny output scales clamp at the code range)."""

from __future__ import annotations

import math
import subprocess
from importlib import resources

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mico.ir.ops import llama_ops
from mico.passes.lower_llama import prefix_softmax_attrs, rmsnorm_attrs, rope_attrs
from mico.quant import QFormat

HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include "mico_nn.h"

static long next(void)
{
    long v;
    if (scanf("%ld", &v) != 1) {
        exit(3);
    }
    return v;
}

static MicoFmt read_fmt(void)
{
    MicoFmt f;
    f.bits = (int32_t)next();
    f.is_signed = (int32_t)next();
    f.zero = (int32_t)next();
    return f;
}

static void read_codes(void *buf, size_t n, MicoFmt f)
{
    size_t i;
    for (i = 0; i < n; i++) {
        mico_store(buf, i, (int32_t)next(), f);
    }
}

static void print_codes(const void *buf, size_t n, MicoFmt f)
{
    size_t i;
    for (i = 0; i < n; i++) {
        printf("%d\n", mico_load(buf, i, f));
    }
}

static uint8_t in[1 << 16], out[1 << 16], table[1 << 16];
static int32_t a[1 << 14], b[1 << 14], c[1 << 14];
static float ids[1 << 12];

/* stdin: a command word, then its integers (see the Python side). */
int main(void)
{
    char cmd[8];
    if (scanf("%7s", cmd) != 1) {
        return 2;
    }
    if (cmd[0] == 'r') { /* rmsnorm */
        MicoFmt fi = read_fmt(), fo = read_fmt();
        int32_t rows = (int32_t)next(), n = (int32_t)next(), pre = (int32_t)next(), i;
        int64_t eps_q = next(), k = next();
        int32_t shift = (int32_t)next(), lo = (int32_t)next(), hi = (int32_t)next();
        for (i = 0; i < n; i++) {
            a[i] = (int32_t)next();
        }
        read_codes(in, (size_t)rows * (size_t)n, fi);
        mico_qrmsnorm(in, fi, out, fo, rows, n, pre, eps_q, k, a, shift, lo, hi);
        print_codes(out, (size_t)rows * (size_t)n, fo);
    } else if (cmd[0] == 'p') { /* rope */
        MicoFmt fi = read_fmt();
        MicoOut o;
        int32_t heads, positions, half, m, shift, i;
        o.fmt = read_fmt();
        o.relu = 0;
        o.n_mult = 1;
        m = (int32_t)next();
        shift = (int32_t)next();
        o.m = &m;
        o.shift = &shift;
        o.lo = (int32_t)next();
        o.hi = (int32_t)next();
        heads = (int32_t)next();
        positions = (int32_t)next();
        half = (int32_t)next();
        for (i = 0; i < positions * half; i++) {
            a[i] = (int32_t)next();
        }
        for (i = 0; i < positions * half; i++) {
            b[i] = (int32_t)next();
        }
        read_codes(in, (size_t)(heads * positions * 2 * half), fi);
        mico_qrope(in, fi, out, &o, heads, positions, half, a, b);
        print_codes(out, (size_t)(heads * positions * 2 * half), o.fmt);
    } else if (cmd[0] == 's') { /* prefix softmax */
        MicoFmt fi = read_fmt(), fo = read_fmt();
        int32_t rows = (int32_t)next(), n = (int32_t)next(), qmax = (int32_t)next();
        int32_t len = (int32_t)next(), n_limits = (int32_t)next(), i;
        for (i = 0; i < len; i++) {
            a[i] = (int32_t)next();
        }
        for (i = 0; i < n_limits; i++) {
            c[i] = (int32_t)next();
        }
        read_codes(in, (size_t)rows * (size_t)n, fi);
        mico_qsoftmax_prefix(in, fi, out, fo, rows, n, a, len, qmax, c, n_limits);
        print_codes(out, (size_t)rows * (size_t)n, fo);
    } else { /* embedding */
        MicoFmt ft = read_fmt(), fo = read_fmt();
        int32_t vocab = (int32_t)next(), dim = (int32_t)next(), n = (int32_t)next(), i;
        read_codes(table, (size_t)vocab * (size_t)dim, ft);
        for (i = 0; i < n; i++) {
            ids[i] = (float)next();
        }
        mico_qembedding(ids, table, ft, out, fo, n, dim);
        print_codes(out, (size_t)n * (size_t)dim, fo);
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    work = tmp_path_factory.mktemp("llama_kernels")
    csrc = resources.files("mico.csrc")
    for name in ("mico_nn.h", "mico_llama.c", "mico_nn_run.c"):
        (work / name).write_text((csrc / name).read_text())
    (work / "harness.c").write_text(HARNESS)
    exe = work / "harness"
    subprocess.run(
        ["cc", "-std=c99", "-O1", "-Wall", "-Wextra", "-Werror", "-fsanitize=address,undefined",
         "-fno-sanitize-recover=all", "-o", str(exe), str(work / "harness.c"),
         str(work / "mico_llama.c"), str(work / "mico_nn_run.c"), "-lm"],
        check=True,
    )  # fmt: skip
    return exe


def _run(exe, words) -> np.ndarray:
    text = " ".join(str(int(w)) if not isinstance(w, str) else w for w in words) + "\n"
    out = subprocess.run([str(exe)], input=text, capture_output=True, text=True, check=True)
    return np.asarray([int(v) for v in out.stdout.split()], dtype=np.int64)


def _fmt_words(fmt: QFormat) -> list[int]:
    return [fmt.bits, int(fmt.signed), fmt.zero]


formats = st.builds(
    lambda bits, signed: QFormat(bits, signed), st.integers(2, 8), st.booleans()
)  # fmt: skip
SETTINGS = settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _codes(fmt: QFormat, rng: np.random.Generator, shape) -> np.ndarray:
    return rng.integers(fmt.qmin, fmt.qmax + 1, shape).astype(np.int64)


@SETTINGS
@given(
    fi=formats,
    fo=formats | st.just(QFormat(1, True)),  # binary outputs: the sign, zero counting as +1
    rows=st.integers(1, 6),
    n=st.integers(1, 96),
    s_in=st.floats(1e-4, 10.0),
    s_out=st.floats(1e-4, 10.0),
    eps=st.sampled_from([0.0, 1e-6, 1e-5, 1e-2]),
    seed=st.integers(0, 2**32 - 1),
)
def test_c_rmsnorm_matches_python(harness, fi, fo, rows, n, s_in, s_out, eps, seed):
    rng = np.random.default_rng(seed)
    weight = rng.normal(0, 2, n)
    attrs = rmsnorm_attrs(n, s_in, eps, weight, fi, fo, s_out, "test")
    x = _codes(fi, rng, (rows, n))
    x[0] = 0 if rows > 1 else x[0]  # an all-zero row: dev may be 0
    expected = llama_ops.rmsnorm_codes(x, attrs)
    words = ["r", *_fmt_words(fi), *_fmt_words(fo), rows, n, attrs["pre"], attrs["eps_q"],
             attrs["k"], attrs["shift"], *attrs["clamp"], *attrs["g"], *x.ravel()]  # fmt: skip
    assert np.array_equal(_run(harness, words), expected.ravel())


@SETTINGS
@given(
    fi=formats,
    fo=formats,
    heads=st.integers(1, 4),
    positions=st.integers(1, 12),
    half=st.integers(1, 8),
    s_in=st.floats(1e-3, 10.0),
    s_out=st.floats(1e-3, 10.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_c_rope_matches_python(harness, fi, fo, heads, positions, half, s_in, s_out, seed):
    rng = np.random.default_rng(seed)
    angles = rng.uniform(-math.pi, math.pi, (positions, half))
    attrs = rope_attrs(np.cos(angles), np.sin(angles), fi, s_in, fo, s_out, "test")
    x = _codes(fi, rng, (1, heads, positions, 2 * half))
    expected = llama_ops.rope_codes(x, attrs)
    out = attrs["out"]
    words = ["p", *_fmt_words(fi), *_fmt_words(fo), out["m"][0], out["shift"][0], *out["clamp"],
             heads, positions, half, *attrs["cos"], *attrs["sin"], *x.ravel()]  # fmt: skip
    assert np.array_equal(_run(harness, words), expected.ravel())


@SETTINGS
@given(
    fi=formats,
    bits=st.integers(2, 8),
    rows=st.integers(1, 8),
    n=st.integers(1, 40),
    s_in=st.floats(1e-3, 20.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_c_prefix_softmax_matches_python(harness, fi, bits, rows, n, s_in, seed):
    rng = np.random.default_rng(seed)
    limits = rng.integers(1, n + 1, rng.integers(1, rows + 1)).tolist()
    attrs = prefix_softmax_attrs(fi, s_in, bits, limits)
    x = _codes(fi, rng, (rows, n))
    expected = llama_ops.prefix_softmax_codes(x, attrs["exp_q15"], attrs["qmax"], limits)
    fo = QFormat(bits, False)
    table = attrs["exp_q15"]
    words = ["s", *_fmt_words(fi), *_fmt_words(fo), rows, n, attrs["qmax"], len(table),
             len(limits), *table, *limits, *x.ravel()]  # fmt: skip
    assert np.array_equal(_run(harness, words), expected.ravel())
    lim = np.resize(np.asarray(limits), rows)
    assert np.all(expected[np.arange(n)[None, :] >= lim[:, None]] == 0)  # masked: code 0


@SETTINGS
@given(
    fmt=formats,
    vocab=st.integers(1, 50),
    dim=st.integers(1, 24),
    n=st.integers(1, 30),
    seed=st.integers(0, 2**32 - 1),
)
def test_c_embedding_matches_python(harness, fmt, vocab, dim, n, seed):
    rng = np.random.default_rng(seed)
    table = _codes(fmt, rng, (vocab, dim))
    ids = rng.integers(0, vocab, n)
    expected = llama_ops.embedding_codes(ids, table)
    words = ["e", *_fmt_words(fmt), *_fmt_words(fmt), vocab, dim, n, *table.ravel(), *ids]
    assert np.array_equal(_run(harness, words), expected.ravel())


def test_rmsnorm_codes_follow_float_rmsnorm():
    """The integer RMSNorm is float RMSNorm up to the output rounding."""
    rng = np.random.default_rng(0)
    fi, fo, n, s_in = QFormat(8, True), QFormat(8, True), 64, 0.05
    weight = rng.uniform(0.5, 1.5, n)
    x = _codes(fi, rng, (16, n))
    real = x * s_in
    expected = real / np.sqrt((real**2).mean(-1, keepdims=True) + 1e-5) * weight
    s_out = np.abs(expected).max() / fo.qmax
    got = llama_ops.rmsnorm_codes(x, rmsnorm_attrs(n, s_in, 1e-5, weight, fi, fo, s_out, "t"))
    assert np.abs(got * s_out - expected).max() <= 0.51 * s_out + 1e-9


def test_rope_codes_follow_float_rotation():
    rng = np.random.default_rng(1)
    fi, fo, s = QFormat(8, True), QFormat(8, True), 0.02
    angles = rng.uniform(-3, 3, (5, 4))
    cos, sin = np.cos(angles), np.sin(angles)
    x = _codes(fi, rng, (1, 2, 5, 8))
    got = llama_ops.rope_codes(x, rope_attrs(cos, sin, fi, s, fo, s * 1.5, "t")) * s * 1.5
    x0, x1 = x[..., 0::2] * s, x[..., 1::2] * s
    expected = np.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], -1).reshape(x.shape)
    assert np.abs(got - expected).max() <= 0.51 * s * 1.5 + 2 * 128 * s * 2**-14
