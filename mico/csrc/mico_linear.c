/* Integer fully-connected layer on packed codes with packed weights (out x in, row-major).
 * The input is `rows` rows of in_features codes; the output rows of out_features.
 *
 * A chunk of up to MICO_LIN_K input codes is unpacked once into int16 on the stack; then each
 * pair of output features takes a dot product of that chunk with its two weight rows, reading
 * 8-, 4-, 2- and 1-bit weights straight from their packed bytes (decoded in registers) when every
 * row starts on a byte boundary, or from int8 rows unpacked once per chunk otherwise. Rows of
 * 4- or 2-bit weights that span whole 32-bit words are read a word at a time, two or four
 * products per multiply, when the chunk's codes fit the lanes (mico_dot2_mp4 / _mp2); codes
 * that MicoLinear.x_off makes non-negative and narrow (the generator's offset for signed codes
 * of at most 4 bits) take three 4-bit or four 2-bit products a multiply, four rows at a time
 * (mico_lin_t4 / _t2).
 * Sums of up to MICO_LIN_O outputs wait on the stack between chunks, then are requantized and
 * packed as one run. int32 inputs take an element-by-element path. Stack: about 1 KB.
 *
 * W8A8 with symmetric codes (mico_qlinear_s8, its own entry point, which the code generator
 * calls for W8A8 layers of LINEAR_S8_MIN_MACS or more, so that other programs do not link its
 * 2.7 KB): the input bytes are the codes, read in place; 8 outputs x 4 taps a step (each code
 * loaded once for 8 rows), requantization inline. Other layers given to it take mico_qlinear.
 *
 * Weights in channel lanes (mico_qlinear_lanes_w<bits>g<G>, chosen by the code generator):
 * words of F = 32 / bits outputs per input, several low-bit products per 32-bit multiply (see
 * the channel-lanes section of mico_nn.h). */
#include "mico_nn.h"

#define MICO_LIN_K 128 /* input codes unpacked at once */
#define MICO_LIN_O 64  /* outputs whose sums wait between chunks */
#define MICO_LT_K 256  /* input codes a chunk of the word kernels mico_lin_t4 / _t2 */
#if MICO_LT_K * 3 / 8 > MICO_LIN_K
#error "mico_qlinear_rows' buffer holds MICO_LIN_K words"
#endif

/* *sa += wa . x, *sb += wb . x over n taps. */
static MICO_NOINLINE void mico_dot2_w8(const int16_t *x, const int8_t *wa, const int8_t *wb,
                                       int32_t n, int32_t *sa, int32_t *sb)
{
    int32_t a = *sa, b = *sb;
    const int16_t *const end4 = x + (n & ~3), *const end = x + n;
    for (; x < end4; x += 4, wa += 4, wb += 4) {
        const int32_t x0 = x[0], x1 = x[1], x2 = x[2], x3 = x[3];
        a += wa[0] * x0 + wa[1] * x1 + wa[2] * x2 + wa[3] * x3;
        b += wb[0] * x0 + wb[1] * x1 + wb[2] * x2 + wb[3] * x3;
    }
    for (; x < end; x++) {
        a += *wa++ * x[0];
        b += *wb++ * x[0];
    }
    *sa = a;
    *sb = b;
}

/* The same with 4- or 2-bit weight bytes (n a whole number of bytes), one byte of each row per
 * step. The fields f are taken as they are: field f is the weight f' - o with f' = f ^ x
 * (two's complement, x = o = 2^(bits-1)), so the sums miss o * (sum of x), which xsum
 * (the sum of x over the n taps) puts back. */
static MICO_NOINLINE void mico_dot2_w4(const int16_t *x, const uint8_t *wa, const uint8_t *wb,
                                       int32_t n, int32_t xsum, int32_t *sa, int32_t *sb)
{
    int32_t a = 0, b = 0;
    const int16_t *const end = x + n;
    for (; x < end; x += 2) {
        const uint32_t ua = *wa++ ^ 0x88u, ub = *wb++ ^ 0x88u;
        const int32_t x0 = x[0], x1 = x[1];
        a += (int32_t)(ua & 15u) * x0 + (int32_t)(ua >> 4) * x1;
        b += (int32_t)(ub & 15u) * x0 + (int32_t)(ub >> 4) * x1;
    }
    *sa += a - 8 * xsum;
    *sb += b - 8 * xsum;
}

static MICO_NOINLINE void mico_dot2_w2(const int16_t *x, const uint8_t *wa, const uint8_t *wb,
                                       int32_t n, int32_t xsum, int32_t *sa, int32_t *sb)
{
    int32_t a = 0, b = 0;
    const int16_t *const end = x + n;
    for (; x < end; x += 4) {
        const uint32_t ua = *wa++ ^ 0xaau, ub = *wb++ ^ 0xaau;
        const int32_t x0 = x[0], x1 = x[1], x2 = x[2], x3 = x[3];
        a += (int32_t)(ua & 3u) * x0 + (int32_t)((ua >> 2) & 3u) * x1 +
             (int32_t)((ua >> 4) & 3u) * x2 + (int32_t)(ua >> 6) * x3;
        b += (int32_t)(ub & 3u) * x0 + (int32_t)((ub >> 2) & 3u) * x1 +
             (int32_t)((ub >> 4) & 3u) * x2 + (int32_t)(ub >> 6) * x3;
    }
    *sa += a - 2 * xsum;
    *sb += b - 2 * xsum;
}

/* Binary weights (2f - 1 for field f), one byte of each row per step: the loop sums f * x, and
 * the sums are 2 * (sum of f * x) - xsum. */
static MICO_NOINLINE void mico_dot2_w1(const int16_t *x, const uint8_t *wa, const uint8_t *wb,
                                       int32_t n, int32_t xsum, int32_t *sa, int32_t *sb)
{
    int32_t a = 0, b = 0, j;
    const int16_t *const end = x + n;
    for (; x < end; x += 8) {
        const uint32_t ua = *wa++, ub = *wb++;
        for (j = 0; j < 8; j++) {
            const int32_t xj = x[j];
            a += (int32_t)((ua >> j) & 1u) * xj;
            b += (int32_t)((ub >> j) & 1u) * xj;
        }
    }
    *sa = (int32_t)((uint32_t)*sa + 2u * (uint32_t)a - (uint32_t)xsum);
    *sb = (int32_t)((uint32_t)*sb + 2u * (uint32_t)b - (uint32_t)xsum);
}

/* ---------------------------------------------- several products per multiply (4-, 2-bit) */

/* Weights of 4 or 2 bits read a 32-bit word (8 or 16 taps of a row) at a time, two or four
 * products per multiply. Field f of a word is taken as w' = f ^ o (o = 2^(bits-1)), the weight
 * plus o, in [0, 2^bits); the codes x of the chunk are packed once into words xw so that one
 * multiply sums products of matching taps in one lane:
 *  - 4 bits, 16-bit lanes: (v >> 4j) & 0x000f000f holds the weights of taps j and j + 4 of
 *    the word's 8 (j < 4) in its two halves; xw = x[j + 4] + x[j] * 2^16 (mod 2^32, codes of
 *    either sign); their product's high half gains x[j] w'[j] + x[j + 4] w'[j + 4]. The low
 *    halves' sum L and the high halves' sum H are each at most 15 sum |x| in magnitude: below
 *    2^15 (mico_lin_mp_ok), the sum L + 2^16 H (mod 2^32) gives L (its low half, sign
 *    extended) and H.
 *  - 2 bits, byte lanes: (v >> 2j) & 0x03030303 holds taps j, j + 4, j + 8, j + 12 in its
 *    bytes; xw = x[j + 12] + x[j + 8] 2^8 + x[j + 4] 2^16 + x[j] 2^24: bits 24..31 of the
 *    product hold the sum of the four products of matching taps (at most 12 max x, below 256
 *    for codes in [0, 21]) above lanes of at most 9 max x that never carry into them. Each
 *    product's top byte is added on its own.
 * Words are read little-endian, at 4-byte aligned addresses (the caller checks both). */
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__) &&                              \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define MICO_LIN_MP 1
#else
#define MICO_LIN_MP 0
#endif

/* *sa, *sb += sum over nw words of rows wa, wb of w' x: BITS-bit weights, each weight word
 * (its fields flipped by FLIP: w' = f ^ o) read against NX words of xw, word j's taps in the
 * lanes of (v >> BITS j) & M; TERM(t) what a product t adds to the row's sum, FINISH(s, a) the
 * row's sum s with the kernel's a added. UNROLL: MICO_UNROLL, or nothing for a loop kept
 * rolled (the rarely taken mico_dot2_mp2w, whose 8 products a word would double its code). */
#define MICO_LIN_MPW(NAME, BITS, FLIP, M, NX, TERM, FINISH, UNROLL)                         \
    static MICO_NOINLINE void NAME(const uint32_t *xw, const uint32_t *wa, const uint32_t *wb, \
                                   int32_t nw, int32_t *sa, int32_t *sb)                    \
    {                                                                                       \
        const uint32_t m = (M);                                                             \
        const uint32_t *const end = wa + nw;                                                \
        uint32_t a = 0, b = 0;                                                              \
        int32_t j;                                                                          \
        for (; wa < end; xw += (NX)) {                                                      \
            uint32_t va = *wa++ ^ (FLIP), vb = *wb++ ^ (FLIP);                              \
            UNROLL for (j = 0; j < (NX); j++, va >>= (BITS), vb >>= (BITS)) {               \
                a += TERM(xw[j] * (va & m));                                                \
                b += TERM(xw[j] * (vb & m));                                                \
            }                                                                               \
        }                                                                                   \
        *sa = FINISH(*sa, a);                                                               \
        *sb = FINISH(*sb, b);                                                               \
    }
/* 16-bit lanes: the low halves' sum L taken off a (L sign extended), the high halves' sum H
 * added. */
#define MICO_LIN_TERM16(t) (t)
#define MICO_LIN_FIN16(s, a)                                                                \
    (int32_t)((uint32_t)(s) +                                                               \
              (uint32_t)((int32_t)((a) - (uint32_t)(int32_t)(int16_t)((a) & 0xffffu)) >> 16))
/* Byte lanes (2-bit weights): the top byte of a product t, as a sum of non-negative products
 * (codes in [0, 21]) or, with codes of either sign (|x| <= 10: the top byte's sum in [-120,
 * 120], the lanes below it less than 2^23 in magnitude), rounded: those lanes' sign taken off
 * by 2^23, and the sum sign extended; each product's top byte is added on its own. */
#define MICO_LIN_TOP_U(t) ((t) >> 24)
#define MICO_LIN_TOP_S(t) ((uint32_t)((int32_t)((t) + 0x00800000u) >> 24))
#define MICO_LIN_FIN8(s, a) (int32_t)((uint32_t)(s) + (a))
/* 4-bit weights, 16-bit lanes (taps j and j + 4 of a word's 8); 2-bit weights, byte lanes
 * (taps j, j + 4, j + 8, j + 12 of 16: mico_dot2_mp2 for codes in [0, 21], _mp2s for [-10,
 * 10]); 2-bit weights on wider codes (8 bits, say), 16-bit lanes as for 4 bits: (v >> 2j) &
 * 0x00030003 holds the weights of taps j and j + 8 of the word's 16 (j < 8), xw = x[j + 8] +
 * x[j] 2^16; exact while 3 sum |x| < 2^15 (the chunk's length bounds it). */
MICO_LIN_MPW(mico_dot2_mp4, 4, 0x88888888u, 0x000f000fu, 4, MICO_LIN_TERM16, MICO_LIN_FIN16,
             MICO_UNROLL)
MICO_LIN_MPW(mico_dot2_mp2, 2, 0xaaaaaaaau, 0x03030303u, 4, MICO_LIN_TOP_U, MICO_LIN_FIN8,
             MICO_UNROLL)
MICO_LIN_MPW(mico_dot2_mp2s, 2, 0xaaaaaaaau, 0x03030303u, 4, MICO_LIN_TOP_S, MICO_LIN_FIN8,
             MICO_UNROLL)
MICO_LIN_MPW(mico_dot2_mp2w, 2, 0xaaaaaaaau, 0x00030003u, 8, MICO_LIN_TERM16, MICO_LIN_FIN16, )

/* Codes made non-negative (x' = x + x_off, MicoLinear) and narrow take more products a
 * multiply, four rows at a time (each code word loaded once for the four), a row's sums kept
 * in 32 bits (no limit on the chunk):
 *  - 4-bit weights on x' in [0, 15] (mico_lin_t4): w' = f ^ 8 in [0, 15]; the fields at bits
 *    4, 16 and 28 of A = v & M (taps 1, 4, 7 of the word's 8), B = (v << 4) & M (taps 0, 3, 6)
 *    and C = (v >> 4) & M (taps 2, 5), M = 0xf00f00f0, times words holding the codes of the
 *    matching taps at bits 28, 16 and 4 (XA = x'1 2^28 + x'4 2^16 + x'7 2^4, XB = x'0 2^28 +
 *    x'3 2^16 + x'6 2^4, XC = x'2 2^28 + x'5 2^16): bits 32.. of the 64-bit product hold the
 *    sum of the matching products (at most 3 * 225), which the lanes below (bits 8 and 20: at
 *    most 225 and 450) never reach, under lanes at bits 44 and 56. The high words (mulhu) of
 *    a pair of weight words summed (at most 16 * 225 = 3600 < 2^12) keep that sum in their
 *    low 12 bits: 16 products in 6 multiplies.
 *  - 2-bit weights on x' in [0, 5] (mico_lin_t2): byte lanes as mico_dot2_mp2, a word's four
 *    products summed before their top byte is taken (at most 4 * 4 * 3 * 5 = 240 there, at
 *    most 180, 120 and 60 in the lanes below: no carries): 16 products in 4 multiplies.
 * Each call runs outputs o .. o1 - 1 over nw weight words of every row (rows rb bytes apart
 * from w), acc[o] += the row's sum less off (the weights' offset times the codes' sum); a
 * short last group repeats its last row (every sum read before any is written back). */
static inline uint32_t mico_lin_hi(uint32_t a, uint32_t b)
{
    return (uint32_t)(((uint64_t)a * b) >> 32);
}

#define MICO_LT_ROWS(TYPE)                                                                  \
    const TYPE *w0 = (const TYPE *)(const void *)(w + (size_t)o * rb);                      \
    const TYPE *w1 = o + 1 < o1 ? w0 + rb / sizeof(TYPE) : w0;                              \
    const TYPE *w2 = o + 2 < o1 ? w1 + rb / sizeof(TYPE) : w1;                              \
    const TYPE *w3 = o + 3 < o1 ? w2 + rb / sizeof(TYPE) : w2;                              \
    const int32_t i1 = o + 1 < o1 ? o + 1 : o, i2 = o + 2 < o1 ? o + 2 : i1;                \
    const int32_t i3 = o + 3 < o1 ? o + 3 : i2

#define MICO_LT_STORE()                                                                     \
    do {                                                                                    \
        const uint32_t s0 = (uint32_t)acc[o] + a0 - off, s1 = (uint32_t)acc[i1] + a1 - off; \
        const uint32_t s2 = (uint32_t)acc[i2] + a2 - off, s3 = (uint32_t)acc[i3] + a3 - off; \
        acc[o] = (int32_t)s0;                                                               \
        acc[i1] = (int32_t)s1;                                                              \
        acc[i2] = (int32_t)s2;                                                              \
        acc[i3] = (int32_t)s3;                                                              \
    } while (0)

/* The three high words of weight word v's products (mico_lin_t4). */
#define MICO_LT4_WORD(v, xa, xb, xc)                                                        \
    (mico_lin_hi((v) & 0xf00f00f0u, xa) + mico_lin_hi(((v) << 4) & 0xf00f00f0u, xb) +       \
     mico_lin_hi(((v) >> 4) & 0xf00f00f0u, xc))

/* An optimization barrier between rows: one row's weight word live at a time (no spills). */
#if defined(__GNUC__)
#define MICO_LT_SEQ() __asm__ volatile("" ::: "memory")
#else
#define MICO_LT_SEQ()
#endif

/* Row R's word K over the code words xa, xb, xc, its high words into t##R (SET: = or +=). */
#define MICO_LT4_ROW(R, K, SET)                                                             \
    do {                                                                                    \
        const uint32_t v = w##R[K] ^ 0x88888888u;                                           \
        t##R SET MICO_LT4_WORD(v, xa, xb, xc);                                              \
        MICO_LT_SEQ();                                                                      \
    } while (0)

static MICO_NOINLINE void mico_lin_t4(const uint32_t *xw, const uint8_t *w, size_t rb, int32_t o,
                                      int32_t o1, int32_t nw, uint32_t off, int32_t *acc)
{
    for (; o < o1; o += 4) {
        MICO_LT_ROWS(uint32_t);
        const uint32_t *x = xw, *const xend = xw + 3 * (nw & ~1);
        uint32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        for (; x < xend; x += 6, w0 += 2, w1 += 2, w2 += 2, w3 += 2) {
            uint32_t t0, t1, t2, t3, xa = x[0], xb = x[1], xc = x[2];
            MICO_LT4_ROW(0, 0, =);
            MICO_LT4_ROW(1, 0, =);
            MICO_LT4_ROW(2, 0, =);
            MICO_LT4_ROW(3, 0, =);
            xa = x[3];
            xb = x[4];
            xc = x[5];
            MICO_LT4_ROW(0, 1, +=);
            a0 += t0 & 0xfffu;
            MICO_LT4_ROW(1, 1, +=);
            a1 += t1 & 0xfffu;
            MICO_LT4_ROW(2, 1, +=);
            a2 += t2 & 0xfffu;
            MICO_LT4_ROW(3, 1, +=);
            a3 += t3 & 0xfffu;
        }
        if (nw & 1) { /* an odd word */
            uint32_t t0, t1, t2, t3;
            const uint32_t xa = x[0], xb = x[1], xc = x[2];
            MICO_LT4_ROW(0, 0, =);
            MICO_LT4_ROW(1, 0, =);
            MICO_LT4_ROW(2, 0, =);
            MICO_LT4_ROW(3, 0, =);
            a0 += t0 & 0xfffu;
            a1 += t1 & 0xfffu;
            a2 += t2 & 0xfffu;
            a3 += t3 & 0xfffu;
        }
        MICO_LT_STORE();
    }
}

/* The top byte of weight word v's four byte-lane products (mico_lin_t2). */
#define MICO_LT2_WORD(v, x0, x1, x2, x3)                                                    \
    (((v) & 0x03030303u) * (x0) + (((v) >> 2) & 0x03030303u) * (x1) +                      \
     (((v) >> 4) & 0x03030303u) * (x2) + (((v) >> 6) & 0x03030303u) * (x3)) >> 24

/* Row R's word over the code words x0 .. x3, its top byte into a##R. */
#define MICO_LT2_ROW(R)                                                                     \
    do {                                                                                    \
        const uint32_t v = *w##R++ ^ 0xaaaaaaaau;                                           \
        a##R += MICO_LT2_WORD(v, x0, x1, x2, x3);                                           \
        MICO_LT_SEQ();                                                                      \
    } while (0)

static MICO_NOINLINE void mico_lin_t2(const uint32_t *xw, const uint8_t *w, size_t rb, int32_t o,
                                      int32_t o1, int32_t nw, uint32_t off, int32_t *acc)
{
    for (; o < o1; o += 4) {
        MICO_LT_ROWS(uint32_t);
        const uint32_t *x = xw, *const xend = xw + 4 * nw;
        uint32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        for (; x < xend; x += 4) {
            const uint32_t x0 = x[0], x1 = x[1], x2 = x[2], x3 = x[3];
            MICO_LT2_ROW(0);
            MICO_LT2_ROW(1);
            MICO_LT2_ROW(2);
            MICO_LT2_ROW(3);
        }
        MICO_LT_STORE();
    }
}

/* The variant of the word kernels codes of format f plus xo take with wb-bit weights, from the
 * codes' range (every field value counted), and the chunk length *kstep that keeps their lanes
 * exact: with t (mico_qlinear_sub4t / _sub2t), 4 bits on codes in [0, 15], 5 (mico_lin_t4); 2
 * bits on codes in [0, 5], 6 (mico_lin_t2); otherwise 2 bits, 1: byte lanes for codes in [0, 21], 2: rounded byte lanes
 * for [-10, 10], 3: 16-bit lanes (mico_dot2_mp2w) for others; 4 bits, 1: 16-bit lanes. 16-bit
 * lanes hold chunks of up to 2^15 / ((2^bits - 1) max |x|) taps (whole words); 0: not even a
 * word (the bytes). */
static int mico_lin_mp_kind(MicoFmt f, int32_t xo, int32_t wb, int t, int32_t *kstep)
{
    const MicoFieldMap m = mico_field_map(f);
    const int32_t lo = -m.o + xo, hi = (int32_t)(m.mask << m.sh) - m.o + xo;
    const int32_t amax = hi > -lo ? hi : -lo;
    const int32_t per = 32 / wb; /* taps of a word */
    int32_t k;
    *kstep = MICO_LIN_K;
    if (t && lo >= 0 && hi <= (wb == 4 ? 15 : 5)) {
        *kstep = MICO_LT_K;
        return wb == 4 ? 5 : 6;
    }
    if (wb == 2 && lo >= 0 && hi <= 21) {
        return 1;
    }
    if (wb == 2 && amax <= 10) {
        return 2;
    }
    k = 32767 / ((wb == 4 ? 15 : 3) * (amax > 0 ? amax : 1)) / per * per; /* 16-bit lanes */
    *kstep = k < MICO_LIN_K ? k : MICO_LIN_K;
    return k < per ? 0 : wb == 4 ? 1 : 3;
}

/* The words xw of the nt codes of x (nt a whole number of words' taps: 8 for 4-bit weights,
 * 16 for 2-bit ones) for mico_dot2_mp<wb> (wb 3: for mico_dot2_mp2w; 5: for mico_lin_t4, three
 * words XA, XB, XC per 8 taps, from mico_lin_t_words on codes that are not whole bytes;
 * mico_lin_t2 takes wb 2's). */
static MICO_NOINLINE void mico_lin_mp_words(const int16_t *x, int32_t nt, int32_t wb,
                                            uint32_t *xw)
{
    int32_t i, j;
    if (wb == 5) { /* codes in [0, 15] */
        for (i = 0; i < nt; i += 8, x += 8, xw += 3) {
            const uint32_t x0 = (uint32_t)x[0], x1 = (uint32_t)x[1], x2 = (uint32_t)x[2];
            const uint32_t x3 = (uint32_t)x[3], x4 = (uint32_t)x[4], x5 = (uint32_t)x[5];
            const uint32_t x6 = (uint32_t)x[6], x7 = (uint32_t)x[7];
            xw[0] = (x1 << 28) | (x4 << 16) | (x7 << 4);
            xw[1] = (x0 << 28) | (x3 << 16) | (x6 << 4);
            xw[2] = (x2 << 28) | (x5 << 16);
        }
        return;
    }
    if (wb == 3) { /* 2-bit weights in 16-bit lanes: taps j and j + 8 of 16 */
        for (i = 0; i < nt; i += 16, x += 16) {
            for (j = 0; j < 8; j++) {
                *xw++ = (uint32_t)(int32_t)x[j + 8] + ((uint32_t)(int32_t)x[j] << 16);
            }
        }
        return;
    }
    for (i = 0; i < nt; i += 4 * (8 / wb), x += 4 * (8 / wb)) {
        for (j = 0; j < 4; j++) {
            if (wb == 4) {
                *xw++ = (uint32_t)(int32_t)x[j + 4] + ((uint32_t)(int32_t)x[j] << 16);
            } else { /* lanes of either sign, mod 2^32 */
                *xw++ = (uint32_t)(int32_t)x[j + 12] + ((uint32_t)(int32_t)x[j + 8] << 8) +
                        ((uint32_t)(int32_t)x[j + 4] << 16) + ((uint32_t)(int32_t)x[j] << 24);
            }
        }
    }
}

/* mico_linear_chunk with the word kernels (variant mpv of mico_lin_mp_layer, x as the words
 * xw of mico_lin_mp_words): pairs of rows, the kernels' sums of w' x less o x (the sum of x).
 * wb is a constant in each of mico_lin_mp_pairs4 / _pairs2, so each links its width's kernels
 * only. */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline void mico_lin_mp_pairs_wb(const MicoLinear *p, const uint32_t *xw, int mpv,
                                        int32_t k0, int32_t kc, int32_t o0, int32_t o1,
                                        int32_t xsum, int32_t *acc, const int32_t wb)
{
    const uint32_t off = (wb == 4 ? 8u : 2u) * (uint32_t)xsum;
    const size_t f = (size_t)p->in_features;
    int32_t o;
    for (o = o0; o < o1; o += 2) {
        const int32_t ob = o + 1 < o1 ? o + 1 : o; /* an odd count: the last one twice */
        const uint32_t *const a =
            (const uint32_t *)(const void *)(p->weight + ((size_t)o * f + (size_t)k0) * (size_t)wb / 8u);
        const uint32_t *const b =
            (const uint32_t *)(const void *)(p->weight + ((size_t)ob * f + (size_t)k0) * (size_t)wb / 8u);
        int32_t sa = acc[o - o0], sb = acc[ob - o0];
        if (wb == 4) {
            mico_dot2_mp4(xw, a, b, kc / 8, &sa, &sb);
        } else {
            (mpv == 3   ? mico_dot2_mp2w
             : mpv == 2 ? mico_dot2_mp2s
                        : mico_dot2_mp2)(xw, a, b, kc / 16, &sa, &sb);
        }
        acc[o - o0] = (int32_t)((uint32_t)sa - off);
        acc[ob - o0] = (int32_t)((uint32_t)sb - off);
    }
}

static MICO_NOINLINE void mico_lin_mp_pairs4(const MicoLinear *p, const uint32_t *xw, int mpv,
                                             int32_t k0, int32_t kc, int32_t o0, int32_t o1,
                                             int32_t xsum, int32_t *acc)
{
    mico_lin_mp_pairs_wb(p, xw, mpv, k0, kc, o0, o1, xsum, acc, 4);
}

static MICO_NOINLINE void mico_lin_mp_pairs2(const MicoLinear *p, const uint32_t *xw, int mpv,
                                             int32_t k0, int32_t kc, int32_t o0, int32_t o1,
                                             int32_t xsum, int32_t *acc)
{
    mico_lin_mp_pairs_wb(p, xw, mpv, k0, kc, o0, o1, xsum, acc, 2);
}

/* The code words xw of n codes x' = x + xo of the input from element start (n a whole number
 * of a weight word's taps) for mico_lin_t4 (wb 4) or _t2 (wb 2), returning the sum of x':
 * codes of wb bits from a whole byte whose fields xo makes the codes (x' = f ^ x, the format's
 * offset taken off) straight from their bytes, four at a time; others through mico_unpack.
 * Inlined in mico_lin_t_words4 / _words2, one width each. */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline uint32_t mico_lin_t_words(const void *in, size_t start, int32_t n, MicoFmt f,
                                        int32_t xo, const int32_t wb, uint32_t *xw)
{
    const MicoFieldMap m = mico_field_map(f);
    uint32_t sum = 0;
    int32_t i = 0, j;
    if ((int32_t)m.bits == wb && m.sh == 0u && xo == m.o && (start * (size_t)wb) % 8u == 0u) {
        const uint8_t *b = (const uint8_t *)in + start * (size_t)wb / 8u;
        const uint32_t flip = m.x * (wb == 4 ? 0x11111111u : 0x55555555u);
        for (; i < n; i += 32 / wb, b += 4) {
            const uint32_t u = ((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                                (uint32_t)b[3] << 24) ^
                               flip;
            uint32_t t = 0;
            if (wb == 4) { /* XA, XB, XC (mico_lin_t4) */
                xw[0] = ((u << 24) & 0xf0000000u) | (u & 0x000f0000u) | ((u >> 24) & 0xf0u);
                xw[1] = (u << 28) | ((u << 4) & 0x000f0000u) | ((u >> 20) & 0xf0u);
                xw[2] = ((u << 20) & 0xf0000000u) | ((u >> 4) & 0x000f0000u);
                xw += 3;
                t = (u & 0x0f0f0f0fu) + ((u >> 4) & 0x0f0f0f0fu);
            } else { /* word j: taps j, j + 4, j + 8, j + 12 in bytes 3, 2, 1, 0 (mico_lin_t2) */
                for (j = 0; j < 4; j++) {
                    const uint32_t c = (u >> (2 * j)) & 0x03030303u;
                    *xw++ = (c << 24) | ((c << 8) & 0x00ff0000u) | ((c >> 8) & 0x0000ff00u) |
                            (c >> 24);
                    t += c;
                }
            }
            sum += (t * 0x01010101u) >> 24; /* bytes of at most 30 (4 bits), 12 (2 bits) */
        }
        return sum;
    }
    for (; i < n; i += 32) { /* 32 codes at a time: whole words' taps */
        int16_t x[32];
        const int32_t k = n - i < 32 ? n - i : 32;
        mico_unpack(in, start + (size_t)i, k, f, x);
        for (j = 0; j < k; j++) {
            x[j] = (int16_t)(x[j] + xo);
            sum += (uint32_t)(int32_t)x[j];
        }
        mico_lin_mp_words(x, k, wb == 4 ? 5 : 2, xw);
        xw += k * (wb == 4 ? 3 : 4) / (32 / wb);
    }
    return sum;
}

static MICO_NOINLINE uint32_t mico_lin_t_words4(const void *in, size_t start, int32_t n,
                                                MicoFmt f, int32_t xo, uint32_t *xw)
{
    return mico_lin_t_words(in, start, n, f, xo, 4, xw);
}

static MICO_NOINLINE uint32_t mico_lin_t_words2(const void *in, size_t start, int32_t n,
                                                MicoFmt f, int32_t xo, uint32_t *xw)
{
    return mico_lin_t_words(in, start, n, f, xo, 2, xw);
}

/* The variant of the word kernels a layer takes and its chunk length (mico_lin_mp_kind; t:
 * the offset-code kernels linked), 0 for none: rows (and chunks) of 4- or 2-bit weights
 * spanning whole words at 4-byte aligned addresses. */
static int mico_lin_mp_layer(const MicoLinear *p, int t, int32_t *kstep)
{
    const int32_t wb = p->w_bits, nf = p->in_features, per_word = wb == 4 ? 8 : wb == 2 ? 16 : 0;
    if (!MICO_LIN_MP || per_word == 0 || nf % per_word != 0 ||
        ((uintptr_t)p->weight & 3u) != 0 || p->in_fmt.bits > 8) {
        return 0;
    }
    return mico_lin_mp_kind(p->in_fmt, p->x_off, wb, t, kstep);
}

/* The word kernels, linked only by programs that call mico_qlinear_sub4 / _sub2 (layers of
 * 4- or 2-bit weights), with the offset-code kernels (twords, trows) only by those calling
 * mico_qlinear_sub4t / _sub2t (about 2 KB of rv32 code more): mico_qlinear_rows takes them
 * through this table, NULL for mico_qlinear. */
typedef struct {
    void (*pairs)(const MicoLinear *, const uint32_t *, int, int32_t, int32_t, int32_t, int32_t,
                  int32_t, int32_t *);
    void (*words)(const int16_t *x, int32_t nt, int32_t wb, uint32_t *xw);
    int (*kind)(const MicoLinear *p, int t, int32_t *kstep);
    /* kinds 5, 6: the code words of a chunk (mico_lin_t_words4 / _words2), the rows (NULL:
     * not linked, kinds 5 and 6 not taken) */
    uint32_t (*twords)(const void *in, size_t start, int32_t n, MicoFmt f, int32_t xo,
                       uint32_t *xw);
    void (*trows)(const uint32_t *xw, const uint8_t *w, size_t rb, int32_t o, int32_t o1,
                  int32_t nw, uint32_t off, int32_t *acc);
} MicoLinWords;

/* mico_qlinear_sub4 / _sub2: one width's word kernels, mico_qlinear_sub4t / _sub2t with its
 * offset-code kernels (a layer of the other width takes mico_qlinear's path: exact, no word
 * kernels) */
static const MicoLinWords mico_lin_words4 = {mico_lin_mp_pairs4, mico_lin_mp_words,
                                             mico_lin_mp_layer, NULL, NULL};
static const MicoLinWords mico_lin_words2 = {mico_lin_mp_pairs2, mico_lin_mp_words,
                                             mico_lin_mp_layer, NULL, NULL};
static const MicoLinWords mico_lin_words4t = {mico_lin_mp_pairs4, mico_lin_mp_words,
                                              mico_lin_mp_layer, mico_lin_t_words4, mico_lin_t4};
static const MicoLinWords mico_lin_words2t = {mico_lin_mp_pairs2, mico_lin_mp_words,
                                              mico_lin_mp_layer, mico_lin_t_words2, mico_lin_t2};

/* Element by element (int32 inputs). */
static MICO_NOINLINE void mico_qlinear_generic(const MicoLinear *p, const void *in, void *out)
{
    size_t o = 0;
    int32_t r, k, i;
    for (r = 0; r < p->rows; r++) {
        for (k = 0; k < p->out_features; k++, o++) {
            const MicoRq rq = mico_rq(&p->out, k);
            int32_t acc = p->bias[k];
            for (i = 0; i < p->in_features; i++) {
                int8_t w8;
                mico_unpack_s8(p->weight, (size_t)k * (size_t)p->in_features + (size_t)i, 1,
                               p->w_bits, &w8);
                acc += (((const int32_t *)in)[(size_t)r * (size_t)p->in_features + (size_t)i] +
                        p->x_off) *
                       w8;
            }
            mico_rq_run(&rq, &acc, 1);
            mico_pack(out, o, &acc, 1, p->out.fmt);
        }
    }
}

/* Outputs o0 .. o1 - 1 of one row: acc[o - o0] += (weight row o) . x over input codes
 * k0 .. k0 + kc - 1. */
static MICO_NOINLINE void mico_linear_chunk(const MicoLinear *p, const int16_t *x, int32_t k0,
                                            int32_t kc, int32_t o0, int32_t o1, int fused,
                                            int32_t xsum, int32_t *acc)
{
    const int32_t wb = p->w_bits;
    const size_t f = (size_t)p->in_features;
    const uint8_t *w = p->weight;
    int8_t wrow[2 * MICO_LIN_K];
    int32_t o;
    for (o = o0; o < o1; o += 2) {
        const int32_t ob = o + 1 < o1 ? o + 1 : o; /* an odd count: the last one twice */
        const size_t ka = (size_t)o * f + (size_t)k0, kb = (size_t)ob * f + (size_t)k0;
        int32_t sa = acc[o - o0], sb = acc[ob - o0];
        if (!fused) {
            mico_unpack_s8(w, ka, kc, wb, wrow);
            mico_unpack_s8(w, kb, kc, wb, wrow + MICO_LIN_K);
            mico_dot2_w8(x, wrow, wrow + MICO_LIN_K, kc, &sa, &sb);
        } else if (wb == 8) {
            mico_dot2_w8(x, (const int8_t *)w + ka, (const int8_t *)w + kb, kc, &sa, &sb);
        } else if (wb == 4) {
            mico_dot2_w4(x, w + ka / 2, w + kb / 2, kc, xsum, &sa, &sb);
        } else if (wb == 1) {
            mico_dot2_w1(x, w + ka / 8, w + kb / 8, kc, xsum, &sa, &sb);
        } else {
            mico_dot2_w2(x, w + ka / 4, w + kb / 4, kc, xsum, &sa, &sb);
        }
        acc[o - o0] = sa;
        acc[ob - o0] = sb;
    }
}

/* ------------------------------------------------------------------------ W8A8 path */

/* An optimization barrier between output rows: without it the scheduler hoists every load of
 * a step first and runs out of registers (spills in the inner loop). */
#if defined(__GNUC__)
#define MICO_LIN_SEQ() __asm__ volatile("" ::: "memory")
#else
#define MICO_LIN_SEQ()
#endif

/* Row R of a block: four taps of its weights (int8 as stored) times the four codes. */
#define MICO_LIN_ROW(R)                                                                     \
    do {                                                                                    \
        a##R += w##R[0] * x0 + w##R[1] * x1 + w##R[2] * x2 + w##R[3] * x3;                  \
        w##R += 4;                                                                          \
        MICO_LIN_SEQ();                                                                     \
    } while (0)

/* acc[r] += (weight row r) . x over n taps for the 8 rows w + r * nf (the codes x read once
 * for the 8 rows, four taps a step; each weight byte read once: 3.4 instructions per MAC on
 * rv32). XT: uint8_t for unsigned codes, int8_t for signed ones. */
#define MICO_LIN_MK8(NAME, XT)                                                              \
    static MICO_NOINLINE void NAME(const int8_t *w, int32_t nf, const XT *x, int32_t n,     \
                                   int32_t *acc)                                            \
    {                                                                                       \
        const int8_t *w0 = w, *w1 = w0 + nf, *w2 = w1 + nf, *w3 = w2 + nf, *w4 = w3 + nf;   \
        const int8_t *w5 = w4 + nf, *w6 = w5 + nf, *w7 = w6 + nf;                           \
        const XT *const end4 = x + (n & ~3), *const end = x + n;                            \
        int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;             \
        for (; x < end4; x += 4) {                                                          \
            const int32_t x0 = x[0], x1 = x[1], x2 = x[2], x3 = x[3];                       \
            MICO_LIN_ROW(0);                                                                \
            MICO_LIN_ROW(1);                                                                \
            MICO_LIN_ROW(2);                                                                \
            MICO_LIN_ROW(3);                                                                \
            MICO_LIN_ROW(4);                                                                \
            MICO_LIN_ROW(5);                                                                \
            MICO_LIN_ROW(6);                                                                \
            MICO_LIN_ROW(7);                                                                \
        }                                                                                   \
        for (; x < end; x++) {                                                              \
            const int32_t x0 = x[0];                                                        \
            a0 += *w0++ * x0;                                                               \
            a1 += *w1++ * x0;                                                               \
            a2 += *w2++ * x0;                                                               \
            a3 += *w3++ * x0;                                                               \
            a4 += *w4++ * x0;                                                               \
            a5 += *w5++ * x0;                                                               \
            a6 += *w6++ * x0;                                                               \
            a7 += *w7++ * x0;                                                               \
        }                                                                                   \
        acc[0] = (int32_t)((uint32_t)acc[0] + (uint32_t)a0);                                \
        acc[1] = (int32_t)((uint32_t)acc[1] + (uint32_t)a1);                                \
        acc[2] = (int32_t)((uint32_t)acc[2] + (uint32_t)a2);                                \
        acc[3] = (int32_t)((uint32_t)acc[3] + (uint32_t)a3);                                \
        acc[4] = (int32_t)((uint32_t)acc[4] + (uint32_t)a4);                                \
        acc[5] = (int32_t)((uint32_t)acc[5] + (uint32_t)a5);                                \
        acc[6] = (int32_t)((uint32_t)acc[6] + (uint32_t)a6);                                \
        acc[7] = (int32_t)((uint32_t)acc[7] + (uint32_t)a7);                                \
    }
MICO_LIN_MK8(mico_lin_s8_mk_u, uint8_t)
MICO_LIN_MK8(mico_lin_s8_mk_s, int8_t)

/* acc[j] requantized for output o0 + j, j < n: the usual cases (a multiplier with a shift above
 * 32, not binary) inline, the high word of the product only (with ReLU and a non-negative
 * clamp, no sign to handle); others as mico_rq_apply. */
static MICO_NOINLINE void mico_lin_s8_requant(const MicoOut *o, int32_t o0, int32_t *acc,
                                              int32_t n)
{
    int32_t j;
    for (j = 0; j < n; j++) {
        const MicoRq q = mico_rq(o, o0 + j);
        if (q.scaled && !q.binary && q.shift > 32 && q.relu && q.lo >= 0) {
            const uint32_t s = (uint32_t)(q.shift - 32);
            const int32_t r = acc[j];
            int32_t y = r <= 0 ? 0
                               : (int32_t)(((uint32_t)(((uint64_t)(uint32_t)r * (uint32_t)q.m) >>
                                                       32) +
                                            (1u << (s - 1u))) >>
                                           s);
            y = y < q.lo ? q.lo : y;
            acc[j] = y > q.hi ? q.hi : y;
        } else if (q.scaled && !q.binary && q.shift > 32) { /* signed sums: the magnitude */
            const uint32_t s = (uint32_t)(q.shift - 32);
            const int32_t r = q.relu && acc[j] < 0 ? 0 : acc[j];
            uint32_t mag = r < 0 ? 0u - (uint32_t)r : (uint32_t)r;
            int32_t y;
            mag = ((uint32_t)(((uint64_t)mag * (uint32_t)q.m) >> 32) + (1u << (s - 1u))) >> s;
            y = r < 0 ? -(int32_t)mag : (int32_t)mag;
            y = y < q.lo ? q.lo : y;
            acc[j] = y > q.hi ? q.hi : y;
        } else {
            acc[j] = mico_rq_apply(&q, acc[j]);
        }
    }
}

/* W8A8 with symmetric codes (signed, or unsigned without a zero point): the input bytes are
 * the codes, read in place. Outputs go 8 at a time (the last ones by mico_dot2_w8 on the row
 * unpacked), sums from the bias, then requantized and packed as one run. */
static MICO_NOINLINE void mico_qlinear_s8_rows(const MicoLinear *p, const void *in, void *out)
{
    const int32_t nf = p->in_features, nout = p->out_features;
    const int8_t *w = (const int8_t *)(const void *)p->weight;
    int16_t x16[MICO_LIN_K];
    int32_t acc[MICO_LIN_O];
    int32_t r, o0, o, k0, j;
    for (r = 0; r < p->rows; r++) {
        const uint8_t *x = (const uint8_t *)in + (size_t)r * (size_t)nf;
        for (o0 = 0; o0 < nout; o0 += MICO_LIN_O) {
            const int32_t o1 = o0 + MICO_LIN_O < nout ? o0 + MICO_LIN_O : nout;
            const int32_t o8 = o0 + (o1 - o0) / 8 * 8;
            for (j = 0; j < o1 - o0; j++) {
                acc[j] = p->bias[o0 + j];
            }
            for (o = o0; o < o8; o += 8) {
                const int8_t *wo = w + (size_t)o * (size_t)nf;
                if (p->in_fmt.is_signed) {
                    mico_lin_s8_mk_s(wo, nf, (const int8_t *)(const void *)x, nf, acc + (o - o0));
                } else {
                    mico_lin_s8_mk_u(wo, nf, x, nf, acc + (o - o0));
                }
            }
            for (k0 = 0; o8 < o1 && k0 < nf; k0 += MICO_LIN_K) { /* the last outputs, in pairs */
                const int32_t kc = nf - k0 < MICO_LIN_K ? nf - k0 : MICO_LIN_K;
                mico_unpack(in, (size_t)r * (size_t)nf + (size_t)k0, kc, p->in_fmt, x16);
                for (o = o8; o < o1; o += 2) {
                    const int32_t ob = o + 1 < o1 ? o + 1 : o;
                    int32_t sa = acc[o - o0], sb = acc[ob - o0];
                    mico_dot2_w8(x16, w + (size_t)o * (size_t)nf + (size_t)k0,
                                 w + (size_t)ob * (size_t)nf + (size_t)k0, kc, &sa, &sb);
                    acc[o - o0] = sa;
                    acc[ob - o0] = sb;
                }
            }
            mico_lin_s8_requant(&p->out, o0, acc, o1 - o0);
            mico_pack(out, (size_t)r * (size_t)nout + (size_t)o0, acc, o1 - o0, p->out.fmt);
        }
    }
}

/* The working buffer of the word kernels: a chunk's codes x and their words xw (bytes 0..255
 * and 256..511), or the words of mico_lin_t4 / _t2 (bytes 0..383; those layers use no x). */
typedef union {
    int16_t h[2 * MICO_LIN_K];
    uint32_t w[MICO_LIN_K];
} MicoLinBuf;

/* The body of mico_qlinear (words NULL) and mico_qlinear_sub4 / _sub2 / _sub4t / _sub2t (the word
 * kernels): inlined in each, so that mico_qlinear's copy carries no trace of the word kernels.
 * x: a chunk's codes (MICO_LIN_K); w: the words' part of a MicoLinBuf whose h is x, or NULL
 * (mico_qlinear: its frame holds the codes alone). */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline void mico_qlinear_rows(const MicoLinear *p, const void *in, void *out,
                                     const MicoLinWords *words, int16_t *x, uint32_t *w)
{
    const int32_t wb = p->w_bits, nf = p->in_features, xo = p->x_off;
    /* every weight row (and chunk) starts on a byte boundary */
    const int fused =
        (wb == 8 || wb == 4 || wb == 2 || wb == 1) && ((size_t)nf * (size_t)wb) % 8 == 0;
    int32_t kstep = MICO_LIN_K; /* codes of a chunk (the word kernels may take fewer) */
    const int mp = words != NULL ? words->kind(p, words->trows != NULL, &kstep) : 0;
    uint32_t *const xw = w != NULL ? w + MICO_LIN_K / 2 : NULL, *const tw = w;
    int32_t acc[MICO_LIN_O];
    int32_t r, o0, k0, j;
    uint32_t tsum = 0;
    if (p->in_fmt.bits > 8) {
        mico_qlinear_generic(p, in, out);
        return;
    }
    for (r = 0; r < p->rows; r++) {
        const size_t x_base = (size_t)r * (size_t)nf;
        const size_t y_base = (size_t)r * (size_t)p->out_features;
        for (o0 = 0; o0 < p->out_features; o0 += MICO_LIN_O) {
            const int32_t o1 =
                o0 + MICO_LIN_O < p->out_features ? o0 + MICO_LIN_O : p->out_features;
            for (j = 0; j < o1 - o0; j++) {
                acc[j] = p->bias[o0 + j];
            }
            for (k0 = 0; k0 < nf; k0 += kstep) {
                const int32_t kc = nf - k0 < kstep ? nf - k0 : kstep;
                int32_t xsum = 0;
                if (mp >= 5) { /* codes in [0, 15] (4-bit weights), [0, 5] (2-bit ones) */
                    const size_t rb = (size_t)nf * (size_t)wb / 8u;
                    if (nf > kstep || o0 == 0) { /* a row of one chunk: its words once */
                        tsum = words->twords(in, x_base + (size_t)k0, kc, p->in_fmt, xo, tw);
                    }
                    words->trows(tw, p->weight + (size_t)o0 * rb + (size_t)k0 * (size_t)wb / 8u,
                                 rb, 0, o1 - o0, kc * wb / 32, (wb == 4 ? 8u : 2u) * tsum, acc);
                    continue;
                }
                mico_unpack(in, x_base + (size_t)k0, kc, p->in_fmt, x);
                for (j = 0; xo != 0 && j < kc; j++) { /* the codes plus x_off */
                    x[j] = (int16_t)(x[j] + xo);
                }
                for (j = 0; j < kc; j++) {
                    xsum += x[j];
                }
                if (mp) { /* the word kernels */
                    words->words(x, kc, mp == 3 ? mp : wb, xw);
                    words->pairs(p, xw, mp, k0, kc, o0, o1, xsum, acc);
                } else {
                    mico_linear_chunk(p, x, k0, kc, o0, o1, fused, xsum, acc);
                }
            }
            for (j = 0; j < o1 - o0;) { /* one multiplier, or one per output */
                const int32_t len = p->out.n_mult > 1 ? 1 : o1 - o0;
                const MicoRq rq = mico_rq(&p->out, o0 + j);
                mico_rq_run(&rq, acc + j, len);
                j += len;
            }
            mico_pack(out, y_base + (size_t)o0, acc, o1 - o0, p->out.fmt);
        }
    }
}

void mico_qlinear(const MicoLinear *p, const void *in, void *out)
{
    int16_t x[MICO_LIN_K];
    mico_qlinear_rows(p, in, out, NULL, x, NULL);
}

void mico_qlinear_sub4(const MicoLinear *p, const void *in, void *out)
{
    MicoLinBuf b;
    mico_qlinear_rows(p, in, out, p->w_bits == 4 ? &mico_lin_words4 : NULL, b.h, b.w);
}

void mico_qlinear_sub2(const MicoLinear *p, const void *in, void *out)
{
    MicoLinBuf b;
    mico_qlinear_rows(p, in, out, p->w_bits == 2 ? &mico_lin_words2 : NULL, b.h, b.w);
}

void mico_qlinear_sub4t(const MicoLinear *p, const void *in, void *out)
{
    MicoLinBuf b;
    mico_qlinear_rows(p, in, out, p->w_bits == 4 ? &mico_lin_words4t : NULL, b.h, b.w);
}

void mico_qlinear_sub2t(const MicoLinear *p, const void *in, void *out)
{
    MicoLinBuf b;
    mico_qlinear_rows(p, in, out, p->w_bits == 2 ? &mico_lin_words2t : NULL, b.h, b.w);
}

/* Weights in channel lanes (mico_nn.h), F = 32 / w_bits outputs per word: each chunk of
 * input codes is unpacked once (with its sum, the weights' offset) and every block of F outputs
 * runs over it; the sums of up to MICO_LIN_O outputs wait between chunks. */
static MICO_NOINLINE void mico_linear_lanes(const MicoLinear *p, const MicoLanes *l,
                                            const void *in, void *out, MicoLanesFn fn)
{
    const int32_t wb = p->w_bits, nf = p->in_features, f = 32 / wb;
    const uint32_t *w = (const uint32_t *)(const void *)p->weight;
    int16_t x[MICO_LIN_K];
    int32_t acc[MICO_LIN_O];
    int32_t r, o0, k0, j, b;
    if (p->in_fmt.bits > 8) {
        mico_qlinear_generic(p, in, out);
        return;
    }
    for (r = 0; r < p->rows; r++) {
        const size_t x_base = (size_t)r * (size_t)nf;
        const size_t y_base = (size_t)r * (size_t)p->out_features;
        for (o0 = 0; o0 < p->out_features; o0 += MICO_LIN_O) {
            const int32_t o1 =
                o0 + MICO_LIN_O < p->out_features ? o0 + MICO_LIN_O : p->out_features;
            int32_t xsum = 0;
            for (j = 0; j < (o1 - o0 + f - 1) / f * f; j++) { /* a short last block: whole */
                acc[j] = 0;
            }
            for (k0 = 0; k0 < nf; k0 += MICO_LIN_K) {
                const int32_t kc = nf - k0 < MICO_LIN_K ? nf - k0 : MICO_LIN_K;
                mico_unpack(in, x_base + (size_t)k0, kc, p->in_fmt, x);
                for (j = 0; j < kc; j++) {
                    xsum += x[j];
                }
                for (b = o0; b < o1; b += f) {
                    mico_lanes_block(fn, w + (size_t)(b / f) * (size_t)nf + (size_t)k0, x, kc,
                                     1, 1, l, acc + (b - o0));
                }
            }
            for (b = o0; b < o1; b += f) {
                mico_lanes_finish(acc + (b - o0), 1, 1, wb, p->bias + b, &xsum);
            }
            for (j = 0; j < o1 - o0;) { /* one multiplier, or one per output */
                const int32_t len = p->out.n_mult > 1 ? 1 : o1 - o0;
                const MicoRq rq = mico_rq(&p->out, o0 + j);
                mico_rq_run(&rq, acc + j, len);
                j += len;
            }
            mico_pack(out, y_base + (size_t)o0, acc, o1 - o0, p->out.fmt);
        }
    }
}

/* An optimization barrier: one tap's loads at a time (no spills), and loops that are not
 * turned into calls of memset. */
#if defined(__GNUC__)
#define MICO_LL_SEQ() __asm__ volatile("" ::: "memory")
#define MICO_LL_KEEP(v) ((void)0)
#else
#define MICO_LL_SEQ()
#define MICO_LL_KEEP(v) ((void)0)
#endif

/* Blocks of F outputs a call of mico_ll_* takes (their lane words in registers). */
#define MICO_LL_U4(BITS, G) ((BITS) * (G) == 16 && (G) <= 4)
#define MICO_LL_NB(BITS, G) (MICO_LL_U4(BITS, G) || (G) == 8 || (BITS) == 1 ? 2 : 4)

/* Tap xp[K] of the NB blocks: their words at wp[b][K], G lane weights each. */
#define MICO_LL_TAP(BITS, G, K)                                                             \
    do {                                                                                    \
        const uint32_t xv = (uint32_t)(int32_t)xp[K];                                       \
        MICO_UNROLL for (b = 0; b < NB; b++) {                                              \
            const uint32_t wv = wp[b][K];                                                   \
            MICO_UNROLL for (g = 0; g < (G); g++) {                                         \
                acc[b][g] += ((wv >> (g * (BITS))) & m) * xv;                               \
                MICO_LL_SEQ(); /* one lane weight live at a time */                         \
            }                                                                               \
            MICO_LL_SEQ();                                                                  \
        }                                                                                   \
        MICO_UNROLL for (b = 0; b < NB; b++) { /* a tap's sums before the next tap's */     \
            MICO_UNROLL for (g = 0; g < (G); g++) {                                         \
                MICO_LL_KEEP(acc[b][g]);                                                    \
            }                                                                               \
        }                                                                                   \
    } while (0)

/* NB blocks of F outputs (NB = 4; 2 for G = 8 and 1-bit weights: 8 or 16 lane words in
 * registers) over `taps`
 * input codes x: block b's weight words at w + b * nf (a word per tap); every n taps the lane
 * words go into sums (sums[b * F + c] += lane sums of output c of block b; see
 * mico_lanes_settle and mico_lanes_widen). Each code is loaded once for the NB blocks. */
#define MICO_LL_FN(BITS, G)                                                                 \
    static MICO_NOINLINE void mico_ll_w##BITS##g##G(const uint32_t *w, int32_t nf,           \
                                                    const int16_t *x, int32_t taps,          \
                                                    int32_t n, int32_t is_signed,            \
                                                    int32_t *sums)                           \
    {                                                                                       \
        enum { NB = MICO_LL_NB(BITS, G), F = 32 / (BITS) };                     \
        const uint32_t s = (BITS) * (G), m = mico_lane_mask(BITS, s);                       \
        uint32_t wide[NB][2 * (G)] = {{0}};                                                 \
        int32_t t0, g, b, segs = 0;                                                         \
        for (t0 = 0; t0 < taps; t0 += n) {                                                  \
            const int32_t seg = taps - t0 < n ? taps - t0 : n;                              \
            const int16_t *xp = x + t0, *const xend = xp + seg;                             \
            const uint32_t *wp[NB];                                                         \
            uint32_t acc[NB][G];                                                            \
            MICO_UNROLL for (b = 0; b < NB; b++) {                                          \
                wp[b] = w + b * nf + t0;                                                    \
                MICO_UNROLL for (g = 0; g < (G); g++) {                                     \
                    acc[b][g] = 0;                                                          \
                }                                                                           \
            }                                                                               \
            for (; MICO_LL_U4(BITS, G) && xp + 3 < xend; xp += 4) { /* steps once */         \
                MICO_LL_TAP(BITS, G, 0);                                                    \
                MICO_LL_TAP(BITS, G, 1);                                                    \
                MICO_LL_TAP(BITS, G, 2);                                                    \
                MICO_LL_TAP(BITS, G, 3);                                                    \
                MICO_UNROLL for (b = 0; b < NB; b++) {                                      \
                    wp[b] += 4;                                                             \
                }                                                                           \
            }                                                                               \
            for (; xp < xend; xp++) {                                                       \
                MICO_LL_TAP(BITS, G, 0);                                                    \
                MICO_UNROLL for (b = 0; b < NB; b++) {                                      \
                    wp[b]++;                                                                \
                }                                                                           \
            }                                                                               \
            MICO_UNROLL for (b = 0; b < NB; b++) {                                          \
                int32_t *const sb = sums + b * F;                                           \
                if (s == 16u) { /* two lanes a word: inline */                              \
                    MICO_UNROLL for (g = 0; g < (G); g++) {                                 \
                        const uint32_t v = acc[b][g];                                       \
                        const uint32_t lo = is_signed ? (uint32_t)((int32_t)(v << 16) >> 16) \
                                                      : v & 0xffffu;                        \
                        const uint32_t hi = is_signed ? (uint32_t)((int32_t)(v - lo) >> 16)  \
                                                      : v >> 16;                            \
                        sb[g] = (int32_t)((uint32_t)sb[g] + lo);                            \
                        sb[g + (G)] = (int32_t)((uint32_t)sb[g + (G)] + hi);                \
                    }                                                                       \
                } else if (s == 8u && !is_signed) { /* into 16-bit lanes, inline */         \
                    MICO_UNROLL for (g = 0; g < (G); g++) {                                 \
                        const uint32_t v = acc[b][g];                                       \
                        const uint32_t ev = v & 0x00ff00ffu, od = (v >> 8) & 0x00ff00ffu;   \
                        wide[b][g] = segs ? wide[b][g] + ev : ev;                           \
                        wide[b][(G) + g] = segs ? wide[b][(G) + g] + od : od;               \
                    }                                                                       \
                    if (b == NB - 1) {                                                      \
                        segs++;                                                             \
                    }                                                                       \
                } else {                                                                    \
                    uint32_t lw[G]; /* a copy: acc stays in registers */                    \
                    MICO_UNROLL for (g = 0; g < (G); g++) {                                 \
                        lw[g] = acc[b][g];                                                  \
                    }                                                                       \
                    if (s <= 8u && !is_signed) {                                            \
                        const int32_t left = mico_lanes_widen(lw, wide[b], segs,            \
                                                              t0 + seg >= taps, (G), 1, sb, \
                                                              1, 1, s);                     \
                        segs = b == NB - 1 ? left : segs;                                   \
                    } else {                                                                \
                        mico_lanes_settle(lw, (G), 1, sb, 1, (G), 1, s, is_signed);         \
                    }                                                                       \
                }                                                                           \
            }                                                                               \
            if (s == 8u && !is_signed && (segs == 257 || t0 + seg >= taps)) {              \
                MICO_UNROLL for (b = 0; b < NB; b++) { /* lane i of g: output iG + g */     \
                    int32_t *const sb = sums + b * F;                                       \
                    MICO_UNROLL for (g = 0; g < (G); g++) {                                 \
                        const uint32_t ev = wide[b][g], od = wide[b][(G) + g];              \
                        sb[g] += (int32_t)(ev & 0xffffu);                                   \
                        sb[(G) + g] += (int32_t)(od & 0xffffu);                             \
                        sb[2 * (G) + g] += (int32_t)(ev >> 16);                             \
                        sb[3 * (G) + g] += (int32_t)(od >> 16);                             \
                    }                                                                       \
                }                                                                           \
                segs = 0;                                                                   \
            }                                                                               \
        }                                                                                   \
    }

typedef void (*MicoLlFn)(const uint32_t *w, int32_t nf, const int16_t *x, int32_t taps,
                         int32_t n, int32_t is_signed, int32_t *sums);

/* The code of sum r (a ReLU, lo <= 0, no zero point: codes in [0, hi]) for a multiplier m with
 * shift sh: above 32, the high word of the product, rounded; at most 32 with m >= 2 (hi + 1),
 * a sum of at least 2^(sh - 1) gives hi and a smaller one, shifted left by 33 - sh, takes shift
 * 33; other multipliers the whole 64-bit product. */
static inline uint32_t mico_ll_code(int32_t r, uint32_t m, int32_t sh, int32_t hi)
{
    uint32_t y;
    if (r <= 0) {
        return 0u;
    }
    if (sh > 32) {
        const uint32_t s = (uint32_t)sh - 32u;
        y = ((uint32_t)(((uint64_t)(uint32_t)r * m) >> 32) + (1u << (s - 1u))) >> s;
    } else if ((uint64_t)m < 2u * ((uint64_t)(uint32_t)hi + 1u)) {
        const uint64_t v = ((uint64_t)(uint32_t)r * m + ((uint64_t)1 << (sh - 1))) >> sh;
        return v > (uint64_t)(uint32_t)hi ? (uint32_t)hi : (uint32_t)v;
    } else if ((uint32_t)r >= 1u << (sh - 1)) {
        return (uint32_t)hi;
    } else {
        y = ((uint32_t)(((uint64_t)((uint32_t)r << (33u - (uint32_t)sh)) * m) >> 32) + 1u) >> 1;
    }
    return y > (uint32_t)hi ? (uint32_t)hi : y;
}

/* The n lane sums acc of outputs o0.. as the layer's codes, stored from output element y0:
 * sum = bias + s_w acc - q_w xsum, requantized and packed in one loop, for the usual case (a
 * ReLU, lo <= 0: codes in [0, hi], of 8, 4 or 2 bits without a zero point on whole bytes:
 * mico_ll_code). Returns 0 (nothing done) for others. */
static MICO_NOINLINE int mico_ll_store(const MicoLinear *p, int32_t o0, const int32_t *acc,
                                       int32_t n, int32_t xsum, void *out, size_t y0)
{
    const MicoOut *const o = &p->out;
    const uint32_t bits = (uint32_t)o->fmt.bits, per = 8u / (bits ? bits : 1u);
    const uint32_t sw = p->w_bits == 1 ? 2u : 1u;
    const uint32_t off = (p->w_bits == 1 ? 1u : 1u << (p->w_bits - 1)) * (uint32_t)xsum;
    const int32_t hi = o->hi, each = o->n_mult > 1;
    const int32_t *bp = p->bias + o0, *ap = acc, *mp, *sp;
    uint8_t *dst;
    int32_t j;
    if (o->n_mult == 0 || !o->relu || o->lo > 0 || hi < 0 || /* codes in [0, hi] */
        o->fmt.zero != 0 || (bits != 8u && bits != 4u && bits != 2u) || (y0 * bits) % 8u != 0u ||
        ((uint32_t)n * bits) % 8u != 0u) {
        return 0;
    }
    mp = o->m + (each ? o0 : 0); /* not before the check: no multipliers, m is NULL */
    sp = o->shift + (each ? o0 : 0);
    dst = (uint8_t *)out + y0 * bits / 8u;
    for (j = 0; j < n; j += (int32_t)per) {
        uint32_t byte = 0, at;
        for (at = 0; at < 8u; at += bits) { /* shifts in [1, 62] (mico_nn.h) */
            const int32_t r = (int32_t)((uint32_t)*bp++ + sw * (uint32_t)*ap++ - off);
            byte |= mico_ll_code(r, (uint32_t)*mp, *sp, hi) << at;
            mp += each;
            sp += each;
        }
        *dst++ = (uint8_t)byte;
    }
    return 1;
}

#define MICO_LL_K 256 /* input codes unpacked at once (the lanes path) */

/* n codes of the input from element `start` into x, returning their sum: plain fields of 8, 4
 * or 2 bits from a whole byte in one loop with their sum, others through mico_unpack. */
static MICO_NOINLINE int32_t mico_ll_unpack(const void *in, size_t start, int32_t n, MicoFmt f,
                                            int16_t *x)
{
    const MicoFieldMap fm = mico_field_map(f);
    const uint32_t b = (uint32_t)f.bits;
    const uint8_t *src = (const uint8_t *)in + start * b / 8u;
    uint32_t sum = 0;
    int32_t j = 0;
    if (fm.x == 0u && fm.o == 0 && fm.sh == 0 && (start * b) % 8u == 0u) {
        if (b == 8u) {
            for (; j + 2 <= n; j += 2, src += 2) {
                const uint32_t v0 = src[0], v1 = src[1];
                x[j] = (int16_t)v0;
                MICO_LL_SEQ();
                x[j + 1] = (int16_t)v1;
                MICO_LL_SEQ();
                sum += v0 + v1;
            }
        } else if (b == 4u) {
            for (; j + 2 <= n; j += 2, src++) {
                const uint32_t v = *src, lo = v & 15u, hi = v >> 4;
                x[j] = (int16_t)lo;
                MICO_LL_SEQ();
                x[j + 1] = (int16_t)hi;
                MICO_LL_SEQ();
                sum += lo + hi;
            }
        } else if (b == 2u) {
            for (; j + 4 <= n; j += 4, src++) {
                const uint32_t v = *src, c0 = v & 3u, c1 = (v >> 2) & 3u, c2 = (v >> 4) & 3u;
                const uint32_t c3 = v >> 6;
                x[j] = (int16_t)c0;
                MICO_LL_SEQ();
                x[j + 1] = (int16_t)c1;
                MICO_LL_SEQ();
                x[j + 2] = (int16_t)c2;
                MICO_LL_SEQ();
                x[j + 3] = (int16_t)c3;
                MICO_LL_SEQ();
                sum += c0 + c1 + c2 + c3;
            }
        }
    }
    if (j < n) {
        mico_unpack(in, start + (size_t)j, n - j, f, x + j);
        for (; j < n; j++) {
            sum += (uint32_t)(int32_t)x[j];
        }
    }
    return (int32_t)sum;
}

/* Weights in channel lanes, nb blocks of F outputs at a time (mico_ll_*): each chunk of input
 * codes is unpacked once (with its sum, the weights' offset), the blocks' sums wait in acc
 * between chunks (blocks left over go one at a time through fn1). Then finish, requantize and
 * pack as one run. */
static MICO_NOINLINE void mico_linear_ll(const MicoLinear *p, const MicoLanes *l,
                                         const void *in, void *out, MicoLlFn fn, int32_t nb,
                                         MicoLanesFn fn1)
{
    const int32_t wb = p->w_bits, nf = p->in_features, f = 32 / wb;
    const int32_t nblk = (p->out_features + f - 1) / f; /* the last block may be short */
    const int32_t per = MICO_LIN_O / f; /* blocks per pass */
    const uint32_t *w = (const uint32_t *)(const void *)p->weight;
    int16_t x[MICO_LL_K];
    int32_t acc[MICO_LIN_O];
    int32_t r, b0, b1, k0, j, b;
    for (r = 0; r < p->rows; r++) {
        const size_t x_base = (size_t)r * (size_t)nf;
        const size_t y_base = (size_t)r * (size_t)p->out_features;
        for (b0 = 0; b0 < nblk; b0 += per) {
            int32_t xsum = 0, nv;
            b1 = b0 + per < nblk ? b0 + per : nblk;
            nv = p->out_features - b0 * f < (b1 - b0) * f ? p->out_features - b0 * f
                                                          : (b1 - b0) * f; /* outputs stored */
            for (j = 0; j < (b1 - b0) * f; j++) {
                acc[j] = 0;
                MICO_LL_SEQ();
            }
            for (k0 = 0; k0 < nf; k0 += MICO_LL_K) {
                const int32_t kc = nf - k0 < MICO_LL_K ? nf - k0 : MICO_LL_K;
                xsum += mico_ll_unpack(in, x_base + (size_t)k0, kc, p->in_fmt, x);
                for (b = b0; b + nb <= b1; b += nb) {
                    fn(w + (size_t)b * (size_t)nf + (size_t)k0, nf, x, kc, l->n, l->is_signed,
                       acc + (b - b0) * f);
                }
                for (; b < b1; b++) { /* blocks left over: one at a time (mico_nn.h) */
                    mico_lanes_block(fn1, w + (size_t)b * (size_t)nf + (size_t)k0, x, kc, 1, 1,
                                     l, acc + (b - b0) * f);
                }
            }
            if (mico_ll_store(p, b0 * f, acc, nv, xsum, out, y_base + (size_t)(b0 * f))) {
                continue;
            }
            for (b = b0; b < b1; b++) {
                mico_lanes_finish(acc + (b - b0) * f, 1, 1, wb, p->bias + b * f, &xsum);
            }
            for (j = 0; j < nv;) { /* one multiplier, or one per output */
                const int32_t len = p->out.n_mult > 1 ? 1 : nv;
                const MicoRq rq = mico_rq(&p->out, b0 * f + j);
                mico_rq_run_fast(&rq, acc + j, len);
                j += len;
            }
            mico_pack(out, y_base + (size_t)(b0 * f), acc, nv, p->out.fmt);
        }
    }
}

#define MICO_LL_DEFINE(BITS, G, NPX) MICO_LL_FN(BITS, G)
MICO_LANES_EACH(MICO_LL_DEFINE)

#define MICO_LINEAR_LANES_ENTRY(BITS, G, NPX)                                               \
    void mico_qlinear_lanes_w##BITS##g##G(const MicoLinear *p, const MicoLanes *l, const void *in,\
                                     void *out)                                             \
    {                                                                                       \
        if (p->in_fmt.bits > 8) {                                                           \
            mico_linear_lanes(p, l, in, out, mico_lanes_w##BITS##g##G##_1);                 \
            return;                                                                         \
        }                                                                                   \
        mico_linear_ll(p, l, in, out, mico_ll_w##BITS##g##G, MICO_LL_NB(BITS, G),              \
                       mico_lanes_w##BITS##g##G##_1);                                       \
    }
MICO_LANES_EACH(MICO_LINEAR_LANES_ENTRY)

void mico_qlinear_s8(const MicoLinear *p, const void *in, void *out)
{
    if (p->w_bits == 8 && p->in_fmt.bits == 8 && (p->in_fmt.is_signed || p->in_fmt.zero == 0) &&
        p->x_off == 0) {
        mico_qlinear_s8_rows(p, in, out); /* W8A8: bytes as they are */
        return;
    }
    mico_qlinear(p, in, out);
}
