/* Binary layers (1-bit weights times 1-bit activations) by AND / XOR and popcount.
 *
 * Weights are binary {-1, +1} stored as bits b (1 = +1); a layer's weight rows are K = taps
 * bits in the plain OIHW / row-major order, each row padded with zero bits to whole 32-bit
 * words (mico.quant.packing.pack_binary_rows). Activations are either unsigned 1-bit codes
 * a in {0, 1} or binary codes {-1, +1} stored as bits c (1 = +1). For one output:
 *   unsigned:  sum_t w_t a_t = 2 popcount(b & a) - popcount(a)
 *   binary:    sum_t w_t x_t = V - 2 popcount((b ^ c) & v)
 * where v marks the V taps that lie inside the input (zero padding is 0, neither -1 nor +1;
 * without padding v is all ones and V = K). popcount(a) and V belong to the pixel, shared by
 * every output channel.
 *
 * Per block of up to 32 output pixels the bit patch of every pixel is built once: with stride
 * 1 the block runs across output rows and each tap's plane (a bit per pixel, cut from input
 * row spans read once) goes through a 32 x 32 bit transpose (mico_bin_planes); other strides
 * take one output row at a time and cut each pixel's k_w-tap fields (mico_bin_fields). Every
 * output channel then runs its popcount dot products over the block. A layer whose output is
 * 1-bit codes with a threshold table `thr` (mico.codegen.binary_plan: the smallest sum whose
 * requantized code is stored as bit 1, found with the Python arithmetic, bias included)
 * stores s >= thr[oc] directly; otherwise bias + s goes through the usual requantization
 * (mico_rq_run_fast) and mico_pack.
 *
 * Convolutions with 1-bit outputs, stride 1 and at most 576 taps (288 with validity masks)
 * skip the transposes and popcounts: the tap planes (a bit per pixel) are XNOR'ed with the
 * weight bit and summed per pixel by carry-save adders, 32 pixels at once ("bit-sliced"), and
 * compared with one constant per channel (mico_bin_sliced).
 *
 * popcount: mico_q*_bin_swar counts bits in SWAR form (per-byte counts of up to 7 words, then
 * one multiply), plain rv32imac; mico_q*_bin_cpop takes one Zbb `cpop` per word (on RISC-V the
 * instruction itself, whatever -march says; elsewhere __builtin_popcount). The code generator
 * picks the entry point from the target's ISA extensions (mico.codegen.binary_plan).
 * Depthwise 3x3 layers (stride 1, or 2 on even widths; padding 1) take the same entry points
 * and a path of their own without popcounts (mico_bin_dw, "binary depthwise 3x3" below).
 * Stack (rv32, -fstack-usage): about 2.8 KB for a convolution (the block's patches), 3.1 KB
 * for a depthwise layer, 2.6 KB for a linear layer. */
#include "mico_nn.h"

#define MICO_BIN_PATCH 576 /* uint32 words of the block's patches (and validity masks) */
#define MICO_BIN_PIX 32     /* output pixels per block */
#define MICO_BIN_SPAN 96    /* bits of an input row span read at once */

#if defined(__GNUC__) && defined(__riscv) && !defined(__riscv_zbb)
/* Zbb's cpop, encoded directly: the generator calls the _cpop kernels only for a target whose
 * ISA has Zbb, so the program needs no other -march (nor a Zbb build of the C library) */
static inline uint32_t mico_bin_cpop(uint32_t x)
{
    uint32_t r;
    __asm__(".insn i 0x13, 1, %0, %1, 0x602" : "=r"(r) : "r"(x));
    return r;
}
#define MICO_POPCOUNT(x) ((int32_t)mico_bin_cpop(x))
#elif defined(__GNUC__)
#define MICO_POPCOUNT(x) ((int32_t)__builtin_popcount(x))
#endif

#if defined(__GNUC__)
#define MICO_BIN_INLINE static inline __attribute__((always_inline))
/* hides a constant from the compiler, which would otherwise turn a multiply by it into
 * shifts and adds (five instructions for one) */
#define MICO_BIN_OPAQUE(x) __asm__("" : "+r"(x))
#else
#define MICO_BIN_INLINE static inline
#define MICO_POPCOUNT(x) mico_bin_bytesum(mico_bin_bytecount(x)) /* no cpop: counted */
#define MICO_BIN_OPAQUE(x) (void)(x)
#endif

/* Each byte of the result: the number of 1 bits in that byte of x. */
MICO_BIN_INLINE uint32_t mico_bin_bytecount(uint32_t x)
{
    x = x - ((x >> 1) & 0x55555555u);
    x = (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
    return (x + (x >> 4)) & 0x0f0f0f0fu;
}

/* The sum of the four bytes of v, when it is below 256 (the counts of one word). */
MICO_BIN_INLINE int32_t mico_bin_bytesum(uint32_t v)
{
    uint32_t k = 0x01010101u;
    MICO_BIN_OPAQUE(k);
    return (int32_t)((v * k) >> 24);
}

/* popcount over n words of w & x (mode 0), w ^ x (mode 1) or (w ^ x) & m (mode 2). SWAR:
 * the byte counts of up to 7 words add up within bytes (7 * 32 < 256), then one multiply
 * sums the four bytes. */
MICO_BIN_INLINE int32_t mico_bin_count(const uint32_t *w, const uint32_t *x, const uint32_t *m,
                                       int32_t n, int32_t mode, int32_t cpop)
{
    int32_t total = 0, i = 0;
    if (cpop) {
        for (i = 0; i < n; i++) {
            uint32_t t = mode == 0 ? w[i] & x[i] : w[i] ^ x[i];
            if (mode == 2) {
                t &= m[i];
            }
            total += MICO_POPCOUNT(t);
        }
        return total;
    }
    while (i < n) {
        const int32_t e = n - i < 7 ? n : i + 7;
        uint32_t acc = 0;
        for (; i < e; i++) {
            uint32_t t = mode == 0 ? w[i] & x[i] : w[i] ^ x[i];
            if (mode == 2) {
                t &= m[i];
            }
            acc += mico_bin_bytecount(t);
        }
        total += mico_bin_bytesum(acc);
    }
    return total;
}

/* popcount of n words. */
static int32_t mico_bin_ones(const uint32_t *x, int32_t n)
{
    return mico_bin_count(x, x, x, n, 0, 0);
}

/* The 32 x 32 bit matrix a (bit c of a[r]: row r, column c) transposed in place. */
static MICO_NOINLINE void mico_bin_transpose(uint32_t *a)
{
    uint32_t m = 0x0000ffffu;
    int32_t j, k;
    for (j = 16; j != 0; j >>= 1, m ^= m << j) {
        for (k = 0; k < 32; k = ((k | j) + 1) & ~j) {
            const uint32_t t = ((a[k] >> j) ^ a[k | j]) & m;
            a[k] ^= t << j;
            a[k | j] ^= t;
        }
    }
}

/* n bits (1..32) of a packed bit stream from bit `bit` (only the bytes holding them are read). */
static uint32_t mico_bin_get(const uint8_t *buf, size_t bit, int32_t n)
{
    const uint8_t *p = buf + (bit >> 3);
    const uint32_t off = (uint32_t)(bit & 7u);
    const uint32_t nb = (off + (uint32_t)n + 7u) >> 3;
    uint32_t v = p[0];
    if (nb > 1u) {
        v |= (uint32_t)p[1] << 8;
    }
    if (nb > 2u) {
        v |= (uint32_t)p[2] << 16;
    }
    if (nb > 3u) {
        v |= (uint32_t)p[3] << 24;
    }
    v >>= off;
    if (nb > 4u) {
        v |= (uint32_t)p[4] << (32u - off);
    }
    return n < 32 ? v & ((1u << n) - 1u) : v;
}

/* Store the n low bits (1..32) of v at bit `bit` of a packed stream, keeping the others. */
static void mico_bin_put(uint8_t *buf, size_t bit, uint32_t v, int32_t n)
{
    while (n > 0) {
        const uint32_t off = (uint32_t)(bit & 7u);
        const int32_t take = n < (int32_t)(8u - off) ? n : (int32_t)(8u - off);
        const uint32_t mask = ((1u << take) - 1u) << off;
        uint8_t *p = buf + (bit >> 3);
        *p = (uint8_t)((*p & ~mask) | ((v << off) & mask));
        v = take < 32 ? v >> take : 0;
        bit += (size_t)take;
        n -= take;
    }
}

/* Bits of input columns ixa .. ixa + span - 1 of the row starting at element `row` (span at
 * most MICO_BIN_SPAN): seg bit d = column ixa + d, zero outside [0, width). */
static void mico_bin_span(const void *in, size_t row, int32_t width, int32_t ixa, int32_t span,
                          uint32_t *seg)
{
    const int32_t lo = ixa > 0 ? ixa : 0, hi = ixa + span < width ? ixa + span : width;
    int32_t x;
    seg[0] = seg[1] = seg[2] = seg[3] = 0;
    for (x = lo; x < hi; x += 32) {
        const int32_t n = hi - x < 32 ? hi - x : 32, d = x - ixa;
        const uint32_t v = mico_bin_get((const uint8_t *)in, row + (size_t)x, n);
        seg[d >> 5] |= v << (d & 31);
        if (d & 31) {
            seg[(d >> 5) + 1] |= v >> (32 - (d & 31));
        }
    }
}

/* The geometry of a binary convolution as the patch builder sees it (a pointwise layer is
 * one row of in_h * in_w pixels). */
typedef struct {
    int32_t in_c, in_h, in_w, out_w, k_h, k_w, stride_h, stride_w, pad_h, pad_w, dil_h;
    int32_t taps;   /* in_c * k_h * k_w */
    int32_t words;  /* words of one pixel's patch: ceil(taps / 32) */
    int32_t masked; /* binary activations with padding: validity masks follow the patches */
    int32_t pointwise; /* 1x1, stride 1, no padding: tap c of a pixel is its bit of plane c */
} MicoBinGeom;

/* Transpose the 32 tap planes (bit j of planes[i]: pixel j at tap 32 * group + i) into word
 * `group` of every pixel's patch (dst = patch + group, nw words per pixel). */
static void mico_bin_flush(uint32_t *planes, uint32_t *dst, int32_t np, int32_t nw)
{
    int32_t j;
    mico_bin_transpose(planes);
    for (j = 0; j < np; j++, dst += nw) {
        *dst = planes[j];
    }
}

/* Stride 1: pixels pix0 .. pix0 + np - 1 (raster order, across output rows). For each input
 * row (c, ky) and each run of the block's pixels within one output row, the run's span of the
 * row is read once; shifted by kx it is the plane of tap (c, ky, kx) (one bit per pixel). 32
 * planes at a time are transposed into one word of every pixel's patch. */
static MICO_NOINLINE void mico_bin_planes(const MicoBinGeom *g, const void *in, int32_t pix0,
                                          int32_t np, int32_t raw, uint32_t *patch)
{
    const int32_t kw = g->k_w, nw = g->words;
    uint32_t *vpatch = patch + np * nw;
    uint32_t planes[32], vplanes[32], rp[32], rv[32], seg[4];
    int32_t sj0[MICO_BIN_PIX], siy[MICO_BIN_PIX], sixa[MICO_BIN_PIX], slen[MICO_BIN_PIX];
    int32_t nseg = 0, j, c, ky, kx, t = 0, r;
    if (g->pointwise && raw) { /* the planes themselves: runs of the input planes */
        for (c = 0; c < g->in_c; c++) {
            patch[c] = mico_bin_get((const uint8_t *)in,
                                    (size_t)c * (size_t)g->in_w + (size_t)pix0, np);
        }
        return;
    }
    if (g->pointwise) { /* the planes are runs of the input planes */
        for (c = 0; c < g->in_c; c++) {
            planes[c & 31] = mico_bin_get((const uint8_t *)in,
                                          (size_t)c * (size_t)g->in_w + (size_t)pix0, np);
            if ((c & 31) == 31) {
                mico_bin_flush(planes, patch + (c >> 5), np, nw);
            }
        }
        for (j = c & 31; (c & 31) && j < 32; j++) {
            planes[j] = 0;
        }
        if (c & 31) {
            mico_bin_flush(planes, patch + (c >> 5), np, nw);
        }
        return;
    }
    for (j = 0; j < np; nseg++) { /* runs of pixels within one output row */
        const int32_t oy = (pix0 + j) / g->out_w, ox = (pix0 + j) % g->out_w;
        slen[nseg] = np - j < g->out_w - ox ? np - j : g->out_w - ox;
        sj0[nseg] = j;
        siy[nseg] = oy * g->stride_h - g->pad_h;
        sixa[nseg] = ox - g->pad_w;
        j += slen[nseg];
    }
    for (c = 0; c < g->in_c; c++) {
        for (ky = 0; ky < g->k_h; ky++) {
            for (kx = 0; kx < kw; kx++) {
                rp[kx] = rv[kx] = 0;
            }
            for (r = 0; r < nseg; r++) {
                const int32_t iy = siy[r] + ky * g->dil_h, len = slen[r], j0 = sj0[r];
                const uint32_t lmask = len < 32 ? (1u << len) - 1u : 0xffffffffu;
                if (iy < 0 || iy >= g->in_h) {
                    continue; /* padding rows: zero bits, not valid */
                }
                mico_bin_span(in, ((size_t)c * (size_t)g->in_h + (size_t)iy) * (size_t)g->in_w,
                              g->in_w, sixa[r], len + kw - 1, seg);
                rp[0] |= (seg[0] & lmask) << j0;
                for (kx = 1; kx < kw; kx++) {
                    rp[kx] |= (((seg[0] >> kx) | (seg[1] << (32 - kx))) & lmask) << j0;
                }
                for (kx = 0; g->masked && (c == 0 || !raw) && kx < kw; kx++) { /* columns inside */
                    const int32_t x0 = sixa[r] + kx, lo = x0 < 0 ? -x0 : 0;
                    const int32_t hi = g->in_w - x0 < len ? g->in_w - x0 : len;
                    if (hi > lo) {
                        const uint32_t run = hi - lo < 32 ? (1u << (hi - lo)) - 1u : 0xffffffffu;
                        rv[kx] |= (run << lo) << j0;
                    }
                }
            }
            for (kx = 0; raw && kx < kw; kx++, t++) {
                patch[t] = rp[kx]; /* the planes themselves, then their validity */
                if (g->masked) { /* the same for every input channel */
                    patch[g->taps + t] = c == 0 ? rv[kx] : patch[g->taps + ky * kw + kx];
                }
            }
            for (kx = 0; !raw && kx < kw; kx++, t++) {
                planes[t & 31] = rp[kx];
                vplanes[t & 31] = rv[kx];
                if ((t & 31) == 31) {
                    mico_bin_flush(planes, patch + (t >> 5), np, nw);
                    if (g->masked) {
                        mico_bin_flush(vplanes, vpatch + (t >> 5), np, nw);
                    }
                }
            }
        }
    }
    if (!raw && (t & 31)) { /* the last, partial group: zero taps up to the word's end */
        for (j = t & 31; j < 32; j++) {
            planes[j] = vplanes[j] = 0;
        }
        mico_bin_flush(planes, patch + (t >> 5), np, nw);
        if (g->masked) {
            mico_bin_flush(vplanes, vpatch + (t >> 5), np, nw);
        }
    }
}

/* Any stride: pixels (oy, ox0 .. ox0 + np - 1) of one output row; the field of k_w taps of
 * each input row is cut out of the row's span for each pixel and appended to its patch. */
static MICO_NOINLINE void mico_bin_fields(const MicoBinGeom *g, const void *in, int32_t oy,
                                          int32_t ox0, int32_t np, uint32_t *patch)
{
    const int32_t kw = g->k_w, sw = g->stride_w, nw = g->words;
    const int32_t ixa = ox0 * sw - g->pad_w, span = (np - 1) * sw + kw;
    const uint32_t kmask = kw < 32 ? (1u << kw) - 1u : 0xffffffffu;
    uint32_t *vpatch = patch + np * nw;
    uint32_t seg[4], vseg[4];
    int32_t i, j, c, ky;
    for (i = 0; i < np * nw * (g->masked ? 2 : 1); i++) {
        patch[i] = 0;
    }
    if (g->masked) { /* the columns inside the input, for every row */
        vseg[0] = vseg[1] = vseg[2] = vseg[3] = 0;
        for (i = 0; i < span; i++) {
            if (ixa + i >= 0 && ixa + i < g->in_w) {
                vseg[i >> 5] |= 1u << (i & 31);
            }
        }
    }
    for (ky = 0; ky < g->k_h; ky++) {
        const int32_t iy = oy * g->stride_h - g->pad_h + ky * g->dil_h;
        if (iy < 0 || iy >= g->in_h) {
            continue; /* padding rows: zero bits, not valid */
        }
        for (c = 0; c < g->in_c; c++) {
            const int32_t pos = (c * g->k_h + ky) * kw, pw = pos >> 5, pb = pos & 31;
            const int32_t spill = pb + kw > 32;
            const uint32_t *src = seg;
            uint32_t *dst = patch + pw;
            int32_t pass;
            mico_bin_span(in, ((size_t)c * (size_t)g->in_h + (size_t)iy) * (size_t)g->in_w,
                          g->in_w, ixa, span, seg);
            for (pass = 0; pass < (g->masked ? 2 : 1); pass++) {
                for (j = 0; j < np; j++, dst += nw) {
                    const int32_t q = j * sw, rr = q & 31;
                    uint32_t f = src[q >> 5] >> rr;
                    if (rr + kw > 32) {
                        f |= src[(q >> 5) + 1] << (32 - rr);
                    }
                    f &= kmask;
                    dst[0] |= f << pb;
                    if (spill) {
                        dst[1] |= f >> (32 - pb);
                    }
                }
                src = vseg;
                dst = vpatch + pw;
            }
        }
    }
}

/* Carry-save adder over bit-sliced counts: h:l = a + b + c, bit by bit. */
#define MICO_CSA(h, l, a, b, c)                                                             \
    do {                                                                                    \
        const uint32_t u_ = (a) ^ (b), c_ = (c);                                            \
        (h) = ((a) & (b)) | (u_ & c_);                                                      \
        (l) = u_ ^ c_;                                                                      \
    } while (0)

/* Where the tap of plane x disagrees with bit k of wv (the weight bit): x ^ (all ones where
 * the weight bit is 1), two shifts and an XOR. */
#define MICO_XOR(x, wv, k) ((x) ^ (uint32_t)((int32_t)((wv) << (31 - (k))) >> 31))

/* Add one bit plane x to the bit-sliced counts (ones, twos, fours, cnt[] of weight 8 * 2^i). */
#define MICO_BIN_ADD1(x)                                                                    \
    do {                                                                                    \
        uint32_t carry_ = (x), n_;                                                          \
        n_ = ones & carry_;                                                                 \
        ones ^= carry_;                                                                     \
        carry_ = n_;                                                                        \
        n_ = twos & carry_;                                                                 \
        twos ^= carry_;                                                                     \
        carry_ = n_;                                                                        \
        n_ = fours & carry_;                                                                \
        fours ^= carry_;                                                                    \
        carry_ = n_;                                                                        \
        for (i = 0; carry_ != 0 && i < 8; i++) {                                            \
            n_ = cnt[i] & carry_;                                                           \
            cnt[i] ^= carry_;                                                               \
            carry_ = n_;                                                                    \
        }                                                                                   \
    } while (0)

/* Add eight bit planes: seven carry-save adders, the eights rippling into cnt. */
#define MICO_BIN_ADD8(x0, x1, x2, x3, x4, x5, x6, x7)                                       \
    do {                                                                                    \
        uint32_t twos_a, twos_b, fours_a, fours_b, eights;                                  \
        MICO_CSA(twos_a, ones, ones, x0, x1);                                               \
        MICO_CSA(twos_b, ones, ones, x2, x3);                                               \
        MICO_CSA(fours_a, twos, twos, twos_a, twos_b);                                      \
        MICO_CSA(twos_a, ones, ones, x4, x5);                                               \
        MICO_CSA(twos_b, ones, ones, x6, x7);                                               \
        MICO_CSA(fours_b, twos, twos, twos_a, twos_b);                                      \
        MICO_CSA(eights, fours, fours, fours_a, fours_b);                                   \
        for (i = 0; eights != 0 && i < 8; i++) {                                            \
            const uint32_t n_ = cnt[i] & eights;                                            \
            cnt[i] ^= eights;                                                               \
            eights = n_;                                                                    \
        }                                                                                   \
    } while (0)

/* Bit-sliced counting: bit j of the result is set when pixel j's count X is below `lim`
 * (1 <= lim <= 2 * taps, taps <= MICO_BIN_PATCH). Without masks (vplanes NULL), X counts the
 * taps t whose activation bit (bit j of planes[t]) differs from the weight bit; with validity
 * masks X = 2 D + u, D the valid taps that differ and u (bit-sliced) the taps outside the
 * input. The counts are kept as bits (ones, twos, fours, then cnt[i] of weight 8 * 2^i) for
 * 32 pixels at once, 8 planes through 7 carry-save adders; then X - lim is formed bit by bit
 * and its borrow says X < lim. */
MICO_BIN_INLINE uint32_t mico_bin_sliced(const uint32_t *planes, const uint32_t *vplanes,
                                         const uint32_t *wrow, int32_t taps, int32_t lim,
                                         const uint32_t *u)
{
    uint32_t cnt[8], ones = 0, twos = 0, fours = 0, borrow = 0;
    int32_t t, i, top = 0;
    while ((1 << top) <= (vplanes != NULL ? 2 * taps : taps)) {
        top++; /* bits of the largest count */
    }
    for (i = 0; i < 8; i++) {
        cnt[i] = 0;
    }
    if (vplanes == NULL) {
        for (t = 0; t + 8 <= taps; t += 8) {
            const uint32_t wv = wrow[t >> 5] >> (t & 31);
            const uint32_t *x = planes + t;
            MICO_BIN_ADD8(MICO_XOR(x[0], wv, 0), MICO_XOR(x[1], wv, 1),
                          MICO_XOR(x[2], wv, 2), MICO_XOR(x[3], wv, 3),
                          MICO_XOR(x[4], wv, 4), MICO_XOR(x[5], wv, 5),
                          MICO_XOR(x[6], wv, 6), MICO_XOR(x[7], wv, 7));
        }
        for (; t < taps; t++) { /* the last taps one at a time */
            MICO_BIN_ADD1(MICO_XOR(planes[t], wrow[t >> 5], t & 31));
        }
    } else { /* D = the valid taps that differ; X = 2 D + u */
        uint32_t carry = 0;
        for (t = 0; t + 8 <= taps; t += 8) {
            const uint32_t wv = wrow[t >> 5] >> (t & 31);
            const uint32_t *x = planes + t, *v = vplanes + t;
            MICO_BIN_ADD8(MICO_XOR(x[0], wv, 0) & v[0], MICO_XOR(x[1], wv, 1) & v[1],
                          MICO_XOR(x[2], wv, 2) & v[2], MICO_XOR(x[3], wv, 3) & v[3],
                          MICO_XOR(x[4], wv, 4) & v[4], MICO_XOR(x[5], wv, 5) & v[5],
                          MICO_XOR(x[6], wv, 6) & v[6], MICO_XOR(x[7], wv, 7) & v[7]);
        }
        for (; t < taps; t++) {
            MICO_BIN_ADD1(MICO_XOR(planes[t], wrow[t >> 5], t & 31) & vplanes[t]);
        }
        for (i = 0; i < top; i++) { /* bit i of 2 D + u, then of the borrow of X - lim */
            const uint32_t a = i == 0 ? 0u
                               : i == 1 ? ones
                               : i == 2 ? twos
                               : i == 3 ? fours
                                        : cnt[i - 4];
            const uint32_t h = a ^ u[i], c = h ^ carry;
            carry = (a & u[i]) | (carry & h);
            borrow = (lim >> i) & 1 ? ~c | borrow : ~c & borrow;
        }
        return borrow;
    }
    for (i = 0; i < top; i++) { /* borrow of X - lim, from the lowest bit up */
        const uint32_t c = i == 0 ? ones : i == 1 ? twos : i == 2 ? fours : cnt[i - 3];
        borrow = (lim >> i) & 1 ? ~c | borrow : ~c & borrow;
    }
    return borrow;
}

/* s = sum_t w_t x_t of the output channel with weight row wrow at pixel j (see the top). */
MICO_BIN_INLINE int32_t mico_bin_sum(const uint32_t *wrow, const uint32_t *patch, int32_t j,
                                     int32_t np, int32_t nw, int32_t base, int32_t taps,
                                     int32_t binary, int32_t masked, int32_t cpop)
{
    const uint32_t *x = patch + j * nw;
    if (!binary) {
        return 2 * mico_bin_count(wrow, x, x, nw, 0, cpop) - base;
    }
    if (!masked || base == taps) { /* every tap inside the input */
        return base - 2 * mico_bin_count(wrow, x, x, nw, 1, cpop);
    }
    return base - 2 * mico_bin_count(wrow, x, x + np * nw, nw, 2, cpop);
}

/* Every output channel over the block's np pixels (patches built): threshold bits, or
 * bias + s requantized; stored at element `pix0` of each channel's plane. */
MICO_BIN_INLINE void mico_bin_channels(const MicoConv2d *p, const MicoBinGeom *g,
                                       const int32_t *thr, const uint32_t *patch,
                                       const int32_t *base, int32_t np, size_t pix0, void *out,
                                       int32_t nw, int32_t cpop)
{
    const uint32_t *w = (const uint32_t *)(const void *)p->weight;
    const size_t npix = (size_t)p->out_h * (size_t)p->out_w;
    const int32_t binary = p->in_fmt.is_signed, taps = g->taps, masked = g->masked;
    int32_t vals[MICO_BIN_PIX];
    int32_t oc, j;
    for (oc = 0; oc < p->out_c; oc++) {
        const uint32_t *wrow = w + (size_t)oc * (size_t)nw;
        const size_t at = (size_t)oc * npix + pix0;
        if (thr != NULL) {
            const int32_t t = thr[oc];
            uint32_t bits = 0;
            for (j = 0; j < np; j++) {
                const int32_t s =
                    mico_bin_sum(wrow, patch, j, np, nw, base[j], taps, binary, masked, cpop);
                bits |= (uint32_t)(s >= t) << j;
            }
            mico_bin_put((uint8_t *)out, at, bits, np);
        } else {
            const MicoRq rq = mico_rq(&p->out, oc);
            const uint32_t bias = (uint32_t)p->bias[oc];
            for (j = 0; j < np; j++) { /* modulo 2^32: the final value fits int32 */
                vals[j] = (int32_t)(bias + (uint32_t)mico_bin_sum(wrow, patch, j, np, nw,
                                                                  base[j], taps, binary, masked,
                                                                  cpop));
            }
            mico_rq_run_fast(&rq, vals, np);
            mico_pack(out, at, vals, np, p->out.fmt);
        }
    }
}

/* The same for one-word patches, 1-bit outputs and no validity masks (mode 0: unsigned
 * activations, 1: binary), in one tight loop per channel. */
MICO_BIN_INLINE void mico_bin_channels1(const MicoConv2d *p, const int32_t *thr,
                                        const uint32_t *patch, const int32_t *base, int32_t np,
                                        size_t pix0, void *out, int32_t mode, int32_t cpop)
{
    const uint32_t *w = (const uint32_t *)(const void *)p->weight;
    const size_t npix = (size_t)p->out_h * (size_t)p->out_w;
    int32_t oc, j;
    for (oc = 0; oc < p->out_c; oc++) {
        const uint32_t wv = w[oc];
        const int32_t t = thr[oc];
        uint32_t bits = 0;
        for (j = 0; j < np; j++) {
            const uint32_t v = mode == 0 ? wv & patch[j] : wv ^ patch[j];
            const int32_t n = cpop ? MICO_POPCOUNT(v) : mico_bin_bytesum(mico_bin_bytecount(v));
            const int32_t sum = mode == 0 ? 2 * n - base[j] : base[j] - 2 * n;
            bits |= (uint32_t)(sum >= t) << j;
        }
        mico_bin_put((uint8_t *)out, (size_t)oc * npix + pix0, bits, np);
    }
}

/* Every output channel of a block by bit-sliced counts (mico_bin_sliced): the stored bit is
 * s >= thr, and s is a count of agreeing taps less a constant of the channel. */
static MICO_NOINLINE void mico_bin_sliced_channels(const MicoConv2d *p, const MicoBinGeom *g,
                                                   const int32_t *thr, const uint32_t *planes,
                                                   int32_t np, size_t pix0, void *out)
{
    const uint32_t *w = (const uint32_t *)(const void *)p->weight;
    const size_t npix = (size_t)p->out_h * (size_t)p->out_w;
    const int32_t taps = g->taps, nw = g->words;
    uint32_t u[12];
    int32_t oc, t, i;
    if (g->masked) { /* u: the taps outside the input, per pixel, bit-sliced (u[i]: bit i):
                      * in_c times those of one input channel (the first k_h * k_w planes) */
        uint32_t cnt[8], u0[12], ones = 0, twos = 0, fours = 0;
        int32_t k;
        for (i = 0; i < 8; i++) {
            cnt[i] = 0;
        }
        for (t = 0; t < g->k_h * g->k_w; t++) {
            MICO_BIN_ADD1(~planes[taps + t]);
        }
        u0[0] = ones;
        u0[1] = twos;
        u0[2] = fours;
        for (i = 3; i < 12; i++) {
            u0[i] = i - 3 < 8 ? cnt[i - 3] : 0u;
            u[i] = 0;
        }
        u[0] = u[1] = u[2] = 0;
        for (k = 0; k < 12; k++) { /* u += u0 << k for every bit k of in_c */
            uint32_t carry = 0;
            if (!((g->in_c >> k) & 1)) {
                continue;
            }
            for (i = k; i < 12; i++) {
                const uint32_t a = u[i], b = u0[i - k], h = a ^ b;
                u[i] = h ^ carry;
                carry = (a & b) | (carry & h);
            }
        }
    }
    for (oc = 0; oc < p->out_c; oc++) {
        const uint32_t *wrow = w + (size_t)oc * (size_t)nw;
        uint32_t bits;
        if (g->masked) { /* s = V - 2 D = taps - u - 2 D >= thr: X = 2 D + u < taps - thr + 1 */
            const int32_t lim = taps - thr[oc] + 1;
            bits = lim <= 0 ? 0u
                   : lim > 2 * taps ? 0xffffffffu
                                    : mico_bin_sliced(planes, planes + taps, wrow, taps, lim, u);
        } else {
            int32_t lim;
            if (p->in_fmt.is_signed) { /* s = taps - 2 D >= thr: D < (taps - thr) / 2 + 1 */
                const int32_t q = taps - thr[oc];
                lim = q < 0 ? 0 : q / 2 + 1;
            } else { /* s = (taps - D) - (taps with weight -1) >= thr */
                lim = taps - thr[oc] - (taps - mico_bin_ones(wrow, nw)) + 1;
            }
            bits = lim <= 0 ? 0u
                   : lim > taps ? 0xffffffffu
                                : mico_bin_sliced(planes, NULL, wrow, taps, lim, NULL);
        }
        mico_bin_put((uint8_t *)out, (size_t)oc * npix + pix0, bits, np);
    }
}

/* ------------------------------------------------------------------ binary depthwise 3x3
 * Depthwise 3x3 layers (groups = in_c = out_c, stride 1, padding 1) count their taps
 * bit-sliced, 32 pixels per word, over a channel's plane taken as one bit stream: with OW = W,
 * output pixel p = oy * W + ox reads input pixel p + (ky - 1) * W + (kx - 1), so tap (ky, kx)
 * of 32 outputs is one funnel shift of the input stream. The shift by kx - 1 and the column it
 * must not wrap into (kx = 0 reads column W - 1 of the row above when ox = 0, kx = 2 column 0
 * of the row below when ox = W - 1) are settled once per channel: three copies of the plane,
 * one per kx, with that column cleared and placed kx - 1 bits apart, so that the nine taps are
 * three word offsets and bit shifts (one per ky) into the three copies; rows above and below
 * the plane are zero words (the reference pads with 0).
 *
 * A tap agrees when the activation bit equals the weight bit (x ^ m_t, m_t all ones for a
 * weight -1); three levels of carry-save adders count a pixel's nine agreements into a
 * bit-sliced 4-bit A.
 *   unsigned {0, 1}:  s = sum w a = A - N0, N0 the channel's weights -1 (the padded taps
 *                     count too: 0 is a code, and agrees with a weight -1 as it should);
 *   binary {-1, +1}:  a padded tap contributes 0, neither agreement nor disagreement: A' counts
 *                     the agreements of the taps inside the input (each tap ANDed with its
 *                     validity: the first / last row and column of the output), U (bit-sliced,
 *                     per pixel) the taps outside, and s = 2 A' - (9 - U), so 2 A' + U (5 bits)
 *                     >= thr + 9 is one compare per channel.
 * 1-bit outputs compare with the channel's limit (a constant in each case of a switch, so
 * that a compare costs an instruction per bit); wider outputs extract each pixel's count and
 * requantize bias + s. */
#define MICO_BDW_WORDS 32 /* output words of a plane: 1024 pixels */
#define MICO_BDW_NB 48    /* words of one copy of the plane (with the zero rows around it) */

/* Whether a layer takes the bit-sliced depthwise path (mico.codegen.binary_plan mirrors it). */
static int32_t mico_bdw_takes(const MicoConv2d *p)
{
    const int32_t w = p->in_w, h = p->in_h, s = p->stride_w;
    return p->groups == p->in_c && p->groups == p->out_c && p->k_h == 3 && p->k_w == 3 &&
           p->stride_h == s && (s == 1 || (s == 2 && (w & 1) == 0)) && p->dil_h == 1 &&
           p->dil_w == 1 && p->pad_w == 1 && p->pad_h == 1 && p->out_w == (w - 1) / s + 1 &&
           p->out_h == (h - 1) / s + 1 && w <= 64 && h * w <= 32 * MICO_BDW_WORDS &&
           p->in_fmt.bits == 1 && p->w_bits == 1 && p->in_fmt.zero == 0;
}

/* Bit j: A_j >= lim, A (0..9) bit-sliced as a0..a3. */
MICO_BIN_INLINE uint32_t mico_bdw_ge(uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                     int32_t lim)
{
    switch (lim) {
    case 0:
        return 0xffffffffu;
    case 1:
        return a0 | a1 | a2 | a3;
    case 2:
        return a1 | a2 | a3;
    case 3:
        return a3 | a2 | (a1 & a0);
    case 4:
        return a3 | a2;
    case 5:
        return a3 | (a2 & (a1 | a0));
    case 6:
        return a3 | (a2 & a1);
    case 7:
        return a3 | (a2 & a1 & a0);
    case 8:
        return a3;
    case 9:
        return a3 & a0; /* 8 and 9 are the only counts with a3 */
    default:
        return 0;
    }
}

/* Y >= L for a constant L, Y bit-sliced as y0..y4: Y's low bits against L's from the lowest
 * up (a bit of L set: y_i and the lower compare; clear: y_i or it). */
#define MICO_BDW_STEP(r, y, l) ((l) ? (y) & (r) : (y) | (r))
#define MICO_BDW_GE5(L)                                                                     \
    MICO_BDW_STEP(MICO_BDW_STEP(MICO_BDW_STEP(MICO_BDW_STEP(MICO_BDW_STEP(0xffffffffu, y0,  \
                                                                          (L) & 1),         \
                                                            y1, ((L) >> 1) & 1),            \
                                              y2, ((L) >> 2) & 1),                          \
                                y3, ((L) >> 3) & 1),                                        \
                  y4, ((L) >> 4) & 1)

/* Bit j: Y_j >= lim (0..19), Y (0..18) bit-sliced as y0..y4. */
MICO_BIN_INLINE uint32_t mico_bdw_ge5(uint32_t y0, uint32_t y1, uint32_t y2, uint32_t y3,
                                      uint32_t y4, int32_t lim)
{
#define MICO_BDW_CASE(L)                                                                    \
    case L:                                                                                 \
        return MICO_BDW_GE5(L)
    switch (lim) {
        MICO_BDW_CASE(1);
        MICO_BDW_CASE(2);
        MICO_BDW_CASE(3);
        MICO_BDW_CASE(4);
        MICO_BDW_CASE(5);
        MICO_BDW_CASE(6);
        MICO_BDW_CASE(7);
        MICO_BDW_CASE(8);
        MICO_BDW_CASE(9);
        MICO_BDW_CASE(10);
        MICO_BDW_CASE(11);
        MICO_BDW_CASE(12);
        MICO_BDW_CASE(13);
        MICO_BDW_CASE(14);
        MICO_BDW_CASE(15);
        MICO_BDW_CASE(16);
        MICO_BDW_CASE(17);
        MICO_BDW_CASE(18);
    default:
        return lim <= 0 ? 0xffffffffu : 0u;
    }
#undef MICO_BDW_CASE
}

/* 32 bits of a packed stream from bit `bit`, when the 5 bytes from bit / 8 lie in the buffer. */
MICO_BIN_INLINE uint32_t mico_bdw_get32(const uint8_t *buf, size_t bit)
{
    const uint8_t *q = buf + (bit >> 3);
    const uint32_t off = (uint32_t)(bit & 7u);
    uint32_t v = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 |
                 (uint32_t)q[3] << 24;
    if (off) {
        v = (v >> off) | ((uint32_t)q[4] << (32u - off));
    }
    return v;
}

/* Where the nine taps of output word 0 start in the three copies of a plane. */
typedef struct {
    const uint32_t *bufs; /* copies kx = 0, 1, 2, MICO_BDW_NB words apart */
    int32_t q[3], r[3];   /* per ky: word and bit (1..31) of output pixel 0's tap */
    const uint32_t *vm;   /* binary activations, per output word: the validity of the first
                           * row, last row, first column, last column; U's bits 0..3 */
    int32_t nwo;          /* output words */
} MicoBdwGeom;

/* The nine taps x0..x8 of output word i (agreements: bit x ^ m, m all ones for a weight -1),
 * counted. mode 0: A into res[4 i + b] (bit b); 1: the bits A >= lim into res[i]; 2: A' (taps
 * inside the input) into res[4 i + b]; 3: the bits 2 A' + U >= lim into res[i]. vm: the word's
 * validity masks and U (modes 2 and 3). */
MICO_BIN_INLINE void mico_bdw_count(uint32_t x0, uint32_t x1, uint32_t x2, uint32_t x3,
                                    uint32_t x4, uint32_t x5, uint32_t x6, uint32_t x7,
                                    uint32_t x8, const uint32_t *vm, int32_t lim, uint32_t *res,
                                    int32_t i, int32_t mode)
{
    uint32_t s1, c1, s2, c2, s3, c3, a0, a1, a2, a3, c4, t1, c5;
    if (mode >= 2) { /* a padded tap neither agrees nor disagrees */
        const uint32_t top = vm[0], bottom = vm[1], left = vm[2], right = vm[3];
        x0 &= top & left;
        x1 &= top;
        x2 &= top & right;
        x3 &= left;
        x5 &= right;
        x6 &= bottom & left;
        x7 &= bottom;
        x8 &= bottom & right;
    }
    MICO_CSA(c1, s1, x0, x1, x2); /* three full adders of three taps each */
    MICO_CSA(c2, s2, x3, x4, x5);
    MICO_CSA(c3, s3, x6, x7, x8);
    MICO_CSA(c4, a0, s1, s2, s3); /* ones; c4 of weight 2 */
    MICO_CSA(c5, t1, c1, c2, c3); /* twos; c5 of weight 4 */
    a1 = t1 ^ c4;
    c4 &= t1; /* of weight 4 */
    a2 = c5 ^ c4;
    a3 = c5 & c4;
    if (mode == 0 || mode == 2) {
        res[4 * i] = a0;
        res[4 * i + 1] = a1;
        res[4 * i + 2] = a2;
        res[4 * i + 3] = a3;
    } else if (mode == 1) {
        res[i] = mico_bdw_ge(a0, a1, a2, a3, lim);
    } else { /* Y = 2 A' + U: U's bit 0, then A' + U / 2 */
        const uint32_t u1 = vm[5], u2 = vm[6], u3 = vm[7];
        uint32_t y1, y2, y3, y4, c, h;
        y1 = a0 ^ u1;
        c = a0 & u1;
        h = a1 ^ u2;
        y2 = h ^ c;
        c = (a1 & u2) | (h & c);
        h = a2 ^ u3;
        y3 = h ^ c;
        c = (a2 & u3) | (h & c);
        y4 = a3 ^ c;
        res[i] = mico_bdw_ge5(vm[4], y1, y2, y3, y4, lim);
    }
}

/* The nine taps of every output word of a channel (weight bits wv: bit 3 ky + kx, 1 = +1),
 * counted as mico_bdw_count's mode says. */
MICO_BIN_INLINE void mico_bdw_run(const MicoBdwGeom *g, uint32_t wv, int32_t lim,
                                  uint32_t *res, int32_t mode)
{
    const uint32_t *p0 = g->bufs + g->q[0], *p1 = g->bufs + g->q[1], *p2 = g->bufs + g->q[2];
    const uint32_t r0 = (uint32_t)g->r[0], r1 = (uint32_t)g->r[1], r2 = (uint32_t)g->r[2];
    const uint32_t l0 = 32u - r0, l1 = 32u - r1, l2 = 32u - r2;
    const uint32_t *vm = g->vm;
    /* all ones where the weight is -1: the tap agrees on x ^ m (written out: a loop would
     * store them and load them back before the loop) */
    const uint32_t m[9] = {((wv >> 0) & 1u) - 1u, ((wv >> 1) & 1u) - 1u, ((wv >> 2) & 1u) - 1u,
                           ((wv >> 3) & 1u) - 1u, ((wv >> 4) & 1u) - 1u, ((wv >> 5) & 1u) - 1u,
                           ((wv >> 6) & 1u) - 1u, ((wv >> 7) & 1u) - 1u, ((wv >> 8) & 1u) - 1u};
    int32_t i;
    for (i = 0; i < g->nwo; i++, p0++, p1++, p2++) {
#define MICO_BDW_TAP(p, k, r, l, t)                                                         \
    ((((p)[(k) * MICO_BDW_NB] >> (r)) | ((p)[(k) * MICO_BDW_NB + 1] << (l))) ^ m[t])
        mico_bdw_count(MICO_BDW_TAP(p0, 0, r0, l0, 0), MICO_BDW_TAP(p0, 1, r0, l0, 1),
                       MICO_BDW_TAP(p0, 2, r0, l0, 2), MICO_BDW_TAP(p1, 0, r1, l1, 3),
                       MICO_BDW_TAP(p1, 1, r1, l1, 4), MICO_BDW_TAP(p1, 2, r1, l1, 5),
                       MICO_BDW_TAP(p2, 0, r2, l2, 6), MICO_BDW_TAP(p2, 1, r2, l2, 7),
                       MICO_BDW_TAP(p2, 2, r2, l2, 8), vm, lim, res, i, mode);
#undef MICO_BDW_TAP
        vm += mode >= 2 ? 8 : 0;
    }
}

static MICO_NOINLINE void mico_bdw_counts(const MicoBdwGeom *g, uint32_t wv, uint32_t *res)
{
    mico_bdw_run(g, wv, 0, res, 0);
}

static MICO_NOINLINE void mico_bdw_bits(const MicoBdwGeom *g, uint32_t wv, int32_t lim,
                                        uint32_t *res)
{
    mico_bdw_run(g, wv, lim, res, 1);
}

static MICO_NOINLINE void mico_bdw_counts_valid(const MicoBdwGeom *g, uint32_t wv,
                                                uint32_t *res)
{
    mico_bdw_run(g, wv, 0, res, 2);
}

static MICO_NOINLINE void mico_bdw_bits_valid(const MicoBdwGeom *g, uint32_t wv, int32_t lim,
                                              uint32_t *res)
{
    mico_bdw_run(g, wv, lim, res, 3);
}

/* Sequential writer of a packed bit stream from bit 0 of out (whole bytes as they fill). */
typedef struct {
    uint8_t *p;
    uint32_t acc;
    int32_t fill;
} MicoBdwOut;

MICO_BIN_INLINE void mico_bdw_emit(MicoBdwOut *o, uint32_t v, int32_t n)
{
    int32_t total;
    if (n < 32) {
        v &= (1u << n) - 1u;
    }
    o->acc |= v << o->fill;
    total = o->fill + n;
    if (total >= 32) {
        o->p[0] = (uint8_t)o->acc;
        o->p[1] = (uint8_t)(o->acc >> 8);
        o->p[2] = (uint8_t)(o->acc >> 16);
        o->p[3] = (uint8_t)(o->acc >> 24);
        o->p += 4;
        o->acc = o->fill ? v >> (32 - o->fill) : 0u;
        total -= 32;
    }
    o->fill = total;
}

/* The bits left in the writer, the rest of their last byte kept. */
static void mico_bdw_flush(MicoBdwOut *o)
{
    int32_t b;
    for (b = 0; 8 * b < o->fill; b++) {
        const int32_t n = o->fill - 8 * b < 8 ? o->fill - 8 * b : 8;
        const uint32_t keep = 0xffu & ~((1u << n) - 1u);
        o->p[b] = (uint8_t)((o->p[b] & keep) | ((o->acc >> (8 * b)) & ~keep & 0xffu));
    }
}

/* Word i of the nwi words of a plane of hw bits from bit `at` (the last one zero-filled);
 * more: whether 4 more bytes of the tensor follow the plane (then the last word is read whole
 * and masked). */
MICO_BIN_INLINE uint32_t mico_bdw_word(const uint8_t *in, size_t at, int32_t i, int32_t nwi,
                                       int32_t hw, int32_t more)
{
    const int32_t n = hw - 32 * i;
    if (i + 1 < nwi || (more && n == 32)) {
        return mico_bdw_get32(in, at + 32u * (size_t)i);
    }
    if (more) {
        return mico_bdw_get32(in, at + 32u * (size_t)i) & ((1u << n) - 1u);
    }
    return mico_bin_get(in, at + 32u * (size_t)i, n);
}

/* Bits 0, 2, 4, .. 30 of x in bits 0 .. 15 (the others cleared). */
MICO_BIN_INLINE uint32_t mico_bdw_even(uint32_t x)
{
    x &= 0x55555555u;
    x = (x | (x >> 1)) & 0x33333333u;
    x = (x | (x >> 2)) & 0x0f0f0f0fu;
    x = (x | (x >> 4)) & 0x00ff00ffu;
    return (x | (x >> 8)) & 0x0000ffffu;
}

/* ---- stride 2 (even W): nine tap planes in the output's own order
 * Output (oy, ox) reads input rows 2 oy - 1 .. 2 oy + 1 at columns 2 ox - 1 .. 2 ox + 1. A row
 * split into its even and odd bits, E and O (W / 2 bits each, O one column to the left: S =
 * O << 1, its first column 0), gives a row of taps kx = 1, 2, 0; so every tap (ky, kx) is a
 * plane of OH rows of W / 2 bits laid out as the output: even input row 2 k is row k of the ky =
 * 1 taps, odd row 2 k + 1 row k of the ky = 2 taps and row k + 1 of the ky = 0 taps. The
 * planes start at the weight's agreement mask m (rows never written are padding, code 0) and
 * each row is XORed in, so a tap word is already x ^ m: counting a word of 32 outputs is nine
 * aligned loads and the adders, only the rows and columns the outputs need (the rows the
 * stride skips are neither split nor counted). */
/* words of one tap plane: OH (W / 2) <= (H W + W) / 4 = 272 bits; rows of their own words
 * (mico_bin_dw2r): OH <= H / 2 + 1 <= 29 */
#define MICO_BDW_S2 32
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__) &&                              \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define MICO_BDW_LE 1
#else
#define MICO_BDW_LE 0
#endif

/* The words of the nine tap planes (t = 3 ky + kx, MICO_BDW_S2 words apart), counted. */
MICO_BIN_INLINE void mico_bdw_run2(const uint32_t *tp, int32_t nwo, const uint32_t *vm,
                                   int32_t lim, uint32_t *res, int32_t mode)
{
    int32_t i;
    for (i = 0; i < nwo; i++, tp++) {
        mico_bdw_count(tp[0], tp[MICO_BDW_S2], tp[2 * MICO_BDW_S2], tp[3 * MICO_BDW_S2],
                       tp[4 * MICO_BDW_S2], tp[5 * MICO_BDW_S2], tp[6 * MICO_BDW_S2],
                       tp[7 * MICO_BDW_S2], tp[8 * MICO_BDW_S2], vm, lim, res, i, mode);
        if (mode >= 2) { /* (vm is NULL in the other modes) */
            vm += 8;
        }
    }
}

static MICO_NOINLINE void mico_bdw2_counts(const uint32_t *tp, int32_t nwo, uint32_t *res)
{
    mico_bdw_run2(tp, nwo, NULL, 0, res, 0);
}

static MICO_NOINLINE void mico_bdw2_bits(const uint32_t *tp, int32_t nwo, int32_t lim,
                                         uint32_t *res)
{
    mico_bdw_run2(tp, nwo, NULL, lim, res, 1);
}

static MICO_NOINLINE void mico_bdw2_counts_valid(const uint32_t *tp, int32_t nwo,
                                                 const uint32_t *vm, uint32_t *res)
{
    mico_bdw_run2(tp, nwo, vm, 0, res, 2);
}

static MICO_NOINLINE void mico_bdw2_bits_valid(const uint32_t *tp, int32_t nwo,
                                               const uint32_t *vm, int32_t lim, uint32_t *res)
{
    mico_bdw_run2(tp, nwo, vm, lim, res, 3);
}

/* Input row (w <= 32 bits) from bit `bit` of the packed stream (nbytes long); aligned: rows of
 * 32 bits at aligned addresses, read as words. */
MICO_BIN_INLINE uint32_t mico_bdw_row(const uint8_t *src, size_t bit, int32_t w, size_t nbytes,
                                      int aligned)
{
    if (aligned) {
        return ((const uint32_t *)(const void *)src)[bit >> 5];
    }
    if ((bit >> 3) + 5u <= nbytes) {
        return mico_bdw_get32(src, bit) & (w < 32 ? (1u << w) - 1u : 0xffffffffu);
    }
    return mico_bin_get(src, bit, w);
}

/* A channel's limit on the count for 1-bit outputs (s >= thr): with unsigned inputs
 * A - N0 >= thr (N0 the weights -1), with binary ones 2 A' + U - 9 >= thr; clamped to the
 * counts' range. */
MICO_BIN_INLINE int32_t mico_bdw_limit(int32_t thr, uint32_t wv, int32_t binary)
{
    int32_t lim;
    if (!binary) {
        lim = thr + 9 - mico_bin_bytesum(mico_bin_bytecount(wv));
        return lim < 0 ? 0 : lim > 10 ? 10 : lim;
    }
    lim = thr + 9;
    return lim < 0 ? 0 : lim > 19 ? 19 : lim;
}

/* Wider outputs: n outputs of channel c from the count planes a[0..3] (and, for binary
 * inputs, the planes u[0..3] of U) at bits 0, step, 2 step, ...; each bias + s requantized
 * and packed from output index at. */
static MICO_NOINLINE void mico_bdw_store(const MicoConv2d *p, const MicoRq *rq, int32_t c,
                                         const uint32_t *a, const uint32_t *u, int32_t step,
                                         int32_t n, size_t at, void *out)
{
    const int32_t binary = p->in_fmt.is_signed;
    const uint32_t bias = (uint32_t)p->bias[c];
    const uint32_t wv = ((const uint32_t *)(const void *)p->weight)[c] & 0x1ffu;
    const int32_t n0 = 9 - mico_bin_bytesum(mico_bin_bytecount(wv)); /* weights -1 */
    int32_t vals[32], j;
    for (j = 0; j < n; j++) {
        const int32_t b = step * j;
        const int32_t k = (int32_t)(((a[0] >> b) & 1u) | ((a[1] >> b) & 1u) << 1 |
                                    ((a[2] >> b) & 1u) << 2 | ((a[3] >> b) & 1u) << 3);
        int32_t sum = k - n0;
        if (binary) { /* 2 A' - (9 - U) */
            sum = 2 * k - 9 +
                  (int32_t)(((u[0] >> b) & 1u) | ((u[1] >> b) & 1u) << 1 |
                            ((u[2] >> b) & 1u) << 2 | ((u[3] >> b) & 1u) << 3);
        }
        vals[j] = (int32_t)(bias + (uint32_t)sum);
    }
    mico_rq_run_fast(rq, vals, n);
    mico_pack(out, at, vals, n, p->out.fmt);
}

/* Stride 2 on rows of 18 to 32 pixels: output row k in word k of the tap planes, pixel ox at
 * bit 2 ox, so that no row is split: input row v gives the taps kx = 0, 1, 2 of all its outputs
 * as v << 1, v and v >> 1 (bit 0 of v << 1 is the padding left of column 0); the odd bits of
 * the counts are dropped when the outputs are stored. Otherwise as mico_bin_dw2. */
static MICO_NOINLINE void mico_bin_dw2r(const MicoConv2d *p, const int32_t *thr,
                                        const void *in, void *out)
{
    const int32_t h = p->in_h, w = p->in_w, hw = h * w, ow = w / 2, oh = p->out_h;
    const int32_t binary = p->in_fmt.is_signed;
    const uint32_t *wt = (const uint32_t *)(const void *)p->weight;
    const uint8_t *src = (const uint8_t *)in;
    const size_t nbytes = ((size_t)p->in_c * (size_t)hw + 7u) >> 3;
    const int aligned = MICO_BDW_LE && ((uintptr_t)src & 3u) == 0 && w == 32;
    uint32_t tp[9 * MICO_BDW_S2], res[4 * MICO_BDW_S2], vm[8 * MICO_BDW_S2], m[9], *q;
    int32_t k, j, c, r, t;
    MicoBdwOut wr;
    if (binary) { /* per output row: the validity of the taps, U at the even bits */
        for (k = 0; k < oh; k++) {
            uint32_t *v = vm + 8 * k;
            const int32_t nr = (k == 0) + (2 * k + 1 >= h);
            v[0] = k == 0 ? 0u : 0xffffffffu;
            v[1] = 2 * k + 1 >= h ? 0u : 0xffffffffu;
            v[2] = ~1u; /* kx = 0 of column 0 */
            v[3] = 0xffffffffu;
            v[4] = v[5] = v[6] = v[7] = 0;
            for (j = 0; j < ow; j++) {
                const int32_t nc = j == 0, u = 3 * (nr + nc) - nr * nc;
                v[4] |= (uint32_t)(u & 1) << (2 * j);
                v[5] |= (uint32_t)((u >> 1) & 1) << (2 * j);
                v[6] |= (uint32_t)((u >> 2) & 1) << (2 * j);
                v[7] |= (uint32_t)((u >> 3) & 1) << (2 * j);
            }
        }
    }
    wr.p = (uint8_t *)out;
    wr.acc = 0;
    wr.fill = 0;
    for (c = 0; c < p->out_c; c++) {
        const uint32_t wv = wt[c] & 0x1ffu;
        size_t bit = (size_t)c * (size_t)hw;
        for (t = 0; t < 9; t++) {
            m[t] = ((wv >> t) & 1u) - 1u;
        }
        tp[0] = m[0]; /* the padding row above output row 0 */
        tp[MICO_BDW_S2] = m[1];
        tp[2 * MICO_BDW_S2] = m[2];
        tp[6 * MICO_BDW_S2 + oh - 1] = m[6]; /* and below the last one (H odd: overwritten */
        tp[7 * MICO_BDW_S2 + oh - 1] = m[7]; /* otherwise) */
        tp[8 * MICO_BDW_S2 + oh - 1] = m[8];
        for (r = 0, q = tp; r < h; r += 2, q++) { /* rows 2 k and 2 k + 1, q at word k */
            uint32_t v = mico_bdw_row(src, bit, w, nbytes, aligned);
            bit += (size_t)w;
            q[3 * MICO_BDW_S2] = (v << 1) ^ m[3]; /* ky = 1 of output row k */
            q[4 * MICO_BDW_S2] = v ^ m[4];
            q[5 * MICO_BDW_S2] = (v >> 1) ^ m[5];
            if (r + 1 == h) {
                break;
            }
            v = mico_bdw_row(src, bit, w, nbytes, aligned);
            bit += (size_t)w;
            q[6 * MICO_BDW_S2] = (v << 1) ^ m[6]; /* ky = 2 of row k */
            q[7 * MICO_BDW_S2] = v ^ m[7];
            q[8 * MICO_BDW_S2] = (v >> 1) ^ m[8];
            if (r + 2 < h) { /* ky = 0 of row k + 1 */
                q[1] = (v << 1) ^ m[0];
                q[MICO_BDW_S2 + 1] = v ^ m[1];
                q[2 * MICO_BDW_S2 + 1] = (v >> 1) ^ m[2];
            }
        }
        if (thr != NULL) { /* 1-bit outputs: s >= thr as a limit on the count */
            const int32_t lim = mico_bdw_limit(thr[c], wv, binary);
            if (!binary) {
                mico_bdw2_bits(tp, oh, lim, res);
            } else {
                mico_bdw2_bits_valid(tp, oh, vm, lim, res);
            }
            for (k = 0; k < oh; k++) { /* each row's even bits */
                mico_bdw_emit(&wr, mico_bdw_even(res[k]), ow);
            }
            continue;
        }
        if (binary) { /* wider outputs: each pixel's count, bias + s requantized */
            mico_bdw2_counts_valid(tp, oh, vm, res);
        } else {
            mico_bdw2_counts(tp, oh, res);
        }
        {
            const MicoRq rq = mico_rq(&p->out, c);
            for (k = 0; k < oh; k++) { /* the even bits of each row */
                mico_bdw_store(p, &rq, c, res + 4 * k, vm + 8 * k + 4, 2, ow,
                               (size_t)c * (size_t)(oh * ow) + (size_t)(k * ow), out);
            }
        }
    }
    if (thr != NULL) {
        mico_bdw_flush(&wr);
    }
}

/* The layer at stride 2 (mico_bdw_takes holds); as mico_bin_dw. */
static MICO_NOINLINE void mico_bin_dw2(const MicoConv2d *p, const int32_t *thr, const void *in,
                                       void *out)
{
    const int32_t h = p->in_h, w = p->in_w, hw = h * w, ow = w / 2, oh = p->out_h;
    const int32_t ohw = oh * ow, nwo = (ohw + 31) / 32, binary = p->in_fmt.is_signed;
    const uint32_t *wt = (const uint32_t *)(const void *)p->weight;
    const uint8_t *src = (const uint8_t *)in;
    const size_t nbytes = ((size_t)p->in_c * (size_t)hw + 7u) >> 3;
    const uint32_t rowmask = ow < 32 ? (1u << ow) - 1u : 0xffffffffu;
    /* rows of 32 bits read as aligned words (the stream's bytes in order: little endian) */
    const int aligned = MICO_BDW_LE && ((uintptr_t)src & 3u) == 0;
    uint32_t tp[9 * MICO_BDW_S2], res[4 * MICO_BDW_S2], vm[8 * MICO_BDW_S2];
    int32_t i, j, c, r, t;
    MicoBdwOut wr;
    if (w > 16 && w <= 32) {
        mico_bin_dw2r(p, thr, in, out);
        return;
    }
    if (binary) { /* per output word: the validity of the taps, U (the taps outside) */
        for (i = 0; i < nwo; i++) {
            uint32_t *v = vm + 8 * i;
            v[0] = v[1] = v[2] = v[3] = 0xffffffffu; /* kx = 2 is never outside (even W) */
            v[4] = v[5] = v[6] = v[7] = 0;
            for (j = 0; j < 32 && 32 * i + j < ohw; j++) {
                const int32_t oy = (32 * i + j) / ow, ox = (32 * i + j) % ow;
                const int32_t nr = (oy == 0) + (2 * oy + 1 >= h), nc = ox == 0;
                const int32_t u = 3 * (nr + nc) - nr * nc;
                v[0] &= ~((uint32_t)(oy == 0) << j);
                v[1] &= ~((uint32_t)(2 * oy + 1 >= h) << j);
                v[2] &= ~((uint32_t)nc << j);
                v[4] |= (uint32_t)(u & 1) << j;
                v[5] |= (uint32_t)((u >> 1) & 1) << j;
                v[6] |= (uint32_t)((u >> 2) & 1) << j;
                v[7] |= (uint32_t)((u >> 3) & 1) << j;
            }
        }
    }
    wr.p = (uint8_t *)out;
    wr.acc = 0;
    wr.fill = 0;
    for (c = 0; c < p->out_c; c++) {
        const uint32_t wv = wt[c] & 0x1ffu;
        size_t bit = (size_t)c * (size_t)hw;
        for (t = 3; t < 9; t++) { /* the ky = 1, 2 planes at their agreement masks */
            const uint32_t m = ((wv >> t) & 1u) - 1u;
            for (i = 0; i < nwo; i++) {
                tp[t * MICO_BDW_S2 + i] = m;
            }
        }
        for (r = 0; r < h; r++, bit += (size_t)w) { /* each input row into its tap rows */
            uint32_t v, e, o;
            uint32_t *pl = tp + ((r & 1) ? 6 : 3) * MICO_BDW_S2; /* ky = 2 (odd) or 1 (even) */
            int32_t at, q, b;
            if (aligned && w == 32) { /* a row is a word */
                v = ((const uint32_t *)(const void *)src)[bit >> 5];
            } else if ((bit >> 3) + 5u <= nbytes) {
                v = mico_bdw_get32(src, bit);
            } else {
                v = mico_bin_get(src, bit, w < 32 ? w : 32);
            }
            e = mico_bdw_even(v);
            o = mico_bdw_even(v >> 1);
            if (w > 32) {
                const uint32_t hi = mico_bin_get(src, bit + 32u, w - 32);
                e |= mico_bdw_even(hi) << 16;
                o |= mico_bdw_even(hi >> 1) << 16;
            } else if (w < 32) {
                e &= rowmask;
                o &= rowmask;
            }
            v = (o << 1) & rowmask; /* kx = 0: the odd column to the left */
            at = (r >> 1) * ow; /* row r >> 1 of the planes */
            q = at >> 5;
            b = at & 31;
            pl[q] ^= v << b;
            pl[MICO_BDW_S2 + q] ^= e << b;
            pl[2 * MICO_BDW_S2 + q] ^= o << b;
            if (b + ow > 32) {
                pl[q + 1] ^= v >> (32 - b);
                pl[MICO_BDW_S2 + q + 1] ^= e >> (32 - b);
                pl[2 * MICO_BDW_S2 + q + 1] ^= o >> (32 - b);
            }
        }
        for (t = 0; t < 3; t++) { /* ky = 0: the ky = 2 planes one row down, padding above */
            const uint32_t *src2 = tp + (t + 6) * MICO_BDW_S2;
            uint32_t *dst = tp + t * MICO_BDW_S2;
            const uint32_t m6 = ((wv >> (t + 6)) & 1u) - 1u, d = m6 ^ (((wv >> t) & 1u) - 1u);
            uint32_t prev = m6;
            for (i = 0; i < nwo; i++) {
                const uint32_t cur = src2[i];
                dst[i] = (ow < 32 ? (cur << ow) | (prev >> (32 - ow)) : prev) ^ d;
                prev = cur;
            }
        }
        if (thr != NULL) { /* 1-bit outputs: s >= thr as a limit on the count */
            const int32_t lim = mico_bdw_limit(thr[c], wv, binary);
            if (!binary) {
                mico_bdw2_bits(tp, nwo, lim, res);
            } else {
                mico_bdw2_bits_valid(tp, nwo, vm, lim, res);
            }
            for (i = 0; i < nwo; i++) {
                mico_bdw_emit(&wr, res[i], ohw - 32 * i < 32 ? ohw - 32 * i : 32);
            }
            continue;
        }
        if (binary) { /* wider outputs: each pixel's count, bias + s requantized */
            mico_bdw2_counts_valid(tp, nwo, vm, res);
        } else {
            mico_bdw2_counts(tp, nwo, res);
        }
        {
            const MicoRq rq = mico_rq(&p->out, c);
            int32_t pix;
            for (pix = 0; pix < ohw; pix += 32) {
                mico_bdw_store(p, &rq, c, res + 4 * (pix >> 5), vm + 8 * (pix >> 5) + 4, 1,
                               ohw - pix < 32 ? ohw - pix : 32,
                               (size_t)c * (size_t)ohw + (size_t)pix, out);
            }
        }
    }
    if (thr != NULL) {
        mico_bdw_flush(&wr);
    }
}

/* The layer (mico_bdw_takes holds). thr: 1-bit outputs' thresholds on s, or NULL. Stride 2:
 * mico_bin_dw2. */
static MICO_NOINLINE void mico_bin_dw(const MicoConv2d *p, const int32_t *thr, const void *in,
                                      void *out)
{
    const int32_t h = p->in_h, hw = h * p->in_w;
    const int32_t w = p->in_w, gw = h * w; /* the grid: the plane, h rows of w */
    const int32_t nw = (gw + 31) / 32, nwi = (hw + 31) / 32, ohw = p->out_h * p->out_w;
    const int32_t binary = p->in_fmt.is_signed, z = (w + 31) / 32 + 1;
    const uint32_t *wt = (const uint32_t *)(const void *)p->weight;
    uint32_t bufs[3 * MICO_BDW_NB], first[MICO_BDW_WORDS], last[MICO_BDW_WORDS];
    uint32_t res[4 * MICO_BDW_WORDS], vm[8 * MICO_BDW_WORDS];
    int32_t o, ky, i, j, c, y, sh[3];
    uint32_t sh0, sh1, sh2;
    MicoBdwGeom g;
    MicoBdwOut wr;
    if (p->stride_w == 2) {
        mico_bin_dw2(p, thr, in, out);
        return;
    }
    for (i = 0; i < 3 * MICO_BDW_NB; i++) {
        bufs[i] = 0;
    }
    for (i = 0; i < nw; i++) {
        first[i] = last[i] = 0;
    }
    for (y = 0; y < h; y++) { /* the grid's columns 0 and w - 1 */
        first[(y * w) >> 5] |= 1u << ((y * w) & 31);
        last[(y * w + w - 1) >> 5] |= 1u << ((y * w + w - 1) & 31);
    }
    /* the grid's bit 0 sits at bit 32 z + o of the kx = 1 copy: o keeps every tap row's shift
     * within 1..31 (one funnel form) and the other copies' offsets o + 1, o - 1 within 1..31 */
    for (o = 2; o < 30; o++) {
        if (((o - w) & 31) != 0 && ((o + w) & 31) != 0) {
            break;
        }
    }
    for (ky = 0; ky < 3; ky++) {
        const int32_t d = 32 * z + o + (ky - 1) * w;
        g.q[ky] = d >> 5;
        g.r[ky] = d & 31;
        sh[ky] = o + 1 - ky; /* copy kx: the grid from bit 32 z + o + 1 - kx */
    }
    sh0 = (uint32_t)sh[0];
    sh1 = (uint32_t)sh[1];
    sh2 = (uint32_t)sh[2];
    g.bufs = bufs;
    g.vm = vm;
    g.nwo = nw;
    if (binary) { /* per grid word: the validity of the border rows and columns, U */
        int32_t ox = 0, oy = 0;
        for (i = 0; i < nw; i++) {
            uint32_t *v = vm + 8 * i;
            v[0] = v[1] = 0xffffffffu;
            v[2] = ~first[i];
            v[3] = ~last[i];
            v[4] = v[5] = v[6] = v[7] = 0;
            for (j = 0; j < 32 && 32 * i + j < gw; j++) {
                const int32_t nr = (oy == 0) + (oy == h - 1);
                const int32_t nc = (ox == 0) + (ox == w - 1);
                const int32_t u = 3 * (nr + nc) - nr * nc;
                v[0] &= ~((uint32_t)(oy == 0) << j);
                v[1] &= ~((uint32_t)(oy == h - 1) << j);
                v[4] |= (uint32_t)(u & 1) << j;
                v[5] |= (uint32_t)((u >> 1) & 1) << j;
                v[6] |= (uint32_t)((u >> 2) & 1) << j;
                v[7] |= (uint32_t)((u >> 3) & 1) << j;
                if (++ox == w) {
                    ox = 0;
                    oy++;
                }
            }
        }
    }
    wr.p = (uint8_t *)out;
    wr.acc = 0;
    wr.fill = 0;
    for (c = 0; c < p->out_c; c++) {
        const size_t at = (size_t)c * (size_t)hw;
        const uint32_t wv = wt[c] & 0x1ffu;
        /* another plane of at least 40 bits follows: the last word's 5 bytes lie inside */
        const int32_t more = c + 1 < p->out_c && hw >= 40;
        uint32_t prev0 = 0, prev1 = 0, prev2 = 0;
        uint32_t *b = bufs + z;
#define MICO_BDW_COPIES(V0, V1, V2)                                                         \
    do { /* word i of the three copies, each at its offset */                               \
        b[0] = (prev0 >> (32 - sh0)) | ((V0) << sh0);                                       \
        b[MICO_BDW_NB] = (prev1 >> (32 - sh1)) | ((V1) << sh1);                             \
        b[2 * MICO_BDW_NB] = (prev2 >> (32 - sh2)) | ((V2) << sh2);                         \
        prev0 = (V0);                                                                       \
        prev1 = (V1);                                                                       \
        prev2 = (V2);                                                                       \
    } while (0)
        for (i = 0; i < nw; i++, b++) { /* the plane itself, twice with a column cleared */
            const uint32_t v = mico_bdw_word((const uint8_t *)in, at, i, nwi, hw, more);
            MICO_BDW_COPIES(v & ~last[i], v, v & ~first[i]);
        }
#undef MICO_BDW_COPIES
        b[0] = prev0 >> (32 - sh0);
        b[MICO_BDW_NB] = prev1 >> (32 - sh1);
        b[2 * MICO_BDW_NB] = prev2 >> (32 - sh2);
        if (thr != NULL) { /* 1-bit outputs: s >= thr as a limit on the count */
            const int32_t lim = mico_bdw_limit(thr[c], wv, binary);
            if (!binary) {
                mico_bdw_bits(&g, wv, lim, res);
            } else {
                mico_bdw_bits_valid(&g, wv, lim, res);
            }
            for (i = 0; i < nw; i++) {
                mico_bdw_emit(&wr, res[i], gw - 32 * i < 32 ? gw - 32 * i : 32);
            }
            continue;
        }
        if (binary) { /* wider outputs: each pixel's count, bias + s requantized */
            mico_bdw_counts_valid(&g, wv, res);
        } else {
            mico_bdw_counts(&g, wv, res);
        }
        {
            const MicoRq rq = mico_rq(&p->out, c);
            int32_t pix;
            for (pix = 0; pix < ohw; pix += 32) { /* output pixel pix + j at bit j */
                mico_bdw_store(p, &rq, c, res + 4 * (pix >> 5), vm + 8 * (pix >> 5) + 4, 1,
                               ohw - pix < 32 ? ohw - pix : 32,
                               (size_t)c * (size_t)ohw + (size_t)pix, out);
            }
        }
    }
    if (thr != NULL) {
        mico_bdw_flush(&wr);
    }
}

/* The convolution (groups 1, unit column dilation, 1-bit inputs, k_w <= 32; anything else
 * goes to mico_qconv2d_tiled, which the code generator never asks for). */
MICO_BIN_INLINE void mico_conv_bin(const MicoConv2d *p, const int32_t *thr, const void *in,
                                   void *out, int32_t cpop)
{
    const int32_t binary = p->in_fmt.is_signed;
    const int32_t npix = p->out_h * p->out_w;
    const int32_t pointwise = p->k_h == 1 && p->k_w == 1 && p->stride_h == 1 &&
                              p->stride_w == 1 && p->pad_h == 0 && p->pad_w == 0;
    MicoBinGeom g;
    uint32_t patch[MICO_BIN_PATCH];
    int32_t base[MICO_BIN_PIX];
    int32_t pix_block, pix0, j, sliced;
    g.in_c = p->in_c;
    g.in_h = pointwise ? 1 : p->in_h;
    g.in_w = pointwise ? p->in_h * p->in_w : p->in_w;
    g.out_w = pointwise ? npix : p->out_w;
    g.k_h = p->k_h;
    g.k_w = p->k_w;
    g.stride_h = p->stride_h;
    g.stride_w = p->stride_w;
    g.pad_h = p->pad_h;
    g.pad_w = p->pad_w;
    g.dil_h = p->dil_h;
    g.taps = p->in_c * p->k_h * p->k_w;
    g.words = (g.taps + 31) / 32;
    g.masked = binary && (p->pad_h > 0 || p->pad_w > 0);
    g.pointwise = pointwise;
    pix_block = MICO_BIN_PATCH / (g.words * (g.masked ? 2 : 1));
    pix_block = pix_block < MICO_BIN_PIX ? pix_block : MICO_BIN_PIX;
    if (g.stride_w != 1) { /* the span of a row of pixels fits MICO_BIN_SPAN bits */
        const int32_t most = (MICO_BIN_SPAN - g.k_w) / g.stride_w + 1;
        pix_block = pix_block < most ? pix_block : most;
    }
    if (p->groups != 1 || p->dil_w != 1 || p->in_fmt.bits != 1 || p->w_bits != 1 ||
        g.k_w > 32 || pix_block < 1) {
        mico_qconv2d_tiled(p, in, out);
        return;
    }
    sliced = thr != NULL && g.stride_w == 1 && g.taps * (g.masked ? 2 : 1) <= MICO_BIN_PATCH;
    pix_block = sliced ? MICO_BIN_PIX : pix_block;
    for (pix0 = 0; pix0 < npix;) {
        const int32_t ox = pix0 % g.out_w;
        int32_t np = npix - pix0 < pix_block ? npix - pix0 : pix_block;
        if (sliced) { /* 1-bit outputs by bit-sliced counts over the tap planes */
            mico_bin_planes(&g, in, pix0, np, 1, patch);
            mico_bin_sliced_channels(p, &g, thr, patch, np, (size_t)pix0, out);
            pix0 += np;
            continue;
        }
        if (g.stride_w != 1) { /* one output row at a time */
            np = np < g.out_w - ox ? np : g.out_w - ox;
            mico_bin_fields(&g, in, pix0 / g.out_w, ox, np, patch);
        } else {
            mico_bin_planes(&g, in, pix0, np, 0, patch);
        }
        for (j = 0; j < np; j++) { /* ones of the patch, or the taps inside the input */
            base[j] = !binary   ? mico_bin_ones(patch + j * g.words, g.words)
                      : g.masked ? mico_bin_ones(patch + (np + j) * g.words, g.words)
                                 : g.taps;
        }
        if (g.words == 1 && thr != NULL && !g.masked) { /* one word per pixel */
            if (binary) {
                mico_bin_channels1(p, thr, patch, base, np, (size_t)pix0, out, 1, cpop);
            } else {
                mico_bin_channels1(p, thr, patch, base, np, (size_t)pix0, out, 0, cpop);
            }
        } else {
            mico_bin_channels(p, &g, thr, patch, base, np, (size_t)pix0, out, g.words, cpop);
        }
        pix0 += np;
    }
}

/* The linear layer: each row of inputs as whole words, then every output feature. */
MICO_BIN_INLINE void mico_linear_bin(const MicoLinear *p, const int32_t *thr, const void *in,
                                     void *out, int32_t cpop)
{
    const uint32_t *w = (const uint32_t *)(const void *)p->weight;
    const int32_t binary = p->in_fmt.is_signed, k = p->in_features, nw = (k + 31) / 32;
    uint32_t x[MICO_BIN_PATCH];
    int32_t vals[MICO_BIN_PIX];
    int32_t r, i, oc0, base;
    if (p->in_fmt.bits != 1 || p->w_bits != 1 || nw > MICO_BIN_PATCH) {
        mico_qlinear(p, in, out);
        return;
    }
    for (r = 0; r < p->rows; r++) {
        const size_t row = (size_t)r * (size_t)k;
        for (i = 0; i < nw; i++) {
            const int32_t n = k - 32 * i < 32 ? k - 32 * i : 32;
            x[i] = mico_bin_get((const uint8_t *)in, row + (size_t)(32 * i), n);
        }
        base = binary ? k : mico_bin_ones(x, nw);
        for (oc0 = 0; oc0 < p->out_features; oc0 += MICO_BIN_PIX) {
            const int32_t n = p->out_features - oc0 < MICO_BIN_PIX ? p->out_features - oc0
                                                                  : MICO_BIN_PIX;
            const size_t at = (size_t)r * (size_t)p->out_features + (size_t)oc0;
            uint32_t bits = 0;
            int32_t j;
            for (j = 0; j < n; j++) {
                const uint32_t *wrow = w + (size_t)(oc0 + j) * (size_t)nw;
                const int32_t s = binary ? base - 2 * mico_bin_count(wrow, x, x, nw, 1, cpop)
                                         : 2 * mico_bin_count(wrow, x, x, nw, 0, cpop) - base;
                if (thr != NULL) {
                    bits |= (uint32_t)(s >= thr[oc0 + j]) << j;
                } else {
                    const MicoRq rq = mico_rq(&p->out, oc0 + j);
                    vals[j] = (int32_t)((uint32_t)p->bias[oc0 + j] + (uint32_t)s);
                    mico_rq_run_fast(&rq, vals + j, 1);
                }
            }
            if (thr != NULL) {
                mico_bin_put((uint8_t *)out, at, bits, n);
            } else {
                mico_pack(out, at, vals, n, p->out.fmt);
            }
        }
    }
}

static MICO_NOINLINE void mico_conv_bin_swar(const MicoConv2d *p, const int32_t *thr,
                                             const void *in, void *out)
{
    mico_conv_bin(p, thr, in, out, 0);
}

static MICO_NOINLINE void mico_conv_bin_cpop(const MicoConv2d *p, const int32_t *thr,
                                             const void *in, void *out)
{
    mico_conv_bin(p, thr, in, out, 1);
}

/* Depthwise 3x3 layers take the bit-sliced path (no popcount); the dispatch sits outside
 * mico_conv_bin so that its patch buffer and mico_bin_dw's copies are never on the stack at
 * once. */
void mico_qconv2d_bin_swar(const MicoConv2d *p, const int32_t *thr, const void *in, void *out)
{
    if (mico_bdw_takes(p)) {
        mico_bin_dw(p, thr, in, out);
    } else {
        mico_conv_bin_swar(p, thr, in, out);
    }
}

void mico_qconv2d_bin_cpop(const MicoConv2d *p, const int32_t *thr, const void *in, void *out)
{
    if (mico_bdw_takes(p)) {
        mico_bin_dw(p, thr, in, out);
    } else {
        mico_conv_bin_cpop(p, thr, in, out);
    }
}

void mico_qlinear_bin_swar(const MicoLinear *p, const int32_t *thr, const void *in, void *out)
{
    mico_linear_bin(p, thr, in, out, 0);
}

void mico_qlinear_bin_cpop(const MicoLinear *p, const int32_t *thr, const void *in, void *out)
{
    mico_linear_bin(p, thr, in, out, 1);
}
