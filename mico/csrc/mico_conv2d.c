/* Integer 2-D convolution (NCHW, batch 1) on packed codes with packed weights (OIHW).
 * Any kernel, stride, padding (zeros), dilation and groups (depthwise included).
 *
 * IN-PLACE CONTRACT (the planner relies on it to let a depthwise convolution, groups == in_c
 * == out_c, write its output over its own input, displaced): outputs are produced channel by
 * channel, and within a channel output row by output row in increasing order; once any part
 * of output row (c, oy) has been stored, no input that only output rows before (c, oy) need
 * is read again. (Input rows the current or later rows need may be cached on the stack before
 * storing; outputs may be stored later than computed.) Every path below keeps that order.
 *
 * Five paths, all bit-identical to the element-by-element definition:
 *  - W8A8 (8-bit weights and 8-bit codes, taken by mico_qconv2d_tiled when it applies): the
 *    bytes are the codes, nothing is unpacked; a 2-channel x 8-pixel register loop over a byte
 *    patch, or over the input planes themselves for pointwise layers; requantization and the
 *    byte stores fused (see mico_qconv2d_s8). Stack: about 3.3 KB.
 *  - channel lanes (mico_qconv2d_lanes_w<bits>g<G>, chosen by the code generator for 1-, 2-,
 *    4- and 8-bit weights whose output channels per group fill words of F = 32 / bits, when
 *    the widths make it pay): weights stored as words of F channels per tap, several low-bit
 *    products per 32-bit multiply (see the channel-lanes section of mico_nn.h). By output rows
 *    (mico_conv_lr): input rows unpacked once into a ring, a register-tiled block kernel over a
 *    table of tap pointers, requantization fused with the packed stores (stack: about 9 KB);
 *    layers it does not take go over the same im2col patch as below (about 4.2 KB).
 *  - im2col + micro-kernels (most convolutions): for a block of up to 32 output pixels (raster
 *    order, across rows), the taps of a chunk of (ic, ky) kernel rows are unpacked once into a
 *    patch [tap][pixel] of int16 (zeros for padding; each input row span is unpacked once and
 *    copied per kx; a pointwise patch is a run of each input plane). Every pair of output
 *    channels of the group then runs a register-blocked 2-channel x 4-pixel loop over the
 *    chunk, reading 8-, 4-, 2- and 1-bit weights straight from their packed bytes (decoded in
 *    registers, e.g. ((byte ^ 0x88) & 15) - 8; rows may start and end inside a byte: the pair
 *    is chosen so that both rows start at the same bit), or from int8 rows unpacked once per
 *    chunk (other widths). Long reductions are cut into chunks of at most
 *    MICO_CONV_KMAX taps whose partial sums wait in a small stack tile. Rows and chunks of 4-
 *    or 2-bit weights that span whole aligned 32-bit words, on codes whose range fits the
 *    lanes, take words instead: the chunk's codes packed once into words of two or four taps,
 *    two or four products per multiply (mico_mk_mp).
 *  - depthwise 3x3 (any stride, padding, row dilation): a ring of unpacked zero-padded input
 *    rows (the whole padded plane when it fits, so each input code is unpacked once per
 *    channel); each output is a register dot product of its window and the 9 unpacked taps.
 *  - int32 inputs and kernel rows longer than the patch allows (72 or 96 taps): element by
 *    element.
 * Stack (rv32, deepest call chain; the plain paths): about 2.1 KB. */
#include "mico_nn.h"

#define MICO_CONV_PATCH 384 /* int16 elements of the im2col patch (taps x pixels) */
#define MICO_CONV_KMAX 96   /* taps of one reduction chunk */
#define MICO_CONV_TILE 104  /* int32 sums (2 channels x 32 pixels, or 8 channels x 4 pixels)
                               and the patch's column sums */
#define MICO_CONV_TMP 32    /* int16 elements of one unpacked input row span */
#define MICO_DW_BAND 448    /* int16 elements of the depthwise row ring */
#define MICO_DW_ROWS 32     /* most rows in the ring */
#define MICO_DW_OUT 32      /* outputs stored at once */

/* ------------------------------------------------------------------------ generic path */

/* Element by element (int32 inputs, very long kernel rows). */
static MICO_NOINLINE void mico_qconv2d_generic(const MicoConv2d *p, const void *in, void *out)
{
    const int32_t ipg = p->in_c / p->groups, opg = p->out_c / p->groups;
    const int32_t taps = ipg * p->k_h * p->k_w, npix = p->out_h * p->out_w;
    int32_t o, t;
    for (o = 0; o < p->out_c * npix; o++) {
        const int32_t oc = o / npix, oy = o % npix / p->out_w, ox = o % p->out_w;
        const MicoRq rq = mico_rq(&p->out, oc);
        int32_t acc = p->bias[oc];
        for (t = 0; t < taps; t++) { /* tap (ic, ky, kx) of the group */
            const int32_t ic = (oc / opg) * ipg + t / (p->k_h * p->k_w);
            const int32_t iy = oy * p->stride_h - p->pad_h + t / p->k_w % p->k_h * p->dil_h;
            const int32_t ix = ox * p->stride_w - p->pad_w + t % p->k_w * p->dil_w;
            if (iy >= 0 && iy < p->in_h && ix >= 0 && ix < p->in_w) {
                const size_t xi =
                    ((size_t)ic * (size_t)p->in_h + (size_t)iy) * (size_t)p->in_w + (size_t)ix;
                int16_t x16 = 0;
                int8_t w8;
                if (p->in_fmt.bits <= 8) {
                    mico_unpack(in, xi, 1, p->in_fmt, &x16);
                }
                mico_unpack_s8(p->weight, (size_t)oc * (size_t)taps + (size_t)t, 1, p->w_bits,
                               &w8);
                acc += (p->in_fmt.bits <= 8 ? x16 : ((const int32_t *)in)[xi]) * w8;
            }
        }
        mico_rq_run_fast(&rq, &acc, 1);
        mico_pack(out, (size_t)o, &acc, 1, p->out.fmt);
    }
}

/* ------------------------------------------------------------------------ im2col path */

/* Micro-kernels: two output channels (weight rows wa, wb) x four patch columns at a time, over
 * kc taps, for nq groups of four columns (x: the patch, pp columns per tap); ta / tb hold the
 * running sums of channel a / b, four per group; cs holds the patch's column sums. */
typedef void (*MicoMk)(const void *wa, const void *wb, const int16_t *x0, int32_t kc, int32_t pp,
                       int32_t nq, int32_t *ta, int32_t *tb, uint32_t skip, const int32_t *cs,
                       uint32_t bits);

/* Z: the loop sums from zero and adds its sums (less OFF x the column sums) at the end. */
#define MICO_MK_BEGIN(WT, Z)                                                                \
    int32_t q;                                                                              \
    for (q = 0; q < nq; q++, ta += 4, tb += 4, x0 += 4, cs += 4) {                          \
        const WT *wa = (const WT *)wa0, *wb = (const WT *)wb0;                              \
        const int16_t *x = x0, *const x_end = x0 + kc * pp;                                 \
        int32_t a0 = Z ? 0 : ta[0], a1 = Z ? 0 : ta[1], a2 = Z ? 0 : ta[2];                 \
        int32_t a3 = Z ? 0 : ta[3], b0 = Z ? 0 : tb[0], b1 = Z ? 0 : tb[1];                 \
        int32_t b2 = Z ? 0 : tb[2], b3 = Z ? 0 : tb[3];
#define MICO_MK_TAP(u, v)                                                                   \
    do {                                                                                    \
        const int32_t x0_ = x[0], x1_ = x[1], x2_ = x[2], x3_ = x[3];                        \
        a0 += (u) * x0_;                                                                    \
        a1 += (u) * x1_;                                                                    \
        a2 += (u) * x2_;                                                                    \
        a3 += (u) * x3_;                                                                    \
        b0 += (v) * x0_;                                                                    \
        b1 += (v) * x1_;                                                                    \
        b2 += (v) * x2_;                                                                    \
        b3 += (v) * x3_;                                                                    \
    } while (0)
/* The tile plus this chunk's sums, less the offset correction. The correction can take an
 * intermediate outside int32 (a bias saturated near the int32 limit) even though the final
 * value fits, so the sum is formed modulo 2^32 in unsigned arithmetic. */
#define MICO_MK_ADD(T, ACC, Z, OFF, CS)                                                     \
    (T) = (int32_t)((Z ? (uint32_t)(T) - (uint32_t)(OFF) * (uint32_t)(CS) : 0u) +          \
                    (uint32_t)(ACC))
#define MICO_MK_END(Z, OFF)                                                                 \
    MICO_MK_ADD(ta[0], a0, Z, OFF, cs[0]);                                                  \
    MICO_MK_ADD(ta[1], a1, Z, OFF, cs[1]);                                                  \
    MICO_MK_ADD(ta[2], a2, Z, OFF, cs[2]);                                                  \
    MICO_MK_ADD(ta[3], a3, Z, OFF, cs[3]);                                                  \
    MICO_MK_ADD(tb[0], b0, Z, OFF, cs[0]);                                                  \
    MICO_MK_ADD(tb[1], b1, Z, OFF, cs[1]);                                                  \
    MICO_MK_ADD(tb[2], b2, Z, OFF, cs[2]);                                                  \
    MICO_MK_ADD(tb[3], b3, Z, OFF, cs[3]);                                                  \
    }

/* int8 weights: 8-bit weights in place, or any width unpacked. */
static void mico_mk_w8(const void *wa0, const void *wb0, const int16_t *x0, int32_t kc,
                       int32_t pp, int32_t nq, int32_t *ta, int32_t *tb, uint32_t skip,
                       const int32_t *cs, uint32_t bits)
{
    (void)skip;
    (void)bits;
    MICO_MK_BEGIN(int8_t, 0)
    for (; x < x_end; x += pp) {
        const int32_t u = *wa++, v = *wb++;
        MICO_MK_TAP(u, v);
    }
    MICO_MK_END(0, 0)
}

/* 4-, 2- or 1-bit weights straight from their bytes: field f is the weight (f ^ o) - o (two's
 * complement, o = 2^(bits-1)); the loops sum (f ^ o) * x and take o * (column sum) off at
 * the end. A binary weight (1 bit) is 2f - 1: the byte is taken doubled (fields 2f, o = 1). A byte of each row, then its fields tap by tap (a loop, so that one tap's values
 * at a time live in registers; 4-bit rows that span whole bytes take both nibbles at once).
 * Rows may start `skip` fields into their first byte and end inside their last one. */
static void mico_mk_packed(const void *wa0, const void *wb0, const int16_t *x0, int32_t kc,
                           int32_t pp, int32_t nq, int32_t *ta, int32_t *tb, uint32_t skip,
                           const int32_t *cs, uint32_t bits)
{
    const uint32_t bin = bits == 1u; /* binary: fields doubled, at bits 1.. of the word */
    const uint32_t mask = ((1u << bits) - 1u) << bin;
    const uint32_t xor_ = bits == 4 ? 0x88u : bits == 2 ? 0xaau : 0u;
    const int32_t off = (int32_t)(1u << (bits - 1)), step = (int32_t)(8u / bits) * pp;
    const int whole = skip == 0 && kc % (int32_t)(8u / bits) == 0; /* whole bytes */
    MICO_MK_BEGIN(uint8_t, 1)
    const int16_t *x_byte = x + step - (int32_t)skip * pp;
    uint32_t sk = skip * bits;
    while (whole && bits == 4 && x < x_end) {
        const uint32_t ua = *wa++ ^ 0x88u, ub = *wb++ ^ 0x88u;
        MICO_MK_TAP((int32_t)(ua & 15u), (int32_t)(ub & 15u));
        x += pp;
        MICO_MK_TAP((int32_t)(ua >> 4), (int32_t)(ub >> 4));
        x += pp;
    }
    while (whole && bits == 2 && x < x_end) {
        uint32_t ua = *wa++ ^ 0xaau, ub = *wb++ ^ 0xaau;
        for (x_byte = x + step; x < x_byte; x += pp, ua >>= 2, ub >>= 2) {
            MICO_MK_TAP((int32_t)(ua & 3u), (int32_t)(ub & 3u));
        }
    }
    while (x < x_end) {
        uint32_t ua = ((*wa++ ^ xor_) << bin) >> sk, ub = ((*wb++ ^ xor_) << bin) >> sk;
        if (!whole) { /* the first byte from field `skip`, the last one up to the end */
            x_byte = x_byte < x_end ? x_byte : x_end;
            sk = 0;
        }
        for (; x < x_byte; x += pp, ua >>= bits, ub >>= bits) {
            const int32_t u = (int32_t)(ua & mask), v = (int32_t)(ub & mask);
            MICO_MK_TAP(u, v);
        }
        x_byte += step;
    }
    MICO_MK_END(1, off)
}

/* Words of several products a multiply (4- and 2-bit weights whose rows and chunks span whole
 * aligned 32-bit words; mico_linear.c's mico_dot2_mp4 / _mp2 explain the lanes): the chunk's
 * codes are packed once into words xw[(4 i + j) pp + column] (word i of a row, lane group j),
 * and two channels x four columns take one weight word of each channel per step. The sums are
 * of w' x (w' = w + o): the tile gains them less o x the column sums. */
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__) &&                              \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define MICO_CONV_MP 1
#else
#define MICO_CONV_MP 0
#endif
#define MICO_CONV_XW 144 /* words of the packed chunk (72 taps x 4 columns at 4 bits) */

/* The sums as they stand after each lane group, and no load moved across: without it the
 * compiler defers the groups' products (reassociating the sums), loads every group of a word
 * first and spills. */
#if defined(__GNUC__)
#define MICO_MP_SEQ()                                                                       \
    __asm__("" : "+r"(a0), "+r"(a1), "+r"(a2), "+r"(a3), "+r"(b0), "+r"(b1), "+r"(b2),      \
            "+r"(b3)                                                                        \
            :                                                                               \
            : "memory")
#else
#define MICO_MP_SEQ()
#endif

/* One lane group of a weight word (the fields SH.. of va, vb): the four columns' words (x,
 * then the next group's) times the two channels'. */
#define MICO_MP_STEP(SH, TOP)                                                               \
    do {                                                                                    \
        const uint32_t u = (va >> (SH)) & m, v = (vb >> (SH)) & m;                          \
        const uint32_t x0_ = x[0], x1_ = x[1], x2_ = x[2], x3_ = x[3];                      \
        a0 += TOP(x0_ * u);                                                                 \
        a1 += TOP(x1_ * u);                                                                 \
        a2 += TOP(x2_ * u);                                                                 \
        a3 += TOP(x3_ * u);                                                                 \
        b0 += TOP(x0_ * v);                                                                 \
        b1 += TOP(x1_ * v);                                                                 \
        b2 += TOP(x2_ * v);                                                                 \
        b3 += TOP(x3_ * v);                                                                 \
        x += pp;                                                                            \
        MICO_MP_SEQ();                                                                      \
    } while (0)
#define MICO_MP_ALL(t) (t)
#define MICO_MP_TOP_U(t) ((t) >> 24)

/* A row's next word: whole (4-bit rows of whole words, at 4-byte aligned addresses), or of two
 * halfwords (2-bit rows of whole halfwords; the last may be a halfword alone, its high fields
 * then meeting codes 0). */
#define MICO_MP_W32(P, NH) (*(const uint32_t *)(const void *)(P))
#define MICO_MP_W16(P, NH) ((NH) > 1 ? (uint32_t)(P)[0] | (uint32_t)(P)[1] << 16 : (uint32_t)(P)[0])

/* Two channels (rows wa, wb of nh halfwords) x nq groups of four columns of the chunk's words
 * xw (pp a group): the tiles ta, tb gain the sums of w x, those of w' x (FIN of the lane sums)
 * less OFF x the column sums cs. */
#define MICO_MK_MP(NAME, XOR, MASK, D, TOP, LOAD, FIN, OFF)                                 \
    static MICO_NOINLINE void NAME(const uint16_t *wa0, const uint16_t *wb0,                \
                                   const uint32_t *xw, int32_t nh0, int32_t pp, int32_t nq, \
                                   int32_t *ta, int32_t *tb, const int32_t *cs)             \
    {                                                                                       \
        const uint32_t m = (MASK);                                                          \
        int32_t q;                                                                          \
        for (q = 0; q < nq; q++, ta += 4, tb += 4, cs += 4) {                               \
            const uint16_t *wa = wa0, *wb = wb0;                                            \
            const uint32_t *x = xw + 4 * q;                                                 \
            uint32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, b0 = 0, b1 = 0, b2 = 0, b3 = 0;        \
            int32_t nh;                                                                     \
            for (nh = nh0; nh > 0; nh -= 2, wa += 2, wb += 2) {                             \
                const uint32_t va = LOAD(wa, nh) ^ (XOR), vb = LOAD(wb, nh) ^ (XOR);        \
                MICO_MP_STEP(0, TOP);                                                       \
                MICO_MP_STEP((D), TOP);                                                     \
                MICO_MP_STEP(2 * (D), TOP);                                                 \
                MICO_MP_STEP(3 * (D), TOP);                                                 \
            }                                                                               \
            MICO_MK_ADD(ta[0], FIN(a0), 1, OFF, cs[0]);                                     \
            MICO_MK_ADD(ta[1], FIN(a1), 1, OFF, cs[1]);                                     \
            MICO_MK_ADD(ta[2], FIN(a2), 1, OFF, cs[2]);                                     \
            MICO_MK_ADD(ta[3], FIN(a3), 1, OFF, cs[3]);                                     \
            MICO_MK_ADD(tb[0], FIN(b0), 1, OFF, cs[0]);                                     \
            MICO_MK_ADD(tb[1], FIN(b1), 1, OFF, cs[1]);                                     \
            MICO_MK_ADD(tb[2], FIN(b2), 1, OFF, cs[2]);                                     \
            MICO_MK_ADD(tb[3], FIN(b3), 1, OFF, cs[3]);                                     \
        }                                                                                   \
    }
/* 4 bits: the sums are the high halves of the 16-bit lane sums (each low half sign extended
 * and taken off first); 2 bits: the sums as they are. */
#define MICO_MP_HI(A) ((int32_t)((A) - (uint32_t)(int32_t)(int16_t)((A) & 0xffffu)) >> 16)
#define MICO_MP_SUM(A) ((int32_t)(A))
MICO_MK_MP(mico_mk_mp4, 0x88888888u, 0x000f000fu, 4, MICO_MP_ALL, MICO_MP_W32, MICO_MP_HI, 8)
MICO_MK_MP(mico_mk_mp2, 0xaaaaaaaau, 0x03030303u, 2, MICO_MP_TOP_U, MICO_MP_W16, MICO_MP_SUM, 2)

/* Whether the word kernels take chunks of up to kc codes of format f with wb-bit weights,
 * from the codes' range (every field value counted): 4 bits: 15 kc max |x| below 2^15;
 * 2 bits: codes in [0, 21]. Otherwise the lanes could overflow: the byte loops. */
static int mico_conv_mp_kind(MicoFmt f, int32_t kc, int32_t wb)
{
    const MicoFieldMap m = mico_field_map(f);
    const int32_t lo = -m.o, hi = (int32_t)(m.mask << m.sh) - m.o;
    const int32_t amax = hi > -lo ? hi : -lo;
    if (f.bits > 8) {
        return 0;
    }
    return wb == 4 ? 15 * kc * amax <= 32767 : lo >= 0 && hi <= 21;
}

/* The words of a patch of kc taps x pp columns for 4- or 2-bit weights (see above), and the
 * columns' sums cs; taps past kc in the last word read as 0. */
static MICO_NOINLINE void mico_conv_mp_words(const int16_t *patch, int32_t kc, int32_t pp,
                                             int32_t wb, uint32_t *xw, int32_t *cs)
{
    const int32_t per = 32 / wb, full = kc / per; /* taps of a word, whole words */
    int32_t c, i, j;
    for (c = 0; c < pp; c++) {
        const int16_t *x = patch + c;
        uint32_t *w = xw + c, sum = 0;
        for (i = 0; i < full; i++, x += per * pp) {
            const int16_t *xj = x;
            for (j = 0; j < 4; j++, xj += pp, w += pp) { /* lanes: taps j, j + 4, .. */
                const uint32_t v0 = (uint32_t)(int32_t)xj[0], v4 = (uint32_t)(int32_t)xj[4 * pp];
                if (wb == 4) {
                    *w = v4 + (v0 << 16);
                    sum += v0 + v4;
                } else {
                    const uint32_t v8 = (uint32_t)(int32_t)xj[8 * pp];
                    const uint32_t v12 = (uint32_t)(int32_t)xj[12 * pp];
                    *w = v12 + (v8 << 8) + (v4 << 16) + (v0 << 24);
                    sum += v0 + v4 + v8 + v12;
                }
            }
        }
        if (full * per < kc) { /* 2 bits: a last halfword, taps j and j + 4 of 8 */
            const int16_t *xj = x;
            for (j = 0; j < 4; j++, xj += pp, w += pp) {
                const uint32_t v0 = (uint32_t)(int32_t)xj[0], v4 = (uint32_t)(int32_t)xj[4 * pp];
                *w = (v4 << 16) + (v0 << 24);
                sum += v0 + v4;
            }
        }
        cs[c] = (int32_t)sum;
    }
}

/* cs[j] = the sum of column j (of pp) over the first kc taps of the patch. */
static MICO_NOINLINE void mico_conv_colsums(const int16_t *patch, int32_t kc, int32_t pp,
                                            int32_t *cs)
{
    int32_t j;
    for (j = 0; j < pp; j++) {
        const int16_t *x = patch + j, *const end = x + kc * pp;
        int32_t sum = 0;
        for (; x < end; x += pp) {
            sum += *x;
        }
        cs[j] = sum;
    }
}

/* Pixel lanes (4- and 2-bit weights whose rows do not take the word kernels: rows of a few
 * taps, or starting inside a byte): the patch's codes of one tap packed into words of two
 * columns (16-bit lanes) or four (byte lanes), xp[t (pp / L) + j]; one weight times a word
 * then makes L products at once (mod 2^32: codes and weights of either sign), each column's
 * sum in its own lane. A lane sums kc products of at most max |x| 2^(bits-1) in magnitude:
 * below 2^15 (16-bit lanes) or 2^7 (bytes) (mico_conv_px_kind), each lane is its low bits
 * sign extended once the lanes below it are taken off. */
#define MICO_PX_LO16(A) ((int32_t)(int16_t)((A) & 0xffffu))
#define MICO_PX_HI16(A) ((int32_t)((A) - (uint32_t)MICO_PX_LO16(A)) >> 16)

/* The lanes of pixel words: 2 (16-bit lanes) or 4 (bytes) per word, 0 when a lane could
 * overflow. */
static int mico_conv_px_kind(MicoFmt f, int32_t kc, int32_t wb)
{
    const MicoFieldMap m = mico_field_map(f);
    const int32_t lo = -m.o, hi = (int32_t)(m.mask << m.sh) - m.o;
    const int32_t amax = hi > -lo ? hi : -lo, wmax = 1 << (wb - 1);
    if (f.bits > 8 || (wb != 4 && wb != 2)) {
        return 0;
    }
    return kc * amax * wmax <= 127 ? 4 : kc * amax * wmax <= 32767 ? 2 : 0;
}

/* The pixel words of a patch of kc taps x pp columns, L columns a word. */
static MICO_NOINLINE void mico_conv_px_words(const int16_t *patch, int32_t kc, int32_t pp,
                                             int32_t lanes, uint32_t *xp)
{
    const int16_t *const end = patch + kc * pp;
    int32_t j;
    for (; patch < end; patch += pp) {
        for (j = 0; j < pp; j += lanes) {
            const int16_t *x = patch + j;
            const uint32_t x0 = (uint32_t)(int32_t)x[0], x1 = (uint32_t)(int32_t)x[1];
            if (lanes == 2) {
                *xp++ = x0 + (x1 << 16);
            } else {
                *xp++ = x0 + (x1 << 8) + ((uint32_t)(int32_t)x[2] << 16) +
                        ((uint32_t)(int32_t)x[3] << 24);
            }
        }
    }
}

/* The lane sums of columns: n words of each channel's (a and b), lanes L, into va / vb. */
static void mico_px_lanes(const uint32_t *a, const uint32_t *b, int32_t n, int32_t lanes,
                          int32_t *va, int32_t *vb)
{
    int32_t i, k;
    for (i = 0; i < n; i++) {
        uint32_t u = a[i], v = b[i];
        if (lanes == 2) {
            va[2 * i] = MICO_PX_LO16(u);
            va[2 * i + 1] = MICO_PX_HI16(u);
            vb[2 * i] = MICO_PX_LO16(v);
            vb[2 * i + 1] = MICO_PX_HI16(v);
            continue;
        }
        for (k = 0; k < 4; k++) { /* each byte sign extended, then taken off */
            va[4 * i + k] = (int32_t)(int8_t)(u & 0xffu);
            vb[4 * i + k] = (int32_t)(int8_t)(v & 0xffu);
            u = (uint32_t)((int32_t)(u - (uint32_t)va[4 * i + k]) >> 8);
            v = (uint32_t)((int32_t)(v - (uint32_t)vb[4 * i + k]) >> 8);
        }
    }
}

/* Two channels (packed rows wa, wb, both from bit `skip * bits` of their first byte) x the
 * pp columns of pixel words xp (L = lanes columns a word) over kc taps: the tiles (4 nq
 * columns) gain the sums of w x. The rows' weights are decoded once; then up to four words
 * of columns of each channel go together over the taps. */
static MICO_NOINLINE void mico_mk_px(const uint8_t *wa, const uint8_t *wb, const uint32_t *xp,
                                     int32_t kc, int32_t pp, int32_t nq, int32_t *ta,
                                     int32_t *tb, uint32_t skip, uint32_t bits, int32_t lanes)
{
    const uint32_t mask = (1u << bits) - 1u, o = 1u << (bits - 1u);
    const int32_t wpt = pp / lanes, used = (4 * nq + lanes - 1) / lanes; /* words of a tap */
    int8_t wu[2 * MICO_CONV_KMAX]; /* the two rows' weights, decoded once */
    uint32_t at = skip * bits;
    int32_t t, g, k;
    for (t = 0; t < kc; t++, at += bits) {
        wu[2 * t] = (int8_t)((int32_t)((((uint32_t)wa[at >> 3] >> (at & 7u)) & mask) ^ o) -
                             (int32_t)o);
        wu[2 * t + 1] = (int8_t)((int32_t)((((uint32_t)wb[at >> 3] >> (at & 7u)) & mask) ^ o) -
                                 (int32_t)o);
    }
    for (g = 0; g < used; g += 4) { /* up to four words of columns a pass */
        const uint32_t *x = xp + g;
        const int8_t *w = wu, *const w_end = wu + 2 * kc;
        const int32_t nw = used - g < 4 ? used - g : 4;
        uint32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, b0 = 0, b1 = 0, b2 = 0, b3 = 0, a[4], b[4];
        int32_t va[16], vb[16];
        if (nw > 2) { /* four words (the patch is zero past its columns) */
            for (; w < w_end; w += 2, x += wpt) {
                const uint32_t u = (uint32_t)(int32_t)w[0], v = (uint32_t)(int32_t)w[1];
                a0 += x[0] * u;
                a1 += x[1] * u;
                a2 += x[2] * u;
                a3 += x[3] * u;
                b0 += x[0] * v;
                b1 += x[1] * v;
                b2 += x[2] * v;
                b3 += x[3] * v;
            }
        } else {
            for (; w < w_end; w += 2, x += wpt) {
                const uint32_t u = (uint32_t)(int32_t)w[0], v = (uint32_t)(int32_t)w[1];
                a0 += x[0] * u;
                b0 += x[0] * v;
                if (nw > 1) {
                    a1 += x[1] * u;
                    b1 += x[1] * v;
                }
            }
        }
        a[0] = a0, a[1] = a1, a[2] = a2, a[3] = a3;
        b[0] = b0, b[1] = b1, b[2] = b2, b[3] = b3;
        mico_px_lanes(a, b, nw, lanes, va, vb);
        for (k = 0; k < nw * lanes && g * lanes + k < 4 * nq; k++) {
            const int32_t col = g * lanes + k;
            ta[col] = (int32_t)((uint32_t)ta[col] + (uint32_t)va[k]);
            tb[col] = (int32_t)((uint32_t)tb[col] + (uint32_t)vb[k]);
        }
    }
}

/* The word and pixel-lane kernels, linked only by programs that call
 * mico_qconv2d_tiled_sub4 / _sub2 (layers of 4- or 2-bit weights): mico_qconv2d_im2col takes
 * them through one of these tables (a width's word kernels, NULL for the other width), NULL for
 * the other entry points. */
struct MicoConvCtx;
typedef struct MicoConvWordsS {
    void (*mp4)(const uint16_t *, const uint16_t *, const uint32_t *, int32_t, int32_t, int32_t,
                int32_t *, int32_t *, const int32_t *);
    void (*mp2)(const uint16_t *, const uint16_t *, const uint32_t *, int32_t, int32_t, int32_t,
                int32_t *, int32_t *, const int32_t *);
    void (*px)(const uint8_t *, const uint8_t *, const uint32_t *, int32_t, int32_t, int32_t,
               int32_t *, int32_t *, uint32_t, uint32_t, int32_t);
    void (*mp_words)(const int16_t *, int32_t, int32_t, int32_t, uint32_t *, int32_t *);
    void (*px_words)(const int16_t *, int32_t, int32_t, int32_t, uint32_t *);
    void (*plan)(struct MicoConvCtx *, int32_t);
} MicoConvWords;

/* n codes of the row starting at element `row` (width codes) from column ix0, columns outside
 * [0, width) as 0, like mico_unpack_padded; 1-, 2- and 4-bit codes (fields inside a byte) are
 * read field by field here, which costs less than the run reader's setup on the short spans
 * of a patch. */
static void mico_patch_span(const void *in, size_t row, int32_t width, int32_t ix0, int32_t n,
                            MicoFmt f, int16_t *dst)
{
    const MicoFieldMap m = mico_field_map(f);
    const uint8_t *q = (const uint8_t *)in;
    int32_t i;
    size_t bit;
    if (f.bits != 4 && f.bits != 2 && f.bits != 1) {
        mico_unpack_padded(in, row, width, ix0, n, 0, f, dst);
        return;
    }
    bit = (row + (size_t)(ix0 > 0 ? ix0 : 0)) * m.bits;
    for (i = 0; i < n; i++) {
        const int32_t ix = ix0 + i;
        if (ix < 0 || ix >= width) {
            dst[i] = 0;
            continue;
        }
        const uint32_t field = ((uint32_t)q[bit >> 3] >> (bit & 7u)) & m.mask;
        dst[i] = (int16_t)((int32_t)((field ^ m.x) << m.sh) - m.o);
        bit += m.bits;
    }
}

/* The tile's sums of channels oc0 .. oc1 - 1, MICO_TILE_PX apart, for pixels pix0 .. pix0 +
 * np - 1 requantized and stored (a function of its own: the callers' loops hold their
 * scratch's pointers, and one copy serves both kernels that store tiles so). */
MICO_NOINLINE void mico_conv_tile_store(const MicoConv2d *p, int32_t *tile, int32_t oc0,
                                        int32_t oc1, int32_t pix0, int32_t np, void *out)
{
    const size_t npix = (size_t)p->out_h * (size_t)p->out_w;
    int32_t oc;
    for (oc = oc0; oc < oc1; oc++, tile += MICO_TILE_PX) {
        const MicoRq rq = mico_rq(&p->out, oc);
        mico_rq_pack(&rq, tile, np, out, (size_t)oc * npix + (size_t)pix0, p->out.fmt);
    }
}

/* The patch of kernel rows [r0, r1) (row = ic * k_h + ky within the group starting at input
 * channel ic0) for output pixels pix0 .. pix0 + np - 1: patch[(r - r0) * k_w + kx][j], pp
 * columns per tap; padding and the columns np .. pp - 1 are zeros. */
MICO_NOINLINE void mico_conv_patch(const MicoConv2d *p, const void *in, int32_t ic0, int32_t r0,
                                   int32_t r1, int32_t pix0, int32_t np, int32_t pp,
                                   int16_t *patch)
{
    const size_t in_plane = (size_t)p->in_h * (size_t)p->in_w;
    const int32_t kw = p->k_w, sw = p->stride_w, dw = p->dil_w;
    const int32_t max_seg = (MICO_CONV_TMP - 1) / sw + 1; /* pixels whose span fits tmp */
    int16_t tmp[MICO_CONV_TMP];
    int32_t i, j, r;
    for (i = np < pp ? 0 : (r1 - r0) * kw * pp; i < (r1 - r0) * kw * pp; i++) {
        patch[i] = 0;
    }
    if (p->k_h == 1 && kw == 1 && p->stride_h == 1 && sw == 1 && p->pad_h == 0 &&
        p->pad_w == 0) { /* pointwise: the taps of a pixel run are a run of one input plane */
        for (r = r0; r < r1; r++) {
            mico_unpack(in, (size_t)(ic0 + r) * in_plane + (size_t)pix0, np, p->in_fmt,
                        patch + (r - r0) * pp);
        }
        return;
    }
    for (j = 0; j < np;) { /* runs of pixels within one output row */
        const int32_t oy = (pix0 + j) / p->out_w, ox = (pix0 + j) % p->out_w;
        int32_t seg = np - j < p->out_w - ox ? np - j : p->out_w - ox;
        seg = seg < max_seg ? seg : max_seg;
        for (r = r0; r < r1; r++) {
            const int32_t iy = oy * p->stride_h - p->pad_h + (r % p->k_h) * p->dil_h;
            int16_t *dst = patch + (r - r0) * kw * pp + j;
            int32_t kx0, kx, t;
            if (iy < 0 || iy >= p->in_h) {
                for (kx = 0; np == pp && kx < kw; kx++, dst += pp) {
                    for (t = 0; t < seg; t++) {
                        dst[t] = 0;
                    }
                }
                continue;
            }
            for (kx0 = 0; kx0 < kw;) { /* taps whose row span fits tmp: unpacked once */
                const int32_t nk = (MICO_CONV_TMP - (seg - 1) * sw - 1) / dw + 1;
                const int32_t kx1 = kw - kx0 < nk ? kw : kx0 + nk;
                mico_patch_span(in,
                                (size_t)(ic0 + r / p->k_h) * in_plane + (size_t)iy * (size_t)p->in_w,
                                p->in_w, ox * sw - p->pad_w + kx0 * dw,
                                (seg - 1) * sw + (kx1 - 1 - kx0) * dw + 1, p->in_fmt, tmp);
                for (kx = kx0; kx < kx1; kx++, dst += pp) {
                    const int16_t *src = tmp + (kx - kx0) * dw;
                    for (t = 0; t < seg; t++, src += sw) {
                        dst[t] = *src;
                    }
                }
                kx0 = kx1;
            }
        }
        j += seg;
    }
}

/* What the im2col loops share. */
typedef struct MicoConvCtx {
    const MicoConv2d *p;
    void *out;
    MicoMk mk;     /* the micro-kernel */
    int32_t k_all; /* taps of one output channel */
    int32_t npix;  /* output pixels of one channel */
    int32_t pp;    /* patch columns */
    int32_t fused;  /* weights read straight from their packed bytes */
    int32_t period; /* channels oc and oc + period start rows at the same bit of a byte */
    int8_t *wrow;   /* two unpacked weight rows (at the end of the patch buffer) */
    int32_t multi; /* several chunks: sums wait in the tile, four per channel */
    const struct MicoConvWordsS *words; /* the word and pixel-lane kernels, or NULL */
    int32_t mp;                 /* rows and chunks of whole words (or halfwords) */
    const uint32_t *xw;         /* the chunk's words for those kernels */
    int32_t mpv;                /* the word kernels take the layer */
    int32_t px; /* pixel lanes: columns a word (2 or 4), or 0 */
} MicoConvCtx;

/* Which kernels of the table take the layer (c: its geometry; kc: taps of a chunk): the word
 * kernels for rows and chunks of whole words (4 bits, aligned) or halfwords (2 bits) whose
 * lanes the codes fit; else pixel lanes for rows mico_mk_packed reads field by field (not
 * whole bytes: the lanes pay there; a whole-byte row costs it less than decoding the row). */
static void mico_conv_words_plan(MicoConvCtx *c, int32_t kc)
{
    const MicoConv2d *p = c->p;
    const int32_t wb = p->w_bits;
    c->mp = MICO_CONV_MP && (wb == 4 ? c->words->mp4 : wb == 2 ? c->words->mp2 : NULL) &&
            (c->k_all * wb) % (8 * wb) == 0 &&
            (kc * wb) % (8 * wb) == 0 && ((uintptr_t)p->weight & (uintptr_t)(wb - 1)) == 0 &&
            (kc + 32 / wb - 1) / (32 / wb) * 4 * c->pp <= MICO_CONV_XW;
    c->mpv = c->mp ? mico_conv_mp_kind(p->in_fmt, kc, wb) : 0;
    c->px = c->mpv || !c->fused || kc * c->pp / 2 > MICO_CONV_XW ||
                    (c->period == 1 && (kc * wb) % 8 == 0)
                ? 0
                : mico_conv_px_kind(p->in_fmt, kc, wb);
}

/* One table a weight width (mico_qconv2d_tiled_sub4 / _sub2), so that a program links only
 * its widths' word kernels; the pixel lanes serve both. */
static const MicoConvWords mico_conv_words4 = {mico_mk_mp4, NULL, mico_mk_px, mico_conv_mp_words,
                                               mico_conv_px_words, mico_conv_words_plan};
static const MicoConvWords mico_conv_words2 = {NULL, mico_mk_mp2, mico_mk_px, mico_conv_mp_words,
                                               mico_conv_px_words, mico_conv_words_plan};

/* mico_rq_run_fast, with the case it leaves to mico_rq_apply's 64-bit rescaling -- a shift of
 * at most 32 (large output scales: 2-bit outputs, say) on codes of at most 16 bits -- in a loop
 * of its own: with m >= 2 (H + 1) (H: the largest magnitude the clamp lets through), a
 * magnitude of at least 2^(shift - 1) rounds to at least m / 2 > H and is clamped; a smaller
 * one, shifted left by 33 - shift, fits 32 bits and rounds through the high word of one
 * 32 x 32 product: round(mag m / 2^shift) = (floor(mag m 2^(33 - shift) / 2^32) + 1) >> 1. */
static MICO_NOINLINE void mico_conv_rq(const MicoRq *q, int32_t *v, int32_t n)
{
    const int32_t lo = q->lo, hi = q->hi, big = hi > -lo ? hi : -lo;
    const uint32_t m = (uint32_t)q->m, sh = (uint32_t)q->shift;
    int32_t i;
    if (!q->scaled || q->binary || q->shift > 32 || lo < -32768 || hi > 32767 ||
        (uint64_t)m < 2u * ((uint64_t)(uint32_t)big + 1u)) {
        mico_rq_run_fast(q, v, n);
        return;
    }
    for (i = 0; i < n; i++) {
        const int32_t r = q->relu && v[i] < 0 ? 0 : v[i];
        const uint32_t mag = r < 0 ? 0u - (uint32_t)r : (uint32_t)r;
        int32_t y;
        if (mag >= 1u << (sh - 1u)) {
            y = r < 0 ? lo : hi;
        } else {
            const uint32_t t = (uint32_t)(((uint64_t)(mag << (33u - sh)) * m) >> 32);
            const int32_t qv = (int32_t)((t + 1u) >> 1);
            y = r < 0 ? -qv : qv;
            y = y < lo ? lo : y > hi ? hi : y;
        }
        v[i] = y;
    }
}

/* Channels oc0 .. oc1 - 1 over one patch (taps of kernel rows r0 .. r0 + kc / k_w - 1 of
 * pixels pix0 .. pix0 + np - 1); the last chunk requantizes and stores. Channels go in pairs:
 * (oc, oc + period), whose packed weight rows start at the same bit of a byte, read in place;
 * the channels left over (period > 1), in consecutive pairs through unpacked int8 rows. An odd
 * one out is computed twice. */
static MICO_NOINLINE void mico_conv_chunk(const MicoConvCtx *c, const int16_t *patch,
                                          const int32_t *cs, int32_t *tile, int32_t oc0,
                                          int32_t oc1, int32_t r0, int32_t kc, int last,
                                          int32_t pix0, int32_t np)
{
    const MicoConv2d *p = c->p;
    const int32_t wb = p->w_bits, nq = (np + 3) / 4, per = c->fused ? 8 / wb : 1;
    const int32_t paired = !c->fused ? 0
                           : c->period == 1 ? oc1 - oc0
                                            : (oc1 - oc0) / (2 * c->period) * 2 * c->period;
    int32_t i, next, j, k;
    for (i = oc0; i < oc1; i = next) {
        const int fused = i - oc0 < paired;
        const int32_t j2 = fused ? i + c->period : i + 1; /* the partner, if any */
        const int32_t ocs[2] = {i, j2 < oc1 ? j2 : i};
        const void *wp[2];
        int32_t *t[2];
        size_t at = 0;
        for (k = 0; k < 2; k++) {
            /* a channel computed twice keeps its second copy in a slot of its own (the tile
             * has one to spare then: the chunk holds an odd number of channels) */
            const int32_t slot = k == 1 && ocs[1] == i ? i + 1 : ocs[k];
            at = (size_t)ocs[k] * (size_t)c->k_all + (size_t)r0 * (size_t)p->k_w;
            t[k] = c->multi ? tile + (slot - oc0) * 4 : tile + k * c->pp;
            if (fused) {
                wp[k] = p->weight + at * (size_t)wb / 8u;
            } else {
                mico_unpack_s8(p->weight, at, kc, wb, c->wrow + k * kc);
                wp[k] = c->wrow + k * kc;
            }
            for (j = 0; r0 == 0 && j < 4 * nq; j++) {
                t[k][j] = p->bias[ocs[k]];
            }
        }
        if (fused && c->mpv) { /* words of several products a multiply */
            (wb == 4 ? c->words->mp4 : c->words->mp2)((const uint16_t *)wp[0],
                                                      (const uint16_t *)wp[1], c->xw,
                                                      kc * wb / 16, c->pp, nq, t[0], t[1], cs);
        } else if (fused && c->px) { /* pixel lanes */
            c->words->px((const uint8_t *)wp[0], (const uint8_t *)wp[1], c->xw, kc, c->pp, nq,
                         t[0], t[1], (uint32_t)(at % (size_t)per), (uint32_t)wb, c->px);
        } else {
            (fused ? c->mk : mico_mk_w8)(wp[0], wp[1], patch, kc, c->pp, nq, t[0], t[1],
                                         (uint32_t)(at % (size_t)per), cs, (uint32_t)wb);
        }
        /* next: i + 1 within the first half of a block of 2 * period paired channels */
        next = !fused ? i + 2 : (i - oc0) % (2 * c->period) == c->period - 1 ? i + c->period + 1
                                                                             : i + 1;
        for (k = 0; last && k < 2 - (ocs[1] == i); k++) { /* requantize and store */
            const MicoRq rq = mico_rq(&p->out, ocs[k]);
            (rq.shift > 32 ? mico_rq_run_fast : mico_conv_rq)(&rq, t[k], np);
            mico_pack(c->out, (size_t)ocs[k] * (size_t)c->npix + (size_t)pix0, t[k], np,
                      p->out.fmt);
        }
    }
}

static MICO_NOINLINE void mico_qconv2d_im2col(const MicoConv2d *p, const void *in, void *out,
                                                const MicoConvWords *words, uint32_t *xw)
{
    const int32_t ipg = p->in_c / p->groups, opg = p->out_c / p->groups;
    const int32_t kw = p->k_w, wb = p->w_bits;
    const int32_t rows = ipg * p->k_h; /* kernel rows (ic, ky) of one output channel */
    int16_t patch[MICO_CONV_PATCH];
    int32_t tile[MICO_CONV_TILE], *cs;
    int32_t rpc, room, oct, g, oc0, pix0, r0;
    MicoConvCtx c;

    c.p = p;
    c.out = out;
    c.k_all = rows * kw;
    c.npix = p->out_h * p->out_w;
    c.fused = wb == 8 || wb == 4 || wb == 2 || wb == 1;
    c.mk = !c.fused || wb == 8 ? mico_mk_w8 : mico_mk_packed;
    for (c.period = 1; c.fused && (c.period * c.k_all * wb) % 8 != 0;) {
        c.period++;
    }
    /* unpacked weight rows (unfused widths, channels left unpaired) take the buffer's end */
    room = !c.fused || c.period > 1 ? MICO_CONV_PATCH - MICO_CONV_KMAX : MICO_CONV_PATCH;
    c.wrow = (int8_t *)(patch + room);
    rpc = room / (4 * kw) < MICO_CONV_KMAX / kw ? room / (4 * kw) : MICO_CONV_KMAX / kw;
    rpc = rows < rpc ? rows : rpc; /* kernel rows per chunk (at least 4 pixels of room) */
    if (rpc == 0) { /* a kernel row longer than that */
        mico_qconv2d_generic(p, in, out);
        return;
    }
    c.pp = (rows + rpc - 1) / rpc; /* (here) the number of chunks */
    r0 = (rows + c.pp - 1) / c.pp; /* kernel rows of each, balanced */
    while (r0 < rpc && (r0 * kw * wb) % 8 != 0) {
        r0++; /* chunks that end on a byte boundary, where one can */
    }
    rpc = (r0 * kw * wb) % 8 == 0 ? r0 : (rows + c.pp - 1) / c.pp;
    c.multi = rpc < rows;
    if (!c.multi) { /* one chunk: each channel pair finishes at once */
        c.pp = (room / c.k_all) & ~3;
        c.pp = c.pp < 32 ? c.pp : 32; /* the tile holds two channels of pixels */
        oct = opg;
    } else { /* the partial sums of 8 channels wait in the tile */
        c.pp = 4;
        oct = 8;
    }
    cs = tile + (c.multi ? 4 * oct : 2 * c.pp);
    /* whole aligned words: every row, and every chunk (rpc kernel rows), of 32-bit words */
    /* rows and chunks of whole words (4 bits) or halfwords (2 bits), the words in xw */
    c.words = words;
    c.mp = c.mpv = c.px = 0;
    if (words != NULL) {
        words->plan(&c, rpc * kw);
    }
    c.xw = xw;
    for (g = 0; g < p->groups; g++) {
        for (oc0 = g * opg; oc0 < (g + 1) * opg; oc0 += oct) {
            const int32_t oc1 = oc0 + oct < (g + 1) * opg ? oc0 + oct : (g + 1) * opg;
            for (pix0 = 0; pix0 < c.npix; pix0 += c.pp) {
                const int32_t np = c.npix - pix0 < c.pp ? c.npix - pix0 : c.pp;
                for (r0 = 0; r0 < rows; r0 += rpc) {
                    const int32_t r1 = r0 + rpc < rows ? r0 + rpc : rows;
                    mico_conv_patch(p, in, g * ipg, r0, r1, pix0, np, c.pp, patch);
                    if (c.mpv) { /* the words, and the column sums */
                        words->mp_words(patch, (r1 - r0) * kw, c.pp, wb, xw, cs);
                    } else if (c.px) { /* pixel words (no column sums: weights as they are) */
                        words->px_words(patch, (r1 - r0) * kw, c.pp, c.px, xw);
                    } else if (wb < 8) { /* column sums (for 4-, 2-, 1-bit weights) */
                        mico_conv_colsums(patch, (r1 - r0) * kw, c.pp, cs);
                    }
                    mico_conv_chunk(&c, patch, cs, tile, oc0, oc1, r0, (r1 - r0) * kw,
                                    r1 == rows, pix0, np);
                }
            }
        }
    }
}

/* ------------------------------------------------------------------------ W8A8 path */

#define MICO_S8_PATCH 2048 /* bytes of the W8A8 patch: taps x 8 pixels */
#define MICO_S8_TILE 256   /* int32 sums waiting for requantization (channels x pixels): an
                              even number of tile rows of 8, 16, 24 or 32 pixels */
#define MICO_S8_KW 16      /* widest kernel row of the patch */

/* An optimization barrier between the pixels of a tap: without it the scheduler hoists every
 * load of the tap first and runs out of registers (spills in the inner loop). */
#if defined(__GNUC__)
#define MICO_S8_SEQ() __asm__ volatile("" ::: "memory")
#else
#define MICO_S8_SEQ()
#endif

/* Pixel J of one tap: code x[J] times the two channels' weights u, v. */
#define MICO_S8_PX(J)                                                                       \
    do {                                                                                    \
        const int32_t x_ = x[J];                                                            \
        a##J += u * x_;                                                                     \
        b##J += v * x_;                                                                     \
        MICO_S8_SEQ();                                                                      \
    } while (0)

/* Tap K of a step: weights wa[K], wb[K] times the 8 codes x[0 .. 7]. */
#define MICO_S8_TAP(K)                                                                      \
    do {                                                                                    \
        const int32_t u = wa[K], v = wb[K];                                                 \
        MICO_S8_PX(0);                                                                      \
        MICO_S8_PX(1);                                                                      \
        MICO_S8_PX(2);                                                                      \
        MICO_S8_PX(3);                                                                      \
        MICO_S8_PX(4);                                                                      \
        MICO_S8_PX(5);                                                                      \
        MICO_S8_PX(6);                                                                      \
        MICO_S8_PX(7);                                                                      \
    } while (0)

/* Micro-kernel: two output channels (weight rows wa, wb: int8, read as they are stored) x 8
 * pixels, 16 sums in registers; each weight read serves 8 pixels, each code 2 channels (10
 * loads for 16 multiply-adds). Tap t of pixel j of group q is x0[q * xq + t * xs + j]: the
 * patch (xs = 8) or, for a pointwise convolution, the input planes themselves (xs = the plane).
 * The sums of group q are added (modulo 2^32) to ta[8q ..] and tb[8q ..]. XT: uint8_t for
 * unsigned codes, int8_t for signed ones. */
#define MICO_S8_MK(NAME, XT)                                                                \
    static MICO_NOINLINE void NAME(const int8_t *wa0, const int8_t *wb0, const XT *x0,        \
                                   int32_t xs, int32_t xq, int32_t taps, int32_t nq,        \
                                   int32_t *ta, int32_t *tb)                                \
    {                                                                                       \
        int32_t q;                                                                          \
        for (q = 0; q < nq; q++, x0 += xq, ta += 8, tb += 8) {                              \
            const int8_t *wa = wa0, *wb = wb0, *const end = wa0 + taps;                     \
            const XT *x = x0;                                                               \
            int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;         \
            int32_t b0 = 0, b1 = 0, b2 = 0, b3 = 0, b4 = 0, b5 = 0, b6 = 0, b7 = 0;         \
            if (taps & 1) { /* an odd tap first, then two a step */                         \
                MICO_S8_TAP(0);                                                             \
                wa++;                                                                       \
                wb++;                                                                       \
                x += xs;                                                                    \
            }                                                                               \
            for (; wa < end; wa += 2, wb += 2) {                                            \
                MICO_S8_TAP(0);                                                             \
                x += xs;                                                                    \
                MICO_S8_TAP(1);                                                             \
                x += xs;                                                                    \
            }                                                                               \
            MICO_S8_ADD(ta, a);                                                             \
            MICO_S8_ADD(tb, b);                                                             \
        }                                                                                   \
    }
#define MICO_S8_ADD(T, S)                                                                   \
    do {                                                                                    \
        (T)[0] = (int32_t)((uint32_t)(T)[0] + (uint32_t)S##0);                              \
        (T)[1] = (int32_t)((uint32_t)(T)[1] + (uint32_t)S##1);                              \
        (T)[2] = (int32_t)((uint32_t)(T)[2] + (uint32_t)S##2);                              \
        (T)[3] = (int32_t)((uint32_t)(T)[3] + (uint32_t)S##3);                              \
        (T)[4] = (int32_t)((uint32_t)(T)[4] + (uint32_t)S##4);                              \
        (T)[5] = (int32_t)((uint32_t)(T)[5] + (uint32_t)S##5);                              \
        (T)[6] = (int32_t)((uint32_t)(T)[6] + (uint32_t)S##6);                              \
        (T)[7] = (int32_t)((uint32_t)(T)[7] + (uint32_t)S##7);                              \
    } while (0)
MICO_S8_MK(mico_s8_mk_u, uint8_t)
MICO_S8_MK(mico_s8_mk_s, int8_t)

/* Channel C of a 4 x 4 tap: its weight wq[K + C] times the 4 codes xa .. xd. */
#define MICO_S8_CH(K, C)                                                                    \
    do {                                                                                    \
        const int32_t w_ = wq[(K) + (C)];                                                   \
        s##C##0 += w_ * xa;                                                                 \
        s##C##1 += w_ * xb;                                                                 \
        s##C##2 += w_ * xc;                                                                 \
        s##C##3 += w_ * xd;                                                                 \
        MICO_S8_SEQ();                                                                      \
    } while (0)
/* The tap of weights wq[K ..] and codes x[0 .. 3]. */
#define MICO_S8_TAP44(K)                                                                    \
    do {                                                                                    \
        const int32_t xa = x[0], xb = x[1], xc = x[2], xd = x[3];                           \
        MICO_S8_CH(K, 0);                                                                   \
        MICO_S8_CH(K, 1);                                                                   \
        MICO_S8_CH(K, 2);                                                                   \
        MICO_S8_CH(K, 3);                                                                   \
    } while (0)
#define MICO_S8_SET(T, C)                                                                   \
    do {                                                                                    \
        (T)[0] = s##C##0;                                                                   \
        (T)[1] = s##C##1;                                                                   \
        (T)[2] = s##C##2;                                                                   \
        (T)[3] = s##C##3;                                                                   \
    } while (0)

/* Micro-kernel of pointwise layers: 4 output channels x 4 pixels, 16 sums in registers; the
 * block's weights interleaved (wq0[t * 4 + c]: tap t of channel c, one pointer for the four),
 * so each tap is 8 loads for 16 multiply-adds. Tap t of pixel j of group q is
 * x0[q * 4 + t * xs + j] (xs: the input plane); the sums of group q go to tile[c * tp + 4q ..]. */
#define MICO_S8_MK44(NAME, XT)                                                              \
    static MICO_NOINLINE void NAME(const int8_t *wq0, const XT *x0, int32_t xs,             \
                                   int32_t taps, int32_t nq, int32_t *tile, int32_t tp)     \
    {                                                                                       \
        int32_t q;                                                                          \
        for (q = 0; q < nq; q++, x0 += 4, tile += 4) {                                      \
            const int8_t *wq = wq0, *const end = wq0 + 4 * taps;                            \
            const XT *x = x0;                                                               \
            int32_t s00 = 0, s01 = 0, s02 = 0, s03 = 0, s10 = 0, s11 = 0, s12 = 0, s13 = 0; \
            int32_t s20 = 0, s21 = 0, s22 = 0, s23 = 0, s30 = 0, s31 = 0, s32 = 0, s33 = 0; \
            for (; wq < end; wq += 4, x += xs) {                                            \
                MICO_S8_TAP44(0);                                                           \
            }                                                                               \
            MICO_S8_SET(tile, 0);                                                           \
            MICO_S8_SET(tile + tp, 1);                                                      \
            MICO_S8_SET(tile + 2 * tp, 2);                                                  \
            MICO_S8_SET(tile + 3 * tp, 3);                                                  \
        }                                                                                   \
    }
MICO_S8_MK44(mico_s8_mk44_u, uint8_t)
MICO_S8_MK44(mico_s8_mk44_s, int8_t)

/* The micro-kernel for the layer's codes (signed: int8, else uint8), if there is a group. */
static void mico_s8_pair(const MicoConv2d *p, const int8_t *wa, const int8_t *wb,
                         const uint8_t *x, int32_t xs, int32_t xq, int32_t taps, int32_t nq,
                         int32_t *ta, int32_t *tb)
{
    if (nq > 0 && p->in_fmt.is_signed) {
        mico_s8_mk_s(wa, wb, (const int8_t *)(const void *)x, xs, xq, taps, nq, ta, tb);
    } else if (nq > 0) {
        mico_s8_mk_u(wa, wb, x, xs, xq, taps, nq, ta, tb);
    }
}

/* The bytes o[j] of b + v[j] (sums of either sign, modulo 2^32) requantized through their
 * magnitude (a multiplier with a shift above 32, ReLU or not), plus zero. */
static MICO_NOINLINE void mico_s8_store_signed(const MicoRq *q, uint32_t b, const int32_t *v,
                                               int32_t n, uint8_t *o, int32_t zero)
{
    const uint32_t m = (uint32_t)q->m, s = (uint32_t)(q->shift - 32), rnd = 1u << (s - 1u);
    const int32_t lo = q->lo, hi = q->hi, relu = q->relu;
    int32_t j;
    for (j = 0; j < n; j++) {
        int32_t r = (int32_t)(b + (uint32_t)v[j]), y;
        uint32_t mag;
        r = relu && r < 0 ? 0 : r;
        mag = r < 0 ? 0u - (uint32_t)r : (uint32_t)r;
        mag = ((uint32_t)(((uint64_t)mag * m) >> 32) + rnd) >> s;
        y = r < 0 ? -(int32_t)mag : (int32_t)mag;
        y = y < lo ? lo : y;
        y = y > hi ? hi : y;
        o[j] = (uint8_t)(uint32_t)(y + zero);
    }
}

/* Requantize b + v[0 .. n) (sums; modulo 2^32) as q says and store them at element `start` of
 * the output. The usual cases (a multiplier with a shift above 32, byte codes) run in tight
 * loops, the high word of the product only: with ReLU and a non-negative clamp no sign to
 * handle, else through the magnitude. */
static MICO_NOINLINE void mico_s8_store(const MicoConv2d *p, const MicoRq *q, uint32_t b,
                                        int32_t *v, int32_t n, void *out, size_t start)
{
    const MicoFmt f = p->out.fmt;
    int32_t j;
    if (q->scaled && !q->binary && q->shift > 32 && q->relu && q->lo >= 0 && f.bits == 8) {
        const uint32_t m = (uint32_t)q->m, s = (uint32_t)(q->shift - 32), rnd = 1u << (s - 1u);
        const int32_t lo = q->lo, hi = q->hi, zero = f.is_signed ? 0 : f.zero;
        uint8_t *o = (uint8_t *)out + start;
        for (j = 0; j < n; j++) {
            const int32_t r = (int32_t)(b + (uint32_t)v[j]);
            int32_t y = r <= 0 ? 0
                               : (int32_t)(((uint32_t)(((uint64_t)(uint32_t)r * m) >> 32) + rnd) >>
                                           s);
            y = y < lo ? lo : y;
            y = y > hi ? hi : y;
            o[j] = (uint8_t)(uint32_t)(y + zero);
        }
        return;
    }
    if (q->scaled && !q->binary && q->shift <= 32 && q->relu && q->lo >= 0 && f.bits == 8) {
        /* a shift of at most 32: the whole 64-bit product */
        const uint64_t m = (uint32_t)q->m, rnd = (uint64_t)1 << (q->shift - 1);
        const uint32_t s = (uint32_t)q->shift;
        const int32_t lo = q->lo, hi = q->hi, zero = f.is_signed ? 0 : f.zero;
        uint8_t *o = (uint8_t *)out + start;
        for (j = 0; j < n; j++) {
            const int32_t r = (int32_t)(b + (uint32_t)v[j]);
            const uint64_t y64 = r <= 0 ? 0u : ((uint64_t)(uint32_t)r * m + rnd) >> s;
            int32_t y = y64 > (uint64_t)(uint32_t)hi ? hi : (int32_t)y64;
            y = y < lo ? lo : y;
            o[j] = (uint8_t)(uint32_t)(y + zero);
        }
        return;
    }
    if (q->scaled && !q->binary && q->shift > 32 && f.bits == 8) { /* signed sums */
        mico_s8_store_signed(q, b, v, n, (uint8_t *)out + start, f.is_signed ? 0 : f.zero);
        return;
    }
    for (j = 0; b != 0 && j < n; j++) {
        v[j] = (int32_t)(b + (uint32_t)v[j]);
    }
    mico_rq_run_fast(q, v, n);
    mico_pack(out, start, v, n, f);
}

/* dst[t] = the bytes of one tap for the pixels of a run: pad for t < lo and lo <= hi <= t < seg,
 * src[(t - lo) * sw] for lo <= t < hi; a whole run of 8 consecutive columns at once. */
static void mico_s8_span(uint8_t *dst, const uint8_t *src, int32_t lo, int32_t hi, int32_t seg,
                         int32_t sw, uint8_t pad)
{
    int32_t t;
    if (lo == 0 && hi == 8 && sw == 1) {
        dst[0] = src[0];
        dst[1] = src[1];
        dst[2] = src[2];
        dst[3] = src[3];
        dst[4] = src[4];
        dst[5] = src[5];
        dst[6] = src[6];
        dst[7] = src[7];
        return;
    }
    for (t = 0; t < lo; t++) {
        dst[t] = pad;
    }
    for (; t < hi; t++, src += sw) {
        dst[t] = *src;
    }
    for (; t < seg; t++) {
        dst[t] = pad;
    }
}

/* The patch of kernel rows [r0, r1) (row = ic * k_h + ky within the group starting at input
 * channel ic0) for output pixels pix0 .. pix0 + np - 1 (np <= 8): patch[t * 8 + j] holds the
 * byte of tap t ((r - r0) * k_w + kx) of pixel j as stored; padding and the columns np .. 7
 * hold pad, the byte of code 0. For each run of pixels within one output row, the pixels whose
 * columns lie inside the input are found once per kx (k_w <= MICO_S8_KW), then every kernel row
 * copies them. */
static MICO_NOINLINE void mico_s8_patch(const MicoConv2d *p, const uint8_t *in, int32_t ic0,
                                        int32_t r0, int32_t r1, int32_t pix0, int32_t np,
                                        uint8_t pad, uint8_t *patch)
{
    const size_t plane = (size_t)p->in_h * (size_t)p->in_w;
    const int32_t kw = p->k_w, sw = p->stride_w, dw = p->dil_w, in_w = p->in_w;
    int32_t lo[MICO_S8_KW], hi[MICO_S8_KW];
    int32_t i, j, r, kx;
    for (i = 0; np < 8 && i < (r1 - r0) * kw * 8; i++) {
        patch[i] = pad;
    }
    for (j = 0; j < np;) { /* runs of pixels within one output row */
        const int32_t oy = (pix0 + j) / p->out_w, ox = (pix0 + j) % p->out_w;
        const int32_t seg = np - j < p->out_w - ox ? np - j : p->out_w - ox;
        const int32_t ix0 = ox * sw - p->pad_w;
        for (kx = 0; kx < kw; kx++) { /* pixels [lo, hi) of the run read inside the row */
            const int32_t ix = ix0 + kx * dw; /* column of the run's first pixel */
            const int32_t h = ix + (seg - 1) * sw < in_w ? seg
                              : ix >= in_w              ? 0
                                                        : (in_w - 1 - ix) / sw + 1;
            const int32_t l = ix >= 0 ? 0 : (sw - 1 - ix) / sw;
            lo[kx] = l < h ? l : h;
            hi[kx] = h;
        }
        for (r = r0; r < r1; r++) {
            const int32_t iy = oy * p->stride_h - p->pad_h + (r % p->k_h) * p->dil_h;
            uint8_t *dst = patch + (r - r0) * kw * 8 + j;
            if (iy < 0 || iy >= p->in_h) { /* a padding row */
                for (kx = 0; kx < kw; kx++) {
                    mico_s8_span(dst + kx * 8, in, 0, 0, seg, sw, pad);
                }
                continue;
            }
            for (kx = 0; kx < kw; kx++) {
                const size_t at = (size_t)(ic0 + r / p->k_h) * plane + (size_t)iy * (size_t)in_w +
                                  (size_t)(ix0 + kx * dw + lo[kx] * sw);
                mico_s8_span(dst + kx * 8, lo[kx] < hi[kx] ? in + at : in, lo[kx], hi[kx], seg,
                             sw, pad);
            }
        }
        j += seg;
    }
}

/* The patch of kernel rows [r0, r1) for the np pixels from pix0: groups of 8 pixels, group q at
 * patch + q * (r1 - r0) * k_w * 8. */
static void mico_s8_patches(const MicoConv2d *p, const uint8_t *in, int32_t r0, int32_t r1,
                            int32_t pix0, int32_t np, uint8_t pad, uint8_t *patch)
{
    int32_t q;
    for (q = 0; 8 * q < np; q++) {
        mico_s8_patch(p, in, 0, r0, r1, pix0 + 8 * q, np - 8 * q < 8 ? np - 8 * q : 8, pad,
                      patch + (size_t)q * (size_t)((r1 - r0) * p->k_w * 8));
    }
}

/* tile[i] = the bias of channel c (less zero x the sum of its weights: asymmetric input bytes
 * are code + zero) for i < n, modulo 2^32. */
static void mico_s8_bias(const MicoConv2d *p, int32_t c, int32_t k_all, int32_t zero,
                         int32_t *tile, int32_t n)
{
    const int8_t *w = (const int8_t *)(const void *)p->weight + (size_t)c * (size_t)k_all;
    uint32_t b = (uint32_t)p->bias[c];
    int32_t i;
    for (i = 0; zero != 0 && i < k_all; i++) {
        b -= (uint32_t)zero * (uint32_t)(int32_t)w[i];
    }
    for (i = 0; i < n; i++) {
        tile[i] = (int32_t)b;
    }
}

/* ta[np - rem ..] += the sums of the plane's last rem pixels (pointwise layers whose plane does
 * not end on a group of 8: the group of its last 8 pixels, x_end its end). */
static MICO_NOINLINE void mico_s8_tail(const MicoConv2d *p, const int8_t *wa, const int8_t *wb,
                                       const uint8_t *x_end, int32_t xs, int32_t taps,
                                       int32_t rem, int32_t *ta, int32_t *tb)
{
    int32_t e[16] = {0}, i;
    mico_s8_pair(p, wa, wb, x_end - 8, xs, 8, taps, 1, e, e + 8);
    for (i = 0; i < rem; i++) {
        ta[i] = (int32_t)((uint32_t)ta[i] + (uint32_t)e[8 - rem + i]);
        tb[i] = (int32_t)((uint32_t)tb[i] + (uint32_t)e[16 - rem + i]);
    }
}

/* The 4 x 4 micro-kernel for the layer's codes (signed: int8, else uint8). */
static void mico_s8_quad(const MicoConv2d *p, const int8_t *wq, const uint8_t *x, int32_t xs,
                         int32_t taps, int32_t nq, int32_t *tile, int32_t tp)
{
    if (p->in_fmt.is_signed) {
        mico_s8_mk44_s(wq, (const int8_t *)(const void *)x, xs, taps, nq, tile, tp);
    } else {
        mico_s8_mk44_u(wq, x, xs, taps, nq, tile, tp);
    }
}

/* The 4 channels of wq (interleaved as for mico_s8_quad) for n single pixels: tap t of pixel j
 * is x[t * xs + j] (a signed or an unsigned byte); sums to tile[c * tp + j]. For the last pixels
 * of a plane that fill no group of 4 (no multiply spent on pixels that are not there). */
static MICO_NOINLINE void mico_s8_column(const int8_t *wq0, const uint8_t *x0, int is_signed,
                                         int32_t xs, int32_t taps, int32_t n, int32_t *tile,
                                         int32_t tp)
{
    const int32_t flip = is_signed ? 0x80 : 0; /* (byte ^ 0x80) - 0x80: the signed code */
    int32_t j;
    for (j = 0; j < n; j++) {
        const int8_t *wq = wq0, *const end = wq0 + 4 * taps;
        const uint8_t *x = x0 + j;
        int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (; wq < end; wq += 4, x += xs) {
            const int32_t v = (*x ^ flip) - flip;
            s0 += wq[0] * v;
            s1 += wq[1] * v;
            s2 += wq[2] * v;
            s3 += wq[3] * v;
        }
        tile[j] = s0;
        tile[tp + j] = s1;
        tile[2 * tp + j] = s2;
        tile[3 * tp + j] = s3;
    }
}

/* wq[t * 4 + c] = tap t of channel oc[c], c < 4 (k_all taps each). */
static void mico_s8_interleave(const int8_t *w, const int32_t *oc, int32_t k_all, int8_t *wq)
{
    const int8_t *w0 = w + (size_t)oc[0] * (size_t)k_all, *w1 = w + (size_t)oc[1] * (size_t)k_all;
    const int8_t *w2 = w + (size_t)oc[2] * (size_t)k_all, *w3 = w + (size_t)oc[3] * (size_t)k_all;
    int32_t t;
    for (t = 0; t < k_all; t++, wq += 4) {
        wq[0] = w0[t];
        wq[1] = w1[t];
        wq[2] = w2[t];
        wq[3] = w3[t];
    }
}

/* Pointwise W8A8 convolutions (1x1, stride 1, no padding): the codes of a pixel's taps are
 * the input planes themselves, read in place. Output channels go in blocks of 4 whose weights
 * are interleaved once on the stack (the last block repeats the group's last channel); then
 * every run of up to 32 pixels takes the 4 x 4 micro-kernel (a plane's last pixels that fill
 * no group of 4: one or two one at a time, three as the group of its last 4, only their sums
 * kept) and is requantized and stored
 * channel by channel. Returns 0 (nothing done) for what it does not take: other kernels,
 * planes of fewer than 4 pixels, fewer than 4 output channels per group, more than
 * MICO_S8_PATCH / 4 input channels per group. Stack: about 2.7 KB. */
static MICO_NOINLINE int mico_qconv2d_s8_pw(const MicoConv2d *p, const void *in, void *out)
{
    const int32_t ipg = p->in_c / p->groups, opg = p->out_c / p->groups;
    const int32_t npix = p->out_h * p->out_w;
    const size_t plane = (size_t)p->in_h * (size_t)p->in_w;
    const int32_t zero = p->in_fmt.is_signed ? 0 : p->in_fmt.zero;
    const int8_t *w = (const int8_t *)(const void *)p->weight;
    int8_t wq[MICO_S8_PATCH];
    int32_t tile[4 * 32], e[16], oc[4];
    uint32_t b[4];
    int32_t g, oc0, pix0, c, i;
    if (p->k_h != 1 || p->k_w != 1 || p->stride_h != 1 || p->stride_w != 1 || p->pad_h != 0 ||
        p->pad_w != 0 || npix < 4 || opg < 4 || 4 * ipg > MICO_S8_PATCH) {
        return 0;
    }
    for (g = 0; g < p->groups; g++) {
        const uint8_t *x_g = (const uint8_t *)in + (size_t)(g * ipg) * plane;
        for (oc0 = g * opg; oc0 < (g + 1) * opg; oc0 += 4) {
            const int32_t n_oc = (g + 1) * opg - oc0 < 4 ? (g + 1) * opg - oc0 : 4;
            for (c = 0; c < 4; c++) {
                oc[c] = c < n_oc ? oc0 + c : oc0 + n_oc - 1;
                mico_s8_bias(p, oc[c], ipg, zero, e + c, 1); /* b: bias less zero x sum w */
                b[c] = (uint32_t)e[c];
            }
            mico_s8_interleave(w, oc, ipg, wq);
            for (pix0 = 0; pix0 < npix; pix0 += 32) {
                const int32_t np = npix - pix0 < 32 ? npix - pix0 : 32, nq = np / 4;
                const int32_t rem = np % 4;
                mico_s8_quad(p, wq, x_g + pix0, (int32_t)plane, ipg, nq, tile, 32);
                if (rem == 3) { /* the group of the plane's last 4 pixels */
                    mico_s8_quad(p, wq, x_g + npix - 4, (int32_t)plane, ipg, 1, e, 4);
                    for (c = 0; c < 4; c++) {
                        for (i = 0; i < rem; i++) {
                            tile[c * 32 + 4 * nq + i] = e[c * 4 + 4 - rem + i];
                        }
                    }
                } else if (rem) { /* one or two last pixels: one at a time */
                    mico_s8_column(wq, x_g + pix0 + 4 * nq, p->in_fmt.is_signed,
                                   (int32_t)plane, ipg, rem, tile + 4 * nq, 32);
                }
                for (c = 0; c < n_oc; c++) { /* requantize and store */
                    const MicoRq rq = mico_rq(&p->out, oc0 + c);
                    mico_s8_store(p, &rq, b[c], tile + c * 32, np, out,
                                  (size_t)(oc0 + c) * (size_t)npix + (size_t)pix0);
                }
            }
        }
    }
    return 1;
}

/* W8A8 convolutions (8-bit codes in, 8-bit weights): the bytes are the codes, so nothing is
 * unpacked. Output pixels go in blocks of up to 4 groups of 8: through a patch of bytes
 * (im2col, built once per block and chunk of kernel rows; as many groups as the patch holds
 * when every kernel row fits, else one group and chunks), or, for a pointwise convolution
 * (1x1, stride 1, no padding), read straight from the input planes (a plane's last pixels that
 * fill no group: the group of its last 8, only their sums kept). Every pair of output channels
 * runs the 2 x 8 micro-kernel over the block; sums start at the bias and wait in a tile for
 * the last chunk, then are requantized and stored channel by channel. Returns 0 (nothing done)
 * for what it does not take: fewer than two output channels per group, kernel rows wider than
 * MICO_S8_KW or longer than the patch. Stack: about 3.3 KB. */
static MICO_NOINLINE int mico_qconv2d_s8(const MicoConv2d *p, const void *in, void *out)
{
    const int32_t ipg = p->in_c / p->groups, opg = p->out_c / p->groups;
    const int32_t kw = p->k_w, rows = ipg * p->k_h, k_all = rows * kw;
    const int32_t npix = p->out_h * p->out_w;
    const size_t plane = (size_t)p->in_h * (size_t)p->in_w;
    const int direct = p->k_h == 1 && kw == 1 && p->stride_h == 1 && p->stride_w == 1 &&
                       p->pad_h == 0 && p->pad_w == 0 && npix >= 8;
    const int32_t zero = p->in_fmt.is_signed ? 0 : p->in_fmt.zero;
    const int32_t rpc = direct ? rows : MICO_S8_PATCH / (kw * 8); /* kernel rows per chunk */
    const int32_t fit = MICO_S8_PATCH / (k_all * 8);             /* groups the patch holds */
    const int32_t nq_max = direct ? 4 : rpc < rows ? 1 : fit < 4 ? fit : 4;
    const int32_t bp = 8 * nq_max;          /* pixels of a block (a tile row) */
    const int32_t pass = MICO_S8_TILE / bp; /* channels whose sums wait in the tile */
    const int32_t xs = direct ? (int32_t)plane : 8;
    const int8_t *w = (const int8_t *)(const void *)p->weight;
    uint8_t patch[MICO_S8_PATCH];
    int32_t tile[MICO_S8_TILE];
    int32_t g, pix0, oc0, r0, c;
    if (opg < 2 || rpc == 0 || kw > MICO_S8_KW) {
        return 0;
    }
    for (g = 0; g < p->groups; g++) {
        const uint8_t *x_g = (const uint8_t *)in + (size_t)(g * ipg) * plane;
        for (pix0 = 0; pix0 < npix; pix0 += bp) {
            const int32_t np = npix - pix0 < bp ? npix - pix0 : bp;
            const int32_t nq = direct ? np / 8 : (np + 7) / 8, rem = direct ? np % 8 : 0;
            if (!direct && rpc >= rows) { /* one chunk: the patch serves every channel */
                mico_s8_patches(p, x_g, 0, rows, pix0, np, (uint8_t)zero, patch);
            }
            for (oc0 = g * opg; oc0 < (g + 1) * opg; oc0 += pass) {
                const int32_t oc1 = oc0 + pass < (g + 1) * opg ? oc0 + pass : (g + 1) * opg;
                for (c = oc0; c < oc1; c++) { /* the sums start at the bias */
                    mico_s8_bias(p, c, k_all, zero, tile + (c - oc0) * bp, 8 * nq + rem);
                }
                for (r0 = 0; r0 < rows; r0 += rpc) {
                    const int32_t r1 = r0 + rpc < rows ? r0 + rpc : rows, taps = (r1 - r0) * kw;
                    const uint8_t *x = direct ? x_g + pix0 : patch;
                    if (!direct && rpc < rows) {
                        mico_s8_patches(p, x_g, r0, r1, pix0, np, (uint8_t)zero, patch);
                    }
                    for (c = oc0; c < oc1; c += 2) { /* an odd one out: twice, a spare row */
                        const int32_t cb = c + 1 < oc1 ? c + 1 : c;
                        const int8_t *wa = w + (size_t)c * (size_t)k_all + (size_t)(r0 * kw);
                        const int8_t *wb = w + (size_t)cb * (size_t)k_all + (size_t)(r0 * kw);
                        int32_t *ta = tile + (c - oc0) * bp;
                        mico_s8_pair(p, wa, wb, x, xs, direct ? 8 : taps * 8, taps, nq, ta,
                                     ta + bp);
                        if (rem) {
                            mico_s8_tail(p, wa, wb, x_g + npix, xs, taps, rem, ta + 8 * nq,
                                         ta + bp + 8 * nq);
                        }
                    }
                }
                for (c = oc0; c < oc1; c++) { /* requantize and store */
                    const MicoRq rq = mico_rq(&p->out, c);
                    mico_s8_store(p, &rq, 0u, tile + (c - oc0) * bp, np, out,
                                  (size_t)c * (size_t)npix + (size_t)pix0);
                }
            }
        }
    }
    return 1;
}

/* ------------------------------------------------------------------------ channel lanes */

#define MICO_LANES_PATCH 768 /* int16 elements of the lanes path's patch */
#define MICO_LANES_TILE 512  /* int32 sums of the channel blocks waiting between chunks */

/* Requantize and store the F channels of one block (sums tile[c * pp + j], np pixels). */
static MICO_NOINLINE void mico_lanes_store(const MicoConv2d *p, void *out, int32_t *tile,
                                           int32_t pp, int32_t np, int32_t oc0, int32_t pix0,
                                           const int32_t *cs)
{
    const int32_t f = 32 / p->w_bits;
    const size_t npix = (size_t)p->out_h * (size_t)p->out_w;
    const uint32_t sw = p->w_bits == 1 ? 2u : 1u;
    const uint32_t qw = p->w_bits == 1 ? 1u : 1u << (p->w_bits - 1);
    const int32_t nc = p->out_c - oc0 < f ? p->out_c - oc0 : f; /* the last block may be short */
    int32_t c;
    for (c = 0; c < nc; c++) {
        const MicoRq rq = mico_rq(&p->out, oc0 + c);
        mico_lanes_requant(tile + c * pp, cs, np, (uint32_t)p->bias[oc0 + c], sw, qw, &rq);
        mico_pack(out, (size_t)(oc0 + c) * npix + (size_t)pix0, tile + c * pp, np, p->out.fmt);
    }
}

/* Weights in channel lanes (mico_nn.h), F = 32 / w_bits output channels per word: for a
 * block of up to 32 pixels, the im2col patch of a chunk of kernel rows (mico_conv_patch) is built
 * once and every block of F channels of the group runs over it; when the taps take several
 * chunks, the sums of as many blocks as the tile holds wait between chunks (the patch is then
 * built once per such pass). Stack: about 4.2 KB. */
static MICO_NOINLINE void mico_conv_lanes(const MicoConv2d *p, const MicoLanes *l,
                                          const void *in, void *out, MicoLanesFn fn)
{
    const int32_t ipg = p->in_c / p->groups, opg = p->out_c / p->groups;
    const int32_t kw = p->k_w, rows = ipg * p->k_h, k_all = rows * kw;
    const int32_t npix = p->out_h * p->out_w, f = 32 / p->w_bits, nblk = (opg + f - 1) / f;
    const uint32_t *w = (const uint32_t *)(const void *)p->weight;
    int16_t patch[MICO_LANES_PATCH];
    int32_t tile[MICO_LANES_TILE];
    int32_t cs[32];
    /* pixels per block: as many as let the patch hold every tap (one chunk: the patch built
     * once), up to 32 and the tile's room for a block of F channels; when no 8 pixels let it,
     * as many as let the sums of every block of the group wait in the tile (one pass per
     * chunk). A multiple of 4 (of 8 for 1-bit inputs, so that their runs start on a byte). */
    const int32_t align = p->in_fmt.bits == 1 ? ~7 : ~3;
    int32_t pp = (MICO_LANES_PATCH / k_all) & align, rpc, multi, bpp, g, pix0, b0, r0, j, t;
    if (pp < 8) {
        pp = (MICO_LANES_TILE / (f * nblk)) & align;
        pp = pp < 8 ? 8 : pp;
    }
    pp = pp < 32 ? pp : 32;
    pp = pp < MICO_LANES_TILE / f ? pp : MICO_LANES_TILE / f;
    pp = npix < pp ? (npix + 3) & ~3 : pp;
    while (pp > 4 && MICO_LANES_PATCH / (kw * pp) == 0) {
        pp -= 4;
    }
    rpc = MICO_LANES_PATCH / (kw * pp);
    if (rpc == 0 || p->in_fmt.bits > 8) { /* kernel rows longer than the patch, int32 inputs */
        mico_qconv2d_generic(p, in, out);
        return;
    }
    rpc = rpc < rows ? rpc : rows;
    multi = rpc < rows;
    bpp = multi ? MICO_LANES_TILE / (f * pp) : nblk;
    for (g = 0; g < p->groups; g++) {
        for (pix0 = 0; pix0 < npix; pix0 += pp) {
            const int32_t np = npix - pix0 < pp ? npix - pix0 : pp;
            for (b0 = 0; b0 < nblk; b0 += bpp) {
                const int32_t b1 = b0 + bpp < nblk ? b0 + bpp : nblk;
                int32_t b;
                for (j = 0; j < pp; j++) {
                    cs[j] = 0;
                }
                for (r0 = 0; r0 < rows; r0 += rpc) {
                    const int32_t r1 = r0 + rpc < rows ? r0 + rpc : rows, taps = (r1 - r0) * kw;
                    mico_conv_patch(p, in, g * ipg, r0, r1, pix0, np, pp, patch);
                    for (t = 0; t < taps; t++) { /* column sums: the weights' offset */
                        const int16_t *x = patch + t * pp;
                        for (j = 0; j < np; j++) {
                            cs[j] += x[j];
                        }
                    }
                    for (b = b0; b < b1; b++) {
                        const int32_t oc0 = g * opg + b * f;
                        int32_t *tb = multi ? tile + (b - b0) * f * pp : tile;
                        if (r0 == 0) {
                            for (j = 0; j < f * pp; j++) {
                                tb[j] = 0;
                            }
                        }
                        mico_lanes_block(fn, w + (size_t)(oc0 / f) * (size_t)k_all +
                                             (size_t)(r0 * kw),
                                         patch, taps, pp, np, l, tb);
                        if (!multi) {
                            mico_lanes_store(p, out, tb, pp, np, oc0, pix0, cs);
                        }
                    }
                }
                for (b = b0; multi && b < b1; b++) {
                    mico_lanes_store(p, out, tile + (b - b0) * f * pp, pp, np,
                                     g * opg + b * f, pix0, cs);
                }
            }
        }
    }
}

/* ------------------------------------------------------------------------ channel lanes by rows */

#define MICO_LR_BUF 1536 /* int16 codes of the unpacked, zero-padded input rows of a chunk */
#define MICO_LR_TAPS 400 /* pointers to the taps of a chunk, and the ends of segments */
#define MICO_LR_TILE 512 /* int32 lane sums of an output row's channel blocks */
#define MICO_LR_SUMS 256 /* int32 sums over the chunk's channels of its input rows */
#define MICO_LR_COLS 64  /* output columns of a row (padded to whole pixel groups) */

/* One block of F channels over np pixels of an output row, a group of NPX = 16 / G pixels at
 * a time (16 lane words in registers: G field groups x NPX pixels): tap t of pixel j is
 * xt[t][j], the table cut into segments of at most n taps by NULL entries (and ended by one).
 * After each segment the lane words go into the tile (tile[c * tp + j] += sums of channel c,
 * pixel j; see mico_lanes_settle and mico_lanes_widen). One pixel's loads at a time
 * (MICO_S8_SEQ): 16 sums, G lane weights, a code, the pixel offset, two pointers and the mask
 * stay in registers (the NULL ends a segment: no end pointer). */
/* A value the optimizer must take as it is (not split into induction variables). */
#if defined(__GNUC__)
#define MICO_LR_OPAQUE(v) __asm__("" : "+r"(v))
#else
#define MICO_LR_OPAQUE(v) ((void)0)
#endif
#define MICO_LR_FN(BITS, G)                                                                 \
    static MICO_NOINLINE void mico_lr_w##BITS##g##G(const uint32_t *w,                       \
                                                    const int16_t *const *xt, int32_t taps,  \
                                                    int32_t np, int32_t is_signed,           \
                                                    int32_t *tile, int32_t tp)               \
    {                                                                                       \
        enum { NPX = 16 / (G) };                                                            \
        const uint32_t s = (BITS) * (G), m = mico_lane_mask(BITS, s);                       \
        const uint32_t *const wend = w + taps;                                              \
        uint32_t wide[2 * (G) * NPX];                                                       \
        int32_t j0, g, q;                                                                   \
        for (j0 = 0; j0 < np; j0 += NPX) {                                                  \
            const uint32_t *wp = w;                                                         \
            const int16_t *const *xpp = xt;                                                 \
            int32_t segs = 0, jb = 2 * j0; /* the group's byte offset in a row */           \
            MICO_LR_OPAQUE(jb);                                                             \
            while (wp < wend) {                                                             \
                const int16_t *xp;                                                          \
                uint32_t acc[G][NPX], sums[(G) * NPX];                                      \
                MICO_UNROLL for (g = 0; g < (G); g++) {                                     \
                    MICO_UNROLL for (q = 0; q < NPX; q++) {                                 \
                        acc[g][q] = 0;                                                      \
                    }                                                                       \
                }                                                                           \
                while ((xp = *xpp++) != NULL) {                                             \
                    const uint32_t wv = *wp++;                                              \
                    uint32_t wl[G];                                                         \
                    xp = (const int16_t *)(const void *)((const char *)xp + jb);            \
                    MICO_LR_OPAQUE(xp); /* not reassociated with the pixels' offsets */     \
                    MICO_UNROLL for (g = 0; g < (G); g++) {                                 \
                        wl[g] = (wv >> (g * (BITS))) & m;                                   \
                    }                                                                       \
                    MICO_UNROLL for (q = 0; q < NPX; q++) {                                 \
                        const uint32_t xv = (uint32_t)(int32_t)xp[q];                       \
                        MICO_UNROLL for (g = 0; g < (G); g++) {                             \
                            acc[g][q] += wl[g] * xv;                                        \
                        }                                                                   \
                        MICO_S8_SEQ();                                                      \
                    }                                                                       \
                }                                                                           \
                MICO_UNROLL for (g = 0; g < (G); g++) {                                     \
                    MICO_UNROLL for (q = 0; q < NPX; q++) {                                 \
                        sums[g * NPX + q] = acc[g][q];                                      \
                    }                                                                       \
                }                                                                           \
                if (s == 16u) { /* two lanes a word: inline */                              \
                    MICO_UNROLL for (g = 0; g < (G); g++) {                                 \
                        MICO_UNROLL for (q = 0; q < NPX; q++) {                             \
                            const uint32_t v = acc[g][q];                                   \
                            const uint32_t lo = is_signed ? (uint32_t)((int32_t)(v << 16) >> 16) \
                                                          : v & 0xffffu;                    \
                            const uint32_t hi = is_signed ? (uint32_t)((int32_t)(v - lo) >> 16) \
                                                          : v >> 16;                        \
                            int32_t *const tt = tile + j0 + g * tp + q;                     \
                            tt[0] = (int32_t)((uint32_t)tt[0] + lo);                        \
                            tt[(G) * tp] = (int32_t)((uint32_t)tt[(G) * tp] + hi);          \
                        }                                                                   \
                    }                                                                       \
                } else if (s == 8u && !is_signed) { /* into 16-bit lanes, inline */         \
                    MICO_UNROLL for (g = 0; g < (G); g++) {                                 \
                        MICO_UNROLL for (q = 0; q < NPX; q++) {                             \
                            const uint32_t v = acc[g][q], i = (uint32_t)(g * NPX + q);      \
                            const uint32_t ev = v & 0x00ff00ffu, od = (v >> 8) & 0x00ff00ffu; \
                            wide[i] = segs ? wide[i] + ev : ev;                             \
                            wide[(G) * NPX + i] = segs ? wide[(G) * NPX + i] + od : od;     \
                        }                                                                   \
                    }                                                                       \
                    if (++segs == 257 || wp >= wend) { /* lane i of (g, q): channel iG + g */ \
                        MICO_UNROLL for (g = 0; g < (G); g++) {                             \
                            MICO_UNROLL for (q = 0; q < NPX; q++) {                         \
                                const uint32_t ev = wide[g * NPX + q];                      \
                                const uint32_t od = wide[((G) + g) * NPX + q];              \
                                int32_t *const tt = tile + j0 + g * tp + q;                 \
                                tt[0] += (int32_t)(ev & 0xffffu);                           \
                                tt[(G) * tp] += (int32_t)(od & 0xffffu);                    \
                                tt[2 * (G) * tp] += (int32_t)(ev >> 16);                    \
                                tt[3 * (G) * tp] += (int32_t)(od >> 16);                    \
                            }                                                               \
                        }                                                                   \
                        segs = 0;                                                           \
                    }                                                                       \
                } else if (s <= 8u && !is_signed) {                                         \
                    segs = mico_lanes_widen(sums, wide, segs, wp >= wend, (G), NPX,         \
                                            tile + j0, tp, NPX, s);                         \
                } else {                                                                    \
                    mico_lanes_settle(sums, (G), NPX, tile + j0, tp, (G) * tp, NPX, s,      \
                                      is_signed);                                           \
                }                                                                           \
            }                                                                               \
        }                                                                                   \
    }

typedef void (*MicoLrFn)(const uint32_t *w, const int16_t *const *xt, int32_t taps, int32_t np,
                         int32_t is_signed, int32_t *tile, int32_t tp);

/* Plain fields (unsigned codes without a zero point: the code is the field) of 8, 4 or 2 bits
 * from a whole byte *src into *dst, four bytes at a time while four bytes' codes fit before
 * end; both pointers advanced past what was done. */
static inline void mico_lr_unpack_plain(const uint8_t **srcp, int16_t **dstp, const int16_t *end,
                                        uint32_t b)
{
    const uint8_t *src = *srcp; /* MICO_S8_SEQ: halfword stores, not merged into words */
    int16_t *dst = *dstp;
    if (b == 8u) {
        for (; dst + 4 <= end; dst += 4, src += 4) {
            dst[0] = (int16_t)src[0];
            MICO_S8_SEQ();
            dst[1] = (int16_t)src[1];
            MICO_S8_SEQ();
            dst[2] = (int16_t)src[2];
            MICO_S8_SEQ();
            dst[3] = (int16_t)src[3];
            MICO_S8_SEQ();
        }
    } else if (b == 4u) {
        for (; dst + 8 <= end; dst += 8, src += 4) {
            const uint32_t v0 = src[0], v1 = src[1], v2 = src[2], v3 = src[3];
            dst[0] = (int16_t)(v0 & 15u);
            MICO_S8_SEQ();
            dst[1] = (int16_t)(v0 >> 4);
            MICO_S8_SEQ();
            dst[2] = (int16_t)(v1 & 15u);
            MICO_S8_SEQ();
            dst[3] = (int16_t)(v1 >> 4);
            MICO_S8_SEQ();
            dst[4] = (int16_t)(v2 & 15u);
            MICO_S8_SEQ();
            dst[5] = (int16_t)(v2 >> 4);
            MICO_S8_SEQ();
            dst[6] = (int16_t)(v3 & 15u);
            MICO_S8_SEQ();
            dst[7] = (int16_t)(v3 >> 4);
            MICO_S8_SEQ();
        }
    } else {
        for (; dst + 8 <= end; dst += 8, src += 2) {
            const uint32_t v0 = src[0], v1 = src[1];
            dst[0] = (int16_t)(v0 & 3u);
            MICO_S8_SEQ();
            dst[1] = (int16_t)((v0 >> 2) & 3u);
            MICO_S8_SEQ();
            dst[2] = (int16_t)((v0 >> 4) & 3u);
            MICO_S8_SEQ();
            dst[3] = (int16_t)(v0 >> 6);
            MICO_S8_SEQ();
            dst[4] = (int16_t)(v1 & 3u);
            MICO_S8_SEQ();
            dst[5] = (int16_t)((v1 >> 2) & 3u);
            MICO_S8_SEQ();
            dst[6] = (int16_t)((v1 >> 4) & 3u);
            MICO_S8_SEQ();
            dst[7] = (int16_t)(v1 >> 6);
            MICO_S8_SEQ();
        }
    }
    *srcp = src;
    *dstp = dst;
}

/* n codes of a packed tensor from element `start` into dst: 8-, 4- and 2-bit codes a byte at
 * a time (code = ((field ^ x) << sh) - o, mico_field_map), other widths by mico_unpack. */
static MICO_NOINLINE void mico_lr_unpack(const void *in, size_t start, int32_t n, MicoFmt f,
                                         int16_t *dst)
{
    const MicoFieldMap fm = mico_field_map(f);
    const uint32_t b = (uint32_t)f.bits, x = fm.x;
    const int32_t o = fm.o;
    const int16_t *const end = dst + n;
    const uint8_t *src;
    if ((b != 8u && b != 4u && b != 2u) || fm.sh) {
        mico_unpack(in, start, n, f, dst);
        return;
    }
    src = (const uint8_t *)in + start * b / 8u;
    if (x == 0u && o == 0 && start % (8u / b) == 0u) { /* plain fields, whole bytes: unrolled */
        mico_lr_unpack_plain(&src, &dst, end, b);
    }
    if (b == 8u) {
        for (; dst < end; dst++, src++) {
            *dst = (int16_t)((int32_t)(*src ^ x) - o);
        }
        return;
    }
    if (b == 4u && start % 2u == 0u) { /* whole bytes: two codes each */
        for (; dst + 2 <= end; dst += 2, src++) {
            const uint32_t v = *src;
            dst[0] = (int16_t)((int32_t)((v & 15u) ^ x) - o);
            dst[1] = (int16_t)((int32_t)((v >> 4) ^ x) - o);
        }
        if (dst < end) {
            *dst = (int16_t)((int32_t)((*src & 15u) ^ x) - o);
        }
        return;
    }
    if (b == 2u && start % 4u == 0u) { /* whole bytes: four codes each */
        for (; dst + 4 <= end; dst += 4, src++) {
            const uint32_t v = *src;
            dst[0] = (int16_t)((int32_t)((v & 3u) ^ x) - o);
            dst[1] = (int16_t)((int32_t)(((v >> 2) & 3u) ^ x) - o);
            dst[2] = (int16_t)((int32_t)(((v >> 4) & 3u) ^ x) - o);
            dst[3] = (int16_t)((int32_t)((v >> 6) ^ x) - o);
        }
    }
    if (dst < end) { /* codes left (no byte read past the last one) */
        const uint32_t per = 8u / b, mask = (1u << b) - 1u;
        uint32_t k = (uint32_t)(start % per), v = *src++ >> (k * b);
        for (; dst < end; dst++) {
            if (k == per) {
                v = *src++;
                k = 0;
            }
            *dst = (int16_t)((int32_t)((v & mask) ^ x) - o);
            v >>= b;
            k++;
        }
    }
}

/* The field of the code of sum r (ReLU, a multiplier with a shift s + 32 above 32, clamp
 * [lo, hi] with lo >= 0, zero point zero). */
static inline uint32_t mico_lr_code(int32_t r, uint32_t m, uint32_t s, uint32_t rnd, int32_t lo,
                                    int32_t hi, int32_t zero)
{
    int32_t y = r <= 0 ? 0 : (int32_t)(((uint32_t)(((uint64_t)(uint32_t)r * m) >> 32) + rnd) >> s);
    y = y < lo ? lo : y;
    y = y > hi ? hi : y;
    return (uint32_t)(y + zero) & 0xffu;
}

/* The same for lo = 0 and no zero point (the usual case): y in [0, hi] is the field. */
static inline uint32_t mico_lr_code0(int32_t r, uint32_t m, uint32_t s, uint32_t rnd, int32_t hi)
{
    const int32_t y =
        r <= 0 ? 0 : (int32_t)(((uint32_t)(((uint64_t)(uint32_t)r * m) >> 32) + rnd) >> s);
    return (uint32_t)(y > hi ? hi : y);
}

/* The same for a shift of at most 32: the whole 64-bit product. */
static inline uint32_t mico_lr_code64(int32_t r, uint32_t m, uint32_t shift, int32_t lo,
                                      int32_t hi, int32_t zero)
{
    const uint64_t v =
        r <= 0 ? 0u : ((uint64_t)(uint32_t)r * m + ((uint64_t)1 << (shift - 1u))) >> shift;
    int32_t y = v > (uint64_t)(uint32_t)hi ? hi : (int32_t)v;
    y = y < lo ? lo : y;
    return (uint32_t)(y + zero) & 0xffu;
}

/* The same for a shift of at most 32 when lo = 0, no zero point and m >= 2 (hi + 1): a sum of
 * at least lim = 2^(shift - 1) gives hi (r m >= (hi + 1) 2^shift), a smaller one fits 32 bits
 * shifted left by k = 33 - shift, which makes the shift 33: the high word of the product,
 * rounded by its last bit. */
static inline uint32_t mico_lr_code32(int32_t r, uint32_t m, uint32_t k, uint32_t lim, int32_t hi)
{
    uint32_t y;
    if (r <= 0) {
        return 0u;
    }
    if ((uint32_t)r >= lim) {
        return (uint32_t)hi;
    }
    y = ((uint32_t)(((uint64_t)((uint32_t)r << k) * m) >> 32) + 1u) >> 1;
    return y > (uint32_t)hi ? (uint32_t)hi : y;
}

/* Requantize and store n sums of one channel: code j is q applied to b + (v[j] << sh) -
 * csq[j] (modulo 2^32: the lane sums to the layer's sums), stored at element `start` of out.
 * The usual case (ReLU, a multiplier, codes of 8, 4 or 2 bits from a byte boundary, whole
 * bytes) packs the codes in registers, a byte at a time (the high word of
 * the product for shifts above 32); returns 0 (nothing done) for others. */
static MICO_NOINLINE int mico_lr_store(const MicoRq *q, uint32_t b, uint32_t sh,
                                       const int32_t *v, const int32_t *csq, int32_t n, MicoFmt f,
                                       void *out, size_t start)
{
    const uint32_t bits = (uint32_t)f.bits, m = (uint32_t)q->m;
    const uint32_t s = q->shift > 32 ? (uint32_t)(q->shift - 32) : 1u, rnd = 1u << (s - 1u);
    /* after the ReLU every code is at least 0: a clamp below 0 (signed outputs) never acts */
    const int32_t lo = q->lo < 0 ? 0 : q->lo, hi = q->hi, zero = f.is_signed ? 0 : f.zero;
    const uint32_t per = 8u / bits;
    const int plain = lo == 0 && zero == 0;
    uint8_t *o;
    int32_t j;
    if (!q->scaled || q->binary || !q->relu || hi < 0 ||
        (bits != 8u && bits != 4u && bits != 2u) || (start * bits) % 8u != 0u ||
        ((uint32_t)n * bits) % 8u != 0u) {
        return 0;
    }
    o = (uint8_t *)out + start * bits / 8u;
#define MICO_LR_R(J) ((int32_t)(b + ((uint32_t)v[J] << sh) - (uint32_t)csq[J]))
#define MICO_LR_LOOPS(CODE)                                                                 \
    if (per == 1u) {                                                                        \
        for (j = 0; j < n; j++) {                                                           \
            o[j] = (uint8_t)CODE(j);                                                        \
        }                                                                                   \
    } else if (per == 2u) {                                                                 \
        for (j = 0; j < n; j += 2) {                                                        \
            *o++ = (uint8_t)(CODE(j) | CODE(j + 1) << 4);                                   \
        }                                                                                   \
    } else {                                                                                \
        for (j = 0; j < n; j += 4) {                                                        \
            *o++ = (uint8_t)(CODE(j) | CODE(j + 1) << 2 | CODE(j + 2) << 4 | CODE(j + 3) << 6); \
        }                                                                                   \
    }
#define MICO_LR_CODE0(J) mico_lr_code0(MICO_LR_R(J), m, s, rnd, hi)
#define MICO_LR_CODE00(J) mico_lr_code0((int32_t)(b + (uint32_t)v[J] - (uint32_t)csq[J]), m, s, rnd, hi)
#define MICO_LR_CODE(J) mico_lr_code(MICO_LR_R(J), m, s, rnd, lo, hi, zero)
#define MICO_LR_CODE32(J) mico_lr_code32(MICO_LR_R(J), m, k, lim, hi)
#define MICO_LR_CODE64(J) mico_lr_code64(MICO_LR_R(J), m, (uint32_t)q->shift, lo, hi, zero)
    if (q->shift <= 32 && plain && (uint64_t)m >= 2u * ((uint64_t)hi + 1u)) {
        const uint32_t k = 33u - (uint32_t)q->shift, lim = 1u << (q->shift - 1);
        MICO_LR_LOOPS(MICO_LR_CODE32)
    } else if (q->shift <= 32) {
        MICO_LR_LOOPS(MICO_LR_CODE64)
    } else if (plain && sh == 0u) { /* the usual case: no shift of the lane sums */
        MICO_LR_LOOPS(MICO_LR_CODE00)
    } else if (plain) {
        MICO_LR_LOOPS(MICO_LR_CODE0)
    } else {
        MICO_LR_LOOPS(MICO_LR_CODE)
    }
#undef MICO_LR_R
#undef MICO_LR_LOOPS
#undef MICO_LR_CODE0
#undef MICO_LR_CODE00
#undef MICO_LR_CODE64
#undef MICO_LR_CODE32
#undef MICO_LR_CODE
    return 1;
}

/* Input row iy of channel ic (0 <= iy < in_h) into a buffer row: padded column c (input column
 * c - pad_w; outside the input: code 0) at (c % sw) * wq + c / sw, sw * wq columns (by stride
 * phase, so that a tap of consecutive output pixels reads consecutive elements). */
static void mico_lr_row(const MicoConv2d *p, const void *in, int32_t ic, int32_t iy, int32_t wq,
                        int16_t *dst)
{
    const int32_t sw = p->stride_w, len = sw * wq, pw = p->pad_w;
    const int32_t hi = p->in_w + pw < len ? p->in_w + pw : len; /* padded columns [pw, hi) */
    const size_t at = ((size_t)ic * (size_t)p->in_h + (size_t)iy) * (size_t)p->in_w;
    int16_t tmp[2 * MICO_LR_COLS];
    int16_t *const row = sw == 1 ? dst : tmp;
    int32_t c;
    for (c = 0; c < len; c++) { /* padding columns (a loop, not a call of memset) */
        c = c == pw && hi > pw ? hi : c;
        if (c < len) {
            row[c] = 0;
        }
        MICO_S8_SEQ();
    }
    if (hi > pw) {
        mico_lr_unpack(in, at, hi - pw, p->in_fmt, row + pw);
    }
    for (c = 0; sw > 1 && c < len; c++) {
        dst[(c % sw) * wq + c / sw] = tmp[c];
    }
}

/* Weights in channel lanes, by output rows. The input rows a chunk of input channels needs for
 * an output row are unpacked once into int16 rows (zero-padded, by stride phase: mico_lr_row);
 * when one chunk takes every input channel, the rows stay in a ring (R = (k_h - 1) * dil_h + 1
 * per channel, row iy in slot iy mod R), so each input row is unpacked once per layer. Each
 * slot also keeps its rows' sum over the channels, from which the column sums (the weights'
 * offset) of a row come in k_h * k_w adds per pixel. Then for each group of NPX pixels, a
 * table of one pointer per tap, and every block of F channels runs the register-tiled block
 * kernel fn; the row's sums wait in a tile, then each channel's row is requantized and stored.
 * Blocks go in passes of as many as the tile holds (the rows refilled per pass when they take
 * several chunks). Returns 0 (nothing done) for a layer it does not take: output rows wider
 * than MICO_LR_COLS, rows of one input channel that do not fit the buffers.
 * Stack: about 9 KB. */
static MICO_NOINLINE int mico_conv_lr(const MicoConv2d *p, const MicoLanes *l, const void *in,
                                      void *out, MicoLrFn fn, int32_t npx, uint8_t *ws,
                                      size_t wsb)
{
    const int32_t ipg = p->in_c / p->groups, opg = p->out_c / p->groups;
    const int32_t kh = p->k_h, kw = p->k_w, sw = p->stride_w, dw = p->dil_w;
    const int32_t rr = (kh - 1) * p->dil_h + 1; /* ring slots per channel */
    const int32_t k_all = ipg * kh * kw, f = 32 / p->w_bits, nblk = (opg + f - 1) / f;
    const int32_t npix = p->out_h * p->out_w, opw = (p->out_w + npx - 1) / npx * npx;
    const int32_t wq = ((opw - 1) * sw + (kw - 1) * dw) / sw + 1, len = sw * wq;
    const uint32_t *w = (const uint32_t *)(const void *)p->weight;
    const uint32_t s_w = p->w_bits == 1 ? 2u : 1u;
    const uint32_t q_w = p->w_bits == 1 ? 1u : 1u << (p->w_bits - 1);
    int16_t *buf;
    const int16_t **xt;
    int32_t *tile, *sums, *cs, *csq, *tag, *slot, *col;
    int32_t icc, nch, multi, pass, g, oy, b0, ic0, b, c, j, t, k, i, ky, kx;
    if (p->in_fmt.bits > 8 || opw > MICO_LR_COLS || len > 2 * MICO_LR_COLS ||
        rr * len > MICO_LR_SUMS || rr > MICO_LR_COLS || kw > MICO_LR_COLS) {
        return 0;
    }
    icc = MICO_LR_BUF / (rr * len);
    /* taps the table holds: (TAPS - 1) n / (n + 1), which is TAPS - 2 from n = TAPS - 2 on;
     * below, the product fits 32 bits (no 64-bit division: __divdi3 is about 1 KB of flash) */
    t = l->n >= MICO_LR_TAPS - 2 ? MICO_LR_TAPS - 2 : (MICO_LR_TAPS - 1) * l->n / (l->n + 1);
    icc = icc < t / (kh * kw) ? icc : t / (kh * kw);
    pass = MICO_LR_TILE / (f * opw); /* blocks whose sums wait in the tile */
    if (icc == 0 || pass == 0) {
        return 0;
    }
    nch = (ipg + icc - 1) / icc; /* chunks of input channels, balanced */
    icc = (ipg + nch - 1) / nch;
    multi = nch > 1;
    pass = pass < nblk ? pass : nblk;
    { /* the working memory (mico.codegen.scratch.rows_bytes computes the same) */
        const size_t taps = (size_t)(icc * kh * kw);
        const size_t sz[9] = {(size_t)(icc * rr * len) * sizeof(int16_t),
                              (taps + (taps + (size_t)l->n - 1u) / (size_t)l->n) *
                                  sizeof(const int16_t *),
                              (size_t)(pass * f * opw) * 4u, (size_t)(rr * len) * 4u,
                              (size_t)opw * 4u, (size_t)opw * 4u, (size_t)rr * 4u,
                              (size_t)kh * 4u, (size_t)kw * 4u};
        size_t need = 0;
        for (i = 0; i < 9; i++) {
            need += (sz[i] + 7u) & ~(size_t)7u;
        }
        if (ws == NULL || need > wsb) {
            return -1; /* taken, but not in this memory */
        }
        buf = (int16_t *)mico_carve(&ws, sz[0]);
        xt = (const int16_t **)mico_carve(&ws, sz[1]);
        tile = (int32_t *)mico_carve(&ws, sz[2]);
        sums = (int32_t *)mico_carve(&ws, sz[3]);
        cs = (int32_t *)mico_carve(&ws, sz[4]);
        csq = (int32_t *)mico_carve(&ws, sz[5]);
        tag = (int32_t *)mico_carve(&ws, sz[6]);
        slot = (int32_t *)mico_carve(&ws, sz[7]);
        col = (int32_t *)mico_carve(&ws, sz[8]);
    }
    for (kx = 0; kx < kw; kx++) { /* the column of tap kx (of pixel 0) in a row */
        col[kx] = (kx * dw) % sw * wq + kx * dw / sw;
    }
    for (g = 0; g < p->groups; g++) {
        for (i = 0; i < rr; i++) {
            tag[i] = INT32_MIN; /* the ring holds no row yet */
        }
        for (oy = 0; oy < p->out_h; oy++) {
            const int32_t iy0 = oy * p->stride_h - p->pad_h;
            for (j = 0; j < opw; j++) {
                cs[j] = 0;
            }
            for (ky = 0; ky < kh; ky++) { /* the ring slot of each kernel row */
                const int32_t iy = iy0 + ky * p->dil_h;
                slot[ky] = ((iy % rr) + rr) % rr;
            }
            for (b0 = 0; b0 < nblk; b0 += pass) {
                const int32_t b1 = b0 + pass < nblk ? b0 + pass : nblk;
                for (j = 0; j < (b1 - b0) * f * opw; j += 4) { /* not a call of memset */
                    tile[j] = 0;
                    tile[j + 1] = 0;
                    tile[j + 2] = 0;
                    tile[j + 3] = 0;
                    MICO_S8_SEQ();
                }
                for (ic0 = 0; ic0 < ipg; ic0 += icc) {
                    const int32_t n_ic = ipg - ic0 < icc ? ipg - ic0 : icc;
                    const int32_t taps = n_ic * kh * kw;
                    for (ky = 0; ky < kh; ky++) { /* the rows of the chunk, channel sums */
                        const int32_t iy = iy0 + ky * p->dil_h, sl = slot[ky];
                        int32_t *const sm = sums + sl * len;
                        if (!multi && tag[sl] == iy) {
                            continue;
                        }
                        tag[sl] = multi ? INT32_MIN : iy;
                        for (c = 0; c < len; c++) {
                            sm[c] = 0;
                            MICO_S8_SEQ();
                        }
                        for (i = 0; i < n_ic; i++) {
                            int16_t *const row = buf + (i * rr + sl) * len;
                            if (iy < 0 || iy >= p->in_h) { /* a padding row */
                                for (c = 0; c < len; c++) {
                                    row[c] = 0;
                                    MICO_S8_SEQ();
                                }
                                continue;
                            }
                            mico_lr_row(p, in, g * ipg + ic0 + i, iy, wq, row);
                        }
                        for (c = 0; c < len && iy >= 0 && iy < p->in_h; c++) {
                            const int16_t *x = buf + sl * len + c, *const x_end = x + n_ic * rr * len;
                            int32_t v = 0;
                            for (; x < x_end; x += rr * len) {
                                v += *x;
                            }
                            sm[c] = v;
                        }
                    }
                    for (ky = 0; b0 == 0 && ky < kh; ky++) { /* column sums */
                        for (kx = 0; kx < kw; kx++) {
                            const int32_t *sm = sums + slot[ky] * len + col[kx];
                            for (j = 0; j < opw; j++) {
                                cs[j] += sm[j];
                            }
                        }
                    }
                    for (i = 0, t = 0, k = 0; i < n_ic; i++) { /* tap (i, ky, kx) */
                        for (ky = 0; ky < kh; ky++) {
                            const int16_t *const row = buf + (i * rr + slot[ky]) * len;
                            for (kx = 0; kx < kw; kx++) {
                                xt[k++] = row + col[kx];
                                if (++t % l->n == 0 || t == taps) {
                                    xt[k++] = NULL; /* the end of a segment */
                                }
                            }
                        }
                    }
                    for (b = b0; b < b1; b++) {
                        fn(w + (size_t)(g * nblk + b) * (size_t)k_all + (size_t)(ic0 * kh * kw),
                           xt, taps, opw, l->is_signed, tile + (b - b0) * f * opw, opw);
                    }
                }
                for (j = 0; b0 == 0 && j < opw; j++) { /* the offset, pixel by pixel */
                    csq[j] = (int32_t)(q_w * (uint32_t)cs[j]);
                }
                for (c = b0 * f; c < b1 * f && c < opg; c++) { /* requantize, store the pass */
                    const int32_t oc = g * opg + c;
                    const MicoRq rq = mico_rq(&p->out, oc);
                    const size_t at = (size_t)oc * (size_t)npix + (size_t)(oy * p->out_w);
                    int32_t *const v = tile + (c - b0 * f) * opw;
                    if (!mico_lr_store(&rq, (uint32_t)p->bias[oc], s_w - 1u, v, csq, p->out_w,
                                       p->out.fmt, out, at)) {
                        mico_lanes_requant(v, cs, p->out_w, (uint32_t)p->bias[oc], s_w, q_w,
                                           &rq);
                        mico_pack(out, at, v, p->out_w, p->out.fmt);
                    }
                }
            }
        }
    }
    return 1;
}

/* A pointwise layer (1x1, stride 1, no padding) computes pixel by pixel, whatever the plane's
 * shape: its planes taken as rows of 32 pixels, when they divide into them, so that each row's
 * fixed work (unpacking, tap table, calls, stores) serves more pixels. (Rows of another width
 * do not pay: DS-CNN's 25x5 planes as rows of 25 took 3.74 instructions per MAC at W4A4, 2.96
 * through the im2col patch.) */
static const MicoConv2d *mico_lr_flat(MicoConv2d *q)
{
    const int32_t npix = q->out_h * q->out_w;
    const int32_t w = npix % 32 == 0 ? 32 : q->out_w;
    if (q->k_h == 1 && q->k_w == 1 && q->stride_h == 1 && q->stride_w == 1 && q->pad_h == 0 &&
        q->pad_w == 0 && w > q->out_w) {
        q->in_h = q->out_h = npix / w;
        q->in_w = q->out_w = w;
    }
    return q;
}

/* Output rows narrower than this take an im2col patch: by rows, each row's fixed work and its
 * padding to NPX pixels would serve too few outputs (DS-CNN's first conv, rows of 5 pixels:
 * 5.27 instructions per MAC by rows at W4A4, 3.62 through the im2col lanes, 2.07 through the
 * pointwise path's patch, mico_pw_patch). */
#define MICO_LR_MIN_W 8

/* Narrow rows go through the patch only for pointwise layers and single-channel inputs, where
 * a row holds the least work: 3x3 layers of several channels on rows of 4 pixels stay cheaper
 * by rows (through the patch, the digits CNN at W4A4 took 880,764 rv32 instructions, more than
 * its W8A8 843,991). */
static int mico_lr_narrow(const MicoConv2d *q)
{
    const int pointwise = q->k_h == 1 && q->k_w == 1;
    return q->out_w < MICO_LR_MIN_W && (pointwise || q->in_c / q->groups == 1);
}

/* ------------------------------------------------------------------------ channel lanes, pointwise */

#define MICO_PW_BUF 2048 /* bytes: a block of pixels of every input channel (64) */
#define MICO_PW_PX 32    /* pixels of a block: the rows of buf and of the tile */
#define MICO_PW_WSUMS 256 /* output channels whose weight sums a call keeps (signed codes) */
#define MICO_PW_WX 512    /* lane weights a call keeps (every block's once, when they fit) */

/* The flushes of MICO_PW_FN: OP is = (the first of a pixel group) or +=. 16-bit lanes: lane 0 of word (g, q) is channel g,
 * lane 1 channel g + G. */
#define MICO_PW_LANES16(OP, G, D)                                                           \
    MICO_UNROLL for (q = 0; q < NPX; q++) {                                                 \
        const uint32_t d = D(q);                                                            \
        MICO_UNROLL for (g = 0; g < (G); g++) {                                             \
            const uint32_t v = acc[g][q];                                                   \
            uint32_t *const tt = (uint32_t *)(void *)(tg + g * xs + q);                      \
            tt[0] OP (v & 0xffffu) + d;                                                     \
            tt[(G) * xs] OP (v >> 16) + d;                                                  \
        }                                                                                   \
    }
/* 8-bit lanes widened to 16 bits (even lanes in wide[i], odd in wide[G * NPX + i]): lane i of
 * word (g, q) is channel iG + g. */
#define MICO_PW_LANES8(OP, G, D)                                                            \
    MICO_UNROLL for (q = 0; q < NPX; q++) {                                                 \
        const uint32_t d = D(q);                                                            \
        MICO_UNROLL for (g = 0; g < (G); g++) {                                             \
            const uint32_t ev = wide[g * NPX + q], od = wide[((G) + g) * NPX + q];          \
            uint32_t *const tt = (uint32_t *)(void *)(tg + g * xs + q);                      \
            tt[0] OP (ev & 0xffffu) + d;                                                    \
            tt[(G) * xs] OP (od & 0xffffu) + d;                                             \
            tt[2 * (G) * xs] OP (ev >> 16) + d;                                             \
            tt[3 * (G) * xs] OP (od >> 16) + d;                                             \
        }                                                                                   \
    }
/* 8-bit lanes of a pixel group's only segment, written into the tile: lane i of word (g, q) is
 * channel iG + g. */
#define MICO_PW_LANES8X4(G)                                                                 \
    MICO_UNROLL for (q = 0; q < NPX; q++) {                                                 \
        const uint32_t d = MICO_PW_START(q);                                                \
        MICO_UNROLL for (g = 0; g < (G); g++) {                                             \
            const uint32_t v = acc[g][q];                                                   \
            uint32_t *const tt = (uint32_t *)(void *)(tg + g * xs + q);                      \
            tt[0] = (v & 0xffu) + d;                                                        \
            tt[(G) * xs] = ((v >> 8) & 0xffu) + d;                                          \
            tt[2 * (G) * xs] = ((v >> 16) & 0xffu) + d;                                     \
            tt[3 * (G) * xs] = (v >> 24) + d;                                               \
        }                                                                                   \
    }
/* What a column's sums start from (the first flush: minus the weights' offset, start[j]), and
 * nothing (the later ones). */
#define MICO_PW_START(Q) ((uint32_t)start[j0 + (Q)])
#define MICO_PW_NONE(Q) 0u

/* Two taps an iteration (the loop's end compare, which spills, once for both). */
#if defined(__GNUC__)
#define MICO_PW_UNROLL2 _Pragma("GCC unroll 2")
#else
#define MICO_PW_UNROLL2
#endif

/* acc = 0 (G x NPX lane words). */
#define MICO_PW_ZERO(G)                                                                     \
    MICO_UNROLL for (g = 0; g < (G); g++) {                                                 \
        MICO_UNROLL for (q = 0; q < NPX; q++) {                                             \
            acc[g][q] = 0;                                                                  \
        }                                                                                   \
    }
/* The taps from wp to END (at least one): per tap, its G lane weights (extracted words at wp)
 * times the NPX columns' fields (one column's loads at a time, MICO_S8_SEQ; for G = 8, one
 * weight's at a time: its 8 weights and 16 sums would not fit the registers); unrolled twice
 * by the compiler (two taps written out in the source spill). */
#define MICO_PW_TAPS(BITS, G, END)                                                          \
    MICO_PW_UNROLL2 do {                                                                    \
        if (NPX <= 2) { /* G = 8: the columns' fields first, then a lane weight at a time */ \
            uint32_t xq[NPX];                                                               \
            MICO_UNROLL for (q = 0; q < NPX; q++) {                                         \
                xq[q] = xp[q];                                                              \
            }                                                                               \
            MICO_UNROLL for (g = 0; g < (G); g++) {                                         \
                const uint32_t wv = wp[g];                                                  \
                MICO_UNROLL for (q = 0; q < NPX; q++) {                                     \
                    acc[g][q] += wv * xq[q];                                                \
                }                                                                           \
                MICO_S8_SEQ();                                                              \
            }                                                                               \
        } else {                                                                            \
            uint32_t wl[G];                                                                 \
            MICO_UNROLL for (g = 0; g < (G); g++) {                                         \
                wl[g] = wp[g];                                                              \
            }                                                                               \
            MICO_UNROLL for (q = 0; q < NPX; q++) {                                         \
                const uint32_t xv = xp[q];                                                  \
                MICO_UNROLL for (g = 0; g < (G); g++) {                                     \
                    acc[g][q] += wl[g] * xv;                                                \
                }                                                                           \
                MICO_S8_SEQ();                                                              \
            }                                                                               \
        }                                                                                   \
        wp += (G);                                                                          \
        xp += xs;                                                                           \
    } while (wp < (END))

/* The centered form of MICO_PW_FN (16-bit lanes whose sums fit 15 bits, weights wx without
 * their offset): lanes from 2^15, one flush, no start. A function of its own: fewer values
 * live around its tap loop, whose 16 lane words then stay in registers. */
#define MICO_PW_CFN(BITS, G)                                                                \
    static MICO_NOINLINE void mico_pw_c##BITS##g##G(const uint32_t *wx, const uint32_t *wend, \
                                                    const uint8_t *x, int32_t np,           \
                                                    int32_t *tile)                          \
    {                                                                                       \
        enum { NPX = 16 / (G), xs = MICO_PW_PX };                                           \
        int32_t j0, g, q;                                                                   \
        for (j0 = 0; j0 < np; j0 += NPX) {                                                  \
            const uint32_t *wp = wx;                                                        \
            const uint8_t *xp = x + j0;                                                     \
            uint32_t acc[G][NPX];                                                           \
            MICO_UNROLL for (g = 0; g < (G); g++) {                                         \
                MICO_UNROLL for (q = 0; q < NPX; q++) {                                     \
                    acc[g][q] = 0x80008000u;                                                \
                }                                                                           \
            }                                                                               \
            MICO_PW_TAPS(BITS, G, wend);                                                    \
            MICO_UNROLL for (q = 0; q < NPX; q++) {                                         \
                MICO_UNROLL for (g = 0; g < (G); g++) {                                     \
                    const uint32_t v = acc[g][q];                                           \
                    uint32_t *const tt = (uint32_t *)(void *)(tile + j0 + g * xs + q);      \
                    tt[0] = v & 0xffffu;                                                    \
                    tt[(G) * xs] = v >> 16;                                                 \
                }                                                                           \
            }                                                                               \
        }                                                                                   \
    }

/* mico_pw_x<b>g<G>: the lane weights of a block of F channels, G words a tap (wx[t G + g]:
 * the fields of word t at bits g b, g b + s, ..., without their offset when centered).
 * mico_pw_w<b>g<G>: that block over np columns (np a multiple of NPX = 16 / G) of a pointwise
 * layer, NPX columns at a time (G x NPX lane words in registers): tap t of column j is the
 * unsigned field x[t * xs + j], xs = MICO_PW_PX (no table: a constant stride). Sums go to
 * tile[c * xs + j]: the first flush of a group writes them from start[j] (minus the weights'
 * offset, or 0), later ones add (no zeroing of the tile). Centered 16-bit lanes go through
 * mico_pw_c<b>g<G>; a reduction of at most n taps in 16- or 8-bit lanes takes one segment and
 * one flush; others flush every n taps (inline for 16- and 8-bit lanes, else
 * mico_lanes_settle and mico_lanes_widen). */
#define MICO_PW_FN(BITS, G)                                                                 \
    static MICO_NOINLINE void mico_pw_x##BITS##g##G(const uint32_t *w, int32_t taps,         \
                                                    int32_t centered, uint32_t *wx)          \
    {                                                                                       \
        const uint32_t s = (BITS) * (G), m = mico_lane_mask(BITS, s);                       \
        /* centered: weights without their offset (16-bit lanes whose sums fit 15 bits) */  \
        const uint32_t off = s == 16u && centered ? (1u << ((BITS) - 1)) * 0x10001u : 0u;   \
        int32_t g, t;                                                                       \
        for (t = 0; t < taps; t++) {                                                        \
            MICO_UNROLL for (g = 0; g < (G); g++) {                                         \
                wx[t * (G) + g] = ((w[t] >> (g * (BITS))) & m) - off;                       \
            }                                                                               \
        }                                                                                   \
    }                                                                                       \
    static MICO_NOINLINE void mico_pw_w##BITS##g##G(const uint32_t *wx, const uint8_t *x,    \
                                                    int32_t taps, int32_t np, int32_t n,    \
                                                    const int32_t *start,                   \
                                                    int32_t *tile, int32_t centered)         \
    {                                                                                       \
        enum { NPX = 16 / (G), F = 32 / (BITS), xs = MICO_PW_PX };                          \
        const uint32_t s = (BITS) * (G);                                                    \
        const uint32_t *const wend = wx + taps * (G);                                       \
        uint32_t wide[2 * (G) * NPX];                                                       \
        int32_t j0, g, q;                                                                   \
        if (s == 16u && centered) {                                                         \
            mico_pw_c##BITS##g##G(wx, wend, x, np, tile);                                   \
            return;                                                                         \
        }                                                                                   \
        for (j0 = 0; j0 < np; j0 += NPX) {                                                  \
            const uint32_t *wp = wx;                                                        \
            const uint8_t *xp = x + j0;                                                     \
            int32_t *const tg = tile + j0;                                                  \
            int32_t fresh = 1, segs = 0;                                                    \
            if (taps <= n && (s == 16u || s == 8u)) { /* one segment */                     \
                uint32_t acc[G][NPX];                                                       \
                MICO_PW_ZERO(G);                                                            \
                MICO_PW_TAPS(BITS, G, wend);                                                \
                if (s == 16u) {                                                             \
                    MICO_PW_LANES16(=, G, MICO_PW_START);                                   \
                } else {                                                                    \
                    MICO_PW_LANES8X4(G);                                                    \
                }                                                                           \
                continue;                                                                   \
            }                                                                               \
            while (wp < wend) {                                                             \
                const uint32_t *const seg_end = (wend - wp) / (G) > n ? wp + n * (G) : wend; \
                uint32_t acc[G][NPX], sums[(G) * NPX];                                      \
                MICO_PW_ZERO(G);                                                            \
                MICO_PW_TAPS(BITS, G, seg_end);                                             \
                if (s == 16u && fresh) { /* two lanes a word (channels g, g + G) */         \
                    MICO_PW_LANES16(=, G, MICO_PW_START);                                   \
                    fresh = 0;                                                              \
                    continue;                                                               \
                }                                                                           \
                if (s == 16u) {                                                             \
                    MICO_PW_LANES16(+=, G, MICO_PW_NONE);                                   \
                    continue;                                                               \
                }                                                                           \
                if (s == 8u) { /* into 16-bit lanes, inline */                              \
                    MICO_UNROLL for (g = 0; g < (G); g++) {                                 \
                        MICO_UNROLL for (q = 0; q < NPX; q++) {                             \
                            const uint32_t v = acc[g][q], i = (uint32_t)(g * NPX + q);      \
                            const uint32_t ev = v & 0x00ff00ffu, od = (v >> 8) & 0x00ff00ffu; \
                            wide[i] = segs ? wide[i] + ev : ev;                             \
                            wide[(G) * NPX + i] = segs ? wide[(G) * NPX + i] + od : od;     \
                        }                                                                   \
                    }                                                                       \
                    if (++segs < 257 && wp < wend) {                                        \
                        continue;                                                           \
                    }                                                                       \
                    if (fresh) { /* lane i of (g, q): channel iG + g */                     \
                        MICO_PW_LANES8(=, G, MICO_PW_START);                                \
                    } else {                                                                \
                        MICO_PW_LANES8(+=, G, MICO_PW_NONE);                                \
                    }                                                                       \
                    segs = 0;                                                               \
                    fresh = 0;                                                              \
                    continue;                                                               \
                }                                                                           \
                if (fresh) { /* the other lanes add into the tile: start it first */        \
                    for (g = 0; g < F; g++) {                                               \
                        MICO_UNROLL for (q = 0; q < NPX; q++) {                             \
                            tg[g * xs + q] = start[j0 + q];                                 \
                        }                                                                   \
                    }                                                                       \
                    fresh = 0;                                                              \
                }                                                                           \
                MICO_UNROLL for (g = 0; g < (G); g++) {                                     \
                    MICO_UNROLL for (q = 0; q < NPX; q++) {                                 \
                        sums[g * NPX + q] = acc[g][q];                                      \
                    }                                                                       \
                }                                                                           \
                if (s <= 8u) {                                                              \
                    segs = mico_lanes_widen(sums, wide, segs, wp >= wend, (G), NPX, tg, xs, \
                                            NPX, s);                                        \
                } else {                                                                    \
                    mico_lanes_settle(sums, (G), NPX, tg, xs, (G) * xs, NPX, s, 0);         \
                }                                                                           \
            }                                                                               \
        }                                                                                   \
    }

typedef void (*MicoPwFn)(const uint32_t *wx, const uint8_t *x, int32_t taps, int32_t np,
                         int32_t n, const int32_t *start, int32_t *tile,
                         int32_t centered);
typedef void (*MicoPwXFn)(const uint32_t *w, int32_t taps, int32_t centered, uint32_t *wx);


/* cs[j] = sum over the taps rows (MICO_PW_PX bytes apart) of column j, pp columns (every column
 * up to the next multiple of 4 set): four columns a word, in two 16-bit lanes each (a sum of
 * at most 64 bytes fits). */
static MICO_NOINLINE void mico_pw_colsums(const uint32_t *w, int32_t taps, int32_t pp,
                                          int32_t *cs)
{
    enum { xs = MICO_PW_PX };
    int32_t j, i;
    for (j = 0; j < pp; j += 4) {
        const uint32_t *x = w + j / 4;
        uint32_t ev = 0, od = 0;
        for (i = 0; i < taps; i++, x += xs / 4) {
            const uint32_t v = *x;
            ev += v & 0x00ff00ffu;
            od += (v >> 8) & 0x00ff00ffu;
        }
        cs[j] = (int32_t)(ev & 0xffffu);
        cs[j + 1] = (int32_t)(od & 0xffffu);
        cs[j + 2] = (int32_t)(ev >> 16);
        cs[j + 3] = (int32_t)(od >> 16);
    }
}

/* ws[c] = o W_c for every output channel c: W_c the sum of its weight codes (from the lanes
 * words), o the offset of the activation fields the kernels multiply (x = u - o). */
static MICO_NOINLINE void mico_pw_wsums(const MicoConv2d *p, int32_t taps, uint32_t o,
                                        int32_t *ws)
{
    const uint32_t bits = (uint32_t)p->w_bits, f = 32u / bits, mask = (1u << bits) - 1u;
    const uint32_t q_w = bits == 1u ? 1u : 1u << (bits - 1u);
    int32_t c, t;
    for (c = 0; c < p->out_c; c++) {
        const uint32_t *w = (const uint32_t *)(const void *)p->weight +
                            (size_t)((uint32_t)c / f) * (size_t)taps;
        const uint32_t sh = (uint32_t)c % f * bits;
        uint32_t s = 0;
        for (t = 0; t < taps; t++) {
            s += (w[t] >> sh) & mask;
        }
        /* offset fields: w + q_w; binary ones: (w + 1) / 2 */
        s = bits == 1u ? 2u * s - (uint32_t)taps : s - (uint32_t)taps * q_w;
        ws[c] = (int32_t)(o * s);
    }
}

/* The code of sum r for a multiplier m with a shift s + 32 above 32, after a ReLU, clamp
 * [0, hi] (mico_lr_code0 with its branches laid out for a ReLU that often acts: 0 at once). */
static inline uint32_t mico_pw_code(int32_t r, uint32_t m, uint32_t s, uint32_t rnd, uint32_t hi)
{
    uint32_t y;
    if (r <= 0) {
        return 0u;
    }
    y = ((uint32_t)(((uint64_t)(uint32_t)r * m) >> 32) + rnd) >> s;
    if (y > hi) {
        return hi;
    }
    return y;
}

/* mico_pw_code without a ReLU, for signed codes: the magnitude rescaled as mico_rescale does
 * for shifts above 32 (round half away from zero), clamped to [lo, hi] and kept as a field of
 * `mask` (two's complement, as mico_pack stores signed codes). */
static inline uint32_t mico_pw_scode(int32_t r, uint32_t m, uint32_t s, uint32_t rnd, int32_t lo,
                                     int32_t hi, uint32_t mask)
{
    const uint32_t mag = r < 0 ? 0u - (uint32_t)r : (uint32_t)r;
    const uint32_t q = ((uint32_t)(((uint64_t)mag * m) >> 32) + rnd) >> s;
    int32_t y = r < 0 ? -(int32_t)q : (int32_t)q;
    if (y < lo) {
        y = lo;
    }
    if (y > hi) {
        y = hi;
    }
    return (uint32_t)y & mask;
}

/* The codes CODE(j) of np sums packed at bit `off` (a multiple of bits below 8) of byte *dst,
 * per = 8 / bits a byte: the bits of a first and a last byte that other codes own are kept
 * (a plane that does not end on a byte: the next one starts inside its last byte), whole bytes
 * between in registers. */
#define MICO_PW_LOOPS(CODE)                                                                 \
    do {                                                                                    \
        int32_t j = 0, je;                                                                  \
        if (off != 0u) { /* up to the first whole byte */                                   \
            uint32_t byte = *dst & ((1u << off) - 1u), o2 = off;                            \
            for (; j < np && o2 < 8u; j++, o2 += bits) {                                    \
                byte |= CODE(j) << o2;                                                      \
            }                                                                               \
            if (o2 < 8u) {                                                                  \
                byte |= *dst & (0xffu << o2) & 0xffu;                                       \
            }                                                                               \
            *dst++ = (uint8_t)byte;                                                         \
        }                                                                                   \
        je = j + (np - j) / (int32_t)per * (int32_t)per;                                    \
        if (per == 1u) {                                                                    \
            for (; j < je; j++) {                                                           \
                *dst++ = (uint8_t)CODE(j);                                                  \
            }                                                                               \
        } else if (per == 2u) {                                                             \
            for (; j < je; j += 2) {                                                        \
                uint32_t byte = CODE(j);                                                    \
                byte |= CODE(j + 1) << 4;                                                   \
                *dst++ = (uint8_t)byte;                                                     \
            }                                                                               \
        } else {                                                                            \
            for (; j < je; j += 4) {                                                        \
                uint32_t byte = CODE(j);                                                    \
                byte |= CODE(j + 1) << 2;                                                   \
                byte |= CODE(j + 2) << 4;                                                   \
                byte |= CODE(j + 3) << 6;                                                   \
                *dst++ = (uint8_t)byte;                                                     \
            }                                                                               \
        }                                                                                   \
        if (j < np) { /* a last byte, partly */                                             \
            uint32_t byte = 0, o2 = 0;                                                      \
            for (; j < np; j++, o2 += bits) {                                               \
                byte |= CODE(j) << o2;                                                      \
            }                                                                               \
            *dst = (uint8_t)(byte | (*dst & (0xffu << o2)));                                \
        }                                                                                   \
    } while (0)

/* Requantize and store the F channels of a block (sums tile[c * MICO_PW_PX + j], np pixels)
 * at pixel pix0 of their planes; (cs, csq): the weights' offset still to take (zeros when the
 * tile holds it already, as it does for weights not binary); cw[c] (or none): what the
 * activations' offset adds to channel c's sums, taken from its bias. The usual case (a ReLU, lo <= 0,
 * no zero point, codes of 8, 4 or 2 bits, weights not binary; a plane may start inside a
 * byte) in one loop per channel with its constants read here, not through a call per channel;
 * any other channel through mico_lr_store or mico_lanes_requant. */
static MICO_NOINLINE void mico_pw_store(const MicoConv2d *p, int32_t oc0, int32_t f,
                                        int32_t *tile, const int32_t *cs, const int32_t *csq,
                                        int32_t np, void *out, int32_t pix0, uint32_t adj,
                                        const int32_t *cw)
{
    const MicoOut *const o = &p->out;
    const uint32_t bits = (uint32_t)o->fmt.bits, per = 8u / (bits ? bits : 1u);
    const size_t npix = (size_t)p->out_h * (size_t)p->out_w;
    const int32_t hi = o->hi;
    const uint32_t s_w = p->w_bits == 1 ? 2u : 1u;
    const uint32_t q_w = p->w_bits == 1 ? 1u : 1u << (p->w_bits - 1);
    /* after a ReLU with lo <= 0 every code is in [0, hi]: signed fields hold it as it is */
    const int usual = o->n_mult != 0 && o->relu && o->lo <= 0 && hi >= 0 && s_w == 1u &&
                      (bits == 8u || bits == 4u || bits == 2u) && o->fmt.zero == 0;
    /* no ReLU, signed codes (a linear bottleneck's projection, a layer before a residual add) */
    const int plain_signed = o->n_mult != 0 && !o->relu && o->fmt.is_signed && s_w == 1u &&
                             (bits == 8u || bits == 4u || bits == 2u) && o->fmt.zero == 0;
    const uint32_t mask = (1u << bits) - 1u;
    int32_t c;
    for (c = 0; c < f; c++) {
        const int32_t oc = oc0 + c, k = o->n_mult > 1 ? oc : 0;
        const size_t at = (size_t)oc * npix + (size_t)pix0;
        const int32_t *const v = tile + c * MICO_PW_PX;
        const uint32_t off = (uint32_t)(at * bits % 8u);
        const uint32_t b = (uint32_t)p->bias[oc] - adj - (cw != NULL ? (uint32_t)cw[c] : 0u);
        const int32_t m = usual ? o->m[k] : 0, shift = usual ? o->shift[k] : 0;
        uint8_t *dst = (uint8_t *)out + at * bits / 8u;
        if (usual && shift > 32) {
            const uint32_t s = (uint32_t)(shift - 32), rnd = 1u << (s - 1u);
#define MICO_PW_CODE(J) mico_pw_code((int32_t)(b + (uint32_t)v[J]), (uint32_t)m, s, rnd, (uint32_t)hi)
            MICO_PW_LOOPS(MICO_PW_CODE);
#undef MICO_PW_CODE
            continue;
        }
        if (plain_signed && o->shift[k] > 32) {
            const uint32_t ms = (uint32_t)o->m[k], s = (uint32_t)(o->shift[k] - 32);
            const uint32_t rnd = 1u << (s - 1u);
            const int32_t lo = o->lo;
#define MICO_PW_CODE(J) mico_pw_scode((int32_t)(b + (uint32_t)v[J]), ms, s, rnd, lo, hi, mask)
            MICO_PW_LOOPS(MICO_PW_CODE);
#undef MICO_PW_CODE
            continue;
        }
        if (usual && shift >= 1 && (uint64_t)(uint32_t)m >= 2u * ((uint64_t)hi + 1u)) {
            const uint32_t ks = 33u - (uint32_t)shift, lim = 1u << (shift - 1);
#define MICO_PW_CODE(J)                                                                     \
    mico_lr_code32((int32_t)(b + (uint32_t)v[J]), (uint32_t)m, ks, lim, hi)
            MICO_PW_LOOPS(MICO_PW_CODE);
#undef MICO_PW_CODE
            continue;
        }
        {
            const MicoRq rq = mico_rq(o, oc);
            int32_t *const vw = tile + c * MICO_PW_PX;
            int32_t j;
            for (j = 0; j < np && adj != 0u; j++) { /* the tile's sums less adj */
                vw[j] = (int32_t)((uint32_t)vw[j] - adj);
            }
            if (!mico_lr_store(&rq, b + adj, s_w - 1u, vw, csq, np, o->fmt, out, at)) {
                mico_lanes_requant(vw, cs, np, b + adj, s_w, q_w, &rq);
                mico_pack(out, at, vw, np, o->fmt);
            }
        }
    }
}


#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__) &&                              \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define MICO_PW_LE 1 /* byte k of a word is the byte at address + k */
#else
#define MICO_PW_LE 0
#endif

/* The offset o of the fields u = x + o the pointwise lanes multiply: -qmin, so that u spans
 * [0, qmax - qmin], at most twice max|x|, and the plan's n (taps of signed sums of |x| in
 * lanes of half the range) holds for the unsigned lanes too. Signed codes are symmetric
 * (|x| <= 2^(b-1) - 1: mico's formats never hold -2^(b-1)): 2^(b-1) - 1, one less than
 * mico_field_map's o (with that o, 2-bit fields reached 3 = 3 max|x| and 8-bit lanes carried
 * into their neighbours); asymmetric codes their zero point. */
static inline uint32_t mico_pw_offset(MicoFmt f)
{
    const MicoFieldMap fm = mico_field_map(f);
    return f.is_signed && f.bits > 1 ? (uint32_t)fm.o - 1u : (uint32_t)fm.o;
}

/* Fields of 4 bits (the low half of v) to bytes: halves to halfwords, nibbles to bytes. */
static inline uint32_t mico_pw_nib4(uint32_t v)
{
    v = (v | (v << 8)) & 0x00ff00ffu;
    return (v | (v << 4)) & 0x0f0f0f0fu;
}

/* Four fields of 2 bits (the low byte of v) to bytes. */
static inline uint32_t mico_pw_nib2(uint32_t v)
{
    v = (v | (v << 12)) & 0x000f000fu;
    return (v | (v << 6)) & 0x03030303u;
}

/* Rows of 32 fields of b bits (8, 4 or 2) into bytes, a word at a time: row r (MICO_PW_PX
 * bytes apart in dst) from bit bit0 + r step of the word-aligned tensor in, word i of a row
 * from its aligned words src[i] (k = 0) or src[i] and src[i + 1] (from bit k), fields xor xr
 * (x in every field), each byte less D (mico_pw_words: 0; mico_pw_words1: 1, for signed codes,
 * whose xor'd fields are never 0, so no byte borrows): about 2.6 instructions a 4-bit field,
 * against about 4.6 a field at a time. Two functions: the unsigned codes' loops without the
 * subtraction. */
#define MICO_PW_WORD(I) (k == 0u ? src[I] : (src[I] >> k) | (src[(I) + 1] << (32u - k)))
#define MICO_PW_WORDS_FN(NAME, D)                                                           \
    static MICO_NOINLINE void NAME(const void *in, size_t bit0, size_t step, int32_t rows,  \
                                   uint32_t b, uint32_t xr, uint8_t *dst)                   \
    {                                                                                       \
        int32_t r;                                                                          \
        uint32_t i;                                                                         \
        for (r = 0; r < rows; r++, bit0 += step, dst += MICO_PW_PX) {                       \
            const uint32_t *const src = (const uint32_t *)in + bit0 / 32u;                  \
            const uint32_t k = (uint32_t)(bit0 % 32u);                                      \
            uint32_t *const row = (uint32_t *)(void *)dst;                                  \
            if (b == 8u) {                                                                  \
                for (i = 0; i < 8u; i++) {                                                  \
                    row[i] = (MICO_PW_WORD(i) ^ xr) - (D);                                  \
                }                                                                           \
            } else if (b == 4u) {                                                           \
                for (i = 0; i < 4u; i++) {                                                  \
                    const uint32_t v = MICO_PW_WORD(i) ^ xr;                                \
                    row[2u * i] = mico_pw_nib4(v & 0xffffu) - (D);                          \
                    row[2u * i + 1u] = mico_pw_nib4(v >> 16) - (D);                         \
                }                                                                           \
            } else {                                                                        \
                for (i = 0; i < 2u; i++) {                                                  \
                    const uint32_t v = MICO_PW_WORD(i) ^ xr;                                \
                    row[4u * i] = mico_pw_nib2(v & 0xffu) - (D);                            \
                    row[4u * i + 1u] = mico_pw_nib2((v >> 8) & 0xffu) - (D);                \
                    row[4u * i + 2u] = mico_pw_nib2((v >> 16) & 0xffu) - (D);               \
                    row[4u * i + 3u] = mico_pw_nib2(v >> 24) - (D);                         \
                }                                                                           \
            }                                                                               \
        }                                                                                   \
    }
MICO_PW_WORDS_FN(mico_pw_words, 0u)
MICO_PW_WORDS_FN(mico_pw_words1, 0x01010101u)
#undef MICO_PW_WORDS_FN
#undef MICO_PW_WORD

/* The fields u = x - qmin of the codes (mico_pw_offset: signed codes x + 2^(b-1) - 1, which
 * is field ^ x less 1 or field + qmax mod 2^b, asymmetric ones their stored field; sh = 0) of
 * pixels [pix0, pix0 + np) of each of the n_ic input planes (npix codes each) into the rows
 * of buf (MICO_PW_PX bytes apart), the columns from np to the row's end zero: a whole row
 * (np = MICO_PW_PX) of 8-, 4- or 2-bit fields of a word-aligned tensor on a little-endian
 * target a word at a time (mico_pw_words) when the words it reads lie within the tensor, any
 * other a field at a time. */
static MICO_NOINLINE void mico_pw_unpack(const void *in, MicoFmt f, int32_t npix, int32_t pix0,
                                         int32_t np, int32_t n_ic, uint8_t *buf)
{
    const MicoFieldMap fm = mico_field_map(f);
    const uint32_t b = (uint32_t)f.bits, mask = (1u << b) - 1u, x = fm.x;
    const uint32_t d = (uint32_t)fm.o - mico_pw_offset(f); /* 1 for signed codes, else 0 */
    const uint32_t c = x - d; /* a field at a time: u = (field + c) mod 2^b (signed: qmax) */
    const size_t bytes = ((size_t)n_ic * (size_t)npix * b + 7u) / 8u;
    const int words = MICO_PW_LE && np == MICO_PW_PX && (b == 8u || b == 4u || b == 2u) &&
                      ((uintptr_t)in & 3u) == 0u;
    uint32_t xr = x, k;
    int32_t i, j;
    for (k = b; k < 32u; k <<= 1) { /* x in every field */
        xr |= xr << k;
    }
    i = 0;
    if (words) { /* every row whose words lie within the tensor (all but maybe the last) */
        const size_t last = ((size_t)(n_ic - 1) * (size_t)npix + (size_t)pix0) * b;
        const int32_t n = (last / 32u + b + (last % 32u != 0u)) * 4u <= bytes ? n_ic : n_ic - 1;
        (d ? mico_pw_words1 : mico_pw_words)(in, (size_t)pix0 * b, (size_t)npix * b, n, b, xr,
                                             buf);
        i = n;
    }
    for (; i < n_ic; i++) {
        uint8_t *const row = buf + i * MICO_PW_PX;
        const size_t bit = ((size_t)i * (size_t)npix + (size_t)pix0) * b;
        {
            const uint8_t *p8 = (const uint8_t *)in + bit / 8u;
            uint32_t v = (uint32_t)*p8++ >> (bit % 8u), have = 8u - (uint32_t)(bit % 8u);
            for (j = 0; j < np; j++) {
                if (have < b) {
                    v |= (uint32_t)*p8++ << have;
                    have += 8u;
                }
                row[j] = (uint8_t)((v + c) & mask);
                v >>= b;
                have -= b;
            }
            for (; j < MICO_PW_PX; j++) {
                row[j] = 0;
            }
        }
    }
}

/* Whether the input rows a block of MICO_PW_PX output pixels reads (mico_pw_patch) fit nscr
 * int16. */
static int64_t mico_pw_patch_len64(const MicoConv2d *p)
{
    const int32_t span = (MICO_PW_PX - 1 + p->out_w - 1) / p->out_w; /* output rows - 1 */
    const int64_t nr = (int64_t)span * p->stride_h + (int64_t)(p->k_h - 1) * p->dil_h + 1;
    const int64_t wp = (int64_t)(p->out_w - 1) * p->stride_w + (int64_t)(p->k_w - 1) * p->dil_w + 1;
    return (int64_t)p->in_c * nr * wp;
}

static int mico_pw_patch_fits(const MicoConv2d *p, int32_t nscr)
{
    return mico_pw_patch_len64(p) <= nscr;
}

/* The int16 of those rows (a layer whose rows fit). */
static size_t mico_pw_patch_len(const MicoConv2d *p)
{
    return (size_t)mico_pw_patch_len64(p);
}

/* The im2col patch of output pixels [pix0, pix0 + np) of a layer of one group into buf (tap t
 * = (ic k_h + ky) k_w + kx of pixel j at buf[t * MICO_PW_PX + j], as the field code + o;
 * columns np .. MICO_PW_PX - 1 zero): the input rows the pixels read are unpacked once,
 * zero-padded, into scr (mico_pw_patch_fits), then each tap copies its codes through a table of
 * where each pixel's window starts (about 4 instructions a code, against about 20 through
 * mico_conv_patch's unpacking per run of an output row: DS-CNN's first conv has rows of 5
 * outputs). */
static MICO_NOINLINE void mico_pw_patch(const MicoConv2d *p, const void *in, int32_t pix0,
                                        int32_t np, uint32_t o, int16_t *scr, uint8_t *buf)
{
    enum { xs = MICO_PW_PX };
    const int32_t sh = p->stride_h, sw = p->stride_w, dh = p->dil_h, dw = p->dil_w;
    const int32_t oy0 = pix0 / p->out_w;
    const int32_t oy1 = (pix0 + np - 1) / p->out_w;
    const int32_t nr = (oy1 - oy0) * sh + (p->k_h - 1) * dh + 1; /* input rows of a channel */
    const int32_t wp = (p->out_w - 1) * sw + (p->k_w - 1) * dw + 1; /* padded row length */
    const size_t plane = (size_t)p->in_h * (size_t)p->in_w;
    int32_t so[MICO_PW_PX], ic, r, ky, kx, j, k;
    for (ic = 0; ic < p->in_c; ic++) { /* the rows, from column -pad_w */
        for (r = 0; r < nr; r++) {
            const int32_t iy = oy0 * sh - p->pad_h + r;
            int16_t *const dst = scr + (ic * nr + r) * wp;
            if (iy < 0 || iy >= p->in_h) {
                for (k = 0; k < wp; k++) {
                    dst[k] = 0;
                }
                continue;
            }
            mico_unpack_padded(in, (size_t)ic * plane + (size_t)iy * (size_t)p->in_w, p->in_w,
                               -p->pad_w, wp, 0, p->in_fmt, dst);
        }
    }
    for (j = 0; j < np; j++) { /* where pixel j's first tap is in scr */
        const int32_t oy = (pix0 + j) / p->out_w, ox = (pix0 + j) % p->out_w;
        so[j] = (oy - oy0) * sh * wp + ox * sw;
    }
    for (ic = 0; ic < p->in_c; ic++) {
        for (ky = 0; ky < p->k_h; ky++) {
            for (kx = 0; kx < p->k_w; kx++, buf += xs) {
                const int16_t *const src = scr + (ic * nr + ky * dh) * wp + kx * dw;
                for (j = 0; j + 4 <= np; j += 4) {
                    buf[j] = (uint8_t)((uint32_t)src[so[j]] + o);
                    buf[j + 1] = (uint8_t)((uint32_t)src[so[j + 1]] + o);
                    buf[j + 2] = (uint8_t)((uint32_t)src[so[j + 2]] + o);
                    buf[j + 3] = (uint8_t)((uint32_t)src[so[j + 3]] + o);
                }
                for (; j < np; j++) {
                    buf[j] = (uint8_t)((uint32_t)src[so[j]] + o);
                }
                for (; j < xs; j++) {
                    buf[j] = 0;
                }
            }
        }
    }
}

/* Weights in channel lanes, a pointwise layer (1x1, stride 1, no padding, one group) pixel by
 * pixel whatever its planes' shape: blocks of xs (32) pixels of every input channel unpacked
 * once into buf as unsigned fields u = x + o (mico_pw_unpack: a word at a time where it can),
 * their column sums (the weights' offset),
 * then every block of F channels runs the block kernel fn over the block, and its sums are
 * requantized and stored (mico_pw_store, o W_c taken from the bias: mico_pw_wsums). With
 * `patched`, any layer of one group and at most 64 taps (in_c k_h k_w) the same way over its
 * im2col patch (mico_pw_patch), built once per block of pixels for every channel: DS-CNN's
 * first conv (one input plane, 40 taps, rows of 5 outputs). Returns 0 (nothing done) for a
 * layer it does not take (more than 64 taps, codes of more than 8 bits or binary ones, offset
 * codes on more than MICO_PW_WSUMS channels, a patch's rows beyond the scratch). Stack: about
 * 10 KB (9.7 KB here, the lane weights included; was 11 KB). */
static MICO_NOINLINE int mico_conv_pw(const MicoConv2d *p, const MicoLanes *l, const void *in,
                                      void *out, MicoPwXFn xfn, MicoPwFn fn, int32_t npx,
                                      int patched, uint8_t *ws, size_t wsb)
{
    const int32_t taps = p->in_c * p->k_h * p->k_w, f = 32 / p->w_bits;
    const int32_t nblk = (p->out_c + f - 1) / f, npix = p->out_h * p->out_w;
    const uint32_t q_w = p->w_bits == 1 ? 1u : 1u << (p->w_bits - 1);
    const MicoFieldMap fm = mico_field_map(p->in_fmt);
    const uint32_t o = mico_pw_offset(p->in_fmt); /* x = u - o */
    const int pointwise = p->k_h == 1 && p->k_w == 1 && p->stride_h == 1 && p->stride_w == 1 &&
                          p->pad_h == 0 && p->pad_w == 0;
    const uint32_t *w = (const uint32_t *)(const void *)p->weight;
    const int32_t xs = MICO_PW_PX;
    uint8_t *buf; /* fields, a row of MICO_PW_PX columns per tap (read as words too) */
    void *tile;   /* the sums of a block of channels; before them, the scratch of mico_pw_patch */
    int32_t cs[MICO_PW_PX], csq[MICO_PW_PX], start[MICO_PW_PX], zeros[MICO_PW_PX];
    int32_t *wsum;
    uint32_t *wx; /* lane weights: every block's (kept) or one block's */
    const int32_t per = taps * (l->s / p->w_bits); /* lane weights of a block */
    const int kept = nblk * per <= MICO_PW_WX;
    const int fold = p->w_bits != 1; /* the offset q_w cs[j] taken in the tile's start */
    /* 16-bit lanes whose sums stay within 15 bits whatever the fields (|w| <= q_w,
     * u < 2^a): weights without their offset, no column sums */
    const int centered = l->s == 16 && p->w_bits != 1 &&
                         (uint32_t)taps * q_w * (1u << p->in_fmt.bits) < 32768u;
    int32_t pix0, j, b;
    if ((!pointwise && !patched) || p->groups != 1 || p->in_fmt.bits > 8 || fm.sh != 0 ||
        taps * xs > MICO_PW_BUF || (o != 0u && p->out_c > MICO_PW_WSUMS) ||
        (!pointwise && !mico_pw_patch_fits(p, 64 * MICO_PW_PX))) {
        return 0;
    }
    { /* the working memory (mico.codegen.scratch.pointwise_bytes computes the same) */
        const size_t sb = (size_t)taps * MICO_PW_PX;
        const size_t st0 = (size_t)f * MICO_PW_PX * 4u;
        const size_t st1 = pointwise ? 0u : mico_pw_patch_len(p) * sizeof(int16_t);
        const size_t st = st0 > st1 ? st0 : st1;
        const size_t sw = o != 0u ? (size_t)p->out_c * 4u : 0u;
        const size_t sx = (size_t)(kept ? nblk * per : per) * 4u;
        const size_t need = ((sb + 7u) & ~(size_t)7u) + ((st + 7u) & ~(size_t)7u) +
                            ((sw + 7u) & ~(size_t)7u) + ((sx + 7u) & ~(size_t)7u);
        if (ws == NULL || need > wsb) {
            return -1; /* taken, but not in this memory */
        }
        buf = (uint8_t *)mico_carve(&ws, sb);
        tile = mico_carve(&ws, st);
        wsum = (int32_t *)mico_carve(&ws, sw);
        wx = (uint32_t *)mico_carve(&ws, sx);
    }
    if (o != 0u) {
        mico_pw_wsums(p, taps, o, wsum);
    }
    for (b = 0; kept && b < nblk; b++) { /* extracted once for every block of pixels */
        xfn(w + (size_t)b * (size_t)taps, taps, centered, wx + b * per);
    }
    for (pix0 = 0; pix0 < npix; pix0 += xs) {
        const int32_t np = npix - pix0 < xs ? npix - pix0 : xs;
        const int32_t pp = (np + npx - 1) / npx * npx;
        if (pointwise) {
            mico_pw_unpack(in, p->in_fmt, npix, pix0, np, taps, buf);
        } else {
            mico_pw_patch(p, in, pix0, np, o, (int16_t *)tile, buf);
        }
        if (!centered) {
            mico_pw_colsums((const uint32_t *)(const void *)buf, taps, pp, cs);
        }
        for (j = 0; j < xs; j++) {
            csq[j] = j < np && !centered ? (int32_t)(q_w * (uint32_t)cs[j]) : 0;
            start[j] = fold ? (int32_t)(0u - (uint32_t)csq[j]) : 0;
            zeros[j] = 0;
        }
        for (b = 0; b < nblk; b++) {
            if (!kept) {
                xfn(w + (size_t)b * (size_t)taps, taps, centered, wx);
            }
            fn(kept ? wx + b * per : wx, buf, taps, pp, l->n, start, (int32_t *)tile, centered);
            mico_pw_store(p, b * f, p->out_c - b * f < f ? p->out_c - b * f : f,
                          (int32_t *)tile, fold ? zeros : cs, fold ? zeros : csq, np, out, pix0,
                          centered ? 32768u : 0u, o != 0u ? wsum + b * f : NULL);
        }
    }
    return 1;
}

/* The block kernels of the (bits, G) pairs, and the entry points: by rows where the layer fits,
 * else through the im2col patch. */
#define MICO_LR_DEFINE(BITS, G, NPX) MICO_LR_FN(BITS, G) MICO_PW_CFN(BITS, G) MICO_PW_FN(BITS, G)
MICO_LANES_EACH(MICO_LR_DEFINE)

/* The by-rows and pointwise paths of a lanes layer, in the order mico_qconv2d_lanes_* tries
 * them, their working memory in ws (wsb bytes): 1 done, 0 none takes the layer, -1 one takes
 * it but ws is NULL or short (mico.codegen.scratch.lanes_bytes sizes it for the layer). */
static MICO_NOINLINE int mico_lanes_rows(const MicoConv2d *p, const MicoLanes *l, const void *in,
                                         void *out, MicoPwXFn xfn, MicoPwFn fn, MicoLrFn lfn,
                                         int32_t npx, uint8_t *ws, size_t wsb)
{
    MicoConv2d q = *p;
    int r = mico_conv_pw(p, l, in, out, xfn, fn, npx, 0, ws, wsb);
    if (r) {
        return r;
    }
    if (!mico_lr_narrow(mico_lr_flat(&q))) {
        r = mico_conv_lr(&q, l, in, out, lfn, npx, ws, wsb);
        if (r) {
            return r;
        }
    }
    return mico_conv_pw(p, l, in, out, xfn, fn, npx, 1, ws, wsb);
}

/* The most working memory those paths take (their limits; each part rounded up to 8). */
#define MICO_LR_SCRATCH_MAX                                                                 \
    (MICO_LR_BUF * 2 + MICO_LR_TAPS * sizeof(const int16_t *) +                             \
     (MICO_LR_TILE + MICO_LR_SUMS + 5 * MICO_LR_COLS) * 4 + 9 * 8)
#define MICO_PW_SCRATCH_MAX (MICO_PW_BUF + 32 * MICO_PW_PX * 4 + MICO_PW_WSUMS * 4 + MICO_PW_WX * 4)
#define MICO_LANES_SCRATCH_MAX                                                              \
    (MICO_LR_SCRATCH_MAX > MICO_PW_SCRATCH_MAX ? MICO_LR_SCRATCH_MAX : MICO_PW_SCRATCH_MAX)

/* mico_lanes_rows with its working memory on this function's stack: for a caller that planned
 * none (MicoConv2d.scratch NULL or short: the dynamic mode, tests, a band of a patch stage). */
static MICO_NOINLINE int mico_lanes_rows_stack(const MicoConv2d *p, const MicoLanes *l,
                                               const void *in, void *out, MicoPwXFn xfn,
                                               MicoPwFn fn, MicoLrFn lfn, int32_t npx)
{
    uint64_t ws[(MICO_LANES_SCRATCH_MAX + 7) / 8];
    return mico_lanes_rows(p, l, in, out, xfn, fn, lfn, npx, (uint8_t *)ws, sizeof ws);
}

#define MICO_CONV_LANES_ENTRY(BITS, G, NPX)                                                 \
    void mico_qconv2d_lanes_w##BITS##g##G(const MicoConv2d *p, const MicoLanes *l, const void *in,\
                                     void *out)                                             \
    {                                                                                       \
        int r = mico_lanes_rows(p, l, in, out, mico_pw_x##BITS##g##G, mico_pw_w##BITS##g##G,\
                                mico_lr_w##BITS##g##G, 16 / (G), (uint8_t *)p->scratch,     \
                                p->scratch_bytes > 0 ? (size_t)p->scratch_bytes : 0u);      \
        if (r < 0) {                                                                        \
            r = mico_lanes_rows_stack(p, l, in, out, mico_pw_x##BITS##g##G,                 \
                                      mico_pw_w##BITS##g##G, mico_lr_w##BITS##g##G, 16 / (G));\
        }                                                                                   \
        if (!r) {                                                                           \
            mico_conv_lanes(p, l, in, out, mico_lanes_w##BITS##g##G);                       \
        }                                                                                   \
    }
MICO_LANES_EACH(MICO_CONV_LANES_ENTRY)

/* ------------------------------------------------------------------------ depthwise path */

/* vals[i] = bias + 3x3 window sum of n consecutive outputs; x0, x1, x2 point at the first
 * window's rows. The first `first` outputs share one output row; the run goes on over the
 * next rows (out_w outputs each, whose windows start `pitch` elements further down). */
static MICO_NOINLINE void mico_dw3x3(const int16_t *x0, const int16_t *x1, const int16_t *x2,
                                     const int16_t *w, int32_t sw, int32_t bias, int32_t first,
                                     int32_t out_w, int32_t pitch, int32_t n, int32_t *vals)
{
    const int32_t w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4];
    const int32_t w5 = w[5], w6 = w[6], w7 = w[7], w8 = w[8];
    int32_t cnt = first;
    while (n > 0) {
        int32_t *const end = vals + (cnt < n ? cnt : n);
        const int32_t back = pitch - (out_w - first) * sw; /* to the next row's first window */
        n -= (int32_t)(end - vals);
        for (; vals < end; vals++, x0 += sw, x1 += sw, x2 += sw) {
            int32_t a = bias + w0 * x0[0];
            a += w1 * x0[1];
            a += w2 * x0[2];
            a += w3 * x1[0];
            a += w4 * x1[1];
            a += w5 * x1[2];
            a += w6 * x2[0];
            a += w7 * x2[1];
            a += w8 * x2[2];
            *vals = a;
        }
        if (n > 0) {
            x0 += back - cnt * sw;
            x1 += back - cnt * sw;
            x2 += back - cnt * sw;
            first = cnt = out_w;
        }
    }
}

/* Padded input row: `cols` columns of input row iy from padded column 0 (zeros outside). */
static MICO_NOINLINE void mico_dw_row(const MicoConv2d *p, const void *in, size_t plane,
                                      int32_t iy, int32_t cols, int16_t *dst)
{
    if (iy >= 0 && iy < p->in_h) {
        mico_unpack_padded(in, plane + (size_t)iy * (size_t)p->in_w, p->in_w, -p->pad_w, cols,
                           0, p->in_fmt, dst);
    } else {
        mico_unpack_padded(in, 0, 0, 0, cols, 0, p->in_fmt, dst); /* all padding */
    }
}

/* Depthwise 3x3 on a ring of unpacked zero-padded input rows: each input row is unpacked once
 * per channel; when the channel's whole padded plane fits, it is unpacked up front and runs of
 * outputs may cross output rows. Outputs go in runs of up to MICO_DW_OUT consecutive elements
 * of the channel's plane: window sums, then requantize and pack. Returns 0 (and does nothing)
 * when three padded rows do not fit the ring (the im2col path takes those). */
static MICO_NOINLINE int mico_qconv2d_dw(const MicoConv2d *p, const void *in, void *out)
{
    const int32_t sw = p->stride_w, dh = p->dil_h;
    const int32_t width = (p->out_w - 1) * sw + 3;                 /* padded columns used */
    const int32_t full_h = (p->out_h - 1) * p->stride_h + 2 * dh + 1; /* padded rows used */
    const int32_t out_plane = p->out_h * p->out_w;
    const int32_t nrows =
        MICO_DW_BAND / width < MICO_DW_ROWS ? MICO_DW_BAND / width : MICO_DW_ROWS;
    const int whole = full_h <= nrows; /* the whole padded plane, rows at a fixed pitch */
    int16_t band[MICO_DW_BAND];
    int16_t w[9];
    int16_t tag[MICO_DW_ROWS];
    int32_t vals[MICO_DW_OUT];
    int32_t c, o0, i;
    MicoFmt w_fmt;

    if (nrows < 2 * dh + 1 || full_h > 32767) {
        return 0;
    }
    for (i = 0; whole && i < full_h * width; i++) {
        band[i] = 0; /* the padding of the whole plane stays zero */
    }
    w_fmt.bits = p->w_bits;
    w_fmt.is_signed = 1;
    w_fmt.zero = 0;
    for (c = 0; c < p->out_c; c++) {
        const size_t plane = (size_t)c * (size_t)p->in_h * (size_t)p->in_w;
        MicoRq rq;
        mico_unpack(p->weight, (size_t)c * 9u, 9, w_fmt, w);
        for (i = 0; i < nrows; i++) {
            const int32_t iy = i - p->pad_h;
            const int32_t cols = p->in_w < width - p->pad_w ? p->in_w : width - p->pad_w;
            tag[i] = -1;
            if (whole && iy >= 0 && iy < p->in_h && i < full_h && cols > 0) {
                mico_unpack(in, plane + (size_t)iy * (size_t)p->in_w, cols, p->in_fmt,
                            band + i * width + p->pad_w);
            }
        }
        for (o0 = 0; o0 < out_plane; o0 += MICO_DW_OUT) {
            const int32_t n = out_plane - o0 < MICO_DW_OUT ? out_plane - o0 : MICO_DW_OUT;
            int32_t j = 0;
            while (j < n) {
                const int32_t oy = (o0 + j) / p->out_w, ox = (o0 + j) % p->out_w;
                /* runs stay in one output row unless the whole plane is there */
                const int32_t seg = whole || n - j < p->out_w - ox ? n - j : p->out_w - ox;
                const int16_t *rowp[3];
                int32_t ky;
                for (ky = 0; ky < 3; ky++) {
                    const int32_t pr = oy * p->stride_h + ky * dh; /* padded row */
                    int16_t *row = band + (pr % nrows) * width;
                    if (!whole && tag[pr % nrows] != pr) {
                        mico_dw_row(p, in, plane, pr - p->pad_h, width, row);
                        tag[pr % nrows] = (int16_t)pr;
                    }
                    rowp[ky] = row + ox * sw;
                }
                mico_dw3x3(rowp[0], rowp[1], rowp[2], w, sw, p->bias[c], p->out_w - ox,
                           p->out_w, p->stride_h * width, seg, vals + j);
                j += seg;
            }
            rq = mico_rq(&p->out, c);
            mico_rq_run_fast(&rq, vals, n);
            mico_pack(out, (size_t)c * (size_t)out_plane + (size_t)o0, vals, n, p->out.fmt);
        }
    }
    return 1;
}

/* The paths as entry points. A generated model calls the one mico_qconv2d would take for its
 * layer (mico.codegen.emitters.conv2d_kernel applies the same rule), so that a linker that
 * drops unreferenced sections keeps only the paths the model uses. */
void mico_qconv2d_elementwise(const MicoConv2d *p, const void *in, void *out)
{
    mico_qconv2d_generic(p, in, out);
}

void mico_qconv2d_tiled(const MicoConv2d *p, const void *in, void *out)
{
    mico_qconv2d_im2col(p, in, out, NULL, NULL);
}

/* The im2col path with the word and pixel-lane kernels of 4-bit (_sub4) or 2-bit (_sub2)
 * weights; a layer of the other width takes the pixel lanes or the plain kernels. */
void mico_qconv2d_tiled_sub4(const MicoConv2d *p, const void *in, void *out)
{
    uint32_t xw[MICO_CONV_XW]; /* the chunk's words (on this path's stack only) */
    mico_qconv2d_im2col(p, in, out, &mico_conv_words4, xw);
}

void mico_qconv2d_tiled_sub2(const MicoConv2d *p, const void *in, void *out)
{
    uint32_t xw[MICO_CONV_XW];
    mico_qconv2d_im2col(p, in, out, &mico_conv_words2, xw);
}

/* W8A8 layers: the byte paths (about 7 KB of code, linked only by programs that call this),
 * the im2col path for a layer they do not take. */
void mico_qconv2d_tiled_s8(const MicoConv2d *p, const void *in, void *out)
{
    if (p->w_bits == 8 && p->in_fmt.bits == 8 &&
        (mico_qconv2d_s8_pw(p, in, out) || mico_qconv2d_s8(p, in, out))) {
        return; /* W8A8: bytes as they are */
    }
    mico_qconv2d_im2col(p, in, out, NULL, NULL);
}

void mico_qconv2d_depthwise3x3(const MicoConv2d *p, const void *in, void *out)
{
    if (!mico_qconv2d_dw(p, in, out)) {
        mico_qconv2d_im2col(p, in, out, NULL, NULL);
    }
}

void mico_qconv2d(const MicoConv2d *p, const void *in, void *out)
{
    if (p->in_fmt.bits > 8) {
        mico_qconv2d_elementwise(p, in, out);
    } else if (p->groups == p->in_c && p->groups == p->out_c && p->k_h == 3 && p->k_w == 3 &&
               p->dil_w == 1) {
        mico_qconv2d_depthwise3x3(p, in, out);
    } else if (p->w_bits == 8 && p->in_fmt.bits == 8) {
        mico_qconv2d_tiled_s8(p, in, out);
    } else if (p->w_bits == 4) {
        mico_qconv2d_tiled_sub4(p, in, out);
    } else if (p->w_bits == 2) {
        mico_qconv2d_tiled_sub2(p, in, out);
    } else {
        mico_qconv2d_tiled(p, in, out);
    }
}
