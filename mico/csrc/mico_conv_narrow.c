/* W8A8 convolutions as register tiles on bytes (mico_qconv2d_narrow_s8): groups == 1, 8-bit
 * weights, 8-bit activation codes in (out: 1..8 bits, not binary), and either few taps (in_c * k_h * k_w <=
 * MICO_NW_TAPS: a network's first layer, e.g. dscnn's 10x4 conv on one MFCC plane, 40 taps
 * for 64 output channels) or a 1x1 kernel (pointwise layers).
 *
 * Such a layer is a matrix product, out[c][pix] = bias[c] + sum_t W[c][t] P[t][pix], with P
 * the im2col patch (for a pointwise layer, stride 1 and no padding: the input planes
 * themselves). So:
 *  - the weights are rearranged once per call into a stack table wq[quad][t][4] (channels
 *    padded to a multiple of 4, taps to a multiple of 8, with zero weights): a tile reads its
 *    quad's weights in order, 4 bytes a tap at constant offsets;
 *  - every layer of at most MICO_NW_TAPS taps (pointwise: MICO_NW_PTAPS) is run over patches
 *    of MICO_NW_PIX output pixels (raster order, across rows; zeros for padding, for pixels
 *    past the end and for the padding taps), tap-major; a pointwise layer's patch is a copy
 *    of 20 bytes of each input plane (about 2 instructions a byte, read by every channel);
 *    channels go in blocks of MICO_NW_CB, each block's requantization constants found once,
 *    the patches built once per block;
 *  - a 4-channel x 5-pixel register tile (below: in assembly on rv32) reads 9 bytes per tap
 *    for 20 MACs, 8 taps per iteration at constant offsets (about 2.48 instructions per MAC
 *    on rv32imac), then requantizes its 20 sums in registers and stores them as bytes (ReLU
 *    layers: a high-word multiply, the rounding add, a shift and the clamp), and goes on to
 *    the next 5 pixels; partial tiles and other requantizations go through a sums array (the
 *    signed form of mico_rescale);
 *  - a pointwise layer of more taps reads its input planes in place (taps npix bytes apart:
 *    a 4 x 4 tile, one tap per iteration, 2.75 instructions per MAC);
 *  - weights of at most 16 in magnitude (ternary, 2- or 4-bit codes widened to bytes) over a
 *    patch of at most 64 taps take two pixels a word in 16-bit lanes (see "small weights"
 *    below: about 1.35 instructions per MAC in the loop); there shifts of 32 or less are taken
 *    too (pre-shifted sums, or the plain requantization).
 * Bit-identical to mico_qconv2d (exact int32 sums, the same requantization). Stack: about
 * 9 KB. Outputs of fewer than 8 bits (an 8-bit layer feeding a narrower one, as mixed plans
 * have) are requantized as bytes into a staging area, a patch's channels at a time, then
 * packed (mico_nw_codes: 2- and 4-bit codes a byte at a time). Layers it does not take (other widths
 * or groups, too many taps or weights, shifts of 32 or less, unscaled outputs) go to
 * mico_qconv2d_tiled_s8. Not in place (not depthwise). */
#include "mico_nn.h"

#define MICO_NW_TAPS 64    /* taps (in_c * k_h * k_w) at most */
#define MICO_NW_PTAPS 128  /* taps of a pointwise layer run over patches */
#define MICO_NW_PIX 20     /* output pixels of a byte tiles' patch (4 tiles of 5) */
#define MICO_NW_LPIX 16    /* output pixels of a small weights' patch (2 tiles of 8) */
#define MICO_NW_CB 64      /* channels of a block (requantization constants on the stack) */
#define MICO_NW_WEIGHTS 4096 /* bytes of the transposed weights (taps x channels padded to 4) */
#if defined(__GNUC__)
#define MICO_INLINE_ALWAYS __attribute__((always_inline)) inline
#else
#define MICO_INLINE_ALWAYS inline
#endif

/* Per channel: the requantization of its sums (shift above 32). */
typedef struct {
    uint32_t m, sh, rnd;
    int32_t bias;
    uint32_t pre; /* shift of 32 or less: |sum| < 2^(shift - 1), so sum << (33 - shift) fits
                   * 32 bits and rescales as a shift of 33 (sh 1); else 0 */
} MicoNwRq;

/* Store the n (<= 5) requantized sums v of one channel at o (see mico_dw8_put in
 * mico_dwconv.c). RELU: ReLU layers with lo <= 0 <= hi. */
static MICO_INLINE_ALWAYS void mico_nw_put(uint8_t *o, const int32_t *v, int32_t n,
                                           const MicoNwRq *q, const MicoOut *out, const int relu)
{
    const uint32_t m = q->m, sh = q->sh, rnd = q->rnd, hi = (uint32_t)out->hi, pre = q->pre;
    int32_t k;
    for (k = 0; k < n; k++) {
        int32_t r = v[k], y;
        uint32_t u;
        if (relu) {
            if (r <= 0) {
                o[k] = 0;
                continue;
            }
            u = ((uint32_t)(((uint64_t)((uint32_t)r << pre) * m) >> 32) + rnd) >> sh;
            o[k] = (uint8_t)(u > hi ? hi : u);
            continue;
        }
        if (out->relu && r < 0) {
            r = 0;
        }
        u = (r < 0 ? 0u - (uint32_t)r : (uint32_t)r) << pre;
        u = ((uint32_t)(((uint64_t)u * m) >> 32) + rnd) >> sh;
        y = r < 0 ? -(int32_t)u : (int32_t)u;
        y = y < out->lo ? out->lo : y;
        o[k] = (uint8_t)(y > out->hi ? out->hi : y);
    }
}

/* The sums of a tile stored: channels c0 .. c0 + nc - 1 (acc, cs apart), n pixels from pixel
 * `pix`. */
static MICO_NOINLINE void mico_nw_store(const MicoConv2d *p, const int32_t *acc, int32_t cs,
                                        const MicoNwRq *rq, int32_t c0, int32_t nc, int32_t pix,
                                        int32_t n, uint8_t *out, int relu)
{
    const size_t plane = (size_t)p->out_h * (size_t)p->out_w;
    uint8_t *o = out + (size_t)c0 * plane + (size_t)pix;
    int32_t i;
    for (i = 0; i < nc; i++, o += plane, acc += cs, rq++) {
        if (relu) {
            mico_nw_put(o, acc, n, rq, &p->out, 1);
        } else {
            mico_nw_put(o, acc, n, rq, &p->out, 0);
        }
    }
}

/* The patch of output pixels pix0 .. pix0 + MICO_NW_PIX - 1: patch[t * MICO_NW_PIX + j]
 * (`width` pixels a row: MICO_NW_PIX or MICO_NW_LPIX). The layer's fields are read into
 * locals first (byte stores may alias them). */
static MICO_NOINLINE void mico_nw_patch(const MicoConv2d *p, const int8_t *in, int32_t pix0,
                                        int32_t width, int8_t *patch)
{
    const int32_t npix = p->out_h * p->out_w, out_w = p->out_w, in_h = p->in_h, in_w = p->in_w;
    const int32_t in_c = p->in_c, k_h = p->k_h, k_w = p->k_w, sh = p->stride_h, sw = p->stride_w;
    const int32_t dh = p->dil_h, dw = p->dil_w, ph = p->pad_h, pw = p->pad_w;
    int32_t j, ic, ky, kx;
    for (j = 0; j < width; j++) {
        const int32_t pix = pix0 + j, oy = pix / out_w, ox = pix - oy * out_w;
        const int32_t iy0 = oy * sh - ph, ix0 = ox * sw - pw;
        const int inside_x = ix0 >= 0 && ix0 + (k_w - 1) * dw < in_w;
        int8_t *d = patch + j;
        for (ic = 0; ic < in_c; ic++) {
            for (ky = 0; ky < k_h; ky++) {
                const int32_t iy = iy0 + ky * dh;
                if (pix >= npix || iy < 0 || iy >= in_h) {
                    for (kx = 0; kx < k_w; kx++, d += width) {
                        *d = 0;
                    }
                    continue;
                }
                {
                    const int8_t *row = in + ((size_t)ic * (size_t)in_h + (size_t)iy) * (size_t)in_w;
                    if (inside_x) { /* the whole kernel row inside the image */
                        const int8_t *x = row + ix0;
                        for (kx = 0; kx < k_w; kx++, d += width, x += dw) {
                            *d = *x;
                        }
                    } else {
                        for (kx = 0; kx < k_w; kx++, d += width) {
                            const int32_t ix = ix0 + kx * dw;
                            *d = ix >= 0 && ix < in_w ? row[ix] : 0;
                        }
                    }
                }
            }
        }
    }
}

/* A compiler fence between the weights of a tap: without it all 8 byte loads of a tap are
 * hoisted to its start, and two of the 16 sums no longer fit the registers. */
#if defined(__GNUC__)
#define MICO_NW_FENCE() __asm__ volatile("" ::: "memory")
#else
#define MICO_NW_FENCE()
#endif

/* Requantize (ReLU layers, the constants of rq) and store the 4 sums S0..S3 of one channel. */
#define MICO_NW_PUT4(O, RQ, S0, S1, S2, S3)                                                      \
    do {                                                                                          \
        const uint32_t m_ = (RQ)->m, sh_ = (RQ)->sh, rnd_ = (RQ)->rnd;                            \
        MICO_NW_PUT1((O)[0], S0);                                                                 \
        MICO_NW_PUT1((O)[1], S1);                                                                 \
        MICO_NW_PUT1((O)[2], S2);                                                                 \
        MICO_NW_PUT1((O)[3], S3);                                                                 \
    } while (0)
#define MICO_NW_PUT1(DST, R)                                                                     \
    do {                                                                                          \
        if ((R) <= 0) {                                                                           \
            DST = 0;                                                                              \
        } else {                                                                                  \
            const uint32_t u_ =                                                                   \
                ((uint32_t)(((uint64_t)(uint32_t)(R) * m_) >> 32) + rnd_) >> sh_;                 \
            DST = (uint8_t)(u_ > hi ? hi : u_);                                                   \
        }                                                                                         \
    } while (0)

/* The 16 sums s<channel><pixel> of a 4 x 4 tile, each starting at its channel's bias. */
#define MICO_NW_SUMS_AT_BIAS(RQ)                                                                  \
    int32_t s00 = (RQ)[0].bias, s01 = s00, s02 = s00, s03 = s00;                                  \
    int32_t s10 = (RQ)[1].bias, s11 = s10, s12 = s10, s13 = s10;                                  \
    int32_t s20 = (RQ)[2].bias, s21 = s20, s22 = s20, s23 = s20;                                  \
    int32_t s30 = (RQ)[3].bias, s31 = s30, s32 = s30, s33 = s30

/* The end of a tile in a tile function's loop over pixel quads: with O, the 16 sums
 * requantized and stored (4 channel planes PLANE apart), then the next quad while NQ > 1;
 * without, the sums left in ACC. */
#define MICO_NW_TILE_END(O, RQ, PLANE, NQ, ACC)                                                   \
    if (O) {                                                                                      \
        MICO_NW_PUT4(O, RQ, s00, s01, s02, s03);                                                  \
        MICO_NW_PUT4((O) + (PLANE), (RQ) + 1, s10, s11, s12, s13);                                \
        MICO_NW_PUT4((O) + 2 * (PLANE), (RQ) + 2, s20, s21, s22, s23);                            \
        MICO_NW_PUT4((O) + 3 * (PLANE), (RQ) + 3, s30, s31, s32, s33);                            \
        if ((NQ) > 1) {                                                                           \
            continue;                                                                             \
        }                                                                                         \
        return;                                                                                   \
    }                                                                                             \
    (ACC)[0] = s00, (ACC)[1] = s01, (ACC)[2] = s02, (ACC)[3] = s03;                               \
    (ACC)[4] = s10, (ACC)[5] = s11, (ACC)[6] = s12, (ACC)[7] = s13;                               \
    (ACC)[8] = s20, (ACC)[9] = s21, (ACC)[10] = s22, (ACC)[11] = s23;                             \
    (ACC)[12] = s30, (ACC)[13] = s31, (ACC)[14] = s32, (ACC)[15] = s33;                           \
    return

/* The 4 x 4 tile of channels c0.. (table column wt) and 4 pixels (x, taps xs bytes apart),
 * its sums starting at the channels' biases. T: the codes' type (int8_t, or uint8_t for
 * unsigned codes). With o (a whole tile of a ReLU layer): requantized and stored at o, o +
 * plane, ... (hi: the clamp); else the sums are left in acc. */
#define MICO_NW_TILE(NAME, T)                                                                    \
    static MICO_NOINLINE void NAME(const int8_t *wt, int32_t stride, const void *patch_,          \
                                   int32_t xs, int32_t taps, const MicoNwRq *rq, uint8_t *o,      \
                                   size_t plane, uint32_t hi, int32_t nq, int32_t *acc)           \
    {                                                                                             \
      const int8_t *const wt0 = wt;                                                               \
      for (;; nq--, o += 4, patch_ = (const T *)patch_ + 4) {                                     \
        const T *x = (const T *)patch_;                                                           \
        MICO_NW_SUMS_AT_BIAS(rq);                                                                 \
        const T *const end = x + taps * xs;                                                       \
        wt = wt0;                                                                                 \
        for (; x < end; x += xs, wt += stride) {                                                  \
            const int32_t x0 = x[0], x1 = x[1], x2 = x[2], x3 = x[3];                             \
            int32_t w = wt[0];                                                                    \
            s00 += w * x0;                                                                        \
            s01 += w * x1;                                                                        \
            s02 += w * x2;                                                                        \
            s03 += w * x3;                                                                        \
            MICO_NW_FENCE();                                                                      \
            w = wt[1];                                                                            \
            s10 += w * x0;                                                                        \
            s11 += w * x1;                                                                        \
            s12 += w * x2;                                                                        \
            s13 += w * x3;                                                                        \
            MICO_NW_FENCE();                                                                      \
            w = wt[2];                                                                            \
            s20 += w * x0;                                                                        \
            s21 += w * x1;                                                                        \
            s22 += w * x2;                                                                        \
            s23 += w * x3;                                                                        \
            MICO_NW_FENCE();                                                                      \
            w = wt[3];                                                                            \
            s30 += w * x0;                                                                        \
            s31 += w * x1;                                                                        \
            s32 += w * x2;                                                                        \
            s33 += w * x3;                                                                        \
        }                                                                                         \
        MICO_NW_TILE_END(o, rq, plane, nq, acc);                                                  \
      }                                                                                           \
    }
MICO_NW_TILE(mico_nw_tile_s8, int8_t)
MICO_NW_TILE(mico_nw_tile_u8, uint8_t)

/* ------------------------------------------------------------ the byte tile: 4 channels x 5 pixels
 * A tile of 4 channels x 5 pixels over a patch (taps MICO_NW_PIX bytes apart) and its quad's
 * weights wq[t][4]: per tap 4 weight loads, 5 code loads, 20 multiplies and 20 adds for 20
 * MACs (2.45 instructions a MAC, the 4 x 4 tile's 2.5 plus its spills: 2.56). Its 20 sums, 4
 * weights, a code, a product and the two pointers take all 28 registers rv32 gives a function,
 * more than gcc allocates without spills, so on rv32 (with M, not E) the tile is written in
 * assembly (mico_nw_q5_rv32 below; elsewhere mico_nw_q5_c, the same arithmetic in C). Codes
 * are unsigned bytes: signed ones are stored x + 128 in the patch, their channels' biases
 * less 128 times the channel's weight sum (exact modulo 2^32, as the sums themselves). 5-pixel
 * tiles also cut DS-CNN's planes (125 = 25 x 5 pixels) without a remainder. */
typedef struct {
    const int8_t *wq;    /* 0: the quad's weights, wq[t][4] */
    const int8_t *wend;  /* 4: wq + 4 tp (tp a multiple of 8) */
    const uint8_t *x;    /* 8: the first tile's codes in the patch */
    uint8_t *o;          /* 12: channel c0's output at the first tile's pixel; NULL: sums */
    uint32_t plane;      /* 16: bytes from one channel's output plane to the next */
    uint32_t hi;         /* 20: the clamp (ReLU layers, lo <= 0) */
    int32_t nq;          /* 24: tiles, 5 pixels apart (with o NULL: one) */
    const MicoNwRq *rq;  /* 28: the 4 channels' requantization (bias: the sums' start) */
    int32_t *acc;        /* 32: with o NULL, the 20 sums (acc[5 c + j]) */
} MicoNwQ5;

/* The C tile: with o, nq tiles requantized and stored (ReLU layers); else one tile's sums in
 * acc. Sums in uint32 (the biases of signed codes may take them past int32 on the way). */
#define MICO_NW_X5(X, J, A, B, C, D)                                                             \
    do {                                                                                          \
        const uint32_t xv_ = (X)[J];                                                              \
        A += w0 * xv_;                                                                            \
        B += w1 * xv_;                                                                            \
        C += w2 * xv_;                                                                            \
        D += w3 * xv_;                                                                            \
    } while (0)
#define MICO_NW_PUT5(O, RQ, S0, S1, S2, S3, S4)                                                  \
    do {                                                                                          \
        const uint32_t m_ = (RQ)->m, sh_ = (RQ)->sh, rnd_ = (RQ)->rnd;                            \
        MICO_NW_PUT1((O)[0], (int32_t)(S0));                                                      \
        MICO_NW_PUT1((O)[1], (int32_t)(S1));                                                      \
        MICO_NW_PUT1((O)[2], (int32_t)(S2));                                                      \
        MICO_NW_PUT1((O)[3], (int32_t)(S3));                                                      \
        MICO_NW_PUT1((O)[4], (int32_t)(S4));                                                      \
    } while (0)
static MICO_UNUSED MICO_NOINLINE void mico_nw_q5_c(MicoNwQ5 *q)
{
    const uint32_t hi = q->hi;
    const MicoNwRq *const rq = q->rq;
    for (;;) {
        const uint8_t *x = q->x;
        const int8_t *w4 = q->wq;
        uint32_t s00 = (uint32_t)rq[0].bias, s01 = s00, s02 = s00, s03 = s00, s04 = s00;
        uint32_t s10 = (uint32_t)rq[1].bias, s11 = s10, s12 = s10, s13 = s10, s14 = s10;
        uint32_t s20 = (uint32_t)rq[2].bias, s21 = s20, s22 = s20, s23 = s20, s24 = s20;
        uint32_t s30 = (uint32_t)rq[3].bias, s31 = s30, s32 = s30, s33 = s30, s34 = s30;
        uint8_t *o = q->o;
        for (; w4 < q->wend; w4 += 4, x += MICO_NW_PIX) {
            const uint32_t w0 = (uint32_t)(int32_t)w4[0], w1 = (uint32_t)(int32_t)w4[1];
            const uint32_t w2 = (uint32_t)(int32_t)w4[2], w3 = (uint32_t)(int32_t)w4[3];
            MICO_NW_X5(x, 0, s00, s10, s20, s30);
            MICO_NW_X5(x, 1, s01, s11, s21, s31);
            MICO_NW_X5(x, 2, s02, s12, s22, s32);
            MICO_NW_X5(x, 3, s03, s13, s23, s33);
            MICO_NW_X5(x, 4, s04, s14, s24, s34);
        }
        if (o == NULL) {
            int32_t *a = q->acc;
            a[0] = (int32_t)s00, a[1] = (int32_t)s01, a[2] = (int32_t)s02;
            a[3] = (int32_t)s03, a[4] = (int32_t)s04, a[5] = (int32_t)s10;
            a[6] = (int32_t)s11, a[7] = (int32_t)s12, a[8] = (int32_t)s13;
            a[9] = (int32_t)s14, a[10] = (int32_t)s20, a[11] = (int32_t)s21;
            a[12] = (int32_t)s22, a[13] = (int32_t)s23, a[14] = (int32_t)s24;
            a[15] = (int32_t)s30, a[16] = (int32_t)s31, a[17] = (int32_t)s32;
            a[18] = (int32_t)s33, a[19] = (int32_t)s34;
            return;
        }
        MICO_NW_PUT5(o, rq, s00, s01, s02, s03, s04);
        MICO_NW_PUT5(o + q->plane, rq + 1, s10, s11, s12, s13, s14);
        MICO_NW_PUT5(o + 2 * q->plane, rq + 2, s20, s21, s22, s23, s24);
        MICO_NW_PUT5(o + 3 * q->plane, rq + 3, s30, s31, s32, s33, s34);
        if (--q->nq <= 0) {
            return;
        }
        q->x += 5;
        q->o += 5;
    }
}

#if defined(__GNUC__) && defined(__riscv) && __riscv_xlen == 32 && defined(__riscv_mul) &&      \
    !defined(__riscv_32e) && !defined(MICO_NW_NO_ASM)
#define MICO_NW_Q5 mico_nw_q5_rv32
void mico_nw_q5_rv32(MicoNwQ5 *q);
/* mico_nw_q5_c in rv32 assembly (the standard calling convention: s0-s11 and ra saved). Sums:
 * channel 0 in s0-s4, 1 in s5-s9, 2 in s10, s11, a1-a3, 3 in a4-a7, ra; t0 the weights, a0
 * the codes, t1-t4 a tap's 4 weights, t5 a code, t6 a product. Eight taps an iteration at
 * constant offsets (72 loads, 160 multiplies, 160 adds, 4 of loop: 2.48 instructions a MAC).
 * The requantization: a sum <= 0 gives 0 (3 instructions), else the high word of sum * m,
 * plus rnd, shifted by sh, clamped at hi (6). Frame: 13 saved registers, q, wend. */
__asm__(
    ".pushsection .text.mico_nw_q5_rv32,\"ax\",@progbits\n"
    ".p2align 2\n"
    ".globl mico_nw_q5_rv32\n"
    ".type mico_nw_q5_rv32, @function\n"
    ".macro mico_nw_q5_px k, j, r0, r1, r2, r3\n"
    "  lbu t5, \\k*20+\\j(a0)\n"
    "  mul t6, t1, t5\n  add \\r0, \\r0, t6\n"
    "  mul t6, t2, t5\n  add \\r1, \\r1, t6\n"
    "  mul t6, t3, t5\n  add \\r2, \\r2, t6\n"
    "  mul t5, t4, t5\n  add \\r3, \\r3, t5\n"
    ".endm\n"
    ".macro mico_nw_q5_tap k\n"
    "  lb t1, 4*\\k(t0)\n  lb t2, 4*\\k+1(t0)\n  lb t3, 4*\\k+2(t0)\n  lb t4, 4*\\k+3(t0)\n"
    "  mico_nw_q5_px \\k, 0, s0, s5, s10, a4\n"
    "  mico_nw_q5_px \\k, 1, s1, s6, s11, a5\n"
    "  mico_nw_q5_px \\k, 2, s2, s7, a1, a6\n"
    "  mico_nw_q5_px \\k, 3, s3, s8, a2, a7\n"
    "  mico_nw_q5_px \\k, 4, s4, s9, a3, ra\n"
    ".endm\n"
    ".macro mico_nw_q5_put r, j\n" /* m t4, sh t5, rnd t6, hi t2, output t1 */
    "  blez \\r, 1f\n"
    "  mulhu \\r, \\r, t4\n  add \\r, \\r, t6\n  srl \\r, \\r, t5\n"
    "  bleu \\r, t2, 2f\n  mv \\r, t2\n  j 2f\n"
    "1:\n  li \\r, 0\n"
    "2:\n  sb \\r, \\j(t1)\n"
    ".endm\n"
    ".macro mico_nw_q5_ch c, r0, r1, r2, r3, r4\n" /* channel c of the tile, rq at t0 */
    "  lw t4, 20*\\c(t0)\n  lw t5, 20*\\c+4(t0)\n  lw t6, 20*\\c+8(t0)\n"
    "  mico_nw_q5_put \\r0, 0\n  mico_nw_q5_put \\r1, 1\n  mico_nw_q5_put \\r2, 2\n"
    "  mico_nw_q5_put \\r3, 3\n  mico_nw_q5_put \\r4, 4\n"
    ".endm\n"
    "mico_nw_q5_rv32:\n"
    "  addi sp, sp, -64\n"
    "  sw ra, 0(sp)\n  sw s0, 4(sp)\n  sw s1, 8(sp)\n  sw s2, 12(sp)\n  sw s3, 16(sp)\n"
    "  sw s4, 20(sp)\n  sw s5, 24(sp)\n  sw s6, 28(sp)\n  sw s7, 32(sp)\n  sw s8, 36(sp)\n"
    "  sw s9, 40(sp)\n  sw s10, 44(sp)\n  sw s11, 48(sp)\n"
    "  sw a0, 52(sp)\n"
    "  lw t0, 4(a0)\n  sw t0, 56(sp)\n"
    ".Lmico_nw_q5_tile:\n"
    "  lw t6, 52(sp)\n  lw t5, 28(t6)\n"
    "  lw s0, 12(t5)\n  mv s1, s0\n  mv s2, s0\n  mv s3, s0\n  mv s4, s0\n"
    "  lw s5, 32(t5)\n  mv s6, s5\n  mv s7, s5\n  mv s8, s5\n  mv s9, s5\n"
    "  lw s10, 52(t5)\n  mv s11, s10\n  mv a1, s10\n  mv a2, s10\n  mv a3, s10\n"
    "  lw a4, 72(t5)\n  mv a5, a4\n  mv a6, a4\n  mv a7, a4\n  mv ra, a4\n"
    "  lw t0, 0(t6)\n  lw a0, 8(t6)\n"
    ".Lmico_nw_q5_taps:\n"
    "  mico_nw_q5_tap 0\n  mico_nw_q5_tap 1\n  mico_nw_q5_tap 2\n  mico_nw_q5_tap 3\n"
    "  mico_nw_q5_tap 4\n  mico_nw_q5_tap 5\n  mico_nw_q5_tap 6\n  mico_nw_q5_tap 7\n"
    "  addi t0, t0, 32\n  addi a0, a0, 160\n"
    "  lw t6, 56(sp)\n  bltu t0, t6, .Lmico_nw_q5_taps\n"
    "  lw t6, 52(sp)\n  lw t1, 12(t6)\n  beqz t1, .Lmico_nw_q5_sums\n"
    "  lw t0, 28(t6)\n  lw t2, 20(t6)\n  lw t3, 16(t6)\n"
    "  mico_nw_q5_ch 0, s0, s1, s2, s3, s4\n  add t1, t1, t3\n"
    "  mico_nw_q5_ch 1, s5, s6, s7, s8, s9\n  add t1, t1, t3\n"
    "  mico_nw_q5_ch 2, s10, s11, a1, a2, a3\n  add t1, t1, t3\n"
    "  mico_nw_q5_ch 3, a4, a5, a6, a7, ra\n"
    "  lw t6, 52(sp)\n  lw t0, 24(t6)\n  lw t1, 8(t6)\n  lw t2, 12(t6)\n"
    "  addi t0, t0, -1\n  addi t1, t1, 5\n  addi t2, t2, 5\n"
    "  sw t0, 24(t6)\n  sw t1, 8(t6)\n  sw t2, 12(t6)\n"
    "  bgtz t0, .Lmico_nw_q5_tile\n"
    "  j .Lmico_nw_q5_ret\n"
    ".Lmico_nw_q5_sums:\n"
    "  lw t0, 32(t6)\n"
    "  sw s0, 0(t0)\n  sw s1, 4(t0)\n  sw s2, 8(t0)\n  sw s3, 12(t0)\n  sw s4, 16(t0)\n"
    "  sw s5, 20(t0)\n  sw s6, 24(t0)\n  sw s7, 28(t0)\n  sw s8, 32(t0)\n  sw s9, 36(t0)\n"
    "  sw s10, 40(t0)\n  sw s11, 44(t0)\n  sw a1, 48(t0)\n  sw a2, 52(t0)\n  sw a3, 56(t0)\n"
    "  sw a4, 60(t0)\n  sw a5, 64(t0)\n  sw a6, 68(t0)\n  sw a7, 72(t0)\n  sw ra, 76(t0)\n"
    ".Lmico_nw_q5_ret:\n"
    "  lw ra, 0(sp)\n  lw s0, 4(sp)\n  lw s1, 8(sp)\n  lw s2, 12(sp)\n  lw s3, 16(sp)\n"
    "  lw s4, 20(sp)\n  lw s5, 24(sp)\n  lw s6, 28(sp)\n  lw s7, 32(sp)\n  lw s8, 36(sp)\n"
    "  lw s9, 40(sp)\n  lw s10, 44(sp)\n  lw s11, 48(sp)\n"
    "  addi sp, sp, 64\n"
    "  ret\n"
    ".size mico_nw_q5_rv32, .-mico_nw_q5_rv32\n"
    ".purgem mico_nw_q5_px\n.purgem mico_nw_q5_tap\n.purgem mico_nw_q5_put\n"
    ".purgem mico_nw_q5_ch\n"
    ".popsection\n");
#else
#define MICO_NW_Q5 mico_nw_q5_c
#endif
/* |bias| + most, saturated at 2^31. */
static uint32_t mico_nw_bound(int32_t bias, uint32_t most)
{
    const uint32_t b = bias < 0 ? 0u - (uint32_t)bias : (uint32_t)bias;
    return b >= 0x80000000u - most ? 0x80000000u : b + most;
}

/* The requantization of channels c0 .. c0 + 3 (the last channel repeated past out_c); shifts
 * of 32 or less take the pre-shifted form (sh 1) when the channel's sums lie below
 * 2^(shift - 1) in magnitude, bias included (`most`: the largest |sum| without the bias). */
static void mico_nw_rq(const MicoConv2d *p, int32_t c0, MicoNwRq *rq, uint32_t most)
{
    int32_t i;
    for (i = 0; i < 4; i++) {
        const int32_t ch = c0 + i < p->out_c ? c0 + i : p->out_c - 1;
        const MicoRq q = mico_rq(&p->out, ch);
        rq[i].m = (uint32_t)q.m;
        rq[i].bias = p->bias[ch];
        rq[i].pre = 0;
        rq[i].sh = q.shift > 32 ? (uint32_t)(q.shift - 32) : 0u; /* 0: not the fast form */
        rq[i].rnd = q.shift > 32 ? 1u << (rq[i].sh - 1u) : 0u;
        if (q.shift <= 32 && mico_nw_bound(rq[i].bias, most) < (1u << (q.shift - 1))) {
            rq[i].pre = (uint32_t)(33 - q.shift);
            rq[i].sh = rq[i].rnd = 1u;
        }
    }
}

/* nq tiles of channels c0.. over 4 pixels each from `pix` (codes x in place, taps xs apart,
 * quads 4 apart), stored: whole tiles of ReLU layers requantized in the tile, the others
 * (channels past out_c, pixels past the plane, other requantizations) through acc. wq: the
 * quad's weights, wq[t][4]. */
static MICO_NOINLINE void mico_nw_run(const MicoConv2d *p, const int8_t *wq, const void *x,
                                      int32_t xs, int32_t taps, const MicoNwRq *rq, int32_t c0,
                                      int32_t pix, void *out, int relu, int32_t nq)
{
    const int32_t npix = p->out_h * p->out_w, sgn = p->in_fmt.is_signed;
    const int32_t nc = p->out_c - c0 < 4 ? p->out_c - c0 : 4, full = (npix - pix) >> 2;
    const int32_t nf = relu && nc == 4 ? (nq < full ? nq : full) : 0;
    const size_t plane = (size_t)npix;
    int32_t acc[16];
    if (nf > 0) {
        uint8_t *o = (uint8_t *)out + (size_t)c0 * plane + (size_t)pix;
        const uint32_t hi = (uint32_t)p->out.hi;
        if (sgn) {
            mico_nw_tile_s8(wq, 4, x, xs, taps, rq, o, plane, hi, nf, acc);
        } else {
            mico_nw_tile_u8(wq, 4, x, xs, taps, rq, o, plane, hi, nf, acc);
        }
        x = (const int8_t *)x + 4 * nf;
        pix += 4 * nf;
        nq -= nf;
    }
    for (; nq > 0 && pix < npix; nq--, pix += 4, x = (const int8_t *)x + 4) {
        if (sgn) {
            mico_nw_tile_s8(wq, 4, x, xs, taps, rq, NULL, plane, 0, 1, acc);
        } else {
            mico_nw_tile_u8(wq, 4, x, xs, taps, rq, NULL, plane, 0, 1, acc);
        }
        mico_nw_store(p, acc, 4, rq, c0, nc, pix, npix - pix < 4 ? npix - pix : 4,
                      (uint8_t *)out, relu);
    }
}

/* The sums of channels c0 .. c0 + 3 at one pixel (acc[4 i]: channel c0 + i). */
static MICO_NOINLINE void mico_nw_col(const MicoConv2d *p, const int8_t *wt, int32_t c4,
                                      const int8_t *x, int32_t xs, int32_t taps,
                                      const MicoNwRq *rq, int32_t *acc)
{
    int32_t a0 = rq[0].bias, a1 = rq[1].bias, a2 = rq[2].bias, a3 = rq[3].bias, t;
    for (t = 0; t < taps; t++, x += xs, wt += c4) {
        const int32_t v = p->in_fmt.is_signed ? (int32_t)*x : (int32_t)*(const uint8_t *)x;
        a0 += wt[0] * v;
        a1 += wt[1] * v;
        a2 += wt[2] * v;
        a3 += wt[3] * v;
    }
    acc[0] = a0;
    acc[4] = a1;
    acc[8] = a2;
    acc[12] = a3;
}

/* ---------------------------------------------------------------- small weights: 16-bit lanes
 * Weights of at most a few units (ternary, 2- or 4-bit codes widened to bytes) times 8-bit
 * codes: a product w * x needs few bits, so two pixels share a word, x_lo + 65536 x_hi, and
 * one multiply by w gives both products, w x_lo + 65536 w x_hi (mod 2^32). While a chunk of K
 * taps keeps every lane's sum within int16 (K max|w| max|x| <= 32767), the word's sum splits
 * exactly back into its two lanes: lo = the low half sign-extended, hi = (sum - lo) >> 16.
 * A tile of 4 channels x 8 pixels (4 words a tap) does 4 word loads, 4 byte loads, 16
 * multiplies and 16 adds for 32 MACs (about 1.3 instructions a MAC); each chunk's sums are
 * split into 32-bit sums, requantized once the taps are done. */

/* The packed patch: in place, row t (16 codes of type T) -> 8 words, word k = code k + 65536
 * code k + 8 (rows taken from the last: a packed row covers byte rows 2t and 2t + 1). */
#define MICO_NW_PACK(NAME, T)                                                                    \
    static MICO_NOINLINE void NAME(void *patch, int32_t tp)                                       \
    {                                                                                             \
        int32_t t, k;                                                                             \
        for (t = tp - 1; t >= 0; t--) {                                                           \
            const T *row = (const T *)patch + t * MICO_NW_LPIX;                                   \
            uint32_t v[8];                                                                        \
            for (k = 0; k < 8; k++) {                                                             \
                v[k] = (uint32_t)(int32_t)row[k] + ((uint32_t)(int32_t)row[k + 8] << 16);         \
            }                                                                                     \
            for (k = 0; k < 8; k++) {                                                             \
                ((uint32_t *)patch)[t * 8 + k] = v[k];                                            \
            }                                                                                     \
        }                                                                                         \
    }
MICO_NW_PACK(mico_nw_pack_s8, int8_t)
MICO_NW_PACK(mico_nw_pack_u8, uint8_t)

#define MICO_NW_LTAP(X, W)                                                                       \
    do {                                                                                          \
        const uint32_t x0 = (X)[0], x1 = (X)[1], x2 = (X)[2], x3 = (X)[3];                        \
        uint32_t w = (uint32_t)(int32_t)(W)[0];                                                   \
        s00 += w * x0;                                                                            \
        s01 += w * x1;                                                                            \
        s02 += w * x2;                                                                            \
        s03 += w * x3;                                                                            \
        MICO_NW_FENCE();                                                                          \
        w = (uint32_t)(int32_t)(W)[1];                                                            \
        s10 += w * x0;                                                                            \
        s11 += w * x1;                                                                            \
        s12 += w * x2;                                                                            \
        s13 += w * x3;                                                                            \
        MICO_NW_FENCE();                                                                          \
        w = (uint32_t)(int32_t)(W)[2];                                                            \
        s20 += w * x0;                                                                            \
        s21 += w * x1;                                                                            \
        s22 += w * x2;                                                                            \
        s23 += w * x3;                                                                            \
        MICO_NW_FENCE();                                                                          \
        w = (uint32_t)(int32_t)(W)[3];                                                            \
        s30 += w * x0;                                                                            \
        s31 += w * x1;                                                                            \
        s32 += w * x2;                                                                            \
        s33 += w * x3;                                                                            \
        MICO_NW_FENCE();                                                                          \
    } while (0)

/* Split a chunk's word sum S into its lanes, added to the 32-bit sums LO and HI. */
#define MICO_NW_SPLIT(S, LO, HI)                                                                 \
    do {                                                                                          \
        const int32_t lo_ = (int32_t)((S) << 16) >> 16;                                           \
        LO += lo_;                                                                                \
        HI += (int32_t)((S) - (uint32_t)lo_) >> 16;                                               \
    } while (0)

/* Taps t0 .. t1 - 1 (a multiple of 8 apart) of the tile of 4 channels (weights wq[t][4]) and
 * the 4 words at x (packed rows of 8 words), split into two sums arrays of mico_nw_store's
 * layout: the pixels x_lo of words 0..3 at acc[4 c + j], x_hi at acc[16 + 4 c + j]. */
static MICO_NOINLINE void mico_nw_ltile(const int8_t *wq, const uint32_t *x, int32_t t0,
                                        int32_t t1, int32_t *acc)
{
    const int8_t *w4 = wq + 4 * t0, *const end = wq + 4 * t1;
    uint32_t s00 = 0, s01 = 0, s02 = 0, s03 = 0, s10 = 0, s11 = 0, s12 = 0, s13 = 0;
    uint32_t s20 = 0, s21 = 0, s22 = 0, s23 = 0, s30 = 0, s31 = 0, s32 = 0, s33 = 0;
    for (x += 8 * t0; w4 < end; w4 += 4, x += 8) { /* (unrolled, gcc spills half the sums) */
        MICO_NW_LTAP(x, w4);
    }
    MICO_NW_SPLIT(s00, acc[0], acc[16]);
    MICO_NW_SPLIT(s01, acc[1], acc[17]);
    MICO_NW_SPLIT(s02, acc[2], acc[18]);
    MICO_NW_SPLIT(s03, acc[3], acc[19]);
    MICO_NW_SPLIT(s10, acc[4], acc[20]);
    MICO_NW_SPLIT(s11, acc[5], acc[21]);
    MICO_NW_SPLIT(s12, acc[6], acc[22]);
    MICO_NW_SPLIT(s13, acc[7], acc[23]);
    MICO_NW_SPLIT(s20, acc[8], acc[24]);
    MICO_NW_SPLIT(s21, acc[9], acc[25]);
    MICO_NW_SPLIT(s22, acc[10], acc[26]);
    MICO_NW_SPLIT(s23, acc[11], acc[27]);
    MICO_NW_SPLIT(s30, acc[12], acc[28]);
    MICO_NW_SPLIT(s31, acc[13], acc[29]);
    MICO_NW_SPLIT(s32, acc[14], acc[30]);
    MICO_NW_SPLIT(s33, acc[15], acc[31]);
}

/* One block of MICO_NW_LPIX pixels from pix0 (packed patch of tp taps, chunks of k taps) for
 * the channel quad c0: two tiles of 8 pixels (words 0..3: pixels 0..3 and 8..11; words 4..7:
 * 4..7 and 12..15), each channel's sums stored as two runs of 4 pixels: through mico_nw_store
 * when every channel has a fast form (mico_nw_rq), else through mico_rq_apply. */
static MICO_NOINLINE void mico_nw_lblock(const MicoConv2d *p, const int8_t *wq,
                                         const uint32_t *patch, int32_t tp, int32_t k,
                                         const MicoNwRq *rq, int32_t c0, int32_t pix0, void *out,
                                         int relu)
{
    const int fast = rq[0].sh && rq[1].sh && rq[2].sh && rq[3].sh;
    const int32_t npix = p->out_h * p->out_w, nc = p->out_c - c0 < 4 ? p->out_c - c0 : 4;
    int32_t acc[32], half, t, c, j, r;
    MicoRq q[4];
    for (c = 0; c < nc && !fast; c++) {
        q[c] = mico_rq(&p->out, c0 + c);
    }
    for (half = 0; half < 2; half++) {
        for (c = 0; c < 4; c++) {
            acc[4 * c] = acc[4 * c + 1] = acc[4 * c + 2] = acc[4 * c + 3] = rq[c].bias;
            acc[16 + 4 * c] = acc[17 + 4 * c] = acc[18 + 4 * c] = acc[19 + 4 * c] = rq[c].bias;
        }
        for (t = 0; t < tp; t += k) {
            mico_nw_ltile(wq, patch + 4 * half, t, t + k < tp ? t + k : tp, acc);
        }
        for (r = 0; r < 2; r++) { /* runs of pixels 4 half + 8 r .. + 3 */
            const int32_t pix = pix0 + 4 * half + 8 * r;
            const int32_t n = npix - pix < 4 ? npix - pix : 4;
            const int32_t *run = acc + 16 * r;
            if (n <= 0) {
                continue;
            }
            if (fast) {
                mico_nw_store(p, run, 4, rq, c0, nc, pix, n, (uint8_t *)out, relu);
                continue;
            }
            for (c = 0; c < nc; c++) { /* any shift: the reference's requantization */
                uint8_t *o = (uint8_t *)out + (size_t)(c0 + c) * (size_t)npix + (size_t)pix;
                for (j = 0; j < n; j++) {
                    o[j] = (uint8_t)mico_rq_apply(&q[c], run[4 * c + j]);
                }
            }
        }
    }
}

/* The patch of a pointwise layer (input planes npix bytes apart, one per tap): `width` bytes
 * of each plane from pix0 (zeros past the plane), zero rows from tap `taps` to tp. */
static MICO_NOINLINE void mico_nw_ppatch(const int8_t *in, int32_t npix, int32_t taps,
                                         int32_t tp, int32_t pix0, int32_t width, int8_t *patch)
{
    const int32_t n = npix - pix0 < width ? npix - pix0 : width;
    const int8_t *src = in + pix0;
    int32_t t, j;
    for (t = 0; t < taps; t++, src += npix, patch += width) {
        if (n == MICO_NW_PIX) { /* written out: two instructions a byte */
            patch[0] = src[0], patch[1] = src[1], patch[2] = src[2], patch[3] = src[3];
            patch[4] = src[4], patch[5] = src[5], patch[6] = src[6], patch[7] = src[7];
            patch[8] = src[8], patch[9] = src[9], patch[10] = src[10], patch[11] = src[11];
            patch[12] = src[12], patch[13] = src[13], patch[14] = src[14], patch[15] = src[15];
            patch[16] = src[16], patch[17] = src[17], patch[18] = src[18], patch[19] = src[19];
            continue;
        }
        if (n == MICO_NW_LPIX && width == MICO_NW_LPIX) { /* the small weights' patches */
            patch[0] = src[0], patch[1] = src[1], patch[2] = src[2], patch[3] = src[3];
            patch[4] = src[4], patch[5] = src[5], patch[6] = src[6], patch[7] = src[7];
            patch[8] = src[8], patch[9] = src[9], patch[10] = src[10], patch[11] = src[11];
            patch[12] = src[12], patch[13] = src[13], patch[14] = src[14], patch[15] = src[15];
            continue;
        }
        for (j = 0; j < n; j++) {
            patch[j] = src[j];
        }
        for (; j < width; j++) {
            patch[j] = 0;
        }
    }
    for (j = 0; j < (tp - taps) * width; j++) {
        patch[j] = 0;
    }
}

/* Signed codes to x + 128 (unsigned bytes, what the byte tile reads): bytes ^ 0x80, a word at
 * a time (n words). */
static MICO_NOINLINE void mico_nw_flip(uint32_t *w, int32_t n)
{
    int32_t i;
    for (i = 0; i < n; i++) {
        w[i] ^= 0x80808080u;
    }
}

/* The requantization of the block's channels c0 .. c1 - 1 (c1 a multiple of 4; channels past
 * out_c repeat the last): signed codes (read as x + 128) start their sums at bias - 128
 * times the channel's weight sum. Only shifts above 32 come here (sh > 0, pre 0). */
static MICO_NOINLINE void mico_nw_rqs(const MicoConv2d *p, int32_t c0, int32_t c1,
                                      int32_t taps, MicoNwRq *rq)
{
    int32_t c, t;
    for (c = c0; c < c1; c += 4, rq += 4) {
        mico_nw_rq(p, c, rq, 0);
        if (p->in_fmt.is_signed) {
            int32_t i;
            for (i = 0; i < 4; i++) {
                const int8_t *w = (const int8_t *)p->weight + (size_t)(c + i) * (size_t)taps;
                int32_t s = 0;
                for (t = 0; t < taps && c + i < p->out_c; t++) {
                    s += w[t];
                }
                rq[i].bias = (int32_t)((uint32_t)rq[i].bias - 128u * (uint32_t)s);
            }
        }
    }
}

/* The tiles of channels c0 .. c0 + 3 over the patch's n pixels from pix0 (wq: the quad's
 * weights, tp taps): whole tiles of a ReLU layer's 4 channels requantized in the tile, the
 * others (the last 1-4 pixels, channels past out_c, other requantizations) through sums. */
static MICO_NOINLINE void mico_nw_tiles(const MicoConv2d *p, const int8_t *wq, int32_t tp,
                                        const uint8_t *patch, const MicoNwRq *rq, int32_t c0,
                                        int32_t pix0, int32_t n, uint8_t *out, int relu)
{
    const int32_t npix = p->out_h * p->out_w, nc = p->out_c - c0 < 4 ? p->out_c - c0 : 4;
    int32_t acc[20], j = 0;
    MicoNwQ5 q;
    q.wq = wq;
    q.wend = wq + 4 * tp;
    q.plane = (uint32_t)npix;
    q.hi = (uint32_t)p->out.hi;
    q.rq = rq;
    q.acc = acc;
    if (relu && nc == 4 && n >= 5) {
        q.x = patch;
        q.o = out + (size_t)c0 * (size_t)npix + (size_t)pix0;
        q.nq = n / 5;
        MICO_NW_Q5(&q);
        j = n / 5 * 5;
    }
    for (; j < n; j += 5) {
        q.x = patch + j;
        q.o = NULL;
        q.nq = 1;
        MICO_NW_Q5(&q);
        mico_nw_store(p, acc, 5, rq, c0, nc, pix0 + j, n - j < 5 ? n - j : 5, out, relu);
    }
}

#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__) &&                              \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define MICO_NW_LE 1 /* byte k of a word is the byte at address + k */
#else
#define MICO_NW_LE 0
#endif

/* Four weight rows (taps a multiple of 4, the rows at aligned addresses) into dst[t], the
 * quad's 4 weights of tap t: a word of each row at a time, 4 x 4 byte transposes (about 10
 * instructions a word against 17 a byte at a time). */
static MICO_NOINLINE void mico_nw_quad4(const uint8_t *r0, int32_t taps, uint32_t *dst)
{
    const uint32_t *a = (const uint32_t *)(const void *)r0;
    const int32_t q = taps >> 2; /* words of a row */
    int32_t i;
    for (i = 0; i < q; i++, dst += 4) {
        const uint32_t w0 = a[i], w1 = a[i + q], w2 = a[i + 2 * q], w3 = a[i + 3 * q];
        const uint32_t t0 = (w0 & 0x00ff00ffu) | ((w1 & 0x00ff00ffu) << 8); /* a0 b0 a2 b2 */
        const uint32_t t1 = ((w0 >> 8) & 0x00ff00ffu) | (w1 & 0xff00ff00u); /* a1 b1 a3 b3 */
        const uint32_t t2 = (w2 & 0x00ff00ffu) | ((w3 & 0x00ff00ffu) << 8);
        const uint32_t t3 = ((w2 >> 8) & 0x00ff00ffu) | (w3 & 0xff00ff00u);
        dst[0] = (t0 & 0xffffu) | (t2 << 16);
        dst[1] = (t1 & 0xffffu) | (t3 << 16);
        dst[2] = (t0 >> 16) | (t2 & 0xffff0000u);
        dst[3] = (t1 >> 16) | (t3 & 0xffff0000u);
    }
}

/* n output codes staged as bytes (two's complement when signed) stored as the b-bit fields
 * (code & mask, lowest bits first) of elements start.. of the packed output (outputs of
 * fewer than 8 bits); the bits of the first and last bytes outside the run are kept. */
static MICO_NOINLINE void mico_nw_codes(void *out, size_t start, const uint8_t *v, int32_t n,
                                        uint32_t b)
{
    const uint32_t mask = (1u << b) - 1u;
    const size_t bit = start * (size_t)b;
    uint8_t *q = (uint8_t *)out + (bit >> 3);
    uint32_t used = (uint32_t)(bit & 7u);
    uint32_t acc = (uint32_t)*q & ((1u << used) - 1u);
    int32_t i = 0;
    if (b == 4u) { /* a byte of two codes at a time (used stays as it is) */
        for (; i + 2 <= n; i += 2) {
            acc |= (((uint32_t)v[i] & 15u) | ((uint32_t)v[i + 1] & 15u) << 4) << used;
            *q++ = (uint8_t)acc;
            acc >>= 8;
        }
    } else if (b == 2u) { /* four codes */
        for (; i + 4 <= n; i += 4) {
            acc |= (((uint32_t)v[i] & 3u) | ((uint32_t)v[i + 1] & 3u) << 2 |
                    ((uint32_t)v[i + 2] & 3u) << 4 | ((uint32_t)v[i + 3] & 3u) << 6)
                   << used;
            *q++ = (uint8_t)acc;
            acc >>= 8;
        }
    }
    for (; i < n; i++) {
        acc |= ((uint32_t)v[i] & mask) << used;
        used += b;
        if (used >= 8u) {
            *q++ = (uint8_t)acc;
            acc >>= 8;
            used -= 8u;
        }
    }
    if (used) {
        const uint32_t keep = (1u << used) - 1u;
        *q = (uint8_t)(((uint32_t)*q & ~keep) | (acc & keep));
    }
}

/* Channels whose requantization constants (and staged outputs) a block keeps. */
static int32_t mico_nw_cb(int32_t c4)
{
    return c4 < MICO_NW_CB ? c4 : MICO_NW_CB;
}

/* Bytes a tap takes in the patch: MICO_NW_PIX codes, or (small weights) MICO_NW_LPIX codes
 * packed into 16-bit lanes (mico_nw_pack_u8: two bytes a code). */
#define MICO_NW_PATCH_PIX(SMALL) ((SMALL) ? 2 * MICO_NW_LPIX : MICO_NW_PIX)

/* Bytes of working memory mico_nw_layer takes for a layer it takes (each part rounded up to 8;
 * mico.codegen.scratch.narrow_bytes computes the same): the weights rearranged (taps padded
 * to 8 when patched, x channels padded to 4), the patch (taps x MICO_NW_PATCH_PIX bytes;
 * `small`: the small weights' packed patches), outputs of fewer than 8 bits staged (a block's
 * channels x MICO_NW_PIX), the block's constants. */
static size_t mico_nw_scratch(const MicoConv2d *p, int small)
{
    const int32_t taps = p->in_c * p->k_h * p->k_w, c4 = (p->out_c + 3) & ~3;
    const int pointwise = p->k_h == 1 && p->k_w == 1 && p->stride_h == 1 && p->stride_w == 1 &&
                          p->pad_h == 0 && p->pad_w == 0;
    const int patched = taps <= (pointwise ? MICO_NW_PTAPS : MICO_NW_TAPS);
    const size_t tp = (size_t)(patched ? (taps + 7) & ~7 : taps);
    const size_t cb = (size_t)mico_nw_cb(c4);
    size_t n = (tp * (size_t)c4 + 7u) & ~(size_t)7u;
    n += patched ? (tp * (size_t)MICO_NW_PATCH_PIX(small) + 7u) & ~(size_t)7u : 0u;
    n += p->out.fmt.bits < 8 ? (cb * MICO_NW_PIX + 7u) & ~(size_t)7u : 0u;
    return n + ((cb * sizeof(MicoNwRq) + 7u) & ~(size_t)7u);
}

/* the most of it a layer takes (the path's limits) */
#define MICO_NW_SCRATCH_MAX                                                                 \
    (MICO_NW_WEIGHTS + MICO_NW_PTAPS * MICO_NW_PIX + MICO_NW_CB * MICO_NW_PIX +              \
     MICO_NW_CB * 24)

/* The layer; 0 (nothing done) when this path does not take it, -1 when it does but ws (wsb
 * bytes) is NULL or short (mico_nw_scratch). Layers of at most
 * MICO_NW_PTAPS taps run over patches (a pointwise layer's: runs of its input planes copied,
 * about 2 instructions a byte against the 64 channels that read it) with taps padded to a
 * multiple of 8 (zero weights); a pointwise layer with more taps reads its planes in place
 * (taps npix bytes apart, one tap per iteration). The weights are rearranged once per call
 * into wq[quad][t][4], channels padded to a multiple of 4 with zero weights. */
static MICO_NOINLINE int mico_nw_layer(const MicoConv2d *p, const void *in, void *out,
                                       uint8_t *ws, size_t wsb)
{
    uint32_t *wq;     /* words: the quads' weights, read as bytes */
    uint32_t *pwords; /* the patch (words: the packed one) */
    int8_t *patch;
    uint8_t *stage; /* outputs of fewer than 8 bits, staged */
    MicoNwRq *rq;
    MicoConv2d ps; /* outputs of fewer than 8 bits: a patch's outputs as a layer of 8-bit ones */
    const int32_t taps = p->in_c * p->k_h * p->k_w, npix = p->out_h * p->out_w;
    const int32_t c4 = (p->out_c + 3) & ~3;
    const int relu = p->out.relu && p->out.lo <= 0 && p->out.hi >= 0;
    const int pointwise = p->k_h == 1 && p->k_w == 1 && p->stride_h == 1 && p->stride_w == 1 &&
                          p->pad_h == 0 && p->pad_w == 0;
    const int patched = taps <= (pointwise ? MICO_NW_PTAPS : MICO_NW_TAPS);
    const int32_t tp = patched ? (taps + 7) & ~7 : taps; /* taps of the weight table */
    int32_t c, t, pix0, c0, cb, j, wmax = 0, chunk = 0;
    int fast = 1;
    const int narrow = p->out.fmt.bits < 8; /* staged as bytes per patch, then packed */
    if (p->groups != 1 || p->w_bits != 8 || p->in_fmt.bits != 8 || p->in_fmt.zero != 0 ||
        p->out.fmt.bits > 8 || p->out.fmt.zero != 0 || p->out.n_mult == 0 || taps < 1 ||
        (!pointwise && !patched) || (narrow && !patched) ||
        (p->out.fmt.bits == 1 && p->out.fmt.is_signed) || tp * c4 > MICO_NW_WEIGHTS ||
        npix < 1) {
        return 0;
    }
    ps = *p;
    ps.out_h = 1;
    for (c = 0; c < (p->out.n_mult > 1 ? p->out_c : 1); c++) {
        fast = fast && p->out.shift[c] > 32;
    }
    if (patched && tp <= MICO_NW_PTAPS / 2) { /* small weights: 16-bit lanes, chunks of taps */
        const int32_t amax = p->in_fmt.is_signed ? 128 : 255;
        for (j = 0; j < taps * p->out_c && wmax <= 16; j++) { /* (W8A8: stops at once) */
            const int32_t v = (int8_t)p->weight[j];
            wmax = v > wmax ? v : -v > wmax ? -v : wmax;
        }
        /* (the scan stops above 16: wmax is then a partial maximum) */
        chunk = wmax > 16 ? 0 : wmax == 0 ? tp : (32767 / (wmax * amax)) & ~7;
        chunk = chunk > tp ? tp : chunk;
    }
    if (!fast && chunk < 8) {
        return 0; /* shifts of 32 or less: only the lanes' requantization takes them */
    }
    if (ws == NULL || mico_nw_scratch(p, chunk >= 8) > wsb) {
        return -1; /* taken, but not in this memory */
    }
    wq = (uint32_t *)mico_carve(&ws, (size_t)(tp * c4));
    pwords = (uint32_t *)mico_carve(&ws, patched ? (size_t)tp * MICO_NW_PATCH_PIX(chunk >= 8)
                                                 : 0u);
    patch = (int8_t *)pwords;
    stage = (uint8_t *)mico_carve(&ws, narrow ? (size_t)mico_nw_cb(c4) * MICO_NW_PIX : 0u);
    rq = (MicoNwRq *)mico_carve(&ws, (size_t)mico_nw_cb(c4) * sizeof(MicoNwRq));
    for (c = 0; c < c4; c += 4) { /* wq[c / 4][t][c % 4] = W[c][t], a word per tap */
        const uint8_t *r0 = p->weight + (size_t)c * (size_t)taps;
        uint32_t *dst = wq + c * tp / 4;
        const int32_t n = p->out_c - c; /* rows of the quad (the others weigh 0) */
        if (n >= 4 && MICO_NW_LE && (taps & 3) == 0 && ((uintptr_t)r0 & 3u) == 0) {
            mico_nw_quad4(r0, taps, dst);
        } else if (n >= 4) {
            for (t = 0; t < taps; t++, r0++) {
                dst[t] = (uint32_t)r0[0] | (uint32_t)r0[taps] << 8 |
                         (uint32_t)r0[2 * taps] << 16 | (uint32_t)r0[3 * taps] << 24;
            }
        } else {
            for (t = 0; t < taps; t++) {
                dst[t] = (uint32_t)r0[t] | (n > 1 ? (uint32_t)r0[t + taps] << 8 : 0u) |
                         (n > 2 ? (uint32_t)r0[t + 2 * taps] << 16 : 0u);
            }
        }
        for (t = taps; t < tp; t++) {
            dst[t] = 0;
        }
    }
    if (!patched) { /* a pointwise layer of many taps: its planes in place */
        const int32_t whole = npix & ~3;
        for (c0 = 0; c0 < c4; c0 += 4) {
            const int8_t *w = (const int8_t *)wq + c0 * tp;
            mico_nw_rq(p, c0, rq, 0);
            if (whole) {
                mico_nw_run(p, w, in, npix, taps, rq, c0, 0, out, relu, whole >> 2);
            }
            for (j = whole; j < npix; j++) { /* the last 1-3 pixels, one at a time */
                int32_t acc[16];
                mico_nw_col(p, w, 4, (const int8_t *)in + j, npix, taps, rq, acc);
                mico_nw_store(p, acc, 4, rq, c0, p->out_c - c0 < 4 ? p->out_c - c0 : 4, j, 1,
                              (uint8_t *)out, relu);
            }
        }
        return 1;
    }
    if (chunk >= 8) { /* small weights: packed patches, 16-bit lanes */
        for (pix0 = 0; pix0 < npix; pix0 += MICO_NW_LPIX) {
            if (pointwise) {
                mico_nw_ppatch((const int8_t *)in, npix, taps, tp, pix0, MICO_NW_LPIX, patch);
            } else {
                mico_nw_patch(p, (const int8_t *)in, pix0, MICO_NW_LPIX, patch);
                for (j = taps * MICO_NW_LPIX; j < tp * MICO_NW_LPIX; j++) {
                    patch[j] = 0; /* the taps padding to a multiple of 8 */
                }
            }
            if (p->in_fmt.is_signed) {
                mico_nw_pack_s8(patch, tp);
            } else {
                mico_nw_pack_u8(patch, tp);
            }
            ps.out_w = npix - pix0 < MICO_NW_LPIX ? npix - pix0 : MICO_NW_LPIX;
            for (c0 = 0; c0 < c4; c0 += 4) {
                mico_nw_rq(p, c0, rq, (uint32_t)(taps * wmax * (p->in_fmt.is_signed ? 128 : 255)));
                if (narrow) { /* channel quads of ps.out_w pixels in the staging bytes */
                    ps.out_c = p->out_c - c0;
                    ps.out.m = p->out.n_mult > 1 ? p->out.m + c0 : p->out.m;
                    ps.out.shift = p->out.n_mult > 1 ? p->out.shift + c0 : p->out.shift;
                    mico_nw_lblock(&ps, (const int8_t *)wq + c0 * tp, pwords, tp, chunk, rq, 0,
                                   0, stage, relu);
                    for (j = 0; j < 4 && c0 + j < p->out_c; j++) {
                        mico_nw_codes(out, (size_t)(c0 + j) * (size_t)npix + (size_t)pix0,
                                      stage + j * ps.out_w, ps.out_w, (uint32_t)p->out.fmt.bits);
                    }
                    continue;
                }
                mico_nw_lblock(p, (const int8_t *)wq + c0 * tp, pwords, tp, chunk, rq, c0, pix0,
                               out, relu);
            }
        }
        return 1;
    }
    for (cb = 0; cb < c4; cb += MICO_NW_CB) { /* blocks of channels, each over every patch */
        const int32_t ce = c4 - cb < MICO_NW_CB ? c4 : cb + MICO_NW_CB;
        mico_nw_rqs(p, cb, ce, taps, rq);
        for (pix0 = 0; pix0 < npix; pix0 += MICO_NW_PIX) {
            const int32_t n = npix - pix0 < MICO_NW_PIX ? npix - pix0 : MICO_NW_PIX;
            if (pointwise) {
                mico_nw_ppatch((const int8_t *)in, npix, taps, tp, pix0, MICO_NW_PIX, patch);
            } else {
                mico_nw_patch(p, (const int8_t *)in, pix0, MICO_NW_PIX, patch);
                for (j = taps * MICO_NW_PIX; j < tp * MICO_NW_PIX; j++) {
                    patch[j] = 0; /* the taps padding to a multiple of 8 */
                }
            }
            if (p->in_fmt.is_signed) {
                mico_nw_flip(pwords, tp * MICO_NW_PIX / 4);
            }
            if (narrow) { /* the block's channels over the patch's n pixels, staged */
                ps.out_w = n;
                ps.out_c = (p->out_c < ce ? p->out_c : ce) - cb;
                ps.out.m = p->out.n_mult > 1 ? p->out.m + cb : p->out.m;
                ps.out.shift = p->out.n_mult > 1 ? p->out.shift + cb : p->out.shift;
                for (c0 = cb; c0 < ce; c0 += 4) {
                    mico_nw_tiles(&ps, (const int8_t *)wq + c0 * tp, tp, (const uint8_t *)patch,
                                  rq + (c0 - cb), c0 - cb, 0, n, stage, relu);
                }
                for (c0 = cb; c0 < ce && c0 < p->out_c; c0++) {
                    mico_nw_codes(out, (size_t)c0 * (size_t)npix + (size_t)pix0,
                                  stage + (c0 - cb) * n, n, (uint32_t)p->out.fmt.bits);
                }
                continue;
            }
            for (c0 = cb; c0 < ce; c0 += 4) {
                mico_nw_tiles(p, (const int8_t *)wq + c0 * tp, tp, (const uint8_t *)patch,
                              rq + (c0 - cb), c0, pix0, n, (uint8_t *)out, relu);
            }
        }
    }
    return 1;
}

/* The layer with its working memory on this function's stack (the most any layer takes): for
 * a caller that planned none (MicoConv2d.scratch NULL or short). */
static MICO_NOINLINE int mico_nw_stack(const MicoConv2d *p, const void *in, void *out)
{
    uint64_t ws[MICO_NW_SCRATCH_MAX / 8];
    return mico_nw_layer(p, in, out, (uint8_t *)ws, sizeof ws);
}

void mico_qconv2d_narrow_s8(const MicoConv2d *p, const void *in, void *out)
{
    int r = mico_nw_layer(p, in, out, (uint8_t *)p->scratch,
                        p->scratch_bytes > 0 ? (size_t)p->scratch_bytes : 0u);
    if (r < 0) {
        r = mico_nw_stack(p, in, out);
    }
    if (!r) {
        mico_qconv2d_tiled_s8(p, in, out);
    }
}
