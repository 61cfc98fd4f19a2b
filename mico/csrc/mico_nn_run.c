/*
 * mico_nn_run.c - the run helpers of the integer kernels (see mico_nn.h): reading and writing
 * runs of packed codes, and requantizing runs of accumulators. One copy per program: every
 * kernel source calls these instead of carrying its own.
 */
#include "mico_nn.h"

/* Run reader: n codes from element `start` of a tensor stored in format f into dst. 8-bit
 * codes are copied; 1-, 2- and 4-bit codes go a byte at a time (table-free: the byte is XORed
 * once, then each field masked) once the run reaches a byte boundary; other widths and the
 * head / tail of a run go through a 32-bit bit buffer that reads each byte holding a needed
 * bit exactly once (never a byte past the run). */
#define MICO_DEFINE_UNPACK(NAME, T)                                                           \
    void NAME(const void *buf, size_t start, int32_t n, MicoFmt f, T *dst)        \
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
void mico_unpack_i32(const void *buf, size_t start, int32_t n, MicoFmt f,
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
void mico_pack(void *buf, size_t start, const int32_t *src, int32_t n, MicoFmt f)
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
void mico_unpack_s8(const void *buf, size_t start, int32_t n, int32_t bits,
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

/* The same, with the usual case (a multiplier whose shift is above 32, not binary) in a tight
 * loop: for kernels that requantize long runs. */
void mico_rq_run_fast(const MicoRq *q, int32_t *v, int32_t n)
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
