"""The C kernel primitives against mico.quant, value by value, through a small C harness."""

import subprocess
from importlib import resources

import numpy as np
import pytest

from mico.quant import QFormat, pack, quantize, quantize_multiplier, requantize

HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include "mico_nn.h"

/* quantize: argv = q bits signed, then float32 bit patterns on stdin; prints codes.
   requant: argv = r m shift bits signed, accumulators on stdin; prints codes.
   unpack:  argv = u bits count, packed bytes on stdin; prints codes. */
int main(int argc, char **argv)
{
    (void)argc;
    if (argv[1][0] == 'q') {
        int bits = atoi(argv[2]), sgn = atoi(argv[3]);
        int binary = sgn && bits == 1;
        int qmin = !sgn ? 0 : binary ? -1 : -((1 << (bits - 1)) - 1);
        int qmax = !sgn ? (1 << bits) - 1 : binary ? 1 : (1 << (bits - 1)) - 1;
        float inv = (float)atof(argv[4]);
        union { unsigned u; float f; } x;
        while (scanf("%x", &x.u) == 1) {
            int8_t s8;
            uint8_t u8;
            if (sgn) {
                mico_quantize_f32(&x.f, &s8, 1, inv, 1, binary, qmin, qmax);
                printf("%d\n", s8);
            } else {
                mico_quantize_f32(&x.f, &u8, 1, inv, 0, 0, qmin, qmax);
                printf("%d\n", u8);
            }
        }
    } else if (argv[1][0] == 'r') {
        MicoRequant q;
        int bits = atoi(argv[4]), sgn = atoi(argv[5]);
        long acc;
        q.to_codes = 1;
        q.is_signed = sgn;
        q.binary = sgn && bits == 1;
        q.qmin = !sgn ? 0 : q.binary ? -1 : -((1 << (bits - 1)) - 1);
        q.qmax = !sgn ? (1 << bits) - 1 : q.binary ? 1 : (1 << (bits - 1)) - 1;
        q.m = (int32_t)atol(argv[2]);
        q.shift = atoi(argv[3]);
        while (scanf("%ld", &acc) == 1) {
            printf("%d\n", mico_requant((int32_t)acc, &q));
        }
    } else {
        static uint8_t buf[4096];
        unsigned bits = (unsigned)atoi(argv[2]), count = (unsigned)atoi(argv[3]), n = 0, b, i;
        while (n < sizeof buf && scanf("%u", &b) == 1) {
            buf[n++] = (uint8_t)b;
        }
        for (i = 0; i < count; i++) {
            printf("%d\n", mico_unpack_signed(buf, i, bits));
        }
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    work = tmp_path_factory.mktemp("kernels")
    csrc = resources.files("mico.csrc")
    for name in ("mico_nn.h", "mico_quant.c"):
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
            "-o",
            str(exe),
            str(work / "harness.c"),
            str(work / "mico_quant.c"),
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
    rng = np.random.default_rng(bits)
    codes = rng.integers(fmt.qmin, fmt.qmax + 1, 301)
    if fmt.binary:
        codes = np.where(codes == 0, 1, codes)
    packed = pack(codes, fmt)
    assert _run(harness, ["u", bits, len(codes)], packed.tolist()) == codes.tolist()
