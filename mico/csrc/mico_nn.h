/*
 * mico_nn.h - integer kernels of mico-generated models (plain C99, no allocation).
 *
 * The arithmetic follows mico/quant/arithmetic.py exactly:
 *  - codes: unsigned b-bit in [0, 2^b-1]; signed b-bit (b >= 2) in [-(2^(b-1)-1), 2^(b-1)-1];
 *    signed 1-bit codes are binary {-1, +1}; asymmetric codes (unsigned with a zero point z,
 *    MicoFmt.zero) are shifted, in [-z, 2^b-1-z], and stored as the unsigned field code + z;
 *  - input quantization: float32 x * inv_scale, rounded half away from zero (an exact test on
 *    the fractional part, never floor(|v| + 0.5)), clamped (static programs get the same codes
 *    without float operations: one integer multiply for 4..8-bit codes,
 *    mico_quantize_f32_exact_b<bits>, a table of thresholds below, mico_quantize_f32_table);
 *  - requantization: v * m / 2^shift in 64-bit integers, rounded half away from zero, clamped;
 *  - storage: activations and weights alike are one little-endian bit stream per tensor, code i
 *    at bits [i*b, (i+1)*b), LSB first, b-bit two's complement (signed) or plain binary
 *    (unsigned; binary {-1, +1} as 0 / 1). A 4-bit tensor of n codes takes ceil(n*4/8) bytes.
 *    int32 tensors (accumulators) are plain int32_t arrays.
 *
 * Elements are read and written through a format descriptor MicoFmt, so every width 1..8,
 * signed or not, works everywhere: one at a time with mico_load / mico_store, or a run at a
 * time with mico_unpack / mico_unpack_i32 / mico_pack (mico_nn_run.c), which the kernels' hot
 * loops use. The run helpers take whole bytes at a time (no tables, no wider loads, so no
 * alignment needs): 8-bit codes as they are, 1-, 2- and 4-bit codes a byte at a time and 3-,
 * 5-, 6- and 7-bit codes 8 at a time once the run reaches a group boundary; short runs and the
 * head / tail elements of a run stream through a 32-bit bit buffer.
 */
#ifndef MICO_NN_H
#define MICO_NN_H

#include <stddef.h>
#include <stdint.h>

/* MICO_NOINLINE keeps a hot inner loop in its own function (and its own registers). */
#if defined(__GNUC__)
#define MICO_NOINLINE __attribute__((noinline))
#define MICO_UNUSED __attribute__((unused))
#define MICO_UNROLL _Pragma("GCC unroll 16")
#else
#define MICO_NOINLINE
#define MICO_UNUSED
#define MICO_UNROLL
#endif

/* MICO_PAIR_LE: an int16 pair in memory is the 32-bit word low + (high << 16) (little-endian),
 * so a kernel holding two pixels a word may read a pair of non-negative codes as one word;
 * MicoPairWord: a 32-bit word that may alias such pairs; MICO_LOOP_BARRIER(): in a short copy
 * or fill loop, keeps gcc from calling memcpy / memset, which cost more than the loop on a few
 * words (rv32). Shared by the sign-weight kernels (mico_conv_addsub.c, mico_sign_lut.c). */
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__) &&                              \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define MICO_PAIR_LE 1
#else
#define MICO_PAIR_LE 0
#endif
#if defined(__GNUC__)
typedef uint32_t __attribute__((__may_alias__)) MicoPairWord;
#define MICO_LOOP_BARRIER() __asm__ volatile("" ::: "memory")
#else
typedef uint32_t MicoPairWord;
#define MICO_LOOP_BARRIER()
#endif

/* Storage of a tensor's elements. */
typedef struct {
    int32_t bits;      /* 1..8: packed codes; 32: int32_t */
    int16_t is_signed; /* signed codes (with bits == 1: binary {-1, +1}) */
    int16_t zero;      /* unsigned only: zero point, fields hold code + zero (0: plain); 16-bit
                        * fields keep MicoFmt at 8 bytes, passed in two registers on rv32 */
} MicoFmt;

/* The largest magnitude of a value (code less zero point) of format f (1..8 bits). */
static inline int32_t mico_code_maxabs(MicoFmt f)
{
    int32_t top;
    if (f.is_signed) {
        return (int32_t)1 << (f.bits - 1); /* 1 for binary codes */
    }
    top = ((int32_t)1 << f.bits) - 1 - f.zero; /* fields 0 .. 2^bits - 1, less the zero point */
    return top > f.zero ? top : f.zero;
}

/* How a kernel stores a result: optional ReLU on the accumulator, optional rescaling by
 * m * 2^-shift (one multiplier, or one per channel), a final clamp, the storage format. */
typedef struct {
    MicoFmt fmt;
    int32_t relu;         /* clamp the accumulator at 0 first */
    int32_t n_mult;       /* 0: no rescaling; 1: one multiplier; C: one per channel */
    const int32_t *m;     /* in [0, 2^31) */
    const int32_t *shift; /* in [1, 62] */
    int32_t lo, hi;       /* clamp of the stored value (code range, or tighter) */
} MicoOut;

/* Element i of a tensor stored in format f. */
static inline int32_t mico_load(const void *buf, size_t i, MicoFmt f)
{
    const uint8_t *p = (const uint8_t *)buf;
    uint32_t bits, off, word, field;
    size_t bit, byte;
    if (f.bits == 8) {
        return f.is_signed ? (int32_t)((const int8_t *)buf)[i] : (int32_t)p[i] - f.zero;
    }
    if (f.bits == 32) {
        return ((const int32_t *)buf)[i];
    }
    bits = (uint32_t)f.bits;
    bit = i * (size_t)bits;
    byte = bit >> 3;
    off = (uint32_t)(bit & 7u);
    word = p[byte];
    if (off + bits > 8u) {
        word |= (uint32_t)p[byte + 1] << 8;
    }
    field = (word >> off) & ((1u << bits) - 1u);
    if (!f.is_signed) {
        return (int32_t)field - f.zero;
    }
    if (bits == 1u) {
        return field ? 1 : -1;
    }
    return (field & (1u << (bits - 1u))) ? (int32_t)field - (int32_t)(1u << bits) : (int32_t)field;
}

/* Store element i of a tensor in format f (other elements' bits are kept). */
static inline void mico_store(void *buf, size_t i, int32_t v, MicoFmt f)
{
    uint8_t *p = (uint8_t *)buf;
    uint32_t bits, off, word, mask, field;
    size_t bit, byte;
    int two;
    if (f.bits == 32) {
        ((int32_t *)buf)[i] = v;
        return;
    }
    if (!f.is_signed) {
        v += f.zero;
    }
    if (f.bits == 8) {
        p[i] = (uint8_t)((uint32_t)v & 0xffu);
        return;
    }
    bits = (uint32_t)f.bits;
    mask = (1u << bits) - 1u;
    field = (f.is_signed && bits == 1u) ? (v > 0 ? 1u : 0u) : ((uint32_t)v & mask);
    bit = i * (size_t)bits;
    byte = bit >> 3;
    off = (uint32_t)(bit & 7u);
    two = off + bits > 8u;
    word = p[byte];
    if (two) {
        word |= (uint32_t)p[byte + 1] << 8;
    }
    word = (word & ~(mask << off)) | (field << off);
    p[byte] = (uint8_t)(word & 0xffu);
    if (two) {
        p[byte + 1] = (uint8_t)((word >> 8) & 0xffu);
    }
}

/* ---------------------------------------------------------------- runs of codes
 * A field f (b bits, unsigned) maps to its code as ((f ^ x) << sh) - o: unsigned codes
 * x = sh = 0, o = the zero point (0 unless asymmetric); b-bit two's complement x = o = 2^(b-1), sh = 0; binary {-1, +1} (signed
 * 1-bit) x = 0, sh = 1, o = 1. The map works on whole bytes too (x repeated in every field),
 * which is what the byte-at-a-time paths use. */
typedef struct {
    uint32_t bits, mask, x, sh;
    int32_t o;
} MicoFieldMap;

static inline MicoFieldMap mico_field_map(MicoFmt f)
{
    MicoFieldMap m;
    m.bits = (uint32_t)f.bits;
    m.mask = m.bits < 32u ? (1u << m.bits) - 1u : 0xffffffffu;
    m.x = 0;
    m.sh = 0;
    m.o = 0;
    if (m.bits > 8u) { /* int32: no fields */
        return m;
    }
    if (f.is_signed && m.bits == 1u) {
        m.sh = 1;
        m.o = 1;
    } else if (f.is_signed) {
        m.x = 1u << (m.bits - 1u);
        m.o = (int32_t)m.x;
    } else {
        m.o = f.zero;
    }
    return m;
}

/* Codes per byte of a width whose codes tile a byte (1, 2, 4, 8 bits); 1 for 3, 5, 6, 7. */
static inline int32_t mico_codes_per_byte(int32_t bits)
{
    return (bits & (bits - 1)) == 0 ? 8 >> ((bits >> 1) - (bits >> 3)) : 1;
}

/* The field a code is stored as (binary {-1, +1}: 1 for +1, 0 for -1; mico_pack adds an
 * asymmetric format's zero point before it gets here). */
static inline uint32_t mico_code_field(int32_t v, const MicoFieldMap *m)
{
    return m->sh ? (v > 0 ? 1u : 0u) : ((uint32_t)v & m->mask);
}

/* Run helpers (mico_nn_run.c): every integer kernel reads and writes codes through these.
 * mico_unpack: n codes (bits 1..8) from element `start` into dst;
 * mico_unpack_i32: any tensor (codes, or int32: copied) into int32_t; mico_unpack_s8: n signed codes
 * (weights) narrowed to int8_t; mico_unpack_padded: n codes of row `row` (an element index) at
 * columns ix0 .. ix0 + n - 1, any of which may lie outside [0, width) and read as `fill`;
 * mico_pack: store n codes (already in range; binary as -1 / +1) at elements start.., leaving
 * every other element's bits as they were. */
void mico_unpack(const void *buf, size_t start, int32_t n, MicoFmt f, int16_t *dst);
void mico_unpack_i32(const void *buf, size_t start, int32_t n, MicoFmt f, int32_t *dst);
void mico_unpack_s8(const void *buf, size_t start, int32_t n, int32_t bits, int8_t *dst);
void mico_unpack_padded(const void *buf, size_t row, int32_t width, int32_t ix0, int32_t n,
                        int16_t fill, MicoFmt f, int16_t *dst);
void mico_pack(void *buf, size_t start, const int32_t *src, int32_t n, MicoFmt f);

/* Code i of a packed stream of signed b-bit codes (weights). */
static inline int32_t mico_unpack_signed(const uint8_t *packed, uint32_t i, uint32_t bits)
{
    MicoFmt f;
    f.bits = (int32_t)bits;
    f.is_signed = 1;
    f.zero = 0;
    return mico_load(packed, (size_t)i, f);
}

/* v / 2^shift rounded half away from zero (shift in [1, 62]). */
static inline int64_t mico_round_shift(int64_t v, int32_t shift)
{
    int64_t mag = v < 0 ? -v : v;
    int64_t r = (mag + ((int64_t)1 << (shift - 1))) >> shift;
    return v < 0 ? -r : r;
}

/* round(v * m / 2^shift), half away from zero, saturated to [INT32_MIN, INT32_MAX]: equal to
 * mico_round_shift(v * m, shift) wherever that lies in int32 range, and on the same side of
 * it otherwise (every caller clamps into int32 afterwards). m in [0, 2^31), shift in [1, 62].
 * Shifts above 32 (the usual case) need only the high word of the product. */
static inline int32_t mico_rescale(int32_t v, int32_t m, int32_t shift)
{
    const uint32_t mag = v < 0 ? 0u - (uint32_t)v : (uint32_t)v;
    uint64_t q;
    if (shift > 32) { /* |v| * m < 2^62: the low word only matters below the rounding bit */
        const uint32_t hi = (uint32_t)(((uint64_t)mag * (uint32_t)m) >> 32);
        q = (hi + (1u << (shift - 33))) >> (shift - 32);
    } else {
        q = ((uint64_t)mag * (uint32_t)m + ((uint64_t)1 << (shift - 1))) >> shift;
        if (q >= 0x80000000u) {
            return v < 0 ? INT32_MIN : INT32_MAX;
        }
    }
    return v < 0 ? -(int32_t)q : (int32_t)q;
}

/* mico_finish of one channel, with the channel's parameters loaded once. */
typedef struct {
    int32_t relu, scaled, m, shift, binary, lo, hi;
} MicoRq;

static inline MicoRq mico_rq(const MicoOut *o, int32_t ch)
{
    MicoRq q;
    const int32_t k = o->n_mult > 1 ? ch : 0;
    q.relu = o->relu;
    q.scaled = o->n_mult != 0;
    q.m = q.scaled ? o->m[k] : 0;
    q.shift = q.scaled ? o->shift[k] : 1;
    q.binary = q.scaled && o->fmt.bits == 1 && o->fmt.is_signed;
    q.lo = o->lo;
    q.hi = o->hi;
    return q;
}

static inline int32_t mico_rq_apply(const MicoRq *q, int32_t acc)
{
    int32_t r = acc;
    if (q->relu && r < 0) {
        r = 0;
    }
    if (q->scaled) {
        r = mico_rescale(r, q->m, q->shift);
        if (q->binary) {
            r = r >= 0 ? 1 : -1;
        }
    }
    if (r < q->lo) {
        r = q->lo;
    }
    if (r > q->hi) {
        r = q->hi;
    }
    return r;
}

/* v[i] = mico_rq_apply(q, v[i]) for i < n (mico_nn_run.c); mico_rq_run_fast has the usual
 * case (a multiplier whose shift is above 32, not binary) in a tight loop, for long runs. */
void mico_rq_run(const MicoRq *q, int32_t *v, int32_t n);
void mico_rq_run_fast(const MicoRq *q, int32_t *v, int32_t n);
/* mico_rq_run_fast then mico_pack of the run at elements start.. of buf (v left undefined);
 * 8-bit codes requantized and stored in one loop. */
void mico_rq_pack(const MicoRq *q, int32_t *v, int32_t n, void *buf, size_t start, MicoFmt f);


/* The value an accumulator (or a code) of channel ch is stored as. */
static inline int32_t mico_finish(int32_t acc, int32_t ch, const MicoOut *o)
{
    const MicoRq q = mico_rq(o, ch);
    return mico_rq_apply(&q, acc);
}

typedef struct {
    int32_t in_c, in_h, in_w;
    int32_t out_c, out_h, out_w;
    int32_t k_h, k_w, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups;
    MicoFmt in_fmt;
    int32_t w_bits; /* weights: signed codes, packed (OIHW) */
    const uint8_t *weight;
    const int32_t *bias;
    MicoOut out; /* per-channel multipliers index the output channel */
    /* working memory of the kernels that need more than a few hundred bytes (channel lanes,
     * byte tiles, sign tables, sign-weight sums): planned in the arena by the generator, sized
     * for this layer (mico.codegen.scratch), or NULL / too small: the kernel then takes it on
     * its stack */
    void *scratch;
    int32_t scratch_bytes;
} MicoConv2d;

/* n bytes (rounded up to 8) carved off *at: where they start. */
static inline void *mico_carve(uint8_t **at, size_t n)
{
    void *r = *at;
    *at += (n + 7u) & ~(size_t)7u;
    return r;
}

typedef struct {
    int32_t rows, in_features, out_features;
    MicoFmt in_fmt;
    int32_t w_bits; /* weights: signed codes, packed (out x in, row-major) */
    const uint8_t *weight;
    const int32_t *bias;
    MicoOut out; /* per-channel multipliers index the output feature */
    /* working memory of the sign tables (mico_qlinear_sign_lut): planned in the arena by the
     * generator, sized for this layer (mico.codegen.scratch), or NULL / too small: the kernel
     * then takes it on its stack; the other linear kernels do not read it */
    void *scratch;
    int32_t scratch_bytes;
    /* mico_qlinear / _sub4 / _sub2 only (0 for every other kernel): an offset added to every
     * input code, the bias holding bias - x_off * (sum of the output's weights), so that the
     * sums are unchanged. The code generator gives it narrow signed (or zero-point) codes,
     * which the word kernels then take as codes in [0, 2^bits). */
    int32_t x_off;
} MicoLinear;

typedef struct {
    int32_t channels, in_h, in_w, out_h, out_w;
    int32_t k_h, k_w, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
    MicoFmt fmt; /* input and output */
} MicoMaxPool2d;

/* Channel lanes (mico_nn.h): weights of 1, 2, 4 or 8 bits stored as words of F = 32 / bits
 * output channels per tap (mico.quant.packing.pack_lanes), multiplied k = 32 / s at a time;
 * lanes of s bits hold n products of the layer's widths (chosen at generation time, signed
 * when the activations are). */
typedef struct {
    int32_t s;         /* lane width: 4, 8 or 16 bits (G = s / bits field groups per word) */
    int32_t n;         /* taps summed in the lanes between flushes */
    int32_t is_signed; /* lanes hold signed sums (signed activation codes) */
} MicoLanes;

/* mico_lanes_block: tile[c * pp + j] += lane sums of the F channels of one block; then
 * mico_lanes_finish: tile = bias + s_w * tile - q_w * cs (defined below; static so that every kernel source carries what it uses, and a
 * program without channel lanes carries none). */

/* 2-D average pooling (NCHW, batch 1): window sums; a window covering `count` inputs is
 * stored with multiplier count - 1 (out.n_mult = k_h * k_w). count_include_pad counts the
 * padding too (every window then uses the last multiplier). */
typedef struct {
    int32_t channels, in_h, in_w, out_h, out_w;
    int32_t k_h, k_w, stride_h, stride_w, pad_h, pad_w;
    int32_t count_include_pad;
    MicoFmt in_fmt;
    MicoOut out;
} MicoAvgPool2d;

/* Sum of `count` consecutive elements, `outer` times, stored as out says. */
typedef struct {
    int32_t outer, count;
    MicoFmt in_fmt;
    MicoOut out;
} MicoMean;

/* Elementwise: out[i] = finish(in[i], channel (i / inner) % channels). */
typedef struct {
    int32_t n, channels, inner;
    MicoFmt in_fmt;
    MicoOut out;
} MicoRequant;

/* out[i] = clamp(round((a[i] * m_a + b[i] * m_b) / 2^shift)) in 64-bit integers. */
typedef struct {
    int32_t n;
    MicoFmt a_fmt, b_fmt, fmt;
    int32_t m_a, m_b, shift;
    int32_t lo, hi;
} MicoAdd;

/* One input of a concat: outer blocks of in_inner elements, placed at offset within the
 * out_inner elements of each output block. */
typedef struct {
    int32_t outer, in_inner, out_inner, offset;
    MicoFmt in_fmt;
    MicoOut out;
} MicoConcatPart;

#define MICO_MAX_RANK 6

/* out[i] = finish(in[offset + sum_k idx_k * stride_k]) for the row-major index idx of i. */
typedef struct {
    int32_t rank;
    int32_t shape[MICO_MAX_RANK];
    int32_t stride[MICO_MAX_RANK];
    int32_t offset;
    MicoFmt in_fmt;
    MicoOut out;
} MicoCopy;

/* The index of the first NaN or Inf of x[0..n), or n when every element is finite. */
size_t mico_first_nonfinite(const float *x, size_t n);

/* The index of the first element of x[0..n) that is not a token id (an integer in
 * [0, vocab)), or n when all are: token models take their ids as exact float32 integers. */
size_t mico_first_bad_token(const float *x, size_t n, int32_t vocab);

/* float32 inputs to codes: round half away from zero of x * inv_scale, clamped. */
void mico_quantize_f32(const float *x, void *codes, size_t n, float inv_scale, MicoFmt fmt,
                       int32_t qmin, int32_t qmax);
/* The same codes with integer operations only, for a scale known ahead: code = qmin + the
 * number of entries of t (2^bits - 1 thresholds as float keys minus 1, sorted; from
 * mico.quant.thresholds.c_table) below x's key; binary codes (one entry) are -1 + 2 * that. */
void mico_quantize_f32_table(const float *x, void *codes, size_t n, const int32_t *t,
                             MicoFmt fmt, int32_t qmin);
/* The same for codes of one width (fmt.bits), the search unrolled: 1, 2, 4 and 8 bits a byte
 * of fields at a time, 3, 5, 6 and 7 through a bit buffer. */
void mico_quantize_f32_table_b1(const float *x, void *codes, size_t n, const int32_t *t,
                                MicoFmt fmt, int32_t qmin);
void mico_quantize_f32_table_b2(const float *x, void *codes, size_t n, const int32_t *t,
                                MicoFmt fmt, int32_t qmin);
void mico_quantize_f32_table_b4(const float *x, void *codes, size_t n, const int32_t *t,
                                MicoFmt fmt, int32_t qmin);
void mico_quantize_f32_table_b8(const float *x, void *codes, size_t n, const int32_t *t,
                                MicoFmt fmt, int32_t qmin);
void mico_quantize_f32_table_b3(const float *x, void *codes, size_t n, const int32_t *t,
                                MicoFmt fmt, int32_t qmin);
void mico_quantize_f32_table_b5(const float *x, void *codes, size_t n, const int32_t *t,
                                MicoFmt fmt, int32_t qmin);
void mico_quantize_f32_table_b6(const float *x, void *codes, size_t n, const int32_t *t,
                                MicoFmt fmt, int32_t qmin);
void mico_quantize_f32_table_b7(const float *x, void *codes, size_t n, const int32_t *t,
                                MicoFmt fmt, int32_t qmin);

/* A scale known ahead as integers (mico.quant.exact_input.exact_params): x * inv_scale,
 * rounded as float32 rounds it and then half away from zero, clamped, with one mulhu. */
typedef struct {
    uint32_t m;    /* inv_scale's 24-bit significand (hidden bit included) times 4 */
    int32_t k;     /* 277 - inv_scale's exponent: an input of exponent field e shifts by k - e */
    int32_t qmin;  /* the code range [qmin, qmin + span] */
    uint32_t span; /* qmax - qmin */
} MicoQuantExact;
/* The codes of mico_quantize_f32 without float operations and without a table, for codes of
 * one width (fmt.bits, 2..8; not binary): 2, 4 and 8 bits a byte of fields at a time, the
 * others through a bit buffer. */
void mico_quantize_f32_exact_b2(const float *x, void *codes, size_t n, const MicoQuantExact *q,
                                MicoFmt fmt);
void mico_quantize_f32_exact_b3(const float *x, void *codes, size_t n, const MicoQuantExact *q,
                                MicoFmt fmt);
void mico_quantize_f32_exact_b4(const float *x, void *codes, size_t n, const MicoQuantExact *q,
                                MicoFmt fmt);
void mico_quantize_f32_exact_b5(const float *x, void *codes, size_t n, const MicoQuantExact *q,
                                MicoFmt fmt);
void mico_quantize_f32_exact_b6(const float *x, void *codes, size_t n, const MicoQuantExact *q,
                                MicoFmt fmt);
void mico_quantize_f32_exact_b7(const float *x, void *codes, size_t n, const MicoQuantExact *q,
                                MicoFmt fmt);
void mico_quantize_f32_exact_b8(const float *x, void *codes, size_t n, const MicoQuantExact *q,
                                MicoFmt fmt);

/* mico_qconv2d picks its path by the layer: int32 inputs go element by element
 * (mico_qconv2d_elementwise), depthwise 3x3 layers with unit column dilation take
 * mico_qconv2d_depthwise3x3, W8A8 layers mico_qconv2d_tiled_s8 (bytes as codes), every other
 * layer mico_qconv2d_tiled (im2col). Generated code calls the path itself
 * (mico.codegen.emitters.conv2d_kernel), so a program links only the paths it uses. */
void mico_qconv2d(const MicoConv2d *p, const void *in, void *out);
void mico_qconv2d_elementwise(const MicoConv2d *p, const void *in, void *out);
void mico_qconv2d_depthwise3x3(const MicoConv2d *p, const void *in, void *out);
void mico_qconv2d_tiled(const MicoConv2d *p, const void *in, void *out);
/* mico_qconv2d_tiled with the word and pixel-lane kernels of 4-bit (_sub4) or 2-bit (_sub2)
 * weights (linked only by programs that call it, each width's word kernels by its own). */
void mico_qconv2d_tiled_sub4(const MicoConv2d *p, const void *in, void *out);
void mico_qconv2d_tiled_sub2(const MicoConv2d *p, const void *in, void *out);
void mico_qconv2d_tiled_s8(const MicoConv2d *p, const void *in, void *out);
/* Weights that are signs, ternary 2-bit codes (_addsub2) or binary 1-bit ones (_addsub1), on
 * codes of 1 to 8 bits: sums of activation codes, two pixels an addition, zero weights
 * skipped (mico_conv_addsub.c); other layers (2-bit codes holding -2) element by element. */
void mico_qconv2d_addsub2(const MicoConv2d *p, const void *in, void *out);
void mico_qconv2d_addsub1(const MicoConv2d *p, const void *in, void *out);
/* Bytes of MicoConv2d.scratch the sign-weight kernels (either width) and the sign tables'
 * convolution take for layer p (0: a layer they hand on); mico.codegen.scratch computes the
 * same. A call with fewer (or none) takes that memory on the kernel's stack. */
size_t mico_qconv2d_addsub_scratch(const MicoConv2d *p);
size_t mico_qconv2d_sign_lut_scratch(const MicoConv2d *p);
/* Bytes of MicoLinear.scratch the sign tables' linear layer takes for layer p (0: a layer it
 * hands on to mico_qlinear); mico.codegen.scratch computes the same. */
size_t mico_qlinear_sign_lut_scratch(const MicoLinear *p);
/* Binary weights on 2- to 8-bit codes by table lookup (mico_sign_lut.c): the 16 signed sums of
 * four taps' codes built once per pixel (row) pair, an entry a nibble of weights per channel;
 * layers whose channels' weights are not whole bytes go to mico_qconv2d_elementwise /
 * mico_qlinear. */
void mico_qconv2d_sign_lut(const MicoConv2d *p, const void *in, void *out);
void mico_qlinear_sign_lut(const MicoLinear *p, const void *in, void *out);
/* The im2col patch of kernel rows [r0, r1) (row = ic * k_h + ky of the group starting at input
 * channel ic0) for output pixels pix0 .. pix0 + np - 1: patch[(r - r0) * k_w + kx][j], pp
 * columns a tap; padding and columns np .. pp - 1 are zeros (mico_conv2d.c, shared with
 * mico_conv_addsub.c). */
void mico_conv_patch(const MicoConv2d *p, const void *in, int32_t ic0, int32_t r0, int32_t r1,
                     int32_t pix0, int32_t np, int32_t pp, int16_t *patch);
/* A tile's int32 sums of output channels oc0 .. oc1 - 1 (a row of MICO_TILE_PX sums a channel)
 * for output pixels pix0 .. pix0 + np - 1 requantized (mico_rq_pack; the sums are left
 * undefined) and stored into the layer's output (mico_conv2d.c, shared by the sign tables' and
 * the sign-weight sums' convolutions, whose tiles are MICO_TILE_PX pixels). */
#define MICO_TILE_PX 16
void mico_conv_tile_store(const MicoConv2d *p, int32_t *tile, int32_t oc0, int32_t oc1,
                          int32_t pix0, int32_t np, void *out);
/* W8A8 convolutions with few taps or 1x1 kernels (mico_conv_narrow.c: groups 1, in_c * k_h *
 * k_w <= 64 or pointwise; a first layer, pointwise layers): 4-channel x 4-pixel byte tiles;
 * others go to mico_qconv2d_tiled_s8. */
void mico_qconv2d_narrow_s8(const MicoConv2d *p, const void *in, void *out);
/* Depthwise 3x3 in pixel lanes (mico_dwconv.c): s-bit lanes of k = 32 / s pixels of a row, q
 * lane words per chunk of the row (mico.codegen.dwconv_plan), one entry point per lane width. */
typedef struct {
    int32_t s, q;
    const uint8_t *thr; /* mico_qconv2d_dwbs: 3 thresholds per channel (generator), or NULL */
    /* mico_qconv2d_dwp_f*: outputs of 5..16 codes by table, n + 1 bytes per channel (n = hi -
     * lo; mico.codegen.dwconv_plan.dwp_levels), or NULL */
    const uint8_t *lvl;
} MicoDwLanes;
#define MICO_DWL_DECLARE(S)                                                                 \
    void mico_qconv2d_dwl_s##S(const MicoConv2d *p, const MicoDwLanes *l, const void *in,    \
                               void *out);
MICO_DWL_DECLARE(4) MICO_DWL_DECLARE(6) MICO_DWL_DECLARE(8) MICO_DWL_DECLARE(12)
MICO_DWL_DECLARE(16) MICO_DWL_DECLARE(32)
/* Depthwise 3x3 on bytes (mico_dwconv.c): 8-bit codes in and out, register tiles of 4 outputs
 * along the rows (or columns) of a padded copy of each channel plane, stride 1 or 2 along them
 * (f1 / f2); other layers (which mico.codegen.dwconv_plan.dw8_plan does not give it) go to
 * mico_qconv2d_depthwise3x3. l is unused (the lanes' signature). */
void mico_qconv2d_dw8_f1(const MicoConv2d *p, const MicoDwLanes *l, const void *in, void *out);
void mico_qconv2d_dw8_f2(const MicoConv2d *p, const MicoDwLanes *l, const void *in, void *out);
/* Depthwise 3x3 on pairs of output lines (mico_dwconv.c): codes of 1..8 bits in and out, two
 * outputs per multiply in 16-bit lanes (or K in words of K lanes) of a padded copy of each
 * channel plane, stride 1 or 2 along its rows (f1 / f2), when every channel's window sums fit
 * the lanes (mico.codegen.dwconv_plan); other layers go to mico_qconv2d_depthwise3x3. One entry
 * point per form (mico_qconv2d_dwp_f<sf><suffix>, chosen by mico.codegen.dwconv_plan.dwp_form),
 * so that a program links the plane functions of its layers' forms only; a layer not of the
 * entry's form goes to mico_qconv2d_depthwise3x3 too. The suffix: the pairs' read (_g field by
 * field, _s short rows as bytes, _r rows of whole bytes), words of K lanes (_k; _k5: of 5 lanes
 * too), the outputs (_q requantized, _t by thresholds, _l by table, _n by table stored packed),
 * rows of 5 outputs (_r5; not with rows of whole bytes, whose planes are too tall for the
 * buffer), no requantizing plane functions (_x: every channel has its table, so takes words
 * of K lanes: neither their requantizing plane functions nor the pairs').
 * X(sf, suffix, read, K, K5, Q, T, L, N, R5, P, code): the functions each form has (mico_dwconv.c,
 * MICO_DWP_FORM); mico_qconv2d_dwp_f1 / _f2: any form (the kernel choosing, every function
 * linked). */
#define MICO_DWP_FORMS(X) \
    X(1, _g_q, g, 0, 0, 0, 0, 0, 0, 0, 1, 0) \
    X(1, _g_q_r5, g, 0, 0, 0, 0, 0, 0, 1, 0, 64) \
    X(1, _g_t, g, 0, 0, 0, 1, 0, 0, 0, 1, 16) \
    X(1, _g_t_r5, g, 0, 0, 0, 1, 0, 0, 1, 0, 80) \
    X(1, _s_q, s, 0, 0, 0, 0, 0, 0, 0, 1, 1) \
    X(1, _s_q_r5, s, 0, 0, 0, 0, 0, 0, 1, 0, 65) \
    X(1, _s_t, s, 0, 0, 0, 1, 0, 0, 0, 1, 17) \
    X(1, _s_t_r5, s, 0, 0, 0, 1, 0, 0, 1, 0, 81) \
    X(1, _s_k_q, s, 1, 0, 1, 0, 0, 0, 0, 1, 5) \
    X(1, _s_k_q_r5, s, 1, 0, 1, 0, 0, 0, 1, 0, 69) \
    X(1, _s_k_t, s, 1, 0, 1, 1, 0, 0, 0, 1, 21) \
    X(1, _s_k_t_r5, s, 1, 0, 1, 1, 0, 0, 1, 0, 85) \
    X(1, _s_k_l, s, 1, 0, 1, 0, 1, 0, 0, 1, 37) \
    X(1, _s_k_l_x, s, 1, 0, 0, 0, 1, 0, 0, 1, 37) \
    X(1, _s_k_l_r5, s, 1, 0, 1, 0, 1, 0, 1, 0, 101) \
    X(1, _s_k_l_r5_x, s, 1, 0, 0, 0, 1, 0, 1, 0, 101) \
    X(1, _s_k5_q, s, 1, 1, 1, 0, 0, 0, 0, 1, 13) \
    X(1, _s_k5_q_r5, s, 1, 1, 1, 0, 0, 0, 1, 0, 77) \
    X(1, _s_k5_t, s, 1, 1, 1, 1, 0, 0, 0, 1, 29) \
    X(1, _s_k5_t_r5, s, 1, 1, 1, 1, 0, 0, 1, 0, 93) \
    X(1, _s_k5_l, s, 1, 1, 1, 0, 1, 0, 0, 1, 45) \
    X(1, _s_k5_l_x, s, 1, 1, 0, 0, 1, 0, 0, 1, 45) \
    X(1, _s_k5_l_r5, s, 1, 1, 1, 0, 1, 0, 1, 0, 109) \
    X(1, _s_k5_l_r5_x, s, 1, 1, 0, 0, 1, 0, 1, 0, 109) \
    X(1, _r_q, r, 0, 0, 0, 0, 0, 0, 0, 1, 2) \
    X(1, _r_t, r, 0, 0, 0, 1, 0, 0, 0, 1, 18) \
    X(1, _r_k_q, r, 1, 0, 1, 0, 0, 0, 0, 1, 6) \
    X(1, _r_k_t, r, 1, 0, 1, 1, 0, 0, 0, 1, 22) \
    X(1, _r_k_l, r, 1, 0, 1, 0, 1, 0, 0, 1, 38) \
    X(1, _r_k_l_x, r, 1, 0, 0, 0, 1, 0, 0, 1, 38) \
    X(1, _r_k_n, r, 1, 0, 1, 0, 0, 1, 0, 1, 54) \
    X(1, _r_k_n_x, r, 1, 0, 0, 0, 0, 1, 0, 1, 54) \
    X(2, _g_q, g, 0, 0, 0, 0, 0, 0, 0, 1, 0) \
    X(2, _g_t, g, 0, 0, 0, 1, 0, 0, 0, 1, 16) \
    X(2, _s_q, s, 0, 0, 0, 0, 0, 0, 0, 1, 1) \
    X(2, _s_t, s, 0, 0, 0, 1, 0, 0, 0, 1, 17) \
    X(2, _r_q, r, 0, 0, 0, 0, 0, 0, 0, 1, 2) \
    X(2, _r_t, r, 0, 0, 0, 1, 0, 0, 0, 1, 18) \
    X(2, _r_k_t, r, 1, 0, 0, 1, 0, 0, 0, 1, 22) \
    X(2, _r_k_l, r, 1, 0, 0, 0, 0, 0, 0, 1, 38) \
    X(2, _r_k_n, r, 1, 0, 0, 0, 0, 1, 0, 1, 54) \
    X(1, , a, 1, 1, 1, 1, 1, 1, 1, 1, -1) \
    X(2, , a, 1, 0, 0, 1, 0, 1, 0, 1, -1)
#define MICO_DWP_DECLARE(SF, NAME, ...)                                                     \
    void mico_qconv2d_dwp_f##SF##NAME(const MicoConv2d *p, const MicoDwLanes *l, const void *in, \
                                      void *out);
MICO_DWP_FORMS(MICO_DWP_DECLARE)
/* The form code of a layer at stride sf along the buffer rows (mico_dwp_code in mico_dwconv.c,
 * mirrored by mico.codegen.dwconv_plan.dwp_form), -1 when the pair path does not take it. */
int32_t mico_qconv2d_dwp_code(const MicoConv2d *p, const MicoDwLanes *l, int32_t sf);
/* Depthwise 3x3 bit-sliced (mico_dwconv.c): 2-bit unsigned codes in, weights in {-1, 0, 1},
 * 1- or 2-bit unsigned codes out, stride 1 or 2, padding 1 (l->thr: the generator's
 * thresholds, or NULL); other layers go to mico_qconv2d_depthwise3x3. _s1 / _s2: one stride
 * each (what mico.codegen.dwconv_plan.dw_kernel emits: a program links that stride's kernel
 * only). */
void mico_qconv2d_dwbs(const MicoConv2d *p, const MicoDwLanes *l, const void *in, void *out);
void mico_qconv2d_dwbs_s1(const MicoConv2d *p, const MicoDwLanes *l, const void *in, void *out);
void mico_qconv2d_dwbs_s2(const MicoConv2d *p, const MicoDwLanes *l, const void *in, void *out);
/* Depthwise 3x3 on planes of 5 columns of 4-bit codes (mico_dwconv.c; DS-CNN's 25 x 5 at
 * W4A4): unsigned (_dw4) or signed (_dw4s) 4-bit codes in and out (no zero point), stride 1,
 * padding 1; each row's even and odd columns in words of 3 lanes of 10 bits, two multiplies a
 * kernel row for 3 (or 2) outputs, channels whose window sums span at most 1023 (others one
 * output at a time), outputs by table (l->lvl: the generator's levels,
 * mico.codegen.dwconv_plan.dwp_levels, or NULL: the kernel requantizes its table itself);
 * other layers go to mico_qconv2d_depthwise3x3. */
void mico_qconv2d_dw4(const MicoConv2d *p, const MicoDwLanes *l, const void *in, void *out);
void mico_qconv2d_dw4s(const MicoConv2d *p, const MicoDwLanes *l, const void *in, void *out);
void mico_qlinear(const MicoLinear *p, const void *in, void *out);
/* mico_qlinear with rows of 4-bit (_sub4) or 2-bit (_sub2) weights read a word at a time
 * (each linked only by programs that call it; a layer of another width takes mico_qlinear's
 * path); codes that x_off makes non-negative and narrow take several products a multiply,
 * four rows at a time (mico_linear.c). */
void mico_qlinear_sub4(const MicoLinear *p, const void *in, void *out);
void mico_qlinear_sub2(const MicoLinear *p, const void *in, void *out);
/* W8A8 layers (symmetric or unsigned codes): bytes as codes; others go to mico_qlinear. */
void mico_qlinear_s8(const MicoLinear *p, const void *in, void *out);
/* Host kernels (mico_host_gemm.c, for targets with the `xautovec` capability): convolutions
 * (depthwise ones channel by channel) and linear layers as int16 GEMMs the compiler vectorises;
 * layers too large for their scratch take mico_qconv2d / mico_qlinear. */
void mico_qconv2d_host(const MicoConv2d *p, const void *in, void *out);
void mico_qlinear_host(const MicoLinear *p, const void *in, void *out);
/* The channel-lane paths (weights in the lanes layout): conv (any kernel, groups whose output
 * channels are a multiple of F) and linear (out_features a multiple of F), one entry point per
 * weight width and field-group count G = s / w_bits (mico_q*_lanes_w<bits>g<G>, declared with
 * the kernels below): the generator calls the one a layer needs, so a program links no other. */
#define MICO_LANES_DECLARE(BITS, G, NPX)                                                    \
    void mico_qconv2d_lanes_w##BITS##g##G(const MicoConv2d *p, const MicoLanes *l,            \
                                          const void *in, void *out);                         \
    void mico_qlinear_lanes_w##BITS##g##G(const MicoLinear *p, const MicoLanes *l,            \
                                          const void *in, void *out);
void mico_maxpool2d(const MicoMaxPool2d *p, const void *in, void *out);
void mico_avgpool2d(const MicoAvgPool2d *p, const void *in, void *out);
void mico_mean(const MicoMean *p, const void *in, void *out);
void mico_requant(const MicoRequant *p, const void *in, void *out);

/* out[i] = a[i] * b[i] stored as o says (codes of two activations, e.g. x * gate). */
void mico_qmul(const void *a, MicoFmt fa, const void *b, MicoFmt fb, void *out,
               const MicoOut *o, int32_t n);

/* out[i] = index[i] >= 0 ? in[index[i]] : fill, codes of one format (padding as a gather). */
void mico_qgather(const void *in, MicoFmt fmt, void *out, const int32_t *index, int32_t n,
                  int32_t fill);

/* Adaptive average pooling with window bounds per output row and column (mico_qops.c). */
void mico_qadaptavg(const void *in, MicoFmt fi, void *out, const MicoOut *o, int32_t c,
                    int32_t h, int32_t w, int32_t oh, int32_t ow, const int32_t *rs,
                    const int32_t *re, const int32_t *cs, const int32_t *ce);

/* out[s] = a[s] @ b[s] for batch matrices (m x k) @ (k x n) of codes, stored as o says. */
void mico_qmatmul(const void *a, MicoFmt fa, const void *b, MicoFmt fb, void *out,
                  const MicoOut *o, int32_t batch, int32_t m, int32_t k, int32_t n);

/* Softmax over rows of n codes: exp of each code's distance to the row's largest from a Q15
 * table, output code = round(e * qmax / sum) (mico_softmax.c). */
void mico_qsoftmax(const void *in, MicoFmt in_fmt, void *out, MicoFmt out_fmt, int32_t rows,
                   int32_t n, const int32_t *exp_q15, int32_t table_len, int32_t qmax);

/* Integer LayerNorm over rows of n codes (mico_layernorm.c): centred exactly, divided by the
 * integer square root of the row's sum of squares, scaled by per-channel fixed-point gamma
 * and beta, rounded (half away from zero) by 2^shift and clamped to [lo, hi]. */
void mico_qlayernorm(const void *in, MicoFmt in_fmt, void *out, MicoFmt out_fmt, int32_t rows,
                     int32_t n, int64_t eps_q, int64_t k, const int32_t *g, const int64_t *b,
                     int32_t shift, int32_t lo, int32_t hi);

/* The LLaMa kernels (mico_llama.c). Token ids (exact float32 integers, checked) -> rows of
 * a packed table of codes. */
void mico_qembedding(const float *ids, const void *table, MicoFmt tf, void *out, MicoFmt of,
                     int32_t n, int32_t dim);
/* Shared by the integer normalisations (mico_layernorm.c, mico_llama.c). */
/* floor(sqrt(v)) for v >= 0, bit by bit */
static inline uint64_t mico_isqrt(uint64_t v)
{
    uint64_t r = 0, bit = (uint64_t)1 << 62;
    while (bit > v) {
        bit >>= 2;
    }
    while (bit != 0) {
        if (v >= r + bit) {
            v -= r + bit;
            r = (r >> 1) + bit;
        } else {
            r >>= 1;
        }
        bit >>= 2;
    }
    return r;
}

/* round(a / b), half away from zero, b > 0 */
static inline int64_t mico_div_round(int64_t a, int64_t b)
{
    const int64_t mag = (a < 0 ? -a : a);
    const int64_t q = (mag + b / 2) / b;
    return a < 0 ? -q : q;
}

/* Integer RMSNorm over rows of n codes: dev = isqrt((sum x^2 << 2 pre) + eps_q), y =
 * round(x 2^pre k / dev), out = round(y g[j] / 2^shift) clamped to [lo, hi]. */
void mico_qrmsnorm(const void *in, MicoFmt in_fmt, void *out, MicoFmt out_fmt, int32_t rows,
                   int32_t n, int32_t pre, int64_t eps_q, int64_t k, const int32_t *g,
                   int32_t shift, int32_t lo, int32_t hi);
/* Rotary embedding of interleaved pairs of (heads, positions, 2 half) codes: x0 C - x1 S,
 * x0 S + x1 C with fixed-point tables per position, stored as o says. */
void mico_qrope(const void *in, MicoFmt in_fmt, void *out, const MicoOut *o, int32_t heads,
                int32_t positions, int32_t half, const int32_t *cos_q, const int32_t *sin_q);
/* mico_qsoftmax over the first limits[r % n_limits] codes of row r; the rest are code 0. */
void mico_qsoftmax_prefix(const void *in, MicoFmt in_fmt, void *out, MicoFmt out_fmt,
                          int32_t rows, int32_t n, const int32_t *exp_q15, int32_t table_len,
                          int32_t qmax, const int32_t *limits, int32_t n_limits);

/* out[i] = table[in[i] - in_min] for n codes (two's complement bytes for signed outputs). */
void mico_lut(const void *in, void *out, int32_t n, MicoFmt in_fmt, MicoFmt out_fmt,
              const uint8_t *table, int32_t in_min);
void mico_add(const MicoAdd *p, const void *a, const void *b, void *out);
/* mico_add in a loop the host compiler vectorises (mico_host_gemm.c, `xautovec` targets). */
void mico_add_host(const MicoAdd *p, const void *a, const void *b, void *out);
void mico_concat_part(const MicoConcatPart *p, const void *in, void *out);
void mico_copy(const MicoCopy *p, const void *in, void *out);

/* ---------------------------------------------------------------- channel lanes
 * Several low-bit products per 32-bit multiply ("channel lanes").
 *
 * A layer with 1-, 2- or 4-bit weights (8-bit with narrow activations) keeps its weights in
 * flash as words of F = 32 / bits output channels: word (block, tap t) holds, at bits
 * [c * bits, (c + 1) * bits), the weight field of channel block * F + c at tap t (see
 * mico.quant.packing.pack_lanes; as many bytes as the plain packing), each as w' = w + 2^(bits-1)
 * >= 0 (binary weights: w' = field, w = 2w' - 1). One AND with a mask of fields S bits apart
 * (S = G * bits) takes k = 32 / S of them at once, each in its own S-bit lane; multiplying
 * that word by an activation code x gives k products w' * x in one multiply. G shifted masks cover the word's F channels, so one tap of F channels and one
 * pixel costs G multiplies and G adds.
 *
 * Lanes add up without carries for n taps (chosen at generation time so that n products fit
 * S bits: unsigned, or signed for signed activations); then each lane is added into an int32
 * sum ("flush"). The caller turns the lane sums L into the layer's sums:
 *   sum_t w_t x_t = s_w * L - q_w * sum_t x_t   (s_w, q_w) = (1, 2^(bits-1)), binary (2, 1).
 */

/* Add the k = 32 / s lanes of word v into t[0], t[step], t[2 * step], ... (the lanes of field
 * group g hold channels g, g + G, g + 2G, ...: step = G rows of the tile). */
static inline void mico_lane_flush(uint32_t v, int32_t *t, int32_t step, uint32_t s,
                                   int32_t is_signed)
{
    const uint32_t lm = s < 32u ? (1u << s) - 1u : 0xffffffffu;
    uint32_t left;
    if (!is_signed && s == 16u) {
        t[0] += (int32_t)(v & 0xffffu);
        t[step] += (int32_t)(v >> 16);
        return;
    }
    if (!is_signed && s == 8u) {
        t[0] += (int32_t)(v & 0xffu);
        t[step] += (int32_t)((v >> 8) & 0xffu);
        t[2 * step] += (int32_t)((v >> 16) & 0xffu);
        t[3 * step] += (int32_t)(v >> 24);
        return;
    }
    if (!is_signed) {
        for (left = 32u; left >= s; left -= s, t += step, v >>= s) {
            *t += (int32_t)(v & lm);
        }
        return;
    }
    for (left = 32u; left >= s; left -= s, t += step) {
        const int32_t lane = (int32_t)(v << (32u - s)) >> (32u - s);
        *t = (int32_t)((uint32_t)*t + (uint32_t)lane);
        v = (uint32_t)((int32_t)(v - (uint32_t)lane) >> s);
    }
}

/* Fields of `bits` bits at every s-th bit: the weights that share a lane word. */
static inline uint32_t mico_lane_mask(uint32_t bits, uint32_t s)
{
    uint32_t mask = 0, i;
    for (i = 0; i < 32u; i += s) {
        mask |= ((1u << bits) - 1u) << i;
    }
    return mask;
}

/* After a segment of taps: the G x NPX lane words `sums` (word g * npx + q: field group g,
 * pixel q) go into the tile: lane 0 of word (g, q) into tile[g * pp + q], lane i `step`
 * further (tile: pixel 0 of the group; `left` pixels are real). */
static MICO_UNUSED MICO_NOINLINE void mico_lanes_settle(const uint32_t *sums, int32_t g_n,
                                                        int32_t npx, int32_t *tile, int32_t pp,
                                                        int32_t step, int32_t left, uint32_t s,
                                                        int32_t is_signed)
{
    int32_t g, q;
    for (g = 0; g < g_n; g++) {
        for (q = 0; q < npx && q < left; q++) {
            mico_lane_flush(sums[g * npx + q], tile + g * pp + q, step, s, is_signed);
        }
    }
}

/* The same for unsigned lanes of 4 or 8 bits, through lanes twice as wide (`wide`: even and
 * odd lanes of each word), which go into the tile once 2^s + 1 segments or the last one are
 * in (lane 2i + e of field group g: channel (2i + e) G + g). Returns the segments waiting. */
static MICO_UNUSED MICO_NOINLINE int32_t mico_lanes_widen(const uint32_t *sums, uint32_t *wide,
                                                          int32_t segs, int32_t last,
                                                          int32_t g_n, int32_t npx,
                                                          int32_t *tile, int32_t pp,
                                                          int32_t left, uint32_t s)
{
    const uint32_t m2 = s == 4u ? 0x0f0f0f0fu : 0x00ff00ffu;
    const int32_t words = g_n * npx;
    int32_t i;
    for (i = 0; i < words; i++) {
        const uint32_t even = sums[i] & m2, odd = (sums[i] >> s) & m2;
        wide[i] = segs ? wide[i] + even : even;
        wide[words + i] = segs ? wide[words + i] + odd : odd;
    }
    if (++segs < (1 << s) + 1 && !last) {
        return segs;
    }
    mico_lanes_settle(wide, g_n, npx, tile, pp, 2 * g_n * pp, left, 2u * s, 0);
    mico_lanes_settle(wide + words, g_n, npx, tile + g_n * pp, pp, 2 * g_n * pp, left, 2u * s, 0);
    return 0;
}

/* One pixel group of NPX pixels and G field groups: the body of the block kernels. */
#define MICO_LANES_BODY(BITS, G, NPX)                                                              \
    {                                                                                              \
        const uint32_t s = (BITS) * (G), m = mico_lane_mask(BITS, s);                              \
        int32_t j0, t0, g, q;                                                                      \
        for (j0 = 0; j0 < np; j0 += (NPX)) {                                                       \
            uint32_t wide[2 * (G) * (NPX)];                                                        \
            int32_t segs = 0;                                                                      \
            for (t0 = 0; t0 < taps; t0 += n) {                                                     \
                const int32_t seg = taps - t0 < n ? taps - t0 : n;                                 \
                const uint32_t *wp = w + t0, *const wend = wp + seg;                               \
                const int16_t *xp = x + t0 * pp + j0;                                              \
                uint32_t acc[G][NPX], sums[(G) * (NPX)];                                           \
                MICO_UNROLL for (g = 0; g < (G); g++) {                                            \
                    MICO_UNROLL for (q = 0; q < (NPX); q++) {                                      \
                        acc[g][q] = 0;                                                             \
                    }                                                                              \
                }                                                                                  \
                for (; wp < wend; wp++, xp += pp) {                                                \
                    const uint32_t wv = *wp;                                                       \
                    uint32_t wl[G], xv[NPX];                                                       \
                    MICO_UNROLL for (g = 0; g < (G); g++) {                                        \
                        wl[g] = (wv >> (g * (BITS))) & m;                                          \
                    }                                                                              \
                    MICO_UNROLL for (q = 0; q < (NPX); q++) {                                      \
                        xv[q] = (uint32_t)(int32_t)xp[q];                                          \
                    }                                                                              \
                    MICO_UNROLL for (q = 0; q < (NPX); q++) {                                      \
                        MICO_UNROLL for (g = 0; g < (G); g++) {                                    \
                            acc[g][q] += wl[g] * xv[q];                                            \
                        }                                                                          \
                    }                                                                              \
                }                                                                                  \
                MICO_UNROLL for (g = 0; g < (G); g++) {                                            \
                    MICO_UNROLL for (q = 0; q < (NPX); q++) {                                      \
                        sums[g * (NPX) + q] = acc[g][q];                                           \
                    }                                                                              \
                }                                                                                  \
                if (s <= 8u && !is_signed) {                                                       \
                    segs = mico_lanes_widen(sums, wide, segs, t0 + seg >= taps, (G), (NPX),        \
                                            tile + j0, pp, np - j0, s);                            \
                } else {                                                                           \
                    mico_lanes_settle(sums, (G), (NPX), tile + j0, pp, (G) * pp, np - j0, s,       \
                                      is_signed);                                                  \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

/* A block kernel: weights of BITS bits, G field groups (lanes of s = BITS * G bits), NPX
 * pixels at a time (see MICO_LANES_BODY); n and is_signed from the layer's MicoLanes. */
typedef void (*MicoLanesFn)(const uint32_t *w, const int16_t *x, int32_t taps, int32_t pp,
                            int32_t np, int32_t n, int32_t is_signed, int32_t *tile);

#define MICO_LANES_FN(NAME, BITS, G, NPX)                                                   \
    static MICO_UNUSED MICO_NOINLINE void NAME(const uint32_t *w, const int16_t *x,         \
                                               int32_t taps, int32_t pp, int32_t np,        \
                                               int32_t n, int32_t is_signed, int32_t *tile) \
    MICO_LANES_BODY(BITS, G, NPX)

/* The (bits, G) pairs mico.quant.packing.lane_plan picks: kernels of 4 pixels (2 for G = 8:
 * 16 lane words in registers) for convolutions, of one for linear layers. */
#define MICO_LANES_EACH(X)                                                                  \
    X(1, 4, 4) X(1, 8, 2) X(2, 4, 4) X(2, 8, 2) X(4, 2, 4) X(4, 4, 4) X(8, 2, 4)
#define MICO_LANES_DEFINE(BITS, G, NPX)                                                     \
    MICO_LANES_FN(mico_lanes_w##BITS##g##G, BITS, G, NPX)                                   \
    MICO_LANES_FN(mico_lanes_w##BITS##g##G##_1, BITS, G, 1)
MICO_LANES_EACH(MICO_LANES_DEFINE)

/* tile[c * pp + j] += lane sums of the F channels of one block (w: a word per tap) over `taps`
 * taps of patch x (x[t * pp + j], np pixels; pp a multiple of the kernel's pixel group, zero
 * columns np .. pp - 1), through block kernel fn. */
static MICO_UNUSED void mico_lanes_block(MicoLanesFn fn, const uint32_t *w, const int16_t *x,
                                         int32_t taps, int32_t pp, int32_t np,
                                         const MicoLanes *l, int32_t *tile)
{
    fn(w, x, taps, pp, np, l->n, l->is_signed, tile);
}

/* tile[c * pp + j] = bias[c] + s_w * tile[c * pp + j] - q_w * cs[j] for F channels, np pixels:
 * the lane sums to the layer's sums (modulo 2^32, as the final value fits int32). */
static MICO_UNUSED void mico_lanes_finish(int32_t *tile, int32_t pp, int32_t np, int32_t bits,
                                          const int32_t *bias, const int32_t *cs)
{
    const uint32_t sw = bits == 1 ? 2u : 1u, qw = bits == 1 ? 1u : 1u << (bits - 1);
    const int32_t f = 32 / bits;
    int32_t c, j;
    for (c = 0; c < f; c++, tile += pp) {
        const uint32_t b = (uint32_t)bias[c];
        for (j = 0; j < np; j++) {
            tile[j] = (int32_t)(b + sw * (uint32_t)tile[j] - qw * (uint32_t)cs[j]);
        }
    }
}

/* The same for one channel, requantized as q says (mico_rq_apply: a multiplier and no binary
 * output, the usual case, in tight loops: the high word of the product for shifts above 32,
 * the 64-bit product below). */
static MICO_UNUSED MICO_NOINLINE void mico_lanes_requant(int32_t *v, const int32_t *cs, int32_t n,
                                                         uint32_t b, uint32_t sw, uint32_t qw,
                                                         const MicoRq *q)
{
    int32_t j;
    if (q->scaled && !q->binary && q->shift > 32) {
        const uint32_t m = (uint32_t)q->m, s = (uint32_t)(q->shift - 32), rnd = 1u << (s - 1u);
        const int32_t lo = q->lo, hi = q->hi;
        if (q->relu && lo >= 0) { /* the magnitude of a non-negative sum */
            for (j = 0; j < n; j++) {
                const int32_t r = (int32_t)(b + sw * (uint32_t)v[j] - qw * (uint32_t)cs[j]);
                int32_t y = r <= 0 ? 0
                                   : (int32_t)(((uint32_t)(((uint64_t)(uint32_t)r * m) >> 32) +
                                                rnd) >> s);
                y = y < lo ? lo : y;
                v[j] = y > hi ? hi : y;
            }
            return;
        }
        for (j = 0; j < n; j++) {
            int32_t r = (int32_t)(b + sw * (uint32_t)v[j] - qw * (uint32_t)cs[j]), y;
            uint32_t mag;
            r = q->relu && r < 0 ? 0 : r;
            mag = r < 0 ? 0u - (uint32_t)r : (uint32_t)r;
            mag = ((uint32_t)(((uint64_t)mag * m) >> 32) + rnd) >> s;
            y = r < 0 ? -(int32_t)mag : (int32_t)mag;
            y = y < lo ? lo : y;
            v[j] = y > hi ? hi : y;
        }
        return;
    }
    if (q->scaled && !q->binary) { /* a shift of at most 32: the full 64-bit product */
        const uint64_t m = (uint32_t)q->m, rnd = (uint64_t)1 << (q->shift - 1);
        const uint32_t s = (uint32_t)q->shift;
        const int32_t lo = q->lo, hi = q->hi;
        for (j = 0; j < n; j++) {
            int32_t r = (int32_t)(b + sw * (uint32_t)v[j] - qw * (uint32_t)cs[j]), y;
            uint64_t mag;
            r = q->relu && r < 0 ? 0 : r;
            mag = ((uint64_t)(r < 0 ? 0u - (uint32_t)r : (uint32_t)r) * m + rnd) >> s;
            y = mag >= 0x80000000u ? (r < 0 ? INT32_MIN : INT32_MAX)
                                   : (r < 0 ? -(int32_t)mag : (int32_t)mag);
            y = y < lo ? lo : y;
            v[j] = y > hi ? hi : y;
        }
        return;
    }
    for (j = 0; j < n; j++) {
        v[j] = mico_rq_apply(q, (int32_t)(b + sw * (uint32_t)v[j] - qw * (uint32_t)cs[j]));
    }
}

MICO_LANES_EACH(MICO_LANES_DECLARE)

/* Binary layers (mico_binary.c): 1-bit weights times 1-bit activations (unsigned or binary)
 * by AND / XOR and popcount, weight rows as words (mico.quant.packing.pack_binary_rows);
 * thr: NULL, or per output channel the smallest sum stored as bit 1 (1-bit outputs). _swar
 * counts bits in plain C, _cpop with __builtin_popcount (Zbb's cpop). */
void mico_qconv2d_bin_swar(const MicoConv2d *p, const int32_t *thr, const void *in, void *out);
void mico_qconv2d_bin_cpop(const MicoConv2d *p, const int32_t *thr, const void *in, void *out);
void mico_qlinear_bin_swar(const MicoLinear *p, const int32_t *thr, const void *in, void *out);
void mico_qlinear_bin_cpop(const MicoLinear *p, const int32_t *thr, const void *in, void *out);

#endif /* MICO_NN_H */
