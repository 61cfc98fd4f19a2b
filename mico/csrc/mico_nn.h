/*
 * mico_nn.h - integer kernels of mico-generated models (plain C99, no allocation).
 *
 * The arithmetic follows mico/quant/arithmetic.py exactly:
 *  - codes: unsigned b-bit in [0, 2^b-1]; signed b-bit (b >= 2) in [-(2^(b-1)-1), 2^(b-1)-1];
 *    signed 1-bit codes are binary {-1, +1};
 *  - input quantization: float32 x * inv_scale, rounded half away from zero (an exact test on
 *    the fractional part, never floor(|v| + 0.5)), clamped;
 *  - requantization: v * m / 2^shift in 64-bit integers, rounded half away from zero, clamped;
 *  - storage: activations and weights alike are one little-endian bit stream per tensor, code i
 *    at bits [i*b, (i+1)*b), LSB first, b-bit two's complement (signed) or plain binary
 *    (unsigned; binary {-1, +1} as 0 / 1). A 4-bit tensor of n codes takes ceil(n*4/8) bytes.
 *    int32 tensors (accumulators) are plain int32_t arrays.
 *
 * Elements are read and written through a format descriptor MicoFmt, so every width 1..8,
 * signed or not, works everywhere: one at a time with mico_load / mico_store, or a run at a
 * time with mico_unpack / mico_unpack_i32 / mico_pack, which the kernels' hot loops use. The
 * run helpers take whole bytes at a time (no tables, no wider loads, so no alignment needs)
 * for 8-bit codes, and for 1-, 2- and 4-bit codes once the run reaches a byte boundary; other
 * widths and the head / tail elements of a run stream through a 32-bit bit buffer.
 */
#ifndef MICO_NN_H
#define MICO_NN_H

#include <stddef.h>
#include <stdint.h>

/* MICO_NOINLINE keeps a hot inner loop in its own function (and its own registers);
 * MICO_HELPER makes a run helper one out-of-line copy per kernel source (the helpers are
 * called from many places: inlining them everywhere costs flash for nothing). */
#if defined(__GNUC__)
#define MICO_NOINLINE __attribute__((noinline))
#define MICO_HELPER static __attribute__((noinline, unused))
#else
#define MICO_NOINLINE
#define MICO_HELPER static inline
#endif

/* Storage of a tensor's elements. */
typedef struct {
    int32_t bits;      /* 1..8: packed codes; 32: int32_t */
    int32_t is_signed; /* signed codes (with bits == 1: binary {-1, +1}) */
} MicoFmt;

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
        return f.is_signed ? (int32_t)((const int8_t *)buf)[i] : (int32_t)p[i];
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
        return (int32_t)field;
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
    if (f.bits == 8) {
        p[i] = (uint8_t)((uint32_t)v & 0xffu);
        return;
    }
    if (f.bits == 32) {
        ((int32_t *)buf)[i] = v;
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
 * x = sh = o = 0; b-bit two's complement x = o = 2^(b-1), sh = 0; binary {-1, +1} (signed
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
    }
    return m;
}

/* The field a code is stored as (binary {-1, +1}: 1 for +1, 0 for -1). */
static inline uint32_t mico_code_field(int32_t v, const MicoFieldMap *m)
{
    return m->sh ? (v > 0 ? 1u : 0u) : ((uint32_t)v & m->mask);
}

/* Run reader: n codes from element `start` of a tensor stored in format f into dst. 8-bit
 * codes are copied; 1-, 2- and 4-bit codes go a byte at a time (table-free: the byte is XORed
 * once, then each field masked) once the run reaches a byte boundary; other widths and the
 * head / tail of a run go through a 32-bit bit buffer that reads each byte holding a needed
 * bit exactly once (never a byte past the run). */
#define MICO_DEFINE_UNPACK(NAME, T)                                                           \
    MICO_HELPER void NAME(const void *buf, size_t start, int32_t n, MicoFmt f, T *dst)        \
    {                                                                                         \
        const uint8_t *q = (const uint8_t *)buf;                                              \
        const MicoFieldMap m = mico_field_map(f);                                             \
        const int32_t per = 8 / f.bits;                                                       \
        int32_t i = 0, head = n;                                                              \
        size_t bit;                                                                           \
        uint32_t acc = 0, avail = 0;                                                          \
        if (f.bits == 8) {                                                                    \
            const int8_t *s = (const int8_t *)buf + start;                                    \
            q += start;                                                                       \
            for (; i < n; i++) {                                                              \
                dst[i] = f.is_signed ? (T)s[i] : (T)q[i];                                     \
            }                                                                                 \
            return;                                                                           \
        }                                                                                     \
        if (per * f.bits == 8 && n >= 2 * per) { /* 1, 2, 4 bits: up to a byte boundary */    \
            head = (int32_t)((size_t)(per - (int32_t)(start % (size_t)per)) % (size_t)per);   \
        }                                                                                     \
        bit = start * (size_t)m.bits;                                                         \
        q += bit >> 3;                                                                        \
        if (head > 0) {                                                                       \
            avail = 8u - (uint32_t)(bit & 7u);                                                \
            acc = (uint32_t)*q++ >> (bit & 7u);                                               \
        }                                                                                     \
        for (;;) {                                                                            \
            for (; i < head; i++) { /* the bit buffer */                                      \
                if (avail < m.bits) {                                                         \
                    acc |= (uint32_t)*q++ << avail;                                           \
                    avail += 8u;                                                              \
                }                                                                             \
                dst[i] = (T)((int32_t)(((acc & m.mask) ^ m.x) << m.sh) - m.o);                \
                acc >>= m.bits;                                                               \
                avail -= m.bits;                                                              \
            }                                                                                 \
            if (head == n) {                                                                  \
                return;                                                                       \
            }                                                                                 \
            head = n - (n - i) % per; /* whole bytes, then the tail */                        \
            for (; i < head;) { /* x repeated in every field of the byte */                   \
                uint32_t u = (uint32_t)*q++ ^ (m.x * (f.bits == 4 ? 0x11u : 0x55u)), j;       \
                for (j = 0; j < (uint32_t)per; j++, i++, u >>= m.bits) {                      \
                    dst[i] = (T)((int32_t)((u & m.mask) << m.sh) - m.o);                      \
                }                                                                             \
            }                                                                                 \
            head = n;                                                                         \
            acc = avail = 0;                                                                  \
        }                                                                                     \
    }

/* mico_unpack: codes (bits 1..8) to int16_t. */
MICO_DEFINE_UNPACK(mico_unpack, int16_t)
/* mico_unpack_codes_i32: codes (bits 1..8) to int32_t. */
MICO_DEFINE_UNPACK(mico_unpack_codes_i32, int32_t)

/* mico_unpack_i32: any tensor (codes, or int32: copied) to int32_t. */
MICO_HELPER void mico_unpack_i32(const void *buf, size_t start, int32_t n, MicoFmt f,
                                 int32_t *dst)
{
    int32_t i;
    if (f.bits == 32) {
        const int32_t *s = (const int32_t *)buf + start;
        for (i = 0; i < n; i++) {
            dst[i] = s[i];
        }
        return;
    }
    mico_unpack_codes_i32(buf, start, n, f, dst);
}

/* Store n codes (already in the format's range; binary as -1 / +1) at elements start.. of a
 * tensor in format f; only the bits of those elements change. 8-bit codes and int32 values are
 * stored as they are, 1-, 2- and 4-bit codes a whole byte at a time once the run reaches a byte
 * boundary; other widths and the head / tail of a run go through a bit buffer (the first and
 * last bytes are read, merged and written back). */
MICO_HELPER void mico_pack(void *buf, size_t start, const int32_t *src, int32_t n, MicoFmt f)
{
    uint8_t *q = (uint8_t *)buf;
    const MicoFieldMap m = mico_field_map(f);
    const int32_t per = 8 / f.bits;
    int32_t i = 0, head = n;
    size_t bit;
    uint32_t acc, used;
    if (n <= 0) {
        return;
    }
    if (f.bits == 8) {
        for (q += start; i < n; i++) {
            q[i] = (uint8_t)((uint32_t)src[i] & 0xffu);
        }
        return;
    }
    if (f.bits == 32) {
        int32_t *d = (int32_t *)buf + start;
        for (; i < n; i++) {
            d[i] = src[i];
        }
        return;
    }
    if (per * f.bits == 8 && n >= 2 * per) { /* 1, 2, 4 bits: up to a byte boundary */
        head = (int32_t)((size_t)(per - (int32_t)(start % (size_t)per)) % (size_t)per);
    }
    bit = start * (size_t)m.bits;
    q += bit >> 3;
    used = (uint32_t)(bit & 7u);
    acc = head > 0 ? (uint32_t)*q & ((1u << used) - 1u) : 0u;
    for (;;) {
        for (; i < head; i++) { /* the bit buffer */
            acc |= mico_code_field(src[i], &m) << used;
            used += m.bits;
            if (used >= 8u) {
                *q++ = (uint8_t)(acc & 0xffu);
                acc >>= 8;
                used -= 8u;
            }
        }
        if (head == n) {
            break;
        }
        head = n - (n - i) % per; /* whole bytes, then the tail */
        for (; i < head;) {
            uint32_t b = 0, sh;
            for (sh = 0; sh < 8u; sh += m.bits, i++) {
                b |= mico_code_field(src[i], &m) << sh;
            }
            *q++ = (uint8_t)b;
        }
        head = n;
    }
    if (used) { /* the last byte: keep the bits past the run */
        *q = (uint8_t)(((uint32_t)*q & (0xffu << used) & 0xffu) | acc);
    }
}

/* n signed codes (weights) from element start, narrowed to int8_t. */
MICO_HELPER void mico_unpack_s8(const void *buf, size_t start, int32_t n, int32_t bits,
                                int8_t *dst)
{
    int16_t t[16];
    MicoFmt f;
    int32_t i, j;
    f.bits = bits;
    f.is_signed = 1;
    for (i = 0; i < n; i += 16) {
        const int32_t k = n - i < 16 ? n - i : 16;
        mico_unpack(buf, start + (size_t)i, k, f, t);
        for (j = 0; j < k; j++) {
            dst[i + j] = (int8_t)t[j];
        }
    }
}

/* n codes of row `row` (an element index) at columns ix0 .. ix0 + n - 1, any of which may lie
 * outside [0, width): those read as `fill`. */
MICO_HELPER void mico_unpack_padded(const void *buf, size_t row, int32_t width, int32_t ix0,
                                    int32_t n, int16_t fill, MicoFmt f, int16_t *dst)
{
    int32_t lead = ix0 < 0 ? -ix0 : 0, mid, i;
    if (lead > n) {
        lead = n;
    }
    for (i = 0; i < lead; i++) {
        dst[i] = fill;
    }
    mid = width - (ix0 + lead);
    if (mid > n - lead) {
        mid = n - lead;
    }
    if (mid > 0) {
        mico_unpack(buf, row + (size_t)(ix0 + lead), mid, f, dst + lead);
    } else {
        mid = 0;
    }
    for (i = lead + mid; i < n; i++) {
        dst[i] = fill;
    }
}

/* Code i of a packed stream of signed b-bit codes (weights). */
static inline int32_t mico_unpack_signed(const uint8_t *packed, uint32_t i, uint32_t bits)
{
    MicoFmt f;
    f.bits = (int32_t)bits;
    f.is_signed = 1;
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

/* v[i] = mico_rq_apply(q, v[i]) for i < n. */
MICO_HELPER void mico_rq_run(const MicoRq *q, int32_t *v, int32_t n)
{
    int32_t i;
    for (i = 0; i < n; i++) {
        v[i] = mico_rq_apply(q, v[i]);
    }
}

/* The same, with the usual case (a multiplier whose shift is above 32, not binary) in a tight
 * loop: for kernels that requantize long runs. */
MICO_HELPER void mico_rq_run_fast(const MicoRq *q, int32_t *v, int32_t n)
{
    const uint32_t m = (uint32_t)q->m, s = q->shift > 32 ? (uint32_t)(q->shift - 32) : 1u;
    const uint32_t rnd = 1u << (s - 1u);
    const int32_t relu = q->relu, lo = q->lo, hi = q->hi;
    int32_t i;
    if (!q->scaled || q->binary || q->shift <= 32) {
        mico_rq_run(q, v, n);
        return;
    }
    for (i = 0; i < n; i++) {
        int32_t r = relu && v[i] < 0 ? 0 : v[i];
        uint32_t mag = r < 0 ? 0u - (uint32_t)r : (uint32_t)r;
        mag = ((uint32_t)(((uint64_t)mag * m) >> 32) + rnd) >> s;
        r = r < 0 ? -(int32_t)mag : (int32_t)mag;
        r = r < lo ? lo : r;
        v[i] = r > hi ? hi : r;
    }
}

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
} MicoConv2d;

typedef struct {
    int32_t rows, in_features, out_features;
    MicoFmt in_fmt;
    int32_t w_bits; /* weights: signed codes, packed (out x in, row-major) */
    const uint8_t *weight;
    const int32_t *bias;
    MicoOut out; /* per-channel multipliers index the output feature */
} MicoLinear;

typedef struct {
    int32_t channels, in_h, in_w, out_h, out_w;
    int32_t k_h, k_w, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
    MicoFmt fmt; /* input and output */
} MicoMaxPool2d;

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

/* float32 inputs to codes: round half away from zero of x * inv_scale, clamped. */
void mico_quantize_f32(const float *x, void *codes, size_t n, float inv_scale, MicoFmt fmt,
                       int32_t qmin, int32_t qmax);

void mico_qconv2d(const MicoConv2d *p, const void *in, void *out);
void mico_qlinear(const MicoLinear *p, const void *in, void *out);
void mico_maxpool2d(const MicoMaxPool2d *p, const void *in, void *out);
void mico_avgpool2d(const MicoAvgPool2d *p, const void *in, void *out);
void mico_mean(const MicoMean *p, const void *in, void *out);
void mico_requant(const MicoRequant *p, const void *in, void *out);
void mico_add(const MicoAdd *p, const void *a, const void *b, void *out);
void mico_concat_part(const MicoConcatPart *p, const void *in, void *out);
void mico_copy(const MicoCopy *p, const void *in, void *out);

#endif /* MICO_NN_H */
