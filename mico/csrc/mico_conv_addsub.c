/* Convolutions whose weights are signs (mico_qconv2d_addsub): 2-bit codes (ternary: -1, 0, +1;
 * the code -2 is taken too) or 1-bit binary codes (-1, +1), on activation codes of 1 to 8 bits.
 * A product by a sign is the code, its negation or nothing, so the layer is sums of activation
 * codes: no multiplication, and zero weights cost a test and no addition.
 *
 * For a tile of MICO_AS_PX output pixels (raster order, across rows), the im2col patch of a
 * chunk of kernel rows (mico_conv_patch: int16 codes, zeros for padding) is read as words of
 * two pixels' codes in 16-bit lanes; a channel adds or subtracts a tap's MICO_AS_W words into
 * MICO_AS_W accumulators held in registers (2 pixels an addition), reading its weights straight
 * from their packed bytes, four taps (2 bits) or eight (1 bit) a byte, and skipping a byte of
 * four zero weights at once. The lanes are exact: a lane holds the sum of at most `cap` codes
 * times |w| <= 2 (cap from the codes' largest magnitude, so that the sum stays within int16),
 * and the low lane's carry into the high one is taken back when the chunk's sums are added to
 * the tile (low = the low half sign-extended, high = (word - low) / 2^16). The chunk's
 * weights are at most MICO_AS_TAPS taps; MICO_AS_OCT channels' sums wait in the tile.
 *
 * Codes that may be negative (signed, or a zero point) are rewritten as words of the two values
 * modulo 2^32 first (an int16 pair in memory is not, for a negative low half); so are all
 * codes on a big-endian target. Bit-identical to mico_qconv2d (exact int32 sums, the same
 * requantization). Stack: about 4.2 KB. Layers it does not take (other widths, int32 inputs,
 * a kernel row longer than a chunk) go element by element (mico_qconv2d_elementwise). */
#include "mico_nn.h"

#define MICO_AS_PX 16              /* output pixels of a tile */
#define MICO_AS_W (MICO_AS_PX / 2) /* words of a tap: two pixels each */
#define MICO_AS_TAPS 64            /* taps of a chunk at most */
#define MICO_AS_OCT 64             /* channels whose sums wait in the tile */

#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__) &&                              \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define MICO_AS_LE 1 /* an int16 pair in memory is the word low + (high << 16) */
#else
#define MICO_AS_LE 0
#endif

/* The patch's words are written as int16 codes (mico_conv_patch) and read as 32-bit words:
 * a type that may alias them. */
#if defined(__GNUC__)
typedef uint32_t __attribute__((__may_alias__)) MicoAsWord;
#else
typedef uint32_t MicoAsWord;
#endif

/* The largest magnitude of a code of format f. */
static int32_t mico_as_maxabs(MicoFmt f)
{
    int32_t top;
    if (f.is_signed) {
        return f.bits == 1 ? 1 : (int32_t)1 << (f.bits - 1);
    }
    top = ((int32_t)1 << f.bits) - 1 - f.zero; /* fields 0 .. 2^bits - 1, less the zero point */
    return top > f.zero ? top : f.zero;
}

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
            MICO_AS_OP(+=, xw + (J) * MICO_AS_W);                                           \
        } else if (c_ != 0u) {                                                              \
            MICO_AS_OP(-=, xw + (J) * MICO_AS_W);                                           \
        }                                                                                   \
    } while (0)

/* Tap J of binary codes: bit J of `byte` 1 is +1, 0 is -1. */
#define MICO_AS_T1(J)                                                                       \
    do {                                                                                    \
        if ((byte >> (J)) & 1u) {                                                           \
            MICO_AS_OP(+=, xw + (J) * MICO_AS_W);                                           \
        } else {                                                                            \
            MICO_AS_OP(-=, xw + (J) * MICO_AS_W);                                           \
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
 * of the byte at wp, the chunk's words xw (MICO_AS_W a tap); the sums into the tile row t. */
static MICO_NOINLINE void mico_as_ch2(const uint8_t *wp, uint32_t lead, int32_t kc,
                                      const MicoAsWord *xw, int32_t *t, int first, int32_t bias)
{
    MICO_AS_BEGIN;
    if (lead != 0u) { /* the rest of the first byte */
        for (byte = (uint32_t)*wp++ >> (2u * lead); lead < 4u && k < kc;
             lead++, k++, xw += MICO_AS_W, byte >>= 2) {
            MICO_AS_T2(0);
        }
    }
    for (; k + 4 <= kc; k += 4, xw += 4 * MICO_AS_W) {
        byte = *wp++;
        if (byte != 0u) { /* four zero weights: nothing to add */
            MICO_AS_T2(0);
            MICO_AS_T2(1);
            MICO_AS_T2(2);
            MICO_AS_T2(3);
        }
    }
    for (byte = k < kc ? *wp : 0u; k < kc; k++, xw += MICO_AS_W, byte >>= 2) {
        MICO_AS_T2(0);
    }
    MICO_AS_END;
}

/* The same for binary weights (8 codes a byte, four at a time). */
static MICO_NOINLINE void mico_as_ch1(const uint8_t *wp, uint32_t lead, int32_t kc,
                                      const MicoAsWord *xw, int32_t *t, int first, int32_t bias)
{
    MICO_AS_BEGIN;
    uint32_t half;
    if (lead != 0u) { /* the rest of the first byte */
        for (byte = (uint32_t)*wp++ >> lead; lead < 8u && k < kc;
             lead++, k++, xw += MICO_AS_W, byte >>= 1) {
            MICO_AS_T1(0);
        }
    }
    for (; k + 8 <= kc; k += 8) {
        byte = *wp++;
        for (half = 0; half < 2u; half++, byte >>= 4, xw += 4 * MICO_AS_W) {
            MICO_AS_T1(0);
            MICO_AS_T1(1);
            MICO_AS_T1(2);
            MICO_AS_T1(3);
        }
    }
    for (byte = k < kc ? *wp : 0u; k < kc; k++, xw += MICO_AS_W, byte >>= 1) {
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
        ((MicoAsWord *)(void *)h)[i] = lo + (hi << 16);
    }
}

/* A channel's sums over a chunk (mico_as_ch2, mico_as_ch1). */
typedef void (*MicoAsChannel)(const uint8_t *, uint32_t, int32_t, const MicoAsWord *, int32_t *,
                              int, int32_t);

/* The layer over tiles of pixels and chunks of kernel rows (ch: the channel loop of its weights'
 * width wb; wmax: their largest magnitude), each entry point passing its own so that a program
 * links only its widths'. */
static MICO_NOINLINE void mico_as_layer(const MicoConv2d *p, const void *in, void *out,
                                        MicoAsChannel ch, int32_t wb, int32_t wmax)
{
    const int32_t ipg = p->in_c / p->groups, opg = p->out_c / p->groups;
    const int32_t kw = p->k_w, rows = ipg * p->k_h, k_all = rows * kw;
    const int32_t npix = p->out_h * p->out_w, per = 8 / wb;
    const int convert = !MICO_AS_LE || p->in_fmt.is_signed || p->in_fmt.zero != 0;
    const int32_t cap = 32767 / (wmax * mico_as_maxabs(p->in_fmt)); /* taps a lane sums */
    union {
        int16_t h[MICO_AS_TAPS * MICO_AS_PX];
        uint32_t w[MICO_AS_TAPS * MICO_AS_W];
    } patch;
    int32_t tile[MICO_AS_OCT * MICO_AS_PX];
    int32_t rpc = (cap < MICO_AS_TAPS ? cap : MICO_AS_TAPS) / kw, chunks, g, oc0, oc, pix0, r0;
    if (rpc == 0) { /* a kernel row longer than a chunk */
        mico_qconv2d_elementwise(p, in, out);
        return;
    }
    chunks = (rows + rpc - 1) / rpc;
    rpc = (rows + chunks - 1) / chunks; /* balanced */
    for (g = 0; g < p->groups; g++) {
        for (oc0 = g * opg; oc0 < (g + 1) * opg; oc0 += MICO_AS_OCT) {
            const int32_t oc1 = oc0 + MICO_AS_OCT < (g + 1) * opg ? oc0 + MICO_AS_OCT
                                                                    : (g + 1) * opg;
            for (pix0 = 0; pix0 < npix; pix0 += MICO_AS_PX) {
                const int32_t np = npix - pix0 < MICO_AS_PX ? npix - pix0 : MICO_AS_PX;
                for (r0 = 0; r0 < rows; r0 += rpc) {
                    const int32_t r1 = r0 + rpc < rows ? r0 + rpc : rows, kc = (r1 - r0) * kw;
                    mico_conv_patch(p, in, g * ipg, r0, r1, pix0, np, MICO_AS_PX, patch.h);
                    if (convert) {
                        mico_as_words(patch.h, kc * MICO_AS_W);
                    }
                    for (oc = oc0; oc < oc1; oc++) {
                        const size_t at = (size_t)oc * (size_t)k_all + (size_t)(r0 * kw);
                        int32_t *const t = tile + (oc - oc0) * MICO_AS_PX;
                        ch(
                            p->weight + at / (size_t)per, (uint32_t)(at % (size_t)per), kc,
                            (const MicoAsWord *)patch.w, t, r0 == 0, p->bias[oc]);
                    }
                }
                for (oc = oc0; oc < oc1; oc++) { /* requantize and store the tile */
                    int32_t *const t = tile + (oc - oc0) * MICO_AS_PX;
                    const MicoRq rq = mico_rq(&p->out, oc);
                    mico_rq_run_fast(&rq, t, np);
                    mico_pack(out, (size_t)oc * (size_t)npix + (size_t)pix0, t, np,
                              p->out.fmt);
                }
            }
        }
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
    mico_as_layer(p, in, out, mico_as_ch2, 2, 1);
}

void mico_qconv2d_addsub1(const MicoConv2d *p, const void *in, void *out)
{
    if (p->w_bits != 1 || p->in_fmt.bits < 1 || p->in_fmt.bits > 8) {
        mico_qconv2d_elementwise(p, in, out);
        return;
    }
    mico_as_layer(p, in, out, mico_as_ch1, 1, 1);
}
