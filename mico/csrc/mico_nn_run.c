/*
 * mico_nn_run.c - the run helpers of the integer kernels (see mico_nn.h): reading and writing
 * runs of packed codes, and requantizing runs of accumulators. One copy per program: every
 * kernel source calls these instead of carrying its own.
 */
#include "mico_nn.h"

/* Run reader NAME: n codes from element `start` of a tensor stored in format f into dst. 8-bit
 * codes are copied. Once the run reaches a group boundary, codes go a group at a time: a byte
 * of 1-, 2- or 4-bit codes (table-free: the byte is XORed once, then each field masked), or
 * the `bits` bytes of 8 codes of 3, 5, 6 or 7 bits (read into two words, the fields taken by
 * shifts). Short runs and the head and tail of a run go through a 32-bit bit buffer. Every
 * byte holding a needed bit is read exactly once, and never a byte past the run. The three
 * parts are separate functions so that a short run does not pay for the group loops'
 * registers. SCOPE: empty (external) or static. */
#define MICO_DEFINE_UNPACK(SCOPE, NAME, T)                                                    \
    /* NAME##_bits: codes start .. start + n - 1 through a 32-bit bit buffer that reads each byte \
     * holding a needed bit once. */                                                          \
    static MICO_NOINLINE void NAME##_bits(const uint8_t *q, size_t start, int32_t n, MicoFmt f, \
                                          T *dst)                                             \
    {                                                                                         \
        const MicoFieldMap m = mico_field_map(f);                                             \
        const size_t bit = start * (size_t)m.bits;                                            \
        uint32_t acc, avail = 8u - (uint32_t)(bit & 7u);                                      \
        int32_t i;                                                                            \
        q += bit >> 3;                                                                        \
        acc = (uint32_t)*q++ >> (bit & 7u);                                                   \
        for (i = 0; i < n; i++) {                                                             \
            if (avail < m.bits) {                                                             \
                acc |= (uint32_t)*q++ << avail;                                               \
                avail += 8u;                                                                  \
            }                                                                                 \
            dst[i] = (T)((int32_t)(((acc & m.mask) ^ m.x) << m.sh) - m.o);                    \
            acc >>= m.bits;                                                                   \
            avail -= m.bits;                                                                  \
        }                                                                                     \
    }                                                                                         \
                                                                                              \
    /* NAME##_groups: n codes (whole groups) from byte q: a byte at a time for 1-, 2- and 4-bit \
     * codes (x repeated in every field of it), `bits` bytes of 8 codes otherwise. */         \
    static MICO_NOINLINE void NAME##_groups(const uint8_t *q, int32_t n, MicoFmt f, T *dst)   \
    {                                                                                         \
        const MicoFieldMap m = mico_field_map(f);                                             \
        T *const end = dst + n;                                                               \
        if (f.bits == 4) {                                                                    \
            const uint32_t xx = m.x * 0x11u;                                                  \
            for (; dst < end; dst += 2) {                                                     \
                const uint32_t u = (uint32_t)*q++ ^ xx;                                       \
                dst[0] = (T)((int32_t)(u & 15u) - m.o);                                       \
                dst[1] = (T)((int32_t)(u >> 4) - m.o);                                        \
            }                                                                                 \
        } else if (f.bits == 2) {                                                             \
            const uint32_t xx = m.x * 0x55u;                                                  \
            for (; dst < end; dst += 4) {                                                     \
                const uint32_t u = (uint32_t)*q++ ^ xx;                                       \
                dst[0] = (T)((int32_t)(u & 3u) - m.o);                                        \
                dst[1] = (T)((int32_t)((u >> 2) & 3u) - m.o);                                 \
                dst[2] = (T)((int32_t)((u >> 4) & 3u) - m.o);                                 \
                dst[3] = (T)((int32_t)(u >> 6) - m.o);                                        \
            }                                                                                 \
        } else if (f.bits == 1) { /* unsigned {0, 1}, or binary 2f - 1 */                     \
            const uint32_t one = 1u << m.sh;                                                  \
            for (; dst < end; dst += 8) {                                                     \
                const uint32_t u = (uint32_t)*q++ << m.sh;                                    \
                dst[0] = (T)((int32_t)(u & one) - m.o);                                       \
                dst[1] = (T)((int32_t)((u >> 1) & one) - m.o);                                \
                dst[2] = (T)((int32_t)((u >> 2) & one) - m.o);                                \
                dst[3] = (T)((int32_t)((u >> 3) & one) - m.o);                                \
                dst[4] = (T)((int32_t)((u >> 4) & one) - m.o);                                \
                dst[5] = (T)((int32_t)((u >> 5) & one) - m.o);                                \
                dst[6] = (T)((int32_t)((u >> 6) & one) - m.o);                                \
                dst[7] = (T)((int32_t)((u >> 7) & one) - m.o);                                \
            }                                                                                 \
        } else { /* 3, 5, 6, 7 bits: lo holds codes 0..3 of a group, lo and hi codes 4..7 */  \
            for (; dst < end; dst += 8) {                                                     \
                uint32_t lo = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16;    \
                uint32_t hi = 0, w, j;                                                        \
                if (m.bits > 3u) {                                                            \
                    lo |= (uint32_t)q[3] << 24;                                               \
                    hi = (uint32_t)q[4];                                                      \
                    hi |= m.bits > 5u ? (uint32_t)q[5] << 8 : 0u;                             \
                    hi |= m.bits > 6u ? (uint32_t)q[6] << 16 : 0u;                            \
                }                                                                             \
                q += m.bits;                                                                  \
                for (j = 0, w = lo; j < 8u; j++, w >>= m.bits) {                              \
                    if (j == 4u) {                                                            \
                        w = (lo >> (4u * m.bits)) | (hi << (32u - 4u * m.bits));              \
                    }                                                                         \
                    dst[j] = (T)((int32_t)((w & m.mask) ^ m.x) - m.o);                        \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
                                                                                              \
    SCOPE void NAME(const void *buf, size_t start, int32_t n, MicoFmt f, T *dst)              \
    {                                                                                         \
        const uint8_t *q = (const uint8_t *)buf;                                              \
        int32_t i, grp, head, mid;                                                            \
        if (f.bits == 8 && f.is_signed) {                                                     \
            const int8_t *s = (const int8_t *)buf + start;                                    \
            for (i = 0; i < n; i++) {                                                         \
                dst[i] = (T)s[i];                                                             \
            }                                                                                 \
            return;                                                                           \
        }                                                                                     \
        if (f.bits == 8 && f.zero) { /* asymmetric: field - zero point */                    \
            for (q += start, i = 0; i < n; i++) {                                             \
                dst[i] = (T)((int32_t)q[i] - f.zero);                                         \
            }                                                                                 \
            return;                                                                           \
        }                                                                                     \
        if (f.bits == 8) {                                                                    \
            for (q += start, i = 0; i < n; i++) {                                             \
                dst[i] = (T)q[i];                                                             \
            }                                                                                 \
            return;                                                                           \
        }                                                                                     \
        if (n <= 0) {                                                                         \
            return;                                                                           \
        }                                                                                     \
        grp = mico_codes_per_byte(f.bits) > 1 ? mico_codes_per_byte(f.bits) : 8;              \
        if (n < 2 * grp) {                                                                    \
            NAME##_bits(q, start, n, f, dst);                                                 \
            return;                                                                           \
        }                                                                                     \
        head = (grp - (int32_t)(start & (size_t)(grp - 1))) & (grp - 1);                      \
        mid = (n - head) & ~(grp - 1);                                                        \
        if (head > 0) {                                                                       \
            NAME##_bits(q, start, head, f, dst);                                              \
        }                                                                                     \
        NAME##_groups(q + (start + (size_t)head) * (size_t)f.bits / 8u, mid, f, dst + head);  \
        if (head + mid < n) {                                                                 \
            NAME##_bits(q, start + (size_t)(head + mid), n - head - mid, f, dst + head + mid); \
        }                                                                                     \
    }

/* mico_unpack: codes (bits 1..8) to int16_t. */
MICO_DEFINE_UNPACK(, mico_unpack, int16_t)
/* mico_unpack_i32: any tensor to int32_t: int32 values copied, codes through int16 runs on the
 * stack (one copy of the run reader in flash; widening costs a load and a store per code). */
void mico_unpack_i32(const void *buf, size_t start, int32_t n, MicoFmt f, int32_t *dst)
{
    int16_t t[32];
    int32_t i, j;
    if (f.bits == 32) {
        const int32_t *s = (const int32_t *)buf + start;
        for (i = 0; i < n; i++) {
            dst[i] = s[i];
        }
        return;
    }
    for (i = 0; i < n; i += 32) {
        const int32_t k = n - i < 32 ? n - i : 32;
        mico_unpack(buf, start + (size_t)i, k, f, t);
        for (j = 0; j < k; j++) {
            dst[i + j] = t[j];
        }
    }
}

/* Store n codes (already in the format's range; binary as -1 / +1) at elements start.. of a
 * tensor in format f; only the bits of those elements change. 8-bit codes and int32 values are
 * stored as they are, 1-, 2- and 4-bit codes a whole byte at a time once the run reaches a byte
 * boundary; other widths and the head / tail of a run go through a bit buffer (the first and
 * last bytes are read, merged and written back). */
void mico_pack(void *buf, size_t start, const int32_t *src, int32_t n, MicoFmt f)
{
    uint8_t *q = (uint8_t *)buf;
    int32_t i = 0, head = n, per;
    size_t bit;
    uint32_t acc, used;
    MicoFieldMap m;
    if (n <= 0) {
        return;
    }
    if (f.zero && !f.is_signed && f.bits == 8) { /* asymmetric bytes: code + zero */
        for (q += start; i < n; i++) {
            q[i] = (uint8_t)((uint32_t)(src[i] + f.zero) & 0xffu);
        }
        return;
    }
    if (f.zero && !f.is_signed && f.bits <= 8) { /* asymmetric: fields code + zero, 32 at a time */
        int32_t t[32], j;
        MicoFmt u = f;
        u.zero = 0;
        for (; i < n; i += 32) {
            const int32_t k = n - i < 32 ? n - i : 32;
            for (j = 0; j < k; j++) {
                t[j] = src[i + j] + f.zero;
            }
            mico_pack(buf, start + (size_t)i, t, k, u);
        }
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
    m = mico_field_map(f);
    per = mico_codes_per_byte(f.bits);
    if (per > 1 && n >= 2 * per) { /* up to a byte boundary */
        head = (per - (int32_t)(start & (size_t)(per - 1))) & (per - 1);
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
        head = n - ((n - i) & (per - 1)); /* whole bytes, then the tail */
        if (f.bits == 4) {
            for (; i < head; i += 2) {
                *q++ = (uint8_t)(((uint32_t)src[i] & 15u) | ((uint32_t)src[i + 1] & 15u) << 4);
            }
        } else if (f.bits == 2) {
            for (; i < head; i += 4) {
                *q++ = (uint8_t)(((uint32_t)src[i] & 3u) | ((uint32_t)src[i + 1] & 3u) << 2 |
                                 ((uint32_t)src[i + 2] & 3u) << 4 | ((uint32_t)src[i + 3] << 6));
            }
        } else { /* 1 bit: the field is 1 for code 1 (unsigned) or +1 (binary) */
            for (; i < head; i += 8) {
                *q++ = (uint8_t)((uint32_t)(src[i] > 0) | (uint32_t)(src[i + 1] > 0) << 1 |
                                 (uint32_t)(src[i + 2] > 0) << 2 |
                                 (uint32_t)(src[i + 3] > 0) << 3 |
                                 (uint32_t)(src[i + 4] > 0) << 4 |
                                 (uint32_t)(src[i + 5] > 0) << 5 |
                                 (uint32_t)(src[i + 6] > 0) << 6 | (uint32_t)(src[i + 7] > 0) << 7);
            }
        }
        head = n;
    }
    if (used) { /* the last byte: keep the bits past the run */
        *q = (uint8_t)(((uint32_t)*q & (0xffu << used) & 0xffu) | acc);
    }
}

/* n signed codes (weights) from element start, as int8_t: a run reader of its own, since the
 * rows of weights of odd widths are unpacked on every chunk of a convolution or linear layer. */
MICO_DEFINE_UNPACK(static, mico_unpack_int8, int8_t)

void mico_unpack_s8(const void *buf, size_t start, int32_t n, int32_t bits, int8_t *dst)
{
    MicoFmt f;
    f.bits = bits;
    f.is_signed = 1;
    f.zero = 0;
    mico_unpack_int8(buf, start, n, f, dst);
}

/* n codes of row `row` (an element index) at columns ix0 .. ix0 + n - 1, any of which may lie
 * outside [0, width): those read as `fill`. */
void mico_unpack_padded(const void *buf, size_t row, int32_t width, int32_t ix0,
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

/* v[i] = mico_rq_apply(q, v[i]) for i < n. */
void mico_rq_run(const MicoRq *q, int32_t *v, int32_t n)
{
    int32_t i;
    for (i = 0; i < n; i++) {
        v[i] = mico_rq_apply(q, v[i]);
    }
}

/* A value (after the ReLU) requantized by a multiplier m of shift above 32, s = shift - 32,
 * rnd = 2^(s - 1) (mico_rescale: the low word of the product only matters below the rounding
 * bit). */
static inline int32_t mico_rq_long(int32_t r, uint32_t m, uint32_t s, uint32_t rnd)
{
    uint32_t mag = r < 0 ? 0u - (uint32_t)r : (uint32_t)r;
    mag = ((uint32_t)(((uint64_t)mag * m) >> 32) + rnd) >> s;
    return r < 0 ? -(int32_t)mag : (int32_t)mag;
}

/* The same for a shift s of 1 to 32 (a real multiplier of 2^-1 or more: sums of few products,
 * or binary weights' sums), rnd = 2^(s - 1): the 64-bit product's rounding and shift on two
 * words, saturating where the quotient leaves int32 (mico_rescale). */
static inline int32_t mico_rq_short(int32_t r, uint32_t m, uint32_t s, uint32_t rnd)
{
    const uint32_t mag = r < 0 ? 0u - (uint32_t)r : (uint32_t)r;
    const uint64_t prod = (uint64_t)mag * m + rnd;
    const uint32_t ph = (uint32_t)(prod >> 32), pl = (uint32_t)prod;
    uint32_t quot;
    if ((ph >> (s - 1u)) != 0u) { /* the quotient is 2^31 or more */
        return r < 0 ? INT32_MIN : INT32_MAX;
    }
    quot = (ph << (32u - s)) | ((pl >> (s - 1u)) >> 1);
    return r < 0 ? -(int32_t)quot : (int32_t)quot;
}

/* The run's values requantized (ReLU, rescale, clamp) and passed to STORE(i, r): the two
 * multiplier forms in their own loops. */
#define MICO_RQ_LOOP(STORE)                                                                 \
    do {                                                                                    \
        const uint32_t m_ = (uint32_t)q->m;                                                 \
        const int32_t relu_ = q->relu, lo_ = q->lo, hi_ = q->hi;                            \
        int32_t i_, r_;                                                                     \
        if (q->shift > 32) {                                                                \
            const uint32_t s_ = (uint32_t)(q->shift - 32), rnd_ = 1u << (s_ - 1u);          \
            for (i_ = 0; i_ < n; i_++) {                                                    \
                r_ = mico_rq_long(relu_ && v[i_] < 0 ? 0 : v[i_], m_, s_, rnd_);            \
                r_ = r_ < lo_ ? lo_ : r_;                                                   \
                STORE(i_, r_ > hi_ ? hi_ : r_);                                             \
            }                                                                               \
        } else {                                                                            \
            const uint32_t s_ = (uint32_t)q->shift, rnd_ = 1u << (s_ - 1u);                 \
            for (i_ = 0; i_ < n; i_++) {                                                    \
                r_ = mico_rq_short(relu_ && v[i_] < 0 ? 0 : v[i_], m_, s_, rnd_);           \
                r_ = r_ < lo_ ? lo_ : r_;                                                   \
                STORE(i_, r_ > hi_ ? hi_ : r_);                                             \
            }                                                                               \
        }                                                                                   \
    } while (0)

/* Whether a run's multiplier takes the tight loops: scaled, not binary, a shift of 1 or more. */
static inline int mico_rq_tight(const MicoRq *q)
{
    return q->scaled && !q->binary && q->shift >= 1;
}

#define MICO_RQ_TO_V(i, r) (v[i] = (r))

/* The same, with the usual cases (a multiplier, not binary) in tight loops: for kernels that
 * requantize long runs. */
void mico_rq_run_fast(const MicoRq *q, int32_t *v, int32_t n)
{
    if (!mico_rq_tight(q)) {
        mico_rq_run(q, v, n);
        return;
    }
    MICO_RQ_LOOP(MICO_RQ_TO_V);
}

/* mico_rq_run_fast then mico_pack (v is left undefined), with 8-bit codes requantized and
 * stored in one loop: each value is written once, as its byte (an unsigned format's zero
 * point added, as mico_pack does). */
void mico_rq_pack(const MicoRq *q, int32_t *v, int32_t n, void *buf, size_t start, MicoFmt f)
{
    uint8_t *const o = (uint8_t *)buf + start;
    const uint32_t zero = f.is_signed ? 0u : (uint32_t)f.zero;
    if (f.bits != 8 || !mico_rq_tight(q)) {
        mico_rq_run_fast(q, v, n);
        mico_pack(buf, start, v, n, f);
        return;
    }
#define MICO_RQ_TO_BYTE(i, r) (o[i] = (uint8_t)((uint32_t)(r) + zero))
    MICO_RQ_LOOP(MICO_RQ_TO_BYTE);
#undef MICO_RQ_TO_BYTE
}
