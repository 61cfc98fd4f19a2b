"""The C kernel primitives against mico.quant, value by value, through a small C harness:
input quantization, requantization, weight unpacking, and packed activation load / store."""

import subprocess
from importlib import resources

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mico.quant import QFormat, pack, quantize, quantize_multiplier, requantize

HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mico_nn.h"

static MicoFmt fmt_of(const char *bits, const char *sgn)
{
    MicoFmt f;
    f.bits = atoi(bits);
    f.is_signed = atoi(sgn);
    f.zero = 0;
    return f;
}

static void range_of(MicoFmt f, int32_t *qmin, int32_t *qmax)
{
    int binary = f.is_signed && f.bits == 1;
    *qmin = !f.is_signed ? 0 : binary ? -1 : -((1 << (f.bits - 1)) - 1);
    *qmax = !f.is_signed ? (1 << f.bits) - 1 : binary ? 1 : (1 << (f.bits - 1)) - 1;
}

/* q bits signed inv: float32 bit patterns on stdin -> codes (quantized into a packed buffer).
   r m shift bits signed: accumulators on stdin -> requantized codes.
   u bits count: packed weight bytes on stdin -> signed codes.
   s bits signed count stride fill: codes on stdin, stored at positions (i * stride) % count of
     a buffer pre-filled with `fill`; prints the buffer bytes, then every code loaded back. */
int main(int argc, char **argv)
{
    (void)argc;
    if (argv[1][0] == 'q') {
        MicoFmt f = fmt_of(argv[2], argv[3]);
        float inv = (float)atof(argv[4]);
        int32_t qmin, qmax;
        union { unsigned u; float f; } x;
        range_of(f, &qmin, &qmax);
        while (scanf("%x", &x.u) == 1) {
            uint8_t buf[4] = {0x5a, 0x5a, 0x5a, 0x5a};
            mico_quantize_f32(&x.f, buf, 1, inv, f, qmin, qmax);
            printf("%d\n", mico_load(buf, 0, f));
        }
    } else if (argv[1][0] == 'r') {
        MicoOut o;
        int32_t m = (int32_t)atol(argv[2]), shift = atoi(argv[3]);
        long acc;
        o.fmt = fmt_of(argv[4], argv[5]);
        o.relu = 0;
        o.n_mult = 1;
        o.m = &m;
        o.shift = &shift;
        range_of(o.fmt, &o.lo, &o.hi);
        while (scanf("%ld", &acc) == 1) {
            printf("%d\n", mico_finish((int32_t)acc, 0, &o));
        }
    } else if (argv[1][0] == 'u') {
        static uint8_t buf[4096];
        unsigned bits = (unsigned)atoi(argv[2]), count = (unsigned)atoi(argv[3]), n = 0, b, i;
        while (n < sizeof buf && scanf("%u", &b) == 1) {
            buf[n++] = (uint8_t)b;
        }
        for (i = 0; i < count; i++) {
            printf("%d\n", mico_unpack_signed(buf, i, bits));
        }
    } else {
        static uint8_t buf[4096];
        static int32_t codes[4096];
        MicoFmt f = fmt_of(argv[2], argv[3]);
        size_t count = (size_t)atol(argv[4]), stride = (size_t)atol(argv[5]), i;
        size_t bytes = (count * (size_t)f.bits + 7) / 8;
        int v;
        memset(buf, atoi(argv[6]), sizeof buf);
        for (i = 0; i < count && scanf("%d", &v) == 1; i++) {
            codes[i] = v;
        }
        for (i = 0; i < count; i++) {
            size_t at = (i * stride) % count;
            mico_store(buf, at, codes[at], f);
        }
        for (i = 0; i < bytes + 1; i++) {
            printf("%u\n", buf[i]);
        }
        for (i = 0; i < count; i++) {
            printf("%d\n", mico_load(buf, i, f));
        }
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    work = tmp_path_factory.mktemp("kernels")
    csrc = resources.files("mico.csrc")
    for name in ("mico_nn.h", "mico_nn_run.c", "mico_quant.c"):
        (work / name).write_text((csrc / name).read_text())
    (work / "harness.c").write_text(HARNESS)
    exe = work / "harness"
    subprocess.run(
        [
            "cc",
            "-std=c99",
            "-O2",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=all",
            "-o",
            str(exe),
            str(work / "harness.c"),
            str(work / "mico_quant.c"),
            str(work / "mico_nn_run.c"),
            "-lm",
        ],
        check=True,
    )
    return exe


def _run(exe, args, lines):
    out = subprocess.run(
        [str(exe), *map(str, args)],
        input="\n".join(map(str, lines)) + "\n",
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [int(v) for v in out.split()]


def _formats():
    return [QFormat(b, s) for b in range(1, 9) for s in (False, True)]


def _codes(fmt: QFormat, rng: np.random.Generator, n: int) -> np.ndarray:
    codes = rng.integers(fmt.qmin, fmt.qmax + 1, n)
    return np.where(codes == 0, 1, codes) if fmt.binary else codes


@pytest.mark.parametrize("fmt", _formats(), ids=str)
def test_c_quantize_matches_python_on_ties_and_edges(harness, fmt):
    scale = 0.25
    below_half = float(np.nextafter(np.float32(0.5), np.float32(0)))
    special = [0.5, -0.5, 1.5, -1.5, 2.5, -2.5, below_half, -below_half, 0.0, -0.0, 1e9, -1e9]
    rng = np.random.default_rng(fmt.bits)
    x = np.concatenate(
        [np.float32(special) * np.float32(scale), rng.normal(0, 20 * scale, 300)]
    ).astype(np.float32)
    c = _run(
        harness,
        ["q", fmt.bits, int(fmt.signed), repr(float(np.float32(1 / scale)))],
        [f"{v:08x}" for v in x.view(np.uint32)],
    )
    assert c == quantize(x, scale, fmt).astype(int).tolist()


@pytest.mark.parametrize("fmt", _formats(), ids=str)
def test_c_requant_matches_python(harness, fmt):
    rng = np.random.default_rng(100 + fmt.bits)
    # (2**30, 31) and (2**30, 32) are x/2 and x/4: odd / 2-mod-4 accumulators are exact ties
    pairs = [quantize_multiplier(r) for r in (0.0007, 0.031, 0.5, 3.7)] + [(2**30, 31), (2**30, 32)]
    for m, shift in pairs:
        acc = np.concatenate([rng.integers(-(2**20), 2**20, 300), np.arange(-9, 10)])
        c = _run(harness, ["r", m, shift, fmt.bits, int(fmt.signed)], acc.tolist())
        assert c == requantize(acc, m, shift, fmt).tolist()


@pytest.mark.parametrize("bits", range(1, 9))
def test_c_unpack_matches_python_pack(harness, bits):
    fmt = QFormat(bits, signed=True)
    codes = _codes(fmt, np.random.default_rng(bits), 301)
    packed = pack(codes, fmt)
    assert _run(harness, ["u", bits, len(codes)], packed.tolist()) == codes.tolist()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.integers(1, 8),
    st.booleans(),
    st.integers(1, 200),
    st.sampled_from([1, 3, 7, 13]),
    st.sampled_from([0x00, 0xFF, 0xA5]),
    st.integers(0, 2**32 - 1),
)
def test_c_packed_store_and_load_match_python_pack(
    harness, bits, signed, count, stride, fill, seed
):
    """Codes stored one by one, in any order, into a dirty buffer give exactly ``pack``'s
    bytes, keep the bits past the tensor, and load back unchanged."""
    fmt = QFormat(bits, signed)
    codes = _codes(fmt, np.random.default_rng(seed), count)
    if np.gcd(stride, count) != 1:
        stride = 1  # visit every position once
    out = _run(harness, ["s", bits, int(signed), count, stride, fill], codes.tolist())
    n_bytes = (count * bits + 7) // 8
    data, loaded = np.array(out[: n_bytes + 1]), out[n_bytes + 1 :]
    expected = pack(codes, fmt)
    used = count * bits - 8 * (n_bytes - 1)  # bits of the last byte the tensor occupies
    last_mask = (1 << used) - 1
    assert data[: n_bytes - 1].tolist() == expected[: n_bytes - 1].tolist()
    assert data[n_bytes - 1] & last_mask == expected[n_bytes - 1] & last_mask
    assert data[n_bytes - 1] & ~last_mask & 0xFF == fill & ~last_mask & 0xFF
    assert data[n_bytes] == fill
    assert loaded == codes.tolist()
