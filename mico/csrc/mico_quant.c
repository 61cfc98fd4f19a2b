/* Input quantization: mico.quant.arithmetic.quantize, in float32, to packed codes.
 *
 * mico_quantize_f32 (a scale known only at run time): v = x * inv_scale is the one float32
 * operation; rounding it half away from zero and clamping are done exactly on v's bit pattern
 * with integer operations (on targets without an FPU each float operation is a library call).
 *
 * mico_quantize_f32_table (a scale known when the program is generated): no float operation
 * at all. The code is a non-decreasing function of x, so it is qmin plus the number of
 * thresholds below x (mico.quant.thresholds computes them exactly, with the Python reference
 * as the oracle): x's bits become an int32 key ordered like the floats, and a branch-free
 * binary search of bits steps counts the table entries below the key.
 *
 * mico_quantize_f32_exact_b<bits> (a scale known ahead, codes of 2..8 bits; programs use it
 * from 4 bits on): no float operation and no table either. The float32 product's rounding to
 * 24 bits and the rounding half away from zero are done together on the high word of one
 * 32x32 multiply (mico.quant.exact_input derives the constants and shows why it is exact).
 *
 * Codes go out in runs of MICO_QUANT_RUN through mico_pack; the kernels of one width,
 * mico_quantize_f32_table_b<bits> and mico_quantize_f32_exact_b<bits> (what programs call),
 * write their fields straight. */
#include <string.h>

#include "mico_nn.h"

#define MICO_QUANT_RUN 64

/* v >= 0.0f (true for -0.0, false for NaN) */
static int mico_nonnegative(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return (u & 0x7fffffffu) > 0x7f800000u ? 0 : !(u >> 31) || !(u & 0x7fffffffu);
}

/* v rounded half away from zero, clamped to [qmin, qmax] */
static int32_t mico_round_clamp(float v, int32_t qmin, int32_t qmax)
{
    uint32_t u, e, mant, mag;
    int32_t r;
    memcpy(&u, &v, sizeof u);
    e = (u >> 23) & 0xffu;
    mant = (u & 0x7fffffu) | 0x800000u;
    if (e == 0xffu && (u & 0x7fffffu)) { /* NaN: the clamps of the float code see r = NaN */
        return 0 < qmin ? qmin : (0 > qmax ? qmax : 0);
    }
    if (e < 126u) { /* |v| < 0.5 */
        mag = 0;
    } else if (e < 150u) { /* |v| = mant * 2^(e - 150), a fraction below 1 ulp: round it */
        mag = (mant + (1u << (149u - e))) >> (150u - e);
    } else if (e < 158u) { /* an integer below 2^31 */
        mag = mant << (e - 150u);
    } else { /* |v| >= 2^31 or infinite: beyond every int32 clamp */
        mag = 0x80000000u;
    }
    if (u >> 31) {
        r = mag >= 0x80000000u ? INT32_MIN : -(int32_t)mag;
    } else {
        r = mag >= 0x80000000u ? INT32_MAX : (int32_t)mag;
    }
    if (r < qmin) {
        r = qmin;
    }
    if (r > qmax) {
        r = qmax;
    }
    return r;
}

#if defined(__GNUC__)
#define MICO_QINLINE __attribute__((always_inline)) inline
#else
#define MICO_QINLINE inline
#endif

/* The int32 whose order is the order of the floats (-0.0 -> -1, +0.0 -> 0): the bits as
 * int32, with the 31 magnitude bits of negative floats flipped. Read through a union (one
 * load on rv32imac, where memcpy became four byte loads). +-Inf get qmax / qmin; NaN never
 * gets here (the run function refuses it first, mico_first_nonfinite), it would get qmax or
 * qmin by its sign. */
static MICO_QINLINE int32_t mico_f32_key(const float *x)
{
    union {
        float f;
        int32_t i;
    } bits;
    bits.f = *x;
    return bits.i ^ (int32_t)((uint32_t)(bits.i >> 31) >> 1);
}

/* One step of the search: skip h entries when the last of them lies below the key. */
#define MICO_QSTEP(h) p += (p[(h)-1] < key) * (h)

/* #{j : t[j] < key} for a sorted table of 2^steps - 1 entries (steps 1..8): 4 instructions
 * a step on rv32imac (lw, slt, sll, add), the switch folded away when steps is a constant. */
static MICO_QINLINE int32_t mico_table_rank(const int32_t *t, int32_t key, int32_t steps)
{
    const int32_t *p = t;
    switch (steps) {
    case 8:
        MICO_QSTEP(128);
        /* fall through */
    case 7:
        MICO_QSTEP(64);
        /* fall through */
    case 6:
        MICO_QSTEP(32);
        /* fall through */
    case 5:
        MICO_QSTEP(16);
        /* fall through */
    case 4:
        MICO_QSTEP(8);
        /* fall through */
    case 3:
        MICO_QSTEP(4);
        /* fall through */
    case 2:
        MICO_QSTEP(2);
        /* fall through */
    default:
        MICO_QSTEP(1);
    }
    return (int32_t)(p - t);
}

void mico_quantize_f32_table(const float *x, void *codes, size_t n, const int32_t *t,
                             MicoFmt fmt, int32_t qmin)
{
    const int32_t binary = fmt.is_signed && fmt.bits == 1, steps = fmt.bits;
    int32_t q[MICO_QUANT_RUN];
    size_t i0;
    for (i0 = 0; i0 < n; i0 += MICO_QUANT_RUN) {
        const int32_t m = n - i0 < MICO_QUANT_RUN ? (int32_t)(n - i0) : MICO_QUANT_RUN;
        int32_t j;
        for (j = 0; j < m; j++) {
            q[j] = qmin + (mico_table_rank(t, mico_f32_key(&x[i0 + (size_t)j]), steps) << binary);
        }
        mico_pack(codes, i0, q, m, fmt);
    }
}

/* The rank (code - qmin) one kernel gives the float at x; ctx holds what the kernel knows of the
 * scale, b is the code width (a constant once inlined). The packers below take one, so the
 * table and the exact kernels share their field writing. */
typedef uint32_t (*MicoQRank)(const float *x, const void *ctx, int32_t b);

/* The table's rank: the entries of the threshold table ctx below x's key. */
static MICO_QINLINE uint32_t mico_qtable_rank(const float *x, const void *ctx, int32_t b)
{
    return (uint32_t)mico_table_rank((const int32_t *)ctx, mico_f32_key(x), b);
}

/* The fields of b = 1, 2, 4 or 8 bits written straight into whole bytes of 8 / b fields, the
 * rank inlined for b (mico_quantize_f32_table takes any width, one code at a time). A field
 * is the rank plus base (masked to b bits): binary fields are the rank itself (0: -1, 1: +1),
 * others qmin + zero + rank (two's complement, or code + zero). A last partial byte keeps its
 * bits past the tensor, as mico_pack does. */
static MICO_QINLINE void mico_qfield_bytes(const float *x, uint8_t *out, size_t n,
                                           MicoQRank rank, const void *ctx, uint32_t base,
                                           const int32_t b)
{
    const int32_t per = 8 / b;
    const uint32_t mask = (1u << b) - 1u;
    size_t i = 0;
    int32_t k;
    uint32_t acc;
    for (; i + (size_t)per <= n; i += (size_t)per) {
        acc = 0;
        MICO_UNROLL
        for (k = 0; k < per; k++) {
            acc |= ((rank(&x[i + (size_t)k], ctx, b) + base) & mask) << (k * b);
        }
        *out++ = (uint8_t)acc;
    }
    if (i < n) {
        const int32_t rest = (int32_t)(n - i);
        acc = 0;
        for (k = 0; k < rest; k++) {
            acc |= ((rank(&x[i + (size_t)k], ctx, b) + base) & mask) << (k * b);
        }
        *out = (uint8_t)((*out & (0xffu << (rest * b)) & 0xffu) | acc);
    }
}

/* The same for b = 3, 5, 6 or 7 bits, the fields streamed through a bit buffer. */
static MICO_QINLINE void mico_qfield_stream(const float *x, uint8_t *out, size_t n,
                                            MicoQRank rank, const void *ctx, uint32_t base,
                                            const int32_t b)
{
    const uint32_t mask = (1u << b) - 1u;
    uint32_t acc = 0, used = 0;
    size_t i;
    for (i = 0; i < n; i++) {
        acc |= ((rank(&x[i], ctx, b) + base) & mask) << used;
        used += (uint32_t)b;
        if (used >= 8u) {
            *out++ = (uint8_t)acc;
            acc >>= 8;
            used -= 8u;
        }
    }
    if (used) {
        *out = (uint8_t)((*out & (0xffu << used) & 0xffu) | acc);
    }
}

/* Whole bytes of fields for 1, 2, 4 and 8 bits, the bit buffer for the others. */
static MICO_QINLINE void mico_qfields(const float *x, uint8_t *out, size_t n, MicoQRank rank,
                                      const void *ctx, uint32_t base, const int32_t b)
{
    if (8 % b == 0) {
        mico_qfield_bytes(x, out, n, rank, ctx, base, b);
    } else {
        mico_qfield_stream(x, out, n, rank, ctx, base, b);
    }
}

#ifndef MICO_HOST_KERNELS
#define MICO_QTABLE(b)                                                                       \
    void mico_quantize_f32_table_b##b(const float *x, void *codes, size_t n, const int32_t *t, \
                                      MicoFmt fmt, int32_t qmin)                             \
    {                                                                                        \
        const uint32_t base = fmt.is_signed && fmt.bits == 1 ? 0u : (uint32_t)(qmin + fmt.zero); \
        mico_qfields(x, (uint8_t *)codes, n, mico_qtable_rank, t, base, b);                  \
    }
#else
/* Host builds (make TARGET=host): the ranks of a run of MICO_QHOST_RUN inputs in one loop the
 * compiler vectorises (on x86-64 also built for AVX2, whose per-lane shifts it needs, and
 * chosen at start-up, as mico_host_gemm.c does), then their fields written: the same codes. */
#define MICO_QHOST_RUN 256 /* a multiple of 8: every run but the last ends on a byte */
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) &&                          \
    !defined(MICO_HOST_NO_CLONES) && !defined(__SANITIZE_ADDRESS__) &&                        \
    (!defined(__clang__) || __clang_major__ >= 14)
#define MICO_QCLONES __attribute__((target_clones("avx2", "default")))
#else
#define MICO_QCLONES
#endif

/* The table's ranks of n inputs (#{j < entries : t[j] < key}): the keys first, then one pass
 * over them per threshold (a compare and an add in each lane). */
MICO_QCLONES static void mico_qtable_ranks(const float *x, uint32_t *r, int32_t n,
                                           const int32_t *t, int32_t entries)
{
    int32_t key[MICO_QHOST_RUN];
    int32_t i, j;
    for (i = 0; i < n; i++) {
        key[i] = mico_f32_key(&x[i]);
        r[i] = 0;
    }
    for (j = 0; j < entries; j++) {
        const int32_t tj = t[j];
        for (i = 0; i < n; i++) {
            r[i] += (uint32_t)(tj < key[i]);
        }
    }
}

/* The fields rank + base of m ranks from out's first bit (whole bytes of 8 / b fields, or a
 * bit buffer for 3, 5, 6, 7 bits); a last partial byte keeps its bits past the tensor. */
static void mico_qhost_fields(const uint32_t *r, uint8_t *out, int32_t m, uint32_t base,
                              int32_t b)
{
    const uint32_t mask = (1u << b) - 1u;
    uint32_t acc = 0, used = 0;
    int32_t i, k;
    if (b == 8) {
        for (i = 0; i < m; i++) {
            out[i] = (uint8_t)(r[i] + base);
        }
        return;
    }
    if (8 % b == 0) {
        const int32_t per = 8 / b;
        for (i = 0; i + per <= m; i += per) {
            acc = 0;
            for (k = 0; k < per; k++) {
                acc |= ((r[i + k] + base) & mask) << (k * b);
            }
            *out++ = (uint8_t)acc;
        }
        acc = 0;
        for (k = 0; i + k < m; k++) {
            acc |= ((r[i + k] + base) & mask) << used;
            used += (uint32_t)b;
        }
    } else {
        for (i = 0; i < m; i++) {
            acc |= ((r[i] + base) & mask) << used;
            used += (uint32_t)b;
            if (used >= 8u) {
                *out++ = (uint8_t)acc;
                acc >>= 8;
                used -= 8u;
            }
        }
    }
    if (used) {
        *out = (uint8_t)((*out & (0xffu << used) & 0xffu) | acc);
    }
}

#define MICO_QTABLE(b)                                                                       \
    void mico_quantize_f32_table_b##b(const float *x, void *codes, size_t n, const int32_t *t, \
                                      MicoFmt fmt, int32_t qmin)                             \
    {                                                                                        \
        const uint32_t base = fmt.is_signed && fmt.bits == 1 ? 0u : (uint32_t)(qmin + fmt.zero); \
        uint32_t r[MICO_QHOST_RUN];                                                          \
        size_t i0;                                                                           \
        if ((b) > 4) { /* 31 and more thresholds: the binary search */                       \
            mico_qfields(x, (uint8_t *)codes, n, mico_qtable_rank, t, base, b);              \
            return;                                                                          \
        }                                                                                    \
        for (i0 = 0; i0 < n; i0 += MICO_QHOST_RUN) {                                         \
            const int32_t m = n - i0 < MICO_QHOST_RUN ? (int32_t)(n - i0) : MICO_QHOST_RUN;  \
            mico_qtable_ranks(x + i0, r, m, t, (1 << (b)) - 1);                              \
            mico_qhost_fields(r, (uint8_t *)codes + i0 * (size_t)(b) / 8u, m, base, b);      \
        }                                                                                    \
    }
#endif

MICO_QTABLE(1)
MICO_QTABLE(2)
MICO_QTABLE(3)
MICO_QTABLE(4)
MICO_QTABLE(5)
MICO_QTABLE(6)
MICO_QTABLE(7)
MICO_QTABLE(8)

/* The exact kernels' rank: x * inv_scale as float32 rounds it, rounded half away from zero
 * and clamped, in integers (mico.quant.exact_input derives the constants and the proof).
 * With x = mx * 2^(ex - 150) (mx: 24 bits, hidden bit included) and the product's exact
 * significand P = mx * mi in [2^46, 2^48), the float32 product RNE24(P) * 2^E, rounded half
 * away from zero, is floor((P + 2^(22 + n) + 2^(s - 1)) / 2^s) with n = [P >= 2^47] and
 * s = -E: ties of the 24-bit rounding at k + 0.5 - ulp / 2 go up to the even k + 0.5, so the
 * integer rounding sees v plus half an ulp. mulhu of mx << 8 and m = mi << 2 gives
 * h = floor(P / 2^22); the 2^(22+n) and 2^(s-1) terms are whole multiples of 2^22 there,
 * so the product's low word never matters. The shift is q->k - ex (clamped to [0, 31]: 0 is
 * far above every code, 31 far below 0.5). Exponent field 0 (zeros, subnormals) reads as
 * mx = 2^23 + f, a value below the smallest normal, which the generator checked rounds to 0. */
static MICO_QINLINE uint32_t mico_qexact_rank(const float *x, const void *ctx, int32_t b)
{
    const MicoQuantExact *q = (const MicoQuantExact *)ctx;
    union {
        float f;
        uint32_t u;
    } bits;
    uint32_t h, r;
    int32_t sh, sg, t;
    (void)b;
    bits.f = *x;
    h = (uint32_t)(((uint64_t)((bits.u << 8) | 0x80000000u) * q->m) >> 32);
    h += (h >> 25) + 1u; /* + 2^(22 + n) / 2^22 */
    sh = q->k - (int32_t)((bits.u << 1) >> 24);
    if ((uint32_t)sh > 31u) {
        sh = sh < 0 ? 0 : 31;
    }
    r = ((h >> sh) + 1u) >> 1; /* half away from zero of |v| (shift by sh + 1 overall) */
    sg = (int32_t)bits.u >> 31;
    t = ((int32_t)r ^ sg) - sg - q->qmin; /* the code minus qmin */
    if ((uint32_t)t > q->span) {
        t = t < 0 ? 0 : (int32_t)q->span;
    }
    return (uint32_t)t;
}

#ifndef MICO_HOST_KERNELS
#define MICO_QEXACT(b)                                                                       \
    void mico_quantize_f32_exact_b##b(const float *x, void *codes, size_t n,                 \
                                      const MicoQuantExact *q, MicoFmt fmt)                  \
    {                                                                                        \
        const MicoQuantExact p = *q; /* in registers: byte stores may alias *q */            \
        mico_qfields(x, (uint8_t *)codes, n, mico_qexact_rank, &p,                           \
                     (uint32_t)(p.qmin + fmt.zero), b);                                      \
    }
#else
MICO_QCLONES static void mico_qexact_ranks(const float *x, uint32_t *r, int32_t n,
                                           const MicoQuantExact *q)
{
    const MicoQuantExact p = *q;
    int32_t i;
    for (i = 0; i < n; i++) {
        r[i] = mico_qexact_rank(&x[i], &p, 0);
    }
}

#define MICO_QEXACT(b)                                                                       \
    void mico_quantize_f32_exact_b##b(const float *x, void *codes, size_t n,                 \
                                      const MicoQuantExact *q, MicoFmt fmt)                  \
    {                                                                                        \
        uint32_t r[MICO_QHOST_RUN];                                                          \
        const uint32_t base = (uint32_t)(q->qmin + fmt.zero);                                \
        size_t i0;                                                                           \
        for (i0 = 0; i0 < n; i0 += MICO_QHOST_RUN) {                                         \
            const int32_t m = n - i0 < MICO_QHOST_RUN ? (int32_t)(n - i0) : MICO_QHOST_RUN;  \
            mico_qexact_ranks(x + i0, r, m, q);                                              \
            mico_qhost_fields(r, (uint8_t *)codes + i0 * (size_t)(b) / 8u, m, base, b);      \
        }                                                                                    \
    }
#endif

MICO_QEXACT(2)
MICO_QEXACT(3)
MICO_QEXACT(4)
MICO_QEXACT(5)
MICO_QEXACT(6)
MICO_QEXACT(7)
MICO_QEXACT(8)

void mico_quantize_f32(const float *x, void *codes, size_t n, float inv_scale, MicoFmt fmt,
                       int32_t qmin, int32_t qmax)
{
    const int binary = fmt.is_signed && fmt.bits == 1;
    int32_t q[MICO_QUANT_RUN];
    size_t i0;
    for (i0 = 0; i0 < n; i0 += MICO_QUANT_RUN) {
        const int32_t m = n - i0 < MICO_QUANT_RUN ? (int32_t)(n - i0) : MICO_QUANT_RUN;
        int32_t j;
        for (j = 0; j < m; j++) {
            const float v = x[i0 + (size_t)j] * inv_scale;
            q[j] = binary ? (mico_nonnegative(v) ? 1 : -1) : mico_round_clamp(v, qmin, qmax);
        }
        mico_pack(codes, i0, q, m, fmt);
    }
}
