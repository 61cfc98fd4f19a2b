"""The float32 kernels of the dynamic mode (mico_f32.h) against PyTorch, through one C driver.

The driver is compiled once per module (gcc, -Werror, address + undefined sanitizers, no FP
contraction) and reads a binary file of records: a command, its int32 parameters and its arrays
(each malloc'ed at exactly its size, so the sanitizer sees any out-of-bounds access). For each
record it writes the kernel's outputs as length-prefixed chunks.

Float kernels are held to torch within rtol 1e-5 / atol 1e-6; dynamic quantization and the
quantized conv / linear are held bit for bit to the float32 formula
``y = (float)acc * (s_a * w_scale[c]) + bias[c]`` with exact integer accumulators.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from importlib import resources
from itertools import count
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from mico.quant import QFormat, dynamic_scale, pack, quantize
from mico.quant.export_ops import integer_output

SOURCES = ("mico_f32_ops.c", "mico_f32_pool.c", "mico_f32_layers.c", "mico_bit_f32.c")
BASE_CFLAGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-O2"]
CFLAGS = [*BASE_CFLAGS, "-ffp-contract=off"]
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]

(
    UNARY,
    BINARY,
    BCAST,
    AFFINE,
    COPY,
    REDUCE,
    SOFTMAX,
    LAYER_NORM,
    MAXPOOL,
    AVGPOOL,
    ADAPTIVE,
    CONV,
    LINEAR,
    MATMUL,
    DYNQ,
    BITCONV,
    BITLINEAR,
) = range(17)

DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mico_f32.h"

static FILE *in;
static void *bufs[64];
static int nbufs;

static int32_t rd_i32(void)
{
    int32_t v;
    if (fread(&v, sizeof v, 1, in) != 1) {
        fprintf(stderr, "truncated input\n");
        exit(3);
    }
    return v;
}

static float rd_f32(void)
{
    float v;
    if (fread(&v, sizeof v, 1, in) != 1) {
        exit(3);
    }
    return v;
}

/* An array: int32 count (-1: NULL), then the elements, in a buffer of exactly that size. */
static void *rd_arr(size_t elem, int32_t *count)
{
    int32_t n = rd_i32();
    void *p;
    if (count) {
        *count = n;
    }
    if (n < 0) {
        return NULL;
    }
    p = malloc(n ? (size_t)n * elem : 1);
    if (!p || (n && fread(p, elem, (size_t)n, in) != (size_t)n)) {
        exit(4);
    }
    bufs[nbufs++] = p;
    return p;
}

static void *out_buf(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        exit(5);
    }
    memset(p, 0xA5, bytes);
    bufs[nbufs++] = p;
    return p;
}

static void emit(const void *p, size_t bytes)
{
    int32_t n = (int32_t)bytes;
    fwrite(&n, sizeof n, 1, stdout);
    fwrite(p, 1, bytes, stdout);
}

static void rd_ints(int32_t *v, int n)
{
    int i;
    for (i = 0; i < n; i++) {
        v[i] = rd_i32();
    }
}

static int32_t prod(const int32_t *s, int32_t n)
{
    int32_t i, p = 1;
    for (i = 0; i < n; i++) {
        p *= s[i];
    }
    return p;
}

static void rd_dynq(MicoDynQuant *q)
{
    q->bits = rd_i32();
    q->is_signed = rd_i32();
    q->absmean = rd_i32();
    q->qmin = rd_i32();
    q->qmax = rd_i32();
    q->asymmetric = 0;
}

int main(int argc, char **argv)
{
    int32_t cmd;
    if (argc != 2 || !(in = fopen(argv[1], "rb"))) {
        return 2;
    }
    while (fread(&cmd, sizeof cmd, 1, in) == 1) {
        int32_t v[32], n, m;
        nbufs = 0;
        switch (cmd) {
        case 0: { /* unary: op p0 p1 inplace x */
            float p0, p1, *x, *y;
            rd_ints(v, 1);
            p0 = rd_f32();
            p1 = rd_f32();
            rd_ints(v + 1, 1);
            x = rd_arr(4, &n);
            y = v[1] ? x : out_buf((size_t)n * 4);
            mico_f32_unary(v[0], x, y, n, p0, p1);
            emit(y, (size_t)n * 4);
            break;
        }
        case 1: { /* binary: op inplace a b */
            float *a, *b, *y;
            rd_ints(v, 2);
            a = rd_arr(4, &n);
            b = rd_arr(4, NULL);
            y = v[1] ? a : out_buf((size_t)n * 4);
            mico_f32_binary(v[0], a, b, y, n);
            emit(y, (size_t)n * 4);
            break;
        }
        case 2: { /* bcast: op ndim shape a_strides b_strides a b */
            int32_t *shape, *as, *bs;
            float *a, *b, *y;
            rd_ints(v, 2);
            shape = rd_arr(4, NULL);
            as = rd_arr(4, NULL);
            bs = rd_arr(4, NULL);
            a = rd_arr(4, NULL);
            b = rd_arr(4, NULL);
            n = prod(shape, v[1]);
            y = out_buf((size_t)n * 4);
            mico_f32_binary_bcast(v[0], a, as, b, bs, y, shape, v[1]);
            emit(y, (size_t)n * 4);
            break;
        }
        case 3: { /* channel affine: channels inner inplace x mul add */
            float *x, *y, *mul, *add;
            rd_ints(v, 3);
            x = rd_arr(4, &n);
            mul = rd_arr(4, NULL);
            add = rd_arr(4, NULL);
            y = v[2] ? x : out_buf((size_t)n * 4);
            mico_f32_channel_affine(x, y, v[0], v[1], mul, add);
            emit(y, (size_t)n * 4);
            break;
        }
        case 4: { /* copy: ndim shape src_off src_strides dst_off dst_strides src dst */
            int32_t *shape, *ss, *ds;
            float *src, *dst;
            rd_ints(v, 1);
            shape = rd_arr(4, NULL);
            rd_ints(v + 1, 1);
            ss = rd_arr(4, NULL);
            rd_ints(v + 2, 1);
            ds = rd_arr(4, NULL);
            src = rd_arr(4, NULL);
            dst = rd_arr(4, &n);
            mico_f32_copy_strided(src, v[1], ss, dst, v[2], ds, shape, v[0]);
            emit(dst, (size_t)n * 4);
            break;
        }
        case 5: { /* reduce: op outer reduce inner x */
            float *x, *y;
            rd_ints(v, 4);
            x = rd_arr(4, NULL);
            y = out_buf((size_t)v[1] * v[3] * 4);
            mico_f32_reduce(v[0], x, y, v[1], v[2], v[3]);
            emit(y, (size_t)v[1] * v[3] * 4);
            break;
        }
        case 6: { /* softmax: outer len inner log inplace x */
            float *x, *y;
            rd_ints(v, 5);
            x = rd_arr(4, &n);
            y = v[4] ? x : out_buf((size_t)n * 4);
            mico_f32_softmax(x, y, v[0], v[1], v[2], v[3]);
            emit(y, (size_t)n * 4);
            break;
        }
        case 7: { /* layer norm: outer n inplace eps x gamma beta */
            float eps, *x, *y, *g, *b;
            rd_ints(v, 3);
            eps = rd_f32();
            x = rd_arr(4, &n);
            g = rd_arr(4, NULL);
            b = rd_arr(4, NULL);
            y = v[2] ? x : out_buf((size_t)n * 4);
            mico_f32_layer_norm(x, y, v[0], v[1], g, b, eps);
            emit(y, (size_t)n * 4);
            break;
        }
        case 8:
        case 9: { /* max / avg pool: 15 ints, x */
            MicoPool2dF p;
            float *x, *y;
            rd_ints(v, 15);
            p.channels = v[0]; p.in_h = v[1]; p.in_w = v[2]; p.out_h = v[3]; p.out_w = v[4];
            p.k_h = v[5]; p.k_w = v[6]; p.stride_h = v[7]; p.stride_w = v[8];
            p.pad_h = v[9]; p.pad_w = v[10]; p.dil_h = v[11]; p.dil_w = v[12];
            p.count_include_pad = v[13]; p.divisor = v[14];
            x = rd_arr(4, NULL);
            n = p.channels * p.out_h * p.out_w;
            y = out_buf((size_t)n * 4);
            if (cmd == 8) {
                mico_f32_maxpool2d(&p, x, y);
            } else {
                mico_f32_avgpool2d(&p, x, y);
            }
            emit(y, (size_t)n * 4);
            break;
        }
        case 10: { /* adaptive avg pool: c ih iw oh ow x */
            float *x, *y;
            rd_ints(v, 5);
            x = rd_arr(4, NULL);
            n = v[0] * v[3] * v[4];
            y = out_buf((size_t)n * 4);
            mico_f32_adaptive_avgpool2d(v[0], v[1], v[2], v[3], v[4], x, y);
            emit(y, (size_t)n * 4);
            break;
        }
        case 11: { /* conv: 15 ints, weight bias x */
            MicoConv2dF p;
            float *x, *y;
            rd_ints(v, 15);
            p.in_c = v[0]; p.in_h = v[1]; p.in_w = v[2]; p.out_c = v[3]; p.out_h = v[4];
            p.out_w = v[5]; p.k_h = v[6]; p.k_w = v[7]; p.stride_h = v[8]; p.stride_w = v[9];
            p.pad_h = v[10]; p.pad_w = v[11]; p.dil_h = v[12]; p.dil_w = v[13]; p.groups = v[14];
            p.weight = rd_arr(4, NULL);
            p.bias = rd_arr(4, NULL);
            x = rd_arr(4, NULL);
            n = p.out_c * p.out_h * p.out_w;
            y = out_buf((size_t)n * 4);
            mico_f32_conv2d(&p, x, y);
            emit(y, (size_t)n * 4);
            break;
        }
        case 12: { /* linear: rows in out w bias x */
            float *w, *b, *x, *y;
            rd_ints(v, 3);
            w = rd_arr(4, NULL);
            b = rd_arr(4, NULL);
            x = rd_arr(4, NULL);
            n = v[0] * v[2];
            y = out_buf((size_t)n * 4);
            mico_f32_linear(v[0], v[1], v[2], w, b, x, y);
            emit(y, (size_t)n * 4);
            break;
        }
        case 13: { /* matmul: a_bs b_bs batch m k n a b */
            float *a, *b, *y;
            rd_ints(v, 6);
            a = rd_arr(4, NULL);
            b = rd_arr(4, NULL);
            n = v[2] * v[3] * v[5];
            y = out_buf((size_t)n * 4);
            mico_f32_matmul(a, v[0], b, v[1], y, v[2], v[3], v[4], v[5]);
            emit(y, (size_t)n * 4);
            break;
        }
        case 14: { /* dynamic quantization: 5 ints, x -> scale, codes */
            MicoDynQuant q;
            float *x, s;
            int8_t *codes;
            rd_dynq(&q);
            x = rd_arr(4, &n);
            codes = out_buf((size_t)n);
            s = mico_dyn_quantize(&q, x, codes, n);
            emit(&s, 4);
            emit(codes, (size_t)n);
            break;
        }
        case 15: { /* bit conv: 15 ints, w_bits per_channel, 5 act ints, weight scale bias x */
            MicoBitConv2dF p;
            float *x, *y;
            int8_t *codes;
            rd_ints(v, 17);
            p.in_c = v[0]; p.in_h = v[1]; p.in_w = v[2]; p.out_c = v[3]; p.out_h = v[4];
            p.out_w = v[5]; p.k_h = v[6]; p.k_w = v[7]; p.stride_h = v[8]; p.stride_w = v[9];
            p.pad_h = v[10]; p.pad_w = v[11]; p.dil_h = v[12]; p.dil_w = v[13]; p.groups = v[14];
            p.w_bits = v[15]; p.w_per_channel = v[16];
            rd_dynq(&p.act);
            p.weight = rd_arr(1, NULL);
            p.w_scale = rd_arr(4, NULL);
            p.bias = rd_arr(4, NULL);
            x = rd_arr(4, &m);
            codes = out_buf((size_t)m);
            n = p.out_c * p.out_h * p.out_w;
            y = out_buf((size_t)n * 4);
            mico_bit_conv2d_f32(&p, x, y, codes);
            emit(y, (size_t)n * 4);
            break;
        }
        case 16: { /* bit linear: rows in out w_bits per_channel, 5 act ints, weight scale bias x */
            MicoBitLinearF p;
            float *x, *y;
            int8_t *codes;
            rd_ints(v, 5);
            p.rows = v[0]; p.in_features = v[1]; p.out_features = v[2];
            p.w_bits = v[3]; p.w_per_channel = v[4];
            rd_dynq(&p.act);
            p.weight = rd_arr(1, NULL);
            p.w_scale = rd_arr(4, NULL);
            p.bias = rd_arr(4, NULL);
            x = rd_arr(4, &m);
            codes = out_buf((size_t)m);
            n = p.rows * p.out_features;
            y = out_buf((size_t)n * 4);
            mico_bit_linear_f32(&p, x, y, codes);
            emit(y, (size_t)n * 4);
            break;
        }
        default:
            fprintf(stderr, "bad command %d\n", (int)cmd);
            return 6;
        }
        while (nbufs > 0) {
            free(bufs[--nbufs]);
        }
    }
    fclose(in);
    return 0;
}
"""


# ---------------------------------------------------------------------------------- harness
class Record:
    """One kernel call: a command, int32 / float32 scalars and length-prefixed arrays."""

    def __init__(self, cmd: int) -> None:
        self.parts = [struct.pack("<i", cmd)]

    def i(self, *values: int) -> Record:
        self.parts.append(struct.pack(f"<{len(values)}i", *map(int, values)))
        return self

    def f(self, *values: float) -> Record:
        self.parts.append(np.asarray(values, dtype=np.float32).tobytes())
        return self

    def _arr(self, a, dtype) -> Record:
        if a is None:
            return self.i(-1)
        data = np.ascontiguousarray(np.asarray(a, dtype=dtype).ravel())
        self.i(data.size)
        self.parts.append(data.tobytes())
        return self

    def fa(self, a) -> Record:
        if isinstance(a, torch.Tensor):
            a = a.detach().numpy()
        return self._arr(a, np.float32)

    def ia(self, a) -> Record:
        return self._arr(a, np.int32)

    def ba(self, a) -> Record:
        return self._arr(a, np.uint8)

    def bytes(self) -> bytes:
        return b"".join(self.parts)


class Driver:
    def __init__(self, exe: Path, work: Path) -> None:
        self.exe, self.work, self._ids = exe, work, count()

    def run(self, records: list[Record]) -> list[bytes]:
        """Run the records in one process; the output chunks, in order."""
        path = self.work / f"in{next(self._ids)}.bin"
        path.write_bytes(b"".join(r.bytes() for r in records))
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0", UBSAN_OPTIONS="print_stacktrace=1")
        proc = subprocess.run([str(self.exe), str(path)], capture_output=True, env=env)
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")
        out, chunks, pos = proc.stdout, [], 0
        while pos < len(out):
            (n,) = struct.unpack_from("<i", out, pos)
            chunks.append(out[pos + 4 : pos + 4 + n])
            pos += 4 + n
        path.unlink()
        return chunks

    def floats(self, *records: Record) -> list[torch.Tensor]:
        """Records with one float32 output each."""
        return [torch.from_numpy(np.frombuffer(c, np.float32).copy()) for c in self.run(records)]


def _csrc_dir(work: Path) -> Path:
    csrc = resources.files("mico.csrc")
    for name in (*SOURCES, "mico_f32.h"):
        (work / name).write_text((csrc / name).read_text())
    return work


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Driver:
    work = _csrc_dir(tmp_path_factory.mktemp("f32_kernels"))
    (work / "driver.c").write_text(DRIVER)
    exe = work / "driver"
    sources = [str(work / s) for s in ("driver.c", *SOURCES)]
    subprocess.run(
        ["gcc", *CFLAGS, "-g", *SANITIZE, "-I", str(work), "-o", str(exe), *sources, "-lm"],
        check=True,
    )
    return Driver(exe, work)


def close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(
        actual, expected.reshape(-1).to(torch.float32), rtol=1e-5, atol=1e-6, equal_nan=True
    )


def dyadic(rng: np.random.Generator, shape, denom: int = 16) -> np.ndarray:
    """Small multiples of 1/denom: products and sums are exact in float32 in any order."""
    return (rng.integers(-denom, denom + 1, size=shape) / denom).astype(np.float32)


# ---------------------------------------------------------------------------------- elementwise
UNARY_OPS = {
    "relu": (0, 0.0, 0.0, torch.relu),
    "clamp": (1, -1.0, 6.0, lambda x: torch.clamp(x, -1.0, 6.0)),
    "sigmoid": (2, 0.0, 0.0, torch.sigmoid),
    "tanh": (3, 0.0, 0.0, torch.tanh),
    "gelu": (4, 0.0, 0.0, F.gelu),
    "gelu_tanh": (5, 0.0, 0.0, lambda x: F.gelu(x, approximate="tanh")),
    "silu": (6, 0.0, 0.0, F.silu),
    "elu": (7, 0.7, 0.0, lambda x: F.elu(x, alpha=0.7)),
    "leaky_relu": (8, 0.01, 0.0, lambda x: F.leaky_relu(x, 0.01)),
    "hardswish": (9, 0.0, 0.0, F.hardswish),
    "hardsigmoid": (10, 0.0, 0.0, F.hardsigmoid),
    "exp": (11, 0.0, 0.0, torch.exp),
    "neg": (12, 0.0, 0.0, torch.neg),
    "abs": (13, 0.0, 0.0, torch.abs),
    "sqrt": (14, 0.0, 0.0, torch.sqrt),
    "rsqrt": (15, 0.0, 0.0, torch.rsqrt),
    "affine": (16, 1.7, -0.3, lambda x: x * 1.7 - 0.3),
}


@pytest.mark.parametrize("name", UNARY_OPS)
def test_unary(driver, name):
    op, p0, p1, fn = UNARY_OPS[name]
    rng = np.random.default_rng(op)
    x = np.concatenate([rng.normal(0, 3, 200), [0.0, -0.0, 3.0, -3.0, 6.0, 20.0, -20.0]])
    if name in ("sqrt", "rsqrt"):
        x = np.abs(x) + 0.01
    x = torch.from_numpy(x.astype(np.float32))
    recs = [Record(UNARY).i(op).f(p0, p1).i(inplace).fa(x) for inplace in (0, 1)]
    for out in driver.floats(*recs):
        close(out, fn(x))


BINARY_OPS = [torch.add, torch.sub, torch.mul, torch.div, torch.maximum, torch.minimum]


@pytest.mark.parametrize("op", range(6), ids=[f.__name__ for f in BINARY_OPS])
def test_binary(driver, op):
    rng = np.random.default_rng(op)
    a = torch.from_numpy(rng.normal(0, 2, 101).astype(np.float32))
    b = torch.from_numpy(rng.normal(0, 2, 101).astype(np.float32))
    if op >= 4:  # torch.maximum / minimum propagate NaN from either side
        a[3], b[5] = float("nan"), float("nan")
    recs = [Record(BINARY).i(op, inplace).fa(a).fa(b) for inplace in (0, 1)]
    for out in driver.floats(*recs):
        close(out, BINARY_OPS[op](a, b))


@st.composite
def _operand(draw, shape: list[int]):
    """A tensor broadcastable to `shape` (some dims 1), stored permuted (non-contiguous)."""
    own = [d if draw(st.booleans()) else 1 for d in shape]
    perm = draw(st.permutations(range(len(shape))))
    seed = draw(st.integers(0, 2**31 - 1))
    base = torch.from_numpy(
        np.random.default_rng(seed).normal(0, 2, [own[p] for p in perm]).astype(np.float32)
    )
    inverse = [perm.index(k) for k in range(len(shape))]
    view = base.permute(*inverse) if shape else base
    strides = [
        0 if o != d or o == 1 else view.stride(k)
        for k, (o, d) in enumerate(zip(own, shape, strict=True))
    ]
    return view, base, strides


@st.composite
def _bcast_case(draw):
    ndim = draw(st.integers(0, 6))
    shape = draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim))
    return draw(st.integers(0, 5)), shape, draw(_operand(shape)), draw(_operand(shape))


_FEW = settings(max_examples=15, deadline=None)  # every example runs the driver once


@_FEW
@given(case=_bcast_case())
def test_binary_bcast(driver, case):
    op, shape, (a, a_base, a_strides), (b, b_base, b_strides) = case
    rec = Record(BCAST).i(op, len(shape)).ia(shape).ia(a_strides).ia(b_strides)
    (out,) = driver.floats(rec.fa(a_base).fa(b_base))
    close(out, BINARY_OPS[op](a, b).expand(shape))


def test_channel_affine(driver):
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.normal(0, 1, (5, 7)).astype(np.float32))
    mul = torch.from_numpy(rng.normal(0, 1, 5).astype(np.float32))
    add = torch.from_numpy(rng.normal(0, 1, 5).astype(np.float32))
    cases = [(mul, add), (mul, None), (None, add)]
    recs = [Record(AFFINE).i(5, 7, ip).fa(x).fa(m).fa(a) for m, a in cases for ip in (0, 1)]
    outs = driver.floats(*recs)
    for k, (m, a) in enumerate(cases):
        ref = x * m[:, None] if m is not None else x.clone()
        if a is not None:
            ref = ref + a[:, None]
        close(outs[2 * k], ref)
        close(outs[2 * k + 1], ref)


# ---------------------------------------------------------------------------------- data movement
@st.composite
def _copy_case(draw):
    ndim = draw(st.integers(1, 4))
    full = draw(st.lists(st.integers(1, 5), min_size=ndim, max_size=ndim))
    src = torch.arange(float(np.prod(full))).reshape(full) + 0.5
    # a view of src: a slice with a step in every dim, then a permutation, maybe an expand
    index = []
    for d in full:
        start = draw(st.integers(0, d - 1))
        step = draw(st.integers(1, 2))
        stop = draw(st.integers(start + 1, d))
        index.append(slice(start, stop, step))
    view = src[tuple(index)].permute(*draw(st.permutations(range(ndim))))
    if draw(st.booleans()):  # a broadcast dim (stride 0)
        pos = draw(st.integers(0, ndim))
        expanded = [*view.shape[:pos], 3, *view.shape[pos:]]
        view = view.unsqueeze(pos).expand(expanded)
    shape = list(view.shape)
    # destination: the view's shape padded along one dim (a concat slot), at an offset
    pad_dim = draw(st.integers(0, len(shape) - 1))
    before, after = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    dst_full = list(shape)
    dst_full[pad_dim] += before + after
    dst = torch.full(dst_full, -7.0)
    slot = [slice(None)] * len(shape)
    slot[pad_dim] = slice(before, before + shape[pad_dim])
    return src, view, dst, tuple(slot)


@_FEW
@given(case=_copy_case())
def test_copy_strided(driver, case):
    src, view, dst, slot = case
    target = dst[slot]
    rec = Record(COPY).i(view.dim()).ia(list(view.shape))
    rec.i(view.storage_offset()).ia(list(view.stride()))
    rec.i(target.storage_offset()).ia(list(target.stride()))
    (out,) = driver.floats(rec.fa(src).fa(dst))  # src and dst are contiguous storages
    expected = dst.clone()
    expected[slot] = view
    close(out, expected)


def test_copy_strided_scalar(driver):
    src = np.float32([1.0, 2.0, 3.0])
    rec = Record(COPY).i(0).ia([]).i(2).ia([]).i(1).ia([]).fa(src).fa(np.zeros(2, np.float32))
    (out,) = driver.floats(rec)
    close(out, torch.tensor([0.0, 3.0]))


# ---------------------------------------------------------------------------------- reductions
@pytest.mark.parametrize("shape", [(1, 7, 1), (3, 5, 4), (2, 1, 3), (1, 300, 2)])
def test_reduce(driver, shape):
    rng = np.random.default_rng(len(shape) + shape[1])
    x = torch.from_numpy(rng.normal(1, 3, shape).astype(np.float32))
    recs = [Record(REDUCE).i(op, *shape).fa(x) for op in range(4)]
    mean, total, mx, mn = driver.floats(*recs)
    close(mean, x.double().mean(dim=1).float())
    close(total, x.double().sum(dim=1).float())
    close(mx, x.amax(dim=1))
    close(mn, x.amin(dim=1))


@pytest.mark.parametrize("shape", [(1, 10, 1), (3, 4, 5), (2, 1, 3)])
def test_softmax(driver, shape):
    rng = np.random.default_rng(shape[1])
    x = torch.from_numpy(rng.normal(0, 4, shape).astype(np.float32))
    x[0, 0, 0] = 90.0  # expf overflows without the max subtraction
    recs = [Record(SOFTMAX).i(*shape, log, ip).fa(x) for log in (0, 1) for ip in (0, 1)]
    sm, sm_ip, lsm, lsm_ip = driver.floats(*recs)
    for out in (sm, sm_ip):
        close(out, torch.softmax(x, dim=1))
    for out in (lsm, lsm_ip):
        close(out, torch.log_softmax(x, dim=1))


@pytest.mark.parametrize("affine", ["both", "gamma", "none"])
def test_layer_norm(driver, affine):
    rng = np.random.default_rng(3)
    x = torch.from_numpy(rng.normal(2, 3, (4, 24)).astype(np.float32))
    gamma = torch.from_numpy(rng.normal(1, 0.5, 24).astype(np.float32))
    beta = torch.from_numpy(rng.normal(0, 1, 24).astype(np.float32))
    g = gamma if affine != "none" else None
    b = beta if affine == "both" else None
    recs = [Record(LAYER_NORM).i(4, 24, ip).f(1e-5).fa(x).fa(g).fa(b) for ip in (0, 1)]
    for out in driver.floats(*recs):
        close(out, F.layer_norm(x, (24,), g, b, eps=1e-5))


# ---------------------------------------------------------------------------------- pooling
def _pool_rec(cmd, x, y, k, stride, pad, dil, include_pad=1, divisor=0):
    c, ih, iw = x.shape
    _, oh, ow = y.shape
    return Record(cmd).i(c, ih, iw, oh, ow, *k, *stride, *pad, *dil, include_pad, divisor).fa(x)


# (input hw, kernel, stride, padding, dilation, ceil_mode)
MAXPOOL_CASES = [
    ((8, 8), (2, 2), (2, 2), (0, 0), (1, 1), False),
    ((7, 9), (3, 3), (2, 2), (1, 1), (1, 1), False),
    ((7, 9), (3, 2), (2, 3), (1, 1), (1, 1), True),
    ((9, 9), (3, 3), (1, 2), (1, 0), (2, 2), False),
    ((1, 17), (1, 3), (1, 2), (0, 1), (1, 1), True),  # max_pool1d
]


@pytest.mark.parametrize("case", MAXPOOL_CASES)
def test_maxpool2d(driver, case):
    hw, k, stride, pad, dil, ceil = case
    x = torch.from_numpy(np.random.default_rng(1).normal(0, 1, (3, *hw)).astype(np.float32))
    x[0, 0, 0] = -50.0
    x[2, 0, 1] = float("nan")  # torch's max pooling propagates NaN
    y = F.max_pool2d(x, k, stride, pad, dil, ceil_mode=ceil)
    (out,) = driver.floats(_pool_rec(MAXPOOL, x, y, k, stride, pad, dil))
    close(out, y)


# (input hw, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
AVGPOOL_CASES = [
    ((8, 8), (2, 2), (2, 2), (0, 0), False, True, None),
    ((7, 9), (3, 3), (2, 2), (1, 1), False, True, None),
    ((7, 9), (3, 3), (2, 2), (1, 1), False, False, None),
    ((7, 8), (3, 2), (2, 3), (1, 1), True, True, None),
    ((7, 8), (3, 2), (2, 3), (1, 1), True, False, None),
    ((6, 7), (3, 3), (2, 2), (1, 1), True, True, 5),
    ((5, 6), (4, 4), (3, 3), (2, 2), True, True, None),
    ((1, 17), (1, 4), (1, 3), (0, 2), True, False, None),  # avg_pool1d
]


@pytest.mark.parametrize("case", AVGPOOL_CASES)
def test_avgpool2d(driver, case):
    hw, k, stride, pad, ceil, include, div = case
    x = torch.from_numpy(np.random.default_rng(2).normal(0, 1, (3, *hw)).astype(np.float32))
    y = F.avg_pool2d(x, k, stride, pad, ceil, include, div)
    rec = _pool_rec(AVGPOOL, x, y, k, stride, pad, (1, 1), int(include), div or 0)
    (out,) = driver.floats(rec)
    close(out, y)


@pytest.mark.parametrize("sizes", [((8, 8), (1, 1)), ((7, 10), (3, 4)), ((5, 3), (7, 5))])
def test_adaptive_avgpool2d(driver, sizes):
    (ih, iw), (oh, ow) = sizes
    x = torch.from_numpy(np.random.default_rng(4).normal(0, 1, (2, ih, iw)).astype(np.float32))
    (out,) = driver.floats(Record(ADAPTIVE).i(2, ih, iw, oh, ow).fa(x))
    close(out, F.adaptive_avg_pool2d(x, (oh, ow)))


# ---------------------------------------------------------------------------------- conv geometry
# (in_c, in_hw, out_c, kernel, stride, padding, dilation, groups)
CONV_CASES = {
    "3x3": (3, (6, 7), 4, (3, 3), (1, 1), (1, 1), (1, 1), 1),
    "stride_nonsquare": (2, (7, 8), 3, (3, 2), (2, 2), (1, 0), (1, 1), 1),
    "dilation": (2, (9, 8), 3, (3, 3), (1, 2), (2, 1), (2, 1), 1),
    "groups": (4, (5, 6), 6, (3, 3), (1, 1), (1, 1), (1, 1), 2),
    "depthwise": (4, (6, 5), 8, (3, 3), (2, 1), (1, 1), (1, 1), 4),
    "conv1d": (3, (1, 19), 5, (1, 5), (1, 2), (0, 2), (1, 2), 1),
    "pointwise_long": (41, (3, 3), 3, (1, 1), (1, 1), (0, 0), (1, 1), 1),
    "big_padding": (2, (3, 4), 2, (3, 3), (1, 1), (3, 3), (1, 1), 1),
    # more than one tile of output columns (MICO_BIT_CONV_TILE = 32)
    "wide_conv1d": (2, (1, 75), 3, (1, 3), (1, 1), (0, 1), (1, 1), 1),
    "wide_strided": (2, (3, 71), 2, (3, 3), (1, 2), (1, 2), (1, 2), 2),
}


def _conv_geometry(case):
    in_c, (ih, iw), out_c, k, stride, pad, dil, groups = case
    oh = (ih + 2 * pad[0] - dil[0] * (k[0] - 1) - 1) // stride[0] + 1
    ow = (iw + 2 * pad[1] - dil[1] * (k[1] - 1) - 1) // stride[1] + 1
    ints = [in_c, ih, iw, out_c, oh, ow, *k, *stride, *pad, *dil, groups]
    kwargs = {"stride": stride, "padding": pad, "dilation": dil, "groups": groups}
    return ints, (out_c, in_c // groups, *k), kwargs


@pytest.mark.parametrize("name", CONV_CASES)
def test_conv2d(driver, name):
    ints, wshape, kw = _conv_geometry(CONV_CASES[name])
    rng = np.random.default_rng(5)
    x = torch.from_numpy(dyadic(rng, ints[:3]))
    w = torch.from_numpy(dyadic(rng, wshape))
    b = torch.from_numpy(dyadic(rng, wshape[0]))
    outs = driver.floats(*[Record(CONV).i(*ints).fa(w).fa(bias).fa(x) for bias in (b, None)])
    close(outs[0], F.conv2d(x[None], w, b, **kw))
    close(outs[1], F.conv2d(x[None], w, None, **kw))


def test_linear(driver):
    rng = np.random.default_rng(6)
    x = torch.from_numpy(dyadic(rng, (3, 13)))
    w = torch.from_numpy(dyadic(rng, (5, 13)))
    b = torch.from_numpy(dyadic(rng, 5))
    recs = [Record(LINEAR).i(3, 13, 5).fa(w).fa(bias).fa(x) for bias in (b, None)]
    with_bias, without = driver.floats(*recs)
    close(with_bias, F.linear(x, w, b))
    close(without, F.linear(x, w))
    # non-dyadic values: within float32 accumulation error of the exact result
    x = torch.from_numpy(rng.normal(0, 1, (2, 9)).astype(np.float32))
    (out,) = driver.floats(Record(LINEAR).i(2, 9, 5).fa(w[:, :9].contiguous()).fa(b).fa(x))
    close(out, F.linear(x.double(), w[:, :9].double(), b.double()))


@pytest.mark.parametrize("broadcast", ["none", "a", "b"])
def test_matmul(driver, broadcast):
    rng = np.random.default_rng(7)
    batch, m, k, n = 3, 4, 5, 6
    a = torch.from_numpy(dyadic(rng, (1 if broadcast == "a" else batch, m, k)))
    b = torch.from_numpy(dyadic(rng, (1 if broadcast == "b" else batch, k, n)))
    a_bs = 0 if broadcast == "a" else m * k
    b_bs = 0 if broadcast == "b" else k * n
    (out,) = driver.floats(Record(MATMUL).i(a_bs, b_bs, batch, m, k, n).fa(a).fa(b))
    close(out, torch.matmul(a, b))


# ---------------------------------------------------------------------------------- quantized
def _act_formats() -> list[tuple[QFormat, bool]]:
    """Every activation code format, plus MiCo's absmean scales (binary, ternary, 4-bit)."""
    fmts = [(QFormat(b, s), False) for b in range(1, 9) for s in (True, False)]
    return [*fmts, (QFormat(1, True), True), (QFormat(2, True), True), (QFormat(4, True), True)]


def _fmt_id(f: tuple[QFormat, bool]) -> str:
    return f"{f[0]}{'-absmean' if f[1] else ''}"


def _dynq_ints(fmt: QFormat, absmean: bool) -> list[int]:
    return [fmt.bits, int(fmt.signed), int(absmean), fmt.qmin, fmt.qmax]


def ref_dynamic_scale(x: np.ndarray, fmt: QFormat, absmean: bool) -> np.float32:
    """The dynamic scale: mico's dynamic_scale, absmean as a float64 sum in index order."""
    flat = np.asarray(x, np.float32).ravel()
    if absmean:
        total = np.cumsum(np.abs(flat.astype(np.float64)))[-1] if flat.size else 0.0
        s = np.float32(total / flat.size) if flat.size else np.float32(np.nan)
        return s if s > 0 else np.float32(1.0)
    t = dynamic_scale(torch.from_numpy(flat)[None], fmt)
    return np.float32(t.item())


def ref_quantize(x: np.ndarray, fmt: QFormat, absmean: bool) -> tuple[np.float32, np.ndarray]:
    scale = ref_dynamic_scale(x, fmt, absmean)
    codes = quantize(torch.from_numpy(np.asarray(x, np.float32)), torch.tensor(scale), fmt)
    return scale, codes.numpy().astype(np.int64)


def _dynq_inputs(fmt: QFormat) -> list[np.ndarray]:
    rng = np.random.default_rng(fmt.bits)
    s = np.float32(0.25)  # max |x| = qmax * s makes the scale s exactly: ties are exact
    ties = np.float32([0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.0, -0.0]) * s
    below = np.nextafter(np.float32(0.5), np.float32(0)) * s
    rest = rng.uniform(-1, 1, 50) * (fmt.qmax * s)
    tied = np.concatenate([[fmt.qmax * s], ties, [below, -below], rest])
    return [
        tied.astype(np.float32),
        rng.normal(0.3, 2, 257).astype(np.float32),
        np.zeros(9, np.float32),  # scale 0 becomes 1
        -np.abs(rng.normal(0, 1, 9)).astype(np.float32),  # unsigned: scale 1, codes 0
        rng.normal(0, 1e-3, 1000).astype(np.float32),
    ]


@pytest.mark.parametrize("fa", _act_formats(), ids=_fmt_id)
def test_dyn_quantize(driver, fa):
    fmt, absmean = fa
    inputs = _dynq_inputs(fmt)
    chunks = driver.run([Record(DYNQ).i(*_dynq_ints(fmt, absmean)).fa(x) for x in inputs])
    for k, x in enumerate(inputs):
        scale, codes = ref_quantize(x, fmt, absmean)
        c_scale = np.frombuffer(chunks[2 * k], np.float32)[0]
        c_codes = np.frombuffer(chunks[2 * k + 1], np.int8 if fmt.signed else np.uint8)
        assert c_scale.view(np.uint32) == scale.view(np.uint32), (k, c_scale, scale)
        np.testing.assert_array_equal(c_codes.astype(np.int64), codes)


def _weight_formats() -> list[tuple[int, bool]]:
    """(storage bits, ternary): widths 1..8 and ternary 2-bit {-1, 0, 1}."""
    return [*((b, False) for b in range(1, 9)), (2, True)]


def _weight_codes(rng, bits: int, ternary: bool, shape) -> np.ndarray:
    fmt = QFormat(bits, True)
    if ternary:
        return rng.integers(-1, 2, shape)
    if fmt.binary:
        return rng.choice([-1, 1], shape)
    return rng.integers(fmt.qmin, fmt.qmax + 1, shape)


def _bit_output(acc: torch.Tensor, s_a: np.float32, w_scale: np.ndarray, bias, cshape):
    """(float)acc * (s_a * w_scale[c]) + bias[c], each a float32 operation."""
    assert torch.equal(acc, acc.round())  # exact integers
    mul = (np.float32(s_a) * w_scale).astype(np.float32)
    y = acc.numpy().astype(np.float32) * mul.reshape(cshape)
    if bias is not None:
        y = y + bias.reshape(cshape)
    return y.astype(np.float32)


def _bit_case(rng, k: int, wf, n_out: int, wshape):
    bits, ternary = wf
    af = _act_formats()[k % len(_act_formats())]
    per_channel = k % 2 == 0
    w_codes = _weight_codes(rng, bits, ternary, wshape)
    w_scale = rng.uniform(0.01, 0.2, n_out if per_channel else 1).astype(np.float32)
    bias = rng.normal(0, 1, n_out).astype(np.float32) if k % 3 != 1 else None
    packed = pack(w_codes, QFormat(bits, True))
    return af, per_channel, w_codes, w_scale, bias, packed


def _assert_bits_equal(out: bytes, expected: np.ndarray, what: str) -> None:
    got = np.frombuffer(out, np.float32)
    exp = np.ascontiguousarray(expected, np.float32).ravel()
    bad = np.flatnonzero(got.view(np.uint32) != exp.view(np.uint32))
    assert bad.size == 0, f"{what}: {bad.size} differ, first {got[bad[:4]]} vs {exp[bad[:4]]}"


@pytest.mark.parametrize("name", CONV_CASES)
def test_bit_conv2d(driver, name):
    ints, wshape, kw = _conv_geometry(CONV_CASES[name])
    rng = np.random.default_rng(8)
    records, refs = [], []
    for wf in _weight_formats():
        for k in range(len(_act_formats())):
            af, per_channel, w_codes, w_scale, bias, packed = _bit_case(
                rng, k, wf, wshape[0], wshape
            )
            fmt, absmean = af
            x = rng.normal(0.2, 1.5, ints[:3]).astype(np.float32)
            rec = Record(BITCONV).i(*ints, wf[0], int(per_channel), *_dynq_ints(fmt, absmean))
            records.append(rec.ba(packed).fa(w_scale).fa(bias).fa(x))
            s_a, a_codes = ref_quantize(x, fmt, absmean)
            acc = F.conv2d(
                torch.from_numpy(a_codes).double()[None],
                torch.from_numpy(w_codes).double(),
                **kw,
            )[0]
            ref = _bit_output(acc, s_a, w_scale, bias, (-1, 1, 1))
            refs.append(
                (ref, f"w{wf} {_fmt_id(af)} per_channel={per_channel} bias={bias is not None}")
            )
    for out, (ref, what) in zip(driver.run(records), refs, strict=True):
        _assert_bits_equal(out, ref, what)


@pytest.mark.parametrize("wf", _weight_formats(), ids=lambda w: "ternary" if w[1] else f"w{w[0]}")
@pytest.mark.parametrize("shape", [(3, 37, 5), (1, 1, 3), (2, 64, 4)])
def test_bit_linear(driver, wf, shape):
    rows, n_in, n_out = shape
    rng = np.random.default_rng(9 + n_in)
    records, refs = [], []
    for k in range(len(_act_formats())):
        af, per_channel, w_codes, w_scale, bias, packed = _bit_case(
            rng, k, wf, n_out, (n_out, n_in)
        )
        fmt, absmean = af
        x = rng.normal(-0.1, 1.0, (rows, n_in)).astype(np.float32)
        rec = Record(BITLINEAR).i(rows, n_in, n_out, wf[0], int(per_channel))
        records.append(rec.i(*_dynq_ints(fmt, absmean)).ba(packed).fa(w_scale).fa(bias).fa(x))
        s_a, a_codes = ref_quantize(x, fmt, absmean)
        acc = torch.from_numpy(a_codes).double() @ torch.from_numpy(w_codes).double().T
        ref = _bit_output(acc, s_a, w_scale, bias, (1, -1))
        refs.append((ref, f"{_fmt_id(af)} per_channel={per_channel} bias={bias is not None}"))
    for out, (ref, what) in zip(driver.run(records), refs, strict=True):
        _assert_bits_equal(out, ref, what)


# ---------------------------------------------------------------------------------- toolchains
TOOLCHAINS = {
    "clang": ["clang", *BASE_CFLAGS],
    "rv32": [
        "riscv64-unknown-elf-gcc",
        "-march=rv32imac",
        "-mabi=ilp32",
        "--specs=picolibc.specs",
        *BASE_CFLAGS,
    ],
}


@pytest.mark.parametrize("tool", TOOLCHAINS)
def test_sources_compile_warning_free(tool, tmp_path):
    cmd = TOOLCHAINS[tool]
    if shutil.which(cmd[0]) is None:
        pytest.skip(f"{cmd[0]} is not installed")
    work = _csrc_dir(tmp_path)
    for name in SOURCES:
        subprocess.run(
            [*cmd, "-c", str(work / name), "-o", str(tmp_path / f"{name}.o")], check=True
        )


def _mico_act_formats() -> list[tuple[float, bool]]:
    """(a_bits, signed) as mico's layers use them: binary and ternary get absmean scales."""
    return [*((float(b), s) for b in range(1, 9) for s in (True, False)), (1.58, True)]


@pytest.mark.parametrize("name", ["groups", "conv1d", "linear"])
def test_bit_layers_match_mico_integer_output(driver, name):
    """The C output equals mico.quant's eval-mode arithmetic (export_ops.integer_output)."""
    rng = np.random.default_rng(10)
    records, refs = [], []
    for k, (a_bits, signed) in enumerate(_mico_act_formats()):
        fmt = QFormat.for_bits(a_bits, signed)
        absmean = fmt.binary or a_bits == 1.58
        wf = _weight_formats()[k % len(_weight_formats())]
        if name == "linear":
            n_out, wshape = 4, (4, 23)
            x = rng.normal(0.1, 1, (2, 23)).astype(np.float32)
        else:
            ints, wshape, kw = _conv_geometry(CONV_CASES[name])
            n_out = wshape[0]
            x = rng.normal(0.1, 1, ints[:3]).astype(np.float32)
        _, per_channel, w_codes, w_scale, bias, packed = _bit_case(rng, k, wf, n_out, wshape)
        act = _dynq_ints(fmt, absmean)
        if name == "linear":
            rec = Record(BITLINEAR).i(2, 23, n_out, wf[0], int(per_channel), *act)

            def op(xc, wc):
                return F.linear(xc, wc)

            xt, channel_dim = torch.from_numpy(x)[None], -1
        else:
            rec = Record(BITCONV).i(*ints, wf[0], int(per_channel), *act)

            def op(xc, wc, kw=kw):
                return F.conv2d(xc, wc, None, **kw)

            xt, channel_dim = torch.from_numpy(x)[None], 1
        records.append(rec.ba(packed).fa(w_scale).fa(bias).fa(x))
        ref = integer_output(
            op,
            xt,
            torch.from_numpy(w_codes.astype(np.float32)),
            torch.from_numpy(w_scale),
            None if bias is None else torch.from_numpy(bias),
            a_bits,
            signed,
            1.0,
            True,
            channel_dim,
        )
        refs.append((ref[0].numpy(), f"a_bits={a_bits} signed={signed} w={wf}"))
    for out, (ref, what) in zip(driver.run(records), refs, strict=True):
        _assert_bits_equal(out, ref, what)
