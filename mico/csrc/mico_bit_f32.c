/*
 * mico_bit_f32.c - quantized layers of the dynamic execution mode: run-time quantization of a
 * float32 input, int32 accumulation of code products with packed weights, float32 output
 *     y = (float)acc * (s_a * w_scale[c]) + bias[c]
 * (three separate float32 operations, in this order). See mico_f32.h for the contract.
 *
 * Weights are signed codes in one little-endian bit stream (code i at bits [i*b, (i+1)*b),
 * LSB first; b-bit two's complement, or 0 / 1 for binary -1 / +1), decoded on the fly, never
 * unpacked into a buffer:
 *  - linear: one dot product per output over consecutive codes; 8-bit codes are plain int8
 *    bytes, 4/2/1-bit codes are decoded a byte at a time, the other widths (3, 5, 6, 7)
 *    through a 16-bit window;
 *  - conv: weight-stationary over a tile of output columns (MICO_BIT_CONV_TILE int32
 *    accumulators on the stack): each weight code is decoded once per output row and tile and
 *    multiplied into every column of the tile; zero codes (ternary) are skipped.
 * The accumulators are int32: like mico's other integer kernels, a window must not be able to
 * overflow them (|acc| <= cin/groups * k_h * k_w * 127 * 255).
 */
#include "mico_f32.h"

#include <float.h>
#include <math.h>

int mico_dyn_overflow = 0;

/* The output formula is bit-exact only without fused multiply-add: keep contraction off even
 * when the build enables it (-ffp-contract=fast is GCC's default outside ISO C modes). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* ---------------------------------------------------------------- dynamic quantization */

/* round_half_away(v) clamped to [qmin, qmax] (qmin <= 0 <= qmax), as in
 * mico.quant.arithmetic: f = floor(|v|), +1 when |v| - f >= 0.5, sign restored. For |v| < 256
 * the truncation (int32_t)|v| is floor(|v|) exactly; larger magnitudes saturate anyway. */
static int32_t round_clamp(float v, int32_t qmin, int32_t qmax)
{
    float a = fabsf(v);
    int32_t t;
    if (!(a < 256.0f)) {
        if (v != v) {
            return 0; /* NaN has no code; 0 is in every range */
        }
        return v < 0.0f ? qmin : qmax;
    }
    t = (int32_t)a;
    if (a - (float)t >= 0.5f) {
        t += 1;
    }
    if (v < 0.0f) {
        t = -t;
    }
    if (t < qmin) {
        t = qmin;
    }
    if (t > qmax) {
        t = qmax;
    }
    return t;
}

/* Asymmetric codes (mico.quant.dynamic_asymmetric): fields code + zero as uint8_t. */
static float dyn_quantize_asymmetric(const MicoDynQuant *q, const float *x, uint8_t *fields,
                                     int32_t n, int32_t *zero)
{
    float lo = 0.0f, hi = 0.0f, scale, inv; /* NaN propagates, as in torch's amin / amax */
    int32_t i, z;
    for (i = 0; i < n; i++) {
        const float a = x[i];
        if (a < lo || a != a) {
            lo = lo != lo ? lo : a;
        }
        if (a > hi || a != a) {
            hi = hi != hi ? hi : a;
        }
    }
    scale = (hi - lo) / (float)q->qmax;
    z = 0;
    if (!(scale > 0.0f) || 1.0f / scale > FLT_MAX) {
        scale = 1.0f; /* zero, NaN or denormal: scale 1, zero point 0 */
    } else {
        z = round_clamp(-lo * (1.0f / scale), 0, q->qmax);
    }
    if (scale > FLT_MAX) {
        mico_dyn_overflow = 1;
    }
    inv = 1.0f / scale;
    for (i = 0; i < n; i++) {
        fields[i] = (uint8_t)(round_clamp(x[i] * inv, -z, q->qmax - z) + z);
    }
    *zero = z;
    return scale;
}

float mico_dyn_quantize(const MicoDynQuant *q, const float *x, int8_t *codes, int32_t n)
{
    int32_t zero;
    return mico_dyn_quantize_zero(q, x, codes, n, &zero);
}

float mico_dyn_quantize_zero(const MicoDynQuant *q, const float *x, int8_t *codes, int32_t n,
                             int32_t *zero)
{
    float scale, inv;
    int32_t i;
    *zero = 0;
    if (q->asymmetric) {
        return dyn_quantize_asymmetric(q, x, (uint8_t *)codes, n, zero);
    }
    if (q->absmean) {
        double sum = 0.0;
        for (i = 0; i < n; i++) {
            sum += fabs((double)x[i]);
        }
        scale = (float)(sum / (double)n);
    } else {
        float amax = 0.0f; /* NaN propagates, as in torch's amax (and then becomes scale 1) */
        if (q->is_signed) {
            for (i = 0; i < n; i++) {
                float a = fabsf(x[i]);
                if (a > amax || a != a) {
                    amax = a;
                }
            }
        } else {
            for (i = 0; i < n; i++) {
                float a = x[i];
                if (a > amax || a != a) {
                    amax = a;
                }
            }
        }
        scale = amax / (float)q->qmax;
    }
    /* zero, NaN, or so tiny (denormal) that 1/scale overflows: scale 1, as dynamic_scale */
    if (!(scale > 0.0f) || 1.0f / scale > FLT_MAX) {
        scale = 1.0f;
    }
    if (scale > FLT_MAX) {
        mico_dyn_overflow = 1;
    }
    inv = 1.0f / scale;
    if (q->is_signed && q->bits == 1) {
        for (i = 0; i < n; i++) {
            codes[i] = (int8_t)(x[i] * inv >= 0.0f ? 1 : -1);
        }
    } else if (q->is_signed) {
        for (i = 0; i < n; i++) {
            codes[i] = (int8_t)round_clamp(x[i] * inv, q->qmin, q->qmax);
        }
    } else {
        uint8_t *u = (uint8_t *)codes; /* unsigned codes span [0, 255]: stored as uint8_t */
        for (i = 0; i < n; i++) {
            u[i] = (uint8_t)round_clamp(x[i] * inv, q->qmin, q->qmax);
        }
    }
    return scale;
}

/* ---------------------------------------------------------------- packed dot products */

/* Codes of a b-bit field f: two's complement (b >= 2) or binary 0 / 1 -> -1 / +1. */
#define MICO_W4(f) (((int32_t)(f) ^ 8) - 8)
#define MICO_W2(f) (((int32_t)(f) ^ 2) - 2)
#define MICO_W1(f) (2 * (int32_t)(f) - 1)

/* acc += sum over j < n of W[idx + j] * a[j], weights of B in {1, 2, 4} bits: a partial first
 * byte, then whole bytes (8 / B codes each), then a partial last byte. Only bytes that hold one
 * of the codes are read. Expects `w, idx, a, n, acc, j` in scope. */
#define MICO_SUBBYTE_DOT(B, DECODE)                                                    \
    do {                                                                               \
        const uint32_t per_ = 8u / (B), mask_ = (1u << (B)) - 1u;                      \
        uint32_t bit_ = idx * (B), sh_ = bit_ & 7u, byte_, k_;                         \
        const uint8_t *wp_ = w + (bit_ >> 3);                                          \
        j = 0;                                                                         \
        if (sh_ != 0u) {                                                               \
            byte_ = *wp_++;                                                            \
            for (; sh_ < 8u && j < n; sh_ += (B), j++) {                               \
                acc += DECODE((byte_ >> sh_) & mask_) * (int32_t)a[j];                 \
            }                                                                          \
        }                                                                              \
        for (; n - j >= (int32_t)per_; j += (int32_t)per_) {                           \
            byte_ = *wp_++;                                                            \
            for (k_ = 0; k_ < per_; k_++) {                                            \
                acc += DECODE((byte_ >> (k_ * (B))) & mask_) * (int32_t)a[j + (int32_t)k_]; \
            }                                                                          \
        }                                                                              \
        if (j < n) {                                                                   \
            byte_ = *wp_;                                                              \
            for (sh_ = 0; j < n; sh_ += (B), j++) {                                    \
                acc += DECODE((byte_ >> sh_) & mask_) * (int32_t)a[j];                 \
            }                                                                          \
        }                                                                              \
    } while (0)

/* sum over j < n of W[idx + j] * a[j] for weight codes of `bits` bits and activation codes of
 * type ACT_T (int8_t or uint8_t). */
#define MICO_DEFINE_DOT(NAME, ACT_T)                                                    \
    static int32_t NAME(const uint8_t *w, uint32_t idx, int32_t bits, const ACT_T *a,    \
                        int32_t n)                                                       \
    {                                                                                    \
        int32_t acc = 0, j;                                                              \
        if (n <= 0) {                                                                    \
            return 0;                                                                    \
        }                                                                                \
        switch (bits) {                                                                  \
        case 8: {                                                                        \
            const int8_t *wp = (const int8_t *)(const void *)(w + idx);                  \
            for (j = 0; j < n; j++) {                                                    \
                acc += (int32_t)wp[j] * (int32_t)a[j];                                   \
            }                                                                            \
            break;                                                                       \
        }                                                                                \
        case 4:                                                                          \
            MICO_SUBBYTE_DOT(4u, MICO_W4);                                               \
            break;                                                                       \
        case 2:                                                                          \
            MICO_SUBBYTE_DOT(2u, MICO_W2);                                               \
            break;                                                                       \
        case 1:                                                                          \
            MICO_SUBBYTE_DOT(1u, MICO_W1);                                               \
            break;                                                                       \
        default: { /* 3, 5, 6, 7 bits: a bit buffer refilled a byte at a time */        \
            const uint32_t b = (uint32_t)bits, mask = (1u << b) - 1u;                    \
            const int32_t half = (int32_t)(1u << (b - 1u));                              \
            const uint8_t *wp = w + ((idx * b) >> 3);                                    \
            uint32_t have = 8u - ((idx * b) & 7u), buf = (uint32_t)*wp++ >> (8u - have); \
            for (j = 0; j < n; j++) {                                                    \
                if (have < b) {                                                          \
                    buf |= (uint32_t)*wp++ << have;                                      \
                    have += 8u;                                                          \
                }                                                                        \
                acc += (((int32_t)(buf & mask) ^ half) - half) * (int32_t)a[j];          \
                buf >>= b;                                                               \
                have -= b;                                                               \
            }                                                                            \
            break;                                                                       \
        }                                                                                \
        }                                                                                \
        return acc;                                                                      \
    }

MICO_DEFINE_DOT(dot_s8, int8_t)
MICO_DEFINE_DOT(dot_u8, uint8_t)

/* Dot product of n packed weights from code `idx` on with n consecutive activation codes from
 * element `off` of the code buffer (int8_t when signed, else uint8_t). */
static int32_t bit_dot(const uint8_t *w, uint32_t idx, int32_t bits, const int8_t *codes,
                       int32_t a_signed, ptrdiff_t off, int32_t n)
{
    if (a_signed) {
        return dot_s8(w, idx, bits, codes + off, n);
    }
    return dot_u8(w, idx, bits, (const uint8_t *)codes + off, n);
}

/* y = (float)acc * (s_a * w_scale) + bias: three float32 operations, no contraction. */
static float bit_output(int32_t acc, float mul, const float *bias, int32_t c)
{
    float v = (float)acc * mul;
    if (bias) {
        v = v + bias[c];
    }
    return v;
}

/* ---------------------------------------------------------------- layers */

/* Weight code `idx` of a packed stream (one code, for the weight-stationary conv loop): always
 * inlined, as a call per tap costs the dynamic DS-CNN 14 % more rv32 instructions. */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline int32_t weight_code(const uint8_t *w, uint32_t idx, int32_t bits)
{
    switch (bits) {
    case 8:
        return (int32_t)((const int8_t *)(const void *)w)[idx];
    case 4:
        return MICO_W4((w[idx >> 1] >> ((idx & 1u) << 2)) & 15u);
    case 2:
        return MICO_W2((w[idx >> 2] >> ((idx & 3u) << 1)) & 3u);
    case 1:
        return MICO_W1((w[idx >> 3] >> (idx & 7u)) & 1u);
    default: {
        const uint32_t b = (uint32_t)bits, bit = idx * b, off = bit & 7u;
        const int32_t half = (int32_t)(1u << (b - 1u));
        uint32_t word = w[bit >> 3];
        if (off + b > 8u) {
            word |= (uint32_t)w[(bit >> 3) + 1u] << 8;
        }
        return ((int32_t)((word >> off) & ((1u << b) - 1u)) ^ half) - half;
    }
    }
}

/* The sum of n weight codes from code idx on (the zero-point correction of a dot product). */
static int32_t weight_sum(const uint8_t *w, uint32_t idx, int32_t bits, int32_t n)
{
    int32_t i, sum = 0;
    for (i = 0; i < n; i++) {
        sum += weight_code(w, idx + (uint32_t)i, bits);
    }
    return sum;
}

/* Output columns accumulated together: each decoded weight is applied to up to this many
 * outputs (int32 accumulators on the stack: 4 * MICO_BIT_CONV_TILE bytes). */
#ifndef MICO_BIT_CONV_TILE
#define MICO_BIT_CONV_TILE 32
#endif

/* Weight-stationary convolution: for each output channel, output row and tile of up to
 * MICO_BIT_CONV_TILE output columns, every weight code is decoded once and multiplied into
 * all the tile's columns whose input cell lies inside the image (padding contributes 0). */
void mico_bit_conv2d_f32(const MicoBitConv2dF *p, const float *x, float *y, int8_t *codes)
{
    const int32_t plane = p->in_h * p->in_w, ksize = p->k_h * p->k_w;
    const int32_t cig = p->in_c / p->groups, cog = p->out_c / p->groups;
    const int32_t sw = p->stride_w;
    int32_t z; /* asymmetric: the zero point, subtracted from each unsigned field */
    const float s_a = mico_dyn_quantize_zero(&p->act, x, codes, p->in_c * plane, &z);
    const uint8_t *ucodes = (const uint8_t *)codes;
    int32_t acc[MICO_BIT_CONV_TILE];
    int32_t oc, oh, ow0, ic, kh, kw, j;
    for (oc = 0; oc < p->out_c; oc++) {
        const float mul = s_a * p->w_scale[p->w_per_channel ? oc : 0];
        const ptrdiff_t g_off = (ptrdiff_t)(oc / cog) * cig * plane;
        const uint32_t w_oc = (uint32_t)oc * (uint32_t)cig * (uint32_t)ksize;
        float *y_oc = y + (ptrdiff_t)oc * p->out_h * p->out_w;
        for (oh = 0; oh < p->out_h; oh++) {
            const int32_t h0 = oh * p->stride_h - p->pad_h;
            int32_t kh0, kh1;
            mico_conv_taps(h0, p->k_h, p->dil_h, p->in_h, &kh0, &kh1);
            for (ow0 = 0; ow0 < p->out_w; ow0 += MICO_BIT_CONV_TILE) {
                const int32_t nt = p->out_w - ow0 < MICO_BIT_CONV_TILE ? p->out_w - ow0
                                                                        : MICO_BIT_CONV_TILE;
                for (j = 0; j < nt; j++) {
                    acc[j] = 0;
                }
                for (ic = 0; ic < cig; ic++) {
                    const ptrdiff_t c_off = g_off + (ptrdiff_t)ic * plane;
                    const uint32_t w_ic = w_oc + (uint32_t)ic * (uint32_t)ksize;
                    for (kh = kh0; kh < kh1; kh++) {
                        const ptrdiff_t r_off = c_off + (ptrdiff_t)(h0 + kh * p->dil_h) * p->in_w;
                        const uint32_t w_kh = w_ic + (uint32_t)(kh * p->k_w);
                        for (kw = 0; kw < p->k_w; kw++) {
                            /* column ow reads input column ow * sw + off */
                            const int32_t off = kw * p->dil_w - p->pad_w;
                            const int32_t lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
                            const int32_t last = p->in_w - 1 - off;
                            int32_t j0 = lo - ow0, j1, wv;
                            ptrdiff_t a0;
                            if (last < 0) {
                                continue;
                            }
                            j1 = last / sw + 1 - ow0;
                            j0 = j0 < 0 ? 0 : j0;
                            j1 = j1 > nt ? nt : j1;
                            if (j0 >= j1) {
                                continue;
                            }
                            wv = weight_code(p->weight, w_kh + (uint32_t)kw, p->w_bits);
                            if (wv == 0) {
                                continue;
                            }
                            a0 = r_off + (ptrdiff_t)(ow0 + j0) * sw + off;
                            if (p->act.is_signed) {
                                const int8_t *a = codes + a0;
                                for (j = j0; j < j1; j++) {
                                    acc[j] += wv * (int32_t)a[(ptrdiff_t)(j - j0) * sw];
                                }
                            } else { /* unsigned fields, minus the zero point z */
                                const uint8_t *a = ucodes + a0;
                                for (j = j0; j < j1; j++) {
                                    acc[j] += wv * ((int32_t)a[(ptrdiff_t)(j - j0) * sw] - z);
                                }
                            }
                        }
                    }
                }
                for (j = 0; j < nt; j++) {
                    y_oc[(ptrdiff_t)oh * p->out_w + ow0 + j] = bit_output(acc[j], mul, p->bias, oc);
                }
            }
        }
    }
}

void mico_bit_linear_f32(const MicoBitLinearF *p, const float *x, float *y, int8_t *codes)
{
    const int32_t in = p->in_features;
    int32_t z; /* asymmetric: sum w (f - z) = sum w f - z sum w */
    const float s_a = mico_dyn_quantize_zero(&p->act, x, codes, p->rows * in, &z);
    int32_t r, o;
    for (r = 0; r < p->rows; r++) {
        for (o = 0; o < p->out_features; o++) {
            const float mul = s_a * p->w_scale[p->w_per_channel ? o : 0];
            int32_t acc = bit_dot(p->weight, (uint32_t)o * (uint32_t)in, p->w_bits, codes,
                                  p->act.is_signed, (ptrdiff_t)r * in, in);
            if (z) {
                acc -= z * weight_sum(p->weight, (uint32_t)o * (uint32_t)in, p->w_bits, in);
            }
            *y++ = bit_output(acc, mul, p->bias, o);
        }
    }
}
