/* Convolutions whose weights are signs (mico_qconv2d_addsub2 / _addsub1): ternary 2-bit codes
 * (-1, 0, +1) or binary 1-bit codes (-1, +1), on activation codes of 1 to 8 bits. A product by
 * a sign is the code, its negation or nothing, so the layer is sums of activation codes: no
 * multiplication, and a zero weight costs a test and no addition.
 *
 * A tile is MICO_AS_PX output pixels held as MICO_AS_W words of two 16-bit lanes (two pixels an
 * addition). For each chunk of kernel rows, every tap gets a pointer to its tile's words: for
 * a layer of an even output width and k_w > 1, words built once per kernel row from the input
 * row span the tile reads (phase arrays, mico_as_rows: the taps of a row share them); else the
 * im2col patch of the chunk (mico_conv_patch, raster order). A channel adds or subtracts each
 * tap's words into MICO_AS_W accumulators held in registers, reading its weights straight from
 * their packed bytes, four taps (2 bits) or eight (1 bit) a byte, a byte of four zero weights
 * skipped at once. The lanes are exact: a lane sums at most `cap` codes (cap from the codes'
 * largest magnitude, so that the sum stays within int16), and the low lane's borrow or carry
 * into the high one is taken back when the chunk's sums go into the tile (low = the low half
 * sign-extended, high = (word - low) / 2^16). Chunks hold at most MICO_AS_TAPS taps;
 * MICO_AS_OCT channels' sums wait in the tile.
 *
 * Words are built as the two codes' values modulo 2^32 (an int16 pair in memory is not, for a
 * negative low half, nor on a big-endian target). Bit-identical to mico_qconv2d (exact int32
 * sums, the same requantization). Working memory (the patch or phase arrays, the taps'
 * pointers, the tile: 4.4 KB at most) comes from MicoConv2d.scratch, planned in the arena per
 * layer (mico_qconv2d_addsub_scratch; mico.codegen.scratch.addsub_bytes), or without it from
 * the stack (mico_as_stack). Layers it does not take (other widths, int32 inputs, a 2-bit
 * code -2, a kernel row longer than a chunk) go element by element
 * (mico_qconv2d_elementwise). */
#include "mico_nn.h"

#define MICO_AS_PX MICO_TILE_PX    /* output pixels of a tile (16) */
#define MICO_AS_W (MICO_AS_PX / 2) /* words of a tap: two pixels each */
#define MICO_AS_TAPS 64            /* taps of a chunk at most */
#define MICO_AS_OCT 32             /* channels whose sums wait in the tile */

/* Whether n bytes of 2-bit codes hold the code -2 (a field 2: high bit set, low bit clear). */
static int mico_as_has_m2(const uint8_t *w, size_t n)
{
    uint32_t any = 0;
    size_t i;
    for (i = 0; i < n; i++) {
        any |= ((uint32_t)w[i] >> 1) & ~(uint32_t)w[i];
    }
    return (any & 0x55u) != 0u;
}

#define MICO_AS_OP(OP, X)                                                                   \
    (a0 OP(X)[0], a1 OP(X)[1], a2 OP(X)[2], a3 OP(X)[3], a4 OP(X)[4], a5 OP(X)[5],           \
     a6 OP(X)[6], a7 OP(X)[7])

/* Tap J of a byte of 2-bit codes: field 1 is +1, 3 is -1, 0 is nothing (2, -2, is not
 * taken here). */
#define MICO_AS_T2(J)                                                                       \
    do {                                                                                    \
        const uint32_t c_ = (byte >> (2 * (J))) & 3u;                                      \
        if (c_ == 1u) {                                                                     \
            MICO_AS_OP(+=, tp[J]);                                           \
        } else if (c_ != 0u) {                                                              \
            MICO_AS_OP(-=, tp[J]);                                           \
        }                                                                                   \
    } while (0)

/* Tap J of binary codes: bit J of `byte` 1 is +1, 0 is -1. */
#define MICO_AS_T1(J)                                                                       \
    do {                                                                                    \
        if ((byte >> (J)) & 1u) {                                                           \
            MICO_AS_OP(+=, tp[J]);                                           \
        } else {                                                                            \
            MICO_AS_OP(-=, tp[J]);                                           \
        }                                                                                   \
    } while (0)

/* The lanes' sums into the tile row t (first: t = bias + sums): the low lane's sum is its half
 * sign-extended, the high lane's (word - low) / 2^16, both within int16. */
static void mico_as_flush(const uint32_t *a, int32_t *t, int first, int32_t bias)
{
    int32_t j;
    for (j = 0; j < MICO_AS_W; j++) {
        const int32_t lo = (int32_t)((a[j] & 0xffffu) ^ 0x8000u) - 0x8000;
        const int32_t hi = (int32_t)((((a[j] - (uint32_t)lo) >> 16) ^ 0x8000u)) - 0x8000;
        const uint32_t b0 = first ? (uint32_t)bias : (uint32_t)t[2 * j];
        const uint32_t b1 = first ? (uint32_t)bias : (uint32_t)t[2 * j + 1];
        t[2 * j] = (int32_t)(b0 + (uint32_t)lo);
        t[2 * j + 1] = (int32_t)(b1 + (uint32_t)hi);
    }
}

#define MICO_AS_BEGIN                                                                       \
    uint32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;                 \
    uint32_t byte;                                                                          \
    int32_t k = 0
#define MICO_AS_END                                                                         \
    do {                                                                                    \
        const uint32_t a[MICO_AS_W] = {a0, a1, a2, a3, a4, a5, a6, a7};                     \
        mico_as_flush(a, t, first, bias);                                                   \
    } while (0)

/* One channel of ternary weights over a chunk of kc taps: codes from the first field `lead`
 * of the byte at wp, tap k's MICO_AS_W words at tp[k]; the sums into the tile row t. */
static MICO_NOINLINE void mico_as_ch2(const uint8_t *wp, uint32_t lead, int32_t kc,
                                      const MicoPairWord *const *tp, int32_t *t, int first,
                                      int32_t bias)
{
    MICO_AS_BEGIN;
    if (lead != 0u) { /* the rest of the first byte */
        for (byte = (uint32_t)*wp++ >> (2u * lead); lead < 4u && k < kc;
             lead++, k++, tp++, byte >>= 2) {
            MICO_AS_T2(0);
        }
    }
    for (; k + 4 <= kc; k += 4, tp += 4) {
        byte = *wp++;
        if (byte != 0u) { /* four zero weights: nothing to add */
            MICO_AS_T2(0);
            MICO_AS_T2(1);
            MICO_AS_T2(2);
            MICO_AS_T2(3);
        }
    }
    for (byte = k < kc ? *wp : 0u; k < kc; k++, tp++, byte >>= 2) {
        MICO_AS_T2(0);
    }
    MICO_AS_END;
}

/* The same for binary weights (8 codes a byte, four at a time). */
static MICO_NOINLINE void mico_as_ch1(const uint8_t *wp, uint32_t lead, int32_t kc,
                                      const MicoPairWord *const *tp, int32_t *t, int first,
                                      int32_t bias)
{
    MICO_AS_BEGIN;
    uint32_t half;
    if (lead != 0u) { /* the rest of the first byte */
        for (byte = (uint32_t)*wp++ >> lead; lead < 8u && k < kc;
             lead++, k++, tp++, byte >>= 1) {
            MICO_AS_T1(0);
        }
    }
    for (; k + 8 <= kc; k += 8) {
        byte = *wp++;
        for (half = 0; half < 2u; half++, byte >>= 4, tp += 4) {
            MICO_AS_T1(0);
            MICO_AS_T1(1);
            MICO_AS_T1(2);
            MICO_AS_T1(3);
        }
    }
    for (byte = k < kc ? *wp : 0u; k < kc; k++, tp++, byte >>= 1) {
        MICO_AS_T1(0);
    }
    MICO_AS_END;
}

/* The patch's int16 pairs rewritten as words of the two values modulo 2^32 (n pairs). */
static void mico_as_words(int16_t *h, int32_t n)
{
    int32_t i;
    for (i = 0; i < n; i++) {
        const uint32_t lo = (uint32_t)(int32_t)h[2 * i], hi = (uint32_t)(int32_t)h[2 * i + 1];
        ((MicoPairWord *)(void *)h)[i] = lo + (hi << 16);
    }
}

/* n codes of the input row starting at element `row` from column ix0, columns outside the row
 * as 0 (mico_unpack_padded; 8-bit codes read here, a byte a code). */
static void mico_as_span(const MicoConv2d *p, const void *in, size_t row, int32_t ix0, int32_t n,
                         int16_t *dst)
{
    const int32_t lead = ix0 < 0 ? (-ix0 < n ? -ix0 : n) : 0;
    const int32_t end = p->in_w - ix0 < n ? p->in_w - ix0 : n; /* columns before the row's end */
    const uint32_t off = p->in_fmt.is_signed ? 0x80u : 0u; /* signed: (b ^ 0x80) - 0x80 */
    const int32_t zero = p->in_fmt.is_signed ? 0x80 : p->in_fmt.zero;
    const uint8_t *src = (const uint8_t *)in + row + ix0;
    int32_t i;
    if (p->in_fmt.bits != 8) {
        mico_unpack_padded(in, row, p->in_w, ix0, n, 0, p->in_fmt, dst);
        return;
    }
    for (i = 0; i < lead; i++) {
        dst[i] = 0;
        MICO_LOOP_BARRIER();
    }
    for (; i < end; i++) {
        dst[i] = (int16_t)((int32_t)((uint32_t)src[i] ^ off) - zero);
    }
    for (i = i > lead ? i : lead; i < n; i++) {
        dst[i] = 0;
        MICO_LOOP_BARRIER();
    }
}

/* Words of input rows, for tiles within one output row (rowwise: an even output width): for
 * kernel row r of the chunk, the input span the tile reads is unpacked once (zeros outside the
 * input) and laid out as 2 sw phase arrays of `per` words, phase f holding the pairs of the
 * span's columns (2 sw m + f, 2 sw m + f + sw); tap kx, at column offset c = kx dw, reads the
 * tile's pixel pairs as the consecutive words of phase c mod 2 sw from word c / (2 sw) on:
 * tp[(r - r0) k_w + kx] points there (mico_as_taps, once per layer: the same words for every
 * chunk and tile). So each input code is unpacked once per kernel row and tile, and no tap is
 * copied. Words past the tile's pixels hold real or zero columns (their
 * sums are not stored). */
#define MICO_AS_SPAN 96 /* int16 codes of an input span */

/* Words a phase array holds: the tile's MICO_AS_W pairs from the farthest tap's start. */
static int32_t mico_as_per(const MicoConv2d *p)
{
    return MICO_AS_W + (p->k_w - 1) * p->dil_w / (2 * p->stride_w) + 1;
}

static MICO_NOINLINE void mico_as_rows(const MicoConv2d *p, const void *in, int32_t ic0,
                                       int32_t r0, int32_t r1, int32_t oy, int32_t ox,
                                       uint32_t *ph)
{
    const int32_t sw = p->stride_w, nph = 2 * sw, per = mico_as_per(p);
    int16_t span[MICO_AS_SPAN];
    int32_t i, q, r;
    for (r = r0; r < r1; r++, ph += nph * per) {
        const int32_t ic = ic0 + r / p->k_h;
        const int32_t iy = oy * p->stride_h - p->pad_h + r % p->k_h * p->dil_h;
        if (iy < 0 || iy >= p->in_h) { /* a padding row */
            for (i = 0; i < nph * per; i++) {
                ph[i] = 0u;
                MICO_LOOP_BARRIER();
            }
        } else {
            mico_as_span(p, in, ((size_t)ic * (size_t)p->in_h + (size_t)iy) * (size_t)p->in_w,
                         ox * sw - p->pad_w, per * nph + sw, span);
            for (i = 0; i < nph; i++) { /* phase i: span columns i, i + 2 sw, ... */
                uint32_t *const w = ph + i * per;
                const int16_t *x = span + i;
                for (q = 0; q < per; q++, x += nph) {
                    w[q] = (uint32_t)(int32_t)x[0] + ((uint32_t)(int32_t)x[sw] << 16);
                }
            }
        }
    }
}

/* The pointers to the words of a chunk's taps in buf (rpc kernel rows of k_w taps): the
 * rowwise phase arrays (mico_as_rows: tap kx of row r at its phase's word c / (2 sw), c =
 * kx dw) or the patch's rows of MICO_AS_W words. The same for every chunk and tile. */
static void mico_as_taps(const MicoConv2d *p, int32_t rpc, int rowwise, uint32_t *buf,
                         const MicoPairWord **tp)
{
    const int32_t kw = p->k_w, nph = 2 * p->stride_w, per = mico_as_per(p);
    int32_t r, kx;
    for (r = 0; r < rpc; r++) {
        for (kx = 0; kx < kw; kx++) {
            const int32_t c = kx * p->dil_w;
            tp[r * kw + kx] = (const MicoPairWord *)(rowwise ? buf + r * nph * per +
                                                                   c % nph * per + c / nph
                                                             : buf + (r * kw + kx) * MICO_AS_W);
        }
    }
}

/* A channel's sums over a chunk (mico_as_ch2, mico_as_ch1). */
typedef void (*MicoAsChannel)(const uint8_t *, uint32_t, int32_t, const MicoPairWord *const *,
                              int32_t *, int, int32_t);

/* Whether tiles take their words from input rows (mico_as_rows): taps that share input
 * columns (k_w > 1; a 1x1 patch is a copy of the input runs), pairs within output rows, the
 * span of a tile fits. */
static int mico_as_rowwise(const MicoConv2d *p)
{
    return p->k_w > 1 && p->out_w % 2 == 0 &&
           mico_as_per(p) * 2 * p->stride_w + p->stride_w <= MICO_AS_SPAN;
}

/* Kernel rows of a chunk (balanced over the chunks), or 0 for a kernel row longer than a
 * chunk (then element by element): at most MICO_AS_TAPS taps and what a lane sums (weights
 * of magnitude 1), and for rowwise tiles their phase arrays within MICO_AS_TAPS x MICO_AS_W
 * words. */
static int32_t mico_as_rpc(const MicoConv2d *p, int rowwise)
{
    const int32_t rows = p->in_c / p->groups * p->k_h, nph = 2 * p->stride_w;
    const int32_t cap = 32767 / mico_code_maxabs(p->in_fmt); /* taps a lane sums */
    int32_t rpc = (cap < MICO_AS_TAPS ? cap : MICO_AS_TAPS) / p->k_w, chunks;
    if (rowwise && rpc * nph * mico_as_per(p) > MICO_AS_TAPS * MICO_AS_W) {
        rpc = MICO_AS_TAPS * MICO_AS_W / (nph * mico_as_per(p)); /* phase arrays that fit */
    }
    if (rpc == 0) {
        return 0;
    }
    chunks = (rows + rpc - 1) / rpc;
    return (rows + chunks - 1) / chunks;
}

/* Bytes of the parts of the working memory of a layer of chunks of rpc kernel rows (each a
 * multiple of 8 once rounded; mico.codegen.scratch.addsub_bytes computes the same): the
 * patch (a chunk's taps x MICO_AS_PX codes) or the phase arrays (a chunk's rows x 2 stride_w
 * arrays of mico_as_per words), the taps' pointers, the tile (a block's channels x MICO_AS_PX
 * sums). */
static size_t mico_as_buf_bytes(const MicoConv2d *p, int32_t rpc, int rowwise)
{
    return rowwise ? (size_t)rpc * (size_t)(2 * p->stride_w * mico_as_per(p)) * 4u
                   : (size_t)rpc * (size_t)p->k_w * MICO_AS_PX * 2u;
}
#define MICO_AS_TP_BYTES(P, RPC) ((size_t)(RPC) * (size_t)(P)->k_w * sizeof(const MicoPairWord *))
#define MICO_AS_TILE_BYTES(P)                                                               \
    ((size_t)((P)->out_c / (P)->groups < MICO_AS_OCT ? (P)->out_c / (P)->groups : MICO_AS_OCT) * \
     MICO_AS_PX * 4u)
#define MICO_UP8(N) (((N) + 7u) & ~(size_t)7u)

static size_t mico_as_bytes(const MicoConv2d *p, int32_t rpc, int rowwise)
{
    return MICO_UP8(mico_as_buf_bytes(p, rpc, rowwise)) + MICO_UP8(MICO_AS_TP_BYTES(p, rpc)) +
           MICO_UP8(MICO_AS_TILE_BYTES(p));
}

size_t mico_qconv2d_addsub_scratch(const MicoConv2d *p)
{
    const int rowwise = mico_as_rowwise(p);
    int32_t rpc;
    if ((p->w_bits != 1 && p->w_bits != 2) || p->in_fmt.bits < 1 || p->in_fmt.bits > 8) {
        return 0u;
    }
    rpc = mico_as_rpc(p, rowwise);
    return rpc > 0 ? mico_as_bytes(p, rpc, rowwise) : 0u;
}

/* The layer over tiles of pixels and chunks of kernel rows (ch: the channel loop of its weights'
 * width wb), each entry point passing its own so that a program links only its widths'; its
 * working memory in ws (wsb bytes, mico_as_bytes). Tiles are MICO_AS_PX pixels of one output
 * row (rowwise: words from input rows, mico_as_rows) or, for an odd output width, of the
 * raster order (words from the im2col patch). 1 done, 0 not taken (a kernel row longer than
 * a chunk: the entry hands it on), -1 taken but ws NULL or short. */
static MICO_NOINLINE int mico_as_layer(const MicoConv2d *p, const void *in, void *out,
                                       MicoAsChannel ch, int32_t wb, uint8_t *ws, size_t wsb)
{
    const int32_t ipg = p->in_c / p->groups, opg = p->out_c / p->groups;
    const int32_t kw = p->k_w, rows = ipg * p->k_h, k_all = rows * kw;
    const int32_t npix = p->out_h * p->out_w, per = 8 / wb;
    const int convert = !MICO_PAIR_LE || p->in_fmt.is_signed || p->in_fmt.zero != 0;
    const int rowwise = mico_as_rowwise(p);
    const int32_t rpc = mico_as_rpc(p, rowwise);
    /* the patch, or the phase arrays of a chunk's kernel rows */
    union {
        int16_t *h;
        uint32_t *w;
    } buf;
    const MicoPairWord **tp;
    int32_t *tile;
    int32_t g, oc0, oc, pix0, r0;
    if (rpc == 0) { /* a kernel row longer than a chunk */
        return 0;
    }
    if (ws == NULL || mico_as_bytes(p, rpc, rowwise) > wsb) {
        return -1;
    }
    tp = (const MicoPairWord **)(void *)ws; /* (mico_carve's order of mico_as_bytes' parts) */
    buf.w = (uint32_t *)(void *)(ws + MICO_UP8(MICO_AS_TP_BYTES(p, rpc)));
    tile = (int32_t *)(void *)((uint8_t *)buf.w + MICO_UP8(mico_as_buf_bytes(p, rpc, rowwise)));
    mico_as_taps(p, rpc, rowwise, buf.w, tp);
    for (g = 0; g < p->groups; g++) {
        for (oc0 = g * opg; oc0 < (g + 1) * opg; oc0 += MICO_AS_OCT) {
            const int32_t oc1 = oc0 + MICO_AS_OCT < (g + 1) * opg ? oc0 + MICO_AS_OCT
                                                                    : (g + 1) * opg;
            for (pix0 = 0; pix0 < npix;) {
                const int32_t oy = pix0 / p->out_w, ox = pix0 % p->out_w;
                int32_t np = npix - pix0 < MICO_AS_PX ? npix - pix0 : MICO_AS_PX;
                np = rowwise && p->out_w - ox < np ? p->out_w - ox : np;
                for (r0 = 0; r0 < rows; r0 += rpc) {
                    const int32_t r1 = r0 + rpc < rows ? r0 + rpc : rows, kc = (r1 - r0) * kw;
                    if (rowwise) {
                        mico_as_rows(p, in, g * ipg, r0, r1, oy, ox, buf.w);
                    } else {
                        mico_conv_patch(p, in, g * ipg, r0, r1, pix0, np, MICO_AS_PX, buf.h);
                        if (convert) {
                            mico_as_words(buf.h, kc * MICO_AS_W);
                        }
                    }
                    for (oc = oc0; oc < oc1; oc++) {
                        const size_t at = (size_t)oc * (size_t)k_all + (size_t)(r0 * kw);
                        ch(p->weight + at / (size_t)per, (uint32_t)(at % (size_t)per), kc, tp,
                           tile + (oc - oc0) * MICO_AS_PX, r0 == 0, p->bias[oc]);
                    }
                }
                mico_conv_tile_store(p, tile, oc0, oc1, pix0, np, out);
                pix0 += np;
            }
        }
    }
    return 1;
}

/* The most working memory a layer takes (a chunk's MICO_AS_TAPS taps: patch or phase arrays,
 * their pointers, MICO_AS_OCT channels' tile). */
#define MICO_AS_SCRATCH_MAX                                                                 \
    (MICO_AS_TAPS * MICO_AS_PX * 2 + MICO_AS_TAPS * sizeof(const MicoPairWord *) +          \
     MICO_AS_OCT * MICO_AS_PX * 4)

/* The layer with its working memory on this function's stack: for a caller that planned none
 * (MicoConv2d.scratch NULL or short: the dynamic mode, tests, a band of a patch stage). */
static MICO_NOINLINE int mico_as_stack(const MicoConv2d *p, const void *in, void *out,
                                       MicoAsChannel ch, int32_t wb)
{
    uint64_t ws[(MICO_AS_SCRATCH_MAX + 7) / 8];
    return mico_as_layer(p, in, out, ch, wb, (uint8_t *)ws, sizeof ws);
}

/* The layer in the caller's scratch, else on the stack; element by element when not taken. */
static inline __attribute__((always_inline)) void mico_as_run(const MicoConv2d *p, const void *in, void *out, MicoAsChannel ch,
                        int32_t wb)
{
    int r = mico_as_layer(p, in, out, ch, wb, (uint8_t *)p->scratch,
                          p->scratch_bytes > 0 ? (size_t)p->scratch_bytes : 0u);
    if (r < 0) {
        r = mico_as_stack(p, in, out, ch, wb);
    }
    if (!r) {
        mico_qconv2d_elementwise(p, in, out);
    }
}

void mico_qconv2d_addsub2(const MicoConv2d *p, const void *in, void *out)
{
    const size_t n = ((size_t)p->out_c * (size_t)(p->in_c / p->groups) * (size_t)p->k_h *
                          (size_t)p->k_w * 2u + 7u) / 8u;
    if (p->w_bits != 2 || p->in_fmt.bits < 1 || p->in_fmt.bits > 8 ||
        mico_as_has_m2(p->weight, n)) { /* not ternary codes */
        mico_qconv2d_elementwise(p, in, out);
        return;
    }
    mico_as_run(p, in, out, mico_as_ch2, 2);
}

void mico_qconv2d_addsub1(const MicoConv2d *p, const void *in, void *out)
{
    if (p->w_bits != 1 || p->in_fmt.bits < 1 || p->in_fmt.bits > 8) {
        mico_qconv2d_elementwise(p, in, out);
        return;
    }
    mico_as_run(p, in, out, mico_as_ch1, 1);
}
