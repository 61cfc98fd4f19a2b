"""The tight requantization loops (mico_rq_run_fast, mico_rq_pack in mico_nn_run.c) against the
one-value reference mico_rq_apply (itself held to the Python arithmetic by every kernel test):
multipliers of every shift from 1 to 62 (the two-word loop of shifts up to 32, the high-word
loop above), values at the int32 limits and near the saturation bound, with and without a
ReLU, clamps of 8-bit signed, unsigned and zero-point formats, 8-bit and packed 4-bit outputs;
and mico_rq_apply against the Python requantization on the same draws."""

from __future__ import annotations

import shutil
import subprocess
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mico.quant.arithmetic import QFormat, requantize

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include "mico_nn.h"

/* stdin: cases "m shift relu lo hi bits signed zero n v..." ; stdout per case: the codes of
 * mico_rq_apply, mico_rq_run_fast and the bytes of mico_pack / mico_rq_pack */
int main(void)
{
    long m, shift, relu, lo, hi, bits, sgn, zero, n;
    while (scanf("%ld %ld %ld %ld %ld %ld %ld %ld %ld", &m, &shift, &relu, &lo, &hi, &bits, &sgn,
                 &zero, &n) == 9) {
        int32_t *v = malloc(sizeof(int32_t) * (size_t)n * 3);
        uint8_t *a = calloc((size_t)n + 8, 1), *b = calloc((size_t)n + 8, 1);
        MicoRq q;
        MicoFmt f;
        long i;
        for (i = 0; i < n; i++) {
            long x;
            if (scanf("%ld", &x) != 1) {
                return 2;
            }
            v[i] = v[n + i] = v[2 * n + i] = (int32_t)x;
        }
        q.relu = (int32_t)relu;
        q.scaled = 1;
        q.m = (int32_t)m;
        q.shift = (int32_t)shift;
        q.binary = 0;
        q.lo = (int32_t)lo;
        q.hi = (int32_t)hi;
        f.bits = (int32_t)bits;
        f.is_signed = (int32_t)sgn;
        f.zero = (int32_t)zero;
        mico_rq_run(&q, v, (int32_t)n);
        mico_rq_run_fast(&q, v + n, (int32_t)n);
        mico_pack(a, 0, v, (int32_t)n, f);
        mico_rq_pack(&q, v + 2 * n, (int32_t)n, b, 0, f);
        for (i = 0; i < n; i++) {
            printf("%ld ", (long)v[i]);
        }
        printf("|");
        for (i = 0; i < n; i++) {
            printf(" %ld", (long)v[n + i]);
        }
        printf(" |");
        for (i = 0; i < (n * bits + 7) / 8; i++) {
            printf(" %u", a[i]);
        }
        printf(" |");
        for (i = 0; i < (n * bits + 7) / 8; i++) {
            printf(" %u", b[i]);
        }
        printf("\n");
        free(v);
        free(a);
        free(b);
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("rq")
    csrc = resources.files("mico.csrc")
    (work / "mico_nn.h").write_text((csrc / "mico_nn.h").read_text())
    (work / "mico_nn_run.c").write_text((csrc / "mico_nn_run.c").read_text())
    (work / "main.c").write_text(PROGRAM)
    exe = work / "rq"
    subprocess.run(
        ["gcc", "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-fsanitize=undefined",
         "-fno-sanitize-recover", "-I", str(work), str(work / "main.c"),
         str(work / "mico_nn_run.c"), "-o", str(exe)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return exe


FORMATS = [QFormat(8, True), QFormat(8, False), QFormat(8, False, zero=100), QFormat(4, False),
           QFormat(4, True)]  # fmt: skip


def _values(rng: np.random.Generator, shift: int) -> np.ndarray:
    """Values spread around the multiplier's useful range, the int32 limits, zero and the
    neighbours of where the quotient reaches 2^31 (shifts of 32 or less saturate there)."""
    edge = [0, 1, -1, 2**31 - 1, -(2**31), 2**30, -(2**30)]
    scale = 2.0 ** min(shift, 40)
    spread = rng.normal(0, scale / 2**24, 40).astype(np.int64)
    wide = rng.integers(-(2**31), 2**31, 20)
    return np.clip(np.concatenate([edge, spread, wide]), -(2**31), 2**31 - 1)


def _run(program: Path, cases: list) -> list[list[list[int]]]:
    lines = []
    for m, shift, relu, fmt, values in cases:
        head = [m, shift, relu, fmt.qmin, fmt.qmax, fmt.bits, int(fmt.signed), fmt.zero]
        lines.append(" ".join(map(str, [*head, len(values), *values])))
    out = subprocess.run([str(program)], input="\n".join(lines) + "\n", capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    return [[[int(t) for t in part.split()] for part in line.split("|")]
            for line in out.splitlines()]  # fmt: skip


def test_every_shift_and_format(program):
    """Every shift 1..62, both ReLU settings, every format: the tight loops equal
    mico_rq_apply, and mico_rq_pack's bytes equal mico_pack's."""
    rng = np.random.default_rng(5)
    cases = []
    for shift in range(1, 63):
        for relu in (0, 1):
            for fmt in FORMATS:
                m = int(rng.integers(2**30, 2**31))
                cases.append((m, shift, relu, fmt, _values(rng, shift)))
    for (m, shift, relu, fmt, values), (ref, fast, packed, fused) in zip(
        cases, _run(program, cases), strict=True
    ):
        assert fast == ref, (m, shift, relu, fmt)
        assert fused == packed, (m, shift, relu, fmt)
        # and the reference itself is the Python arithmetic
        acc = np.asarray(values, dtype=np.int64)
        expect = requantize(np.maximum(acc, 0) if relu else acc, m, shift, fmt)
        assert ref == [int(x) for x in expect], (m, shift, relu, fmt)


@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(2**30, 2**31 - 1),
    shift=st.integers(1, 62),
    relu=st.booleans(),
    values=st.lists(st.integers(-(2**31), 2**31 - 1), min_size=1, max_size=33),
)
def test_random_runs(program, m, shift, relu, values):
    ((ref, fast, packed, fused),) = _run(program, [(m, shift, int(relu), FORMATS[2], values)])
    assert fast == ref
    assert fused == packed
