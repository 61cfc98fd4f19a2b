/* Depthwise 3x3 convolution in "pixel lanes" (NCHW, batch 1, groups == in_c == out_c).
 *
 * Each output channel reads its own input channel, so the channel lanes of mico_conv2d.c
 * (F output channels per weight word) do not apply. Here the lanes run along a row instead:
 * one 32-bit word holds k = 32 / s pixels of one channel, each in its own s-bit lane, and ONE
 * multiply by the tap's scalar weight gives k products at once.
 *
 * Layout of an input row (built once per row and channel, from its packed codes): the row is
 * cut into chunks of P = k * Q pixels (Q = s / b for b-bit codes, so that a chunk is k * s
 * bits of the packed stream: one read). Word q of a chunk (q < Q) holds, in lane i, the pixel
 * i * Q + q of the chunk: it is (chunk bits >> (b * q)) & M, M the b-bit fields every s bits --
 * two instructions. A horizontal tap moves to the next word (pixel + 1), and across the ends
 * of the chunk to the neighbour word shifted by one lane; those neighbours are built once per
 * chunk (E(-1), E(Q), E(Q + 1)), so every tap of every output is a word load:
 *   chunk words [E(-1), R(0) .. R(Q - 1), E(Q), E(Q + 1)]  (Q + 3 words).
 * An output word (k outputs: output pixel c * Po + i * Qo + q of chunk c, Qo = Q / stride_w,
 * Po = k * Qo) reads word stride_w * q + kx - pad_w of the three input rows' chunks c.
 *
 * Lanes hold signed sums without any weight offset: with lane values v_i (signed activation
 * codes are made v = (f ^ h) - h after the words are built, so padding stays 0), a word is
 * sum_i v_i 2^(s i) modulo 2^32, and multiplying by a signed weight and adding are exact modulo
 * 2^32. The accumulator starts at B * (1 + 2^s + ...), B = -(the channel's smallest possible
 * sum); every lane then ends in [0, 2^s) (mico.codegen.dwconv_plan proves the width fits for
 * every channel of the layer), so lane i is (acc >> (s i)) & (2^s - 1), and the channel's sum
 * is that plus bias - B. Taps outside the image (padding rows) take weight 0; padding columns
 * and columns past the row are zero lanes. Lanes of 32 bits (k = 1) are the plain case, which
 * W8A8 layers take (Q = 32 / b pixels per chunk, each in its own word).
 *
 * Outputs are requantized straight from the lanes, in one of these modes per channel:
 *  1 / 2: ReLU and a multiplier (shift above 32: the high word of the product; at most 32 with
 *         m < 2^shift: the multiplier pre-shifted), lane by lane;
 *  3 / 4: outputs of at most 4 codes (1 and 2 bits) by thresholds, all lanes at once, when the
 *         lanes keep a spare top bit (mico_dwl_levels); 4: the output fields are put straight
 *         into the packed output when its width is b * stride_w (the lanes then line up with
 *         the output's bits);
 *  5 / 6: 1 / 2 with one pixel per word and 8-bit outputs, stored as bytes;
 *  0:     anything else: the sums, then mico_rq_run_fast.
 * Whole padded planes (when they fit the ring) are built and computed in one call per channel.
 *
 * IN-PLACE CONTRACT: as mico_conv2d.c (channel by channel, output rows in increasing order;
 * an input row is read when the first output row under it is computed, never after a later
 * output row was stored). Stack: about 3.5 KB (a ring of three rows of lane words, a row of
 * sums). Entry points mico_qconv2d_dwl_s<s>, one per lane width, chosen at generation time
 * (mico.codegen.dwconv_plan); layers the ring cannot hold go to mico_qconv2d_depthwise3x3. */
#include "mico_nn.h"

#define MICO_DWL_RING 640 /* uint32 lane words of the three cached input rows */
#define MICO_DWL_VALS 320 /* int32 sums of one output row (whole chunks) */
#if defined(__GNUC__)
#define MICO_DWL_INLINE __attribute__((always_inline)) inline /* constants of each lane width */
#else
#define MICO_DWL_INLINE inline
#endif

/* x << n for n in [0, 32] (a shift by 32 is zero). */
static inline uint32_t mico_dwl_shl(uint32_t x, uint32_t n)
{
    return n >= 32u ? 0u : x << n;
}

/* n (<= 32) bits of a packed stream from bit `bit`, reading only the bytes that hold them. */
static inline uint32_t mico_dwl_bits(const uint8_t *buf, size_t bit, uint32_t n)
{
    const uint8_t *p = buf + (bit >> 3);
    const uint32_t off = (uint32_t)(bit & 7u), bytes = (off + n + 7u) >> 3;
    uint32_t v = (uint32_t)p[0] >> off, sh = 8u - off, j;
    if (n == 32u && off == 0u) { /* a whole word on a byte (the usual chunk) */
        return v | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    }
    for (j = 1; j < bytes; j++, sh += 8u) {
        v |= mico_dwl_shl((uint32_t)p[j], sh);
    }
    return n >= 32u ? v : v & ((1u << n) - 1u);
}

/* Store the n (<= 32) low bits of v at bit `bit` of a packed stream, keeping the other bits
 * of the bytes it touches. */
static inline void mico_dwl_put(uint8_t *buf, size_t bit, uint32_t v, uint32_t n)
{
    uint8_t *p = buf + (bit >> 3);
    uint32_t off = (uint32_t)(bit & 7u);
    if (n == 32u && off == 0u) {
        p[0] = (uint8_t)v;
        p[1] = (uint8_t)(v >> 8);
        p[2] = (uint8_t)(v >> 16);
        p[3] = (uint8_t)(v >> 24);
        return;
    }
    while (n > 0u) {
        const uint32_t take = 8u - off < n ? 8u - off : n, m = ((1u << take) - 1u) << off;
        *p = (uint8_t)(((uint32_t)*p & ~m) | ((v << off) & m));
        v >>= take;
        n -= take;
        off = 0;
        p++;
    }
}

/* What one layer's lanes share. */
typedef struct {
    const MicoConv2d *p;
    uint32_t s, k, q, qo, b;  /* lane width, lanes, words and output words per chunk, bits */
    uint32_t bo;               /* output bits */
    int32_t nch;               /* output chunks of a row */
    int32_t nrow;              /* input chunks of a row (at least nch, all of the row) */
    int32_t cw;                /* words per chunk: q + 3 */
    int32_t off;               /* word -pad_w of chunk 0 in a row buffer */
    int32_t nout, rstride;     /* output rows of one call, words between their input rows */
    int32_t mode;              /* the channel's requantization: mico_dwl_fast, or 3 (below) */
    uint32_t th[3];            /* mode 3: 2^(s-1) - (lane value of each level's threshold) */
    int32_t lo_out;            /* mode 3: the lowest output code */
    void *outp;                /* mode 4: the output tensor, the bit of the first row written */
    size_t obit;
    uint32_t ofm, olo;         /* mode 4: output fields (b_o bits every s), lo in each lane */
    uint32_t fm, hx;           /* field mask (b bits every s), signed codes' xor (else 0) */
    uint32_t ones;             /* 1 in every lane */
    int32_t xmin, xmax;        /* activation code range */
} MicoDwl;

/* The lane words of input row iy of the channel whose plane starts at element `plane`
 * (inlined into one function per lane width S, so that its shifts are constants). */
static MICO_DWL_INLINE void mico_dwl_row1(const MicoDwl *d, const void *in, size_t plane, int32_t iy,
                                 uint32_t *dst, const uint32_t s)
{
    const MicoConv2d *p = d->p;
    const uint32_t k = 32u / s, q = d->q, b = d->b, cw = (uint32_t)d->cw;
    const int32_t per = (int32_t)(k * q), width = p->in_w;
    const size_t bit0 = (plane + (size_t)iy * (size_t)width) * b;
    const uint32_t fm = d->fm;
    uint32_t *w = dst, p0 = 0, p1 = 0, pl = 0; /* raw words 0, 1, q - 1 of the last chunk */
    int32_t c;
    uint32_t j;
    if (k == 1u) { /* one pixel per word: the row's codes, one zero word before, zeros after */
        const size_t start = plane + (size_t)iy * (size_t)width;
        if (b == 8u && p->in_fmt.is_signed) {
            const int8_t *src = (const int8_t *)in + start;
            for (j = 0; j < (uint32_t)width; j++) {
                dst[1 + j] = (uint32_t)(int32_t)src[j];
            }
        } else if (b == 8u) {
            const uint8_t *src = (const uint8_t *)in + start;
            for (j = 0; j < (uint32_t)width; j++) {
                dst[1 + j] = src[j];
            }
        } else if (32u % b == 0u) { /* 1, 2, 4 bits: a word of codes at a time */
            const uint32_t per_word = 32u / b, fmask = (1u << b) - 1u;
            const uint32_t h = p->in_fmt.is_signed ? 1u << (b - 1u) : 0u;
            for (j = 0; j < (uint32_t)width;) {
                const uint32_t n = (uint32_t)width - j < per_word ? (uint32_t)width - j : per_word;
                uint32_t raw = mico_dwl_bits((const uint8_t *)in, start * b + j * b, n * b);
                const uint32_t end = j + n;
                for (; j < end; j++, raw >>= b) {
                    dst[1 + j] = ((raw & fmask) ^ h) - h;
                }
            }
        } else {
            mico_unpack_i32(in, start, width, p->in_fmt, (int32_t *)(void *)(dst + 1));
        }
        return; /* words 0 and width + 1 .. stay as the ring was cleared: zeros */
    }
    for (c = 0; c < d->nrow; c++, w += cw) {
        const int32_t left = width - c * per;
        uint32_t raw = 0, f0, f1, fl;
        if (left > 0) {
            const uint32_t n = (uint32_t)(left < per ? left : per) * b;
            raw = mico_dwl_bits((const uint8_t *)in, bit0 + (size_t)(c * per) * b, n);
        }
        for (j = 1; j <= q; j++, raw >>= b) {
            w[j] = raw & fm;
        }
        f0 = w[1];
        f1 = w[2];
        fl = w[q];
        /* neighbours: E(-1) = pixel i Q - 1, E(Q) = i Q + Q, E(Q + 1) = i Q + Q + 1 (from the
         * raw fields of this chunk and the previous one; zeros past the row's chunks) */
        w[0] = (fl << s) | (pl >> ((k - 1u) * s));
        if (c > 0) {
            w[(int32_t)q + 1 - (int32_t)cw] = (p0 >> s) | (f0 << ((k - 1u) * s));
            w[(int32_t)q + 2 - (int32_t)cw] = (p1 >> s) | (f1 << ((k - 1u) * s));
        }
        p0 = f0;
        p1 = f1;
        pl = fl;
    }
    w -= cw;
    w[q + 1] = p0 >> s;
    w[q + 2] = p1 >> s;
    if (d->hx) { /* signed codes: v = (f ^ h) - h in every lane (a zero field stays 0) */
        const uint32_t hx = d->hx;
        uint32_t *const end = dst + cw * (uint32_t)d->nrow;
        for (w = dst; w < end; w++) {
            *w = (*w ^ hx) - hx;
        }
    }
}

/* Rows iy .. iy + count - 1, `stride` words apart. */
static MICO_DWL_INLINE void mico_dwl_row(const MicoDwl *d, const void *in, size_t plane, int32_t iy,
                                int32_t count, uint32_t *dst, int32_t stride, const uint32_t s)
{
    for (; count > 0; count--, iy++, dst += stride) {
        mico_dwl_row1(d, in, plane, iy, dst, s);
    }
}

/* Whether the row function requantizes: a multiplier and a ReLU with lo <= 0 (max(sum, 0)
 * rescaled, then at most hi): 1 with a shift above 32 (the high word of the product plus the
 * rounding bit, shifted: the low word only matters below the rounding bit), 2 with a shift sh
 * of at most 32 and m < 2^sh (r m / 2^sh = r M / 2^32 with M = m 2^(32 - sh) < 2^32: the high
 * word of r M + 2^31); 0: the sums are stored, mico_rq_run_fast requantizes them. */
static inline int32_t mico_dwl_fast(const MicoRq *q)
{
    if (!q->scaled || q->binary || !q->relu || q->lo > 0) {
        return 0;
    }
    if (q->shift > 32) {
        return 1;
    }
    return q->shift == 32 || ((uint32_t)q->m >> q->shift) == 0 ? 2 : 0;
}

/* Requantization by thresholds ("mode 3"): an output of at most 4 codes (1- and 2-bit,
 * binary) is lo + the number of levels whose threshold the sum reaches (requantization is
 * monotonic). When every lane value u (sum - lo_sum) of the channel stays below 2^(s-1), the
 * lanes compare all at once: u + (2^(s-1) - t) sets a lane's top bit exactly when u >= t, and
 * cannot carry out of it. Thresholds t (in [0, 2^(s-1)]: never reached) by bisection over
 * the lanes' range with mico_rq_apply. Returns whether the channel takes this mode. */
static MICO_NOINLINE int mico_dwl_levels(MicoDwl *d, const MicoRq *rq, const int32_t *w,
                                         uint32_t bb)
{
    const uint32_t half = d->s >= 32u ? 0x80000000u : 1u << (d->s - 1u);
    int32_t hi = 0, lo = 0, t, j;
    if (rq->hi - rq->lo > 3 || rq->hi < rq->lo || d->k == 1u) { /* one lane: 1 or 2 is as fast */
        return 0;
    }
    for (t = 0; t < 9; t++) {
        hi += w[t] > 0 ? w[t] * d->xmax : w[t] * d->xmin;
        lo += w[t] > 0 ? w[t] * d->xmin : w[t] * d->xmax;
    }
    if ((uint32_t)(hi - lo) >= half) {
        return 0;
    }
    d->lo_out = rq->lo;
    for (j = 0; j < 3; j++) {
        uint32_t a = 0, b = (uint32_t)(hi - lo) + 1u; /* the threshold is in [a, b] */
        const int32_t level = rq->lo + j + 1;
        if (level > rq->hi) {
            d->th[j] = 0; /* no such level: never counted */
            continue;
        }
        while (a < b) {
            const uint32_t mid = a + (b - a) / 2u;
            if (mico_rq_apply(rq, (int32_t)(mid + bb)) >= level) {
                b = mid;
            } else {
                a = mid + 1u;
            }
        }
        d->th[j] = half - a; /* a == hi - lo + 1: above every lane value */
    }
    return 1;
}

/* mico_pack of one output row, with whole bytes of 1-, 2-, 4- and 8-bit codes written
 * directly when the row starts on a byte (the generator gives these kernels no asymmetric
 * formats, so a field is the code's low bits; binary codes take mico_pack). */
static MICO_NOINLINE void mico_dwl_pack(void *out, size_t start, const int32_t *v, int32_t n,
                                        MicoFmt f)
{
    const uint32_t bits = (uint32_t)f.bits, mask = (1u << (bits & 31u)) - 1u;
    const int32_t per = bits <= 8u && 8u % bits == 0 ? (int32_t)(8u / bits) : 0;
    int32_t i = 0, j;
    if (per && !(f.is_signed && bits == 1u)) {
        uint8_t *q;
        while (i < n && ((start + (size_t)i) * bits) % 8u != 0) {
            i++; /* the codes before a byte boundary, through mico_pack */
        }
        mico_pack(out, start, v, i, f);
        q = (uint8_t *)out + (start + (size_t)i) * bits / 8u;
        if (bits == 8u) {
            for (; i < n; i++) {
                *q++ = (uint8_t)v[i];
            }
            return;
        }
        if (bits == 4u) {
            for (; i + 2 <= n; i += 2) {
                *q++ = (uint8_t)(((uint32_t)v[i] & 15u) | ((uint32_t)v[i + 1] & 15u) << 4);
            }
        } else if (bits == 2u) {
            for (; i + 4 <= n; i += 4) {
                *q++ = (uint8_t)(((uint32_t)v[i] & 3u) | ((uint32_t)v[i + 1] & 3u) << 2 |
                                 ((uint32_t)v[i + 2] & 3u) << 4 | ((uint32_t)v[i + 3] & 3u) << 6);
            }
        } else {
            for (; i + per <= n; i += per) {
                uint32_t byte = 0;
                for (j = 0; j < per; j++) {
                    byte |= ((uint32_t)v[i + j] & mask) << (bits * (uint32_t)j);
                }
                *q++ = (uint8_t)byte;
            }
        }
    }
    mico_pack(out, start + (size_t)i, v + i, n - i, f);
}

/* The row builder of lane width S, and its output functions, one per requantization mode. */
#define MICO_DWL_ROWFN(S)                                                                        \
    static MICO_NOINLINE void mico_dwl_row_s##S(const MicoDwl *d, const void *in, size_t plane,   \
                                                int32_t iy, int32_t count, uint32_t *dst,         \
                                                int32_t stride)                                   \
    {                                                                                             \
        mico_dwl_row(d, in, plane, iy, count, dst, stride, (S));                                  \
    }                                                                                             \
    MICO_DWL_OUTFN(S, 0) MICO_DWL_OUTFN(S, 1) MICO_DWL_OUTFN(S, 2) MICO_DWL_OUTFN(S, 3)         \
    MICO_DWL_OUTFN(S, 4) MICO_DWL_OUTFN(S, 5) MICO_DWL_OUTFN(S, 6)

/* One call: d->nout output rows (sums or output codes, as mode MODE says) of the layer's
 * current channel, for every output word j of every chunk c (vals[c * Po + i * Qo + j]);
 * rows r0..r2 (the input rows under the first output row), weights w (rows of padding:
 * zeros), bb = bias - B, binit = B in every lane. S: the lane width. */
#define MICO_DWL_OUTFN(S, MODE)                                                                  \
    static MICO_NOINLINE void mico_dwl_out_s##S##_##MODE(const MicoDwl *d, const uint32_t *r0,    \
                                                const uint32_t *r1, const uint32_t *r2,           \
                                                const int32_t *w, uint32_t binit, uint32_t bb,    \
                                                const MicoRq *rq, int32_t *vals)                  \
    {                                                                                             \
        const uint32_t k = 32u / (S), lm = (S) >= 32 ? 0xffffffffu : (1u << ((S) & 31)) - 1u;     \
        const int32_t w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4], w5 = w[5];           \
        const int32_t w6 = w[6], w7 = w[7], w8 = w[8];                                            \
        const int32_t cw = d->cw, sw = d->p->stride_w, qo = (int32_t)d->qo, off = d->off;         \
        const int fast = (MODE);                                                                  \
        const uint32_t c1 = d->th[0] * d->ones, c2 = d->th[1] * d->ones;                          \
        const uint32_t c3 = d->th[2] * d->ones, ones = d->ones;                                   \
        const int32_t lo3 = d->lo_out;                                                            \
        const uint32_t sh = fast == 1 || fast == 5 ? (uint32_t)(rq->shift - 32) : 1u;             \
        const uint32_t m = fast == 2 || fast == 6 ? (uint32_t)rq->m << (32 - rq->shift)           \
                                                  : (uint32_t)rq->m;                              \
        const uint32_t top = (S) - 1u;                                                            \
        const uint32_t rnd = 1u << (sh - 1u);                                                     \
        const int32_t hi = rq->hi;                                                                \
        int32_t c, j, o;                                                                          \
        uint32_t i;                                                                               \
        const uint32_t bo = (uint32_t)d->p->out.fmt.bits, ofm = d->ofm, olo = d->olo;             \
        size_t ob = d->obit;                                                                      \
        for (o = 0; o < d->nout; o++, r0 += d->rstride, r1 += d->rstride, r2 += d->rstride,       \
            vals += d->p->out_w, ob += (size_t)d->p->out_w * bo) {                                \
        for (c = 0; c < d->nch; c++) {                                                            \
            const uint32_t *x0 = r0 + off + c * cw, *x1 = r1 + off + c * cw;                      \
            const uint32_t *x2 = r2 + off + c * cw;                                               \
            int32_t *v = vals + c * qo * (int32_t)k;                                              \
            const int32_t left = d->p->out_w - c * qo * (int32_t)k;                               \
            uint32_t ow = 0;                                                                      \
            uint8_t *const ob8 = (uint8_t *)d->outp + (ob >> 3);                                  \
            for (j = 0; j < qo; j++, x0 += sw, x1 += sw, x2 += sw, v++) {                         \
                uint32_t a = binit + (uint32_t)w0 * x0[0] + (uint32_t)w1 * x0[1] +                \
                             (uint32_t)w2 * x0[2];                                                \
                a += (uint32_t)w3 * x1[0] + (uint32_t)w4 * x1[1] + (uint32_t)w5 * x1[2];          \
                a += (uint32_t)w6 * x2[0] + (uint32_t)w7 * x2[1] + (uint32_t)w8 * x2[2];          \
                if (fast == 4) { /* as 3, the codes' fields straight into the chunk's output */   \
                    uint32_t n = ((a + c1) >> top) & ones;                                        \
                    n += ((a + c2) >> top) & ones;                                                \
                    n += ((a + c3) >> top) & ones;                                                \
                    ow |= ((n + olo) & ofm) << (bo * (uint32_t)j);                                \
                } else if (fast == 3) { /* lanes below 2^(s-1): u + th sets the top bit if u >= t */ \
                    uint32_t n = ((a + c1) >> top) & ones;                                        \
                    n += ((a + c2) >> top) & ones;                                                \
                    n += ((a + c3) >> top) & ones;                                                \
                    MICO_UNROLL for (i = 0; i < k; i++) {                                         \
                        v[(int32_t)i * qo] = (int32_t)((n >> ((S) * i & 31)) & lm) + lo3;         \
                    }                                                                             \
                } else if (fast != 0) { /* 1, 2; 8-bit outputs of one-pixel lanes stored: 5, 6 */ \
                    MICO_UNROLL for (i = 0; i < k; i++) {                                         \
                        const int32_t r = (int32_t)(((a >> ((S) * i & 31)) & lm) + bb);           \
                        int32_t y;                                                                \
                        if (fast == 1 || fast == 5) {                                             \
                            y = r <= 0 ? 0                                                        \
                                       : (int32_t)(((uint32_t)(((uint64_t)(uint32_t)r * m) >>     \
                                                               32) + rnd) >> sh);                 \
                        } else {                                                                  \
                            const uint64_t pr = (uint64_t)(uint32_t)r * m + 0x80000000u;          \
                            y = r <= 0 ? 0 : (int32_t)(uint32_t)(pr >> 32);                       \
                        }                                                                         \
                        y = y > hi ? hi : y;                                                      \
                        if (fast >= 5 && (S) >= 32) { /* 8-bit outputs, stored straight */        \
                            ob8[j] = (uint8_t)y;                                                  \
                        } else {                                                                  \
                            v[(int32_t)i * qo] = y;                                               \
                        }                                                                         \
                    }                                                                             \
                } else {                                                                          \
                    MICO_UNROLL for (i = 0; i < k; i++) {                                         \
                        v[(int32_t)i * qo] = (int32_t)(((a >> ((S) * i & 31)) & lm) + bb);        \
                    }                                                                             \
                }                                                                                 \
            }                                                                                     \
            if (fast == 4 && left > 0) {                                                          \
                const int32_t nb = left < qo * (int32_t)k ? left : qo * (int32_t)k;              \
                mico_dwl_put((uint8_t *)d->outp, ob + (size_t)(c * qo * (int32_t)k) * bo, ow,     \
                             (uint32_t)nb * bo);                                                  \
            }                                                                                     \
        }                                                                                         \
        }                                                                                         \
    }

/* The lane widths the generator picks from (mico.codegen.dwconv_plan.DW_LANE_WIDTHS). */
#define MICO_DWL_EACH(X) X(4) X(6) X(8) X(12) X(16) X(32)
MICO_DWL_EACH(MICO_DWL_ROWFN)

typedef void (*MicoDwlOut)(const MicoDwl *, const uint32_t *, const uint32_t *, const uint32_t *,
                           const int32_t *, uint32_t, uint32_t, const MicoRq *, int32_t *);
typedef void (*MicoDwlRow)(const MicoDwl *, const void *, size_t, int32_t, int32_t, uint32_t *,
                           int32_t);
typedef struct {
    MicoDwlRow row;
    MicoDwlOut out[7]; /* by requantization mode */
} MicoDwlFns;

/* The layer through output-row function fn; 0 (nothing done) when the lanes do not apply. */
static MICO_NOINLINE int mico_dwl(const MicoConv2d *p, const MicoDwLanes *l, const void *in,
                                  void *out, const MicoDwlFns *fns)
{
    const int32_t out_plane = p->out_h * p->out_w, in_plane = p->in_h * p->in_w;
    uint32_t ring[MICO_DWL_RING];
    int32_t vals[MICO_DWL_VALS];
    int32_t tag[3];
    MicoDwl d;
    int32_t ch, oy, i, t, row_words, prow, spill, whole, direct;
    MicoDwlOut fn;
    MicoFmt w_fmt = p->in_fmt; /* every field set: the weights are signed codes */

    d.p = p;
    d.s = (uint32_t)l->s;
    d.k = 32u / d.s;
    d.q = (uint32_t)l->q;
    d.b = (uint32_t)p->in_fmt.bits;
    d.qo = d.q / (uint32_t)(p->stride_w > 0 ? p->stride_w : 1);
    d.cw = (int32_t)d.q + 3;
    if (p->in_fmt.bits < 1 || p->in_fmt.bits > 8 || (p->in_fmt.is_signed && p->in_fmt.bits == 1) ||
        p->k_h != 3 || p->k_w != 3 || p->dil_h != 1 || p->dil_w != 1 || p->groups != p->in_c ||
        p->in_c != p->out_c || p->stride_w < 1 || p->stride_w > 2 || p->stride_h < 1 ||
        p->pad_w < 0 || p->pad_w > 1 ||
        (d.k > 1u && (d.q < 2u || d.q % (uint32_t)p->stride_w != 0 || d.q * d.b != d.s))) {
        return 0;
    }
    if (d.k == 1u) { /* one chunk: the whole row, a pixel per word */
        d.q = (uint32_t)(p->in_w + p->stride_w - 1) / (uint32_t)p->stride_w;
        d.qo = d.q;
        d.q *= (uint32_t)p->stride_w;
        d.cw = (int32_t)d.q + 3;
        d.nch = d.nrow = 1;
        d.off = 1 - p->pad_w;
        if (d.qo < (uint32_t)p->out_w || 3 * d.cw > MICO_DWL_RING || (int32_t)d.qo > MICO_DWL_VALS) {
            return 0;
        }
        d.qo = (uint32_t)p->out_w; /* exactly the row's outputs (stored straight, 8-bit) */
    } else {
        d.nch = (p->out_w + (int32_t)(d.k * d.qo) - 1) / (int32_t)(d.k * d.qo);
        d.nrow = (p->in_w + (int32_t)(d.k * d.q) - 1) / (int32_t)(d.k * d.q);
        d.nrow = d.nrow > d.nch ? d.nrow : d.nch;
        d.off = 1 - p->pad_w;
        if (d.nrow * d.cw * 3 > MICO_DWL_RING ||
            d.nch * (int32_t)(d.k * d.qo) > MICO_DWL_VALS) {
            return 0;
        }
    }
    row_words = d.nrow * d.cw;
    /* the whole padded plane when it fits the ring and its sums the row buffer (a row's last
     * chunk may spill past out_w into the next row's sums, which that row overwrites) */
    prow = (p->out_h - 1) * p->stride_h + 3;
    spill = (d.k == 1u ? (int32_t)d.qo : d.nch * (int32_t)(d.k * d.qo)) - p->out_w;
    whole = prow * row_words <= MICO_DWL_RING && out_plane + spill <= MICO_DWL_VALS;
    d.nout = whole ? p->out_h : 1;
    d.rstride = whole ? p->stride_h * row_words : 0;
    w_fmt.bits = p->w_bits;
    w_fmt.is_signed = 1;
    for (i = 0; i < (whole ? prow : 3) * row_words; i++) {
        ring[i] = 0; /* rows of padding read it (times weight 0) */
    }
    d.fm = 0;
    d.hx = 0;
    d.ones = 0;
    for (i = 0; i < (int32_t)d.k; i++) {
        d.fm |= ((1u << d.b) - 1u) << (d.s * (uint32_t)i);
        d.ones |= 1u << (d.s * (uint32_t)i);
        if (p->in_fmt.is_signed) {
            d.hx |= (1u << (d.b - 1u)) << (d.s * (uint32_t)i);
        }
    }
    /* mode 4: output fields of b_o = b * stride_w bits fill the lanes' chunk exactly (lane i
     * of output word j is output i Qo + j, at bit b_o (i Qo + j) = s i + b_o j) */
    d.bo = (uint32_t)p->out.fmt.bits;
    d.outp = out;
    direct = d.k > 1u && d.bo == d.b * (uint32_t)p->stride_w &&
             !(p->out.fmt.is_signed && d.bo == 1u);
    d.ofm = 0;
    for (i = 0; i < (int32_t)d.k; i++) {
        d.ofm |= ((1u << d.bo) - 1u) << (d.s * (uint32_t)i);
    }
    d.olo = 0;
    d.xmin = p->in_fmt.is_signed ? -(1 << (d.b - 1)) + 1 : 0;
    d.xmax = p->in_fmt.is_signed ? (1 << (d.b - 1)) - 1 : (1 << d.b) - 1;
    for (ch = 0; ch < p->out_c; ch++) {
        const MicoRq rq = mico_rq(&p->out, ch);
        const int fast = mico_dwl_fast(&rq);
        const size_t plane = (size_t)ch * (size_t)in_plane;
        int32_t w[9], wr[9], lo = 0;
        uint32_t binit, bb;
        for (t = 0; t < 9; t++) { /* the smallest sum the channel can take */
            w[t] = mico_load(p->weight, (size_t)ch * 9u + (size_t)t, w_fmt);
            lo += w[t] > 0 ? w[t] * d.xmin : w[t] * d.xmax;
        }
        binit = (uint32_t)(-lo) * d.ones;
        bb = (uint32_t)p->bias[ch] + (uint32_t)lo;
        d.mode = mico_dwl_levels(&d, &rq, w, bb) ? 3 : fast;
        if (d.mode == 3 && direct && d.bo <= 2u) {
            d.mode = 4;
            d.olo = ((uint32_t)d.lo_out & ((1u << d.bo) - 1u)) * d.ones;
        } else if ((d.mode == 1 || d.mode == 2) && d.k == 1u && d.bo == 8u) {
            d.mode += 4;
        }
        d.obit = (size_t)ch * (size_t)out_plane * d.bo;
        fn = fns->out[d.mode];
        if (whole) { /* the channel's padded plane, then every output row in one call */
            { /* the input rows under the padded rows 0 .. prow - 1 (the others stay zero) */
                const int32_t r0 = p->pad_h, r1 = p->in_h + p->pad_h < prow ? p->in_h + p->pad_h
                                                                             : prow;
                fns->row(&d, in, plane, 0, r1 - r0, ring + r0 * row_words, row_words);
            }
            fn(&d, ring, ring + row_words, ring + 2 * row_words, w, binit, bb, &rq, vals);
            if (!d.mode) {
                mico_rq_run_fast(&rq, vals, out_plane);
            }
            if (d.mode < 4) {
                mico_dwl_pack(out, (size_t)ch * (size_t)out_plane, vals, out_plane, p->out.fmt);
            }
            continue;
        }
        tag[0] = tag[1] = tag[2] = -1;
        for (oy = 0; oy < p->out_h; oy++) {
            const int32_t iy0 = oy * p->stride_h - p->pad_h;
            const uint32_t *rows[3];
            const int32_t *wp = w;
            int32_t ky;
            for (ky = 0; ky < 3; ky++) {
                const int32_t iy = iy0 + ky;
                uint32_t *buf = ring;
                if (iy >= 0 && iy < p->in_h) {
                    const int32_t slot = (int32_t)((uint32_t)iy % 3u);
                    buf = ring + slot * row_words;
                    if (tag[slot] != iy) {
                        fns->row(&d, in, plane, iy, 1, buf, 0);
                        tag[slot] = iy;
                    }
                } else { /* a padding row: its taps take weight 0 */
                    if (wp == w) {
                        for (t = 0; t < 9; t++) {
                            wr[t] = w[t];
                        }
                        wp = wr;
                    }
                    wr[3 * ky] = wr[3 * ky + 1] = wr[3 * ky + 2] = 0;
                }
                rows[ky] = buf;
            }
            d.obit = ((size_t)ch * (size_t)out_plane + (size_t)oy * (size_t)p->out_w) * d.bo;
            fn(&d, rows[0], rows[1], rows[2], wp, binit, bb, &rq, vals);
            if (!d.mode) {
                mico_rq_run_fast(&rq, vals, p->out_w);
            }
            if (d.mode >= 4) { /* stored by fn */
                continue;
            }
            mico_dwl_pack(out, (size_t)ch * (size_t)out_plane + (size_t)oy * (size_t)p->out_w,
                          vals, p->out_w, p->out.fmt);
        }
    }
    return 1;
}

#define MICO_DWL_ENTRY(S)                                                                        \
    void mico_qconv2d_dwl_s##S(const MicoConv2d *p, const MicoDwLanes *l, const void *in,         \
                               void *out)                                                         \
    {                                                                                             \
        static const MicoDwlFns fns = {mico_dwl_row_s##S,                                        \
                                       {mico_dwl_out_s##S##_0, mico_dwl_out_s##S##_1,             \
                                        mico_dwl_out_s##S##_2, mico_dwl_out_s##S##_3,             \
                                        mico_dwl_out_s##S##_4, mico_dwl_out_s##S##_5,             \
                                        mico_dwl_out_s##S##_6}};                                  \
        if (!mico_dwl(p, l, in, out, &fns)) {                                      \
            mico_qconv2d_depthwise3x3(p, in, out);                                                \
        }                                                                                         \
    }
MICO_DWL_EACH(MICO_DWL_ENTRY)

/* ------------------------------------------------------------------------------------------
 * Depthwise 3x3 on bytes (mico_qconv2d_dw8_f<1|2>): 8-bit activation codes, 8-bit outputs.
 *
 * A 3x3 depthwise window has little reuse (each input pixel meets 9 weights of one channel),
 * so what counts besides the 9 multiplies and 9 adds of an output is its loads and its
 * requantization. Per channel:
 *  - the input plane is copied once into a stack buffer with a fixed row pitch
 *    (MICO_DW8_PITCH), its padding borders zero (cleared once per layer, never written
 *    again), either as it is (buffer rows = input rows) or transposed (buffer rows = input
 *    columns), whichever is estimated cheaper (mico_dw8_cost: a 25 x 5 plane runs as 5
 *    buffer rows of 25 outputs);
 *  - a register tile computes 4 neighbouring outputs along a buffer row: the 3 buffer rows
 *    under it are read once as bytes at constant offsets (6 loads each at stride 1, 9 at
 *    stride 2: 18 / 27 loads for 36 MACs), the weights of a row are loaded with it; the
 *    last 1-3 outputs of a row are computed one by one;
 *  - each output is requantized in registers and stored as a byte straight away (ReLU
 *    layers: a high-word multiply, the rounding add, a shift and the clamp); a multiplier
 *    whose shift is 32 or less (ternary and 1-bit weights' larger scales) is rewritten as
 *    shift 33 on sums scaled by 2^k (k <= 3: weights and bias), the same rounding exactly,
 *    and a channel beyond that goes one output at a time (mico_dw8_plain).
 * Reading the whole plane before storing any of its outputs keeps the in-place contract of
 * mico_conv2d.c in any output order. Layers this path does not take (a plane too large for
 * the buffer, unscaled or binary outputs; mico.codegen.dwconv_plan.dw8_plan gives it none)
 * go to mico_qconv2d_depthwise3x3 (the pixel lanes are not linked for them). */

#define MICO_DW8_PITCH 64 /* bytes per buffer row (a padded row of the plane) */
#define MICO_DW8_ROWS 52  /* buffer rows (the padded plane's other side): 3.3 KB of stack */

/* How one layer maps onto the buffer. */
typedef struct {
    int32_t n_fast, n_slow;       /* outputs along a buffer row, output lines (buffer rows) */
    int32_t ss;                   /* buffer rows between output lines (the other stride) */
    int32_t ostep_fast, ostep_slow; /* output elements between neighbours along each axis */
    int32_t relu, lo, hi;
} MicoDw8;

/* Store the requantized sum r at o (shift above 32, the rounding of mico_rescale): ReLU
 * layers with lo <= 0 <= hi take `relu` (max(r, 0) rescaled, then at most hi: a high-word
 * multiply, the rounding add, a shift, the clamp), others the signed form. */
static MICO_DWL_INLINE void mico_dw8_put(uint8_t *o, int32_t r, uint32_t m, uint32_t sh,
                                         uint32_t rnd, uint32_t hi, const MicoDw8 *g,
                                         const int relu)
{
    uint32_t q;
    int32_t y;
    if (relu) {
        if (r <= 0) {
            *o = 0;
            return;
        }
        q = ((uint32_t)(((uint64_t)(uint32_t)r * m) >> 32) + rnd) >> sh;
        *o = (uint8_t)(q > hi ? hi : q);
        return;
    }
    if (g->relu && r < 0) {
        r = 0;
    }
    q = r < 0 ? 0u - (uint32_t)r : (uint32_t)r;
    q = ((uint32_t)(((uint64_t)q * m) >> 32) + rnd) >> sh;
    y = r < 0 ? -(int32_t)q : (int32_t)q;
    y = y < g->lo ? g->lo : y;
    *o = (uint8_t)(y > g->hi ? g->hi : y);
}

/* One buffer row of taps (weights W0..W2) into the 4 sums of a tile at stride SF. */
#define MICO_DW8_TAPS(X, W0, W1, W2, SF)                                                         \
    do {                                                                                          \
        const int32_t x0 = (X)[0], x1 = (X)[1], x2 = (X)[2], x3 = (X)[3], x4 = (X)[4];            \
        const int32_t x5 = (X)[5];                                                                \
        if ((SF) == 1) {                                                                          \
            a0 += (W0) * x0 + (W1) * x1 + (W2) * x2;                                              \
            a1 += (W0) * x1 + (W1) * x2 + (W2) * x3;                                              \
            a2 += (W0) * x2 + (W1) * x3 + (W2) * x4;                                              \
            a3 += (W0) * x3 + (W1) * x4 + (W2) * x5;                                              \
        } else {                                                                                  \
            const int32_t x6 = (X)[6], x7 = (X)[7], x8 = (X)[8];                                  \
            a0 += (W0) * x0 + (W1) * x1 + (W2) * x2;                                              \
            a1 += (W0) * x2 + (W1) * x3 + (W2) * x4;                                              \
            a2 += (W0) * x4 + (W1) * x5 + (W2) * x6;                                              \
            a3 += (W0) * x6 + (W1) * x7 + (W2) * x8;                                              \
        }                                                                                         \
    } while (0)

/* A compiler fence between the buffer rows of a tile: the weights of a buffer row are read
 * after it (3 loads per row), so that the byte loads are not all hoisted to the tile's start
 * and the requantization's constants keep their registers (9 weights, 4 sums, 6 codes and
 * the constants do not fit rv32's registers at once). */
#if defined(__GNUC__)
#define MICO_DW8_FENCE() __asm__ volatile("" ::: "memory")
#else
#define MICO_DW8_FENCE()
#endif

/* The 4 sums a0..a3 of the tile whose first window starts at B (weights at wp). */
#define MICO_DW8_TILE(B, SF)                                                                     \
    a0 = a1 = a2 = a3 = bias;                                                                     \
    MICO_DW8_TAPS(B, wp[0], wp[1], wp[2], SF);                                                    \
    MICO_DW8_FENCE();                                                                             \
    MICO_DW8_TAPS((B) + MICO_DW8_PITCH, wp[3], wp[4], wp[5], SF);                                 \
    MICO_DW8_FENCE();                                                                             \
    MICO_DW8_TAPS((B) + 2 * MICO_DW8_PITCH, wp[6], wp[7], wp[8], SF)

/* Every output of one channel from its buffer (element type T: the codes' signedness),
 * weights w in buffer order (w[3 r + c]: buffer row r, offset c), stride SF along a row. */
#define MICO_DW8_PLANE(NAME, T, SF, RELU)                                                        \
    static MICO_NOINLINE void NAME(const void *codes, const int32_t *w, int32_t bias, uint32_t m, \
                                   uint32_t sh, const MicoDw8 *g, uint8_t *out)                   \
    {                                                                                             \
        const T *const buf = (const T *)codes;                                                    \
        const int32_t *const wp = w;                                                              \
        const uint32_t rnd = 1u << (sh - 1u), hi = (uint32_t)g->hi;                               \
        const int32_t of = g->ostep_fast, full = g->n_fast >> 2, rest = g->n_fast & 3;            \
        int32_t s, a0, a1, a2, a3, j;                                                             \
        for (s = 0; s < g->n_slow; s++) {                                                         \
            const T *b = buf + s * g->ss * MICO_DW8_PITCH;                                        \
            const T *const end = b + full * 4 * (SF);                                             \
            uint8_t *o = out + s * g->ostep_slow;                                                 \
            for (; b < end; b += 4 * (SF)) { /* whole tiles: requantized and stored */           \
                MICO_DW8_TILE(b, SF);                                                             \
                MICO_DW8_FENCE();                                                                 \
                mico_dw8_put(o, a0, m, sh, rnd, hi, g, RELU);                                     \
                o += of;                                                                          \
                mico_dw8_put(o, a1, m, sh, rnd, hi, g, RELU);                                     \
                o += of;                                                                          \
                mico_dw8_put(o, a2, m, sh, rnd, hi, g, RELU);                                     \
                o += of;                                                                          \
                mico_dw8_put(o, a3, m, sh, rnd, hi, g, RELU);                                     \
                o += of;                                                                          \
            }                                                                                     \
            for (j = 0; j < rest; j++, b += (SF), o += of) { /* the row's last outputs, alone */ \
                int32_t a = bias + wp[0] * b[0] + wp[1] * b[1] + wp[2] * b[2];                    \
                a += wp[3] * b[MICO_DW8_PITCH] + wp[4] * b[MICO_DW8_PITCH + 1] +                  \
                     wp[5] * b[MICO_DW8_PITCH + 2];                                               \
                a += wp[6] * b[2 * MICO_DW8_PITCH] + wp[7] * b[2 * MICO_DW8_PITCH + 1] +          \
                     wp[8] * b[2 * MICO_DW8_PITCH + 2];                                           \
                mico_dw8_put(o, a, m, sh, rnd, hi, g, RELU);                                      \
            }                                                                                     \
        }                                                                                         \
    }

typedef void (*MicoDw8Plane)(const void *, const int32_t *, int32_t, uint32_t, uint32_t,
                             const MicoDw8 *, uint8_t *);

static void mico_dwp_weights(const uint8_t *weight, uint32_t ch, uint32_t wb, int trans,
                             uint32_t *w, uint32_t *sums);

/* A channel whose multiplier the plane functions cannot take (mico_dw8): every output from
 * the buffer through mico_rq_apply. */
static MICO_NOINLINE void mico_dw8_plain(const uint8_t *buf, int is_signed, const int32_t *w,
                                         int32_t bias, const MicoRq *rq, const MicoDw8 *g,
                                         int32_t sf, uint8_t *out)
{
    int32_t s, f, t;
    for (s = 0; s < g->n_slow; s++) {
        for (f = 0; f < g->n_fast; f++) {
            const uint8_t *b = buf + s * g->ss * MICO_DW8_PITCH + f * sf;
            int32_t a = bias;
            for (t = 0; t < 9; t++) {
                const uint8_t c = b[t / 3 * MICO_DW8_PITCH + t % 3];
                a += w[t] * (is_signed ? (int32_t)(int8_t)c : (int32_t)c);
            }
            out[s * g->ostep_slow + f * g->ostep_fast] = (uint8_t)mico_rq_apply(rq, a);
        }
    }
}

/* Estimated instructions of a plane of n_slow rows of n_fast outputs (mico.codegen.dwconv_plan
 * mirrors it). */
static int32_t mico_dw8_cost(int32_t n_fast, int32_t n_slow)
{
    return n_slow * (128 * (n_fast >> 2) + 45 * (n_fast & 3) + 20);
}

/* The layer with the plane functions of its stride along a buffer row ([signed][relu]);
 * 0 (nothing done) when this path does not take it. */
static MICO_NOINLINE int mico_dw8(const MicoConv2d *p, const void *in, void *out,
                                  MicoDw8Plane const fns[2][2], int32_t sf_fixed)
{
    uint8_t buf[MICO_DW8_PITCH * MICO_DW8_ROWS];
    MicoDw8 g;
    int32_t ch, i, t, rows, fast_in, slow_in, pf, ps, sf, n_pad, cost_n, cost_t, trans;
    const int32_t in_plane = p->in_h * p->in_w, out_plane = p->out_h * p->out_w;
    const int32_t in_h = p->in_h, in_w = p->in_w;
    if (p->in_fmt.bits != 8 || p->in_fmt.zero != 0 || p->out.fmt.bits != 8 ||
        p->out.fmt.zero != 0 || p->k_h != 3 || p->k_w != 3 || p->dil_h != 1 || p->dil_w != 1 ||
        p->groups != p->in_c || p->in_c != p->out_c || p->out.n_mult == 0 || p->pad_h < 0 ||
        p->pad_w < 0 || p->stride_h < 1 || p->stride_w < 1 || p->out_h < 1 || p->out_w < 1) {
        return 0;
    }
    /* orientation: buffer rows along the input rows, or along its columns when that is
     * cheaper (estimated rv32 instructions: a 4-output tile, a lone output, a row) */
    cost_n = p->stride_w == sf_fixed ? mico_dw8_cost(p->out_w, p->out_h) : 0x7fffffff;
    cost_t = p->stride_h == sf_fixed ? mico_dw8_cost(p->out_h, p->out_w) + out_plane / 2
                                     : 0x7fffffff;
    trans = cost_t < cost_n;
    g.n_fast = trans ? p->out_h : p->out_w;
    g.n_slow = trans ? p->out_w : p->out_h;
    g.ss = trans ? p->stride_w : p->stride_h;
    g.ostep_fast = trans ? p->out_w : 1;
    g.ostep_slow = trans ? 1 : p->out_w;
    fast_in = trans ? p->in_h : p->in_w;
    slow_in = trans ? p->in_w : p->in_h;
    pf = trans ? p->pad_h : p->pad_w;
    ps = trans ? p->pad_w : p->pad_h;
    sf = sf_fixed;
    /* the buffer holds the padded rows the windows read */
    n_pad = (g.n_fast - 1) * sf + 3;
    rows = (g.n_slow - 1) * g.ss + 3;
    if ((trans ? cost_t : cost_n) == 0x7fffffff || n_pad > MICO_DW8_PITCH ||
        pf + fast_in > MICO_DW8_PITCH || rows > MICO_DW8_ROWS || ps + slow_in > MICO_DW8_ROWS) {
        return 0;
    }
    rows = rows > ps + slow_in ? rows : ps + slow_in;
    for (i = 0; i < rows * MICO_DW8_PITCH; i++) {
        buf[i] = 0; /* the padding, never written again */
    }
    g.relu = p->out.relu;
    g.lo = p->out.lo;
    g.hi = p->out.hi;
    for (ch = 0; ch < p->out_c; ch++) {
        const MicoRq rq = mico_rq(&p->out, ch);
        const uint8_t *src = (const uint8_t *)in + (size_t)ch * (size_t)in_plane;
        const int relu = g.relu && g.lo <= 0 && g.hi >= 0;
        int32_t w[9], y, x, sc = 0, bias = p->bias[ch];
        uint32_t m = (uint32_t)rq.m, sh = (uint32_t)rq.shift - 32u;
        if (p->w_bits == 8) {
            for (t = 0; t < 9; t++) { /* buffer order: transposed, row r holds column r's taps */
                const int32_t r = t / 3, c = t % 3, k = ch * 9 + (trans ? c * 3 + r : t);
                w[t] = (int32_t)((const int8_t *)p->weight)[k];
            }
        } else { /* the 9 codes in one pass (ternary weights: 2-bit codes) */
            uint32_t sums[2];
            mico_dwp_weights(p->weight, (uint32_t)ch, (uint32_t)p->w_bits, trans,
                             (uint32_t *)(void *)w, sums);
        }
        if (rq.shift <= 32) {
            /* a shift of 32 or less (the larger real multipliers of ternary or 1-bit weights):
             * M = m 2^(33 - shift - sc) < 2^32 with shift 33 on the sums scaled by 2^sc
             * (weights and bias): (|r| 2^sc M + 2^32) >> 33 = (|r| m + 2^(shift-1)) >> shift,
             * mico_rescale's rounding, exactly; taken while the scaled sums stay far inside
             * int32 (|bias| < 2^26; the taps' sum is below 9 * 2^15); a channel outside that
             * goes one output at a time (mico_dw8_plain) */
            const int32_t e = 33 - rq.shift;
            /* m 2^(e - sc) < 2^32 while m >> (32 - e + sc) is 0 (in 32-bit shifts) */
            while (sc < 3 && sc < e && (e - sc >= 32 || (uint32_t)rq.m >> (32 - e + sc) != 0u)) {
                sc++;
            }
            if ((e - sc >= 32 ? rq.m != 0 : (uint32_t)rq.m >> (32 - e + sc) != 0u) ||
                bias >= (1 << 26) || bias <= -(1 << 26) || rq.binary) {
                sc = -1;
            } else {
                m = (uint32_t)rq.m << (e - sc);
                sh = 1u;
                bias *= 1 << sc;
                for (t = 0; sc && t < 9; t++) {
                    w[t] *= 1 << sc;
                }
            }
        }
        /* the plane into the buffer (the layer's sizes in locals: byte stores may alias p) */
        if (trans) { /* buffer row ps + x holds input column x (a column: in_w apart) */
            const int32_t w2 = 2 * in_w, w3 = 3 * in_w, w4 = 4 * in_w;
            for (x = 0; x < in_w; x++) {
                uint8_t *d = buf + (ps + x) * MICO_DW8_PITCH + pf;
                const uint8_t *c = src + x;
                for (y = 0; y + 4 <= in_h; y += 4, c += w4) {
                    d[y] = c[0];
                    d[y + 1] = c[in_w];
                    d[y + 2] = c[w2];
                    d[y + 3] = c[w3];
                }
                for (; y < in_h; y++, c += in_w) {
                    d[y] = *c;
                }
            }
        } else {
            for (y = 0; y < in_h; y++, src += in_w) {
                uint8_t *d = buf + (ps + y) * MICO_DW8_PITCH + pf;
                for (x = 0; x + 4 <= in_w; x += 4) {
                    d[x] = src[x];
                    d[x + 1] = src[x + 1];
                    d[x + 2] = src[x + 2];
                    d[x + 3] = src[x + 3];
                }
                for (; x < in_w; x++) {
                    d[x] = src[x];
                }
            }
        }
        if (sc < 0) {
            mico_dw8_plain(buf, p->in_fmt.is_signed, w, bias, &rq, &g, sf,
                           (uint8_t *)out + (size_t)ch * (size_t)out_plane);
            continue;
        }
        fns[p->in_fmt.is_signed ? 1 : 0][relu](buf, w, bias, m, sh, &g,
                                               (uint8_t *)out + (size_t)ch * (size_t)out_plane);
    }
    return 1;
}

#define MICO_DW8_ENTRY(SF)                                                                       \
    MICO_DW8_PLANE(mico_dw8_u##SF##_0, uint8_t, SF, 0)                                            \
    MICO_DW8_PLANE(mico_dw8_u##SF##_1, uint8_t, SF, 1)                                            \
    MICO_DW8_PLANE(mico_dw8_s##SF##_0, int8_t, SF, 0)                                             \
    MICO_DW8_PLANE(mico_dw8_s##SF##_1, int8_t, SF, 1)                                             \
    void mico_qconv2d_dw8_f##SF(const MicoConv2d *p, const MicoDwLanes *l, const void *in,        \
                                void *out)                                                        \
    {                                                                                             \
        static MicoDw8Plane const fns[2][2] = {{mico_dw8_u##SF##_0, mico_dw8_u##SF##_1},          \
                                               {mico_dw8_s##SF##_0, mico_dw8_s##SF##_1}};         \
        (void)l;                                                                                  \
        if (!mico_dw8(p, in, out, fns, SF)) {                                                     \
            mico_qconv2d_depthwise3x3(p, in, out);                                                \
        }                                                                                         \
    }
MICO_DW8_ENTRY(1)
MICO_DW8_ENTRY(2)

/* ------------------------------------------------------------------------------------------
 * Depthwise 3x3 on pairs of output lines (mico_qconv2d_dwp_f<1|2>[_form]): codes of 1..8 bits
 * in and out (signed, unsigned or asymmetric; not binary), two outputs per multiply.
 *
 * The byte path above, with each 32-bit word of the channel's buffer holding two pixels in
 * 16-bit lanes: the pixel of buffer row r (low half) and the one of row r + D (high half),
 * D = L * ss for L = ceil(n_slow / 2) output lines. One multiply by a tap's weight and one add
 * then serve output line s (low lane) and line s + L (high lane); a register tile of 4 words
 * along a buffer row gives 8 outputs (stride 1: 6 word loads, 12 multiplies and 12 adds per
 * buffer row for 24 MACs, against 6 loads, 12 multiplies and 12 adds for 12 on bytes).
 *
 * Lanes hold u = the field of a code, made unsigned: u = field ^ 2^(b-1) for signed codes
 * (code + 2^(b-1)), the field itself for unsigned and asymmetric codes (code + zero), and
 * the padding holds u_pad = the u of code 0 (2^(b-1), the zero point, or 0). Every window
 * then has 9 taps of u, and sum_t w_t code_t = sum_t w_t u_t - u_pad * sum_t w_t (a padding
 * tap adds w u_pad - w u_pad = 0). With u in [0, 2^b - 1], a lane's sum lies in [lo, hi],
 * lo = (2^b - 1) * (sum of the negative weights), hi likewise: each lane starts at -lo and
 * ends in [0, hi - lo], read back exactly as (acc & 0xffff) / (acc >> 16) whenever
 * hi - lo <= 65535 (arithmetic modulo 2^32: carries and borrows between the lanes cancel).
 * mico.codegen.dwconv_plan chooses this path only when every channel fits; a channel that
 * does not (a hand-built layer) is computed one output at a time from the same buffer.
 *
 * Per channel: the packed plane is unpacked into bytes (whole bytes of 1-, 2-, 4-bit codes
 * at a time; 8-bit codes are read as they are; planes of rows of 5 unsigned 4-bit codes, a
 * word a row instead, mico_dwp_lines5), spread into the lanes' halfwords (its
 * padding cleared once per layer), the outputs requantized as on the byte path and stored as
 * bytes (8-bit symmetric outputs) or staged as bytes and packed at the output's width (whole
 * words of staged 1-, 2-, 4-bit codes at a time). The staging shares the bytes of the
 * unpacked plane, which are spent by then. The plane is read before any output is stored:
 * the in-place contract of the byte path holds. A multiplier whose shift is 32 or less is
 * rewritten with shift 33 on sums scaled by 2^k (k <= 3: scales below 4, small biases); a
 * channel outside that goes one output at a time too. Layers this path does not take
 * (planes too large for the buffers, unscaled or binary outputs), or not of the form of the
 * entry point called, go to mico_qconv2d_depthwise3x3.
 *
 * Each form (the pairs' read, words of K lanes, the outputs by thresholds or table, rows of 5)
 * has its own entry point (MICO_DWP_FORM; mico.codegen.dwconv_plan.dwp_form names it), whose
 * table of functions holds that form's only: a program links the plane functions, reads and
 * builders of its layers' forms, not the whole path. Choices that depend on a channel's data
 * (the span of its sums, its table) stay in the kernel; a channel whose choice would need a
 * function the form left out takes the pairs.
 *
 * Planes of short rows (unpacked at once) at stride 1 whose codes pad with 0 (unsigned, no
 * zero point) take more lanes a word when a channel's sums allow: 4 lanes of 8 bits or 3 of
 * 10 (MICO_DWP_PLANE, buffer built a word at a time by mico_dwp_build), K output lines per
 * multiply: DS-CNN's 25 x 5 planes as 7 or 9 line groups instead of 13 pairs; planes of at
 * most 5 columns, 5 lanes of 6 bits, every output column in one word (the plane transposed,
 * mico_dwp_build5: a row's codes gathered once; 1- and 2-bit codes straight from the packed
 * rows, mico_dwp_build5p). Channels whose sums need 16 bits keep the pairs; a layer stays in
 * 3 or 4 lanes once there while its channels fit; the buffer's padding is restored where
 * another layout wrote. Signed codes take 3 or 4 lanes too, of u = f ^ h as the pairs (made
 * for a whole word by the build), the padding u_pad = h (3 and 4 lanes: layouts of their own,
 * their padding columns restored between them); so do rows of whole bytes of signed 2- and
 * 4-bit codes (mico_dwp_readkk). Signed outputs without a ReLU go by table too (the fields of
 * their codes, mico_dwp_lut), from 3 codes (2-bit outputs: -1, 0, 1) up, and so do outputs
 * of 3 or 4 codes from 0 in words of K lanes at stride 1 (a byte load an output, where the
 * thresholds need their bisection a channel).
 *
 * Outputs of at most 4 codes (1- and 2-bit) of a channel in the ReLU form whose lane sums
 * leave a spare top bit go by thresholds (mico_dwp_levels, plane functions _2): the code is
 * the number of levels whose threshold the lane value reaches, counted for every lane of a
 * word at once. Rows of whole bytes (planes not transposed) are read for both lanes of a word
 * at once (mico_dwp_read2), and rows of short planes are spread from their bytes into both
 * lanes at once (mico_dwp_spread2). */

#define MICO_DWP_PITCH 36   /* words per buffer row (a padded row of the plane) */
#define MICO_DWP_ROWS 18    /* buffer rows: 2.6 KB of lane words */
#define MICO_DWP_BYTES 1024 /* the staged output plane (and planes of short rows, unpacked) */
#define MICO_DWP_LUT 1088   /* a channel's output codes by lane value (lvl tables): spans below */

typedef union {
    uint32_t w;
    uint16_t h[2];
} MicoDwpWord;

/* The halfword of a word that holds its low 16 bits (0 on little-endian targets). */
static inline int mico_dwp_low_half(void)
{
    static const MicoDwpWord probe = {1u};
    return probe.h[0] == 1u ? 0 : 1;
}

/* The layer's geometry on the buffer (the byte path's, plus the pitch and the lane pairs). */
typedef struct {
    MicoDw8 g;
    int32_t half;  /* L: output lines in the low lanes (the rest, up to 2L, in the high) */
    int32_t rows;  /* buffer rows */
    int32_t sf;    /* stride along a buffer row */
    uint32_t th[3]; /* outputs by thresholds (plane functions _2): 2^(s-1) - t_L in each lane */
    const uint8_t *lut; /* outputs by table (plane functions _3): the code byte of lane value v */
} MicoDwp;

/* Outputs of at most 4 codes by thresholds, all the lanes of a word at once (the plane
 * functions _2): the requantization is monotonic in the sum, so with lane values v in
 * [0, span] the output code is the number of levels L = 1..hi whose threshold t_L (the
 * smallest v of code >= L) v reaches. When span < 2^(s-1) (a spare top bit in each s-bit
 * lane), v + (2^(s-1) - t_L) sets the lane's top bit exactly when v >= t_L, without a carry
 * into the next lane: three adds, shifts and masks count the levels of every lane. */
#define MICO_DWP_COUNT(A, LS, ONES)                                                              \
    (((((A) + th0) >> ((LS) - 1u)) & (ONES)) + ((((A) + th1) >> ((LS) - 1u)) & (ONES)) +          \
     ((((A) + th2) >> ((LS) - 1u)) & (ONES)))

/* One buffer row of taps (weights W0..W2) into the 2 pair sums of a tile at stride SF. */
#define MICO_DWP_TAPS(X, W0, W1, W2, SF)                                                         \
    do {                                                                                          \
        const uint32_t x0 = (X)[0].w, x1 = (X)[1].w, x2 = (X)[2].w;                               \
        if ((SF) == 1) {                                                                          \
            const uint32_t x3 = (X)[3].w;                                                         \
            a0 += (W0) * x0 + (W1) * x1 + (W2) * x2;                                              \
            a1 += (W0) * x1 + (W1) * x2 + (W2) * x3;                                              \
        } else {                                                                                  \
            const uint32_t x3 = (X)[3].w, x4 = (X)[4].w;                                          \
            a0 += (W0) * x0 + (W1) * x1 + (W2) * x2;                                              \
            a1 += (W0) * x2 + (W1) * x3 + (W2) * x4;                                              \
        }                                                                                         \
    } while (0)

typedef void (*MicoDwpPlane)(const MicoDwpWord *, const uint32_t *, uint32_t, uint32_t, uint32_t,
                             uint32_t, const MicoDwp *, uint8_t *);

/* The plane functions (MicoDwpPlane) all take the same arguments: the channel's buffer, its
 * weights w in buffer order, binit (each lane's start), bb (added to a lane's value gives the
 * accumulator), the multiplier m and shift sh, the layer d and the channel's first output. */
#define MICO_DWP_PLANE_FN(NAME)                                                                  \
    static MICO_NOINLINE void NAME(const MicoDwpWord *buf, const uint32_t *w, uint32_t binit,     \
                                   uint32_t bb, uint32_t m, uint32_t sh, const MicoDwp *d,        \
                                   uint8_t *out)

/* The plane functions' constants of output mode MODE: 0 / 1 requantized (mico_dw8_put's forms:
 * rnd, hi; bb, m, sh), 2 by thresholds (d->th: th0..th2; ones, the lowest bit of each of K
 * lanes), 3 by table (d->lut). Each mode's macros below are chosen by name (MICO_DWP_CAT), so
 * that a plane function holds no other mode's code, not even code the compiler would drop. */
#define MICO_DWP_CAT(A, B) MICO_DWP_CAT_(A, B)
#define MICO_DWP_CAT_(A, B) A##B
#define MICO_DWP_CONSTS(K, MODE)                                                                 \
    const MicoDw8 *const g = &d->g;                                                               \
    const uint32_t *const wp = w;                                                                 \
    MICO_DWP_CAT(MICO_DWP_CONSTS_, MODE)(K)
#define MICO_DWP_CONSTS_0(K) const uint32_t rnd = 1u << (sh - 1u), hi = (uint32_t)g->hi
#define MICO_DWP_CONSTS_1(K) MICO_DWP_CONSTS_0(K)
#define MICO_DWP_CONSTS_2(K)                                                                     \
    const uint32_t th0 = d->th[0], th1 = d->th[1], th2 = d->th[2];                                \
    const uint32_t ones = (K) == 2   ? 0x10001u                                                   \
                          : (K) == 3 ? 0x100401u                                                  \
                          : (K) == 4 ? 0x01010101u                                                \
                                     : 0x01041041u;                                               \
    (void)bb;                                                                                     \
    (void)m;                                                                                      \
    (void)sh
#define MICO_DWP_CONSTS_3(K)                                                                     \
    const uint8_t *const lut = d->lut;                                                            \
    (void)bb;                                                                                     \
    (void)m;                                                                                      \
    (void)sh

/* K lanes a word (2: the pairs; 3 of 10 bits, 4 of 8, 5 of 6): lane J of word A, and the
 * lanes' width. */
#define MICO_DWP_LANE(A, J, K)                                                                  \
    ((J) == (K) - 1 ? (A) >> ((J) * MICO_DWP_LS(K))                                               \
                    : ((A) >> ((J) * MICO_DWP_LS(K))) & ((1u << MICO_DWP_LS(K)) - 1u))
#define MICO_DWP_LS(K) ((K) == 2 ? 16u : (K) == 3 ? 10u : (K) == 4 ? 8u : 6u) /* lane bits */

/* Lane J of word A stored at Q as an output code of MODE: requantized (0 / 1), by thresholds
 * (2: A the levels counted, MICO_DWP_LEVELS: at most 3 a lane, so lanes of 8 bits or more
 * need no mask, the byte store drops the lanes above) or by table (3). */
#define MICO_DWP_PUT(Q, A, J, K, MODE) MICO_DWP_CAT(MICO_DWP_PUT_, MODE)(Q, A, J, K)
#define MICO_DWP_PUT_0(Q, A, J, K)                                                               \
    mico_dw8_put(Q, (int32_t)(MICO_DWP_LANE(A, J, K) + bb), m, sh, rnd, hi, g, 0)
#define MICO_DWP_PUT_1(Q, A, J, K)                                                               \
    mico_dw8_put(Q, (int32_t)(MICO_DWP_LANE(A, J, K) + bb), m, sh, rnd, hi, g, 1)
#define MICO_DWP_PUT_2(Q, A, J, K)                                                               \
    (*(Q) = (uint8_t)(((A) >> ((J) * MICO_DWP_LS(K))) & (MICO_DWP_LS(K) >= 8u ? 0xffu : 7u)))
#define MICO_DWP_PUT_3(Q, A, J, K) (*(Q) = lut[MICO_DWP_LANE(A, J, K)])
/* Word A's lanes made the levels counted (MICO_DWP_COUNT) for MODE 2, else left. */
#define MICO_DWP_LEVELS(A, K, MODE) MICO_DWP_CAT(MICO_DWP_LEVELS_, MODE)(A, K)
#define MICO_DWP_LEVELS_0(A, K) ((void)0)
#define MICO_DWP_LEVELS_1(A, K) ((void)0)
#define MICO_DWP_LEVELS_2(A, K) ((A) = MICO_DWP_COUNT(A, MICO_DWP_LS(K), ones))
#define MICO_DWP_LEVELS_3(A, K) ((void)0)

/* All the outputs of one channel, K lanes a word: lane j of buffer row r holds padded row r +
 * j L ss (L = d->half output lines a lane; the pairs: K = 2), so one multiply serves K output
 * lines (s, s + L, ..). Tiles of 2 words along a buffer row at stride SF (4 outputs of the
 * pairs; the requantization's constants stay in registers), each word's lanes stored the high
 * ones first (a lane past the last line repeats the store of lane 0, which comes last); the
 * row's last output when n_fast is odd. Buffer rows g->ss apart a line for the pairs and at
 * stride 2 (SF = 2: stride 2 both ways), 1 for more lanes at stride 1. */
#define MICO_DWP_PLANE(NAME, K, SF, MODE)                                                        \
    MICO_DWP_PLANE_FN(NAME)                                                                       \
    {                                                                                             \
        MICO_DWP_CONSTS(K, MODE);                                                                 \
        const int32_t of = g->ostep_fast, full = g->n_fast >> 1, rest = g->n_fast & 1;            \
        const int32_t pitch = MICO_DWP_PITCH;                                                  \
        int32_t s, j;                                                                             \
        uint32_t a0, a1;                                                                          \
        for (s = 0; s < d->half; s++) {                                                           \
            const MicoDwpWord *b = buf + s * ((K) == 2 || (SF) == 2 ? g->ss : 1) * pitch;         \
            const MicoDwpWord *const end = b + full * 2 * (SF);                                   \
            uint8_t *o = out + s * g->ostep_slow;                                                 \
            int32_t oj[K];                                                                        \
            MICO_UNROLL for (j = 0; j < (K); j++) {                                               \
                oj[j] = s + j * d->half < g->n_slow ? j * d->half * g->ostep_slow : 0;          \
            }                                                                                     \
            for (; b < end; b += 2 * (SF), o += 2 * of) {                                         \
                a0 = a1 = binit;                                                                  \
                MICO_DWP_TAPS(b, wp[0], wp[1], wp[2], SF);                                        \
                MICO_DW8_FENCE();                                                                 \
                MICO_DWP_TAPS(b + pitch, wp[3], wp[4], wp[5], SF);                                \
                MICO_DW8_FENCE();                                                                 \
                MICO_DWP_TAPS(b + 2 * pitch, wp[6], wp[7], wp[8], SF);                            \
                MICO_DWP_LEVELS(a0, K, MODE);                                                     \
                MICO_DWP_LEVELS(a1, K, MODE);                                                     \
                MICO_DWP_PUTW(a0, a1, K, MODE);                                                   \
            }                                                                                     \
            if (rest) { /* the row's last output of each lane */                                  \
                uint32_t a = binit + wp[0] * b[0].w + wp[1] * b[1].w + wp[2] * b[2].w;            \
                a += wp[3] * b[pitch].w + wp[4] * b[pitch + 1].w + wp[5] * b[pitch + 2].w;        \
                a += wp[6] * b[2 * pitch].w + wp[7] * b[2 * pitch + 1].w +                        \
                     wp[8] * b[2 * pitch + 2].w;                                                  \
                MICO_DWP_LEVELS(a, K, MODE);                                                      \
                MICO_UNROLL for (j = (K) - 1; j >= 0; j--) {                                      \
                    MICO_DWP_PUT(o + oj[j], a, j, K, MODE);                                       \
                }                                                                                 \
            }                                                                                     \
        }                                                                                         \
    }
/* The stores of a tile's words A0 (outputs at o) and A1 (at o + of), the high lanes first:
 * lane by lane, or word by word for words of K lanes requantized without ReLU (which compile
 * to fewer instructions so, as the pairs do lane by lane). */
#define MICO_DWP_PUTW(A0, A1, K, MODE) MICO_DWP_CAT(MICO_DWP_PUTW_, MODE)(A0, A1, K, MODE)
#define MICO_DWP_PUTW_0(A0, A1, K, MODE) MICO_DWP_CAT(MICO_DWP_PUTW_0K, K)(A0, A1, K, MODE)
#define MICO_DWP_PUTW_0K2 MICO_DWP_PUTW_L
#define MICO_DWP_PUTW_0K3 MICO_DWP_PUTW_W
#define MICO_DWP_PUTW_0K4 MICO_DWP_PUTW_W
#define MICO_DWP_PUTW_0K5 MICO_DWP_PUTW_W
#define MICO_DWP_PUTW_W(A0, A1, K, MODE)                                                         \
    do {                                                                                          \
        int32_t j_;                                                                               \
        MICO_UNROLL for (j_ = (K) - 1; j_ >= 0; j_--) {                                           \
            MICO_DWP_PUT(o + oj[j_], A0, j_, K, MODE);                                            \
        }                                                                                         \
        MICO_UNROLL for (j_ = (K) - 1; j_ >= 0; j_--) {                                           \
            MICO_DWP_PUT(o + oj[j_] + of, A1, j_, K, MODE);                                       \
        }                                                                                         \
    } while (0)
#define MICO_DWP_PUTW_1 MICO_DWP_PUTW_L
#define MICO_DWP_PUTW_2 MICO_DWP_PUTW_L
#define MICO_DWP_PUTW_3 MICO_DWP_PUTW_L
#define MICO_DWP_PUTW_L(A0, A1, K, MODE)                                                         \
    do {                                                                                          \
        int32_t j_;                                                                               \
        MICO_UNROLL for (j_ = (K) - 1; j_ >= 0; j_--) {                                           \
            MICO_DWP_PUT(o + oj[j_], A0, j_, K, MODE);                                            \
            MICO_DWP_PUT(o + oj[j_] + of, A1, j_, K, MODE);                                       \
        }                                                                                         \
    } while (0)
MICO_DWP_PLANE(mico_dwp_k3_0, 3, 1, 0)
MICO_DWP_PLANE(mico_dwp_k3_1, 3, 1, 1)
MICO_DWP_PLANE(mico_dwp_k4_0, 4, 1, 0)
MICO_DWP_PLANE(mico_dwp_k4_1, 4, 1, 1)
MICO_DWP_PLANE(mico_dwp_k5_0, 5, 1, 0)
MICO_DWP_PLANE(mico_dwp_k5_1, 5, 1, 1)
MICO_DWP_PLANE(mico_dwp_k3_2, 3, 1, 2)
MICO_DWP_PLANE(mico_dwp_k4_2, 4, 1, 2)
MICO_DWP_PLANE(mico_dwp_k5_2, 5, 1, 2)
MICO_DWP_PLANE(mico_dwp_k3_2s2, 3, 2, 2)
MICO_DWP_PLANE(mico_dwp_k4_2s2, 4, 2, 2)

/* The plane functions for buffer rows of 5 outputs (stride 1; DS-CNN's planes of 5 columns):
 * the whole row one tile, its 7 words of a buffer row loaded once for the 5 sums; K lanes a
 * word (2: the pairs), outputs as MICO_DWP_PUT's MODE. */
#define MICO_DWP_PLANE5(NAME, K, MODE)                                                           \
    MICO_DWP_PLANE_FN(NAME)                                                                       \
    {                                                                                             \
        MICO_DWP_CONSTS(K, MODE);                                                                 \
        const int32_t of = g->ostep_fast, pitch = MICO_DWP_PITCH, lines = d->half;               \
        int32_t s, j;                                                                             \
        for (s = 0; s < lines; s++) {                                                             \
            const MicoDwpWord *const b = buf + s * pitch;                                         \
            uint8_t *const o = out + s * g->ostep_slow;                                           \
            uint32_t a0 = binit, a1 = binit, a2 = binit, a3 = binit, a4 = binit;                  \
            int32_t r;                                                                            \
            MICO_UNROLL for (r = 0; r < 3; r++) {                                                 \
                const MicoDwpWord *const x = b + r * pitch;                                       \
                const uint32_t w0 = wp[3 * r], w1 = wp[3 * r + 1], w2 = wp[3 * r + 2];            \
                const uint32_t x0 = x[0].w, x1 = x[1].w, x2 = x[2].w, x3 = x[3].w;                \
                const uint32_t x4 = x[4].w, x5 = x[5].w, x6 = x[6].w;                             \
                a0 += w0 * x0 + w1 * x1 + w2 * x2;                                                \
                a1 += w0 * x1 + w1 * x2 + w2 * x3;                                                \
                a2 += w0 * x2 + w1 * x3 + w2 * x4;                                                \
                a3 += w0 * x3 + w1 * x4 + w2 * x5;                                                \
                a4 += w0 * x4 + w1 * x5 + w2 * x6;                                                \
                MICO_DW8_FENCE();                                                                 \
            }                                                                                     \
            MICO_DWP_LEVELS(a0, K, MODE);                                                         \
            MICO_DWP_LEVELS(a1, K, MODE);                                                         \
            MICO_DWP_LEVELS(a2, K, MODE);                                                         \
            MICO_DWP_LEVELS(a3, K, MODE);                                                         \
            MICO_DWP_LEVELS(a4, K, MODE);                                                         \
            MICO_UNROLL for (j = (K) - 1; j >= 0; j--) { /* the high lanes first */              \
                uint8_t *const q = o + (s + j * lines < g->n_slow ? j * lines * g->ostep_slow : 0); \
                MICO_DWP_PUT(q, a0, j, K, MODE);                                                  \
                MICO_DWP_PUT(q + of, a1, j, K, MODE);                                             \
                MICO_DWP_PUT(q + 2 * of, a2, j, K, MODE);                                         \
                MICO_DWP_PUT(q + 3 * of, a3, j, K, MODE);                                         \
                MICO_DWP_PUT(q + 4 * of, a4, j, K, MODE);                                         \
            }                                                                                     \
        }                                                                                         \
    }
MICO_DWP_PLANE5(mico_dwp_p5_0, 2, 0)
MICO_DWP_PLANE5(mico_dwp_p5_1, 2, 1)
MICO_DWP_PLANE5(mico_dwp_k3_0r5, 3, 0)
MICO_DWP_PLANE5(mico_dwp_k3_1r5, 3, 1)
MICO_DWP_PLANE5(mico_dwp_k3_2r5, 3, 2)
MICO_DWP_PLANE5(mico_dwp_k3_3r5, 3, 3)
MICO_DWP_PLANE5(mico_dwp_k4_2r5, 4, 2)
MICO_DWP_PLANE5(mico_dwp_k4_3r5, 4, 3)
MICO_DWP_PLANE(mico_dwp_k3_3, 3, 1, 3)
MICO_DWP_PLANE(mico_dwp_k4_3, 4, 1, 3)

/* One buffer row of taps (weights W0..W2) into the 4 sums a0..a3 of words at stride SF. */
#define MICO_DWP_TAPS4(X, W0, W1, W2, SF)                                                        \
    do {                                                                                          \
        const uint32_t x0 = (X)[0].w, x1 = (X)[1].w, x2 = (X)[2].w, x3 = (X)[3].w;                \
        const uint32_t x4 = (X)[4].w, x5 = (X)[5].w;                                              \
        if ((SF) == 1) {                                                                          \
            a0 += (W0) * x0 + (W1) * x1 + (W2) * x2;                                              \
            a1 += (W0) * x1 + (W1) * x2 + (W2) * x3;                                              \
            a2 += (W0) * x2 + (W1) * x3 + (W2) * x4;                                              \
            a3 += (W0) * x3 + (W1) * x4 + (W2) * x5;                                              \
        } else {                                                                                  \
            const uint32_t x6 = (X)[6].w, x7 = (X)[7].w, x8 = (X)[8].w;                           \
            a0 += (W0) * x0 + (W1) * x1 + (W2) * x2;                                              \
            a1 += (W0) * x2 + (W1) * x3 + (W2) * x4;                                              \
            a2 += (W0) * x4 + (W1) * x5 + (W2) * x6;                                              \
            a3 += (W0) * x6 + (W1) * x7 + (W2) * x8;                                              \
        }                                                                                         \
    } while (0)

/* MICO_DWP_PLANE (MODE 3) storing 4-bit codes straight into the packed output (out: the channel's
 * first byte): rows of an even number of outputs along the buffer rows (not transposed), so a
 * tile's two outputs of a lane, columns c and c + 1 (c even), are one byte, lut[v_c] |
 * lut[v_(c+1)] << 4; lane j's byte at o + oj[j] (the high lanes first, as MICO_DWP_PUTW). */
#define MICO_DWP_PLANEKN(NAME, K, SF)                                                            \
    MICO_DWP_PLANE_FN(NAME)                                                                       \
    {                                                                                             \
        MICO_DWP_CONSTS(K, 3);                                                                    \
        const int32_t full = g->n_fast >> 1, rb = g->ostep_slow >> 1; /* bytes a line */          \
        const int32_t pitch = MICO_DWP_PITCH, lines = d->half;                                    \
        int32_t s, j;                                                                             \
        uint32_t a0, a1, a2, a3;                                                                  \
        for (s = 0; s < lines; s++) {                                                             \
            const MicoDwpWord *b = buf + s * ((SF) == 1 ? 1 : g->ss) * pitch;                     \
            const MicoDwpWord *const end = b + full * 2 * (SF);                                   \
            uint8_t *o = out + s * rb;                                                            \
            int32_t oj[K];                                                                        \
            MICO_UNROLL for (j = 0; j < (K); j++) {                                               \
                oj[j] = s + j * lines < g->n_slow ? j * lines * rb : 0;                           \
            }                                                                                     \
            /* stride 2: 4 outputs (2 bytes a lane) an iteration, 9 word loads a buffer row; at    \
             * stride 1 the 2-output tile (fewer registers) runs alone */                        \
            for (; (SF) == 2 && b + 4 * (SF) <= end; b += 4 * (SF), o += 2) {                     \
                a0 = a1 = a2 = a3 = binit;                                                        \
                MICO_DWP_TAPS4(b, wp[0], wp[1], wp[2], SF);                                       \
                MICO_DW8_FENCE();                                                                 \
                MICO_DWP_TAPS4(b + pitch, wp[3], wp[4], wp[5], SF);                               \
                MICO_DW8_FENCE();                                                                 \
                MICO_DWP_TAPS4(b + 2 * pitch, wp[6], wp[7], wp[8], SF);                           \
                MICO_UNROLL for (j = (K) - 1; j >= 0; j--) {                                      \
                    o[oj[j]] = (uint8_t)(lut[MICO_DWP_LANE(a0, j, K)] |                           \
                                         lut[MICO_DWP_LANE(a1, j, K)] << 4);                      \
                    o[oj[j] + 1] = (uint8_t)(lut[MICO_DWP_LANE(a2, j, K)] |                       \
                                             lut[MICO_DWP_LANE(a3, j, K)] << 4);                  \
                }                                                                                 \
            }                                                                                     \
            for (; b < end; b += 2 * (SF), o++) { /* 2 outputs: a byte a lane */                  \
                a0 = a1 = binit;                                                                  \
                MICO_DWP_TAPS(b, wp[0], wp[1], wp[2], SF);                                        \
                MICO_DW8_FENCE();                                                                 \
                MICO_DWP_TAPS(b + pitch, wp[3], wp[4], wp[5], SF);                                \
                MICO_DW8_FENCE();                                                                 \
                MICO_DWP_TAPS(b + 2 * pitch, wp[6], wp[7], wp[8], SF);                            \
                MICO_UNROLL for (j = (K) - 1; j >= 0; j--) {                                      \
                    o[oj[j]] = (uint8_t)(lut[MICO_DWP_LANE(a0, j, K)] |                           \
                                         lut[MICO_DWP_LANE(a1, j, K)] << 4);                      \
                }                                                                                 \
            }                                                                                     \
        }                                                                                         \
    }
MICO_DWP_PLANEKN(mico_dwp_k3_4, 3, 1)
MICO_DWP_PLANEKN(mico_dwp_k4_4, 4, 1)
MICO_DWP_PLANEKN(mico_dwp_k3_4s2, 3, 2)
MICO_DWP_PLANEKN(mico_dwp_k4_4s2, 4, 2)

/* The buffer of 5 lanes of 6 bits for planes of at most 5 columns, transposed (MicoDwp with
 * one line group: lane j of buffer row r holds padded column r + j): a row y of the plane,
 * src[y * in_w + x], gathered once into W = sum_x u_x 2^(6 x); buffer word (r, pad_h + y) is W
 * moved by pad_w - r lanes (its lanes 0..4). */
static MICO_DWL_INLINE void mico_dwp_build5(const uint8_t *src, int32_t in_h, int32_t in_w,
                                            int32_t pad_h, int32_t pad_w, MicoDwpWord *buf)
{
    /* row r: W << l_r >> r_r (pad_w - r lanes; pad_w <= 2 along a plane of 5 columns) */
    const uint32_t l0 = pad_w > 0 ? 6u * (uint32_t)pad_w : 0u, r0 = 0u;
    const uint32_t l1 = pad_w > 1 ? 6u * (uint32_t)(pad_w - 1) : 0u, r1 = pad_w < 1 ? 6u : 0u;
    const uint32_t l2 = pad_w > 2 ? 6u * (uint32_t)(pad_w - 2) : 0u;
    const uint32_t r2 = pad_w < 2 ? 6u * (uint32_t)(2 - pad_w) : 0u;
    const uint32_t mask = 0x3fffffffu;
    MicoDwpWord *o = buf + pad_h;
    int32_t y, x;
    for (y = 0; y < in_h; y++, src += in_w, o++) {
        uint32_t v;
        if (in_w == 5) {
            v = (uint32_t)src[0] + ((uint32_t)src[1] << 6) + ((uint32_t)src[2] << 12) +
                ((uint32_t)src[3] << 18) + ((uint32_t)src[4] << 24);
        } else {
            v = 0;
            for (x = 0; x < in_w; x++) {
                v += (uint32_t)src[x] << (6 * x);
            }
        }
        o[0].w = (v << l0 >> r0) & mask;
        o[MICO_DWP_PITCH].w = (v << l1 >> r1) & mask;
        o[2 * MICO_DWP_PITCH].w = (v << l2 >> r2) & mask;
    }
}

/* mico_dwp_build5 from the packed codes (b = 1, 2, 4 bits, the plane's first code at bit
 * `bit`), without unpacking the plane: a row's in_w codes read from a bit stream (only the
 * bytes that hold them), their fields moved 6 bits apart. */
static MICO_DWL_INLINE void mico_dwp_build5p(const uint8_t *in, size_t bit, int32_t in_h,
                                             int32_t in_w, uint32_t b, int32_t pad_h,
                                             int32_t pad_w, MicoDwpWord *buf)
{
    const uint32_t l0 = pad_w > 0 ? 6u * (uint32_t)pad_w : 0u, r0 = 0u;
    const uint32_t l1 = pad_w > 1 ? 6u * (uint32_t)(pad_w - 1) : 0u, r1 = pad_w < 1 ? 6u : 0u;
    const uint32_t l2 = pad_w > 2 ? 6u * (uint32_t)(pad_w - 2) : 0u;
    const uint32_t r2 = pad_w < 2 ? 6u * (uint32_t)(2 - pad_w) : 0u;
    const uint32_t mask = 0x3fffffffu, fm = (1u << b) - 1u, n = (uint32_t)in_w * b;
    const uint32_t rm = (1u << n) - 1u;
    const uint8_t *q = in + (bit >> 3);
    uint32_t acc = (uint32_t)*q++ >> (bit & 7u), have = 8u - (uint32_t)(bit & 7u);
    MicoDwpWord *o = buf + pad_h;
    int32_t y, x;
    for (y = 0; y < in_h; y++, o++) {
        uint32_t c, v;
        while (have < n) { /* (have < n <= 20: the byte fits above it) */
            acc |= (uint32_t)*q++ << have;
            have += 8u;
        }
        c = acc & rm;
        acc >>= n;
        have -= n;
        if (b == 2u && in_w == 5) { /* DS-CNN's planes: 2-bit fields 6 bits apart */
            v = (c & 3u) | (c & 0xcu) << 4 | (c & 0x30u) << 8 | (c & 0xc0u) << 12 |
                (c & 0x300u) << 16;
        } else {
            v = 0;
            for (x = 0; x < in_w; x++) {
                v |= ((c >> (b * (uint32_t)x)) & fm) << (6 * x);
            }
        }
        o[0].w = (v << l0 >> r0) & mask;
        o[MICO_DWP_PITCH].w = (v << l1 >> r1) & mask;
        o[2 * MICO_DWP_PITCH].w = (v << l2 >> r2) & mask;
    }
}

/* The buffer of K lanes (MICO_DWP_PLANE) from a channel's codes as bytes, src[line * srow +
 * x * scol] for input line `line` (0..n_line - 1) and position x (0..n_x - 1) along it (u =
 * the code: unsigned codes without a zero point, u_pad = 0): lane j of buffer row r, column
 * x (row points at column 0 of the plane), holds line first + r + j D (0 outside the plane);
 * a word at a time from its K codes. The padding columns hold 0 from the layer's start. */
static MICO_DWL_INLINE void mico_dwp_buildk(const uint8_t *src, int32_t srow, int32_t scol,
                                             int32_t n_line, int32_t n_x, int32_t first,
                                             const MicoDwp *d, uint32_t hk, MicoDwpWord *row,
                                             const uint32_t k)
{
    static const uint8_t zeros[MICO_DWP_PITCH * 8]; /* a line outside the plane */
    const int32_t half = d->half;
    const uint32_t ls = k == 3u ? 10u : 8u;
    int32_t r, x;
    for (r = 0; r < d->rows; r++, row += MICO_DWP_PITCH) {
        const int32_t l0 = first + r;
        const uint8_t *p0 = (uint32_t)l0 < (uint32_t)n_line ? src + l0 * srow : zeros;
        const uint8_t *p1 = (uint32_t)(l0 + half) < (uint32_t)n_line ? src + (l0 + half) * srow
                                                                      : zeros;
        const uint8_t *p2 = (uint32_t)(l0 + 2 * half) < (uint32_t)n_line
                                ? src + (l0 + 2 * half) * srow
                                : zeros;
        const uint8_t *p3 = k == 4u && (uint32_t)(l0 + 3 * half) < (uint32_t)n_line
                                ? src + (l0 + 3 * half) * srow
                                : zeros;
        MicoDwpWord *o = row;
        if (n_x == 5 && scol == 1) { /* DS-CNN's rows of 5: constant offsets, no pointer steps */
            MICO_UNROLL for (x = 0; x < 5; x++) {
                uint32_t v = (uint32_t)p0[x] + ((uint32_t)p1[x] << ls) +
                             ((uint32_t)p2[x] << (2u * ls));
                if (k == 4u) {
                    v += (uint32_t)p3[x] << 24;
                }
                o[x].w = v ^ hk;
            }
            continue;
        }
        for (x = 0; x < n_x; x++, p0 += scol, p1 += scol, p2 += scol, o++) {
            uint32_t v = (uint32_t)*p0 + ((uint32_t)*p1 << ls) + ((uint32_t)*p2 << (2u * ls));
            if (k == 4u) {
                v += (uint32_t)*p3 << 24;
                p3 += scol;
            }
            /* signed codes' fields f: u = f ^ h in every lane at once (the fields do not
             * overlap); a line outside the plane (fields 0) gives u_pad = h */
            o->w = v ^ hk;
        }
    }
}

/* mico_dwp_buildk for 3 and 4 lanes, unsigned codes (hk = 0) or signed (hk: 2^(b-1) in
 * every lane). */
static MICO_DWL_INLINE void mico_dwp_build(const uint8_t *src, int32_t srow, int32_t scol,
                                           int32_t n_line, int32_t n_x, int32_t first,
                                           const MicoDwp *d, uint32_t k, uint32_t hk,
                                           MicoDwpWord *row)
{
    if (k == 3u && hk) {
        mico_dwp_buildk(src, srow, scol, n_line, n_x, first, d, hk, row, 3u);
    } else if (k == 3u) {
        mico_dwp_buildk(src, srow, scol, n_line, n_x, first, d, 0u, row, 3u);
    } else if (hk) {
        mico_dwp_buildk(src, srow, scol, n_line, n_x, first, d, hk, row, 4u);
    } else {
        mico_dwp_buildk(src, srow, scol, n_line, n_x, first, d, 0u, row, 4u);
    }
}

/* The pixel (a u) of padded buffer position (r, x): row r's low lane or row r - D's high. */
static inline uint32_t mico_dwp_u(const MicoDwp *d, const MicoDwpWord *buf, int32_t r, int32_t x)
{
    const int32_t lo = mico_dwp_low_half(), dd = d->half * d->g.ss;
    return r < d->rows ? buf[r * MICO_DWP_PITCH + x].h[lo]
                       : buf[(r - dd) * MICO_DWP_PITCH + x].h[1 - lo];
}

/* The 9 weight codes of channel ch (signed codes of wb bits, packed; binary: {-1, +1}), as
 * mico_load reads them, in buffer order (transposed: w[3 c + r] is tap (r, c)), read in one
 * pass that reads no byte past the channel's last code. */
/* Codes 0..7 of v (wb = 2 or 4 bits each) and code 8 (c8) as signed weights, in buffer order
 * (at), with their sum and the sum of their magnitudes (constant shifts and indices). */
static MICO_DWL_INLINE void mico_dwp_w9(uint32_t v, uint32_t c8, uint32_t *w, uint32_t *sums,
                                        const uint32_t wb, const int trans)
{
    static const uint8_t order[2][9] = {{0, 1, 2, 3, 4, 5, 6, 7, 8},
                                        {0, 3, 6, 1, 4, 7, 2, 5, 8}};
    const uint32_t mask = (1u << wb) - 1u, h = 1u << (wb - 1u);
    uint32_t sum = 0, sabs = 0, j;
    MICO_UNROLL for (j = 0; j < 9u; j++) {
        const uint32_t f = j < 8u ? (v >> (j * wb)) & mask : c8 & mask;
        const uint32_t x = (f ^ h) - h, sign = 0u - (x >> 31);
        w[order[trans][j]] = x;
        sum += x;
        sabs += (x ^ sign) - sign;
    }
    sums[0] = sum;
    sums[1] = sabs;
}

static MICO_NOINLINE void mico_dwp_weights(const uint8_t *weight, uint32_t ch, uint32_t wb,
                                           int trans, uint32_t *w, uint32_t *sums)
{
    const size_t bit = (size_t)ch * 9u * wb;
    const uint32_t mask = wb >= 8u ? 0xffu : (1u << wb) - 1u, h = 1u << (wb - 1u);
    const uint8_t *q = weight + (bit >> 3);
    uint32_t acc = (uint32_t)*q++ >> (bit & 7u), have = 8u - (uint32_t)(bit & 7u), j;
    uint32_t sum = 0, sabs = 0;
    if (wb == 4u || wb == 2u) { /* the 9 codes' bytes (5 or 3, all of them the channel's) */
        const uint32_t lo = (uint32_t)q[-1] | (uint32_t)q[0] << 8 | (uint32_t)q[1] << 16 |
                            (wb == 4u ? (uint32_t)q[2] << 24 : 0u);
        const uint32_t sh = (uint32_t)(bit & 7u);
        /* codes 0..7 of 4 bits (0..8 of 2) from lo >> sh, code 8 of 4 bits from the last byte */
        const uint32_t v = wb == 4u && sh ? lo >> sh | (uint32_t)q[3] << (32u - sh) : lo >> sh;
        if (wb == 4u) {
            const uint32_t c8 = (uint32_t)q[3] >> sh;
            if (trans) {
                mico_dwp_w9(v, c8, w, sums, 4u, 1);
            } else {
                mico_dwp_w9(v, c8, w, sums, 4u, 0);
            }
        } else if (trans) {
            mico_dwp_w9(v, v >> 16, w, sums, 2u, 1);
        } else {
            mico_dwp_w9(v, v >> 16, w, sums, 2u, 0);
        }
        return;
    }
    for (j = 0; j < 9u; j++) {
        uint32_t f, x, sign;
        while (have < wb) {
            acc |= (uint32_t)*q++ << have;
            have += 8u;
        }
        f = acc & mask;
        acc >>= wb;
        have -= wb;
        x = wb == 1u ? (f ? 1u : 0xffffffffu) : (f ^ h) - h;
        sign = 0u - (x >> 31);
        w[trans ? j % 3u * 3u + j / 3u : j] = x;
        sum += x;
        sabs += (x ^ sign) - sign;
    }
    sums[0] = sum;
    sums[1] = sabs;
}

/* A channel whose sums do not fit 16-bit lanes: one output at a time from the buffer (acc:
 * the accumulator's constant part, bias - u_pad * sum_t w_t). */
static MICO_NOINLINE void mico_dwp_plain(const MicoDwp *d, const MicoDwpWord *buf,
                                         const uint32_t *w, uint32_t acc, const MicoRq *rq,
                                         uint8_t *out)
{
    const MicoDw8 *g = &d->g;
    int32_t s, f, t;
    for (s = 0; s < g->n_slow; s++) {
        for (f = 0; f < g->n_fast; f++) {
            uint32_t a = acc;
            for (t = 0; t < 9; t++) {
                a += w[t] * mico_dwp_u(d, buf, s * g->ss + t / 3, f * d->sf + t % 3);
            }
            out[s * g->ostep_slow + f * g->ostep_fast] = (uint8_t)mico_rq_apply(rq, (int32_t)a);
        }
    }
}

/* One row of n codes of b bits from bit `bit` of the packed input, made u (^ hx; hxx: hx in
 * every field of a byte), into halfwords d[j HS]: whole bytes of 1-, 2-, 4-bit codes at a
 * time, bytes of 8-bit codes as they are, other widths through a bit buffer; no byte past
 * the row's last code is read. */
#define MICO_DWP_READ_ROW(HS)                                                                    \
    do {                                                                                          \
        const uint8_t *q = in + (bit >> 3);                                                       \
        uint32_t off = (uint32_t)(bit & 7u);                                                      \
        uint16_t *d = h;                                                                          \
        int32_t j = 0;                                                                            \
        if (b == 8u) {                                                                            \
            for (; j + 4 <= n; j += 4, d += 4 * (HS)) {                                           \
                d[0] = (uint16_t)(q[j] ^ hx);                                                     \
                d[HS] = (uint16_t)(q[j + 1] ^ hx);                                                \
                d[2 * (HS)] = (uint16_t)(q[j + 2] ^ hx);                                          \
                d[3 * (HS)] = (uint16_t)(q[j + 3] ^ hx);                                          \
            }                                                                                     \
            for (; j < n; j++, d += (HS)) {                                                       \
                *d = (uint16_t)(q[j] ^ hx);                                                       \
            }                                                                                     \
        } else if (8u % b == 0u) {                                                                \
            for (; j < n && off != 0u; j++, d += (HS)) { /* up to a byte boundary */             \
                *d = (uint16_t)((((uint32_t)*q >> off) & mask) ^ hx);                             \
                off = (off + b) & 7u;                                                             \
                q += off == 0u;                                                                   \
            }                                                                                     \
            if (b == 4u) {                                                                        \
                for (; j + 4 <= n; j += 4, d += 4 * (HS), q += 2) {                               \
                    const uint32_t v = q[0] ^ hxx, u = q[1] ^ hxx;                                \
                    d[0] = (uint16_t)(v & 15u);                                                   \
                    d[HS] = (uint16_t)(v >> 4);                                                   \
                    d[2 * (HS)] = (uint16_t)(u & 15u);                                            \
                    d[3 * (HS)] = (uint16_t)(u >> 4);                                             \
                }                                                                                 \
                if (j + 2 <= n) { /* then at most one code is left (below) */                     \
                    const uint32_t v = *q++ ^ hxx;                                                \
                    d[0] = (uint16_t)(v & 15u);                                                   \
                    d[HS] = (uint16_t)(v >> 4);                                                   \
                    j += 2;                                                                       \
                    d += 2 * (HS);                                                                \
                }                                                                                 \
            } else if (b == 2u) {                                                                 \
                for (; j + 4 <= n; j += 4, d += 4 * (HS), q++) {                                  \
                    const uint32_t v = q[0] ^ hxx;                                                \
                    d[0] = (uint16_t)(v & 3u);                                                    \
                    d[HS] = (uint16_t)((v >> 2) & 3u);                                            \
                    d[2 * (HS)] = (uint16_t)((v >> 4) & 3u);                                      \
                    d[3 * (HS)] = (uint16_t)(v >> 6);                                             \
                }                                                                                 \
            } else {                                                                              \
                for (; j + 8 <= n; j += 8, d += 8 * (HS), q++) {                                  \
                    const uint32_t v = q[0];                                                      \
                    d[0] = (uint16_t)(v & 1u);                                                    \
                    d[HS] = (uint16_t)((v >> 1) & 1u);                                            \
                    d[2 * (HS)] = (uint16_t)((v >> 2) & 1u);                                      \
                    d[3 * (HS)] = (uint16_t)((v >> 3) & 1u);                                      \
                    d[4 * (HS)] = (uint16_t)((v >> 4) & 1u);                                      \
                    d[5 * (HS)] = (uint16_t)((v >> 5) & 1u);                                      \
                    d[6 * (HS)] = (uint16_t)((v >> 6) & 1u);                                      \
                    d[7 * (HS)] = (uint16_t)(v >> 7);                                             \
                }                                                                                 \
            }                                                                                     \
            if (j < n) { /* the row's last codes, in one byte */                                  \
                uint32_t v = *q ^ hxx;                                                            \
                for (; j < n; j++, d += (HS), v >>= b) {                                          \
                    *d = (uint16_t)(v & mask);                                                    \
                }                                                                                 \
            }                                                                                     \
        } else {                                                                                  \
            uint32_t acc = (uint32_t)*q++ >> off, have = 8u - off;                                \
            for (; j < n; j++, d += (HS)) {                                                       \
                if (have < b) {                                                                   \
                    acc |= (uint32_t)*q++ << have;                                                \
                    have += 8u;                                                                   \
                }                                                                                 \
                *d = (uint16_t)((acc & mask) ^ hx);                                               \
                acc >>= b;                                                                        \
                have -= b;                                                                        \
            }                                                                                     \
        }                                                                                         \
    } while (0)

/* rows rows of n codes each (the first at bit `bit`, rows row_bits apart) of the packed input
 * into halfword `half` of the buffer: code j of row i at word dst[i di + j dj], along the
 * buffer's rows (dj 1, di the pitch) or its columns (dj the pitch, di 1). */
static MICO_NOINLINE void mico_dwp_read(const uint8_t *in, size_t bit, size_t row_bits,
                                        int32_t rows, int32_t n, uint32_t b, uint32_t hx,
                                        MicoDwpWord *dst, int half, int32_t dj)
{
    const uint32_t mask = (1u << b) - 1u;
    const uint32_t hxx = b == 4u ? hx * 0x11u : b == 2u ? hx * 0x55u : hx;
    uint16_t *h = &dst[0].h[half];
    int32_t i;
    if (dj == 1) {
        for (i = 0; i < rows; i++, bit += row_bits, h += 2 * MICO_DWP_PITCH) {
            MICO_DWP_READ_ROW(2);
        }
    } else {
        for (i = 0; i < rows; i++, bit += row_bits, h += 2) {
            MICO_DWP_READ_ROW(2 * MICO_DWP_PITCH);
        }
    }
}

/* Both lanes of the pairs' buffer rows 0..rows-1 at once from rows of n codes of b (1, 2, 4,
 * 8) bits that start on a byte (the first at bit `bit`, rows row_bits apart): buffer row r
 * takes input line first + r in its low lane and first + r + step in its high one, a line
 * outside 0..n_line-1 the padding (u_pad in every field of pad_byte); words dst[r pitch + j].
 * A byte of each line makes 8 / b words: T = byte_lo | byte_hi << 16, word x the fields
 * (T >> b x) & (mask | mask << 16) -- three instructions a word, no halfword stores. */
static MICO_DWL_INLINE void mico_dwp_read2k(const uint8_t *in, size_t bit, size_t row_bits,
                                            int32_t first, int32_t step, int32_t n_line,
                                            int32_t rows, int32_t n, uint32_t hxx,
                                            uint32_t pad_byte, MicoDwpWord *dst, const uint32_t b)
{
    const uint32_t per = 8u / b, fm = (b >= 8u ? 0xffu : (1u << b) - 1u) * 0x10001u;
    const int32_t whole = n / (int32_t)per, left = n % (int32_t)per;
    int32_t r, j;
    uint32_t x;
    for (r = 0; r < rows; r++, dst += MICO_DWP_PITCH) {
        const int32_t la = first + r, lb = la + step;
        const int va = (uint32_t)la < (uint32_t)n_line, vb = (uint32_t)lb < (uint32_t)n_line;
        const uint8_t *pa = in + ((bit + (size_t)(va ? la : 0) * row_bits) >> 3);
        const uint8_t *pb = in + ((bit + (size_t)(vb ? lb : 0) * row_bits) >> 3);
        const uint32_t xa = va ? hxx : 0u, xb = vb ? hxx : 0u;
        MicoDwpWord *o = dst;
        if (!va && !vb) {
            continue; /* padding in both lanes, as the layer left it */
        }
        if (!va || !vb) { /* one lane's line: the other reads a padding byte */
            uint8_t pads[1];
            pads[0] = (uint8_t)pad_byte;
            if (!va) {
                pa = pads;
            } else {
                pb = pads;
            }
            for (j = 0; j < whole + (left > 0); j++, o += per) {
                const uint32_t t = ((uint32_t)pa[va ? j : 0] ^ xa) |
                                   ((uint32_t)pb[vb ? j : 0] ^ xb) << 16;
                const uint32_t m = j < whole ? per : (uint32_t)left;
                for (x = 0; x < m; x++) {
                    o[x].w = (t >> (b * x)) & fm;
                }
            }
            continue;
        }
        j = 0;
        if (b == 8u && !hxx) { /* unsigned bytes: four words an iteration, no masks */
            for (; j + 4 <= whole; j += 4, o += 4) {
                o[0].w = (uint32_t)pa[j] | (uint32_t)pb[j] << 16;
                o[1].w = (uint32_t)pa[j + 1] | (uint32_t)pb[j + 1] << 16;
                o[2].w = (uint32_t)pa[j + 2] | (uint32_t)pb[j + 2] << 16;
                o[3].w = (uint32_t)pa[j + 3] | (uint32_t)pb[j + 3] << 16;
            }
        }
        for (; j < whole; j++, o += per) {
            const uint32_t t = ((uint32_t)pa[j] ^ hxx) | ((uint32_t)pb[j] ^ hxx) << 16;
            MICO_UNROLL for (x = 0; x < per; x++) {
                o[x].w = (t >> (b * x)) & fm;
            }
        }
        if (left > 0) { /* the row's last codes, in one byte of each line */
            const uint32_t t = ((uint32_t)pa[whole] ^ hxx) | ((uint32_t)pb[whole] ^ hxx) << 16;
            for (x = 0; x < (uint32_t)left; x++) {
                o[x].w = (t >> (b * x)) & fm;
            }
        }
    }
}

static MICO_DWL_INLINE void mico_dwp_read2(const uint8_t *in, size_t bit, size_t row_bits,
                                           int32_t first, int32_t step, int32_t n_line,
                                           int32_t rows, int32_t n, uint32_t b, uint32_t hxx,
                                           uint32_t pad_byte, MicoDwpWord *dst)
{
    if (b == 2u) {
        mico_dwp_read2k(in, bit, row_bits, first, step, n_line, rows, n, hxx, pad_byte, dst, 2u);
    } else if (b == 4u) {
        mico_dwp_read2k(in, bit, row_bits, first, step, n_line, rows, n, hxx, pad_byte, dst, 4u);
    } else if (b == 1u) {
        mico_dwp_read2k(in, bit, row_bits, first, step, n_line, rows, n, hxx, pad_byte, dst, 1u);
    } else {
        mico_dwp_read2k(in, bit, row_bits, first, step, n_line, rows, n, hxx, pad_byte, dst, 8u);
    }
}

/* n fields of b (1..7) bits from bit `bit` of a packed stream, as bytes (whole bytes of 1-,
 * 2- and 4-bit codes at a time; never a byte past the last field). */
static void mico_dwp_lines5(const uint8_t *in, size_t bit, int32_t n, uint32_t *R);
/* The line words' margins: zero words before line 0, and twice as many after the last one
 * (the buffers read lines -pad_h .. n_line + pad_h + 2; pad_h <= MICO_DWP_LM; 8 + 204 + 16
 * words within the staging bytes) */
#define MICO_DWP_LM 8
static MICO_NOINLINE void mico_dwp_unpack(const uint8_t *in, size_t bit, int32_t n, uint32_t b,
                                          uint8_t *dst, int lines)
{
    const uint32_t mask = (1u << b) - 1u;
    int32_t i = 0;
    if (lines) { /* rows of 5 codes of 4 bits: a line word a row instead (mico_dwp_lines5) */
        uint32_t *const R = (uint32_t *)(void *)dst + MICO_DWP_LM;
        const int32_t rows = n / 5;
        int32_t y;
        MICO_UNROLL for (y = 0; y < MICO_DWP_LM; y++) { /* (stores, not a memset call) */
            R[y - MICO_DWP_LM] = 0u;
            R[rows + 2 * y] = 0u;
            R[rows + 2 * y + 1] = 0u;
        }
        mico_dwp_lines5(in, bit, rows, R);
        return;
    }
    if (8u % b == 0u) {
        const uint8_t *p;
        for (; i < n && ((bit + (size_t)i * b) & 7u) != 0u; i++) { /* up to a byte boundary */
            const size_t at = bit + (size_t)i * b;
            dst[i] = (uint8_t)((uint32_t)(in[at >> 3] >> (at & 7u)) & mask);
        }
        p = in + ((bit + (size_t)i * b) >> 3);
        if (b == 4u) {
            for (; i + 4 <= n; i += 4, p += 2) {
                const uint32_t v = *p, u = p[1];
                dst[i] = (uint8_t)(v & 15u);
                dst[i + 1] = (uint8_t)(v >> 4);
                dst[i + 2] = (uint8_t)(u & 15u);
                dst[i + 3] = (uint8_t)(u >> 4);
            }
            if (i + 2 <= n) {
                const uint32_t v = *p++;
                dst[i] = (uint8_t)(v & 15u);
                dst[i + 1] = (uint8_t)(v >> 4);
                i += 2;
            }
        } else if (b == 2u) {
            for (; i + 4 <= n; i += 4, p++) {
                const uint32_t v = *p;
                dst[i] = (uint8_t)(v & 3u);
                dst[i + 1] = (uint8_t)((v >> 2) & 3u);
                dst[i + 2] = (uint8_t)((v >> 4) & 3u);
                dst[i + 3] = (uint8_t)(v >> 6);
            }
        } else {
            for (; i + 8 <= n; i += 8, p++) {
                const uint32_t v = *p;
                int32_t j;
                for (j = 0; j < 8; j++) {
                    dst[i + j] = (uint8_t)((v >> j) & 1u);
                }
            }
        }
        if (i < n) { /* the last codes, in one byte */
            uint32_t v = *p;
            for (; i < n; i++, v >>= b) {
                dst[i] = (uint8_t)(v & mask);
            }
        }
        return;
    }
    {
        const uint8_t *p = in + (bit >> 3);
        uint32_t acc = (uint32_t)*p++ >> (bit & 7u), have = 8u - (uint32_t)(bit & 7u);
        for (; i < n; i++) {
            if (have < b) {
                acc |= (uint32_t)*p++ << have;
                have += 8u;
            }
            dst[i] = (uint8_t)(acc & mask);
            acc >>= b;
            have -= b;
        }
    }
}

/* Both lanes of the pairs' buffer rows 0..rows-1 at once from codes as bytes (planes of short
 * rows: src[line * srow + x * scol], made u by ^ hx): buffer row r takes line first + r in its
 * low lane and first + r + step in its high one, u_pad for a line outside 0..n_line-1; words
 * dst[r pitch + x], x < n_x. Two byte loads, a shift, an or and a store a word (rows of 5 at
 * constant offsets), where the halfword spreads take two passes. */
static MICO_DWL_INLINE void mico_dwp_spread2(const uint8_t *src, int32_t srow, int32_t scol,
                                             int32_t first, int32_t step, int32_t n_line,
                                             int32_t rows, int32_t n_x, uint32_t hx, uint32_t upad,
                                             MicoDwpWord *dst)
{
    int32_t r, x;
    for (r = 0; r < rows; r++, dst += MICO_DWP_PITCH) {
        const int32_t la = first + r, lb = la + step;
        const int va = (uint32_t)la < (uint32_t)n_line, vb = (uint32_t)lb < (uint32_t)n_line;
        const uint8_t *pa = src + (va ? la : 0) * srow, *pb = src + (vb ? lb : 0) * srow;
        MicoDwpWord *o = dst;
        if (va && vb) {
            if (n_x == 5 && scol == 1) {
                MICO_UNROLL for (x = 0; x < 5; x++) {
                    o[x].w = ((uint32_t)pa[x] ^ hx) | ((uint32_t)pb[x] ^ hx) << 16;
                }
                continue;
            }
            for (x = 0; x < n_x; x++, pa += scol, pb += scol) {
                o[x].w = ((uint32_t)*pa ^ hx) | ((uint32_t)*pb ^ hx) << 16;
            }
        } else if (va) {
            for (x = 0; x < n_x; x++, pa += scol) {
                o[x].w = ((uint32_t)*pa ^ hx) | upad << 16;
            }
        } else if (vb) {
            for (x = 0; x < n_x; x++, pb += scol) {
                o[x].w = upad | ((uint32_t)*pb ^ hx) << 16;
            }
        }
    }
}

/* n fields (v + zero, b bits) at bit `bit` of a packed stream, keeping the stream's other
 * bits in the first and last bytes. */
static void mico_dwp_fields(uint8_t *out, size_t bit, const uint8_t *v, int32_t n, uint32_t b,
                            uint32_t zero)
{
    const uint32_t mask = b >= 8u ? 0xffu : (1u << b) - 1u;
    uint8_t *q = out + (bit >> 3);
    uint32_t nb = (uint32_t)(bit & 7u), acc;
    int32_t i;
    if (n <= 0) {
        return; /* (bit may be the end of the tensor: no byte to read) */
    }
    acc = nb ? (uint32_t)*q & ((1u << nb) - 1u) : 0u;
    for (i = 0; i < n; i++) {
        acc |= (((uint32_t)v[i] + zero) & mask) << nb;
        nb += b;
        while (nb >= 8u) {
            *q++ = (uint8_t)acc;
            acc >>= 8;
            nb -= 8u;
        }
    }
    if (nb) {
        *q = (uint8_t)(((uint32_t)*q & ~((1u << nb) - 1u)) | acc);
    }
}

/* Staged output codes v[0 .. n-1] (bytes) packed from code `start` of the output: whole words
 * of 1-, 2- and 4-bit codes at a time (v is word-aligned at the first code that starts a
 * byte: mico_dwp_stage_at), the others field by field. */
static MICO_NOINLINE void mico_dwp_pack(void *out, size_t start, const uint8_t *v, int32_t n,
                                        MicoFmt f)
{
    const uint32_t b = (uint32_t)f.bits, zero = f.is_signed ? 0u : (uint32_t)f.zero;
    const int32_t per = b < 8u && 8u % b == 0u ? (int32_t)(8u / b) : 0;
    int32_t i = 0;
    uint8_t *q;
    if (!per || zero || mico_dwp_low_half()) {
        mico_dwp_fields((uint8_t *)out, start * b, v, n, b, zero);
        return;
    }
    i = (int32_t)((size_t)(per - (int32_t)(start % (size_t)per)) % (size_t)per);
    i = i < n ? i : n;
    mico_dwp_fields((uint8_t *)out, start * b, v, i, b, 0u);
    q = (uint8_t *)out + (start + (size_t)i) * b / 8u;
    if (b == 4u) {
        for (; i + 8 <= n; i += 8, q += 4) {
            uint32_t t = *(const uint32_t *)(const void *)(v + i) & 0x0f0f0f0fu;
            uint32_t u = *(const uint32_t *)(const void *)(v + i + 4) & 0x0f0f0f0fu;
            t |= t >> 4;
            u |= u >> 4;
            q[0] = (uint8_t)t;
            q[1] = (uint8_t)(t >> 16);
            q[2] = (uint8_t)u;
            q[3] = (uint8_t)(u >> 16);
        }
        for (; i + 4 <= n; i += 4, q += 2) {
            uint32_t t = *(const uint32_t *)(const void *)(v + i) & 0x0f0f0f0fu;
            t |= t >> 4;
            q[0] = (uint8_t)t;
            q[1] = (uint8_t)(t >> 16);
        }
    } else if (b == 2u) {
        for (; i + 4 <= n; i += 4, q++) {
            uint32_t t = *(const uint32_t *)(const void *)(v + i) & 0x03030303u;
            t |= t >> 6;
            t |= t >> 12;
            *q = (uint8_t)t;
        }
    } else {
        for (; i + 8 <= n; i += 8, q++) {
            uint32_t t = *(const uint32_t *)(const void *)(v + i) & 0x01010101u;
            uint32_t u = *(const uint32_t *)(const void *)(v + i + 4) & 0x01010101u;
            t |= t >> 7;
            t |= t >> 14;
            u |= u >> 7;
            u |= u >> 14;
            *q = (uint8_t)((t & 15u) | (u & 15u) << 4);
        }
    }
    mico_dwp_fields((uint8_t *)out, (start + (size_t)i) * b, v + i, n - i, b, 0u);
}

/* Where a channel's staged codes start in the staging words (0..3): the first code that
 * starts a byte of the output lands on a word. */
static inline int32_t mico_dwp_stage_at(size_t start, uint32_t b)
{
    const size_t per = b < 8u && 8u % b == 0u ? 8u / b : 0u;
    if (!per) {
        return 0;
    }
    return (int32_t)((4u - (per - start % per) % per % 4u) % 4u);
}

/* The thresholds of the plane functions _2 (MICO_DWP_COUNT) for a channel whose lane values
 * lie in [0, span] (span < 2^(ls-1)), requantized as mico_dw8_put's ReLU form does with bb,
 * m, sh and at most hi (<= 3): t_L by bisection over the lanes' range (t_L = span + 1: never
 * reached), each level's search starting at the one below. */
static MICO_NOINLINE void mico_dwp_levels(MicoDwp *d, uint32_t span, uint32_t bb, uint32_t m,
                                          uint32_t sh, uint32_t hi, uint32_t ls, uint32_t ones)
{
    const uint32_t rnd = 1u << (sh - 1u), half = 1u << (ls - 1u);
    uint32_t level, a = 0;
    for (level = 1; level <= 3u; level++) {
        uint32_t b = span + 1u;
        if (level > hi) {
            a = half; /* no such level: the top bit is never set (v <= span < 2^(ls-1)) */
        }
        while (a < b) {
            const uint32_t mid = a + ((b - a) >> 1);
            const int32_t r = (int32_t)(mid + bb);
            uint32_t q = 0;
            if (r > 0) {
                q = ((uint32_t)(((uint64_t)(uint32_t)r * m) >> 32) + rnd) >> sh;
            }
            if ((q > hi ? hi : q) >= level) {
                b = mid;
            } else {
                a = mid + 1u;
            }
        }
        d->th[level - 1u] = (half - a) * ones;
    }
}

/* Bytes 0..nb-1 of four lines (K = k lanes of ls bits; q3 read only for k = 4) into the
 * words o[0 ..]: a byte of each line makes 8 / b words (mico_dwp_readkk). */
static MICO_DWL_INLINE void mico_dwp_kbytes(const uint8_t *q0, const uint8_t *q1,
                                            const uint8_t *q2, const uint8_t *q3,
                                            MicoDwpWord *o, const int32_t nb, const uint32_t k,
                                            const uint32_t b, const uint32_t hk)
{
    const uint32_t ls = k == 3u ? 10u : 8u, per = 8u / b;
    const uint32_t fm = ((1u << b) - 1u) * (k == 3u ? 0x100401u : 0x01010101u);
    int32_t e;
    uint32_t x;
    MICO_UNROLL for (e = 0; e < nb; e++) {
        uint32_t t = (uint32_t)q0[e] | (uint32_t)q1[e] << ls | (uint32_t)q2[e] << (2u * ls);
        if (k == 4u) {
            t |= (uint32_t)q3[e] << 24;
        }
        t ^= hk; /* signed codes: u = f ^ h in every field (0 for unsigned codes) */
        MICO_UNROLL for (x = 0; x < per; x++) {
            o[e * (int32_t)per + (int32_t)x].w = (t >> (b * x)) & fm;
        }
    }
}

/* Words of K lanes (3 of 10 bits, 4 of 8) of buffer rows 0..d->rows-1 straight from packed
 * rows of n codes of b (2 or 4) bits that start on a byte (unsigned codes, u_pad = 0; signed
 * codes sg = 1, u = f ^ h, u_pad = h): lane j of buffer row r holds input line first + r + j L
 * ss (L = d->half, ss the stride between output lines; a line outside 0..n_line-1 the padding:
 * fields 0, made h for signed codes). A byte of each line makes 8 / b words: T = sum_j byte_j
 * << (j ls) (^ h in every field: signed codes), word x the fields (T >> b x) & (mask in every
 * lane). */
static MICO_DWL_INLINE void mico_dwp_readkk(const uint8_t *in, size_t bit, size_t row_bits,
                                            int32_t first, int32_t n_line, int32_t n,
                                            const MicoDwp *d, MicoDwpWord *row, const uint32_t k,
                                            const uint32_t b, const uint32_t sg)
{
    static const uint8_t zeros[MICO_DWP_PITCH]; /* a line outside the plane */
    const uint32_t hk = sg ? (b == 4u ? 0x88u : 0xaau) * (k == 3u ? 0x100401u : 0x01010101u) : 0u;
    const int32_t per = 8 / (int32_t)b;
    const int32_t half = d->half * d->g.ss, nb = n / per; /* (lines between lanes) */
    const size_t rb = row_bits >> 3;
    const uint8_t *const base = in + (bit >> 3);
    int32_t r, i, l;
    for (r = 0, l = first; r < d->rows; r++, l++, row += MICO_DWP_PITCH) {
        MicoDwpWord *o = row;
        const uint8_t *q0 = (uint32_t)l < (uint32_t)n_line ? base + (size_t)l * rb : zeros;
        const uint8_t *q1 = (uint32_t)(l + half) < (uint32_t)n_line
                                ? base + (size_t)(l + half) * rb
                                : zeros;
        const uint8_t *q2 = (uint32_t)(l + 2 * half) < (uint32_t)n_line
                                ? base + (size_t)(l + 2 * half) * rb
                                : zeros;
        const uint8_t *q3 = k == 4u && (uint32_t)(l + 3 * half) < (uint32_t)n_line
                                ? base + (size_t)(l + 3 * half) * rb
                                : zeros;
        /* eight bytes of each line an iteration (their offsets constant), four, then one */
        for (i = 0; i + 8 <= nb; i += 8, q0 += 8, q1 += 8, q2 += 8, q3 += 8, o += 8 * per) {
            mico_dwp_kbytes(q0, q1, q2, q3, o, 8, k, b, hk);
        }
        for (; i + 4 <= nb; i += 4, q0 += 4, q1 += 4, q2 += 4, q3 += 4, o += 4 * per) {
            mico_dwp_kbytes(q0, q1, q2, q3, o, 4, k, b, hk);
        }
        for (; i < nb; i++, q0++, q1++, q2++, q3++, o += per) {
            mico_dwp_kbytes(q0, q1, q2, q3, o, 1, k, b, hk);
        }
    }
}

static MICO_DWL_INLINE void mico_dwp_readk(const uint8_t *in, size_t bit, size_t row_bits,
                                           int32_t first, int32_t n_line, int32_t n,
                                           const MicoDwp *d, MicoDwpWord *row, uint32_t k,
                                           uint32_t b, uint32_t sg)
{
    if (sg) { /* signed codes */
        if (k == 3u && b == 4u) {
            mico_dwp_readkk(in, bit, row_bits, first, n_line, n, d, row, 3u, 4u, 1u);
        } else if (k == 3u) {
            mico_dwp_readkk(in, bit, row_bits, first, n_line, n, d, row, 3u, 2u, 1u);
        } else if (b == 4u) {
            mico_dwp_readkk(in, bit, row_bits, first, n_line, n, d, row, 4u, 4u, 1u);
        } else {
            mico_dwp_readkk(in, bit, row_bits, first, n_line, n, d, row, 4u, 2u, 1u);
        }
    } else if (k == 3u && b == 4u) {
        mico_dwp_readkk(in, bit, row_bits, first, n_line, n, d, row, 3u, 4u, 0u);
    } else if (k == 3u) {
        mico_dwp_readkk(in, bit, row_bits, first, n_line, n, d, row, 3u, 2u, 0u);
    } else if (b == 4u) {
        mico_dwp_readkk(in, bit, row_bits, first, n_line, n, d, row, 4u, 4u, 0u);
    } else {
        mico_dwp_readkk(in, bit, row_bits, first, n_line, n, d, row, 4u, 2u, 0u);
    }
}

/* Words o .. end - 1 set to v, four a step. */
static inline uint32_t *mico_dwp_fillw(uint32_t *o, uint32_t *const end, const uint32_t v)
{
    for (; end - o >= 4; o += 4) {
        o[0] = v;
        o[1] = v;
        o[2] = v;
        o[3] = v;
    }
    for (; o < end; o++) {
        *o = v;
    }
    return o;
}

/* A channel's table of output codes (the plane functions _3): lut[v] for every lane value v
 * in [0, span] is the field (lo + L) & fmask of the code lo + L of the levels L = 0..n whose
 * threshold v reaches (lo >= 0: the code itself; signed codes, lo < 0: its two's-complement
 * field of the output's width, fmask = 2^bits - 1). The generator's levels
 * (mico.codegen.dwconv_plan.dwp_levels, with the Python reference's own requantization): t_1
 * in two bytes (little-endian), then t_L - t_(L-1) for L = 2..n, each threshold the smallest
 * lane value of a code >= lo + L (span + 1: none). Written a word at a time: the word holding
 * t_L gets +1 in its bytes from t_L on (a byte's field stays below 256: no carry; from code -1,
 * field fmask, to code 0: -fmask in those bytes, which hold fmask: no borrow), the words after
 * it the next field in every byte. */
static MICO_DWL_INLINE void mico_dwp_lutk(uint32_t *lut, const uint8_t *lv, int32_t n,
                                          uint32_t span, int32_t lo, uint32_t fmask, const int sg)
{
    const int le = mico_dwp_low_half() == 0; /* byte t & 3 of a word at its low end */
    uint32_t *const end = lut + (span >> 2) + 1u; /* words of lane values 0..span */
    uint32_t full = ((uint32_t)lo & fmask) * 0x01010101u, cw = full;
    /* (level L is done with step at lv + 1 + L: code lo + L = 0 at step lv + 1 - lo) */
    const uint8_t *const wrap = lo < 0 && -lo <= n ? lv + 1 - lo : NULL;
    uint32_t t = (uint32_t)lv[0] | (uint32_t)lv[1] << 8;
    const uint8_t *step = lv + 2, *const last = lv + n + 1; /* t_2 - t_1 .. t_n - t_(n-1) */
    uint32_t *o = lut;
    while (t <= span) { /* (a threshold above span: no lane value reaches it, nor those above) */
        uint32_t *const ow = lut + (t >> 2);
        if (ow > o) { /* the word of the last threshold done, whole words of this code */
            *o = cw;
            o = mico_dwp_fillw(o + 1, ow, full);
            cw = full;
        }
        {
            const uint32_t at = le ? 0x01010101u << (8u * (t & 3u))
                                   : 0x01010101u >> (8u * (t & 3u));
            if (sg && step == wrap) { /* field -1 (fmask) -> field 0 */
                cw -= fmask * at;
                full = 0u;
            } else {
                cw += at;
                full += 0x01010101u;
            }
        }
        if (step == last) {
            break;
        }
        t += *step++;
    }
    *o = cw;
    mico_dwp_fillw(o + 1, end, full);
}
/* lo >= 0 (mico_dwp_lut_s: lo < 0, the codes' fields wrapping from -1 to 0) */
static MICO_NOINLINE void mico_dwp_lut(uint32_t *lut, const uint8_t *lv, int32_t n, uint32_t span,
                                       int32_t lo)
{
    mico_dwp_lutk(lut, lv, n, span, lo, 0xffu, 0);
}
static MICO_NOINLINE void mico_dwp_lut_s(uint32_t *lut, const uint8_t *lv, int32_t n,
                                         uint32_t span, int32_t lo, uint32_t fmask)
{
    mico_dwp_lutk(lut, lv, n, span, lo, fmask, 1);
}

/* A layer's words of K lanes (3, 4 or 5) and the layout its buffer holds now. */
typedef struct {
    MicoDwp dk[2], d5;  /* 3 and 4 lanes; 5 (the plane transposed) */
    const uint8_t *src; /* the codes as bytes (a channel's plane from src + its offset) */
    int32_t srow, scol, n_line, n_x, first, pf, in_h, in_w, pad_h, pad_w, rows, trans, multi5;
    int32_t layout; /* 0 pairs, 1 words of 3 or 4 lanes, 2 of 5 */
    uint32_t umax;
    int32_t levels, hi; /* outputs of at most 4 codes (by thresholds when the lanes allow) */
    uint32_t hx;        /* signed codes: 2^(b-1) (u = f ^ h in the lanes); else 0 */
    uint32_t max4;      /* the widest span of 4 lanes */
    int32_t pcols;      /* the buffer columns the plane functions read */
    const uint8_t *in;  /* the packed input, the channel's first code at bit `bit` */
    size_t bit;
    uint8_t *stage;     /* its plane unpacked (src), once `unpacked` */
    int unpacked;
    int packed;         /* rows of whole bytes (not transposed): words read from the codes */
    int32_t sf;         /* stride along the buffer rows (2: words of K lanes by table only) */
    uint32_t b;         /* code bits */
    int lines;          /* rows of 5 codes of 4 bits: the line words (mico_dwp_lines5) in stage */
} MicoDwpK;

/* Planes of rows of 5 unsigned 4-bit codes without a zero point (DS-CNN's 25 x 5, u = the
 * code, u_pad = 0), rows along the buffer rows: instead of the plane unpacked into bytes, each
 * row read once into a line word R[y] = its 20 bits (code x in bits 4x..4x+3; the staging
 * words hold them), and every buffer word made from the line words of its lanes, a whole
 * row's 5 words from a few shifts and masks (mico_dwp_lfill: the pairs; mico_dwp_lbuild:
 * words of 3 or 4 lanes; mico_dwp_lbuild5: of 5). A line outside the plane reads 0. */
static void mico_dwp_lines5(const uint8_t *in, size_t bit, int32_t n, uint32_t *R)
{
    const uint8_t *q = in + (bit >> 3);
    int32_t y = 0;
    if ((bit & 7u) && n > 0) { /* a row from a byte's high nibble: the next starts on a byte */
        R[0] = (uint32_t)q[0] >> 4 | (uint32_t)q[1] << 4 | (uint32_t)q[2] << 12;
        q += 3;
        y = 1;
    }
    for (; y + 2 <= n; y += 2, q += 5) { /* two rows: 5 bytes */
        const uint32_t b2 = q[2];
        R[y] = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (b2 & 15u) << 16;
        R[y + 1] = b2 >> 4 | (uint32_t)q[3] << 4 | (uint32_t)q[4] << 12;
    }
    if (y < n) {
        R[y] = (uint32_t)q[0] | (uint32_t)q[1] << 8 | ((uint32_t)q[2] & 15u) << 16;
    }
}

/* Line word l of R (lines 0..n-1), 0 outside (the margin's words: MICO_DWP_LM). */
#define MICO_DWP_LW(R, L, N) ((void)(N), (R)[L])

/* The pairs' buffer rows 0..rows-1 (dst: their first padded column) from the line words:
 * buffer row r takes line first + r in its low lane, first + r + step in its high one. */
static MICO_NOINLINE void mico_dwp_lfill(const uint32_t *R, int32_t first, int32_t step,
                                         int32_t n_line, int32_t rows, MicoDwpWord *dst)
{
    const uint32_t m = 0x000f000fu;
    int32_t r;
    for (r = 0; r < rows; r++, dst += MICO_DWP_PITCH) {
        const int32_t la = first + r;
        const uint32_t ra = MICO_DWP_LW(R, la, n_line), rb = MICO_DWP_LW(R, la + step, n_line);
        const uint32_t q = (ra & 0xffffu) | rb << 16; /* codes 0..3 of both lines */
        dst[0].w = q & m;
        dst[1].w = (q >> 4) & m;
        dst[2].w = (q >> 8) & m;
        dst[3].w = (q >> 12) & m;
        dst[4].w = ra >> 16 | (rb & 0xf0000u);
    }
}

/* Words of K = 3 (10-bit lanes) or 4 (8-bit) lanes of buffer rows 0..d->rows-1 (row: their
 * first padded column) from the line words: lane j of buffer row r holds line first + r +
 * j L. A byte of each lane's line makes two words: T = sum_j byte_j << (j ls), the words T
 * and T >> 4 masked to a code in every lane. */
static MICO_DWL_INLINE void mico_dwp_lbuildk(const uint32_t *R, int32_t first, int32_t n_line,
                                             const MicoDwp *d, MicoDwpWord *row, const uint32_t k)
{
    const uint32_t ls = k == 3u ? 10u : 8u;
    const uint32_t fm = 15u * (k == 3u ? 0x100401u : 0x01010101u);
    const int32_t half = d->half;
    int32_t r;
    for (r = 0; r < d->rows; r++, row += MICO_DWP_PITCH) {
        const int32_t l0 = first + r;
        const uint32_t r0 = MICO_DWP_LW(R, l0, n_line), r1 = MICO_DWP_LW(R, l0 + half, n_line);
        const uint32_t r2 = MICO_DWP_LW(R, l0 + 2 * half, n_line);
        const uint32_t r3 = k == 4u ? MICO_DWP_LW(R, l0 + 3 * half, n_line) : 0u;
        uint32_t t = (r0 & 0xffu) | (r1 & 0xffu) << ls | (r2 & 0xffu) << (2u * ls);
        if (k == 4u) {
            t |= r3 << 24;
        }
        row[0].w = t & fm;
        row[1].w = (t >> 4) & fm;
        t = ((r0 >> 8) & 0xffu) | ((r1 >> 8) & 0xffu) << ls | ((r2 >> 8) & 0xffu) << (2u * ls);
        if (k == 4u) {
            t |= (r3 >> 8) << 24;
        }
        row[2].w = t & fm;
        row[3].w = (t >> 4) & fm;
        t = r0 >> 16 | (r1 >> 16) << ls | (r2 >> 16) << (2u * ls);
        if (k == 4u) {
            t |= (r3 >> 16) << 24;
        }
        row[4].w = t;
    }
}
static MICO_NOINLINE void mico_dwp_lbuild(const uint32_t *R, int32_t first, int32_t n_line,
                                          const MicoDwp *d, MicoDwpWord *row, uint32_t k)
{
    if (k == 3u) {
        mico_dwp_lbuildk(R, first, n_line, d, row, 3u);
    } else {
        mico_dwp_lbuildk(R, first, n_line, d, row, 4u);
    }
}

/* mico_dwp_build5 from the line words: a row's 5 codes moved 6 bits apart. */
static MICO_NOINLINE void mico_dwp_lbuild5(const uint32_t *R, int32_t in_h, int32_t pad_h,
                                           int32_t pad_w, MicoDwpWord *buf)
{
    const uint32_t l0 = pad_w > 0 ? 6u * (uint32_t)pad_w : 0u, r0 = 0u;
    const uint32_t l1 = pad_w > 1 ? 6u * (uint32_t)(pad_w - 1) : 0u, r1 = pad_w < 1 ? 6u : 0u;
    const uint32_t l2 = pad_w > 2 ? 6u * (uint32_t)(pad_w - 2) : 0u;
    const uint32_t r2 = pad_w < 2 ? 6u * (uint32_t)(2 - pad_w) : 0u;
    const uint32_t mask = 0x3fffffffu;
    MicoDwpWord *o = buf + pad_h;
    int32_t y;
    for (y = 0; y < in_h; y++, o++) {
        const uint32_t c = R[y];
        const uint32_t v = (c & 0xfu) | (c & 0xf0u) << 2 | (c & 0xf00u) << 4 |
                           (c & 0xf000u) << 6 | (c & 0xf0000u) << 8;
        o[0].w = (v << l0 >> r0) & mask;
        o[MICO_DWP_PITCH].w = (v << l1 >> r1) & mask;
        o[2 * MICO_DWP_PITCH].w = (v << l2 >> r2) & mask;
    }
}

/* The channel's plane unpacked into the staging bytes, for words of 3 or 4 lanes. */
static MICO_NOINLINE void mico_dwp_k_unpack(MicoDwpK *kc)
{
    mico_dwp_unpack(kc->in, kc->bit, kc->in_h * kc->in_w, kc->b, kc->stage, 0);
    kc->unpacked = 1;
}

/* The buffer of kl = 3 or 4 lanes of a channel (its bytes from kc->src + at): from the codes
 * as bytes (planes of short rows, mico_dwp_build) or from the packed rows (mico_dwp_readk). */
static MICO_NOINLINE void mico_dwp_kbuild_s(MicoDwpK *kc, MicoDwpWord *buf, size_t at, int32_t kl)
{
    if (kc->lines) {
        mico_dwp_lbuild((const uint32_t *)(const void *)kc->stage + MICO_DWP_LM, kc->first,
                        kc->n_line,
                        &kc->dk[kl - 3], buf + kc->pf, (uint32_t)kl);
        return;
    }
    if (!kc->unpacked) { /* the plane as bytes (words of 5 lanes did without) */
        mico_dwp_k_unpack(kc);
    }
    mico_dwp_build(kc->src + at, kc->srow, kc->scol, kc->n_line, kc->n_x, kc->first,
                   &kc->dk[kl - 3], (uint32_t)kl, kc->hx * (kl == 3 ? 0x100401u : 0x01010101u),
                   buf + kc->pf);
}
static MICO_NOINLINE void mico_dwp_kbuild_p(MicoDwpK *kc, MicoDwpWord *buf, size_t at, int32_t kl)
{
    (void)at;
    mico_dwp_readk(kc->in, kc->bit, (size_t)kc->in_w * kc->b, kc->first, kc->n_line, kc->n_x,
                   &kc->dk[kl - 3], buf + kc->pf, (uint32_t)kl, kc->b, kc->hx != 0u);
}
/* The buffer of 5 lanes (the plane transposed): from the codes as bytes, or straight from the
 * packed codes (1- and 2-bit codes). */
static MICO_NOINLINE void mico_dwp_kbuild5(MicoDwpK *kc, MicoDwpWord *buf, size_t at,
                                           int32_t kl)
{
    (void)kl;
    if (kc->lines) {
        mico_dwp_lbuild5((const uint32_t *)(const void *)kc->stage + MICO_DWP_LM, kc->in_h,
                         kc->pad_h,
                         kc->pad_w, buf);
    } else if (kc->unpacked) {
        mico_dwp_build5(kc->src + at, kc->in_h, kc->in_w, kc->pad_h, kc->pad_w, buf);
    } else {
        mico_dwp_build5p(kc->in, kc->bit, kc->in_h, kc->in_w, kc->b, kc->pad_h, kc->pad_w, buf);
    }
}

/* What the pairs' buffer of a channel is read from (mico_dwp's layer, for MicoDwpForm.fill). */
typedef struct {
    const uint8_t *in;    /* the packed input */
    const uint8_t *stage; /* a channel's plane unpacked (short rows of codes below 8 bits) */
    uint32_t b, hx, upad, hxx, pad_byte;
    int32_t in_w, ps, span_rows, slow_in, rows, n, trans, lo;
    int32_t kind; /* the read of the layer: 0 field by field, 1 short rows, 2 rows of bytes */
    int lines;    /* short rows of 5 codes of 4 bits: the line words (mico_dwp_lines5) */
} MicoDwpIn;

/* The pairs' buffer of the channel whose first code is `plane` (buf: its first padded column),
 * each lane's rows of the plane: rows that start on a byte, both lanes a word at a time
 * (mico_dwp_read2); short rows from the codes as bytes, both lanes at once (mico_dwp_spread2);
 * any other plane field by field, one lane at a time (mico_dwp_read). */
typedef void (*MicoDwpFill)(const MicoDwpIn *r, size_t plane, MicoDwpWord *buf);
static MICO_NOINLINE void mico_dwp_fill_r(const MicoDwpIn *r, size_t plane, MicoDwpWord *buf)
{
    mico_dwp_read2(r->in, plane * r->b, (size_t)r->in_w * r->b, -r->ps, r->span_rows, r->slow_in,
                   r->rows, r->n, r->b, r->hxx, r->pad_byte, buf);
}
static MICO_NOINLINE void mico_dwp_fill_s(const MicoDwpIn *r, size_t plane, MicoDwpWord *buf)
{
    if (r->lines) {
        mico_dwp_lfill((const uint32_t *)(const void *)r->stage + MICO_DWP_LM, -r->ps,
                       r->span_rows,
                       r->slow_in, r->rows, buf);
        return;
    }
    mico_dwp_spread2(r->b < 8u ? r->stage : r->in + plane, r->trans ? 1 : r->in_w,
                     r->trans ? r->in_w : 1, -r->ps, r->span_rows, r->slow_in, r->rows, r->n,
                     r->hx, r->upad, buf);
}
static MICO_NOINLINE void mico_dwp_fill_g(const MicoDwpIn *r, size_t plane, MicoDwpWord *buf)
{
    int32_t lane;
    for (lane = 0; lane < 2; lane++) {
        const int32_t first = lane * r->span_rows - r->ps;
        const int32_t r0 = first < 0 ? -first : 0;
        const int32_t r1 = r->slow_in - first < r->rows ? r->slow_in - first : r->rows;
        MicoDwpWord *const d0 = buf + r0 * MICO_DWP_PITCH;
        const int half = lane ? 1 - r->lo : r->lo;
        if (r1 <= r0 || r->n <= 0) {
            continue;
        }
        if (r->trans) {
            mico_dwp_read(r->in, (plane + (size_t)(first + r0)) * r->b, (size_t)r->in_w * r->b,
                          r->n, r1 - r0, r->b, r->hx, d0, half, MICO_DWP_PITCH);
        } else {
            mico_dwp_read(r->in, (plane + (size_t)(first + r0) * (size_t)r->in_w) * r->b,
                          (size_t)r->in_w * r->b, r1 - r0, r->n, r->b, r->hx, d0, half, 1);
        }
    }
}

/* The read of the layer's kind (the entry points of any form). */
static void mico_dwp_fill_a(const MicoDwpIn *r, size_t plane, MicoDwpWord *buf)
{
    (r->kind == 2 ? mico_dwp_fill_r : r->kind == 1 ? mico_dwp_fill_s : mico_dwp_fill_g)(r, plane,
                                                                                       buf);
}
static void mico_dwp_kbuild_a(MicoDwpK *kc, MicoDwpWord *buf, size_t at, int32_t kl)
{
    (kc->packed ? mico_dwp_kbuild_p : mico_dwp_kbuild_s)(kc, buf, at, kl);
}

/* A form of the pair path (an entry point mico_qconv2d_dwp_f<sf>_<form>, chosen by
 * mico.codegen.dwconv_plan.dwp_form): the form code of the layers it takes (mico_dwp_code;
 * -1: any) and the functions of that form, NULL where the form leaves one out, so that a
 * program links only the functions of its layers' forms. A channel whose choice (the span of
 * its sums, its table) would need a plane function left out takes the pairs, which requantize
 * any channel (pairs[relu] where the rows are not of 5 outputs, pairs5[relu] where they are);
 * the _x forms have neither (the generator gives them to layers whose every channel has its
 * table and fits words of K lanes): a channel there that does not goes one output at a time
 * (mico_dwp_plain), as a hand-built layer might. */
typedef void (*MicoDwpKBuild)(MicoDwpK *kc, MicoDwpWord *buf, size_t at, int32_t kl);
typedef struct {
    int32_t code;
    MicoDwpFill fill;          /* the pairs' buffer */
    MicoDwpPlane pairs[3];     /* the pairs' plane functions [relu]; [2]: by thresholds */
    MicoDwpPlane pairs5[2];    /* rows of 5 outputs, one tile a buffer row [relu] */
    MicoDwpKBuild kbuild;      /* words of 3 or 4 lanes: their buffer (NULL: pairs only) */
    MicoDwpKBuild kbuild5;     /* of 5 lanes */
    MicoDwpPlane k3[4], k4[4]; /* [relu]: 0, 1 requantized, 2 by thresholds, 3 by table */
    MicoDwpPlane k5[3];        /* [relu] */
    MicoDwpPlane r5[2][4];     /* rows of 5 outputs, one tile a buffer row: [4 lanes][relu] */
    MicoDwpPlane ks[2][2][2];  /* [stride 2][by thresholds][4 lanes]; else 4-bit outputs packed */
} MicoDwpForm;

/* A channel (its bytes from kc->src + at) through words of K lanes when the span of its sums
 * (scaled by 2^k) fits 3 lanes or more and the form has the plane function: the buffer built,
 * the plane function of K lanes run; returns 0 (nothing done) otherwise, the buffer then ready
 * for the pairs (its padding restored where words of K lanes were). */
static MICO_DWL_INLINE int mico_dwp_k(MicoDwpK *kc, const MicoDwpForm *f, MicoDwpWord *buf,
                                    size_t at, const uint32_t *w, int32_t neg, int32_t pos,
                                    uint32_t k, int fits, uint32_t acc0, uint32_t m, uint32_t sh,
                                    int relu, uint8_t *o)
{
    const uint32_t span = (uint32_t)(pos - neg) * kc->umax << k;
    const uint32_t bb = (acc0 + (uint32_t)neg * kc->umax) << k;
    /* each lane started at -lo, lo = umax * neg: lanes of u (unsigned codes, u_pad = 0; signed
     * codes u = f ^ h, made for a whole word by the build, u_pad = h in every lane of the
     * padding, as the pairs) */
    const uint32_t lane0 = (uint32_t)(-neg) * kc->umax;
    int32_t kl = !fits                                   ? 2
                 : span <= 0x3fu && kc->multi5          ? 5
                 : span <= kc->max4                     ? 4
                 : span <= 0x3ffu                       ? 3
                                                        : 2; /* signed: 3 lanes (one padding) */
    int32_t cls, i, t;
    uint32_t ws[9];
    MicoDwpPlane fn = NULL;
    kl = kl == 5 && (kc->layout == 1 || relu >= 3) ? 4 : kl; /* 3 or 4 lanes kept while the
                                                             * channel fits; tables: 4 lanes */
    /* (stride 2: 4-bit outputs stored packed by table, or outputs by thresholds, only) */
    kl = kc->sf == 2 && relu != 4 &&
                 !(relu == 1 && kc->levels && kl < 5 && span < (kl == 3 ? 0x200u : 0x80u))
             ? 2
             : kl;
    if (kl != 2) { /* the plane function; the pairs when the form has none */
        if (relu == 1 && kc->levels && span < (kl == 3 ? 0x200u : kl == 4 ? 0x80u : 0x20u)) {
            relu = 2; /* outputs by thresholds */
        }
        if (kl == 5) {
            fn = f->k5[relu];
        } else if (kc->sf == 2 || relu == 4) { /* stride 2, or 4-bit codes stored packed */
            fn = f->ks[kc->sf == 2][relu == 2][kl == 4];
        } else if (kc->dk[kl - 3].g.n_fast == 5 && (kl == 3 || relu >= 2)) { /* rows of 5 */
            fn = f->r5[kl == 4][relu]; /* (4 lanes requantized: not taken here) */
        } else {
            fn = (kl == 3 ? f->k3 : f->k4)[relu];
        }
        kl = fn == NULL ? 2 : kl;
    }
    /* (signed codes: 3 and 4 lanes are layouts of their own, u_pad = h in each lane) */
    cls = kl == 2 ? 0 : kl == 5 ? 2 : kl == 4 && kc->hx ? 3 : 1;
    if (cls != kc->layout) { /* another layout: back to pairs, the whole padding again; to or
                              * from 5 lanes, its 3 rows (words of 3 or 4 lanes are written
                              * whole over the pairs' rows) */
        /* (signed codes: u_pad = h in both halves of the pairs, in the 3 lanes of 10 bits, the
         * 4 of 8; the whole rows from the pairs, between 3 and 4 lanes only the padding
         * columns: the builds write the plane's columns of every buffer row) */
        const int32_t swap = kc->hx && cls != 0 && kc->layout != 0;
        const int32_t n_fill = swap                               ? 0
                               : cls == 0 || kc->hx             ? MICO_DWP_PITCH * kc->rows
                               : cls == 2 || kc->layout == 2    ? 3 * MICO_DWP_PITCH
                                                                : 0;
        const uint32_t fill = kc->hx * (cls == 0   ? 0x10001u
                                        : cls == 3 ? 0x01010101u
                                                   : 0x100401u);
        for (i = 0; i < n_fill; i++) {
            buf[i].w = fill; /* u_pad */
        }
        for (i = 0; swap && i < kc->rows; i++) {
            MicoDwpWord *const row = buf + i * MICO_DWP_PITCH;
            for (t = 0; t < kc->pf; t++) {
                row[t].w = fill;
            }
            for (t = kc->pf + kc->n_x; t < kc->pcols; t++) {
                row[t].w = fill;
            }
        }
        kc->layout = cls;
    }
    if (kl == 2) {
        return 0;
    }
    if (relu == 2) {
        static const uint32_t ls[3] = {10u, 8u, 6u}, ones[3] = {0x100401u, 0x01010101u,
                                                                0x01041041u};
        mico_dwp_levels(kl == 5 ? &kc->d5 : &kc->dk[kl - 3], span, bb, m, sh, (uint32_t)kc->hi,
                        ls[kl - 3], ones[kl - 3]);
    }
    if (kl == 5) {
        f->kbuild5(kc, buf, at, kl);
        for (t = 0; t < 9; t++) { /* the plane transposed: w[3 c + r] is tap (r, c) */
            ws[t] = (kc->trans ? w[t] : w[t % 3 * 3 + t / 3]) << k;
        }
        fn(buf, ws, (lane0 * 0x01041041u) << k, bb, m, sh, &kc->d5, o);
        return 1;
    }
    f->kbuild(kc, buf, at, kl);
    for (t = 0; k && t < 9; t++) {
        ws[t] = w[t] << k;
    }
    fn(buf, k ? ws : w, (lane0 * (kl == 3 ? 0x100401u : 0x01010101u)) << k, bb, m, sh,
       &kc->dk[kl - 3], o);
    return 1;
}

/* Estimated instructions of a plane (mico.codegen.dwconv_plan mirrors it): pairs of output
 * lines of 8-output tiles and lone pairs. */
static int32_t mico_dwp_cost(int32_t n_fast, int32_t n_slow)
{
    return ((n_slow + 1) >> 1) * (100 * (n_fast >> 1) + 56 * (n_fast & 1) + 24);
}

/* The form code of a layer (mico.codegen.dwconv_plan.dwp_form mirrors it): the pairs' read
 * (0 field by field, 1 short rows as bytes, 2 rows of whole bytes) | words of K lanes << 2 |
 * of 5 lanes too << 3 | the outputs << 4 (0 requantized, 1 by thresholds, 2 by table, 3 by
 * table stored packed) | rows of 5 outputs << 6. */
#define MICO_DWP_CODE(RD, K, K5, OUT, R5) ((RD) | (K) << 2 | (K5) << 3 | (OUT) << 4 | (R5) << 6)

/* The layer through the plane functions of stride sf along a buffer row of form f; 0 (nothing
 * done) when this path does not take it or f is not the layer's form. f NULL: nothing done,
 * 1 + the layer's form code returned (0: not taken). with_k (a constant): words of K lanes
 * (mico_dwp_k), the body of the forms that have them (mico_dwp_m), or none (mico_dwp_p). */
static MICO_DWL_INLINE int32_t mico_dwp(const MicoConv2d *p, const uint8_t *lvl, const void *in,
                                        void *out, const MicoDwpForm *f, int32_t sf,
                                        const int with_k)
{
    MicoDwpWord buf[MICO_DWP_PITCH * MICO_DWP_ROWS];
    uint32_t stage_words[MICO_DWP_BYTES / 4];
    uint32_t lut_words[MICO_DWP_LUT / 4];
    uint8_t *const lut = (uint8_t *)lut_words;
    uint8_t *const stage = (uint8_t *)stage_words;
    MicoDwp d;
    MicoDw8 *const g = &d.g;
    const MicoFmt af = p->in_fmt, of = p->out.fmt;
    const int32_t in_plane = p->in_h * p->in_w, out_plane = p->out_h * p->out_w;
    const int32_t in_h = p->in_h, in_w = p->in_w;
    const uint32_t b = (uint32_t)af.bits;
    const int lo = mico_dwp_low_half();
    const int direct = of.bits == 8 && (of.is_signed || of.zero == 0);
    uint32_t umax, hx, upad, fill;
    int32_t ch, i, t, cost_n, cost_t, trans, fast_in, slow_in, pf, ps, code;
    int short_rows, multi, levels, rows2, nib, r5, small;
    int32_t n_lvl, lo_t;
    MicoDwpIn rd;
    MicoDwpK kc;
    if (af.bits < 1 || af.bits > 8 || (af.is_signed && af.bits == 1) || of.bits < 1 ||
        of.bits > 8 || (of.is_signed && of.bits == 1) || p->k_h != 3 || p->k_w != 3 ||
        p->dil_h != 1 || p->dil_w != 1 || p->groups != p->in_c || p->in_c != p->out_c ||
        p->out.n_mult == 0 || p->pad_h < 0 || p->pad_w < 0 || p->stride_h < 1 ||
        p->stride_w < 1 || p->out_h < 1 || p->out_w < 1) {
        return 0;
    }
    cost_n = p->stride_w == sf ? mico_dwp_cost(p->out_w, p->out_h) : 0x7fffffff;
    cost_t = p->stride_h == sf ? mico_dwp_cost(p->out_h, p->out_w) : 0x7fffffff;
    trans = cost_t < cost_n;
    g->n_fast = trans ? p->out_h : p->out_w;
    g->n_slow = trans ? p->out_w : p->out_h;
    g->ss = trans ? p->stride_w : p->stride_h;
    g->ostep_fast = trans ? p->out_w : 1;
    g->ostep_slow = trans ? 1 : p->out_w;
    g->relu = p->out.relu;
    g->lo = p->out.lo;
    g->hi = p->out.hi;
    fast_in = trans ? in_h : in_w;
    slow_in = trans ? in_w : in_h;
    pf = trans ? p->pad_h : p->pad_w;
    ps = trans ? p->pad_w : p->pad_h;
    d.sf = sf;
    d.half = (g->n_slow + 1) / 2;
    d.rows = (d.half - 1) * g->ss + 3;
    if ((trans ? cost_t : cost_n) == 0x7fffffff || (g->n_fast - 1) * sf + 3 > MICO_DWP_PITCH ||
        d.rows > MICO_DWP_ROWS ||
        (!direct && out_plane + 3 > MICO_DWP_BYTES)) {
        return 0;
    }
    /* input rows of few codes cost more read one by one than the plane unpacked into bytes
     * (in the staging bytes, spent before any output is staged) and spread from there */
    short_rows = in_w < 8 && in_plane <= MICO_DWP_BYTES;
    umax = (1u << b) - 1u;
    hx = af.is_signed ? 1u << (b - 1u) : 0u;
    upad = af.is_signed ? hx : (uint32_t)af.zero;
    fill = upad * 0x10001u;
    /* rows along the buffer rows, each starting on a byte (widths 1, 2, 4, 8): both lanes of a
     * buffer row read at once (mico_dwp_read2) */
    rows2 = !short_rows && !trans && (b == 1u || b == 2u || b == 4u || b == 8u) &&
            ((size_t)in_w * b) % 8u == 0u && ((size_t)in_plane * b) % 8u == 0u;
    /* outputs of 5..16 codes by table where the generator gave the channels' levels */
    /* (signed codes without a ReLU, lo < 0: 3 codes or more, their fields in the table; after
     * a ReLU the codes from 0) */
    lo_t = g->relu && g->lo < 0 ? 0 : g->lo;
    n_lvl = g->hi - lo_t;
    /* (3 or 4 codes from 0: by table in words of K lanes at stride 1 only, below; elsewhere
     * by thresholds, which the pairs and stride 2 count for every lane of a word) */
    small = lvl && lo_t >= 0 && n_lvl >= 2 && n_lvl <= 3;
    lvl = n_lvl <= 15 && n_lvl >= 2 ? lvl : NULL;
    /* outputs of at most 4 codes: by thresholds where a channel takes the ReLU form (not those
     * by table) */
    levels = g->hi >= 0 && g->hi <= 3 && (lvl == NULL || small);
    /* K lanes a word (MICO_DWP_PLANE): planes of short rows at stride 1, codes whose u_pad is
     * 0 (the padding words of both layouts alike), weights and codes of at most 4 bits (wider
     * ones' sums seldom fit 10 bits) */
    multi = short_rows && sf == 1 && g->ss == 1 && (upad == 0u || af.is_signed) &&
            p->w_bits <= 4 && b <= 4u;
    /* and planes of rows of whole bytes of 2- and 4-bit codes, unsigned without a zero point or
     * signed (u = f ^ h, mico_dwp_readkk; read as the pairs'; at
     * stride 2 when the outputs go by table or thresholds; each channel's span decides: wider
     * weights' sums seldom fit, tried at stride 2 with outputs by thresholds only, the form
     * the plan weighs against the bit-sliced path) */
    kc.packed = !multi && rows2 && g->ss == sf && (upad == 0u || af.is_signed) &&
                (b == 2u || b == 4u) &&
                (sf == 1 || lvl || levels) && (p->w_bits <= 4 || (sf == 2 && levels));
    kc.sf = sf;
    multi = multi || kc.packed;
    if (small && !(multi && sf == 1)) { /* (the pairs and stride 2: by thresholds) */
        lvl = NULL;
    }
    levels = levels && lvl == NULL;
    /* 4-bit codes out by table, rows of an even number of outputs along the buffer rows: two
     * outputs a byte, stored packed by the plane functions (MICO_DWP_PLANEKN) */
    nib = kc.packed && lvl && of.bits == 4 && (of.is_signed || !of.zero) && !trans &&
          !(p->out_w & 1);
    /* 5 lanes of 6 bits: planes of at most 5 columns, every output column in one word (the
     * plane transposed: one line group; its codes unpacked) */
    kc.multi5 = multi && p->stride_h == 1 && p->stride_w == 1 && in_w <= 5 && p->out_w <= 5 &&
                p->out_h + 2 <= MICO_DWP_PITCH && b < 8u && !af.is_signed;
    /* rows of 5 outputs at stride 1: one tile a buffer row */
    r5 = sf == 1 && g->ss == 1 && g->n_fast == 5;
    code = MICO_DWP_CODE(rows2 ? 2 : short_rows ? 1 : 0, multi, kc.multi5,
                         levels ? 1 : !multi || !lvl ? 0 : nib ? 3 : 2, r5);
    if (f == NULL || (f->code >= 0 && f->code != code) || (multi && !with_k)) {
        return f == NULL ? 1 + code : 0;
    }
    rd.in = (const uint8_t *)in;
    rd.stage = stage;
    rd.b = b;
    rd.hx = hx;
    rd.upad = upad;
    rd.hxx = b == 8u ? hx : hx * (b == 4u ? 0x11u : b == 2u ? 0x55u : 0xffu);
    rd.pad_byte = b == 8u ? upad : upad * (b == 4u ? 0x11u : b == 2u ? 0x55u : 0xffu);
    rd.in_w = in_w;
    rd.ps = ps;
    rd.span_rows = d.half * g->ss; /* D: buffer rows between a word's two lanes */
    rd.slow_in = slow_in;
    rd.rows = d.rows;
    rd.n = fast_in < MICO_DWP_PITCH - pf ? fast_in : MICO_DWP_PITCH - pf;
    rd.trans = trans;
    rd.lo = lo;
    rd.kind = code & 3;
    /* rows of 5 unsigned 4-bit codes (u = the code, u_pad = 0) along the buffer rows: the
     * line words in the staging bytes (4 a row: in_h <= 204), not the plane unpacked */
    rd.lines = short_rows && b == 4u && in_w == 5 && !trans && upad == 0u && !af.is_signed &&
               p->pad_h <= MICO_DWP_LM;
    for (i = 0; i < MICO_DWP_PITCH * d.rows; i++) {
        buf[i].w = fill; /* the padding: code 0 in both lanes, never written again */
    }
    d.lut = lut;
    if (multi) {
        for (i = 0; i < 2; i++) {
            kc.dk[i] = d;
            kc.dk[i].half = (g->n_slow + 2 + i) / (3 + i);
            kc.dk[i].rows = (kc.dk[i].half - 1) * g->ss + 3;
        }
        kc.d5 = d;
        kc.d5.g.n_fast = p->out_h;
        kc.d5.g.n_slow = p->out_w;
        kc.d5.g.ss = 1;
        kc.d5.g.ostep_fast = p->out_w;
        kc.d5.g.ostep_slow = 1;
        kc.d5.half = 1;
        kc.d5.rows = 3;
        kc.src = b < 8u ? stage : (const uint8_t *)in;
        kc.srow = trans ? 1 : in_w;
        kc.scol = trans ? in_w : 1;
        kc.n_line = slow_in;
        kc.n_x = rd.n;
        kc.first = -ps;
        kc.pf = pf;
        kc.in_h = in_h;
        kc.in_w = in_w;
        kc.pad_h = p->pad_h;
        kc.pad_w = p->pad_w;
        kc.rows = d.rows;
        kc.trans = trans;
        kc.layout = 0;
        kc.umax = umax;
        kc.levels = levels;
        kc.hi = g->hi;
        kc.hx = hx;
        kc.max4 = 0xffu;
        kc.pcols = (g->n_fast - 1) * sf + 3;
        kc.in = (const uint8_t *)in;
        kc.stage = stage;
        kc.b = b;
        kc.lines = rd.lines;
    }
    for (ch = 0; ch < p->out_c; ch++) {
        const MicoRq rq = mico_rq(&p->out, ch);
        const int relu0 = g->relu && g->lo <= 0 && g->hi >= 0;
        const uint8_t *const lv = lvl ? lvl + (size_t)ch * (size_t)(n_lvl + 1) : NULL;
        const size_t plane = (size_t)ch * (size_t)in_plane; /* its first code */
        uint32_t w[9], ws[9], sums[2], sum, sabs, binit, acc0, m, sh;
        int32_t neg, pos, at = 0, k, fits = 1;
        const int relu = relu0;
        int lut_ch, packed4;
        uint8_t *o;
        mico_dwp_weights(p->weight, (uint32_t)ch, (uint32_t)p->w_bits, trans, w, sums);
        sum = sums[0];
        sabs = sums[1];
        neg = ((int32_t)sum - (int32_t)sabs) / 2; /* the sums of the negative and positive */
        pos = ((int32_t)sum + (int32_t)sabs) / 2; /* weights */
        /* (5 lanes read the packed codes; codes of 3 or 4 bits seldom fit them: unpacked) */
        kc.unpacked = !(multi && kc.multi5) || b > 2u;
        kc.bit = plane * b;
        if (short_rows && b < 8u && kc.unpacked) { /* rows of few codes: unpacked at once */
            mico_dwp_unpack((const uint8_t *)in, plane * b, in_plane, b, stage, rd.lines);
        }
        if (!multi) { /* (layers of K lanes: once the channel's lanes are known) */
            f->fill(&rd, plane, buf + pf);
        }
        if (direct) {
            o = (uint8_t *)out + (size_t)ch * (size_t)out_plane;
        } else {
            at = mico_dwp_stage_at((size_t)ch * (size_t)out_plane, (uint32_t)of.bits);
            o = stage + at;
        }
        acc0 = (uint32_t)p->bias[ch] - upad * sum;
        /* the multiplier as a high-word product: shifts above 32 as they are; others as
         * M = m 2^(33 - shift - k) < 2^32 with shift 33 on the sums scaled by 2^k (weights
         * and constants), the same rounding (mico_rescale), while the scaled lanes fit and
         * the scaled accumulator stays far inside int32. Multipliers above 1 (narrow weights
         * and codes into wider outputs: 2-bit weights on 4-bit codes into 8 bits) need k
         * above 3; the lanes' 16 bits bound it (the span check below) */
        m = (uint32_t)rq.m;
        sh = (uint32_t)rq.shift - 32u;
        k = 0;
        if (rq.shift <= 32) {
            const int32_t e = 33 - rq.shift;
            while (k < 15 && k < e && ((uint64_t)(uint32_t)rq.m << (e - k)) > 0xffffffffu) {
                k++;
            }
            m = (uint32_t)((uint64_t)(uint32_t)rq.m << (e - k));
            sh = 1u;
            fits = ((uint64_t)(uint32_t)rq.m << (e - k)) <= 0xffffffffu &&
                   (((uint32_t)(p->bias[ch] < 0 ? -p->bias[ch] : p->bias[ch]) |
                     (uint32_t)(pos - neg) << 9) < (k <= 3 ? 0x10000000u : 0x7ffe0000u >> k));
        }
        fits = fits && ((uint32_t)(pos - neg) * umax << k) <= 0xffffu && !rq.binary;
        /* words of K lanes with the outputs by table: the lanes unscaled (the pairs, if the
         * channel takes them, requantize) */
        lut_ch = multi && lv && (lv[0] | lv[1] << 8) != 0xffffu &&
                 (uint32_t)(pos - neg) * umax < MICO_DWP_LUT;
        if (lut_ch) {
            if (lo_t < 0) { /* signed codes' fields */
                mico_dwp_lut_s(lut_words, lv, n_lvl, (uint32_t)(pos - neg) * umax, lo_t,
                               of.bits >= 8 ? 0xffu : (1u << of.bits) - 1u);
            } else {
                mico_dwp_lut(lut_words, lv, n_lvl, (uint32_t)(pos - neg) * umax, lo_t);
            }
        }
        packed4 = nib && lut_ch;
        if (with_k && multi &&
            mico_dwp_k(&kc, f, buf, b < 8u ? 0u : plane, w, neg, pos, lut_ch ? 0u : (uint32_t)k,
                       lut_ch || fits, acc0, m, sh, packed4 ? 4 : lut_ch ? 3 : relu,
                       packed4 ? (uint8_t *)out + (size_t)ch * (size_t)out_plane / 2u : o)) {
            if (packed4) { /* words of K lanes, stored packed */
                continue;
            }
        } else { /* pairs */
            if (multi && !kc.unpacked) { /* (words of 5 lanes read the packed codes) */
                mico_dwp_unpack((const uint8_t *)in, plane * b, in_plane, b, stage, 0);
            }
            if (multi) {
                f->fill(&rd, plane, buf + pf);
            }
            if (fits && (f->pairs[0] || f->pairs5[0])) { /* (_x forms: no pairs) */
                const uint32_t bb = (acc0 + (uint32_t)neg * umax) << k;
                const uint32_t span = (uint32_t)(pos - neg) * umax << k;
                binit = ((uint32_t)(-neg) * umax * 0x10001u) << k; /* lanes started at -lo */
                for (t = 0; k && t < 9; t++) {
                    ws[t] = w[t] << k;
                }
                if (relu && levels && span < 0x8000u && f->pairs[2]) { /* by thresholds */
                    mico_dwp_levels(&d, span, bb, m, sh, (uint32_t)g->hi, 16u, 0x10001u);
                    f->pairs[2](buf, k ? ws : w, binit, bb, m, sh, &d, o);
                } else if (r5 && f->pairs5[0]) { /* rows of 5: one tile */
                    f->pairs5[relu](buf, k ? ws : w, binit, bb, m, sh, &d, o);
                } else {
                    f->pairs[relu](buf, k ? ws : w, binit, bb, m, sh, &d, o);
                }
            } else {
                mico_dwp_plain(&d, buf, w, acc0, &rq, o);
            }
        }
        if (!direct) {
            mico_dwp_pack(out, (size_t)ch * (size_t)out_plane, o, out_plane, of);
        }
    }
    return 1;
}

/* (flattened: the small helpers it calls once a channel, such as mico_rq, inlined) */
#if defined(__GNUC__)
#define MICO_DWP_FLAT __attribute__((flatten))
#else
#define MICO_DWP_FLAT
#endif
static MICO_DWP_FLAT MICO_NOINLINE int32_t mico_dwp_p(const MicoConv2d *p, const uint8_t *lvl,
                                                      const void *in, void *out,
                                                      const MicoDwpForm *f, int32_t sf)
{
    return mico_dwp(p, lvl, in, out, f, sf, 0);
}
static MICO_DWP_FLAT MICO_NOINLINE int32_t mico_dwp_m(const MicoConv2d *p, const uint8_t *lvl,
                                                      const void *in, void *out,
                                                      const MicoDwpForm *f, int32_t sf)
{
    return mico_dwp(p, lvl, in, out, f, sf, 1);
}

int32_t mico_qconv2d_dwp_code(const MicoConv2d *p, const MicoDwLanes *l, int32_t sf)
{
    return mico_dwp_p(p, l ? l->lvl : NULL, NULL, NULL, NULL, sf) - 1;
}

MICO_DWP_PLANE(mico_dwp_p1_0, 2, 1, 0)
MICO_DWP_PLANE(mico_dwp_p1_1, 2, 1, 1)
MICO_DWP_PLANE(mico_dwp_p1_2, 2, 1, 2)
MICO_DWP_PLANE(mico_dwp_p2_0, 2, 2, 0)
MICO_DWP_PLANE(mico_dwp_p2_1, 2, 2, 1)
MICO_DWP_PLANE(mico_dwp_p2_2, 2, 2, 2)

/* A form's entry point: the layer through mico_dwp with the form's functions, or when this
 * path does not take it (or it is not the form's), mico_qconv2d_depthwise3x3. The flags (0 or
 * 1) say which functions the form has: RD the pairs' read (g, s, r), K words of K lanes, K5
 * of 5 lanes, Q their requantizing plane functions, T outputs by thresholds, L by table, N by
 * table stored packed, R5 rows of 5 outputs, P rows of other lengths; CODE the form code (-1:
 * any). */
#define MICO_DWP_IF(C, X) MICO_DWP_IF_(C, X)
#define MICO_DWP_IF_(C, X) MICO_DWP_IF##C(X)
#define MICO_DWP_IF0(X) NULL
#define MICO_DWP_IF1(X) X
#define MICO_DWP_SEL(C, A, B) MICO_DWP_SEL_(C, A, B)
#define MICO_DWP_SEL_(C, A, B) MICO_DWP_SEL##C(A, B)
#define MICO_DWP_SEL0(A, B) B
#define MICO_DWP_SEL1(A, B) A
#define MICO_DWP_AND(A, B) MICO_DWP_AND_(A, B)
#define MICO_DWP_AND_(A, B) MICO_DWP_AND##A##B
#define MICO_DWP_AND00 0
#define MICO_DWP_AND01 0
#define MICO_DWP_AND10 0
#define MICO_DWP_AND11 1
#define MICO_DWP_OR(A, B) MICO_DWP_OR_(A, B)
#define MICO_DWP_OR_(A, B) MICO_DWP_OR##A##B
#define MICO_DWP_OR00 0
#define MICO_DWP_OR01 1
#define MICO_DWP_OR10 1
#define MICO_DWP_OR11 1
#define MICO_DWP_NOT(A) MICO_DWP_NOT_(A)
#define MICO_DWP_NOT_(A) MICO_DWP_NOT##A
#define MICO_DWP_NOT0 1
#define MICO_DWP_NOT1 0
/* The pairs' requantizing plane functions: in every form but those whose channels all take
 * words of K lanes by table (_x: stride 1, K, no requantizing words; see mico_dwp's pairs). */
#define MICO_DWP_PQ(SF, K, Q)                                                                    \
    MICO_DWP_NOT(MICO_DWP_AND(MICO_DWP_S1_##SF, MICO_DWP_AND(K, MICO_DWP_NOT(Q))))
#define MICO_DWP_S1_1 1 /* stride 1 along the buffer rows */
#define MICO_DWP_S1_2 0
#define MICO_DWP_S2_1 0
#define MICO_DWP_S2_2 1
#define MICO_DWP_KB_g NULL
#define MICO_DWP_KB_s mico_dwp_kbuild_s
#define MICO_DWP_KB_r mico_dwp_kbuild_p
#define MICO_DWP_KB_a mico_dwp_kbuild_a
#define MICO_DWP_FORM(SF, NAME, RD, K, K5, Q, T, L, N, R5, P, CODE)                               \
    void mico_qconv2d_dwp_f##SF##NAME(const MicoConv2d *p, const MicoDwLanes *l, const void *in,  \
                                      void *out)                                                  \
    {                                                                                             \
        static const MicoDwpForm form = {                                                         \
            CODE,                                                                                 \
            mico_dwp_fill_##RD,                                                                   \
            {MICO_DWP_IF(MICO_DWP_AND(P, MICO_DWP_PQ(SF, K, Q)), mico_dwp_p##SF##_0),              \
             MICO_DWP_IF(MICO_DWP_AND(P, MICO_DWP_PQ(SF, K, Q)), mico_dwp_p##SF##_1),              \
             MICO_DWP_IF(T, mico_dwp_p##SF##_2)},                                                 \
            {MICO_DWP_IF(MICO_DWP_AND(R5, MICO_DWP_PQ(SF, K, Q)), mico_dwp_p5_0),                 \
             MICO_DWP_IF(MICO_DWP_AND(R5, MICO_DWP_PQ(SF, K, Q)), mico_dwp_p5_1)},                \
            MICO_DWP_IF(K, MICO_DWP_KB_##RD),                                                     \
            MICO_DWP_IF(MICO_DWP_AND(K5, MICO_DWP_OR(Q, T)), mico_dwp_kbuild5),                   \
            {MICO_DWP_IF(MICO_DWP_AND(Q, P), mico_dwp_k3_0),                                      \
             MICO_DWP_IF(MICO_DWP_AND(Q, P), mico_dwp_k3_1),                                      \
             MICO_DWP_IF(MICO_DWP_AND(MICO_DWP_AND(K, T), P), mico_dwp_k3_2),                     \
             MICO_DWP_IF(MICO_DWP_AND(L, P), mico_dwp_k3_3)},                                     \
            {MICO_DWP_IF(Q, mico_dwp_k4_0), MICO_DWP_IF(Q, mico_dwp_k4_1),                        \
             MICO_DWP_IF(MICO_DWP_AND(MICO_DWP_AND(K, T), P), mico_dwp_k4_2),                     \
             MICO_DWP_IF(MICO_DWP_AND(L, P), mico_dwp_k4_3)},                                     \
            {MICO_DWP_IF(MICO_DWP_AND(K5, Q), mico_dwp_k5_0),                                     \
             MICO_DWP_IF(MICO_DWP_AND(K5, Q), mico_dwp_k5_1),                                     \
             MICO_DWP_IF(MICO_DWP_AND(K5, T), mico_dwp_k5_2)},                                    \
            {{MICO_DWP_IF(MICO_DWP_AND(R5, Q), mico_dwp_k3_0r5),                                  \
              MICO_DWP_IF(MICO_DWP_AND(R5, Q), mico_dwp_k3_1r5),                                  \
              MICO_DWP_IF(MICO_DWP_AND(R5, MICO_DWP_AND(K, T)), mico_dwp_k3_2r5),                 \
              MICO_DWP_IF(MICO_DWP_AND(R5, L), mico_dwp_k3_3r5)},                                 \
             {NULL, NULL, MICO_DWP_IF(MICO_DWP_AND(R5, MICO_DWP_AND(K, T)), mico_dwp_k4_2r5),     \
              MICO_DWP_IF(MICO_DWP_AND(R5, L), mico_dwp_k4_3r5)}},                                \
            {{{MICO_DWP_IF(MICO_DWP_AND(N, MICO_DWP_S1_##SF), mico_dwp_k3_4),                     \
               MICO_DWP_IF(MICO_DWP_AND(N, MICO_DWP_S1_##SF), mico_dwp_k4_4)},                    \
              {NULL, NULL}},                                                                      \
             {{MICO_DWP_IF(MICO_DWP_AND(N, MICO_DWP_S2_##SF), mico_dwp_k3_4s2),                   \
               MICO_DWP_IF(MICO_DWP_AND(N, MICO_DWP_S2_##SF), mico_dwp_k4_4s2)},                  \
              {MICO_DWP_IF(MICO_DWP_AND(MICO_DWP_AND(K, T), MICO_DWP_S2_##SF), mico_dwp_k3_2s2),  \
               MICO_DWP_IF(MICO_DWP_AND(MICO_DWP_AND(K, T), MICO_DWP_S2_##SF),                    \
                           mico_dwp_k4_2s2)}}}};                                                  \
        if (!MICO_DWP_SEL(K, mico_dwp_m, mico_dwp_p)(p, l ? l->lvl : NULL, in, out, &form, SF)) { \
            mico_qconv2d_depthwise3x3(p, in, out);                                                \
        }                                                                                         \
    }

MICO_DWP_FORMS(MICO_DWP_FORM)

/* ------------------------------------------------------------------------------------------
 * Depthwise 3x3 bit-sliced (mico_qconv2d_dwbs): 2-bit unsigned activations (no zero point),
 * weights in {-1, 0, 1} (ternary 2-bit codes, or codes of any width holding only those), 1- or
 * 2-bit unsigned outputs, padding 1; stride 1: planes of at most 1,024 pixels in rows of at
 * most 64 (not 32 or 64); stride 2 (mico_dwb2): outputs of at most 1,024 pixels, input rows
 * of at most 62.
 *
 * As the binary depthwise of mico_binary.c, a channel's plane is taken as a bit stream: output
 * pixel p = oy W + ox reads input pixel p + (ky - 1) W + kx - 1, so a tap of 32 outputs is a
 * funnel shift of the stream. Here the plane is two streams, the activations' bit planes a0
 * and a1 (code = a0 + 2 a1: the packed codes' even and odd bits, split by an unzip), each in
 * three copies, one per kx, with the column it must not wrap into cleared, placed one bit
 * apart: tap (1, kx) of an output word is a word of copy kx, taps (0, kx) and (2, kx) funnel
 * shifts of two words by W mod 32 bits one way or the other.
 *
 * With w in {-1, 0, 1} a tap's product is w (a0 + 2 a1). Let a' = a (w = 1), ~a = 1 - a
 * (w = -1), all ones (w = 0): sum_t w_t x_t = U - 3 n, U = sum_t a0'_t + 2 sum_t a1'_t (0..27)
 * and n the channel's weights -1 and 0 (a padded tap is the code 0, whose ~0 = 1 counts as it
 * must). Carry-save adders count U bit-sliced (5 bits) for 32 outputs at once. Requantization
 * is monotonic in the sum, so an output code is the number of levels L = 1..3 whose threshold
 * t_L (the smallest U of code >= L, by bisection on the products of the multiplier) U
 * reaches, each compare a case of a switch on t_L (an instruction a bit slice). The codes' bit
 * slices are interleaved (a zip) into packed codes and written in sequence.
 *
 * The plane is read before any of its outputs is written, and the output stream is written in
 * whole words of completed outputs: the in-place contract holds. Stack: 1.8 KB (stride 2:
 * 2.2 KB, and a constant table of 1 KB). Layers this path does not take (and any weight
 * outside {-1, 0, 1}, any bias within 32 of the int32 limits) go to
 * mico_qconv2d_depthwise3x3. */
#define MICO_DWB_WORDS 32 /* words of a plane: 1,024 pixels */
#define MICO_DWB_NB 40    /* words of one copy (the plane and the zero words around it) */

/* Carry-save adder over bit slices: h:l = a + b + c, bit by bit. */
#define MICO_DWB_CSA(h, l, a, b, c)                                                         \
    do {                                                                                    \
        const uint32_t u_ = (a) ^ (b), c_ = (c);                                            \
        (h) = ((a) & (b)) | (u_ & c_);                                                      \
        (l) = u_ ^ c_;                                                                      \
    } while (0)

/* Whether the layer's shape and formats are this path's (mico.codegen.dwconv_plan mirrors it;
 * the weights and biases are checked by the entry point). */
static int32_t mico_dwb_shape(const MicoConv2d *p)
{
    const MicoFmt a = p->in_fmt, o = p->out.fmt;
    const int32_t s1 = p->stride_h == 1 && p->stride_w == 1 && p->out_h == p->in_h &&
                       p->out_w == p->in_w && p->in_w <= 64 && (p->in_w & 31) != 0 &&
                       p->in_h * p->in_w <= 32 * MICO_DWB_WORDS;
    const int32_t s2 = p->stride_h == 2 && p->stride_w == 2 && p->out_h == (p->in_h - 1) / 2 + 1 &&
                       p->out_w == (p->in_w - 1) / 2 + 1 && p->in_w <= 62 &&
                       p->out_h * p->out_w <= 32 * MICO_DWB_WORDS;
    return p->groups == p->in_c && p->groups == p->out_c && p->k_h == 3 && p->k_w == 3 &&
           (s1 || s2) && p->dil_h == 1 && p->dil_w == 1 && p->pad_h == 1 && p->pad_w == 1 &&
           p->in_w >= 1 && p->in_h >= 1 && a.bits == 2 && !a.is_signed &&
           a.zero == 0 && p->w_bits >= 1 && p->w_bits <= 8 && (o.bits == 1 || o.bits == 2) &&
           !o.is_signed && o.zero == 0 && p->out.lo >= 0 && p->out.hi <= (1 << o.bits) - 1;
}

/* 32 bits of a packed stream from bit `bit`, bits from `end` on read as 0 (and not read). */
static inline uint32_t mico_dwb_get(const uint8_t *buf, size_t bit, size_t end)
{
    const uint8_t *q = buf + (bit >> 3);
    const uint32_t off = (uint32_t)(bit & 7u);
    uint32_t v;
    if ((bit >> 3) + 5u > (end + 7u) >> 3) { /* near the end: only the bytes that hold them */
        return bit >= end ? 0u
                          : mico_dwl_bits(buf, bit, end - bit < 32u ? (uint32_t)(end - bit) : 32u);
    }
    v = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
    return off ? (v >> off) | ((uint32_t)q[4] << (32u - off)) : v;
}

/* The even bits of x in its low half, the odd bits in its high half (and back: _zip). */
static inline uint32_t mico_dwb_unzip(uint32_t x)
{
    uint32_t t;
    t = (x ^ (x >> 1)) & 0x22222222u;
    x ^= t ^ (t << 1);
    t = (x ^ (x >> 2)) & 0x0c0c0c0cu;
    x ^= t ^ (t << 2);
    t = (x ^ (x >> 4)) & 0x00f000f0u;
    x ^= t ^ (t << 4);
    t = (x ^ (x >> 8)) & 0x0000ff00u;
    x ^= t ^ (t << 8);
    return x;
}

/* A byte of 4 packed 2-bit codes split into its four classes, two bits each: a0 of the even
 * codes (0, 2) at bits 0-1, their a1 at 8-9, a0 of the odd codes (1, 3) at 16-17, their a1 at
 * 24-25. Byte j of a word shifted by 2 j: the word's 16 codes' classes a byte each. */
#define MICO_DWB_S(b)                                                                       \
    (((b) & 1u) | ((b) >> 1 & 1u) << 8 | ((b) >> 2 & 1u) << 16 | ((b) >> 3 & 1u) << 24 |   \
     ((b) >> 4 & 1u) << 1 | ((b) >> 5 & 1u) << 9 | ((b) >> 6 & 1u) << 17 | ((b) >> 7 & 1u) << 25)
#define MICO_DWB_S4(b) MICO_DWB_S(b), MICO_DWB_S(b + 1u), MICO_DWB_S(b + 2u), MICO_DWB_S(b + 3u)
#define MICO_DWB_S16(b)                                                                     \
    MICO_DWB_S4(b), MICO_DWB_S4(b + 4u), MICO_DWB_S4(b + 8u), MICO_DWB_S4(b + 12u)
#define MICO_DWB_S64(b)                                                                     \
    MICO_DWB_S16(b), MICO_DWB_S16(b + 16u), MICO_DWB_S16(b + 32u), MICO_DWB_S16(b + 48u)
static const uint32_t mico_dwb_split[256] = {MICO_DWB_S64(0u), MICO_DWB_S64(64u),
                                             MICO_DWB_S64(128u), MICO_DWB_S64(192u)};
#undef MICO_DWB_S64
#undef MICO_DWB_S16
#undef MICO_DWB_S4
#undef MICO_DWB_S

/* Bytes q[0..n-1] (n >= 1; 4 at most read) of packed codes through mico_dwb_split, byte j
 * shifted by 2 j: their classes, a byte each (16 codes). */
static MICO_DWL_INLINE uint32_t mico_dwb_step(const uint8_t *q, int32_t n)
{
    const uint32_t *const t = mico_dwb_split;
    uint32_t x = t[q[0]];
    if (n >= 4) {
        return x | t[q[1]] << 2 | t[q[2]] << 4 | t[q[3]] << 6;
    }
    if (n > 1) {
        x |= t[q[1]] << 2;
    }
    if (n > 2) {
        x |= t[q[2]] << 4;
    }
    return x;
}

/* The classes of the codes of bytes q[0..nb-1] (nb <= 16; only those read): c[0] a0 of the
 * even codes, c[1] their a1, c[2] a0 of the odd ones, c[3] their a1 (bit i: code 2 i, or
 * 2 i + 1). */
static MICO_DWL_INLINE void mico_dwb_classes(const uint8_t *q, int32_t nb, uint32_t c[4])
{
    uint32_t e0 = 0, e1 = 0, o0 = 0, o1 = 0;
    int32_t k;
    MICO_UNROLL for (k = 0; k < 4; k++) { /* (constant shifts) */
        uint32_t x;
        if (4 * k >= nb) {
            break;
        }
        x = mico_dwb_step(q + 4 * k, nb - 4 * k);
        e0 |= (x & 0xffu) << (8 * k);
        e1 |= ((x >> 8) & 0xffu) << (8 * k);
        o0 |= ((x >> 16) & 0xffu) << (8 * k);
        o1 |= (x >> 24) << (8 * k);
    }
    c[0] = e0;
    c[1] = e1;
    c[2] = o0;
    c[3] = o1;
}

/* The same for a row on whole bytes (nb = 1..15 of them, no code of another row): steps of 4
 * bytes, the classes of two steps merged at once, halfword by halfword. */
static MICO_DWL_INLINE void mico_dwb_classes4(const uint8_t *q, int32_t nb, uint32_t c[4])
{
    const uint32_t m = 0x00ff00ffu;
    const uint32_t g0 = mico_dwb_step(q, nb);
    uint32_t g1, g2, g3, lo, hi, lo2, hi2;
    if (nb <= 4) {
        c[0] = g0 & 0xffu;
        c[1] = (g0 >> 8) & 0xffu;
        c[2] = (g0 >> 16) & 0xffu;
        c[3] = g0 >> 24;
        return;
    }
    g1 = mico_dwb_step(q + 4, nb - 4);
    lo = (g0 & m) | (g1 & m) << 8;    /* a0: even codes' in the low half, odd codes' high */
    hi = ((g0 >> 8) & m) | (g1 & ~m); /* a1 */
    if (nb <= 8) {
        c[0] = lo & 0xffffu;
        c[1] = hi & 0xffffu;
        c[2] = lo >> 16;
        c[3] = hi >> 16;
        return;
    }
    g2 = mico_dwb_step(q + 8, nb - 8);
    g3 = nb > 12 ? mico_dwb_step(q + 12, nb - 12) : 0u;
    lo2 = (g2 & m) | (g3 & m) << 8;
    hi2 = ((g2 >> 8) & m) | (g3 & ~m);
    c[0] = (lo & 0xffffu) | lo2 << 16;
    c[1] = (hi & 0xffffu) | hi2 << 16;
    c[2] = lo >> 16 | (lo2 & 0xffff0000u);
    c[3] = hi >> 16 | (hi2 & 0xffff0000u);
}

/* Row of w codes from code `at` of the input (w <= 62) as r[0], r[1]: a0, a1 of its even
 * columns (w - w / 2 bits), r[2], r[3]: of its odd columns (w / 2 bits). Rows on whole bytes
 * (nb = w / 4, else 0) are their bytes' classes; other rows start at code d = at mod 4 of a
 * byte (d + w <= 64) and are shifted out of their bytes' classes (the even columns the odd
 * codes for an odd d) and masked (me, mo: the columns' bits). */
static MICO_DWL_INLINE void mico_dwb_row(const uint8_t *in, size_t at, int32_t w, int32_t nb,
                                         uint32_t me, uint32_t mo, uint32_t r[4])
{
    const uint8_t *const q = in + (at >> 2);
    const uint32_t d = (uint32_t)at & 3u, s = d >> 1, s1 = (d + 1u) >> 1;
    uint32_t cl[4];
    if (nb == 8) { /* (rows of 32 and 16 codes: no test of the steps) */
        mico_dwb_classes4(q, 8, r);
    } else if (nb == 4) {
        mico_dwb_classes4(q, 4, r);
    } else if (nb) {
        mico_dwb_classes4(q, nb, r);
    } else {
        mico_dwb_classes(q, (w + (int32_t)d + 3) >> 2, cl);
        if (d & 1u) { /* the row's even columns are the bytes' odd codes */
            r[0] = (cl[2] >> s) & me;
            r[1] = (cl[3] >> s) & me;
            r[2] = (cl[0] >> s1) & mo;
            r[3] = (cl[1] >> s1) & mo;
        } else {
            r[0] = (cl[0] >> s) & me;
            r[1] = (cl[1] >> s) & me;
            r[2] = (cl[2] >> s) & mo;
            r[3] = (cl[3] >> s) & mo;
        }
    }
}

static inline uint32_t mico_dwb_zip(uint32_t x)
{
    uint32_t t;
    t = (x ^ (x >> 8)) & 0x0000ff00u;
    x ^= t ^ (t << 8);
    t = (x ^ (x >> 4)) & 0x00f000f0u;
    x ^= t ^ (t << 4);
    t = (x ^ (x >> 2)) & 0x0c0c0c0cu;
    x ^= t ^ (t << 2);
    t = (x ^ (x >> 1)) & 0x22222222u;
    x ^= t ^ (t << 1);
    return x;
}

/* Sequential writer of a packed bit stream from bit 0 of out (whole words as they fill). */
typedef struct {
    uint8_t *p;
    uint32_t acc;
    uint32_t fill;
} MicoDwbOut;

static MICO_DWL_INLINE void mico_dwb_emit(MicoDwbOut *o, uint32_t v, uint32_t n)
{
    uint32_t total;
    if (n < 32u) {
        v &= (1u << n) - 1u;
    }
    o->acc |= v << o->fill;
    total = o->fill + n;
    if (total >= 32u) {
        o->p[0] = (uint8_t)o->acc;
        o->p[1] = (uint8_t)(o->acc >> 8);
        o->p[2] = (uint8_t)(o->acc >> 16);
        o->p[3] = (uint8_t)(o->acc >> 24);
        o->p += 4;
        o->acc = o->fill ? v >> (32u - o->fill) : 0u;
        total -= 32u;
    }
    o->fill = total;
}

/* The n bits of words v appended (the last word's bits above n cleared). */
static MICO_NOINLINE void mico_dwb_put(MicoDwbOut *o, const uint32_t *v, uint32_t n)
{
    const uint32_t f = o->fill;
    uint32_t acc = o->acc;
    uint8_t *p = o->p;
    for (; n >= 32u; n -= 32u, v++, p += 4) {
        const uint32_t x = *v;
        acc |= x << f;
        p[0] = (uint8_t)acc;
        p[1] = (uint8_t)(acc >> 8);
        p[2] = (uint8_t)(acc >> 16);
        p[3] = (uint8_t)(acc >> 24);
        acc = (x >> 1) >> (31u - f); /* (0 when f = 0) */
    }
    o->p = p;
    o->acc = acc;
    if (n) {
        mico_dwb_emit(o, *v, n);
    }
}

/* The bits left in the writer, the rest of their last byte kept. */
static void mico_dwb_flush(MicoDwbOut *o)
{
    uint32_t b;
    for (b = 0; 8u * b < o->fill; b++) {
        const uint32_t n = o->fill - 8u * b < 8u ? o->fill - 8u * b : 8u;
        const uint32_t keep = 0xffu & ~((1u << n) - 1u);
        o->p[b] = (uint8_t)((o->p[b] & keep) | ((o->acc >> (8u * b)) & ~keep & 0xffu));
    }
}

/* Where the taps of output word 0 start in the copies, and a channel's weights. The copies
 * kx = 0, 1, 2 hold pixel n at bit 32 z + 1 - kx + n, so that tap (1, kx) of output word i is
 * word z + i of copy kx, and row ky = 0 (2) of taps the funnel shift by r0 (r2) of words q0 + i
 * (q2 + i) and the next. */
typedef struct {
    const uint32_t *bufs;  /* a0's copies kx = 0, 1, 2, then a1's, MICO_DWB_NB words apart */
    int32_t z, q0, q2;     /* the words of output word 0's taps of rows 1, 0, 2 */
    uint32_t r0, r2;       /* their shifts (1..31) */
    int32_t nwo;           /* output words */
    uint32_t m[9][2];      /* per tap: all ones in [0] for a weight 0 (the tap then reads all
                            * ones: 3 added to every sum), in [1] for a weight -1 */
    int32_t t[3];          /* per level: its threshold t_L on U (28: never) */
    int32_t levels;        /* 1 (1-bit outputs) or 3 */
} MicoDwbGeom;

/* Y >= L for a constant L, Y bit-sliced as y0..y4: Y's bits against L's from the lowest up
 * (a bit of L set: y_i and the lower compare; clear: y_i or it). */
#define MICO_DWB_STEP(r, y, l) ((l) ? (y) & (r) : (y) | (r))
#define MICO_DWB_GE5(L)                                                                     \
    MICO_DWB_STEP(MICO_DWB_STEP(MICO_DWB_STEP(MICO_DWB_STEP(MICO_DWB_STEP(0xffffffffu, y0,  \
                                                                          (L) & 1),         \
                                                            y1, ((L) >> 1) & 1),            \
                                              y2, ((L) >> 2) & 1),                          \
                                y3, ((L) >> 3) & 1),                                        \
                  y4, ((L) >> 4) & 1)

/* Bit j: Y_j >= t (t in 0..28; 28: never, Y <= 27), Y bit-sliced as y0..y4, a case of a
 * switch per threshold (an instruction a bit). */
static MICO_DWL_INLINE uint32_t mico_dwb_ge(uint32_t y0, uint32_t y1, uint32_t y2, uint32_t y3,
                                            uint32_t y4, int32_t t)
{
#define MICO_DWB_CASE(L)                                                                    \
    case L:                                                                                 \
        return MICO_DWB_GE5(L)
    switch ((uint32_t)t & 31u) { /* (t <= 28: every case listed, no range check) */
        MICO_DWB_CASE(1);
        MICO_DWB_CASE(2);
        MICO_DWB_CASE(3);
        MICO_DWB_CASE(4);
        MICO_DWB_CASE(5);
        MICO_DWB_CASE(6);
        MICO_DWB_CASE(7);
        MICO_DWB_CASE(8);
        MICO_DWB_CASE(9);
        MICO_DWB_CASE(10);
        MICO_DWB_CASE(11);
        MICO_DWB_CASE(12);
        MICO_DWB_CASE(13);
        MICO_DWB_CASE(14);
        MICO_DWB_CASE(15);
        MICO_DWB_CASE(16);
        MICO_DWB_CASE(17);
        MICO_DWB_CASE(18);
        MICO_DWB_CASE(19);
        MICO_DWB_CASE(20);
        MICO_DWB_CASE(21);
        MICO_DWB_CASE(22);
        MICO_DWB_CASE(23);
        MICO_DWB_CASE(24);
        MICO_DWB_CASE(25);
        MICO_DWB_CASE(26);
        MICO_DWB_CASE(27);
    case 0:
        return 0xffffffffu;
    case 28:
    case 29:
    case 30:
    case 31:
        return 0u;
    }
    return 0u;
#undef MICO_DWB_CASE
}

/* one row of taps: a0's three into (C, S), a1's into (D, E) */
#define MICO_DWB_ROW(C, S, D, E, T, P, R)                                                   \
    do {                                                                                    \
        const uint32_t o0_ = g->m[T][0], n0_ = g->m[T][1], o1_ = g->m[T + 1][0];            \
        const uint32_t n1_ = g->m[T + 1][1], o2_ = g->m[T + 2][0], n2_ = g->m[T + 2][1];    \
        const uint32_t x0_ = (R(P, 0) | o0_) ^ n0_, x1_ = (R(P, 1) | o1_) ^ n1_;             \
        const uint32_t x2_ = (R(P, 2) | o2_) ^ n2_, y0_ = (R(P, 3) | o0_) ^ n0_;             \
        const uint32_t y1_ = (R(P, 4) | o1_) ^ n1_, y2_ = (R(P, 5) | o2_) ^ n2_;             \
        MICO_DWB_CSA(C, S, x0_, x1_, x2_);                                                  \
        MICO_DWB_CSA(D, E, y0_, y1_, y2_);                                                  \
    } while (0)
#define MICO_DWB_AL(P, K) ((P)[(K) * MICO_DWB_NB])
#define MICO_DWB_FU0(P, K) (((P)[(K) * MICO_DWB_NB] >> r0) | ((P)[(K) * MICO_DWB_NB + 1] << r2))
#define MICO_DWB_FU2(P, K) (((P)[(K) * MICO_DWB_NB] >> r2) | ((P)[(K) * MICO_DWB_NB + 1] << r0))

/* Bit j: the code of output pixel 32 i + j, bit-sliced (o[2 i], o[2 i + 1]), for every word;
 * the taps of row ky = 0 through R0 (a funnel shift at stride 1, a word at stride 2). */
#define MICO_DWB_RUN(NAME, R0)                                                              \
static MICO_NOINLINE void NAME(const MicoDwbGeom *g, uint32_t *res)                         \
{                                                                                            \
    const uint32_t *p1 = g->bufs + g->z, *p0 = g->bufs + g->q0, *p2 = g->bufs + g->q2;       \
    const uint32_t r0 = g->r0, r2 = 32u - r0; /* (r2 = w mod 32) */                          \
    const int32_t t0 = g->t[0], t1 = g->t[1], t2 = g->t[2], levels = g->levels, nwo = g->nwo; \
    int32_t i;                                                                               \
    for (i = 0; i < nwo; i++, p0++, p1++, p2++) {                                            \
        uint32_t c1, s1, c2, s2, c3, s3, c4, u0, d1, e1, d2, e2, d3, e3, d4, e4, d5, e5, d6, u1; \
        uint32_t f1, g1, f2, g2, f3, u2, u3, u4;                                             \
        MICO_DWB_ROW(c1, s1, d1, e1, 0, p0, R0);                                             \
        MICO_DWB_ROW(c2, s2, d2, e2, 3, p1, MICO_DWB_AL);                                    \
        MICO_DWB_ROW(c3, s3, d3, e3, 6, p2, MICO_DWB_FU2);                                   \
        MICO_DWB_CSA(c4, u0, s1, s2, s3); /* weight 1 */                                     \
        MICO_DWB_CSA(d4, e4, c1, c2, c3); /* weight 2 */                                     \
        MICO_DWB_CSA(d5, e5, e1, e2, e3);                                                    \
        MICO_DWB_CSA(d6, u1, e4, c4, e5);                                                    \
        MICO_DWB_CSA(f1, g1, d1, d2, d3); /* weight 4 */                                     \
        MICO_DWB_CSA(f2, g2, d4, d5, d6);                                                    \
        f3 = g1 & g2;                                                                        \
        u2 = g1 ^ g2;                                                                        \
        MICO_DWB_CSA(u4, u3, f1, f2, f3); /* weight 8, and 16 (U <= 27) */                   \
        if (levels == 1) {                                                                   \
            res[2 * i] = mico_dwb_ge(u0, u1, u2, u3, u4, t0);                                \
        } else {                                                                             \
            const uint32_t ge2 = mico_dwb_ge(u0, u1, u2, u3, u4, t1);                        \
            res[2 * i] = mico_dwb_ge(u0, u1, u2, u3, u4, t0) ^ ge2 ^                         \
                         mico_dwb_ge(u0, u1, u2, u3, u4, t2);                                \
            res[2 * i + 1] = ge2;                                                            \
        }                                                                                    \
    }                                                                                        \
}
MICO_DWB_RUN(mico_dwb_run, MICO_DWB_FU0)
MICO_DWB_RUN(mico_dwb_run2, MICO_DWB_AL)
#undef MICO_DWB_RUN
#undef MICO_DWB_ROW
#undef MICO_DWB_AL
#undef MICO_DWB_FU0
#undef MICO_DWB_FU2

/* The thresholds t_L of a channel (acc = base + U, U in 0..umax): t_L the smallest U of code
 * >= L (umax + 1: none), by bisection. A multiplier (not binary): code >= L exactly when L <= hi
 * and (L <= lo, or acc > 0 and the rescaled acc >= L: mico_rescale's rounding makes that acc m
 * >= (2 L - 1) 2^(shift - 1) for shifts of 32 or less, and the high word of acc m >= (2 L - 1)
 * 2^(shift - 33) for larger ones); other requantizations with mico_rq_apply. */
static MICO_NOINLINE void mico_dwb_levels(MicoDwbGeom *g, const MicoRq *rq, int32_t base,
                                          int32_t umax)
{
    const int scaled = rq->scaled && !rq->binary, high = rq->shift > 32;
    const uint32_t m = (uint32_t)rq->m;
    int32_t level, a = 0;
    for (level = 1; level <= g->levels; level++) {
        const uint32_t k2 = 2u * (uint32_t)level - 1u;
        int32_t b = umax + 1;
        if (scaled && level > rq->hi) {
            a = b; /* never */
        } else if (scaled && level <= rq->lo) {
            a = 0; /* always */
        } else if (scaled && high) { /* the high word of acc m against h */
            const uint32_t h = k2 << (rq->shift - 33);
            while (a < b) {
                const int32_t mid = a + ((b - a) >> 1), r = base + mid;
                if (r > 0 && (uint32_t)(((uint64_t)(uint32_t)r * m) >> 32) >= h) {
                    b = mid;
                } else {
                    a = mid + 1;
                }
            }
        } else if (scaled) { /* acc m against (2 L - 1) 2^(shift - 1) (< 2^35) */
            const uint64_t lim = (uint64_t)k2 << (rq->shift - 1);
            while (a < b) {
                const int32_t mid = a + ((b - a) >> 1), r = base + mid;
                if (r > 0 && (uint64_t)(uint32_t)r * m >= lim) {
                    b = mid;
                } else {
                    a = mid + 1;
                }
            }
        } else {
            while (a < b) {
                const int32_t mid = a + ((b - a) >> 1);
                if (mico_rq_apply(rq, base + mid) >= level) {
                    b = mid;
                } else {
                    a = mid + 1;
                }
            }
        }
        g->t[level - 1] = a;
    }
}

/* Whether every weight is in {-1, 0, 1} and every bias far from the int32 limits. */
static MICO_NOINLINE int mico_dwb_weights_ok(const MicoConv2d *p)
{
    const uint32_t wb = (uint32_t)p->w_bits;
    uint32_t wt[9], sums[2];
    int32_t c, t;
    for (c = 0; c < p->out_c; c++) {
        if (p->bias[c] > 0x7fffffff - 32 || p->bias[c] < -0x7fffffff + 32) {
            return 0;
        }
    }
    if (wb == 2u) { /* no field 10 (-2) among the 9 out_c codes */
        const size_t n = (size_t)p->out_c * 18u;
        size_t i;
        for (i = 0; i < n / 8u; i++) {
            const uint32_t v = p->weight[i];
            if (v & 0xaau & ~(v << 1)) {
                return 0;
            }
        }
        if (n % 8u) {
            const uint32_t v = p->weight[n / 8u] & ((1u << (n % 8u)) - 1u);
            if (v & 0xaau & ~(v << 1)) {
                return 0;
            }
        }
        return 1;
    }
    for (c = 0; c < p->out_c; c++) {
        mico_dwp_weights(p->weight, (uint32_t)c, wb, 0, wt, sums);
        for (t = 0; t < 9; t++) {
            if (wt[t] + 1u > 2u) {
                return 0;
            }
        }
    }
    return 1;
}

/* Channel c's tap masks (g->m) and the constant of its sums: bias - 3 (weights -1 and 0). */
static MICO_DWL_INLINE int32_t mico_dwb_taps(const MicoConv2d *p, int32_t c, MicoDwbGeom *g)
{
    const uint32_t wb = (uint32_t)p->w_bits;
    int32_t base = p->bias[c], t;
    if (wb == 2u) { /* the 9 fields straight: 0 (weight 0), 1, 3 (-1) */
        const uint32_t v = mico_dwl_bits(p->weight, (size_t)c * 18u, 18u);
        MICO_UNROLL for (t = 0; t < 9; t++) {
            const uint32_t f = (v >> (2 * t)) & 3u, zero = 0u - (f == 0u);
            g->m[t][0] = zero;
            g->m[t][1] = 0u - (f == 3u);
            base -= (int32_t)(3u & (zero | (0u - (f >> 1))));
        }
    } else {
        uint32_t wt[9], sums[2];
        mico_dwp_weights(p->weight, (uint32_t)c, wb, 0, wt, sums);
        for (t = 0; t < 9; t++) {
            g->m[t][0] = wt[t] ? 0u : 0xffffffffu;
            g->m[t][1] = wt[t] == 0xffffffffu ? 0xffffffffu : 0u;
            base -= wt[t] == 0xffffffffu || !wt[t] ? 3 : 0;
        }
    }
    return base;
}

#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__) &&                              \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define MICO_DWB_LE 1
#else
#define MICO_DWB_LE 0
#endif
/* A word of the output's bytes (stored as words where aligned): a type that may alias them. */
#if defined(__GNUC__)
typedef uint32_t __attribute__((__may_alias__)) MicoDwbWord;
#else
typedef uint32_t MicoDwbWord;
#endif

/* A channel's packed codes (res: 1-bit codes in res[2 i], 2-bit codes' bit slices in res[2 i],
 * res[2 i + 1]) of n pixels appended to the output: stored as words straight where the writer
 * is at an aligned address with nothing pending and the codes fill whole words (little
 * endian: the stream's bytes in order), else through mico_dwb_put. */
static MICO_DWL_INLINE void mico_dwb_codes(MicoDwbWord *dst, const uint32_t *res, int32_t nw,
                                           int32_t ob)
{
    int32_t i;
    if (ob == 1) {
        for (i = 0; i < nw; i++) {
            dst[i] = res[2 * i];
        }
    } else { /* the codes' two bit slices zipped into packed codes */
        for (i = 0; i < nw; i++) {
            const uint32_t o0 = res[2 * i], o1 = res[2 * i + 1];
            dst[2 * i] = mico_dwb_zip((o0 & 0xffffu) | o1 << 16);
            dst[2 * i + 1] = mico_dwb_zip(o0 >> 16 | (o1 & 0xffff0000u));
        }
    }
}

static MICO_NOINLINE void mico_dwb_out(MicoDwbOut *wr, uint32_t *res, int32_t n, int32_t ob)
{
    const int32_t nw = (n + 31) / 32;
    if (MICO_DWB_LE && ((n * ob) & 31) == 0 && wr->fill == 0u && ((uintptr_t)wr->p & 3u) == 0u) {
        mico_dwb_codes((MicoDwbWord *)(void *)wr->p, res, nw, ob);
        wr->p += (size_t)(n * ob) >> 3;
    } else { /* in place, then appended */
        mico_dwb_codes(res, res, nw, ob);
        mico_dwb_put(wr, res, (uint32_t)(n * ob));
    }
}

/* The layer (mico_dwb_shape and mico_dwb_weights_ok hold); thr: its thresholds t_L (3 per
 * channel, 28: never), or NULL (then found here, mico_dwb_levels). */
static MICO_NOINLINE void mico_dwb(const MicoConv2d *p, const uint8_t *thr, const void *in,
                                   void *out)
{
    const int32_t h = p->in_h, w = p->in_w, hw = h * w, nw = (hw + 31) / 32;
    const int32_t z = (w + 31) / 32 + 1, ob = p->out.fmt.bits;
    const uint32_t tail = (hw & 31) ? (1u << (hw & 31)) - 1u : ~0u;
    const size_t end = (size_t)p->in_c * (size_t)hw * 2u;
    uint32_t bufs[6 * MICO_DWB_NB], nfirst[MICO_DWB_WORDS], nlast[MICO_DWB_WORDS];
    uint32_t res[2 * MICO_DWB_WORDS];
    int32_t i, c, y;
    MicoDwbGeom g;
    MicoDwbOut wr;
    /* The copies' zero words: those mico_dwb_run reads (words z - w / 32 - 1 .. z + w / 32 +
     * nw) that no channel writes (each writes words z - 1 .. z + nw), zeroed once, not the
     * buffers (a memset call per layer) */
    for (i = 0; i < 6; i++) {
        int32_t k;
        for (k = 0; k < z; k++) {
            bufs[i * MICO_DWB_NB + k] = 0;
        }
        for (k = z + nw - 1; k <= z + (w >> 5) + nw; k++) {
            bufs[i * MICO_DWB_NB + k] = 0;
        }
    }
    for (i = 0; i < nw; i++) {
        nfirst[i] = nlast[i] = 0xffffffffu;
    }
    for (y = 0; y < h; y++) { /* columns 0 and w - 1 */
        nfirst[(y * w) >> 5] &= ~(1u << ((y * w) & 31));
        nlast[(y * w + w - 1) >> 5] &= ~(1u << ((y * w + w - 1) & 31));
    }
    g.bufs = bufs;
    g.z = z;
    g.q0 = z - (w + 31) / 32; /* bit 32 z - w (w not a multiple of 32) */
    g.r0 = 32u - ((uint32_t)w & 31u);
    g.q2 = z + (w >> 5);
    g.r2 = (uint32_t)w & 31u;
    g.nwo = nw;
    g.levels = ob == 1 ? 1 : 3;
    wr.p = (uint8_t *)out;
    wr.acc = 0;
    wr.fill = 0;
    for (c = 0; c < p->out_c; c++) {
        const size_t at = (size_t)c * (size_t)hw * 2u;
        const MicoRq rq = mico_rq(&p->out, c);
        uint32_t *const b0 = bufs + z, *const b3 = bufs + 3 * MICO_DWB_NB + z;
        uint32_t pa0 = 0, pa2 = 0, pb0 = 0, pb2 = 0;
        const int32_t base = mico_dwb_taps(p, c, &g);
        for (i = 0; i < nw; i++) { /* the plane's bit slices into their copies */
            const uint32_t u =
                mico_dwb_unzip(mico_dwb_get((const uint8_t *)in, at + 64u * (size_t)i, end));
            const uint32_t v =
                mico_dwb_unzip(mico_dwb_get((const uint8_t *)in, at + 64u * (size_t)i + 32u, end));
            const uint32_t m = i == nw - 1 ? tail : ~0u, nf = nfirst[i], nl = nlast[i];
            const uint32_t a = ((u & 0xffffu) | v << 16) & m, b = (u >> 16 | (v & 0xffff0000u)) & m;
            uint32_t x;
            x = a & nl; /* copy 0 from bit 1, copy 1 from bit 0, copy 2 from bit -1 */
            b0[i] = pa0 >> 31 | x << 1;
            pa0 = x;
            b0[MICO_DWB_NB + i] = a;
            x = a & nf;
            b0[2 * MICO_DWB_NB + i - 1] = pa2 >> 1 | x << 31;
            pa2 = x;
            x = b & nl;
            b3[i] = pb0 >> 31 | x << 1;
            pb0 = x;
            b3[MICO_DWB_NB + i] = b;
            x = b & nf;
            b3[2 * MICO_DWB_NB + i - 1] = pb2 >> 1 | x << 31;
            pb2 = x;
        }
        b0[nw] = pa0 >> 31;
        b0[2 * MICO_DWB_NB + nw - 1] = pa2 >> 1;
        b3[nw] = pb0 >> 31;
        b3[2 * MICO_DWB_NB + nw - 1] = pb2 >> 1;
        if (thr != NULL) { /* from the generator (mico.codegen.dwconv_plan.dwb_thresholds) */
            g.t[0] = thr[3 * c];
            g.t[1] = thr[3 * c + 1];
            g.t[2] = thr[3 * c + 2];
        } else {
            mico_dwb_levels(&g, &rq, base, 27);
        }
        mico_dwb_run(&g, res);
        mico_dwb_out(&wr, res, hw, ob);
    }
    mico_dwb_flush(&wr);
}

/* Stride 2 (mico_dwb_shape holds): output (oy, ox) reads input rows 2 oy - 1 .. 2 oy + 1 and
 * columns 2 ox - 1 .. 2 ox + 1, i.e. the even column E[ox] (kx = 1), the odd O[ox] (kx = 2)
 * and O[ox - 1] (kx = 0, O' = O shifted a column, its first column the padding). Each input
 * row is split into E, O, O' (a0 and a1 of the even and odd columns: a table load a byte of
 * codes, mico_dwb_split, mico_dwb_row) and appended to the streams of its parity, a row of OW
 * bits per output row: the odd rows 2 j - 1 (j = 0 .. OH, row -1 and row H the padding), the
 * even rows 2 j. Tap row ky = 1 of output word i is word i of the even streams, ky = 0 word i
 * of the odd ones, ky = 2 the odd ones' funnel shift by OW bits (a row further):
 * mico_dwb_run2. */
static MICO_NOINLINE void mico_dwb2(const MicoConv2d *p, const uint8_t *thr, const void *in,
                                    void *out)
{
    const int32_t h = p->in_h, w = p->in_w, oh = p->out_h, ow = p->out_w, ohw = oh * ow;
    const int32_t ob = p->out.fmt.bits, nb = w % 4 ? 0 : w / 4; /* (w <= 62: nb <= 15) */
    const uint32_t me = (1u << ow) - 1u, mo = (1u << (w / 2)) - 1u; /* ow, w / 2 <= 31 */
    uint32_t bufs[12 * MICO_DWB_NB]; /* the odd rows' 6 streams, then the even rows' */
    uint32_t res[2 * MICO_DWB_WORDS];
    int32_t i, c;
    MicoDwbGeom g;
    MicoDwbOut wr;
    /* Each channel writes the streams' words 0 .. (rows) OW / 32, all that mico_dwb_run2
     * reads but word NWO of the odd streams (ky = 2's next word, only for outputs past the
     * plane): that word zeroed once, not the buffers (a memset call per layer) */
    for (i = 0; i < 6; i++) {
        bufs[i * MICO_DWB_NB + (ohw + 31) / 32] = 0;
    }
    g.bufs = bufs;
    g.q0 = 0;
    g.z = 6 * MICO_DWB_NB;
    g.q2 = 0;
    g.r0 = 32u - (uint32_t)ow; /* ky = 2: the odd streams shifted by r2 = ow bits */
    g.nwo = (ohw + 31) / 32;
    g.levels = ob == 1 ? 1 : 3;
    wr.p = (uint8_t *)out;
    wr.acc = 0;
    wr.fill = 0;
    for (c = 0; c < p->out_c; c++) {
        const int32_t base = mico_dwb_taps(p, c, &g);
        int32_t par;
        for (par = 0; par < 2; par++) { /* odd rows 2 j - 1 (j <= oh), then even rows 2 j */
            uint32_t *const st = bufs + par * 6 * MICO_DWB_NB;
            uint32_t a[6] = {0, 0, 0, 0, 0, 0};
            int32_t j, k, word = 0;
            uint32_t fill = 0;
            for (j = 0; j < oh + 1 - par; j++) {
                const int32_t y = 2 * j - 1 + par;
                uint32_t e0 = 0, e1 = 0, o0 = 0, o1 = 0;
                if (y >= 0 && y < h) { /* row y's codes: a0 and a1 of its even and odd columns */
                    uint32_t r[4];
                    mico_dwb_row((const uint8_t *)in,
                                 ((size_t)c * (size_t)h + (size_t)y) * (size_t)w, w, nb, me, mo, r);
                    e0 = r[0];
                    e1 = r[1];
                    o0 = r[2];
                    o1 = r[3];
                }
                { /* appended: streams kx = 0 (O'), 1 (E), 2 (O) of a0, then of a1 */
                    const uint32_t v[6] = {(o0 << 1) & me, e0, o0, (o1 << 1) & me, e1, o1};
                    MICO_UNROLL for (k = 0; k < 6; k++) {
                        a[k] |= v[k] << fill;
                    }
                    if (fill + (uint32_t)ow >= 32u) { /* (fill >= 1: ow < 32) */
                        MICO_UNROLL for (k = 0; k < 6; k++) {
                            st[k * MICO_DWB_NB + word] = a[k];
                            a[k] = v[k] >> (32u - fill);
                        }
                        word++;
                        fill = fill + (uint32_t)ow - 32u;
                    } else {
                        fill += (uint32_t)ow;
                    }
                }
            }
            MICO_UNROLL for (k = 0; k < 6; k++) {
                st[k * MICO_DWB_NB + word] = a[k];
            }
        }
        if (thr != NULL) { /* from the generator (mico.codegen.dwconv_plan.dwb_thresholds) */
            g.t[0] = thr[3 * c];
            g.t[1] = thr[3 * c + 1];
            g.t[2] = thr[3 * c + 2];
        } else {
            const MicoRq rq = mico_rq(&p->out, c);
            mico_dwb_levels(&g, &rq, base, 27);
        }
        mico_dwb_run2(&g, res);
        mico_dwb_out(&wr, res, ohw, ob);
    }
    mico_dwb_flush(&wr);
}

void mico_qconv2d_dwbs(const MicoConv2d *p, const MicoDwLanes *l, const void *in, void *out)
{
    if (mico_dwb_shape(p) && mico_dwb_weights_ok(p)) {
        if (p->stride_w == 2) {
            mico_dwb2(p, l->thr, in, out);
        } else {
            mico_dwb(p, l->thr, in, out);
        }
        return;
    }
    mico_qconv2d_depthwise3x3(p, in, out);
}

/* One stride each (the generator's entry points): a program links mico_dwb or mico_dwb2 only. */
void mico_qconv2d_dwbs_s1(const MicoConv2d *p, const MicoDwLanes *l, const void *in, void *out)
{
    if (p->stride_w == 1 && mico_dwb_shape(p) && mico_dwb_weights_ok(p)) {
        mico_dwb(p, l->thr, in, out);
    } else {
        mico_qconv2d_depthwise3x3(p, in, out);
    }
}
void mico_qconv2d_dwbs_s2(const MicoConv2d *p, const MicoDwLanes *l, const void *in, void *out)
{
    if (p->stride_w == 2 && mico_dwb_shape(p) && mico_dwb_weights_ok(p)) {
        mico_dwb2(p, l->thr, in, out);
    } else {
        mico_qconv2d_depthwise3x3(p, in, out);
    }
}

/* ------------------------------------------------------------------------------------------
 * Depthwise 3x3 on planes of 5 columns of 4-bit codes (mico_qconv2d_dw4; DS-CNN's 25 x 5 at
 * W4A4). Each input row y (5 unsigned codes n0..n4, no zero point, padding 0) is read once
 * into two words of 3 lanes of 10 bits, its even and odd columns: E = n0 | n2 << 10 | n4 << 20
 * and O = n1 | n3 << 10 (the padding column 5 is lane 2's 0). A kernel row (w0, w1, w2) of an
 * output row then costs two multiplies a word of outputs: the even outputs (columns 0, 2, 4)
 * take w0 n(x-1) + w1 n(x) + w2 n(x+1) = (w0 2^10 + w2) O + w1 E, the odd ones (1, 3, in
 * lanes 1 and 2) (w0 2^10 + w2) E + (w1 O) << 10, the last shift once for the three kernel
 * rows (lane 0 holds the partial w2 n0, bits 30..31 what w0 n4 2^30 leaves: neither is read).
 * Every lane starts at minus its smallest sum, so ends in [0, span], span = 15 (pos - neg) <=
 * 1023 (the generator takes the path where every channel's does; a wider channel goes one
 * output at a time), and a word's lanes never borrow from each other. Outputs come from a
 * table of the code of every lane value (the generator's levels through mico_dwp_lut, or the
 * kernel's own requantization when a channel has none), 5 codes a row packed into 20 bits and
 * stored a byte at a time, the nibble a row leaves carried to the next (a plane starts inside
 * a byte every other channel). Signed codes in and out (mico_qconv2d_dw4s): the lanes hold the
 * signed values (f ^ 8 less 8 per field, the padding 0), each lane starts at minus its
 * smallest sum over [-8, 7], the table holds code + 8 and a row's packed codes are xor'ed with
 * 8 in each field. In place (input and output one buffer), each input row is read before the
 * output row that overwrites it.
 * ------------------------------------------------------------------------------------------ */
#define MICO_DW4_SPAN 0x3ffu
#define MICO_DW4_LANES 0x100401u /* 1 in each of the 3 lanes of 10 bits */
#if defined(__GNUC__)
#define MICO_DW4_OPAQUE(X) __asm__("" : "+r"(X))
#else
#define MICO_DW4_OPAQUE(X) (void)(X)
#endif

/* The lane words of input row y of a plane, its first code at the low (par 0) or high (par 1)
 * nibble of q[0]: 3 bytes, none past the row's last code. */
static MICO_DWL_INLINE void mico_dw4_row(const uint8_t *q, const int par, uint32_t *r,
                                         const int S)
{
    const uint32_t x = S ? 0x88u : 0u; /* signed codes: f ^ 8 = f + 8 in each field */
    const uint32_t b0 = q[0] ^ x, b1 = q[1] ^ x, b2 = q[2] ^ x;
    if (par == 0) {
        r[0] = (b0 & 15u) | (b1 & 15u) << 10 | (b2 & 15u) << 20;
        r[1] = (b0 >> 4) | (b1 >> 4) << 10;
    } else {
        r[0] = (b0 >> 4) | (b1 >> 4) << 10 | (b2 >> 4) << 20;
        r[1] = (b1 & 15u) | (b2 & 15u) << 10;
    }
    if (S) { /* the signed values f (the padding column stays 0) */
        r[0] -= 8u * MICO_DW4_LANES;
        r[1] -= 8u * (MICO_DW4_LANES - (1u << 20));
    }
}

/* A channel's constants: W02[r] = w(r,0) 2^10 + w(r,2), W1[r] = w(r,1), the lanes' starts. */
typedef struct {
    uint32_t w02[3], w1[3], be, bo;
} MicoDw4Ch;

/* The 20 bits of output row (codes by table) from input rows a (y - 1), b (y), c (y + 1) (E,
 * O each): the odd outputs' w1 O10 as (sum of w1 O) << 10, so a row is two words. */
static MICO_DWL_INLINE uint32_t mico_dw4_out(const MicoDw4Ch *k, const uint8_t *lut,
                                             const uint32_t *a, const uint32_t *b,
                                             const uint32_t *c)
{
    uint32_t ae = k->be, ao = k->bo, t;
    ae += k->w02[0] * a[1] + k->w1[0] * a[0];
    ae += k->w02[1] * b[1] + k->w1[1] * b[0];
    ae += k->w02[2] * c[1] + k->w1[2] * c[0];
    t = k->w1[0] * a[1] + k->w1[1] * b[1] + k->w1[2] * c[1];
    ao += k->w02[0] * a[0] + k->w02[1] * b[0] + k->w02[2] * c[0] + (t << 10);
    return (uint32_t)lut[ae & MICO_DW4_SPAN] | (uint32_t)lut[(ao >> 10) & MICO_DW4_SPAN] << 4 |
           (uint32_t)lut[(ae >> 10) & MICO_DW4_SPAN] << 8 |
           (uint32_t)lut[(ao >> 20) & MICO_DW4_SPAN] << 12 |
           (uint32_t)lut[(ae >> 20) & MICO_DW4_SPAN] << 16;
}

/* Output row r (20 bits) stored at q, its first code at the low (par 0: the high nibble left
 * pending in *pend) or high nibble (par 1: *pend is the byte's low nibble); the next row's q. */
static MICO_DWL_INLINE uint8_t *mico_dw4_put(uint8_t *q, const int par, uint32_t r,
                                             uint32_t *pend)
{
    if (par == 0) {
        q[0] = (uint8_t)r;
        q[1] = (uint8_t)(r >> 8);
        *pend = r >> 16;
        return q + 2;
    }
    r = *pend | r << 4;
    q[0] = (uint8_t)r;
    q[1] = (uint8_t)(r >> 8);
    q[2] = (uint8_t)(r >> 16);
    return q + 3;
}

/* One channel plane of h rows (in and out at nibble parity P, the same for both: planes of
 * equal size; S signed codes), the lane words of three input rows in registers. */
static MICO_DWL_INLINE void mico_dw4_plane(const MicoDw4Ch *k, const uint8_t *lut,
                                           const uint8_t *in, uint8_t *out, int32_t h, const int P,
                                           const int S)
{
    const uint32_t xo = S ? 0x88888u : 0u; /* code + 8 from the table: xor 8, the code's field */
    uint32_t r0[2] = {0u, 0u}, r1[2], r2[2], r3[2], pend;
    int32_t y;
    MICO_DW4_OPAQUE(lut); /* (the table's address in a register, not rebuilt from sp) */
    pend = P ? (uint32_t)out[0] & 15u : 0u;
    mico_dw4_row(in, P, r1, S);
    in += 2 + P; /* row 1: at the other parity */
    for (y = 0; y + 2 <= h; y += 2) {
        mico_dw4_row(in, !P, r2, S);
        in += 3 - P;
        out = mico_dw4_put(out, P, mico_dw4_out(k, lut, r0, r1, r2) ^ xo, &pend);
        if (y + 2 < h) {
            mico_dw4_row(in, P, r3, S);
            in += 2 + P;
        } else {
            r3[0] = r3[1] = 0u;
        }
        out = mico_dw4_put(out, !P, mico_dw4_out(k, lut, r1, r2, r3) ^ xo, &pend);
        r0[0] = r2[0], r0[1] = r2[1];
        r1[0] = r3[0], r1[1] = r3[1];
    }
    if (y < h) { /* the last row of an odd plane: its high nibble pending when P is 0 */
        r2[0] = r2[1] = 0u;
        out = mico_dw4_put(out, P, mico_dw4_out(k, lut, r0, r1, r2) ^ xo, &pend);
        if (!P) {
            out[0] = (uint8_t)((out[0] & 0xf0u) | pend);
        }
    } else if (P) { /* an even plane from a high nibble: the last row's high nibble pending */
        out[0] = (uint8_t)((out[0] & 0xf0u) | pend);
    }
}

/* Whether mico_qconv2d_dw4 (S = 0: unsigned codes) or _dw4s (S = 1: signed codes) takes the
 * layer (mirrored by mico.codegen.dwconv_plan.dw4_plan): 3x3, stride 1, padding 1, 5 columns,
 * 4-bit codes in and out without a zero point, rescaled outputs (weights of any width: each
 * channel's span decides). */
static int mico_dw4_shape(const MicoConv2d *p, const int S)
{
    const MicoFmt a = p->in_fmt, o = p->out.fmt;
    return p->k_h == 3 && p->k_w == 3 && p->stride_h == 1 && p->stride_w == 1 && p->pad_h == 1 &&
           p->pad_w == 1 && p->dil_h == 1 && p->dil_w == 1 && p->groups == p->in_c &&
           p->in_c == p->out_c && p->in_w == 5 && p->out_w == 5 && p->in_h == p->out_h &&
           p->in_h >= 1 && a.bits == 4 && !a.is_signed == !S && !a.zero && o.bits == 4 &&
           !o.is_signed == !S && !o.zero && p->w_bits >= 1 && p->w_bits <= 8 &&
           p->out.n_mult != 0 && p->out.lo >= (S ? -8 : 0) && p->out.hi <= (S ? 7 : 15) &&
           p->out.lo <= p->out.hi;
}

/* The code in nibble i of a packed plane (S: signed), and nibble i set to code c's field (its
 * byte's other nibble kept). */
static inline uint32_t mico_dw4_get(const uint8_t *q, int32_t i, const int S)
{
    const uint32_t f = (uint32_t)q[i >> 1] >> (4 * (i & 1)) & 15u;
    return S ? (f ^ 8u) - 8u : f;
}
static inline void mico_dw4_set(uint8_t *q, int32_t i, uint32_t c)
{
    const uint32_t s = 4u * (uint32_t)(i & 1);
    q[i >> 1] = (uint8_t)((q[i >> 1] & ~(15u << s)) | (c & 15u) << s);
}

/* A channel whose sums do not fit 10-bit lanes: one output at a time (codes from nibble i0 of
 * in and out), from a window of three input rows read before the output row they serve is
 * stored (in place, each input row is read before its output row overwrites it). */
static MICO_NOINLINE void mico_dw4_plain(const MicoConv2d *p, const uint8_t *in, uint8_t *out,
                                         int32_t i0, const uint32_t *w, int32_t bias,
                                         const MicoRq *rq)
{
    const int S = p->in_fmt.is_signed != 0;
    uint32_t win[3][7] = {{0u}}; /* row r in win[r mod 3] (row -1: 0), columns -1 .. 5 */
    int32_t y, x, dy, dx;
    for (x = 0; x < 5; x++) {
        win[0][x + 1] = mico_dw4_get(in, i0 + x, S); /* row 0 */
    }
    for (y = 0; y < p->out_h; y++) {
        uint32_t *const next = win[(y + 1) % 3]; /* row y + 1 */
        for (x = 0; x < 5; x++) {
            next[x + 1] = y + 1 < p->in_h ? mico_dw4_get(in, i0 + 5 * (y + 1) + x, S) : 0u;
        }
        for (x = 0; x < 5; x++) {
            uint32_t acc = (uint32_t)bias;
            for (dy = 0; dy < 3; dy++) {
                const uint32_t *const row = win[(y + 2 + dy) % 3]; /* row y - 1 + dy */
                for (dx = 0; dx < 3; dx++) {
                    acc += w[3 * dy + dx] * row[x + dx];
                }
            }
            mico_dw4_set(out, i0 + 5 * y + x, (uint32_t)mico_rq_apply(rq, (int32_t)acc));
        }
    }
}

/* mico_qconv2d_dw4 / _dw4s: S signed codes in and out. */
static MICO_DWL_INLINE void mico_dw4(const MicoConv2d *p, const uint8_t *lvl, const void *in,
                                     void *out, const int S)
{
    uint32_t lut_words[(MICO_DW4_SPAN + 1u) / 4u];
    /* the lowest code stored (0 after a ReLU: the generator's levels start there) */
    const int32_t lo = p->out.relu && p->out.lo < 0 ? 0 : p->out.lo;
    const int32_t plane = 5 * p->in_h, n_lvl = p->out.hi - lo;
    const int32_t base = lo + (S ? 8 : 0); /* the table's byte of the lowest code */
    const int tab = lvl && n_lvl >= 4 && n_lvl <= 15;
    const uint32_t amin = S ? 8u : 0u, amax = S ? 7u : 15u; /* codes in [-amin, amax] */
    int32_t ch;
    MicoDw4Ch k;
    for (ch = 0; ch < p->out_c; ch++) {
        const MicoRq rq = mico_rq(&p->out, ch);
        const int32_t i0 = ch * plane; /* the plane's first nibble, in and out */
        const uint8_t *const lv = tab ? lvl + (size_t)ch * (size_t)(n_lvl + 1) : NULL;
        uint32_t w[9], sums[2], span, off, off0, v;
        int32_t neg, pos, r;
        mico_dwp_weights(p->weight, (uint32_t)ch, (uint32_t)p->w_bits, 0, w, sums);
        neg = ((int32_t)sums[0] - (int32_t)sums[1]) / 2; /* the negative weights' sum */
        pos = ((int32_t)sums[0] + (int32_t)sums[1]) / 2;
        span = 15u * sums[1];
        if (span > MICO_DW4_SPAN || rq.binary) {
            mico_dw4_plain(p, (const uint8_t *)in, (uint8_t *)out, i0, w, p->bias[ch], &rq);
            continue;
        }
        off = amin * (uint32_t)pos + amax * (uint32_t)(-neg); /* minus the smallest sum */
        off0 = 0u; /* lane 0 of the odd outputs: the partial sums of the third column */
        for (r = 0; r < 3; r++) {
            const uint32_t w2 = w[3 * r + 2];
            k.w02[r] = (w[3 * r] << 10) + w2;
            k.w1[r] = w[3 * r + 1];
            off0 += (int32_t)w2 < 0 ? amax * -w2 : amin * w2;
        }
        k.be = off * MICO_DW4_LANES;
        k.bo = off0 + off * (MICO_DW4_LANES - 1u);
        if (lv && (lv[0] | lv[1] << 8) != 0xffffu) { /* the generator's levels */
            mico_dwp_lut(lut_words, lv, n_lvl, span, base);
        } else { /* the kernel's own requantization of every lane value */
            const uint32_t bb = (uint32_t)p->bias[ch] - off; /* the accumulator of lane value 0 */
            uint8_t *const t = (uint8_t *)lut_words;
            for (v = 0; v <= span; v++) {
                t[v] = (uint8_t)(mico_rq_apply(&rq, (int32_t)(bb + v)) + (S ? 8 : 0));
            }
        }
        if (i0 & 1) {
            mico_dw4_plane(&k, (const uint8_t *)lut_words, (const uint8_t *)in + (i0 >> 1),
                           (uint8_t *)out + (i0 >> 1), p->in_h, 1, S);
        } else {
            mico_dw4_plane(&k, (const uint8_t *)lut_words, (const uint8_t *)in + (i0 >> 1),
                           (uint8_t *)out + (i0 >> 1), p->in_h, 0, S);
        }
    }
}

void mico_qconv2d_dw4(const MicoConv2d *p, const MicoDwLanes *l, const void *in, void *out)
{
    if (mico_dw4_shape(p, 0)) {
        mico_dw4(p, l ? l->lvl : NULL, in, out, 0);
    } else {
        mico_qconv2d_depthwise3x3(p, in, out);
    }
}

void mico_qconv2d_dw4s(const MicoConv2d *p, const MicoDwLanes *l, const void *in, void *out)
{
    if (mico_dw4_shape(p, 1)) {
        mico_dw4(p, l ? l->lvl : NULL, in, out, 1);
    } else {
        mico_qconv2d_depthwise3x3(p, in, out);
    }
}
