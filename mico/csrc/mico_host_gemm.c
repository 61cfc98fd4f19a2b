/* Host kernels: convolution and linear layers as int16 GEMMs that gcc / clang vectorise.
 *
 * The code generator calls these for a target whose description has the `xautovec` capability
 * (mico/targets/files/host.yaml): a desktop or server CPU with SIMD registers and caches, where
 * the rv32 kernels' scalar register tiles and SWAR lanes leave the vector units idle. They are
 * plain C99 (no intrinsics) written for the auto-vectoriser at -O3: the hot loops are dot
 * products of int16 rows accumulated into int32 (SSE2 pmaddwd, AVX2 vpmaddwd, AVX-512 VNNI
 * vpdpwssd, NEON smlal), with no data-dependent branch inside.
 *
 * Every width 1..8 (binary and ternary weights included) takes the same loops: a layer's codes
 * are unpacked to int16 once per call (input planes, zero-padded) and its weights once per call
 * (rows padded with zero taps to a multiple of MICO_HOST_KALIGN), so fewer bits cost only the
 * unpacking and packing. Sums are exact in int32 (|code| <= 255, |weight| <= 127) and are
 * requantized with mico_rescale's arithmetic (vectorised here; mico_rq_run for binary outputs
 * and layers without multipliers) and packed, so the results are bit-identical to the other
 * paths and to mico/quant/arithmetic.py.
 *
 * Scratch lives in static arrays (host only: about 2.2 MB of .bss, not in the arena); a layer
 * whose unpacked input or weights do not fit them takes the portable kernels instead. The
 * kernels are compiled when MICO_HOST_KERNELS is defined (the generated Makefile defines it for
 * TARGET=host); elsewhere the entry points forward to mico_qconv2d / mico_qlinear / mico_add.
 *
 *  - mico_qconv2d_host: any kernel, stride, padding, dilation and groups (codes of 1..8 bits).
 *    Per group, the input is unpacked once into zero-padded HWC planes and the weights into
 *    rows in (ky, kx, ic) order; for each block of output pixels an im2col patch [pixel][tap]
 *    is copied from the planes (a 1x1 stride-1 layer uses the planes themselves), and every
 *    4 output channels x 2 pixels run the dot-product micro-kernel over it; the block's sums
 *    are requantized and packed 4 channels at a time (sub-byte outputs: the whole layer in one
 *    run at its end).
 *  - Depthwise layers (groups == in_c == out_c), any kernel, stride, padding and dilation:
 *    narrow outputs over the HWC planes, one loop over a pixel's channels per tap
 *    (mico_host_dw_hwc); wide ones channel by channel over a plane split by stride phase, so
 *    every tap is one contiguous multiply-add over the plane (mico_host_dw). Both read a
 *    channel's whole input before storing any of its outputs (the in-place order of
 *    mico_conv2d.c).
 *  - mico_qlinear_host: rows x in_features times out_features x in_features; 8-bit weights are
 *    read as int8 in place, narrower ones unpacked 4 rows at a time.
 *  - mico_add_host: mico_add's 64-bit arithmetic over unpacked runs, vectorised.
 */
#include "mico_nn.h"

#ifndef MICO_HOST_KERNELS
/* Not a host build (make TARGET=rv32, ...): the entry points are the portable kernels, so a
 * project generated for the host builds and runs bit-exact anywhere, without the scratch. */
void mico_qconv2d_host(const MicoConv2d *p, const void *in, void *out)
{
    mico_qconv2d(p, in, out);
}

void mico_qlinear_host(const MicoLinear *p, const void *in, void *out)
{
    mico_qlinear(p, in, out);
}

void mico_add_host(const MicoAdd *p, const void *a, const void *b, void *out)
{
    mico_add(p, a, b, out);
}
#else

#define MICO_HOST_KALIGN 16       /* taps per row are padded to a multiple of this */
#define MICO_HOST_X (1 << 19)     /* int16: a group's padded input planes */
#define MICO_HOST_W (1 << 18)     /* int16: a group's unpacked weight rows */
#define MICO_HOST_PATCH (1 << 14) /* int16: the im2col patch [pixel][tap] */
#define MICO_HOST_PIX 64          /* most output pixels of one patch */
#define MICO_HOST_ACC 16384       /* int32: a depthwise channel's sums, a linear layer's row */
#define MICO_HOST_ROW 4608        /* int16: one input row, one unpacked weight row */
#define MICO_HOST_DW_ROW 24       /* depthwise layers with narrower outputs go channels-last */

static int16_t mico_host_x[MICO_HOST_X];
static int16_t mico_host_w[MICO_HOST_W];
static int16_t mico_host_patch[MICO_HOST_PATCH];
static int32_t mico_host_acc[2 * MICO_HOST_ACC];
#define MICO_HOST_STAGE (1 << 17) /* int32: a layer's sub-byte outputs before packing */
static int32_t mico_host_stage[MICO_HOST_STAGE];
static int mico_host_staged;

#if defined(__GNUC__) || defined(__clang__)
#define MICO_RESTRICT __restrict__
#else
#define MICO_RESTRICT
#endif

/* On x86-64 with glibc, gcc and clang compile the hot functions twice, for the baseline ISA
 * (SSE2) and for AVX2, and pick one when the program starts (function multiversioning: the
 * same C source, no intrinsics; the integer results are the same). -DMICO_HOST_NO_CLONES, or
 * a sanitized build, keeps one baseline version. */
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && \
    !defined(MICO_HOST_NO_CLONES) && !defined(__SANITIZE_ADDRESS__) && \
    (!defined(__clang__) || __clang_major__ >= 14)
#define MICO_HOST_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define MICO_HOST_CLONES
#endif
/* The micro-kernels are inlined into each version of their callers. */
#if defined(__GNUC__)
#define MICO_HOST_INLINE __attribute__((always_inline)) inline
#else
#define MICO_HOST_INLINE
#endif

/* n rounded up to a multiple of MICO_HOST_KALIGN. */
static int32_t mico_host_kpad(int32_t n)
{
    return (n + MICO_HOST_KALIGN - 1) / MICO_HOST_KALIGN * MICO_HOST_KALIGN;
}

/* n signed weight codes of `bits` bits from element `start` into dst (int16). Byte-aligned
 * runs of 8-, 4- and 2-bit codes are decoded a byte at a time in loops the compiler vectorises;
 * the others go through mico_unpack. */
static void mico_host_unpack_w(const uint8_t *w, size_t start, int32_t n, int32_t bits,
                               int16_t *MICO_RESTRICT dst)
{
    const size_t bit = start * (size_t)bits;
    const uint8_t *src = w + (bit >> 3);
    MicoFmt f;
    int32_t i;
    if ((bit & 7u) == 0 && bits == 8) {
        for (i = 0; i < n; i++) {
            dst[i] = (int16_t)(int8_t)src[i];
        }
        return;
    }
    if ((bit & 7u) == 0 && bits == 4 && (n & 1) == 0) {
        for (i = 0; i < n / 2; i++) { /* a field f is the code (f ^ 8) - 8 */
            dst[2 * i] = (int16_t)((int32_t)((src[i] & 15u) ^ 8u) - 8);
            dst[2 * i + 1] = (int16_t)((int32_t)((src[i] >> 4) ^ 8u) - 8);
        }
        return;
    }
    if ((bit & 7u) == 0 && bits == 2 && (n & 3) == 0) {
        for (i = 0; i < n / 4; i++) {
            dst[4 * i] = (int16_t)((int32_t)((src[i] & 3u) ^ 2u) - 2);
            dst[4 * i + 1] = (int16_t)((int32_t)(((src[i] >> 2) & 3u) ^ 2u) - 2);
            dst[4 * i + 2] = (int16_t)((int32_t)(((src[i] >> 4) & 3u) ^ 2u) - 2);
            dst[4 * i + 3] = (int16_t)((int32_t)((src[i] >> 6) ^ 2u) - 2);
        }
        return;
    }
    f.bits = bits;
    f.is_signed = 1;
    f.zero = 0;
    mico_unpack(w, start, n, f, dst);
}

/* n codes of format f from element `start` into dst (int16): byte-aligned runs of 4-, 2- and
 * 1-bit codes a byte at a time in loops the compiler vectorises (a field x maps to the code
 * ((x ^ flip) << sh) - off, mico_nn.h's MicoFieldMap), everything else through mico_unpack. */
static void mico_host_unpack(const void *buf, size_t start, int32_t n, MicoFmt f,
                             int16_t *MICO_RESTRICT dst)
{
    const MicoFieldMap m = mico_field_map(f);
    const int32_t per = f.bits < 8 ? 8 / f.bits : 1;
    const uint8_t *src = (const uint8_t *)buf + start * (size_t)f.bits / 8u;
    const int32_t flip = (int32_t)m.x, sh = (int32_t)m.sh, off = m.o;
    int32_t i, k;
    if ((f.bits != 4 && f.bits != 2 && f.bits != 1) || (start * (size_t)f.bits) % 8u != 0 ||
        n % per != 0) {
        mico_unpack(buf, start, n, f, dst);
        return;
    }
#define MICO_HOST_UNPACK_BYTES(PER, BITS)                                                   \
    for (i = 0; i < n / (PER); i++) {                                                        \
        const int32_t byte = src[i];                                                         \
        for (k = 0; k < (PER); k++) {                                                        \
            const int32_t field = (byte >> (k * (BITS))) & ((1 << (BITS)) - 1);              \
            dst[i * (PER) + k] = (int16_t)(((field ^ flip) << sh) - off);                    \
        }                                                                                    \
    }
    if (f.bits == 4) {
        MICO_HOST_UNPACK_BYTES(2, 4)
    } else if (f.bits == 2) {
        MICO_HOST_UNPACK_BYTES(4, 2)
    } else {
        MICO_HOST_UNPACK_BYTES(8, 1)
    }
#undef MICO_HOST_UNPACK_BYTES
}

/* mico_pack of n codes at element `start`: byte-aligned runs of 4- and 2-bit codes (not
 * binary) a byte at a time in loops the compiler vectorises, everything else through
 * mico_pack. */
static void mico_host_pack(void *buf, size_t start, const int32_t *MICO_RESTRICT v, int32_t n,
                           MicoFmt f)
{
    uint8_t *MICO_RESTRICT dst = (uint8_t *)buf + start * (size_t)f.bits / 8u;
    const int32_t zero = f.is_signed ? 0 : f.zero;
    int32_t i;
    if ((f.bits != 4 && f.bits != 2) || (start * (size_t)f.bits) % 8u != 0 ||
        n % (8 / f.bits) != 0) {
        mico_pack(buf, start, v, n, f);
        return;
    }
    if (f.bits == 4) {
        for (i = 0; i < n / 2; i++) {
            dst[i] = (uint8_t)(((uint32_t)(v[2 * i] + zero) & 15u) |
                               ((uint32_t)(v[2 * i + 1] + zero) & 15u) << 4);
        }
    } else {
        for (i = 0; i < n / 4; i++) {
            dst[i] = (uint8_t)(((uint32_t)(v[4 * i] + zero) & 3u) |
                               ((uint32_t)(v[4 * i + 1] + zero) & 3u) << 2 |
                               ((uint32_t)(v[4 * i + 2] + zero) & 3u) << 4 |
                               ((uint32_t)(v[4 * i + 3] + zero) & 3u) << 6);
        }
    }
}

/* s[c * 2 + j] = dot(w row c, x row j) over kp taps, for 4 weight rows (kp apart) and 2 patch
 * rows (kp apart): eight int32 reductions of int16 products, one vector accumulator each. */
static MICO_HOST_INLINE void mico_host_mk42(const int16_t *MICO_RESTRICT w,
                                             const int16_t *MICO_RESTRICT x,
                                             int32_t kp, int32_t *MICO_RESTRICT s)
{
    const int16_t *w0 = w, *w1 = w + kp, *w2 = w + 2 * kp, *w3 = w + 3 * kp;
    const int16_t *x0 = x, *x1 = x + kp;
    int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, b0 = 0, b1 = 0, b2 = 0, b3 = 0;
    int32_t k;
    for (k = 0; k < kp; k++) {
        const int32_t u = x0[k], v = x1[k];
        a0 += w0[k] * u;
        a1 += w1[k] * u;
        a2 += w2[k] * u;
        a3 += w3[k] * u;
        b0 += w0[k] * v;
        b1 += w1[k] * v;
        b2 += w2[k] * v;
        b3 += w3[k] * v;
    }
    s[0] = a0;
    s[1] = b0;
    s[2] = a1;
    s[3] = b1;
    s[4] = a2;
    s[5] = b2;
    s[6] = a3;
    s[7] = b3;
}

/* s[c] = dot(w row c, x) over kp taps, for 4 weight rows (kp apart). */
static MICO_HOST_INLINE void mico_host_mk41(const int16_t *MICO_RESTRICT w,
                                             const int16_t *MICO_RESTRICT x,
                                             int32_t kp, int32_t *MICO_RESTRICT s)
{
    const int16_t *w0 = w, *w1 = w + kp, *w2 = w + 2 * kp, *w3 = w + 3 * kp;
    int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    int32_t k;
    for (k = 0; k < kp; k++) {
        const int32_t u = x[k];
        a0 += w0[k] * u;
        a1 += w1[k] * u;
        a2 += w2[k] * u;
        a3 += w3[k] * u;
    }
    s[0] = a0;
    s[1] = a1;
    s[2] = a2;
    s[3] = a3;
}

/* The same for 4 rows of int8 weights (k_n taps, ks apart) and one int16 row x. */
static MICO_HOST_INLINE void mico_host_mk41_s8(const int8_t *MICO_RESTRICT w, size_t ks,
                              const int16_t *MICO_RESTRICT x, int32_t k_n,
                              int32_t *MICO_RESTRICT s)
{
    const int8_t *w0 = w, *w1 = w + ks, *w2 = w + 2 * ks, *w3 = w + 3 * ks;
    int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    int32_t k;
    for (k = 0; k < k_n; k++) {
        const int32_t u = x[k];
        a0 += w0[k] * u;
        a1 += w1[k] * u;
        a2 += w2[k] * u;
        a3 += w3[k] * u;
    }
    s[0] = a0;
    s[1] = a1;
    s[2] = a2;
    s[3] = a3;
}

/* v[i] (bias already added) requantized as channel c says and packed at element start. */
static MICO_HOST_INLINE void mico_host_store(const MicoOut *o, int32_t c,
                                              int32_t *MICO_RESTRICT v, int32_t n, void *out,
                                              size_t start)
{
    const MicoRq q = mico_rq(o, c);
    int32_t i;
    if (q.scaled && !q.binary && q.shift > 32) { /* mico_rescale's usual case, vectorisable */
        const uint32_t m = (uint32_t)q.m, s = (uint32_t)(q.shift - 32);
        const uint32_t rnd = 1u << (s - 1u);
        const int32_t lo = q.lo, hi = q.hi, floor0 = q.relu ? 0 : INT32_MIN;
        for (i = 0; i < n; i++) {
            const int32_t r = v[i] < floor0 ? floor0 : v[i];
            const uint32_t mag = r < 0 ? 0u - (uint32_t)r : (uint32_t)r;
            const uint32_t h = ((uint32_t)(((uint64_t)mag * m) >> 32) + rnd) >> s;
            const int32_t y = r < 0 ? -(int32_t)h : (int32_t)h;
            v[i] = y < lo ? lo : y > hi ? hi : y;
        }
    } else if (q.scaled && !q.binary) { /* shift <= 32: the whole 64-bit product */
        const uint64_t m = (uint32_t)q.m, rnd = (uint64_t)1 << (q.shift - 1);
        const int32_t s = q.shift, floor0 = q.relu ? 0 : INT32_MIN;
        const int64_t lo = q.lo, hi = q.hi;
        for (i = 0; i < n; i++) {
            const int32_t r = v[i] < floor0 ? floor0 : v[i];
            const uint64_t mag = r < 0 ? 0u - (uint32_t)r : (uint32_t)r;
            const int64_t h = (int64_t)((mag * m + rnd) >> s); /* < 2^62: no overflow */
            const int64_t y = r < 0 ? -h : h;                   /* clamped into int32 below */
            v[i] = (int32_t)(y < lo ? lo : y > hi ? hi : y);
        }
    } else {
        mico_rq_run(&q, v, n);
    }
    if (mico_host_staged) { /* whole-tensor packing: the layer packs the stage at its end */
        for (i = 0; i < n; i++) {
            mico_host_stage[start + (size_t)i] = v[i];
        }
        return;
    }
    mico_host_pack(out, start, v, n, o->fmt);
}

/* Sub-byte outputs of a layer whose codes fit the stage wait there and are packed in one run
 * (per-channel runs of a plane whose size is not a multiple of the codes per byte start
 * inside a byte, which only the bit-buffer path of mico_pack takes). */
static void mico_host_stage_begin(const MicoOut *o, size_t total)
{
    mico_host_staged = o->fmt.bits < 8 && total <= MICO_HOST_STAGE;
}

static void mico_host_stage_end(const MicoOut *o, void *out, size_t total)
{
    if (mico_host_staged) {
        mico_host_staged = 0;
        mico_host_pack(out, 0, mico_host_stage, (int32_t)total, o->fmt);
    }
}

/* The padded input of channels ic0 .. ic0 + n - 1 in HWC order (hp x wp pixels of n codes,
 * zeros around): code (iy, ix, ic) at x[((iy + pad_h) * wp + ix + pad_w) * n + ic - ic0]. */
static void mico_host_planes(const MicoConv2d *p, const void *in, int32_t ic0, int32_t n,
                             int32_t hp, int32_t wp, int16_t *MICO_RESTRICT x)
{
    const size_t plane = (size_t)p->in_h * (size_t)p->in_w;
    int16_t row[MICO_HOST_ROW];
    int32_t c, y, i;
    for (i = 0; i < p->pad_h * wp * n; i++) {
        x[i] = 0;
        x[(size_t)(hp - p->pad_h) * (size_t)wp * (size_t)n + (size_t)i] = 0;
    }
    for (y = 0; y < p->in_h; y++) {
        int16_t *dst = x + (size_t)(y + p->pad_h) * (size_t)wp * (size_t)n;
        for (i = 0; i < p->pad_w * n; i++) {
            dst[i] = 0;
            dst[(size_t)(p->pad_w + p->in_w) * (size_t)n + (size_t)i] = 0;
        }
    }
    if (p->in_fmt.bits == 8) { /* bytes are the codes (less the zero point): a transpose */
        const uint8_t *src = (const uint8_t *)in + (size_t)ic0 * plane;
        const int32_t sgn = p->in_fmt.is_signed, zero = sgn ? 0 : p->in_fmt.zero;
        for (y = 0; y < p->in_h; y++) {
            int16_t *MICO_RESTRICT dst =
                x + ((size_t)(y + p->pad_h) * (size_t)wp + (size_t)p->pad_w) * (size_t)n;
            const uint8_t *row8 = src + (size_t)y * (size_t)p->in_w;
            for (i = 0; i < p->in_w; i++) {
                for (c = 0; c < n; c++) {
                    const uint32_t v = row8[(size_t)c * plane + (size_t)i];
                    dst[(size_t)i * (size_t)n + (size_t)c] =
                        (int16_t)(sgn ? (int32_t)(int8_t)v : (int32_t)v - zero);
                }
            }
        }
        return;
    }
    if ((size_t)n * plane <= MICO_HOST_PATCH) { /* every plane in one run: the patch is free */
        mico_host_unpack(in, (size_t)ic0 * plane, (int32_t)((size_t)n * plane), p->in_fmt,
                         mico_host_patch);
    }
    for (c = 0; c < n; c++) {
        const size_t first = (size_t)(ic0 + c) * plane;
        const int16_t *codes = mico_host_patch;
        if ((size_t)n * plane <= MICO_HOST_PATCH) {
            codes += (size_t)c * plane;
        } else if (plane <= MICO_HOST_PATCH) { /* the whole plane at once */
            mico_host_unpack(in, first, (int32_t)plane, p->in_fmt, mico_host_patch);
        }
        for (y = 0; y < p->in_h; y++) {
            int16_t *dst = x + ((size_t)(y + p->pad_h) * (size_t)wp + (size_t)p->pad_w) * (size_t)n;
            const int16_t *src = codes + (size_t)y * (size_t)p->in_w;
            if (plane > MICO_HOST_PATCH) {
                mico_host_unpack(in, first + (size_t)y * (size_t)p->in_w, p->in_w, p->in_fmt,
                                 row);
                src = row;
            }
            for (i = 0; i < p->in_w; i++) {
                dst[(size_t)i * (size_t)n + (size_t)c] = src[i];
            }
        }
    }
}

/* The patch of output pixels pix0 .. pix0 + np - 1: row j holds the taps of pixel pix0 + j in
 * (ky, kx, ic) order, then zeros up to kp. With unit column dilation a kernel row's taps are
 * one run of k_w * ipg codes of the HWC input. */
static void mico_host_im2col(const MicoConv2d *p, const int16_t *x, int32_t ipg, int32_t wp,
                             int32_t pix0, int32_t np, int32_t kp, int16_t *MICO_RESTRICT patch)
{
    const int32_t run = p->dil_w == 1 ? p->k_w * ipg : ipg, k_all = p->k_h * p->k_w * ipg;
    int32_t j, ky, kx, i, k;
    int32_t oy = pix0 / p->out_w, ox = pix0 % p->out_w;
    for (j = 0; j < np; j++) {
        const int16_t *base = x + ((size_t)(oy * p->stride_h) * (size_t)wp +
                                   (size_t)(ox * p->stride_w)) * (size_t)ipg;
        int16_t *MICO_RESTRICT dst = patch + (size_t)j * (size_t)kp;
        k = 0;
        for (ky = 0; ky < p->k_h; ky++) {
            const int16_t *src = base + (size_t)(ky * p->dil_h) * (size_t)wp * (size_t)ipg;
            for (kx = 0; kx < p->k_w; kx += run / ipg) {
                const int16_t *s = src + (size_t)(kx * p->dil_w) * (size_t)ipg;
                for (i = 0; i < run; i++) {
                    dst[k + i] = s[i];
                }
                k += run;
            }
        }
        for (k = k_all; k < kp; k++) {
            dst[k] = 0;
        }
        if (++ox == p->out_w) {
            ox = 0;
            oy++;
        }
    }
}

/* Convolution as int16 GEMMs (see the top of the file). Returns 0 (nothing done) when the
 * layer's unpacked input or weights do not fit the scratch arrays. */
MICO_HOST_CLONES static int mico_host_conv(const MicoConv2d *p, const void *in, void *out)
{
    const int32_t ipg = p->in_c / p->groups, opg = p->out_c / p->groups;
    const int32_t hp = p->in_h + 2 * p->pad_h, wp = p->in_w + 2 * p->pad_w;
    const int32_t taps = p->k_h * p->k_w, k_all = ipg * taps, kp = mico_host_kpad(k_all);
    const int32_t npix = p->out_h * p->out_w, opg4 = (opg + 3) / 4 * 4;
    /* pointwise, stride 1, no padding, whole rows of taps: the HWC input is the patch */
    const int direct = taps == 1 && p->stride_h == 1 && p->stride_w == 1 && p->pad_h == 0 &&
                       p->pad_w == 0 && kp == k_all;
    int32_t bp = MICO_HOST_PATCH / kp, g, c, pix0, oc, j, t, i;
    int32_t tile[4 * MICO_HOST_PIX];
    int16_t tmp[MICO_HOST_ROW];
    bp = (bp > MICO_HOST_PIX ? MICO_HOST_PIX : bp) & ~1;
    if (p->in_fmt.bits > 8 || bp < 2 || k_all > MICO_HOST_ROW || p->in_w > MICO_HOST_ROW ||
        (size_t)ipg * (size_t)hp * (size_t)wp + (size_t)kp > MICO_HOST_X ||
        (size_t)opg4 * (size_t)kp > MICO_HOST_W) {
        return 0;
    }
    for (g = 0; g < p->groups; g++) {
        mico_host_planes(p, in, g * ipg, ipg, hp, wp, mico_host_x);
        for (i = 0; i < kp; i++) { /* a zero pixel past the input (an odd direct block) */
            mico_host_x[(size_t)ipg * (size_t)hp * (size_t)wp + (size_t)i] = 0;
        }
        for (c = 0; c < opg4; c++) { /* rows past opg: zero weights, sums never stored */
            int16_t *row = mico_host_w + (size_t)c * (size_t)kp;
            int32_t k = 0;
            if (c < opg) { /* (ic, ky, kx) as stored -> (ky, kx, ic) as the patch holds */
                mico_host_unpack_w(p->weight, (size_t)(g * opg + c) * (size_t)k_all, k_all,
                                   p->w_bits, tmp);
                for (t = 0; t < taps; t++) {
                    for (i = 0; i < ipg; i++) {
                        row[t * ipg + i] = tmp[i * taps + t];
                    }
                }
                k = k_all;
            }
            for (; k < kp; k++) {
                row[k] = 0;
            }
        }
        for (pix0 = 0; pix0 < npix; pix0 += bp) {
            const int32_t np = npix - pix0 < bp ? npix - pix0 : bp, np2 = (np + 1) & ~1;
            const int16_t *patch = mico_host_patch;
            if (direct) {
                patch = mico_host_x + (size_t)pix0 * (size_t)kp;
            } else {
                mico_host_im2col(p, mico_host_x, ipg, wp, pix0, np, kp, mico_host_patch);
                if (np2 > np) { /* an odd block: a zero pixel makes the pair */
                    for (j = 0; j < kp; j++) {
                        mico_host_patch[(size_t)np * (size_t)kp + (size_t)j] = 0;
                    }
                }
            }
            for (oc = 0; oc < opg; oc += 4) {
                const int16_t *w = mico_host_w + (size_t)oc * (size_t)kp;
                const int32_t n_oc = opg - oc < 4 ? opg - oc : 4;
                int32_t s[8];
                for (j = 0; j < np2; j += 2) {
                    mico_host_mk42(w, patch + (size_t)j * (size_t)kp, kp, s);
                    for (c = 0; c < 4; c++) {
                        tile[c * MICO_HOST_PIX + j] = s[2 * c];
                        tile[c * MICO_HOST_PIX + j + 1] = s[2 * c + 1];
                    }
                }
                for (c = 0; c < n_oc; c++) {
                    const int32_t ch = g * opg + oc + c;
                    int32_t *t4 = tile + c * MICO_HOST_PIX;
                    const int32_t b = p->bias[ch];
                    for (j = 0; j < np; j++) {
                        t4[j] += b;
                    }
                    mico_host_store(&p->out, ch, t4, np, out,
                                    (size_t)ch * (size_t)npix + (size_t)pix0);
                }
            }
        }
    }
    return 1;
}

/* Depthwise convolution channel by channel (see the top of the file). The padded plane is
 * stored split by phase, rows by r % stride_h and columns by x % stride_w: phase (fr, fc) is a
 * block of hq x wq codes, code (j, q) the padded input (j * stride_h + fr, q * stride_w + fc).
 * Output (oy, ox) of a tap then reads (oy + a, ox + b) of one phase block, so with the sums
 * laid out as rows of wq (columns past out_w are computed and dropped) every tap is one
 * contiguous multiply-add over the whole plane. Returns 0 when the plane or the sums do not
 * fit the scratch arrays. */
MICO_HOST_CLONES static int mico_host_dw(const MicoConv2d *p, const void *in, void *out)
{
    const int32_t sw = p->stride_w, sh = p->stride_h;
    const int32_t hp = p->in_h + 2 * p->pad_h, wp = p->in_w + 2 * p->pad_w;
    const int32_t hq = (hp + sh - 1) / sh, wq = (wp + sw - 1) / sw;
    const int32_t npix = p->out_h * p->out_w, taps = p->k_h * p->k_w;
    /* sums computed per tap: up to output (out_h - 1, out_w - 1), rounded up to whole
     * vectors (the extra sums read codes past the plane and are dropped) */
    const int32_t span = ((p->out_h - 1) * wq + p->out_w + 15) & ~15;
    const size_t plane = (size_t)p->in_h * (size_t)p->in_w, block = (size_t)hq * (size_t)wq;
    int16_t *x = mico_host_x, *raw = mico_host_patch;
    int32_t *acc = mico_host_acc, *res = mico_host_acc + MICO_HOST_ACC;
    int32_t c, y, i, t, oy, ox;
    int32_t off[64];
    int16_t wt[64];
    if (p->in_fmt.bits > 8 || taps > 64 || (size_t)sh * (size_t)sw * block + 16 > MICO_HOST_X ||
        plane > MICO_HOST_PATCH || span > MICO_HOST_ACC) {
        return 0;
    }
    for (t = 0; t < taps; t++) { /* where tap t of output (0, 0) is in the phase blocks */
        const int32_t r = (t / p->k_w) * p->dil_h, q = (t % p->k_w) * p->dil_w;
        off[t] = (int32_t)((size_t)((r % sh) * sw + q % sw) * block) + (r / sh) * wq + q / sw;
    }
    for (i = 0; i < sh * sw * (int32_t)block + 16; i++) {
        x[i] = 0; /* the padding (never written below), and codes past the plane */
    }
    for (c = 0; c < p->in_c; c++) {
        const int32_t b = p->bias[c];
        mico_host_unpack(in, (size_t)c * plane, (int32_t)plane, p->in_fmt, raw);
        for (y = 0; y < p->in_h; y++) {
            const int32_t r = y + p->pad_h;
            const int16_t *MICO_RESTRICT src = raw + (size_t)y * (size_t)p->in_w;
            int16_t *MICO_RESTRICT row = x + (size_t)((r % sh) * sw) * block +
                                         (size_t)(r / sh) * (size_t)wq;
            if (sw == 1) {
                for (i = 0; i < p->in_w; i++) {
                    row[p->pad_w + i] = src[i];
                }
            } else {
                for (i = 0; i < p->in_w; i++) {
                    const int32_t q = i + p->pad_w;
                    row[(size_t)(q % sw) * block + (size_t)(q / sw)] = src[i];
                }
            }
        }
        mico_host_unpack_w(p->weight, (size_t)c * (size_t)taps, taps, p->w_bits, wt);
        for (i = 0; i < span; i++) {
            acc[i] = b;
        }
        for (t = 0; t < taps; t++) {
            const int16_t *MICO_RESTRICT src = x + off[t];
            const int16_t wv = wt[t];
            int32_t *MICO_RESTRICT a = acc;
            /* |code| <= 255 and |weight| <= 127: the product fits int16 exactly */
            for (i = 0; i < span; i++) {
                a[i] += (int16_t)(wv * src[i]);
            }
        }
        for (oy = 0; oy < p->out_h; oy++) {
            for (ox = 0; ox < p->out_w; ox++) {
                res[oy * p->out_w + ox] = acc[oy * wq + ox];
            }
        }
        mico_host_store(&p->out, c, res, npix, out, (size_t)c * (size_t)npix);
    }
    return 1;
}

/* Depthwise convolution over the HWC input (for narrow planes, where the rows above are too
 * short for vectors): per output pixel, one vectorised loop over its channels (padded to 16)
 * per tap; blocks of MICO_HOST_PIX pixels wait in a tile [channel][pixel] and are requantized
 * and packed a channel at a time. The whole input is read before any output is
 * stored. Returns 0 when the input or the weights do not fit the scratch arrays. */
MICO_HOST_CLONES static int mico_host_dw_hwc(const MicoConv2d *p, const void *in, void *out)
{
    const int32_t n_c = p->in_c, cp = (n_c + 15) & ~15, taps = p->k_h * p->k_w;
    const int32_t hp = p->in_h + 2 * p->pad_h, wp = p->in_w + 2 * p->pad_w;
    const int32_t npix = p->out_h * p->out_w;
    const size_t size = (size_t)hp * (size_t)wp * (size_t)n_c;
    int16_t *x = mico_host_x, *wt = mico_host_w;
    int32_t *tile = mico_host_acc, *acc = mico_host_acc + MICO_HOST_ACC;
    int32_t off[64];
    int16_t tmp[64];
    int32_t c, t, i, pix0, j;
    if (p->in_fmt.bits > 8 || taps > 64 || size + (size_t)cp > MICO_HOST_X ||
        (size_t)(taps + 1) * (size_t)cp > MICO_HOST_W || cp * MICO_HOST_PIX > MICO_HOST_ACC) {
        return 0;
    }
    mico_host_planes(p, in, 0, n_c, hp, wp, x);
    for (i = 0; i < cp; i++) {
        x[size + (size_t)i] = 0; /* read (times zero weights) past the last pixel */
    }
    for (t = 0; t < taps; t++) {
        off[t] = ((t / p->k_w) * p->dil_h * wp + (t % p->k_w) * p->dil_w) * n_c;
    }
    for (c = 0; c < cp; c++) { /* wt[t * cp + c]: tap t of channel c (zero past n_c) */
        if (c < n_c) {
            mico_host_unpack_w(p->weight, (size_t)c * (size_t)taps, taps, p->w_bits, tmp);
        }
        for (t = 0; t < taps; t++) {
            wt[t * cp + c] = c < n_c ? tmp[t] : 0;
        }
    }
    for (pix0 = 0; pix0 < npix; pix0 += MICO_HOST_PIX) {
        const int32_t np = npix - pix0 < MICO_HOST_PIX ? npix - pix0 : MICO_HOST_PIX;
        for (j = 0; j < np; j++) {
            const int32_t oy = (pix0 + j) / p->out_w, ox = (pix0 + j) % p->out_w;
            const int16_t *base =
                x + ((size_t)(oy * p->stride_h) * (size_t)wp + (size_t)(ox * p->stride_w)) *
                        (size_t)n_c;
            int32_t *MICO_RESTRICT a = acc;
            for (c = 0; c < cp; c++) {
                a[c] = 0;
            }
            for (t = 0; t < taps; t++) {
                const int16_t *MICO_RESTRICT s = base + off[t];
                const int16_t *MICO_RESTRICT w = wt + t * cp;
                for (c = 0; c < cp; c++) { /* the product fits int16 exactly */
                    a[c] += (int16_t)(w[c] * s[c]);
                }
            }
            for (c = 0; c < n_c; c++) {
                tile[c * MICO_HOST_PIX + j] = a[c];
            }
        }
        for (c = 0; c < n_c; c++) {
            int32_t *v = tile + c * MICO_HOST_PIX;
            const int32_t b = p->bias[c];
            for (j = 0; j < np; j++) {
                v[j] += b;
            }
            mico_host_store(&p->out, c, v, np, out, (size_t)c * (size_t)npix + (size_t)pix0);
        }
    }
    return 1;
}

void mico_qconv2d_host(const MicoConv2d *p, const void *in, void *out)
{
    const size_t total = (size_t)p->out_c * (size_t)p->out_h * (size_t)p->out_w;
    int done;
    mico_host_stage_begin(&p->out, total);
    if (p->groups == p->in_c && p->groups == p->out_c) {
        done = (p->out_w < MICO_HOST_DW_ROW && mico_host_dw_hwc(p, in, out)) ||
               mico_host_dw(p, in, out);
    } else {
        done = mico_host_conv(p, in, out);
    }
    if (done) {
        mico_host_stage_end(&p->out, out, total);
        return;
    }
    mico_host_staged = 0;
    mico_qconv2d(p, in, out); /* too large for the scratch arrays: the portable paths */
}

/* Linear layers: each input row unpacked once (zero-padded to kp), 4 output features at a
 * time against it; a row's sums are requantized and packed together. */
MICO_HOST_CLONES static void mico_host_linear(const MicoLinear *p, const void *in, void *out)
{
    const int32_t k_n = p->in_features, n_out = p->out_features, kp = mico_host_kpad(k_n);
    const int s8 = p->w_bits == 8;
    int16_t *x = mico_host_patch, *wb = mico_host_w;
    int32_t *acc = mico_host_acc;
    int32_t r, o, c, k;
    if (p->in_fmt.bits > 8 || kp > MICO_HOST_PATCH || 4 * kp > MICO_HOST_W ||
        n_out + 4 > MICO_HOST_ACC) {
        mico_qlinear(p, in, out);
        return;
    }
    for (r = 0; r < p->rows; r++) {
        mico_host_unpack(in, (size_t)r * (size_t)k_n, k_n, p->in_fmt, x);
        for (k = k_n; k < kp; k++) {
            x[k] = 0;
        }
        for (o = 0; o < n_out; o += 4) {
            const int32_t n4 = n_out - o < 4 ? n_out - o : 4;
            int32_t s[8];
            if (s8 && n4 == 4) {
                mico_host_mk41_s8((const int8_t *)(const void *)p->weight + (size_t)o * (size_t)k_n,
                                  (size_t)k_n, x, k_n, s);
            } else {
                for (c = 0; c < 4; c++) {
                    int16_t *row = wb + (size_t)c * (size_t)kp;
                    k = 0;
                    if (c < n4) {
                        mico_host_unpack_w(p->weight, (size_t)(o + c) * (size_t)k_n, k_n,
                                           p->w_bits, row);
                        k = k_n;
                    }
                    for (; k < kp; k++) {
                        row[k] = 0;
                    }
                }
                mico_host_mk41(wb, x, kp, s);
            }
            for (c = 0; c < n4; c++) {
                acc[o + c] = s[c] + p->bias[o + c];
            }
        }
        for (o = 0; o < n_out; o++) {
            const MicoRq q = mico_rq(&p->out, o);
            acc[o] = mico_rq_apply(&q, acc[o]);
        }
        mico_host_pack(out, (size_t)r * (size_t)n_out, acc, n_out, p->out.fmt);
    }
}
/* Elementwise add (residual connections): mico_add's arithmetic, v = a m_a + b m_b in 64-bit
 * integers, rounded half away from zero by 2^shift and clamped, over runs of unpacked codes in
 * a loop the compiler vectorises. */
MICO_HOST_CLONES static void mico_host_add(const MicoAdd *p, const void *a, const void *b,
                                           void *out)
{
    const int binary = p->fmt.bits == 1 && p->fmt.is_signed;
    const int64_t m_a = p->m_a, m_b = p->m_b, lo = p->lo, hi = p->hi;
    const int32_t shift = p->shift;
    const int64_t rnd = (int64_t)1 << (shift - 1);
    int32_t *va = mico_host_acc, *vb = mico_host_acc + MICO_HOST_ACC;
    int32_t i0, j;
    if (binary) {
        mico_add(p, a, b, out);
        return;
    }
    for (i0 = 0; i0 < p->n; i0 += MICO_HOST_ACC) {
        const int32_t n = p->n - i0 < MICO_HOST_ACC ? p->n - i0 : MICO_HOST_ACC;
        mico_unpack_i32(a, (size_t)i0, n, p->a_fmt, va);
        mico_unpack_i32(b, (size_t)i0, n, p->b_fmt, vb);
        for (j = 0; j < n; j++) {
            const int64_t v = (int64_t)va[j] * m_a + (int64_t)vb[j] * m_b;
            const int64_t mag = ((v < 0 ? -v : v) + rnd) >> shift;
            const int64_t r = v < 0 ? -mag : mag;
            va[j] = (int32_t)(r < lo ? lo : r > hi ? hi : r);
        }
        mico_host_pack(out, (size_t)i0, va, n, p->fmt);
    }
}
/* The entry points (the versioned functions stay static: one symbol each for the linker). */
void mico_qlinear_host(const MicoLinear *p, const void *in, void *out)
{
    mico_host_linear(p, in, out);
}

void mico_add_host(const MicoAdd *p, const void *a, const void *b, void *out)
{
    mico_host_add(p, a, b, out);
}
#endif /* MICO_HOST_KERNELS */
