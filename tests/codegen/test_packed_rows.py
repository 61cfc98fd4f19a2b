"""The packed-row helpers of mico_nn.h and the kernels' fast paths, through one C harness.

The harness (gcc, -Werror, address + undefined sanitizers, every buffer malloc'ed at exactly its
size) includes mico_nn.h and the static kernels. Row helpers -- ``mico_unpack`` (int16),
``mico_unpack_s8``, ``mico_unpack_i32``, ``mico_pack``, ``mico_unpack_padded``, ``mico_rq_run`` --
are held to ``mico.quant`` (packing, requantize) for every width 1..8, signed or not, binary and
int32, from any start and for any length. Each kernel runs against an element-by-element
reference kept in the harness (``mico_load`` / ``mico_store`` and a 64-bit requantization) on odd
shapes: widths 1..8, starts off byte boundaries, reductions and rows longer than one chunk. The
kernels the planner may run in place (depthwise convolution, pooling, requant, add, mean) also
run over their own input, displaced as far as their in-place contract allows, and must store the
same bytes.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from importlib import resources

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mico.codegen.emitters import folded_bias, linear_x_off
from mico.quant import QFormat, pack, quantize_multiplier, requantize

KERNELS = ("mico_nn_run.c", "mico_conv2d.c", "mico_linear.c", "mico_pool.c", "mico_eltwise.c")
CFLAGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off", "-O1", "-g"]
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]

HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mico_nn.h"

/* ---- input ---- */
static long rd(void)
{
    long v;
    if (scanf("%ld", &v) != 1) {
        fprintf(stderr, "short input\n");
        exit(3);
    }
    return v;
}

static void *rd_buf(long n) /* n bytes, malloc'ed at exactly that size */
{
    uint8_t *p = (uint8_t *)malloc(n > 0 ? (size_t)n : 1u);
    long i;
    for (i = 0; i < n; i++) {
        p[i] = (uint8_t)rd();
    }
    return p;
}

static void *rd_i32(long n)
{
    int32_t *p = (int32_t *)malloc(n > 0 ? (size_t)n * 4u : 4u);
    long i;
    for (i = 0; i < n; i++) {
        p[i] = (int32_t)rd();
    }
    return p;
}

static MicoFmt rd_fmt(void)
{
    MicoFmt f;
    f.bits = (int32_t)rd();
    f.is_signed = (int32_t)rd();
    f.zero = 0;
    return f;
}

static void rd_out(MicoOut *o)
{
    o->fmt = rd_fmt();
    o->relu = (int32_t)rd();
    o->n_mult = (int32_t)rd();
    o->m = (const int32_t *)rd_i32(o->n_mult);
    o->shift = (const int32_t *)rd_i32(o->n_mult);
    o->lo = (int32_t)rd();
    o->hi = (int32_t)rd();
}

static size_t bytes_of(size_t n, MicoFmt f)
{
    return f.bits == 32 ? n * 4u : (n * (size_t)f.bits + 7u) / 8u;
}

static void print_bytes(const void *p, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) {
        printf("%u ", ((const uint8_t *)p)[i]);
    }
    printf("\n");
}

/* ---- references: element by element, 64-bit requantization ---- */
static int32_t ref_finish(int32_t acc, int32_t ch, const MicoOut *o)
{
    int64_t r = acc;
    if (o->relu && r < 0) {
        r = 0;
    }
    if (o->n_mult) {
        const int32_t k = o->n_mult > 1 ? ch : 0;
        r = mico_round_shift(r * (int64_t)o->m[k], o->shift[k]);
        if (o->fmt.bits == 1 && o->fmt.is_signed) {
            r = r >= 0 ? 1 : -1;
        }
    }
    if (r < o->lo) {
        r = o->lo;
    }
    if (r > o->hi) {
        r = o->hi;
    }
    return (int32_t)r;
}

static void ref_qconv2d(const MicoConv2d *p, const void *in, void *out)
{
    const int32_t ipg = p->in_c / p->groups, opg = p->out_c / p->groups;
    MicoFmt wf;
    int32_t oc, oy, ox, ic, ky, kx;
    wf.bits = p->w_bits;
    wf.is_signed = 1;
    for (oc = 0; oc < p->out_c; oc++) {
        for (oy = 0; oy < p->out_h; oy++) {
            for (ox = 0; ox < p->out_w; ox++) {
                int32_t acc = p->bias[oc];
                for (ic = 0; ic < ipg; ic++) {
                    const int32_t c = (oc / opg) * ipg + ic;
                    for (ky = 0; ky < p->k_h; ky++) {
                        const int32_t iy = oy * p->stride_h - p->pad_h + ky * p->dil_h;
                        for (kx = 0; kx < p->k_w; kx++) {
                            const int32_t ix = ox * p->stride_w - p->pad_w + kx * p->dil_w;
                            const size_t wi =
                                (((size_t)oc * (size_t)ipg + (size_t)ic) * (size_t)p->k_h +
                                 (size_t)ky) * (size_t)p->k_w + (size_t)kx;
                            if (iy < 0 || iy >= p->in_h || ix < 0 || ix >= p->in_w) {
                                continue;
                            }
                            acc += mico_load(in,
                                             ((size_t)c * (size_t)p->in_h + (size_t)iy) *
                                                     (size_t)p->in_w + (size_t)ix,
                                             p->in_fmt) *
                                   mico_load(p->weight, wi, wf);
                        }
                    }
                }
                mico_store(out, ((size_t)oc * (size_t)p->out_h + (size_t)oy) * (size_t)p->out_w +
                                    (size_t)ox,
                           ref_finish(acc, oc, &p->out), p->out.fmt);
            }
        }
    }
}

static void ref_qlinear(const MicoLinear *p, const void *in, void *out)
{
    MicoFmt wf;
    int32_t r, o, i;
    wf.bits = p->w_bits;
    wf.is_signed = 1;
    for (r = 0; r < p->rows; r++) {
        for (o = 0; o < p->out_features; o++) {
            int32_t acc = p->bias[o];
            for (i = 0; i < p->in_features; i++) { /* x_off: the kernels' input offset */
                acc += (mico_load(in, (size_t)r * (size_t)p->in_features + (size_t)i, p->in_fmt) +
                        p->x_off) *
                       mico_load(p->weight, (size_t)o * (size_t)p->in_features + (size_t)i, wf);
            }
            mico_store(out, (size_t)r * (size_t)p->out_features + (size_t)o,
                       ref_finish(acc, o, &p->out), p->out.fmt);
        }
    }
}

static void ref_maxpool2d(const MicoMaxPool2d *p, const void *in, void *out)
{
    int32_t c, oy, ox, ky, kx;
    for (c = 0; c < p->channels; c++) {
        for (oy = 0; oy < p->out_h; oy++) {
            for (ox = 0; ox < p->out_w; ox++) {
                int32_t best = INT32_MIN;
                for (ky = 0; ky < p->k_h; ky++) {
                    const int32_t iy = oy * p->stride_h - p->pad_h + ky * p->dil_h;
                    for (kx = 0; kx < p->k_w; kx++) {
                        const int32_t ix = ox * p->stride_w - p->pad_w + kx * p->dil_w;
                        int32_t v;
                        if (iy < 0 || iy >= p->in_h || ix < 0 || ix >= p->in_w) {
                            continue;
                        }
                        v = mico_load(in, ((size_t)c * (size_t)p->in_h + (size_t)iy) *
                                                  (size_t)p->in_w + (size_t)ix, p->fmt);
                        best = v > best ? v : best;
                    }
                }
                mico_store(out, ((size_t)c * (size_t)p->out_h + (size_t)oy) * (size_t)p->out_w +
                                    (size_t)ox, best, p->fmt);
            }
        }
    }
}

static void ref_avgpool2d(const MicoAvgPool2d *p, const void *in, void *out)
{
    int32_t c, oy, ox, ky, kx;
    for (c = 0; c < p->channels; c++) {
        for (oy = 0; oy < p->out_h; oy++) {
            for (ox = 0; ox < p->out_w; ox++) {
                int32_t sum = 0, count = 0;
                for (ky = 0; ky < p->k_h; ky++) {
                    const int32_t iy = oy * p->stride_h - p->pad_h + ky;
                    for (kx = 0; kx < p->k_w; kx++) {
                        const int32_t ix = ox * p->stride_w - p->pad_w + kx;
                        if (iy < 0 || iy >= p->in_h || ix < 0 || ix >= p->in_w) {
                            continue;
                        }
                        sum += mico_load(in, ((size_t)c * (size_t)p->in_h + (size_t)iy) *
                                                     (size_t)p->in_w + (size_t)ix, p->in_fmt);
                        count++;
                    }
                }
                if (p->count_include_pad) {
                    count = p->k_h * p->k_w;
                }
                mico_store(out, ((size_t)c * (size_t)p->out_h + (size_t)oy) * (size_t)p->out_w +
                                    (size_t)ox, ref_finish(sum, count - 1, &p->out), p->out.fmt);
            }
        }
    }
}

static void ref_mean(const MicoMean *p, const void *in, void *out)
{
    int32_t o, j;
    for (o = 0; o < p->outer; o++) {
        int32_t acc = 0;
        for (j = 0; j < p->count; j++) {
            acc += mico_load(in, (size_t)o * (size_t)p->count + (size_t)j, p->in_fmt);
        }
        mico_store(out, (size_t)o, ref_finish(acc, o, &p->out), p->out.fmt);
    }
}

static void ref_requant(const MicoRequant *p, const void *in, void *out)
{
    int32_t i;
    for (i = 0; i < p->n; i++) {
        const int32_t ch = p->channels > 1 ? (i / p->inner) % p->channels : 0;
        mico_store(out, (size_t)i, ref_finish(mico_load(in, (size_t)i, p->in_fmt), ch, &p->out),
                   p->out.fmt);
    }
}

static void ref_add(const MicoAdd *p, const void *a, const void *b, void *out)
{
    int32_t i;
    for (i = 0; i < p->n; i++) {
        const int64_t v = (int64_t)mico_load(a, (size_t)i, p->a_fmt) * (int64_t)p->m_a +
                          (int64_t)mico_load(b, (size_t)i, p->b_fmt) * (int64_t)p->m_b;
        int64_t r = mico_round_shift(v, p->shift);
        if (p->fmt.bits == 1 && p->fmt.is_signed) {
            r = r >= 0 ? 1 : -1;
        }
        r = r < p->lo ? p->lo : r;
        r = r > p->hi ? p->hi : r;
        mico_store(out, (size_t)i, (int32_t)r, p->fmt);
    }
}

static void ref_concat_part(const MicoConcatPart *p, const void *in, void *out)
{
    int32_t o, j;
    for (o = 0; o < p->outer; o++) {
        for (j = 0; j < p->in_inner; j++) {
            const int32_t v = mico_load(in, (size_t)o * (size_t)p->in_inner + (size_t)j, p->in_fmt);
            mico_store(out, (size_t)o * (size_t)p->out_inner + (size_t)p->offset + (size_t)j,
                       ref_finish(v, 0, &p->out), p->out.fmt);
        }
    }
}

static void ref_copy(const MicoCopy *p, const void *in, void *out)
{
    int32_t idx[MICO_MAX_RANK];
    size_t n = 1, i;
    int32_t k;
    for (k = 0; k < p->rank; k++) {
        idx[k] = 0;
        n *= (size_t)p->shape[k];
    }
    for (i = 0; i < n; i++) {
        int64_t src = p->offset;
        for (k = 0; k < p->rank; k++) {
            src += (int64_t)idx[k] * (int64_t)p->stride[k];
        }
        mico_store(out, i, ref_finish(mico_load(in, (size_t)src, p->in_fmt), 0, &p->out),
                   p->out.fmt);
        for (k = p->rank - 1; k >= 0; k--) {
            if (++idx[k] < p->shape[k]) {
                break;
            }
            idx[k] = 0;
        }
    }
}

/* ---- kernels: run the kernel out of place, the reference, and (layout A, B != -1) the kernel
 * again with its input at arena + A and its output at arena + B; print the three outputs ---- */
typedef void (*Kernel)(const void *p, const void *in, const void *in2, void *out);
#define WRAP1(NAME, T, FN) \
    static void NAME(const void *p, const void *in, const void *in2, void *out) \
    { (void)in2; FN((const T *)p, in, out); }
WRAP1(k_conv, MicoConv2d, mico_qconv2d)
WRAP1(r_conv, MicoConv2d, ref_qconv2d)
/* the generator's choice for plain layers: 4- and 2-bit weights take their width's word
 * kernels (mico_qlinear_sub4 / _sub2), the others mico_qlinear */
static void k_linear(const void *p, const void *in, const void *in2, void *out)
{
    const MicoLinear *l = (const MicoLinear *)p;
    (void)in2;
    (l->w_bits == 4 ? mico_qlinear_sub4 : l->w_bits == 2 ? mico_qlinear_sub2 : mico_qlinear)(l, in,
                                                                                             out);
}
WRAP1(r_linear, MicoLinear, ref_qlinear)
WRAP1(k_maxpool, MicoMaxPool2d, mico_maxpool2d)
WRAP1(r_maxpool, MicoMaxPool2d, ref_maxpool2d)
WRAP1(k_avgpool, MicoAvgPool2d, mico_avgpool2d)
WRAP1(r_avgpool, MicoAvgPool2d, ref_avgpool2d)
WRAP1(k_mean, MicoMean, mico_mean)
WRAP1(r_mean, MicoMean, ref_mean)
WRAP1(k_requant, MicoRequant, mico_requant)
WRAP1(r_requant, MicoRequant, ref_requant)
WRAP1(k_concat, MicoConcatPart, mico_concat_part)
WRAP1(r_concat, MicoConcatPart, ref_concat_part)
WRAP1(k_copy, MicoCopy, mico_copy)
WRAP1(r_copy, MicoCopy, ref_copy)
static void k_add(const void *p, const void *a, const void *b, void *out)
{
    mico_add((const MicoAdd *)p, a, b, out);
}
static void r_add(const void *p, const void *a, const void *b, void *out)
{
    ref_add((const MicoAdd *)p, a, b, out);
}

static void run3(Kernel k, Kernel r, const void *p, MicoFmt in_fmt, size_t n_in, MicoFmt in2_fmt,
                 size_t n_in2, MicoFmt out_fmt, size_t n_out)
{
    const size_t in_bytes = bytes_of(n_in, in_fmt), out_bytes = bytes_of(n_out, out_fmt);
    uint8_t *in = (uint8_t *)rd_buf((long)in_bytes);
    uint8_t *in2 = n_in2 ? (uint8_t *)rd_buf((long)bytes_of(n_in2, in2_fmt)) : NULL;
    const long a = rd(), b = rd(), arena_bytes = rd(), fill = rd();
    uint8_t *out1 = (uint8_t *)malloc(out_bytes), *out2 = (uint8_t *)malloc(out_bytes);
    memset(out1, (int)fill, out_bytes);
    memset(out2, (int)fill, out_bytes);
    k(p, in, in2, out1);
    r(p, in, in2, out2);
    print_bytes(out1, out_bytes);
    print_bytes(out2, out_bytes);
    if (a >= 0) { /* in place: input and output share one arena */
        uint8_t *arena = (uint8_t *)malloc((size_t)arena_bytes);
        memset(arena, (int)fill, (size_t)arena_bytes);
        memcpy(arena + a, in, in_bytes);
        const size_t bits = out_fmt.bits == 32 ? 0u : (n_out * (size_t)out_fmt.bits) % 8u;
        k(p, arena + a, in2, arena + b);
        printf("%u ", bits ? (1u << bits) - 1u : 255u); /* the tensor's bits of its last byte */
        print_bytes(arena + b, out_bytes);
        free(arena);
    }
    free(in);
    free(in2);
    free(out1);
    free(out2);
}

int main(void)
{
    char cmd[8];
    while (scanf("%7s", cmd) == 1) {
        if (cmd[0] == 'u') { /* unpack: fmt dst_bits nbytes bytes start n */
            const MicoFmt f = rd_fmt();
            const long dst = rd(), nbytes = rd();
            uint8_t *buf = (uint8_t *)rd_buf(nbytes);
            const long start = rd(), n = rd();
            long i;
            if (dst == 16) {
                int16_t *v = (int16_t *)malloc((size_t)n * 2u + 2u);
                mico_unpack(buf, (size_t)start, (int32_t)n, f, v);
                for (i = 0; i < n; i++) printf("%d ", v[i]);
                free(v);
            } else if (dst == 8) {
                int8_t *v = (int8_t *)malloc((size_t)n + 1u);
                mico_unpack_s8(buf, (size_t)start, (int32_t)n, f.bits, v);
                for (i = 0; i < n; i++) printf("%d ", v[i]);
                free(v);
            } else {
                int32_t *v = (int32_t *)malloc((size_t)n * 4u + 4u);
                mico_unpack_i32(buf, (size_t)start, (int32_t)n, f, v);
                for (i = 0; i < n; i++) printf("%d ", v[i]);
                free(v);
            }
            printf("\n");
            free(buf);
        } else if (cmd[0] == 'p') { /* pack: fmt nbytes bytes start n values */
            const MicoFmt f = rd_fmt();
            const long nbytes = rd();
            uint8_t *buf = (uint8_t *)rd_buf(nbytes);
            const long start = rd(), n = rd();
            int32_t *v = (int32_t *)rd_i32(n);
            mico_pack(buf, (size_t)start, v, (int32_t)n, f);
            print_bytes(buf, (size_t)nbytes);
            free(buf);
            free(v);
        } else if (cmd[0] == 'd') { /* unpack_padded: fmt nbytes bytes row width ix0 n fill */
            const MicoFmt f = rd_fmt();
            const long nbytes = rd();
            uint8_t *buf = (uint8_t *)rd_buf(nbytes);
            const long row = rd(), width = rd(), ix0 = rd(), n = rd(), fill = rd();
            int16_t *v = (int16_t *)malloc((size_t)n * 2u + 2u);
            long i;
            mico_unpack_padded(buf, (size_t)row, (int32_t)width, (int32_t)ix0, (int32_t)n,
                               (int16_t)fill, f, v);
            for (i = 0; i < n; i++) printf("%d ", v[i]);
            printf("\n");
            free(buf);
            free(v);
        } else if (cmd[0] == 'q') { /* requantize: out n accs -> rq_run, then mico_finish */
            MicoOut o;
            MicoRq q;
            long n, i;
            int32_t *v;
            rd_out(&o);
            n = rd();
            v = (int32_t *)rd_i32(n);
            for (i = 0; i < n; i++) printf("%d ", mico_finish(v[i], 0, &o));
            printf("\n");
            q = mico_rq(&o, 0);
            mico_rq_run(&q, v, (int32_t)n);
            for (i = 0; i < n; i++) printf("%d ", v[i]);
            printf("\n");
            free(v);
        } else if (cmd[0] == 'c') { /* conv */
            MicoConv2d p;
            long wn;
            p.in_c = (int32_t)rd(); p.in_h = (int32_t)rd(); p.in_w = (int32_t)rd();
            p.out_c = (int32_t)rd(); p.out_h = (int32_t)rd(); p.out_w = (int32_t)rd();
            p.k_h = (int32_t)rd(); p.k_w = (int32_t)rd();
            p.stride_h = (int32_t)rd(); p.stride_w = (int32_t)rd();
            p.pad_h = (int32_t)rd(); p.pad_w = (int32_t)rd();
            p.dil_h = (int32_t)rd(); p.dil_w = (int32_t)rd(); p.groups = (int32_t)rd();
            p.in_fmt = rd_fmt();
            p.w_bits = (int32_t)rd();
            wn = rd();
            p.weight = (const uint8_t *)rd_buf(wn);
            p.bias = (const int32_t *)rd_i32(p.out_c);
            rd_out(&p.out);
            run3(k_conv, r_conv, &p, p.in_fmt, (size_t)p.in_c * (size_t)(p.in_h * p.in_w), p.in_fmt,
                 0, p.out.fmt, (size_t)p.out_c * (size_t)(p.out_h * p.out_w));
        } else if (cmd[0] == 'l') { /* linear */
            MicoLinear p;
            long wn;
            p.rows = (int32_t)rd(); p.in_features = (int32_t)rd(); p.out_features = (int32_t)rd();
            p.in_fmt = rd_fmt();
            p.w_bits = (int32_t)rd();
            wn = rd();
            p.weight = (const uint8_t *)rd_buf(wn);
            p.bias = (const int32_t *)rd_i32(p.out_features);
            rd_out(&p.out);
            p.in_fmt.zero = (int32_t)rd(); /* the input's zero point, the kernels' x_off */
            p.x_off = (int32_t)rd();
            run3(k_linear, r_linear, &p, p.in_fmt, (size_t)(p.rows * p.in_features), p.in_fmt, 0,
                 p.out.fmt, (size_t)(p.rows * p.out_features));
        } else if (cmd[0] == 'm' || cmd[0] == 'a') { /* max / average pooling */
            MicoMaxPool2d mp;
            MicoAvgPool2d ap;
            int32_t g[13];
            int i;
            for (i = 0; i < 13; i++) g[i] = (int32_t)rd();
            if (cmd[0] == 'm') {
                mp.channels = g[0]; mp.in_h = g[1]; mp.in_w = g[2]; mp.out_h = g[3];
                mp.out_w = g[4]; mp.k_h = g[5]; mp.k_w = g[6]; mp.stride_h = g[7];
                mp.stride_w = g[8]; mp.pad_h = g[9]; mp.pad_w = g[10]; mp.dil_h = g[11];
                mp.dil_w = g[12];
                mp.fmt = rd_fmt();
                run3(k_maxpool, r_maxpool, &mp, mp.fmt, (size_t)(g[0] * g[1] * g[2]), mp.fmt, 0,
                     mp.fmt, (size_t)(g[0] * g[3] * g[4]));
            } else {
                ap.channels = g[0]; ap.in_h = g[1]; ap.in_w = g[2]; ap.out_h = g[3];
                ap.out_w = g[4]; ap.k_h = g[5]; ap.k_w = g[6]; ap.stride_h = g[7];
                ap.stride_w = g[8]; ap.pad_h = g[9]; ap.pad_w = g[10];
                ap.count_include_pad = g[11];
                ap.in_fmt = rd_fmt();
                rd_out(&ap.out);
                run3(k_avgpool, r_avgpool, &ap, ap.in_fmt, (size_t)(g[0] * g[1] * g[2]),
                     ap.in_fmt, 0, ap.out.fmt, (size_t)(g[0] * g[3] * g[4]));
            }
        } else if (cmd[0] == 'n') { /* mean */
            MicoMean p;
            p.outer = (int32_t)rd(); p.count = (int32_t)rd();
            p.in_fmt = rd_fmt();
            rd_out(&p.out);
            run3(k_mean, r_mean, &p, p.in_fmt, (size_t)(p.outer * p.count), p.in_fmt, 0,
                 p.out.fmt, (size_t)p.outer);
        } else if (cmd[0] == 'r') { /* requant */
            MicoRequant p;
            p.n = (int32_t)rd(); p.channels = (int32_t)rd(); p.inner = (int32_t)rd();
            p.in_fmt = rd_fmt();
            rd_out(&p.out);
            run3(k_requant, r_requant, &p, p.in_fmt, (size_t)p.n, p.in_fmt, 0, p.out.fmt,
                 (size_t)p.n);
        } else if (cmd[0] == '+') { /* add */
            MicoAdd p;
            p.n = (int32_t)rd();
            p.a_fmt = rd_fmt(); p.b_fmt = rd_fmt(); p.fmt = rd_fmt();
            p.m_a = (int32_t)rd(); p.m_b = (int32_t)rd(); p.shift = (int32_t)rd();
            p.lo = (int32_t)rd(); p.hi = (int32_t)rd();
            run3(k_add, r_add, &p, p.a_fmt, (size_t)p.n, p.b_fmt, (size_t)p.n, p.fmt,
                 (size_t)p.n);
        } else if (cmd[0] == 'k') { /* concat part */
            MicoConcatPart p;
            p.outer = (int32_t)rd(); p.in_inner = (int32_t)rd(); p.out_inner = (int32_t)rd();
            p.offset = (int32_t)rd();
            p.in_fmt = rd_fmt();
            rd_out(&p.out);
            run3(k_concat, r_concat, &p, p.in_fmt, (size_t)(p.outer * p.in_inner), p.in_fmt, 0,
                 p.out.fmt, (size_t)(p.outer * p.out_inner));
        } else if (cmd[0] == 'y') { /* copy: rank shape strides offset n_in */
            MicoCopy p;
            size_t n = 1, n_in;
            int k;
            p.rank = (int32_t)rd();
            for (k = 0; k < MICO_MAX_RANK; k++) p.shape[k] = (int32_t)rd();
            for (k = 0; k < MICO_MAX_RANK; k++) p.stride[k] = (int32_t)rd();
            p.offset = (int32_t)rd();
            n_in = (size_t)rd();
            p.in_fmt = rd_fmt();
            rd_out(&p.out);
            for (k = 0; k < p.rank; k++) n *= (size_t)p.shape[k];
            run3(k_copy, r_copy, &p, p.in_fmt, n_in, p.in_fmt, 0, p.out.fmt, n);
        } else {
            fprintf(stderr, "unknown command %s\n", cmd);
            return 2;
        }
        fflush(stdout);
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    work = tmp_path_factory.mktemp("packed_rows")
    csrc = resources.files("mico.csrc")
    for name in ("mico_nn.h", *KERNELS):
        (work / name).write_text((csrc / name).read_text())
    (work / "harness.c").write_text(HARNESS)
    exe = work / "harness"
    sources = [str(work / "harness.c"), *(str(work / k) for k in KERNELS)]
    subprocess.run(["cc", *CFLAGS, *SANITIZE, "-o", str(exe), *sources, "-lm"], check=True)
    return exe


def _run(exe, tokens) -> list[list[int]]:
    """Feed whitespace-separated tokens, return the output lines as lists of ints."""
    result = subprocess.run(
        [str(exe)],
        input=" ".join(map(str, tokens)) + "\n",
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "ASAN_OPTIONS": "detect_leaks=0", "UBSAN_OPTIONS": "halt_on_error=1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return [[int(v) for v in line.split()] for line in result.stdout.splitlines()]


# ----------------------------------------------------------------------------- formats, data
FORMATS = [QFormat(b, s) for b in range(1, 9) for s in (False, True)]
INT32 = None  # int32 tensors (accumulators)
ALL_FORMATS = [*FORMATS, INT32]


def _fmt(fmt: QFormat | None) -> list[int]:
    return [32, 1] if fmt is None else [fmt.bits, int(fmt.signed)]


def _codes(fmt: QFormat | None, rng: np.random.Generator, n: int) -> np.ndarray:
    if fmt is None:
        return rng.integers(-(2**20), 2**20, n)
    codes = rng.integers(fmt.qmin, fmt.qmax + 1, n)
    return np.where(codes == 0, 1, codes) if fmt.binary else codes


def _bytes(codes: np.ndarray, fmt: QFormat | None) -> list[int]:
    if fmt is None:
        return np.asarray(codes, dtype="<i4").view(np.uint8).tolist()
    return pack(np.asarray(codes), fmt).tolist()


def _nbytes(n: int, fmt: QFormat | None) -> int:
    return 4 * n if fmt is None else (n * fmt.bits + 7) // 8


def _out(fmt, rng, relu=False, mults=None, clamp=None) -> list[int]:
    """A MicoOut: format, relu, multipliers [(m, shift)], clamp (the code range by default)."""
    mults = mults or []
    if clamp is None:
        clamp = (-(2**31), 2**31 - 1) if fmt is None else (fmt.qmin, fmt.qmax)
    return [*_fmt(fmt), int(relu), len(mults), *(m for m, _ in mults), *(s for _, s in mults),
            *clamp]  # fmt: skip


def _multiplier(rng, spread: float, fmt: QFormat | None) -> tuple[int, int]:
    """A multiplier that maps accumulators of about +-spread onto the output range."""
    target = 2**12 if fmt is None else max(fmt.qmax - fmt.qmin, 1)
    return quantize_multiplier(float(target / max(spread, 1.0) * 2 ** rng.uniform(-1.5, 1.5)))


def _kernel(harness, tokens, in_place: bool = False) -> None:
    """The kernel, the element-by-element reference and (in place) the kernel over a shared
    arena must store the same bytes."""
    lines = _run(harness, tokens)
    assert lines[0] == lines[1]
    if in_place:  # past the tensor, the last byte holds input bits in place, fill out of place
        mask, *data = lines[2]
        assert data[:-1] == lines[0][:-1]
        assert data[-1] & mask == lines[0][-1] & mask


def _layout(d_bits: int, in_bytes: int, out_bytes: int, align: int = 1) -> list[int]:
    """Arena offsets A (input) and B (output) with B - A = the largest byte displacement at most
    d_bits / 8 (aligned), the arena size and a fill byte."""
    d = (d_bits // 8) // align * align
    a = max(0, -d) + align * 4
    b = a + d
    return [a, b, max(a + in_bytes, b + out_bytes) + 3, 0xA5]


NO_LAYOUT = [-1, -1, 0, 0x5A]


# ----------------------------------------------------------------------------- row helpers
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.sampled_from(ALL_FORMATS),
    st.sampled_from([8, 16, 32]),
    st.integers(1, 400),
    st.data(),
)
def test_unpack_matches_python(harness, fmt, dst, count, data):
    """mico_unpack (int16), mico_unpack_s8 and mico_unpack_i32 give the codes Python packed,
    from any start, for any length (the byte-wise paths and the bit-stream head / tail)."""
    if (fmt is None and dst != 32) or (dst == 8 and fmt is not None and not fmt.signed):
        dst = 32  # int32 tensors unpack to int32 only; int8 rows are for signed codes
    start = data.draw(st.integers(0, count - 1))
    n = data.draw(st.integers(0, count - start))
    codes = _codes(fmt, np.random.default_rng(count * 7 + start), count)
    raw = _bytes(codes, fmt)
    (got,) = _run(harness, ["u", *_fmt(fmt), dst, len(raw), *raw, start, n])
    assert got == codes[start : start + n].tolist()


@pytest.mark.parametrize("bits", [3, 5, 6, 7])
@pytest.mark.parametrize("signed", [False, True])
def test_unpack_groups_of_eight_odd_width_codes(harness, bits, signed):
    """3-, 5-, 6- and 7-bit runs long enough for the 8-code groups, from every start within a
    group and with every tail length, give the codes Python packed."""
    fmt = QFormat(bits, signed)
    codes = _codes(fmt, np.random.default_rng(bits), 64)
    raw = _bytes(codes, fmt)
    for start in range(9):
        for n in (16, 17, 23, 24, 31, 40, 64 - start):
            (got,) = _run(harness, ["u", *_fmt(fmt), 16, len(raw), *raw, start, n])
            assert got == codes[start : start + n].tolist(), (start, n)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.sampled_from(ALL_FORMATS), st.integers(1, 400), st.integers(0, 2**32 - 1), st.data())
def test_pack_matches_python_and_keeps_other_bits(harness, fmt, count, seed, data):
    """mico_pack of codes start .. start + n - 1 into a dirty buffer changes exactly their bits,
    to what Python's pack gives."""
    rng = np.random.default_rng(seed)
    start = data.draw(st.integers(0, count - 1))
    n = data.draw(st.integers(0, count - start))
    old = _codes(fmt, rng, count)
    new = _codes(fmt, rng, n)
    dirty = rng.integers(0, 256, _nbytes(count, fmt) + 2).tolist()
    before = _bytes(old, fmt)
    dirty[: len(before)] = before
    (got,) = _run(harness, ["p", *_fmt(fmt), len(dirty), *dirty, start, n, *new.tolist()])
    expected = old.copy()
    expected[start : start + n] = new
    assert got[: len(before) - 1] == _bytes(expected, fmt)[:-1]
    assert got[len(before) :] == dirty[len(before) :]  # bytes past the tensor untouched
    last = got[len(before) - 1]
    used = count * (32 if fmt is None else fmt.bits) - 8 * (len(before) - 1)
    mask = (1 << used) - 1
    assert last & mask == _bytes(expected, fmt)[-1] & mask
    assert last & ~mask & 0xFF == dirty[len(before) - 1] & ~mask & 0xFF


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.sampled_from(FORMATS),
    st.integers(1, 90),
    st.integers(-20, 100),
    st.integers(0, 120),
    st.integers(-3, 3),
)
def test_unpack_padded(harness, fmt, width, ix0, n, fill):
    """A row's columns ix0 .. ix0 + n - 1, reading `fill` outside [0, width)."""
    rows = 3
    codes = _codes(fmt, np.random.default_rng(width * 131 + n), rows * width)
    raw = _bytes(codes, fmt)
    (got,) = _run(harness, ["d", *_fmt(fmt), len(raw), *raw, width, width, ix0, n, fill])
    row = codes[width : 2 * width]
    expected = [int(row[ix]) if 0 <= ix < width else fill for ix in range(ix0, ix0 + n)]
    assert got == expected


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.sampled_from(ALL_FORMATS),
    st.booleans(),
    st.floats(1e-7, 100.0),
    st.integers(0, 2**32 - 1),
)
def test_requantize_run_matches_python(harness, fmt, relu, real, seed):
    """mico_rq_run (a run of one channel) and mico_finish agree with mico.quant.requantize, for
    shifts below, at and above 32 (the high-word path) and every output format."""
    rng = np.random.default_rng(seed)
    m, shift = quantize_multiplier(real)
    lo, hi = (-(2**31), 2**31 - 1) if fmt is None else (fmt.qmin, fmt.qmax)
    if rng.random() < 0.5 and fmt is not None and not fmt.binary:
        lo, hi = sorted(rng.integers(fmt.qmin, fmt.qmax + 1, 2).tolist())
    acc = np.concatenate(
        [rng.integers(-(2**31), 2**31, 60), rng.integers(-5000, 5000, 60), [-(2**31), 2**31 - 1, 0]]
    )
    got_finish, got_run = _run(
        harness, ["q", *_out(fmt, rng, relu, [(m, shift)], (lo, hi)), len(acc), *acc.tolist()]
    )
    a = np.maximum(acc, 0) if relu else acc
    ref_fmt = fmt if fmt is not None else QFormat(8, True)
    v = a.astype(np.int64) * m
    r = (np.abs(v) + (1 << (shift - 1))) >> shift
    r = np.where(v < 0, -r, r)
    if fmt is not None and fmt.binary:
        r = requantize(a, m, shift, ref_fmt)
    expected = np.clip(r, lo, hi).tolist()
    assert got_finish == expected
    assert got_run == expected


# ----------------------------------------------------------------------------- convolution
def _conv_tokens(rng, in_fmt, w_bits, out_fmt, c_in, c_out, groups, size, k, stride, pad, dil,
                 relu, per_channel, layout=None):  # fmt: skip
    h, w = size
    out_h = (h + 2 * pad[0] - dil[0] * (k[0] - 1) - 1) // stride[0] + 1
    out_w = (w + 2 * pad[1] - dil[1] * (k[1] - 1) - 1) // stride[1] + 1
    assert out_h > 0 and out_w > 0
    x = _codes(in_fmt, rng, c_in * h * w)
    w_fmt = QFormat(w_bits, True)
    taps = c_in // groups * k[0] * k[1]
    weight = _codes(w_fmt, rng, c_out * taps)
    bias = rng.integers(-300, 300, c_out)
    spread = math.sqrt(taps) * (1 + np.abs(x).mean()) * (1 + np.abs(weight).mean())
    mults = [_multiplier(rng, spread, out_fmt) for _ in range(c_out if per_channel else 1)]
    if out_fmt is None and rng.random() < 0.5:
        mults = []
    wraw = pack(weight, w_fmt).tolist()
    n_out = c_out * out_h * out_w
    if layout is not None:
        layout = layout(out_h, out_w)
    return [
        "c", c_in, h, w, c_out, out_h, out_w, *k, *stride, *pad, *dil, groups, *_fmt(in_fmt),
        w_bits, len(wraw), *wraw, *bias.tolist(), *_out(out_fmt, rng, relu, mults),
        *_bytes(x, in_fmt), *(layout or NO_LAYOUT),
    ], n_out  # fmt: skip


@st.composite
def conv_cases(draw):
    kind = draw(st.sampled_from(["dense", "grouped", "depthwise", "pointwise", "conv1d", "long"]))
    k = (draw(st.integers(1, 5)), draw(st.integers(1, 5)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dil = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pad = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    groups = 1
    if kind == "dense":
        c_in, c_out = draw(st.integers(1, 6)), draw(st.integers(1, 9))
    elif kind == "grouped":
        groups = draw(st.integers(2, 3))
        c_in, c_out = groups * draw(st.integers(1, 3)), groups * draw(st.integers(1, 3))
    elif kind == "depthwise":
        c_in = c_out = groups = draw(st.integers(1, 5))
    elif kind == "pointwise":
        c_in, c_out, k, stride, pad = (
            draw(st.integers(1, 20)),
            draw(st.integers(1, 9)),
            (1, 1),
            (1, 1),
            (0, 0),
        )
    elif kind == "conv1d":
        c_in, c_out = draw(st.integers(1, 12)), draw(st.integers(1, 9))
        k, stride, pad, dil = (1, k[1]), (1, stride[1]), (0, pad[1]), (1, dil[1])
    else:  # more taps than one reduction chunk
        c_in, c_out, k = draw(st.integers(11, 16)), draw(st.integers(1, 19)), (3, 3)
    h = draw(st.integers(1, 7)) if k[0] > 1 or kind != "conv1d" else 1
    w = draw(st.integers(1, 45))
    h = max(h, dil[0] * (k[0] - 1) + 1 - 2 * pad[0])
    w = max(w, dil[1] * (k[1] - 1) + 1 - 2 * pad[1])
    in_fmt = draw(st.sampled_from(FORMATS))
    out_fmt = draw(st.sampled_from(ALL_FORMATS))
    w_bits = draw(st.integers(1, 8))
    return (in_fmt, w_bits, out_fmt, c_in, c_out, groups, (h, w), k, stride, pad, dil,
            draw(st.booleans()), draw(st.booleans()))  # fmt: skip


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(conv_cases(), st.integers(0, 2**32 - 1))
def test_conv_fast_paths_match_reference(harness, case, seed):
    """mico_qconv2d (im2col with packed-weight micro-kernels, depthwise rows, chunked long
    reductions) stores the bytes of an element-by-element reference, for every width."""
    tokens, _ = _conv_tokens(np.random.default_rng(seed), *case)
    _kernel(harness, tokens)


@pytest.mark.parametrize("w_bits", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("c_out", [1, 3, 9, 11])
def test_conv_long_reductions_odd_channel_counts(harness, w_bits, c_out):
    """Reductions longer than one chunk (partial sums wait in the tile) with odd channel counts
    (the last channel of a chunk is computed twice), for weights read in place and unpacked."""
    for seed in range(3):
        case = (QFormat(4, False), w_bits, QFormat(7, True), 12, c_out, 1, (4, 3), (3, 3),
                (1, 1), (0, 1), (1, 1), seed == 1, seed == 2)  # fmt: skip
        tokens, _ = _conv_tokens(np.random.default_rng(seed), *case)
        lines = _run(harness, tokens)
        assert lines[0] == lines[1]
        assert len(set(lines[0])) > 1  # not all clamped


@pytest.mark.parametrize(
    "size, k, stride, pad, dil",
    [
        ((9, 7), (3, 3), (1, 1), (1, 1), (1, 1)),  # the whole padded plane on the stack
        ((30, 40), (3, 3), (1, 1), (1, 1), (1, 1)),  # a ring of whole rows
        ((5, 200), (3, 3), (1, 2), (1, 1), (1, 1)),  # windows of columns
        ((6, 33), (5, 3), (2, 1), (2, 0), (1, 3)),  # dilated, strided
        ((2, 300), (1, 7), (1, 3), (0, 3), (1, 2)),  # conv1d-like
    ],
)
@pytest.mark.parametrize("in_bits, w_bits, out_bits", [(8, 8, 8), (4, 4, 4), (3, 5, 7), (1, 2, 2)])
def test_depthwise_in_place_contract(harness, size, k, stride, pad, dil, in_bits, w_bits, out_bits):
    """A depthwise convolution writing over its own input, displaced as far as the in-place
    contract allows (output row (c, oy) may only cover input that rows before it need), stores
    what it stores out of place."""
    rng = np.random.default_rng(in_bits * 100 + size[1])
    in_fmt, out_fmt = QFormat(in_bits, in_bits != 3), QFormat(out_bits, out_bits == 2)
    c = 3
    h, w = size

    def layout(out_h, out_w):
        return _layout(
            _rows_displacement(c, h, w, out_h, out_w, k[0], stride[0], pad[0], dil[0],
                               in_fmt.bits, out_fmt.bits),
            _nbytes(c * h * w, in_fmt), _nbytes(c * out_h * out_w, out_fmt),
        )  # fmt: skip

    tokens, _ = _conv_tokens(rng, in_fmt, w_bits, out_fmt, c, c, c, size, k, stride, pad, dil,
                             True, True, layout)  # fmt: skip
    _kernel(harness, tokens, in_place=True)


def _rows_displacement(c, h, w, out_h, out_w, k_h, stride, pad, dil, in_bits, out_bits) -> int:
    """The largest bit displacement of the output (relative to the input) such that output row
    (ch, oy) never covers input that row (ch, oy) or a later row needs."""
    best = None
    for ch in range(c):
        for oy in range(out_h):
            rows = [oy * stride - pad + ky * dil for ky in range(k_h)]
            inside = [iy for iy in rows if 0 <= iy < h]
            first_row = min(inside) if inside else h  # nothing here: the next plane
            first = in_bits * (ch * h * w + first_row * w)
            end = out_bits * (ch * out_h * out_w + (oy + 1) * out_w)
            best = first - end if best is None else min(best, first - end)
    return best


# ----------------------------------------------------------------------------- linear
@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.sampled_from(FORMATS),
    st.integers(1, 8),
    st.sampled_from(ALL_FORMATS),
    st.integers(1, 3),
    st.integers(1, 300),
    st.integers(1, 70),
    st.booleans(),
    st.integers(0, 2**32 - 1),
)
def test_linear_fast_paths_match_reference(harness, in_fmt, w_bits, out_fmt, rows, n_in, n_out,
                                           per_channel, seed):  # fmt: skip
    """mico_qlinear (input chunks, packed-weight dot products, odd output counts, rows longer
    than a chunk) stores the bytes of an element-by-element reference; a third of the cases
    offset their codes (MicoLinear.x_off: their format's offset, the bias folded)."""
    rng = np.random.default_rng(seed)
    n_mult = n_out if per_channel else 1
    x_off = _natural_offset(in_fmt) if seed % 3 == 1 else 0
    tokens = _linear_tokens(rng, in_fmt, w_bits, out_fmt, rows, n_in, n_out, 500, seed % 2 == 0,
                            lambda spread: [_multiplier(rng, spread, out_fmt)
                                            for _ in range(n_mult)], x_off=x_off)  # fmt: skip
    _kernel(harness, tokens)


@pytest.mark.parametrize("w_bits", [1, 2, 4, 8])
@pytest.mark.parametrize("n_in", [8, 24, 136, 264])
def test_linear_weights_read_in_place_match_reference(harness, w_bits, n_in):
    """Rows that span whole bytes take the in-place dot products (binary ones included), with
    chunks of 128 inputs and a shorter last chunk; outputs are not all clamped."""
    tokens = _linear_tokens(np.random.default_rng(n_in + w_bits), QFormat(4, False), w_bits,
                            QFormat(8, True), 2, n_in, 7, 20, False,
                            lambda spread: [quantize_multiplier(64 / spread)])  # fmt: skip
    lines = _run(harness, tokens)
    assert lines[0] == lines[1]
    assert len(set(lines[0])) > 2


#: codes the word kernels take offset (MicoLinear.x_off): signed, unsigned, asymmetric, binary
WORD_FORMATS = [*(QFormat(b, s) for b in (1, 2, 3, 4) for s in (True, False)),
                QFormat.asymmetric(2, 1), QFormat.asymmetric(3, 5), QFormat.asymmetric(4, 9),
                QFormat(5, True), QFormat(8, True), QFormat(6, False), QFormat(8, False),
                QFormat.asymmetric(8, 100)]  # fmt: skip


@pytest.mark.parametrize("w_bits", [4, 2])
@pytest.mark.parametrize("in_fmt", WORD_FORMATS, ids=str)
@pytest.mark.parametrize(
    "n_in, n_out, rows",
    [
        (8, 1, 1),
        (16, 3, 2),
        (24, 5, 1),
        (100, 6, 1),
        (136, 70, 2),
        (256, 64, 1),
        (264, 9, 3),
        (520, 70, 2),
    ],
)
def test_linear_word_kernels_on_offset_codes(harness, w_bits, in_fmt, n_in, n_out, rows):
    """mico_qlinear_sub4 / _sub2 on the codes the generator offsets (linear_x_off: every field
    value, -2^(bits - 1) included; the bias folded) and on codes it leaves as they are: three
    4-bit products or a word's four 2-bit ones a multiply (mico_lin_t4 / _t2), rows of an odd
    number of words, not whole words (100: the bytes), longer than a chunk (520), blocks of
    outputs past MICO_LIN_O (70: a row of one chunk keeps its code words for the next block),
    a short last group of four rows; per-channel multipliers
    (some saturating: outputs at both ends of the clamp) or one per tensor; wider unsigned codes
    centred."""
    seed = n_in * 131 + n_out * 7 + rows + w_bits * 1000 + in_fmt.bits * 17 + in_fmt.zero
    rng = np.random.default_rng(seed)
    x_off = linear_x_off(f"mico_qlinear_sub{w_bits}", in_fmt)
    if in_fmt.bits <= 4:  # to [0, 2^bits)
        assert x_off == (_natural_offset(in_fmt) if in_fmt.negative else 0)
    else:  # centred
        assert x_off == (0 if in_fmt.signed else in_fmt.zero - 2 ** (in_fmt.bits - 1))
    out_fmt = QFormat(4, True) if seed % 2 else QFormat(8, False)
    n_mult = n_out if seed % 3 else 1
    loud = 16.0 if seed % 5 < 2 else 1.0  # saturating multipliers

    def mults(spread):
        return [_multiplier(rng, spread / loud, out_fmt) for _ in range(n_mult)]

    for off in {x_off, 0}:
        tokens = _linear_tokens(rng, in_fmt, w_bits, out_fmt, rows, n_in, n_out, 300, seed % 4 == 0,
                                mults, x_off=off, full=True)  # fmt: skip
        lines = _run(harness, tokens)
        assert lines[0] == lines[1]


@pytest.mark.parametrize("w_bits", [4, 2])
@pytest.mark.parametrize("in_fmt", [QFormat(4, True), QFormat(4, False), QFormat(2, True),
                                    QFormat(2, False), QFormat(3, True)], ids=str)  # fmt: skip
@pytest.mark.parametrize("pattern", ["max", "min", "mixed"])
def test_linear_word_kernels_extreme_codes(harness, w_bits, in_fmt, pattern):
    """The word kernels' lanes at their bounds: every code and weight at the largest field
    value after the offsets (x' = 2^bits - 1, w' = 2^w_bits - 1: the 12-bit sums of two
    weight words of mico_lin_t4 at 16 * 225, the top byte of mico_lin_t2 at its most), at the
    smallest, or rows alternating (x' largest against w' smallest and the other way); 40
    words a row (odd words, two chunks when longer)."""
    n_in, n_out, rows = 8 * 40 if w_bits == 4 else 16 * 21, 6, 2
    lo = -(2 ** (in_fmt.bits - 1)) if in_fmt.signed else 0
    hi = 2 ** (in_fmt.bits - 1) - 1 if in_fmt.signed else 2**in_fmt.bits - 1
    w_lo, w_hi = -(2 ** (w_bits - 1)), 2 ** (w_bits - 1) - 1
    x = np.full((rows, n_in), hi if pattern != "min" else lo)
    weight = np.full((n_out, n_in), w_hi if pattern != "min" else w_lo)
    if pattern == "mixed":
        x[1] = lo
        weight[1::2] = w_lo
    x_off = linear_x_off(f"mico_qlinear_sub{w_bits}", in_fmt)
    out_fmt = QFormat(8, True)
    for off in {x_off, 0}:
        tokens = _linear_tokens(np.random.default_rng(0), in_fmt, w_bits, out_fmt, rows, n_in,
                                n_out, 1, False, lambda spread: [quantize_multiplier(100 / spread)],
                                x_off=off, full=True, codes=(x, weight))  # fmt: skip
        lines = _run(harness, tokens)
        assert lines[0] == lines[1]


def _linear_tokens(rng, in_fmt, w_bits, out_fmt, rows, n_in, n_out, bias, relu, multipliers,
                   x_off=0, full=False, clamp=None, codes=None):  # fmt: skip
    """A linear case: random codes and weights, biases in [-bias, bias), and the multipliers
    ``multipliers(spread)`` gives for accumulators of about +-spread. ``x_off``: the kernel's
    input offset (MicoLinear.x_off), the bias folded as the code generator folds it;
    ``full``: codes and weights over every field value (-2^(bits - 1) included); ``codes``:
    the input codes and weights themselves."""
    w_fmt = QFormat(w_bits, True)
    x = _full_codes(in_fmt, rng, rows * n_in) if full else _codes(in_fmt, rng, rows * n_in)
    weight = _full_codes(w_fmt, rng, n_out * n_in) if full else _codes(w_fmt, rng, n_out * n_in)
    if codes is not None:
        x, weight = (np.asarray(c).ravel() for c in codes)
    spread = math.sqrt(n_in) * (1 + np.abs(x).mean()) * (1 + np.abs(weight).mean())
    if full:  # full-range codes' sums lean one way: the largest sum itself
        sums = np.asarray(x).reshape(rows, n_in) @ np.asarray(weight).reshape(n_out, n_in).T
        spread = float(np.abs(sums).max()) + bias
    mults = multipliers(spread)
    wraw = _fields_bytes(weight, w_fmt).tolist()
    biases = folded_bias(rng.integers(-bias, bias, n_out), weight.reshape(n_out, n_in), x_off)
    zero = 0 if in_fmt is None else in_fmt.zero
    return ["l", rows, n_in, n_out, *_fmt(in_fmt), w_bits, len(wraw), *wraw,
            *biases.tolist(), *_out(out_fmt, rng, relu, mults, clamp), zero, x_off,
            *(_fields_bytes(x, in_fmt).tolist() if full else _bytes(x, in_fmt)),
            *NO_LAYOUT]  # fmt: skip


def _fields_bytes(codes: np.ndarray, fmt: QFormat | None) -> np.ndarray:
    """Packed codes, -2^(bits - 1) included (two's complement fields: ``pack`` keeps to the
    symmetric range)."""
    if fmt is None or fmt.binary or not fmt.signed:
        return np.asarray(_bytes(codes, fmt), dtype=np.uint8)
    return pack(np.asarray(codes) & ((1 << fmt.bits) - 1), QFormat(fmt.bits, False))


def _full_codes(fmt: QFormat | None, rng: np.random.Generator, n: int) -> np.ndarray:
    """Codes over every field value of the format (the most negative one included)."""
    if fmt is None or fmt.binary or not fmt.signed:
        return _codes(fmt, rng, n)
    return rng.integers(-(2 ** (fmt.bits - 1)), 2 ** (fmt.bits - 1), n)


def _natural_offset(fmt: QFormat | None) -> int:
    """The offset that makes a format's codes non-negative (as linear_x_off gives it)."""
    if fmt is None:
        return 0
    return 1 if fmt.binary else (1 << (fmt.bits - 1)) if fmt.signed else fmt.zero


# ----------------------------------------------------------------------------- pooling
@st.composite
def pool_cases(draw):
    k = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    pad = (draw(st.integers(0, k[0] // 2)), draw(st.integers(0, k[1] // 2)))
    dil = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    h = max(draw(st.integers(1, 8)), dil[0] * (k[0] - 1) + 1)
    w = max(draw(st.integers(1, 200)), dil[1] * (k[1] - 1) + 1)
    return (draw(st.integers(1, 3)), (h, w), k, stride, pad, dil,
            draw(st.sampled_from(FORMATS)), draw(st.sampled_from(ALL_FORMATS)),
            draw(st.booleans()))  # fmt: skip


def _pool_tokens(rng, kind, c, size, k, stride, pad, dil, fmt, out_fmt, include_pad, place):
    h, w = size
    if kind == "a":
        dil = (1, 1)
    out_h = (h + 2 * pad[0] - dil[0] * (k[0] - 1) - 1) // stride[0] + 1
    out_w = (w + 2 * pad[1] - dil[1] * (k[1] - 1) - 1) // stride[1] + 1
    x = _codes(fmt, rng, c * h * w)
    layout = NO_LAYOUT
    o_fmt = fmt if kind == "m" else out_fmt
    if place:
        d = _rows_displacement(c, h, w, out_h, out_w, k[0], stride[0], pad[0], dil[0], fmt.bits,
                               32 if o_fmt is None else o_fmt.bits)  # fmt: skip
        layout = _layout(d, _nbytes(c * h * w, fmt), _nbytes(c * out_h * out_w, o_fmt),
                         4 if o_fmt is None else 1)  # fmt: skip
    geometry = [c, h, w, out_h, out_w, *k, *stride, *pad]
    if kind == "m":
        return ["m", *geometry, *dil, *_fmt(fmt), *_bytes(x, fmt), *layout]
    window = k[0] * k[1]
    mults = [_multiplier(rng, (1 + np.abs(x).mean()) * n, out_fmt) for n in range(1, window + 1)]
    return ["a", *geometry, int(include_pad), 0, *_fmt(fmt), *_out(out_fmt, rng, False, mults),
            *_bytes(x, fmt), *layout]  # fmt: skip


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(pool_cases(), st.sampled_from(["m", "a"]), st.booleans(), st.integers(0, 2**32 - 1))
def test_pool_fast_paths_match_reference(harness, case, kind, place, seed):
    """mico_maxpool2d / mico_avgpool2d (rows folded once, runs of outputs, rows longer than the
    row buffer) store the reference's bytes, out of place and over their own input displaced
    as far as the in-place contract allows."""
    c, size, k, stride, pad, dil, fmt, out_fmt, include_pad = case
    if kind == "a":
        pad = (min(pad[0], k[0] // 2), min(pad[1], k[1] // 2))
    tokens = _pool_tokens(np.random.default_rng(seed), kind, c, size, k, stride, pad, dil, fmt,
                          out_fmt, include_pad, place)  # fmt: skip
    _kernel(harness, tokens, in_place=place)


# ----------------------------------------------------------------------------- elementwise
@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.sampled_from(ALL_FORMATS),
    st.sampled_from(ALL_FORMATS),
    st.integers(1, 300),
    st.sampled_from([1, 2, 3, 5]),
    st.booleans(),
    st.integers(0, 2**32 - 1),
)
def test_requant_matches_reference_in_place(harness, in_fmt, out_fmt, n, channels, place, seed):
    """mico_requant in runs (per-channel runs, widening, narrowing, int32) stores the
    reference's bytes, also over its own input displaced as far as the contract allows."""
    rng = np.random.default_rng(seed)
    inner = max(1, n // channels) if n % channels == 0 else 1
    channels = channels if n % channels == 0 else 1
    x = _codes(in_fmt, rng, n)
    mults = [_multiplier(rng, 1 + np.abs(x).mean(), out_fmt) for _ in range(channels)]
    layout = NO_LAYOUT
    ib, ob = (32 if f is None else f.bits for f in (in_fmt, out_fmt))
    if place:
        d = min([(ib - ob) * (i + 1) for i in range(n - 1)], default=0)
        layout = _layout(d, _nbytes(n, in_fmt), _nbytes(n, out_fmt), 4 if 32 in (ib, ob) else 1)
    tokens = ["r", n, channels, inner, *_fmt(in_fmt), *_out(out_fmt, rng, seed % 2 == 0, mults),
              *_bytes(x, in_fmt), *layout]  # fmt: skip
    _kernel(harness, tokens, in_place=place)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.sampled_from(FORMATS),
    st.sampled_from(ALL_FORMATS),
    st.sampled_from(ALL_FORMATS),
    st.integers(1, 300),
    st.booleans(),
    st.integers(0, 2**32 - 1),
)
def test_add_matches_reference_in_place(harness, a_fmt, b_fmt, out_fmt, n, place, seed):
    """mico_add in runs stores the reference's bytes, also over its input a displaced as far
    as the contract allows."""
    rng = np.random.default_rng(seed)
    a, b = _codes(a_fmt, rng, n), _codes(b_fmt, rng, n)
    m_a, shift = _multiplier(rng, 1 + np.abs(a).mean(), out_fmt)
    m_b = int(rng.integers(2**29, 2**31))
    lo, hi = (-(2**31), 2**31 - 1) if out_fmt is None else (out_fmt.qmin, out_fmt.qmax)
    layout = NO_LAYOUT
    if place:
        ob = 32 if out_fmt is None else out_fmt.bits
        d = min([(a_fmt.bits - ob) * (i + 1) for i in range(n - 1)], default=0)
        layout = _layout(d, _nbytes(n, a_fmt), _nbytes(n, out_fmt), 4 if ob == 32 else 1)
    tokens = ["+", n, *_fmt(a_fmt), *_fmt(b_fmt), *_fmt(out_fmt), m_a, m_b, shift, lo, hi,
              *_bytes(a, a_fmt), *_bytes(b, b_fmt), *layout]  # fmt: skip
    _kernel(harness, tokens, in_place=place)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.sampled_from(ALL_FORMATS),
    st.sampled_from(ALL_FORMATS),
    st.integers(1, 9),
    st.integers(1, 200),
    st.booleans(),
    st.integers(0, 2**32 - 1),
)
def test_mean_matches_reference_in_place(harness, in_fmt, out_fmt, outer, count, place, seed):
    """mico_mean over runs stores the reference's bytes, also over its own input displaced as
    far as the contract allows."""
    rng = np.random.default_rng(seed)
    x = _codes(in_fmt, rng, outer * count)
    mults = [_multiplier(rng, (1 + np.abs(x).mean()) * count, out_fmt)]
    ib, ob = (32 if f is None else f.bits for f in (in_fmt, out_fmt))
    layout = NO_LAYOUT
    if place:
        d = min([ib * (o + 1) * count - ob * (o + 1) for o in range(outer - 1)], default=0)
        layout = _layout(d, _nbytes(outer * count, in_fmt), _nbytes(outer, out_fmt),
                         4 if 32 in (ib, ob) else 1)  # fmt: skip
    tokens = ["n", outer, count, *_fmt(in_fmt), *_out(out_fmt, rng, False, mults),
              *_bytes(x, in_fmt), *layout]  # fmt: skip
    _kernel(harness, tokens, in_place=place)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.sampled_from(ALL_FORMATS),
    st.sampled_from(ALL_FORMATS),
    st.integers(1, 4),
    st.integers(1, 150),
    st.integers(0, 40),
    st.integers(0, 2**32 - 1),
)
def test_concat_part_matches_reference(harness, in_fmt, out_fmt, outer, inner, extra, seed):
    """mico_concat_part (runs at any bit offset of the output) stores the reference's bytes."""
    rng = np.random.default_rng(seed)
    offset = int(rng.integers(0, extra + 1))
    x = _codes(in_fmt, rng, outer * inner)
    mults = [] if rng.random() < 0.3 else [_multiplier(rng, 1 + np.abs(x).mean(), out_fmt)]
    tokens = ["k", outer, inner, inner + extra, offset, *_fmt(in_fmt),
              *_out(out_fmt, rng, False, mults), *_bytes(x, in_fmt), *NO_LAYOUT]  # fmt: skip
    _kernel(harness, tokens)


#: output elements of a copy case at most: four dims of up to 70 drew tensors of 10^7 codes
#: (one run of the test took 134 s); long innermost runs and every rank stay reachable
COPY_MAX_ELEMENTS = 6000


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.sampled_from(ALL_FORMATS),
    st.sampled_from(ALL_FORMATS),
    st.lists(st.integers(1, 70), min_size=1, max_size=4).filter(
        lambda shape: int(np.prod(shape)) <= COPY_MAX_ELEMENTS
    ),
    st.integers(0, 2**32 - 1),
)
def test_copy_matches_reference(harness, in_fmt, out_fmt, shape, seed):
    """mico_copy (permutations and strided slices; unit-stride innermost runs) stores the
    reference's bytes."""
    rng = np.random.default_rng(seed)
    src_shape = [s * int(rng.integers(1, 3)) for s in shape]
    n_in = int(np.prod(src_shape))
    strides = np.cumprod([1, *src_shape[::-1]])[:-1][::-1].tolist()
    order = rng.permutation(len(shape)).tolist() if rng.random() < 0.5 else list(range(len(shape)))
    steps = [int(src_shape[d] // shape[d]) for d in order]
    stride = [strides[d] * step for d, step in zip(order, steps, strict=True)]
    out_shape = [shape[d] for d in order]
    pad = 6 - len(shape)
    x = _codes(in_fmt, rng, n_in)
    mults = [] if rng.random() < 0.5 else [_multiplier(rng, 1 + np.abs(x).mean(), out_fmt)]
    tokens = ["y", len(shape), *out_shape, *[1] * pad, *stride, *[0] * pad, 0, n_in,
              *_fmt(in_fmt), *_out(out_fmt, rng, False, mults), *_bytes(x, in_fmt),
              *NO_LAYOUT]  # fmt: skip
    _kernel(harness, tokens)


# ----------------------------------------------------------------------------- compilers
@pytest.mark.parametrize("compiler", ["gcc", "clang", "riscv64-unknown-elf-gcc"])
def test_kernels_compile_warning_free(compiler, tmp_path):
    """Every static kernel source compiles with -std=c99 -Wall -Wextra -Werror under gcc, clang
    and the rv32imac cross compiler."""
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} is not installed")
    csrc = resources.files("mico.csrc")
    (tmp_path / "mico_nn.h").write_text((csrc / "mico_nn.h").read_text())
    arch = (
        ["-march=rv32imac", "-mabi=ilp32", "--specs=picolibc.specs"] if "riscv" in compiler else []
    )
    for name in (*KERNELS, "mico_quant.c"):
        (tmp_path / name).write_text((csrc / name).read_text())
        subprocess.run(
            [compiler, *arch, *CFLAGS, "-c", str(tmp_path / name), "-o", str(tmp_path / "k.o")],
            check=True,
        )
