/* Binary weights (1-bit codes: +1 / -1) on activation codes of 2 to 8 bits by table lookup
 * (mico_qconv2d_sign_lut, mico_qlinear_sign_lut). Four taps' weights are a nibble of the packed
 * weights, and a nibble's four signs give one of 16 signed sums of the four taps' codes. Those
 * 16 sums are built once per group of four taps and pixel pair (the table), then every output
 * channel adds one table entry per nibble: one load and one addition for four taps of two
 * pixels (eight products), and no multiplication; two pairs' tables share each nibble's
 * offset. The tables are shared by all the output channels of a block, so their cost
 * falls with more channels.
 *
 * Two pixels share a word (two 16-bit lanes, the low pixel's value plus the high one's times
 * 2^16, modulo 2^32), so one addition serves both. A lane sums at most `cap` codes (from their
 * largest magnitude) so that it stays within int16; the low lane's borrow or carry into the high
 * one is taken back when a chunk's sums go into the tile (low = the low half sign-extended,
 * high = (word - low) / 2^16). Convolutions take pixel pairs from the im2col patch
 * (mico_conv_patch, raster order); linear layers pair rows.
 *
 * Chunks start on a byte of the weights: a channel's row of weights (in_c * k_h * k_w taps, or
 * in_features) must be whole bytes, a chunk a multiple of 8 taps but the last. Taps past a
 * chunk's end (the rest of its last byte) read codes of 0, so their weights add nothing.
 * Bit-identical to mico_qconv2d / mico_qlinear (exact int32 sums, the same requantization);
 * layers it does not take go to mico_qconv2d_elementwise / mico_qlinear. Working memory: a
 * convolution's patch and tile (2 KB each at most) and two pairs' tables (2 KB) come from
 * MicoConv2d.scratch, planned in the arena per layer (mico_qconv2d_sign_lut_scratch;
 * mico.codegen.scratch.sign_lut_bytes), or without it from the stack (6.4 KB deep on rv32); a
 * linear layer's (a chunk's codes, the sums, the tables: 3 KB at most) from MicoLinear.scratch
 * likewise (mico_qlinear_sign_lut_scratch; mico.codegen.scratch.sign_lut_linear_bytes), or
 * without it from the stack. */
#include "mico_nn.h"

#define MICO_SL_PX MICO_TILE_PX    /* output pixels of a convolution's tile (16) */
#define MICO_SL_PAIRS (MICO_SL_PX / 2)
#define MICO_SL_TAPS 64            /* taps of a convolution's chunk at most: 16 tables */
#define MICO_SL_LTAPS 128          /* taps of a linear layer's chunk at most: 32 tables */
#define MICO_SL_GROUPS (MICO_SL_TAPS / 4)
#define MICO_SL_OCT 32             /* channels whose sums wait in the tile */
#define MICO_SL_O 64               /* outputs of a linear block */

/* Taps of a chunk: at most `most` and what a lane holds, a multiple of 8 (kernel rows of
 * k_w taps for a convolution: a multiple of lcm(k_w, 8)); 0 when none fits. */
static int32_t mico_sl_chunk(int32_t kw, int32_t cap, int32_t most)
{
    int32_t unit = kw, limit = cap < most ? cap : most;
    while (unit % 8 != 0) {
        unit += kw;
    }
    return limit / unit * unit;
}

/* The 16 tables of a chunk for one pair, ng groups of four taps: tap k's word is V (the two
 * values modulo 2^32, an expression of k_; taps past the chunk read codes of 0); table g, entry
 * m: the sum over the group's taps t = 4g + j of +v(t) where bit j of m is set, -v(t) where it
 * is clear. Built from the all-minus entry by adding 2 v(t) for each set bit. */
#define MICO_SL_TABLE(V)                                                                    \
    do {                                                                                    \
        int32_t g_, k_;                                                                     \
        for (g_ = 0, k_ = 0; g_ < ng; g_++, tb += 16) {                                    \
            uint32_t v0, v1, v2, v3, e0, e1, e2, e3, f0, f1, f2, f3, d;                     \
            v0 = (V);                                                                       \
            k_++;                                                                           \
            v1 = (V);                                                                       \
            k_++;                                                                           \
            v2 = (V);                                                                       \
            k_++;                                                                           \
            v3 = (V);                                                                       \
            k_++;                                                                           \
            e0 = 0u - (v0 + v1 + v2 + v3);                                                  \
            e1 = e0 + 2u * v0;                                                              \
            e2 = e0 + 2u * v1;                                                              \
            e3 = e1 + 2u * v1;                                                              \
            tb[0] = e0;                                                                     \
            tb[1] = e1;                                                                     \
            tb[2] = e2;                                                                     \
            tb[3] = e3;                                                                     \
            d = 2u * v2;                                                                    \
            f0 = e0 + d;                                                                    \
            f1 = e1 + d;                                                                    \
            f2 = e2 + d;                                                                    \
            f3 = e3 + d;                                                                    \
            tb[4] = f0;                                                                     \
            tb[5] = f1;                                                                     \
            tb[6] = f2;                                                                     \
            tb[7] = f3;                                                                     \
            d = 2u * v3;                                                                    \
            tb[8] = e0 + d;                                                                 \
            tb[9] = e1 + d;                                                                 \
            tb[10] = e2 + d;                                                                \
            tb[11] = e3 + d;                                                                \
            tb[12] = f0 + d;                                                                \
            tb[13] = f1 + d;                                                                \
            tb[14] = f2 + d;                                                                \
            tb[15] = f3 + d;                                                                \
        }                                                                                   \
    } while (0)

/* The table entry at byte offset `off` from tq. */
#define MICO_SL_AT(off) (*(const uint32_t *)(const void *)(tq + (off)))
/* Bytes of one pair's tables: the second pair's follow at this offset. */
#define MICO_SL_SET (MICO_SL_GROUPS * 64)

/* One channel's sums over a chunk of nb weight bytes for n (1 or 2) pairs' tables: for each
 * nibble, the entry of its table in each set (the nibble's offset computed once). */
#define MICO_SL_NIB(o, base)                                                                \
    do {                                                                                    \
        const uint8_t *const a_ = tq + (o);                                                 \
        s0 += *(const uint32_t *)(const void *)(a_ + (base));                               \
        if (n == 2) {                                                                       \
            s1 += *(const uint32_t *)(const void *)(a_ + (base) + MICO_SL_SET);             \
        }                                                                                   \
    } while (0)
#define MICO_SL_BYTE(b, base)                                                               \
    do {                                                                                    \
        MICO_SL_NIB(((b) << 2) & 60u, (base));                                              \
        MICO_SL_NIB(((b) >> 2) & 60u, (base) + 64u);                                        \
    } while (0)

static inline __attribute__((always_inline)) void
mico_sl_sums(const uint8_t *wp, int32_t nb, const uint32_t *tb, const int n, uint32_t *r0,
             uint32_t *r1)
{
    const uint8_t *tq = (const uint8_t *)tb;
    uint32_t s0 = 0u, s1 = 0u, b0, b1, b2, b3;
    for (; nb >= 4; nb -= 4, wp += 4, tq += 512) {
        b0 = wp[0];
        b1 = wp[1];
        b2 = wp[2];
        b3 = wp[3];
        MICO_SL_BYTE(b0, 0u);
        MICO_SL_BYTE(b1, 128u);
        MICO_SL_BYTE(b2, 256u);
        MICO_SL_BYTE(b3, 384u);
    }
    for (; nb > 0; nb--, wp++, tq += 128) {
        b0 = wp[0];
        MICO_SL_BYTE(b0, 0u);
    }
    *r0 = s0;
    *r1 = s1;
}

/* The two lanes of a word as int32 values. */
static inline void mico_sl_split(uint32_t w, int32_t *lo, int32_t *hi)
{
    const int32_t l = (int32_t)((w & 0xffffu) ^ 0x8000u) - 0x8000;
    *lo = l;
    *hi = (int32_t)((((w - (uint32_t)l) >> 16) ^ 0x8000u)) - 0x8000;
}

/* The two lanes of word w added to t[0], t[1] (first: to the bias b instead). */
static inline void mico_sl_into(uint32_t w, int32_t *t, int first, int32_t b)
{
    int32_t lo, hi;
    mico_sl_split(w, &lo, &hi);
    t[0] = (int32_t)((first ? (uint32_t)b : (uint32_t)t[0]) + (uint32_t)lo);
    t[1] = (int32_t)((first ? (uint32_t)b : (uint32_t)t[1]) + (uint32_t)hi);
}

/* The chunk's tables of pairs j and j + 1 (four pixels: x, the patch from pair j's column)
 * for n channels, their sums into the tile from pair j's column (t; for the first chunk, to
 * the channels' bias instead: bias, else NULL); the channels' nb bytes of weights of the chunk
 * at wp, row bytes apart; `words`: the patch's int16 pairs are the words as they are
 * (non-negative codes, little-endian); tables: the two pairs' sets, the second MICO_SL_SET
 * bytes after the first. */
static MICO_NOINLINE void mico_sl_conv_quad(const int16_t *x, int32_t nb, const uint8_t *wp,
                                            size_t row, const int32_t *bias, int32_t n,
                                            int words, int32_t *t, uint32_t *tables)
{
    const int32_t ng = 2 * nb;
    int32_t *const end = t + n * MICO_SL_PX;
    int32_t h;
    for (h = 0; h < 2; h++, x += 2) {
        uint32_t *tb = tables + h * MICO_SL_GROUPS * 16;
        if (words) {
            MICO_SL_TABLE(*(const MicoPairWord *)(const void *)(x + k_ * MICO_SL_PX));
        } else {
            MICO_SL_TABLE((uint32_t)(int32_t)x[k_ * MICO_SL_PX] +
                          ((uint32_t)(int32_t)x[k_ * MICO_SL_PX + 1] << 16));
        }
    }
    for (; t < end; wp += row, t += MICO_SL_PX) {
        uint32_t s0, s1;
        mico_sl_sums(wp, nb, tables, 2, &s0, &s1);
        if (bias != NULL) {
            mico_sl_into(s0, t, 1, *bias);
            mico_sl_into(s1, t + 2, 1, *bias++);
        } else {
            mico_sl_into(s0, t, 0, 0);
            mico_sl_into(s1, t + 2, 0, 0);
        }
    }
}

/* The chunk's quads over a tile's np pixels (mico_sl_conv_quad), their tables in `tables`. */
static inline __attribute__((always_inline)) void
mico_sl_conv_quads(const MicoConv2d *p, const int16_t *patch, int32_t np, int32_t kc,
                   int32_t tap0, int32_t oc0, int32_t oc1, int first, int32_t *tile,
                   uint32_t *tables)
{
    const size_t k_all = (size_t)p->in_c * (size_t)p->k_h * (size_t)p->k_w;
    const uint8_t *const wp = p->weight + ((size_t)oc0 * k_all + (size_t)tap0) / 8u;
    const int32_t *const bias = first ? p->bias + oc0 : NULL;
    const int words = MICO_PAIR_LE && !p->in_fmt.is_signed && p->in_fmt.zero == 0;
    int32_t j;
    for (j = 0; 2 * j < np; j += 2) { /* past np: zero columns, sums not stored */
        mico_sl_conv_quad(patch + 2 * j, (kc + 7) / 8, wp, k_all / 8u, bias, oc1 - oc0, words,
                          tile + 2 * j, tables);
    }
}

/* Bytes of the two pairs' tables for chunks of kc_max taps: the second set MICO_SL_SET bytes
 * after the first, 64 bytes a group of four taps. */
#define MICO_SL_TABLES(KC) (MICO_SL_SET + (size_t)(KC) / 4u * 64u)

/* mico_sl_conv_quads with the tables on this function's stack (a caller without scratch):
 * held only while the quads run, not under the patch's unpacking or the requantization.
 * Passed down by its address from the stack fallback alone, so that a program whose layers
 * have their scratch planned does not count its frame (mico.hw.stack follows a pointer only
 * under the function that takes it). */
typedef void (*MicoSlQuads)(const MicoConv2d *, const int16_t *, int32_t, int32_t, int32_t,
                            int32_t, int32_t, int, int32_t *);
static MICO_NOINLINE void mico_sl_conv_quads_stack(const MicoConv2d *p, const int16_t *patch,
                                                   int32_t np, int32_t kc, int32_t tap0,
                                                   int32_t oc0, int32_t oc1, int first,
                                                   int32_t *tile)
{
    uint32_t tables[MICO_SL_TABLES(MICO_SL_TAPS) / 4u];
    mico_sl_conv_quads(p, patch, np, kc, tap0, oc0, oc1, first, tile, tables);
}

/* Taps of a convolution's chunk (0: the layer is not taken: mico_qconv2d_elementwise). */
static int32_t mico_sl_conv_chunk(const MicoConv2d *p)
{
    if (p->w_bits != 1 || p->groups != 1 || p->in_fmt.bits < 2 || p->in_fmt.bits > 8 ||
        p->in_c * p->k_h * p->k_w % 8 != 0) {
        return 0;
    }
    return mico_sl_chunk(p->k_w, 32767 / mico_code_maxabs(p->in_fmt), MICO_SL_TAPS);
}

/* Bytes of working memory a convolution of chunks of kc_max taps takes (each part a multiple
 * of 8; mico.codegen.scratch.sign_lut_bytes computes the same): the patch (kc_max taps x
 * MICO_SL_PX codes), the tile (a block's channels x MICO_SL_PX sums), the two pairs' tables
 * (the second set MICO_SL_SET bytes after the first, 64 bytes a group of four taps). */
static size_t mico_sl_conv_bytes(const MicoConv2d *p, int32_t kc_max)
{
    const size_t oct = (size_t)(p->out_c < MICO_SL_OCT ? p->out_c : MICO_SL_OCT);
    return (size_t)kc_max * MICO_SL_PX * 2u + oct * MICO_SL_PX * 4u + MICO_SL_TABLES(kc_max);
}

size_t mico_qconv2d_sign_lut_scratch(const MicoConv2d *p)
{
    const int32_t kc_max = mico_sl_conv_chunk(p);
    return kc_max > 0 ? mico_sl_conv_bytes(p, kc_max) : 0u;
}

/* The layer, its working memory in ws (wsb bytes; own_tables non-NULL: the tables are not in
 * it, each chunk's quads go through own_tables, which holds them): 1 done, 0 not taken (the
 * entry hands it on), -1 taken but ws NULL or short (mico_sl_conv_bytes). */
static MICO_NOINLINE int mico_sl_conv_layer(const MicoConv2d *p, const void *in, void *out,
                                            uint8_t *ws, size_t wsb, MicoSlQuads own_tables)
{
    const int32_t kw = p->k_w, rows = p->in_c * p->k_h;
    const int32_t npix = p->out_h * p->out_w, kc_max = mico_sl_conv_chunk(p);
    int16_t *patch;  /* kc_max taps x MICO_SL_PX codes (word-aligned pairs) */
    int32_t *tile;   /* a block's channels x MICO_SL_PX sums */
    uint32_t *tables;
    int32_t rpc, oc0, pix0, r0, j;
    if (kc_max == 0) { /* other widths, weights not in whole bytes, a kernel row too wide */
        return 0;
    }
    if (ws == NULL ||
        mico_sl_conv_bytes(p, kc_max) - (own_tables != NULL ? MICO_SL_TABLES(kc_max) : 0u) >
            wsb) {
        return -1;
    }
    patch = (int16_t *)mico_carve(&ws, (size_t)kc_max * MICO_SL_PX * 2u);
    tile = (int32_t *)mico_carve(&ws, (size_t)(p->out_c < MICO_SL_OCT ? p->out_c : MICO_SL_OCT) *
                                          MICO_SL_PX * 4u);
    tables = own_tables != NULL ? NULL : (uint32_t *)(void *)ws;
    rpc = kc_max / kw;
    for (oc0 = 0; oc0 < p->out_c; oc0 += MICO_SL_OCT) {
        const int32_t oc1 = oc0 + MICO_SL_OCT < p->out_c ? oc0 + MICO_SL_OCT : p->out_c;
        for (pix0 = 0; pix0 < npix; pix0 += MICO_SL_PX) {
            const int32_t np = npix - pix0 < MICO_SL_PX ? npix - pix0 : MICO_SL_PX;
            for (r0 = 0; r0 < rows; r0 += rpc) {
                const int32_t r1 = r0 + rpc < rows ? r0 + rpc : rows;
                const int32_t kc = (r1 - r0) * kw;
                mico_conv_patch(p, in, 0, r0, r1, pix0, np, MICO_SL_PX, patch);
                for (j = kc * MICO_SL_PX; j < (kc + 7) / 8 * 8 * MICO_SL_PX; j++) {
                    patch[j] = 0; /* the rest of the last weight byte's taps */
                    MICO_LOOP_BARRIER();
                }
                if (tables != NULL) {
                    mico_sl_conv_quads(p, patch, np, kc, r0 * kw, oc0, oc1, r0 == 0, tile,
                                       tables);
                } else {
                    own_tables(p, patch, np, kc, r0 * kw, oc0, oc1, r0 == 0, tile);
                }
            }
            mico_conv_tile_store(p, tile, oc0, oc1, pix0, np, out);
        }
    }
    return 1;
}

/* The layer with its working memory on the stack, for a caller that planned none
 * (MicoConv2d.scratch NULL or short: the dynamic mode, tests, a band of a patch stage): the
 * most patch and tile a layer takes on this function's, the tables on the quads' (so the
 * deepest chain is no deeper than when all of it was the kernel's own). */
static MICO_NOINLINE int mico_sl_conv_stack(const MicoConv2d *p, const void *in, void *out)
{
    uint64_t ws[(MICO_SL_TAPS * MICO_SL_PX * 2 + MICO_SL_OCT * MICO_SL_PX * 4) / 8];
    return mico_sl_conv_layer(p, in, out, (uint8_t *)ws, sizeof ws, mico_sl_conv_quads_stack);
}

void mico_qconv2d_sign_lut(const MicoConv2d *p, const void *in, void *out)
{
    int r = mico_sl_conv_layer(p, in, out, (uint8_t *)p->scratch,
                               p->scratch_bytes > 0 ? (size_t)p->scratch_bytes : 0u, NULL);
    if (r < 0) {
        r = mico_sl_conv_stack(p, in, out);
    }
    if (!r) { /* other widths, weights not in whole bytes a channel, a kernel row too wide */
        mico_qconv2d_elementwise(p, in, out);
    }
}

/* The int32 sums of a linear layer's block (two an output when rows pair), a whole number of
 * 8 bytes: its working memory holds the chunk's tables right after them. */
static inline int32_t mico_sl_linear_sums(const MicoLinear *p)
{
    const int32_t no = p->out_features < MICO_SL_O ? p->out_features : MICO_SL_O;
    return ((p->rows > 1 ? 2 : 1) * no + 1) / 2 * 2;
}

/* The chunk's tables of a pair of rows (x0, x1: their codes from tap k0; x1 NULL for a last
 * row alone, whose sums need no lanes) for outputs o0 .. o1 - 1, the sums into acc (a pair's
 * two rows side by side; a row alone: one an output, whatever the layer's rows); the tables
 * follow the sums (found from acc: no tenth argument, which rv32 passes on the stack). */
static MICO_NOINLINE void mico_sl_linear_pair(const MicoLinear *p, const int16_t *x0,
                                              const int16_t *x1, int32_t kc, int32_t k0,
                                              int32_t o0, int32_t o1, int first, int32_t *acc)
{
    const int32_t nb = (kc + 7) / 8, ng = 2 * nb;
    const size_t row = (size_t)p->in_features / 8u;
    const uint8_t *wp = p->weight + ((size_t)o0 * (size_t)p->in_features + (size_t)k0) / 8u;
    uint32_t *const tables = (uint32_t *)(void *)(acc + mico_sl_linear_sums(p));
    uint32_t *tb = tables;
    uint32_t s, unused;
    int32_t o;
    if (x1 != NULL) {
        MICO_SL_TABLE((uint32_t)(int32_t)x0[k_] + ((uint32_t)(int32_t)x1[k_] << 16));
        for (o = o0; o < o1; o++, wp += row) {
            mico_sl_sums(wp, nb, tables, 1, &s, &unused);
            mico_sl_into(s, acc + 2 * (o - o0), first, p->bias[o]);
        }
        return;
    }
    MICO_SL_TABLE((uint32_t)(int32_t)x0[k_]);
    for (o = o0; o < o1; o++, wp += row) {
        int32_t *const a = acc + (o - o0);
        mico_sl_sums(wp, nb, tables, 1, &s, &unused);
        a[0] = (int32_t)((first ? (uint32_t)p->bias[o] : (uint32_t)a[0]) + s);
    }
}

/* Taps of a linear layer's chunk (0: the layer is not taken: mico_qlinear): what a lane holds
 * (one row alone: int32 sums, no lanes), at most MICO_SL_LTAPS and in_features; a multiple of
 * 8, as in_features is, so no chunk ends inside a weight byte. */
static int32_t mico_sl_linear_chunk(const MicoLinear *p)
{
    int32_t kc;
    if (p->w_bits != 1 || p->in_fmt.bits < 2 || p->in_fmt.bits > 8 || p->in_features % 8 != 0) {
        return 0;
    }
    kc = mico_sl_chunk(1, p->rows > 1 ? 32767 / mico_code_maxabs(p->in_fmt) : MICO_SL_LTAPS,
                       MICO_SL_LTAPS);
    return kc < p->in_features ? kc : p->in_features;
}

#define MICO_SL_UP8(n) (((size_t)(n) + 7u) & ~(size_t)7u)

/* Bytes of working memory a linear layer of chunks of kc taps takes (each part a multiple of
 * 8; mico.codegen.scratch.sign_lut_linear_bytes computes the same): a chunk's codes of a row
 * (two rows when rows pair; int16), the sums of a block's outputs (two an output when rows
 * pair), and the chunk's tables (64 bytes a group of four taps), whose bytes a row's
 * requantized outputs (int32) take over once the block's sums are done. */
static inline __attribute__((always_inline)) size_t
mico_sl_linear_bytes(const MicoLinear *p, int32_t kc)
{
    const size_t nx = p->rows > 1 ? 2u : 1u;
    const size_t no = (size_t)(p->out_features < MICO_SL_O ? p->out_features : MICO_SL_O);
    const size_t tables = (size_t)kc / 4u * 64u;
    return MICO_SL_UP8(nx * (size_t)kc * 2u) + (size_t)mico_sl_linear_sums(p) * 4u +
           MICO_SL_UP8(tables > no * 4u ? tables : no * 4u);
}

size_t mico_qlinear_sign_lut_scratch(const MicoLinear *p)
{
    const int32_t kc = mico_sl_linear_chunk(p);
    return kc > 0 ? mico_sl_linear_bytes(p, kc) : 0u;
}

/* The linear layer, its working memory in ws (wsb bytes): 1 done, 0 not taken (the entry
 * hands it on), -1 taken but ws NULL or short (mico_sl_linear_bytes). */
static MICO_NOINLINE int mico_sl_linear_layer(const MicoLinear *p, const void *in, void *out,
                                              uint8_t *ws, size_t wsb)
{
    const int32_t nf = p->in_features, nout = p->out_features, kc_max = mico_sl_linear_chunk(p);
    const MicoOut ob = p->out; /* (y's stores may alias p: a copy is read once) */
    int16_t *x0, *x1;
    int32_t *acc, *y;
    int32_t r, o0, o, k0, h;
    if (kc_max == 0) { /* other widths, weights not in whole bytes an output */
        return 0;
    }
    if (ws == NULL || mico_sl_linear_bytes(p, kc_max) > wsb) {
        return -1;
    }
    x0 = (int16_t *)mico_carve(&ws, (size_t)kc_max * 2u);
    x1 = p->rows > 1 ? (int16_t *)mico_carve(&ws, (size_t)kc_max * 2u) : NULL;
    acc = (int32_t *)mico_carve(&ws, (size_t)mico_sl_linear_sums(p) * 4u);
    y = (int32_t *)(void *)ws; /* the tables' bytes (mico_sl_linear_pair), once a block's sums
                                  are done */
    for (r = 0; r < p->rows; r += 2) {
        const int32_t pair = r + 1 < p->rows;
        for (o0 = 0; o0 < nout; o0 += MICO_SL_O) {
            const int32_t o1 = o0 + MICO_SL_O < nout ? o0 + MICO_SL_O : nout;
            for (k0 = 0; k0 < nf; k0 += kc_max) { /* chunks of whole weight bytes */
                const int32_t kc = nf - k0 < kc_max ? nf - k0 : kc_max;
                mico_unpack(in, (size_t)r * (size_t)nf + (size_t)k0, kc, p->in_fmt, x0);
                if (pair) {
                    mico_unpack(in, (size_t)(r + 1) * (size_t)nf + (size_t)k0, kc, p->in_fmt,
                                x1);
                }
                mico_sl_linear_pair(p, x0, pair ? x1 : NULL, kc, k0, o0, o1, k0 == 0, acc);
            }
            for (h = 0; h <= pair; h++) { /* requantize and store each row's outputs */
                const int32_t *a = acc + h;
                for (o = o0; o < o1; o++, a += 1 + pair) { /* a pair's rows side by side */
                    const MicoRq rq = mico_rq(&ob, o);
                    y[o - o0] = mico_rq_apply(&rq, *a);
                }
                mico_pack(out, (size_t)(r + h) * (size_t)nout + (size_t)o0, y, o1 - o0,
                          p->out.fmt);
            }
        }
    }
    return 1;
}

/* Bytes of the most working memory a linear layer takes (chunks of MICO_SL_LTAPS taps, rows
 * in pairs, a block of MICO_SL_O outputs). */
#define MICO_SL_LBYTES (2 * MICO_SL_LTAPS * 2 + 2 * MICO_SL_O * 4 + MICO_SL_LTAPS * 16)

/* The linear layer with its working memory on the stack, for a caller that planned none
 * (MicoLinear.scratch NULL or short: the dynamic mode, tests). */
static MICO_NOINLINE int mico_sl_linear_stack(const MicoLinear *p, const void *in, void *out)
{
    uint64_t ws[MICO_SL_LBYTES / 8];
    return mico_sl_linear_layer(p, in, out, (uint8_t *)ws, sizeof ws);
}

void mico_qlinear_sign_lut(const MicoLinear *p, const void *in, void *out)
{
    int r = mico_sl_linear_layer(p, in, out, (uint8_t *)p->scratch,
                                 p->scratch_bytes > 0 ? (size_t)p->scratch_bytes : 0u);
    if (r < 0) {
        r = mico_sl_linear_stack(p, in, out);
    }
    if (!r) { /* other widths, weights not in whole bytes an output */
        mico_qlinear(p, in, out);
    }
}
