/*
 * mico_nn.h - integer kernels of mico-generated models (plain C99, no allocation).
 *
 * The arithmetic follows mico/quant/arithmetic.py exactly:
 *  - codes: unsigned b-bit in [0, 2^b-1]; signed b-bit (b >= 2) in [-(2^(b-1)-1), 2^(b-1)-1];
 *    signed 1-bit codes are binary {-1, +1};
 *  - input quantization: float32 x * inv_scale, rounded half away from zero (an exact test on
 *    the fractional part, never floor(|v| + 0.5)), clamped;
 *  - requantization: acc * m / 2^shift in 64-bit integers, rounded half away from zero, clamped;
 *  - packed weights: one little-endian bit stream, code i at bits [i*b, (i+1)*b), LSB first.
 */
#ifndef MICO_NN_H
#define MICO_NN_H

#include <stddef.h>
#include <stdint.h>

/* How a layer stores its result. */
typedef struct {
    int32_t to_codes; /* 0: keep the int32 accumulator; 1: requantize to codes */
    int32_t is_signed;
    int32_t binary;   /* signed 1-bit codes {-1, +1} */
    int32_t qmin, qmax;
    int32_t m, shift; /* real multiplier = m * 2^-shift */
} MicoRequant;

typedef struct {
    int32_t in_c, in_h, in_w;
    int32_t out_c, out_h, out_w;
    int32_t k_h, k_w, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups;
    int32_t in_signed; /* input codes are int8_t (1) or uint8_t (0) */
    int32_t w_bits;    /* weights: signed codes, packed */
    const uint8_t *weight;
    const int32_t *bias;
    int32_t relu;
    MicoRequant out;
} MicoConv2d;

typedef struct {
    int32_t in_features, out_features;
    int32_t in_signed;
    int32_t w_bits;
    const uint8_t *weight;
    const int32_t *bias;
    int32_t relu;
    MicoRequant out;
} MicoLinear;

/* Element storage of activations: one code per byte, or int32 accumulators. */
enum { MICO_U8 = 0, MICO_I8 = 1, MICO_I32 = 2 };

typedef struct {
    int32_t channels, in_h, in_w, out_h, out_w;
    int32_t k_h, k_w, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
    int32_t elem; /* MICO_U8, MICO_I8 or MICO_I32 */
} MicoMaxPool2d;

/* Code i of a packed stream of signed b-bit codes (b = 1: binary {-1, +1}). */
static inline int32_t mico_unpack_signed(const uint8_t *packed, uint32_t i, uint32_t bits)
{
    uint32_t bit = i * bits;
    uint32_t byte = bit >> 3;
    uint32_t off = bit & 7u;
    uint32_t word = packed[byte];
    uint32_t field;
    if (off + bits > 8u) {
        word |= (uint32_t)packed[byte + 1] << 8;
    }
    field = (word >> off) & ((1u << bits) - 1u);
    if (bits == 1u) {
        return field ? 1 : -1;
    }
    return (field & (1u << (bits - 1u))) ? (int32_t)field - (int32_t)(1u << bits) : (int32_t)field;
}

/* Rescale an accumulator to output codes (mico.quant.arithmetic.requantize). */
static inline int32_t mico_requant(int32_t acc, const MicoRequant *q)
{
    int64_t v = (int64_t)acc * (int64_t)q->m;
    int64_t mag = v < 0 ? -v : v;
    int64_t r = (mag + ((int64_t)1 << (q->shift - 1))) >> q->shift;
    if (v < 0) {
        r = -r;
    }
    if (q->binary) {
        return r >= 0 ? 1 : -1;
    }
    if (r < q->qmin) {
        r = q->qmin;
    }
    if (r > q->qmax) {
        r = q->qmax;
    }
    return (int32_t)r;
}

static inline int32_t mico_load_code(const void *codes, size_t i, int32_t is_signed)
{
    return is_signed ? (int32_t)((const int8_t *)codes)[i] : (int32_t)((const uint8_t *)codes)[i];
}

/* Apply fused ReLU and store result i as codes or as int32. */
static inline void mico_store_result(void *out, size_t i, int32_t acc, int32_t relu,
                                     const MicoRequant *q)
{
    if (relu && acc < 0) {
        acc = 0;
    }
    if (!q->to_codes) {
        ((int32_t *)out)[i] = acc;
    } else if (q->is_signed) {
        ((int8_t *)out)[i] = (int8_t)mico_requant(acc, q);
    } else {
        ((uint8_t *)out)[i] = (uint8_t)mico_requant(acc, q);
    }
}

/* float32 inputs to codes: round half away from zero of x * inv_scale, clamped. */
void mico_quantize_f32(const float *x, void *codes, size_t n, float inv_scale,
                       int32_t is_signed, int32_t binary, int32_t qmin, int32_t qmax);

void mico_qconv2d(const MicoConv2d *p, const void *in, void *out);
void mico_qlinear(const MicoLinear *p, const void *in, void *out);
void mico_maxpool2d(const MicoMaxPool2d *p, const void *in, void *out);

#endif /* MICO_NN_H */
