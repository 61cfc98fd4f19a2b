/* Host kernels: convolution and linear layers as int16 GEMMs that gcc / clang vectorise.
 *
 * The code generator calls these for a target whose description has the `xautovec` capability
 * (mico/targets/files/host.yaml): a desktop or server CPU with SIMD registers and caches, where
 * the rv32 kernels' scalar register tiles and SWAR lanes leave the vector units idle. They are
 * plain C99 (no intrinsics) written for the auto-vectoriser at -O3: the hot loops are dot
 * products of int16 rows accumulated into int32 (SSE2 pmaddwd, AVX2 vpmaddwd, AVX-512 VNNI
 * vpdpwssd, NEON smlal), with no data-dependent branch inside.
 *
 * Every width 1..8 (binary and ternary weights included) takes the same loops: a layer's input
 * codes are unpacked to int16 once per call (8 channels at a time, then transposed into
 * zero-padded HWC planes), and its weights once per program run: the first call lays them out
 * as the kernel reads them (int16 rows padded with zero taps to a multiple of
 * MICO_HOST_KALIGN) in a static store, and later calls read them from there (the layer is
 * found by the address of its packed weights, and every call compares the packed bytes with a
 * copy kept beside, so weights changed in place are laid out again; a full store means
 * unpacking on every call).
 * So fewer bits cost only the unpacking of the activations and the packing of the outputs.
 * Sums are exact in int32 (|code| <= 255, |weight| <= 127) and are requantized with
 * mico_rescale's arithmetic (vectorised here: 32-bit multiplies only when magnitudes capped
 * at 65535 give the same results, mico_host_rq16; else shifts above 32, and shifts of 32 or
 * less in the same 32-bit loop when the magnitudes that matter fit; mico_rq_run for binary
 * outputs and layers without multipliers) and packed, so the results are bit-identical to
 * the other paths and to mico/quant/arithmetic.py.
 *
 * Scratch lives in static arrays (host only, not in the arena: about 3.5 MB of .bss for the
 * scratch and up to 12 MB for the weight store and its copies of the packed bytes, of which
 * only the pages used are touched); a layer whose unpacked input or weights do not fit them
 * takes the portable kernels instead.
 * The padded input is sized from the output rows, so bands of patch-based execution whose
 * bottom padding is deeper than their top take these kernels too. The kernels are compiled
 * when MICO_HOST_KERNELS is defined (the generated Makefile defines it for TARGET=host);
 * elsewhere the entry points forward to mico_qconv2d / mico_qlinear / mico_add.
 *
 *  - Pointwise layers (1x1, stride 1, one group) when a per-layer cost fitted on callgrind
 *    counts says so (mico_host_pw_takes: narrow layers of many pixels, where the GEMM below
 *    pays a horizontal sum per output), and layers of one group, at most MICO_HOST_ROWS_K
 *    taps and 256 pixels or more (a first 3x3 conv): pixels in vector lanes over CHW rows
 *    (the input planes, or rows of taps built from them; strided layers split the planes by
 *    column phase first, so every row of taps is a contiguous copy), the input channel (tap)
 *    the reduction; int16 sums over chunks of input channels when the codes' and weights'
 *    bounds keep them exact (sub-byte widths: 4 output channels x 16 pixels a micro-kernel),
 *    int32 ones otherwise (a channel's whole row at a time, 8 input rows summed in registers
 *    per pass) (mico_host_pw).
 *  - mico_qconv2d_host: any kernel, stride, padding, dilation and groups (codes of 1..8 bits).
 *    Per group, the input is unpacked once into zero-padded HWC planes; for each block of
 *    output pixels an im2col patch [pixel][tap] is copied from the planes (a 1x1 stride-1
 *    layer uses the planes themselves, channels padded to the row length), and every
 *    4 output channels x 2 pixels run the dot-product micro-kernel over it; the block's sums
 *    are requantized and packed 4 channels at a time (sub-byte outputs: the whole layer in one
 *    run at its end). Layers of MICO_HOST_RQ_PIX pixels or fewer with byte outputs keep the
 *    sums as [pixel][channel] and requantize each pixel over all its channels at once
 *    (mico_host_rq_bytes, a per-layer table of the channels' constants).
 *  - Depthwise layers (groups == in_c == out_c), any kernel, stride, padding and dilation:
 *    layers of MICO_HOST_DW_WIDE output columns or more go channel by channel over CHW planes
 *    split by stride phase, so every tap is one contiguous run (3x3: the nine taps summed in
 *    registers in one pass; int16 sums when the channel's actual weights bound them;
 *    mico_host_dw, which reads a channel's whole input before storing any of its outputs: the
 *    in-place order of mico_conv2d.c); narrower ones over HWC planes, 16 channels of a pixel
 *    at a time in registers over the taps, in int16 when no sum of the taps' products can
 *    leave it (mico_host_dw_hwc; layers of MICO_HOST_DW_RQ_PIX pixels or fewer with byte
 *    outputs requantize each pixel over its channels, straight into the CHW output).
 *  Every path adds the bias inside the requantization loop (mico_host_store).
 *  - mico_qlinear_host: rows x in_features times out_features x in_features; 8-bit weights are
 *    read as int8 in place, narrower ones from the store.
 *  - mico_add_host: mico_add's 64-bit arithmetic over unpacked runs, vectorised.
 */
#include "mico_nn.h"

#include <string.h>

#ifndef MICO_HOST_KERNELS
/* Not a host build (make TARGET=rv32, ...): the entry points are the portable kernels, so a
 * project generated for the host builds and runs bit-exact anywhere, without the scratch. */
void mico_qconv2d_host(const MicoConv2d *p, const void *in, void *out)
{
    mico_qconv2d(p, in, out);
}

void mico_qlinear_host(const MicoLinear *p, const void *in, void *out)
{
    mico_qlinear(p, in, out);
}

void mico_add_host(const MicoAdd *p, const void *a, const void *b, void *out)
{
    mico_add(p, a, b, out);
}
#else

#define MICO_HOST_KALIGN 16       /* taps per row are padded to a multiple of this */
#define MICO_HOST_X (1 << 20)     /* int16: a group's padded input planes */
#define MICO_HOST_W (1 << 18)     /* int16: a group's unpacked weight rows */
#define MICO_HOST_PATCH (1 << 16) /* int16: the im2col patch [pixel][tap], 8 input planes */
#define MICO_HOST_PIX 64          /* most output pixels of one patch */
#define MICO_HOST_ACC 32768       /* int32: a depthwise channel's sums, a linear layer's row */
#define MICO_HOST_ROW 4608        /* int16: one input row, one unpacked weight row */

static int16_t mico_host_x[MICO_HOST_X];
static int16_t mico_host_w[MICO_HOST_W];
static int16_t mico_host_patch[MICO_HOST_PATCH];
static int32_t mico_host_acc[2 * MICO_HOST_ACC];
#define MICO_HOST_PWX (1 << 18) /* int32: a pointwise layer's input planes */
#define MICO_HOST_ROWS_K 64     /* the most taps a conv layer takes mico_host_pw with */
#define MICO_HOST_DW_WIDE 24    /* depthwise layers this wide (outputs) go over CHW planes */
#define MICO_HOST_DW_ROWS 24    /* and this wide, a row at a time */
static int32_t mico_host_x32[MICO_HOST_PWX];
#define MICO_HOST_PACKRUN 256 /* codes mico_host_pack narrows to bytes at a time */
#define MICO_HOST_STAGE (1 << 17) /* int32: a layer's sub-byte outputs before packing */
static int32_t mico_host_stage[MICO_HOST_STAGE];
static int mico_host_staged;

/* Weights unpacked once: the first call of a layer lays its weights out as its kernel reads
 * them (int16 rows, padded) in this store, with a copy of the packed bytes they came from, and
 * later calls read them from there. An entry is found by the address of the packed weights and
 * the layout; every call compares the packed bytes with the copy (memcmp, a small fraction of
 * the layer's work), so weights changed in place (a weights file loaded again into the same
 * buffer) are laid out again. When the store is full, a layer unpacks its weights on every
 * call into the scratch arrays instead. */
#ifndef MICO_HOST_CACHE
#define MICO_HOST_CACHE (1 << 22) /* int16: every layer's unpacked weights (8 MB) */
#endif
#define MICO_HOST_CACHE_KEYS 1024
typedef struct {
    const uint8_t *weight;
    int32_t layout, size;
    size_t at, packed_at, packed;
} MicoHostCached;
/* int16 rows, or int32 ones (.w, at an even offset: entries are 64-byte aligned) */
static union {
    int16_t h[MICO_HOST_CACHE];
    int32_t w[MICO_HOST_CACHE / 2];
} mico_host_cache_u;
#define mico_host_cache (mico_host_cache_u.h)
static uint8_t mico_host_packed[MICO_HOST_CACHE]; /* the packed bytes of each entry */
static MicoHostCached mico_host_cached[MICO_HOST_CACHE_KEYS];
static int32_t mico_host_n_cached;
static size_t mico_host_cache_used, mico_host_packed_used;

#if defined(__GNUC__) || defined(__clang__)
#define MICO_RESTRICT __restrict__
#else
#define MICO_RESTRICT
#endif

/* On x86-64 with glibc, gcc and clang compile the hot functions twice, for the baseline ISA
 * (SSE2) and for AVX2, and pick one when the program starts (function multiversioning: the
 * same C source, no intrinsics; the integer results are the same). -DMICO_HOST_NO_CLONES, or
 * a sanitized build, keeps one baseline version. */
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && \
    !defined(MICO_HOST_NO_CLONES) && !defined(__SANITIZE_ADDRESS__) && \
    (!defined(__clang__) || __clang_major__ >= 14)
#define MICO_HOST_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define MICO_HOST_CLONES
#endif
/* A loop the compiler must not unroll (its registers would spill). */
#if defined(__GNUC__)
#define MICO_HOST_NOUNROLL _Pragma("GCC unroll 1")
#define MICO_HOST_UNROLL _Pragma("GCC unroll 9")
#else
#define MICO_HOST_NOUNROLL
#define MICO_HOST_UNROLL
#endif
/* The micro-kernels are inlined into each version of their callers. */
#if defined(__GNUC__)
#define MICO_HOST_INLINE __attribute__((always_inline)) inline
#else
#define MICO_HOST_INLINE
#endif

/* The unpacked weights of `weight` (`packed` bytes) in `layout` (size int16 values), and in
 * *fill whether the caller must write them (a new entry, or packed bytes that changed); NULL
 * when the store is full. */
static int16_t *mico_host_weights(const uint8_t *weight, size_t packed, int32_t layout,
                                  int32_t size, int *fill)
{
    MicoHostCached *e;
    int32_t i;
    *fill = 0;
    for (i = 0; i < mico_host_n_cached; i++) {
        e = &mico_host_cached[i];
        if (e->weight == weight && e->layout == layout && e->size == size && e->packed == packed) {
            if (memcmp(mico_host_packed + e->packed_at, weight, packed) != 0) {
                memcpy(mico_host_packed + e->packed_at, weight, packed); /* changed in place */
                *fill = 1;
            }
            return mico_host_cache + e->at;
        }
    }
    if (mico_host_n_cached == MICO_HOST_CACHE_KEYS ||
        (size_t)size > MICO_HOST_CACHE - mico_host_cache_used ||
        packed > MICO_HOST_CACHE - mico_host_packed_used) {
        return 0;
    }
    e = &mico_host_cached[mico_host_n_cached++];
    e->weight = weight;
    e->layout = layout;
    e->size = size;
    e->packed = packed;
    e->at = mico_host_cache_used;
    e->packed_at = mico_host_packed_used;
    mico_host_cache_used += ((size_t)size + 31u) & ~(size_t)31u; /* 64-byte aligned entries */
    mico_host_packed_used += packed;
    memcpy(mico_host_packed + e->packed_at, weight, packed);
    *fill = 1;
    return mico_host_cache + e->at;
}

/* Bytes of n packed weight codes of `bits` bits. */
static size_t mico_host_wbytes(size_t n, int32_t bits)
{
    return (n * (size_t)bits + 7u) / 8u;
}

/* n rounded up to a multiple of MICO_HOST_KALIGN. */
static int32_t mico_host_kpad(int32_t n)
{
    return (n + MICO_HOST_KALIGN - 1) / MICO_HOST_KALIGN * MICO_HOST_KALIGN;
}

/* The largest |code| of format f: the codes are monotonic in (field ^ x), so at its ends. */
static int32_t mico_host_max_code(MicoFmt f)
{
    const MicoFieldMap m = mico_field_map(f);
    const int32_t lo = -m.o, hi = (int32_t)(m.mask << m.sh) - m.o;
    const int32_t a = lo < 0 ? -lo : lo, b = hi < 0 ? -hi : hi;
    return a > b ? a : b;
}

/* n signed weight codes of `bits` bits from element `start` into dst (int16). Byte-aligned
 * runs of 8-, 4- and 2-bit codes are decoded a byte at a time in loops the compiler vectorises;
 * the others go through mico_unpack. */
static void mico_host_unpack_w(const uint8_t *w, size_t start, int32_t n, int32_t bits,
                               int16_t *MICO_RESTRICT dst)
{
    const size_t bit = start * (size_t)bits;
    const uint8_t *src = w + (bit >> 3);
    MicoFmt f;
    int32_t i;
    if ((bit & 7u) == 0 && bits == 8) {
        for (i = 0; i < n; i++) {
            dst[i] = (int16_t)(int8_t)src[i];
        }
        return;
    }
    if ((bit & 7u) == 0 && bits == 4 && (n & 1) == 0) {
        for (i = 0; i < n / 2; i++) { /* a field f is the code (f ^ 8) - 8 */
            dst[2 * i] = (int16_t)((int32_t)((src[i] & 15u) ^ 8u) - 8);
            dst[2 * i + 1] = (int16_t)((int32_t)((src[i] >> 4) ^ 8u) - 8);
        }
        return;
    }
    if ((bit & 7u) == 0 && bits == 2 && (n & 3) == 0) {
        for (i = 0; i < n / 4; i++) {
            dst[4 * i] = (int16_t)((int32_t)((src[i] & 3u) ^ 2u) - 2);
            dst[4 * i + 1] = (int16_t)((int32_t)(((src[i] >> 2) & 3u) ^ 2u) - 2);
            dst[4 * i + 2] = (int16_t)((int32_t)(((src[i] >> 4) & 3u) ^ 2u) - 2);
            dst[4 * i + 3] = (int16_t)((int32_t)((src[i] >> 6) ^ 2u) - 2);
        }
        return;
    }
    f.bits = bits;
    f.is_signed = 1;
    f.zero = 0;
    mico_unpack(w, start, n, f, dst);
}

/* n codes of format f from element `start` into dst (int16): byte-aligned runs of 4-, 2- and
 * 1-bit codes a byte at a time in loops the compiler vectorises (a field x maps to the code
 * ((x ^ flip) << sh) - off, mico_nn.h's MicoFieldMap), everything else through mico_unpack. */
MICO_HOST_CLONES static void mico_host_unpack(const void *buf, size_t start, int32_t n, MicoFmt f,
                             int16_t *MICO_RESTRICT dst)
{
    const MicoFieldMap m = mico_field_map(f);
    const int32_t per = f.bits < 8 ? 8 / f.bits : 1;
    const uint8_t *src = (const uint8_t *)buf + start * (size_t)f.bits / 8u;
    const int32_t flip = (int32_t)m.x, sh = (int32_t)m.sh, off = m.o;
    int32_t i, k;
    if (f.bits == 8) { /* a byte per code */
        for (i = 0; i < n; i++) {
            dst[i] = (int16_t)((((int32_t)src[i]) ^ flip) - off);
        }
        return;
    }
    if (f.bits != 4 && f.bits != 2 && f.bits != 1) {
        mico_unpack(buf, start, n, f, dst);
        return;
    }
    if (start % (size_t)per != 0 || n % per != 0) { /* a head and a tail inside bytes */
        const int32_t head = (int32_t)(((size_t)per - start % (size_t)per) % (size_t)per);
        const int32_t h = head < n ? head : n, body = (n - h) / per * per;
        mico_unpack(buf, start, h, f, dst);
        if (body > 0) {
            mico_host_unpack(buf, start + (size_t)h, body, f, dst + h);
        }
        mico_unpack(buf, start + (size_t)(h + body), n - h - body, f, dst + h + body);
        return;
    }
#define MICO_HOST_UNPACK_BYTES(PER, BITS)                                                   \
    for (i = 0; i < n / (PER); i++) {                                                        \
        const int32_t byte = src[i];                                                         \
        for (k = 0; k < (PER); k++) {                                                        \
            const int32_t field = (byte >> (k * (BITS))) & ((1 << (BITS)) - 1);              \
            dst[i * (PER) + k] = (int16_t)(((field ^ flip) << sh) - off);                    \
        }                                                                                    \
    }
    if (f.bits == 4) {
        MICO_HOST_UNPACK_BYTES(2, 4)
    } else if (f.bits == 2) {
        MICO_HOST_UNPACK_BYTES(4, 2)
    } else {
        MICO_HOST_UNPACK_BYTES(8, 1)
    }
#undef MICO_HOST_UNPACK_BYTES
}

/* The 16- and 32-bit little-endian words at b: a plain load on little-endian hosts (which the
 * vectoriser handles best), bytes shifted into place elsewhere. */
static MICO_HOST_INLINE uint32_t mico_host_le16(const uint8_t *b)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint16_t w;
    memcpy(&w, b, sizeof w);
    return w;
#else
    return (uint32_t)b[0] | (uint32_t)b[1] << 8;
#endif
}

static MICO_HOST_INLINE uint32_t mico_host_le32(const uint8_t *b)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint32_t w;
    memcpy(&w, b, sizeof w);
    return w;
#else
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
#endif
}

/* mico_pack of n codes at element `start`: byte-aligned runs of 4- and 2-bit codes (not
 * binary) a byte at a time in loops the compiler vectorises, everything else through
 * mico_pack. */
MICO_HOST_CLONES static void mico_host_pack(void *buf, size_t start, const int32_t *MICO_RESTRICT v, int32_t n,
                           MicoFmt f)
{
    uint8_t *MICO_RESTRICT dst = (uint8_t *)buf + start * (size_t)f.bits / 8u;
    const int32_t zero = f.is_signed ? 0 : f.zero;
    int32_t i;
    if (f.bits == 8) { /* a byte per code: the field is code + zero */
        for (i = 0; i < n; i++) {
            dst[i] = (uint8_t)((uint32_t)(v[i] + zero) & 255u);
        }
        return;
    }
    if (f.bits != 4 && f.bits != 2) {
        mico_pack(buf, start, v, n, f);
        return;
    }
    if (start % (size_t)(8 / f.bits) != 0 || n % (8 / f.bits) != 0) { /* head, tail in bytes */
        const size_t per = (size_t)(8 / f.bits);
        const int32_t head = (int32_t)((per - start % per) % per);
        const int32_t h = head < n ? head : n, body = (n - h) / (int32_t)per * (int32_t)per;
        mico_pack(buf, start, v, h, f);
        if (body > 0) {
            mico_host_pack(buf, start + (size_t)h, v + h, body, f);
        }
        mico_pack(buf, start + (size_t)(h + body), v + h + body, n - h - body, f);
        return;
    }
    /* runs of MICO_HOST_PACKRUN codes: the fields narrowed to bytes, then the bytes of a
     * 16-bit (4-bit codes) or 32-bit (2-bit codes) word (little-endian order, whatever the
     * host's) folded into one byte by shifts (the fields are masked: no other bit reaches it) */
    for (i = 0; i < n; i += MICO_HOST_PACKRUN) {
        const int32_t k_n = n - i < MICO_HOST_PACKRUN ? n - i : MICO_HOST_PACKRUN;
        const uint32_t mask = (1u << f.bits) - 1u;
        uint8_t b[MICO_HOST_PACKRUN];
        int32_t k;
        for (k = 0; k < k_n; k++) {
            b[k] = (uint8_t)((uint32_t)(v[i + k] + zero) & mask);
        }
        if (f.bits == 4) {
            for (k = 0; k < k_n / 2; k++) {
                const uint32_t w = mico_host_le16(b + 2 * k);
                dst[i / 2 + k] = (uint8_t)(w | w >> 4);
            }
        } else {
            for (k = 0; k < k_n / 4; k++) {
                const uint32_t w = mico_host_le32(b + 4 * k);
                dst[i / 4 + k] = (uint8_t)(w | w >> 6 | w >> 12 | w >> 18);
            }
        }
    }
}

/* s[c * 2 + j] = dot(w row c, x row j) over kp taps, for 4 weight rows (kp apart) and 2 patch
 * rows (kp apart): eight int32 reductions of int16 products, one vector accumulator each. */
static MICO_HOST_INLINE void mico_host_mk42(const int16_t *MICO_RESTRICT w,
                                             const int16_t *MICO_RESTRICT x,
                                             int32_t kp, int32_t *MICO_RESTRICT s)
{
    const int16_t *w0 = w, *w1 = w + kp, *w2 = w + 2 * kp, *w3 = w + 3 * kp;
    const int16_t *x0 = x, *x1 = x + kp;
    int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, b0 = 0, b1 = 0, b2 = 0, b3 = 0;
    int32_t k;
    for (k = 0; k < kp; k++) {
        const int32_t u = x0[k], v = x1[k];
        a0 += w0[k] * u;
        a1 += w1[k] * u;
        a2 += w2[k] * u;
        a3 += w3[k] * u;
        b0 += w0[k] * v;
        b1 += w1[k] * v;
        b2 += w2[k] * v;
        b3 += w3[k] * v;
    }
    s[0] = a0;
    s[1] = b0;
    s[2] = a1;
    s[3] = b1;
    s[4] = a2;
    s[5] = b2;
    s[6] = a3;
    s[7] = b3;
}

/* s[c] = dot(w row c, x) over kp taps, for 4 weight rows (kp apart). */
static MICO_HOST_INLINE void mico_host_mk41(const int16_t *MICO_RESTRICT w,
                                             const int16_t *MICO_RESTRICT x,
                                             int32_t kp, int32_t *MICO_RESTRICT s)
{
    const int16_t *w0 = w, *w1 = w + kp, *w2 = w + 2 * kp, *w3 = w + 3 * kp;
    int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    int32_t k;
    for (k = 0; k < kp; k++) {
        const int32_t u = x[k];
        a0 += w0[k] * u;
        a1 += w1[k] * u;
        a2 += w2[k] * u;
        a3 += w3[k] * u;
    }
    s[0] = a0;
    s[1] = a1;
    s[2] = a2;
    s[3] = a3;
}

/* The same for 4 rows of int8 weights (k_n taps, ks apart) and one int16 row x. */
static MICO_HOST_INLINE void mico_host_mk41_s8(const int8_t *MICO_RESTRICT w, size_t ks,
                              const int16_t *MICO_RESTRICT x, int32_t k_n,
                              int32_t *MICO_RESTRICT s)
{
    const int8_t *w0 = w, *w1 = w + ks, *w2 = w + 2 * ks, *w3 = w + 3 * ks;
    int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    int32_t k;
    for (k = 0; k < k_n; k++) {
        const int32_t u = x[k];
        a0 += w0[k] * u;
        a1 += w1[k] * u;
        a2 += w2[k] * u;
        a3 += w3[k] * u;
    }
    s[0] = a0;
    s[1] = a1;
    s[2] = a2;
    s[3] = a3;
}

/* The high 32 bits of a b (a < 2^32, b < 2^31) from 16-bit halves in 32-bit arithmetic, so that
 * loops of it vectorise on targets without a vector 64-bit multiply (AVX2: none for this
 * pattern; the uint64_t product made gcc 12 leave the loop scalar): with a = ah 2^16 + al and
 * b = bh 2^16 + bl, u = ah bl + (al bl >> 16) < 2^32 and v = al bh + (u & 65535) < 2^31, and
 * the result is ah bh + (u >> 16) + (v >> 16), exactly. */
static MICO_HOST_INLINE uint32_t mico_host_mulhi(uint32_t a, uint32_t b)
{
    const uint32_t ah = a >> 16, al = a & 65535u, bh = b >> 16, bl = b & 65535u;
    const uint32_t u = ah * bl + ((al * bl) >> 16);
    const uint32_t v = al * bh + (u & 65535u);
    return ah * bh + (u >> 16) + (v >> 16);
}

/* Whether a rescale by m 2^-shift with shift <= 32 can take the 32-bit loop of a shift of 33:
 * the magnitudes capped at *cap (any larger one is clamped to lo or hi anyway: its result
 * reaches max(hi, -lo) + 1) and scaled by 2^(33 - shift) still fit 32 bits. */
static int mico_host_small_shift(const MicoRq *q, uint32_t *cap)
{
    const int64_t top = (q->hi > -(int64_t)q->lo ? q->hi : -(int64_t)q->lo) + 1;
    uint64_t b;
    if (q->m <= 0) {
        *cap = 0; /* every result is 0 */
        return 1;
    }
    b = ((uint64_t)top << q->shift) / (uint64_t)q->m + 1u; /* b m >= top 2^shift */
    if (top <= 0 || b >= (uint64_t)1 << (q->shift - 1)) {
        return 0;
    }
    *cap = (uint32_t)b;
    return 1;
}

/* A rescale by m 2^-shift in 32-bit lanes with no 64-bit product: the magnitudes capped at
 * 65535, which is exact when 65535 m > top 2^shift (top = max(hi, -lo) + 1: any larger
 * magnitude, and the cap, clamp to lo or hi anyway); the product's high part
 * X = floor(mag m / 2^16) = mag (m >> 16) + (mag (m & 65535) >> 16) < 2^31 fits 32 bits, and
 * the result is (X + 2^(shift - 17)) >> (shift - 16) (shift <= 47: no overflow either). No
 * division: this runs once per call and channel (not inlined: inlined, it made gcc 12
 * spill registers in the callers' vector loops). */
static MICO_NOINLINE int mico_host_rq16(const MicoRq *q)
{
    const int64_t top = (q->hi > -(int64_t)q->lo ? q->hi : -(int64_t)q->lo) + 1;
    return q->scaled && !q->binary && q->m > 0 && q->shift >= 17 && q->shift <= 47 && top > 0 &&
           top < ((int64_t)1 << (62 - q->shift)) &&
           ((uint64_t)top << q->shift) < (uint64_t)65535 * (uint64_t)q->m;
}

/* v[i] + b requantized in place as q says (the bias is added in the requantization loop: no
 * pass of its own). */
static MICO_HOST_INLINE void mico_host_requant(const MicoRq *q, int32_t b,
                                                int32_t *MICO_RESTRICT v, int32_t n)
{
    uint32_t m = (uint32_t)q->m, s = (uint32_t)q->shift, cap = UINT32_MAX, up = 0;
    int32_t i;
    if (mico_host_rq16(q)) { /* the usual case: 32-bit multiplies only */
        const uint32_t mh = m >> 16, ml = m & 65535u, rnd = 1u << (s - 17u), s16 = s - 16u;
        const int32_t lo = q->lo, hi = q->hi, floor0 = q->relu ? 0 : INT32_MIN;
        for (i = 0; i < n; i++) {
            const int32_t v0 = v[i] + b, r = v0 < floor0 ? floor0 : v0;
            const uint32_t sign = (uint32_t)(r >> 31); /* all ones when r < 0 */
            const uint32_t mag0 = ((uint32_t)r ^ sign) - sign;
            const uint32_t mag = mag0 < 65535u ? mag0 : 65535u;
            const uint32_t x = mag * mh + ((mag * ml) >> 16);
            const int32_t y = (int32_t)((((x + rnd) >> s16) ^ sign) - sign);
            v[i] = y < lo ? lo : y > hi ? hi : y;
        }
        return;
    }
    if (q->scaled && !q->binary && q->shift <= 32 && mico_host_small_shift(q, &cap)) {
        s = 33; /* (mag m + 2^(shift-1)) >> shift == (mag 2^up m + 2^32) >> 33 */
        up = 33u - (uint32_t)q->shift;
    }
    if (q->scaled && !q->binary && s > 32) { /* mico_rescale's usual case, vectorisable */
        const uint32_t rnd = 1u << (s - 33u);
        const int32_t lo = q->lo, hi = q->hi, floor0 = q->relu ? 0 : INT32_MIN;
        s -= 32u;
        for (i = 0; i < n; i++) {
            const int32_t v0 = v[i] + b, r = v0 < floor0 ? floor0 : v0;
            const uint32_t mag0 = r < 0 ? 0u - (uint32_t)r : (uint32_t)r;
            const uint32_t mag = (mag0 < cap ? mag0 : cap) << up;
            const uint32_t h = (mico_host_mulhi(mag, m) + rnd) >> s;
            const int32_t y = r < 0 ? -(int32_t)h : (int32_t)h;
            v[i] = y < lo ? lo : y > hi ? hi : y;
        }
    } else if (q->scaled && !q->binary) { /* shift <= 32: the whole 64-bit product */
        const uint64_t m64 = (uint32_t)q->m, rnd = (uint64_t)1 << (q->shift - 1);
        const int32_t sh = q->shift, floor0 = q->relu ? 0 : INT32_MIN;
        const int64_t lo = q->lo, hi = q->hi;
        for (i = 0; i < n; i++) {
            const int32_t v0 = v[i] + b, r = v0 < floor0 ? floor0 : v0;
            const uint64_t mag = r < 0 ? 0u - (uint32_t)r : (uint32_t)r;
            const int64_t h = (int64_t)((mag * m64 + rnd) >> sh); /* < 2^62: no overflow */
            const int64_t y = r < 0 ? -h : h;                      /* clamped into int32 below */
            v[i] = (int32_t)(y < lo ? lo : y > hi ? hi : y);
        }
    } else {
        for (i = 0; i < n; i++) {
            v[i] += b;
        }
        mico_rq_run(q, v, n);
    }
}

/* mico_host_requant for a layer whose outputs wait in the stage: the codes of the usual case
 * (mico_host_rq16) go straight to the stage at element start (no copy of v); the others are
 * requantized in place and copied there. A versioned function of its own, which the callers
 * do not inline: their loops for byte outputs stay as they were. */
MICO_HOST_CLONES static void mico_host_requant_stage(const MicoRq *q, int32_t b,
                                                     int32_t *MICO_RESTRICT v, int32_t n,
                                                     size_t start)
{
    int32_t *MICO_RESTRICT d = mico_host_stage + start;
    int32_t i;
    if (mico_host_rq16(q)) {
        const uint32_t m = (uint32_t)q->m, s = (uint32_t)q->shift;
        const uint32_t mh = m >> 16, ml = m & 65535u, rnd = 1u << (s - 17u), s16 = s - 16u;
        const int32_t lo = q->lo, hi = q->hi, floor0 = q->relu ? 0 : INT32_MIN;
        for (i = 0; i < n; i++) { /* mico_host_requant's first loop */
            const int32_t v0 = v[i] + b, r = v0 < floor0 ? floor0 : v0;
            const uint32_t sign = (uint32_t)(r >> 31);
            const uint32_t mag0 = ((uint32_t)r ^ sign) - sign;
            const uint32_t mag = mag0 < 65535u ? mag0 : 65535u;
            const uint32_t x = mag * mh + ((mag * ml) >> 16);
            const int32_t y = (int32_t)((((x + rnd) >> s16) ^ sign) - sign);
            d[i] = y < lo ? lo : y > hi ? hi : y;
        }
        return;
    }
    mico_host_requant(q, b, v, n);
    for (i = 0; i < n; i++) {
        d[i] = v[i];
    }
}

/* v[i] + b requantized as channel c says and packed at element start (v is overwritten), or
 * left in the stage when the layer packs its outputs at its end. */
static MICO_HOST_INLINE void mico_host_store(const MicoOut *o, int32_t c, int32_t b,
                                              int32_t *MICO_RESTRICT v, int32_t n, void *out,
                                              size_t start)
{
    const MicoRq q = mico_rq(o, c);
    const uint32_t zero = (uint32_t)(o->fmt.is_signed ? 0 : o->fmt.zero);
    int32_t i;
    if (mico_host_staged) { /* whole-tensor packing: the layer packs the stage at its end */
        mico_host_requant_stage(&q, b, v, n, start);
        return;
    }
    mico_host_requant(&q, b, v, n);
    if (o->fmt.bits == 8) { /* inlined here, where the store loop is vectorised */
        uint8_t *MICO_RESTRICT dst = (uint8_t *)out + start;
        for (i = 0; i < n; i++) {
            dst[i] = (uint8_t)(((uint32_t)v[i] + zero) & 255u);
        }
        return;
    }
    mico_host_pack(out, start, v, n, o->fmt);
}

/* Requantization across channels: a layer whose outputs are bytes can requantize the sums of
 * one pixel (all its channels) in one vectorised loop, with each channel's bias and constants
 * read from a table: the rows b, m, cap, up, s, rnd of n int32 each, for mico_host_store's
 * 64-bit-product arithmetic (the high half of the product of the magnitude, capped and
 * scaled up by 2^up, by m: h = ((mag m >> 32) + rnd) >> s; shifts of 32 or less take it as a
 * shift of 33, as mico_host_small_shift allows). Tables are built once per layer (found by
 * the addresses of the multipliers, shifts and bias, and checked against copies of them on
 * every call, like the weight store) in a static pool; a full pool means building the table
 * on every call in the scratch row. */
#define MICO_HOST_RQ_POOL (1 << 18) /* int32: tables and the copies they were built from */
#define MICO_HOST_RQ_KEYS 512
#define MICO_HOST_RQ_PIX 16 /* the most pixels of a GEMM layer requantized over channels */
#define MICO_HOST_DW_RQ_PIX 256 /* and of a channels-last depthwise layer */
#define MICO_HOST_RQ_ROWS 11 /* 6 rows, mico_host_rq16's 4 (mh, ml, rnd, s16), a flag row */
typedef struct {
    const int32_t *m, *shift, *bias;
    int32_t n, n_mult;
    size_t at;
} MicoHostRqKey;
static int32_t mico_host_rq_pool[MICO_HOST_RQ_POOL];
static int32_t mico_host_rq_row[MICO_HOST_RQ_ROWS * MICO_HOST_ROW];
static MicoHostRqKey mico_host_rq_keys[MICO_HOST_RQ_KEYS];
static int32_t mico_host_rq_n_keys;
static size_t mico_host_rq_used;

/* Fills table t (MICO_HOST_RQ_ROWS rows of n) for channels 0 .. n - 1; 0 when a channel takes
 * neither of mico_host_store's 32-bit-lane paths (binary outputs, no multiplier, a shift of
 * 32 or less whose magnitudes do not fit). */
static int mico_host_rq_fill(const MicoOut *o, const int32_t *bias, int32_t n, int32_t *t)
{
    int32_t c, rq16 = 1;
    for (c = 0; c < n; c++) {
        const MicoRq q = mico_rq(o, c);
        uint32_t cap = UINT32_MAX, up = 0, s = (uint32_t)q.shift;
        if (!q.scaled || q.binary) {
            return 0;
        }
        if (q.shift <= 32) {
            if (!mico_host_small_shift(&q, &cap)) {
                return 0;
            }
            up = 33u - (uint32_t)q.shift;
            s = 33;
        }
        t[c] = bias[c];
        t[n + c] = q.m;
        t[2 * n + c] = (int32_t)cap;
        t[3 * n + c] = (int32_t)up;
        t[4 * n + c] = (int32_t)(s - 32u);
        t[5 * n + c] = (int32_t)(1u << (s - 33u));
        if (rq16 && mico_host_rq16(&q)) { /* its cheaper arithmetic, while every channel can */
            t[6 * n + c] = (int32_t)((uint32_t)q.m >> 16);
            t[7 * n + c] = (int32_t)((uint32_t)q.m & 65535u);
            t[8 * n + c] = (int32_t)(1u << ((uint32_t)q.shift - 17u));
            t[9 * n + c] = q.shift - 16;
        } else {
            rq16 = 0;
        }
    }
    t[10 * n] = rq16;
    return 1;
}

/* The table of a layer's n output channels, or NULL when its outputs are not bytes or a
 * channel does not take the table's arithmetic. */
static const int32_t *mico_host_rq_table(const MicoOut *o, const int32_t *bias, int32_t n)
{
    const size_t k = o->n_mult > 1 ? (size_t)n : 1u, rows = MICO_HOST_RQ_ROWS * (size_t)n;
    MicoHostRqKey *e;
    int32_t i;
    if ((o->fmt.bits != 8 && !mico_host_staged) || o->n_mult == 0 || n > MICO_HOST_ROW) {
        return 0;
    }
    for (i = 0; i < mico_host_rq_n_keys; i++) {
        int32_t *t;
        e = &mico_host_rq_keys[i];
        if (e->m != o->m || e->shift != o->shift || e->bias != bias || e->n != n ||
            e->n_mult != o->n_mult) {
            continue;
        }
        if (e->at == (size_t)-1) {
            return 0; /* a channel does not take mico_host_rq16 (constant data: no check) */
        }
        t = mico_host_rq_pool + e->at; /* the table, then copies of m, shift, bias */
        if (memcmp(t + rows, o->m, k * 4u) != 0 || memcmp(t + rows + k, o->shift, k * 4u) != 0 ||
            memcmp(t + rows + 2 * k, bias, (size_t)n * 4u) != 0) {
            if (!mico_host_rq_fill(o, bias, n, t)) {
                e->n = -1; /* no longer a table: never found again */
                return 0;
            }
            memcpy(t + rows, o->m, k * 4u);
            memcpy(t + rows + k, o->shift, k * 4u);
            memcpy(t + rows + 2 * k, bias, (size_t)n * 4u);
        }
        return t;
    }
    if (mico_host_rq_n_keys < MICO_HOST_RQ_KEYS &&
        rows + 2 * k + (size_t)n <= MICO_HOST_RQ_POOL - mico_host_rq_used) {
        int32_t *t = mico_host_rq_pool + mico_host_rq_used;
        if (!mico_host_rq_fill(o, bias, n, t)) { /* remembered as no table: at = SIZE_MAX */
            e = &mico_host_rq_keys[mico_host_rq_n_keys++];
            e->m = o->m;
            e->shift = o->shift;
            e->bias = bias;
            e->n = n;
            e->n_mult = o->n_mult;
            e->at = (size_t)-1;
            return 0;
        }
        memcpy(t + rows, o->m, k * 4u);
        memcpy(t + rows + k, o->shift, k * 4u);
        memcpy(t + rows + 2 * k, bias, (size_t)n * 4u);
        e = &mico_host_rq_keys[mico_host_rq_n_keys++];
        e->m = o->m;
        e->shift = o->shift;
        e->bias = bias;
        e->n = n;
        e->n_mult = o->n_mult;
        e->at = mico_host_rq_used;
        mico_host_rq_used += (rows + 2 * k + (size_t)n + 15u) & ~(size_t)15u;
        return t;
    }
    return mico_host_rq_fill(o, bias, n, mico_host_rq_row) ? mico_host_rq_row : 0;
}

/* dst[c ds] = the byte of channel c's sum acc[c] (bias not added) for c < n: mico_host_store's
 * arithmetic with the channel's constants from table t (of nt channels), vectorised over the
 * channels (lo, hi, floor0 and the zero point are the layer's). */
static MICO_HOST_INLINE void mico_host_rq_bytes(const int32_t *MICO_RESTRICT t, int32_t nt,
                                                 const int32_t *MICO_RESTRICT acc, int32_t n,
                                                 const MicoOut *o, uint8_t *MICO_RESTRICT dst,
                                                 size_t ds, int32_t *MICO_RESTRICT codes)
{
    const int32_t *MICO_RESTRICT b = t, *MICO_RESTRICT m = t + nt, *MICO_RESTRICT cap = t + 2 * nt;
    const int32_t *MICO_RESTRICT up = t + 3 * nt, *MICO_RESTRICT sh = t + 4 * nt;
    const int32_t *MICO_RESTRICT rnd = t + 5 * nt;
    const int32_t *MICO_RESTRICT mh = t + 6 * nt, *MICO_RESTRICT ml = t + 7 * nt;
    const int32_t *MICO_RESTRICT rnd16 = t + 8 * nt, *MICO_RESTRICT s16 = t + 9 * nt;
    const int32_t lo = o->lo, hi = o->hi, floor0 = o->relu ? 0 : INT32_MIN;
    const uint32_t zero = (uint32_t)(o->fmt.is_signed ? 0 : o->fmt.zero);
    int32_t c;
/* every channel takes mico_host_rq16's arithmetic (t[10 nt]), or the 64-bit-product one */
#define MICO_HOST_RQ16_LOOP(STORE)                                                           \
    for (c = 0; c < n; c++) {                                                                \
        const int32_t v = acc[c] + b[c], r = v < floor0 ? floor0 : v;                        \
        const uint32_t sign = (uint32_t)(r >> 31);                                           \
        const uint32_t mag0 = ((uint32_t)r ^ sign) - sign;                                   \
        const uint32_t mag = mag0 < 65535u ? mag0 : 65535u;                                  \
        const uint32_t x = mag * (uint32_t)mh[c] + ((mag * (uint32_t)ml[c]) >> 16);          \
        const int32_t y =                                                                    \
            (int32_t)((((x + (uint32_t)rnd16[c]) >> (uint32_t)s16[c]) ^ sign) - sign);       \
        const int32_t z = y < lo ? lo : y > hi ? hi : y;                                     \
        STORE;                                                                               \
    }
#define MICO_HOST_RQ64_LOOP(STORE)                                                           \
    for (c = 0; c < n; c++) {                                                                \
        const int32_t v = acc[c] + b[c], r = v < floor0 ? floor0 : v;                        \
        const uint32_t mag0 = r < 0 ? 0u - (uint32_t)r : (uint32_t)r;                        \
        const uint32_t mag = (mag0 < (uint32_t)cap[c] ? mag0 : (uint32_t)cap[c]) << up[c];   \
        const uint32_t h = (mico_host_mulhi(mag, (uint32_t)m[c]) + (uint32_t)rnd[c]) >> sh[c]; \
        const int32_t y = r < 0 ? -(int32_t)h : (int32_t)h;                                  \
        const int32_t z = y < lo ? lo : y > hi ? hi : y;                                     \
        STORE;                                                                               \
    }
    if (codes) { /* sub-byte outputs: the codes into the stage, packed at the layer's end */
        if (t[10 * nt]) {
            MICO_HOST_RQ16_LOOP(codes[(size_t)c * ds] = z)
        } else {
            MICO_HOST_RQ64_LOOP(codes[(size_t)c * ds] = z)
        }
    } else if (t[10 * nt]) {
        MICO_HOST_RQ16_LOOP(dst[(size_t)c * ds] = (uint8_t)(((uint32_t)z + zero) & 255u))
    } else {
        MICO_HOST_RQ64_LOOP(dst[(size_t)c * ds] = (uint8_t)(((uint32_t)z + zero) & 255u))
    }
#undef MICO_HOST_RQ16_LOOP
#undef MICO_HOST_RQ64_LOOP
}

/* Sub-byte outputs of a layer whose codes fit the stage wait there and are packed in one run
 * (per-channel runs of a plane whose size is not a multiple of the codes per byte start
 * inside a byte, which only the bit-buffer path of mico_pack takes). */
static void mico_host_stage_begin(const MicoOut *o, size_t total)
{
    mico_host_staged = o->fmt.bits < 8 && total <= MICO_HOST_STAGE;
}

static void mico_host_stage_end(const MicoOut *o, void *out, size_t total)
{
    if (mico_host_staged) {
        mico_host_staged = 0;
        mico_host_pack(out, 0, mico_host_stage, (int32_t)total, o->fmt);
    }
}

/* The padded extent of one input dimension: in + 2 pad, or more when the outputs reach further
 * (a band of rows whose bottom padding is deeper than its top, mico/codegen/patch_plan.py). */
static int32_t mico_host_extent(int32_t in, int32_t pad, int32_t out, int32_t stride, int32_t dil,
                                int32_t k)
{
    const int32_t reach = (out - 1) * stride + dil * (k - 1) + 1, even = in + 2 * pad;
    return reach > even ? reach : even;
}

/* The padded input of channels ic0 .. ic0 + n - 1 in HWC order (hp x wp pixels of ns >= n
 * codes, zeros around and in channels n .. ns - 1): code (iy, ix, ic) at
 * x[((iy + pad_h) * wp + ix + pad_w) * ns + ic - ic0]. */
MICO_HOST_CLONES static void mico_host_planes(const MicoConv2d *p, const void *in, int32_t ic0, int32_t n,
                             int32_t ns, int32_t hp, int32_t wp, int16_t *MICO_RESTRICT x)
{
    const size_t plane = (size_t)p->in_h * (size_t)p->in_w;
    const size_t rowlen = (size_t)wp * (size_t)ns;
    int16_t row[MICO_HOST_ROW];
    int32_t c, c8, y, i;
    if (ns != n) { /* padded channels: zero everything first */
        for (i = 0; i < hp * wp * ns; i++) {
            x[i] = 0;
        }
    } else {
        for (i = 0; i < (int32_t)((size_t)p->pad_h * rowlen); i++) {
            x[i] = 0;
        }
        for (i = (int32_t)((size_t)(p->pad_h + p->in_h) * rowlen); i < (int32_t)((size_t)hp * rowlen);
             i++) {
            x[i] = 0;
        }
        for (y = 0; y < p->in_h; y++) {
            int16_t *dst = x + (size_t)(y + p->pad_h) * rowlen;
            for (i = 0; i < p->pad_w * ns; i++) {
                dst[i] = 0;
            }
            for (i = (p->pad_w + p->in_w) * ns; i < wp * ns; i++) {
                dst[i] = 0;
            }
        }
    }
    c = 0;
    if ((size_t)8 * plane <= MICO_HOST_PATCH) { /* 8 channels at a time: unpack, transpose */
        for (; c + 8 <= n; c += 8) {
            const int16_t *MICO_RESTRICT t = mico_host_patch;
            int32_t k;
            mico_host_unpack(in, (size_t)(ic0 + c) * plane, (int32_t)(8 * plane), p->in_fmt,
                             mico_host_patch);
            for (y = 0; y < p->in_h; y++) {
                int16_t *MICO_RESTRICT dst =
                    x + ((size_t)(y + p->pad_h) * (size_t)wp + (size_t)p->pad_w) * (size_t)ns +
                    (size_t)c;
                const size_t r = (size_t)y * (size_t)p->in_w;
                for (i = 0; i < p->in_w; i++) {
                    for (k = 0; k < 8; k++) {
                        dst[(size_t)i * (size_t)ns + (size_t)k] = t[(size_t)k * plane + r + (size_t)i];
                    }
                }
            }
        }
        if (c == n) {
            return;
        }
    }
    c8 = c; /* the channels left over */
    if (p->in_fmt.bits == 8) { /* bytes are the codes (less the zero point): a transpose */
        const uint8_t *src = (const uint8_t *)in + (size_t)ic0 * plane;
        const int32_t sgn = p->in_fmt.is_signed, zero = sgn ? 0 : p->in_fmt.zero;
        for (y = 0; y < p->in_h; y++) {
            int16_t *MICO_RESTRICT dst =
                x + ((size_t)(y + p->pad_h) * (size_t)wp + (size_t)p->pad_w) * (size_t)ns;
            const uint8_t *row8 = src + (size_t)y * (size_t)p->in_w;
            for (i = 0; i < p->in_w; i++) {
                for (c = c8; c < n; c++) {
                    const uint32_t v = row8[(size_t)c * plane + (size_t)i];
                    dst[(size_t)i * (size_t)ns + (size_t)c] =
                        (int16_t)(sgn ? (int32_t)(int8_t)v : (int32_t)v - zero);
                }
            }
        }
        return;
    }
    if ((size_t)n * plane <= MICO_HOST_PATCH) { /* every plane in one run: the patch is free */
        mico_host_unpack(in, (size_t)ic0 * plane, (int32_t)((size_t)n * plane), p->in_fmt,
                         mico_host_patch);
    }
    for (c = c8; c < n; c++) {
        const size_t first = (size_t)(ic0 + c) * plane;
        const int16_t *codes = mico_host_patch;
        if ((size_t)n * plane <= MICO_HOST_PATCH) {
            codes += (size_t)c * plane;
        } else if (plane <= MICO_HOST_PATCH) { /* the whole plane at once */
            mico_host_unpack(in, first, (int32_t)plane, p->in_fmt, mico_host_patch);
        }
        for (y = 0; y < p->in_h; y++) {
            int16_t *dst = x + ((size_t)(y + p->pad_h) * (size_t)wp + (size_t)p->pad_w) * (size_t)ns;
            const int16_t *src = codes + (size_t)y * (size_t)p->in_w;
            if (plane > MICO_HOST_PATCH) {
                mico_host_unpack(in, first + (size_t)y * (size_t)p->in_w, p->in_w, p->in_fmt,
                                 row);
                src = row;
            }
            for (i = 0; i < p->in_w; i++) {
                dst[(size_t)i * (size_t)ns + (size_t)c] = src[i];
            }
        }
    }
}

/* The patch of output pixels pix0 .. pix0 + np - 1: row j holds the taps of pixel pix0 + j in
 * (ky, kx, ic) order, then zeros up to kp. With unit column dilation a kernel row's taps are
 * one run of k_w * ipg codes of the HWC input. */
MICO_HOST_CLONES static void mico_host_im2col(const MicoConv2d *p, const int16_t *x, int32_t ipg, int32_t wp,
                             int32_t pix0, int32_t np, int32_t kp, int16_t *MICO_RESTRICT patch)
{
    const int32_t run = p->dil_w == 1 ? p->k_w * ipg : ipg, k_all = p->k_h * p->k_w * ipg;
    int32_t j, ky, kx, i, k;
    int32_t oy = pix0 / p->out_w, ox = pix0 % p->out_w;
    for (j = 0; j < np; j++) {
        const int16_t *base = x + ((size_t)(oy * p->stride_h) * (size_t)wp +
                                   (size_t)(ox * p->stride_w)) * (size_t)ipg;
        int16_t *MICO_RESTRICT dst = patch + (size_t)j * (size_t)kp;
        k = 0;
        for (ky = 0; ky < p->k_h; ky++) {
            const int16_t *src = base + (size_t)(ky * p->dil_h) * (size_t)wp * (size_t)ipg;
            for (kx = 0; kx < p->k_w; kx += run / ipg) {
                const int16_t *s = src + (size_t)(kx * p->dil_w) * (size_t)ipg;
                for (i = 0; i < run; i++) {
                    dst[k + i] = s[i];
                }
                k += run;
            }
        }
        for (k = k_all; k < kp; k++) {
            dst[k] = 0;
        }
        if (++ox == p->out_w) {
            ox = 0;
            oy++;
        }
    }
}

/* The weight rows of output channels c0 .. c0 + n4 - 1 (n4 <= 4 rows of kp taps, zero rows
 * past n) in (ky, kx, ic) order, the patch's: rows[c * kp + t * ipg + i]. */
static void mico_host_conv_rows(const MicoConv2d *p, int32_t c0, int32_t n, int32_t n4,
                                int32_t kp, int16_t *MICO_RESTRICT rows)
{
    const int32_t ipg = p->in_c / p->groups, taps = p->k_h * p->k_w, k_all = ipg * taps;
    int16_t tmp[MICO_HOST_ROW];
    int32_t c, t, i, k;
    for (c = 0; c < n4; c++) {
        int16_t *row = rows + (size_t)c * (size_t)kp;
        k = 0;
        if (c < n) { /* (ic, ky, kx) as stored -> (ky, kx, ic) as the patch holds */
            mico_host_unpack_w(p->weight, (size_t)(c0 + c) * (size_t)k_all, k_all, p->w_bits,
                               taps == 1 ? row : tmp);
            for (t = 0; t < taps && taps > 1; t++) {
                for (i = 0; i < ipg; i++) {
                    row[t * ipg + i] = tmp[i * taps + t];
                }
            }
            k = k_all;
        }
        for (; k < kp; k++) {
            row[k] = 0;
        }
    }
}

/* Convolution as int16 GEMMs (see the top of the file). Returns 0 (nothing done) when the
 * layer's unpacked input or weights do not fit the scratch arrays. */
MICO_HOST_CLONES static int mico_host_conv(const MicoConv2d *p, const void *in, void *out)
{
    const int32_t ipg = p->in_c / p->groups, opg = p->out_c / p->groups;
    const int32_t hp = mico_host_extent(p->in_h, p->pad_h, p->out_h, p->stride_h, p->dil_h, p->k_h);
    const int32_t wp = mico_host_extent(p->in_w, p->pad_w, p->out_w, p->stride_w, p->dil_w, p->k_w);
    const int32_t taps = p->k_h * p->k_w, k_all = ipg * taps, kp = mico_host_kpad(k_all);
    const int32_t npix = p->out_h * p->out_w, opg4 = (opg + 3) / 4 * 4;
    /* pointwise, stride 1, no padding: the HWC input (channels padded to kp) is the patch */
    const int direct = taps == 1 && p->stride_h == 1 && p->stride_w == 1 && p->pad_h == 0 &&
                       p->pad_w == 0 && hp == p->in_h && wp == p->in_w;
    const int32_t ns = direct ? kp : ipg;
    const size_t wsize = (size_t)p->groups * (size_t)opg4 * (size_t)kp;
    int32_t bp = MICO_HOST_PATCH / kp, g, c, pix0, oc, j;
    int32_t tile[4 * MICO_HOST_PIX];
    const int32_t *rqt;
    int16_t *wall;
    int fill;
    bp = (bp > MICO_HOST_PIX ? MICO_HOST_PIX : bp) & ~1;
    /* one block of pixels (few pixels, many channels): the sums wait as [pixel][channel] and
     * each pixel is requantized over its channels at once (mico_host_rq_bytes), when every
     * channel takes mico_host_rq16 */
    rqt = p->groups == 1 && npix <= MICO_HOST_RQ_PIX && npix <= bp &&
                  (size_t)npix * (size_t)opg <= 2u * MICO_HOST_ACC
              ? mico_host_rq_table(&p->out, p->bias, p->out_c)
              : 0;
    if (p->in_fmt.bits > 8 || bp < 2 || k_all > MICO_HOST_ROW || p->in_w > MICO_HOST_ROW ||
        (size_t)ns * (size_t)hp * (size_t)wp + (size_t)kp > MICO_HOST_X ||
        (size_t)opg4 * (size_t)kp > MICO_HOST_W || wsize > (size_t)INT32_MAX) {
        return 0;
    }
    wall = mico_host_weights(p->weight,
                             mico_host_wbytes((size_t)p->out_c * (size_t)k_all, p->w_bits), 1,
                             (int32_t)wsize, &fill);
    for (g = 0; g < p->groups && fill; g++) {
        for (c = 0; c < opg4; c += 4) {
            mico_host_conv_rows(p, g * opg + c, opg - c < 4 ? opg - c : 4, 4, kp,
                                wall + ((size_t)g * (size_t)opg4 + (size_t)c) * (size_t)kp);
        }
    }
    for (g = 0; g < p->groups; g++) {
        const int16_t *wg = wall ? wall + (size_t)g * (size_t)opg4 * (size_t)kp : mico_host_w;
        mico_host_planes(p, in, g * ipg, ipg, ns, hp, wp, mico_host_x);
        for (j = 0; j < kp; j++) { /* a zero pixel past the input (an odd direct block) */
            mico_host_x[(size_t)ns * (size_t)hp * (size_t)wp + (size_t)j] = 0;
        }
        for (c = 0; c < opg4 && !wall; c += 4) { /* no room in the store: unpack per call */
            mico_host_conv_rows(p, g * opg + c, opg - c < 4 ? opg - c : 4, 4, kp,
                                mico_host_w + (size_t)c * (size_t)kp);
        }
        for (pix0 = 0; pix0 < npix; pix0 += bp) {
            const int32_t np = npix - pix0 < bp ? npix - pix0 : bp, np2 = (np + 1) & ~1;
            const int16_t *patch = mico_host_patch;
            if (direct) {
                patch = mico_host_x + (size_t)pix0 * (size_t)kp; /* ns == kp */
            } else {
                mico_host_im2col(p, mico_host_x, ipg, wp, pix0, np, kp, mico_host_patch);
                if (np2 > np) { /* an odd block: a zero pixel makes the pair */
                    for (j = 0; j < kp; j++) {
                        mico_host_patch[(size_t)np * (size_t)kp + (size_t)j] = 0;
                    }
                }
            }
            for (oc = 0; rqt && oc < opg; oc += 4) { /* the sums as [pixel][channel] */
                const int16_t *w = wg + (size_t)oc * (size_t)kp;
                const int32_t n_oc = opg - oc < 4 ? opg - oc : 4;
                int32_t s[8];
                for (j = 0; j < np2; j += 2) {
                    int32_t *a0 = mico_host_acc + (size_t)j * (size_t)opg + (size_t)oc;
                    mico_host_mk42(w, patch + (size_t)j * (size_t)kp, kp, s);
                    for (c = 0; c < n_oc; c++) {
                        a0[c] = s[2 * c];
                        if (j + 1 < np) {
                            a0[(size_t)opg + (size_t)c] = s[2 * c + 1];
                        }
                    }
                }
            }
            for (j = 0; rqt && j < np; j++) { /* a pixel's channels at once, into CHW */
                mico_host_rq_bytes(rqt, opg, mico_host_acc + (size_t)j * (size_t)opg, opg,
                                   &p->out, (uint8_t *)out + pix0 + j, (size_t)npix,
                                   mico_host_staged ? mico_host_stage + pix0 + j : 0);
            }
            for (oc = 0; !rqt && oc < opg; oc += 4) {
                const int16_t *w = wg + (size_t)oc * (size_t)kp;
                const int32_t n_oc = opg - oc < 4 ? opg - oc : 4;
                int32_t s[8];
                for (j = 0; j < np2; j += 2) {
                    mico_host_mk42(w, patch + (size_t)j * (size_t)kp, kp, s);
                    for (c = 0; c < 4; c++) {
                        tile[c * MICO_HOST_PIX + j] = s[2 * c];
                        tile[c * MICO_HOST_PIX + j + 1] = s[2 * c + 1];
                    }
                }
                for (c = 0; c < n_oc; c++) {
                    const int32_t ch = g * opg + oc + c;
                    mico_host_store(&p->out, ch, p->bias[ch], tile + c * MICO_HOST_PIX, np, out,
                                    (size_t)ch * (size_t)npix + (size_t)pix0);
                }
            }
        }
    }
    return 1;
}

/* Depthwise sums of one channel over the phase-split plane x (see mico_host_dw): acc[i] =
 * sum over the taps of w[t] x[off[t] + i] for i < span, all the taps of an output in
 * registers (3x3: the nine rows read side by side, a loop the compiler vectorises over i),
 * plus the bias b.
 * The products fit int16 exactly (|code| <= 255, |weight| <= 128, or narrower); mico_host_dw9w
 * sums them in int32, mico_host_dw9n in int16 (exact when taps |x| |w| bound the sums: the
 * caller checks the channel's actual weights). */
static MICO_HOST_INLINE void mico_host_dw9w(const int16_t *x, const int32_t *off,
                                             const int16_t *w, int32_t span, int32_t b,
                                             int32_t *MICO_RESTRICT acc)
{
    const int16_t *MICO_RESTRICT s0 = x + off[0], *MICO_RESTRICT s1 = x + off[1];
    const int16_t *MICO_RESTRICT s2 = x + off[2], *MICO_RESTRICT s3 = x + off[3];
    const int16_t *MICO_RESTRICT s4 = x + off[4], *MICO_RESTRICT s5 = x + off[5];
    const int16_t *MICO_RESTRICT s6 = x + off[6], *MICO_RESTRICT s7 = x + off[7];
    const int16_t *MICO_RESTRICT s8 = x + off[8];
    const int16_t w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4], w5 = w[5], w6 = w[6],
                  w7 = w[7], w8 = w[8];
    int32_t i;
    for (i = 0; i < span; i++) {
        acc[i] = b + (int16_t)(w0 * s0[i]) + (int16_t)(w1 * s1[i]) + (int16_t)(w2 * s2[i]) +
                 (int16_t)(w3 * s3[i]) + (int16_t)(w4 * s4[i]) + (int16_t)(w5 * s5[i]) +
                 (int16_t)(w6 * s6[i]) + (int16_t)(w7 * s7[i]) + (int16_t)(w8 * s8[i]);
    }
}

static MICO_HOST_INLINE void mico_host_dw9n(const int16_t *x, const int32_t *off,
                                             const int16_t *w, int32_t span, int32_t b,
                                             int32_t *MICO_RESTRICT acc)
{
    const int16_t *MICO_RESTRICT s0 = x + off[0], *MICO_RESTRICT s1 = x + off[1];
    const int16_t *MICO_RESTRICT s2 = x + off[2], *MICO_RESTRICT s3 = x + off[3];
    const int16_t *MICO_RESTRICT s4 = x + off[4], *MICO_RESTRICT s5 = x + off[5];
    const int16_t *MICO_RESTRICT s6 = x + off[6], *MICO_RESTRICT s7 = x + off[7];
    const int16_t *MICO_RESTRICT s8 = x + off[8];
    const int16_t w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4], w5 = w[5], w6 = w[6],
                  w7 = w[7], w8 = w[8];
    int32_t i;
    for (i = 0; i < span; i++) { /* arithmetic mod 2^16: exact, the sums fit int16 */
        acc[i] = b + (int16_t)((uint16_t)((uint16_t)(w0 * s0[i]) + (uint16_t)(w1 * s1[i]) +
                                      (uint16_t)(w2 * s2[i]) + (uint16_t)(w3 * s3[i]) +
                                      (uint16_t)(w4 * s4[i]) + (uint16_t)(w5 * s5[i]) +
                                      (uint16_t)(w6 * s6[i]) + (uint16_t)(w7 * s7[i]) +
                                      (uint16_t)(w8 * s8[i])));
    }
}

/* Depthwise convolution channel by channel over CHW planes (wide planes, where a row holds
 * whole vectors). The padded plane is stored split by phase, rows by r % stride_h and columns
 * by x % stride_w: phase (fr, fc) is a block of hq x wq codes, code (j, q) the padded input
 * (j * stride_h + fr, q * stride_w + fc). Output (oy, ox) of a tap then reads (oy + a, ox + b)
 * of one phase block, so with the sums laid out as rows of wq (columns past out_w are
 * computed and dropped) every tap is one contiguous run over the whole plane: 3x3 layers sum
 * the nine runs in one pass (mico_host_dw9w / mico_host_dw9n), other kernels one pass per
 * tap. The sums are requantized a whole plane at a time. A channel's whole input is read
 * before any of its outputs is stored (the in-place order of mico_conv2d.c). Returns 0 when
 * the plane or the sums do not fit the scratch arrays. */
MICO_HOST_CLONES static int mico_host_dw(const MicoConv2d *p, const void *in, void *out)
{
    const int32_t sw = p->stride_w, sh = p->stride_h;
    const int32_t hp = mico_host_extent(p->in_h, p->pad_h, p->out_h, p->stride_h, p->dil_h, p->k_h);
    const int32_t wp = mico_host_extent(p->in_w, p->pad_w, p->out_w, p->stride_w, p->dil_w, p->k_w);
    const int32_t hq = (hp + sh - 1) / sh, wq = (wp + sw - 1) / sw;
    const int32_t npix = p->out_h * p->out_w, taps = p->k_h * p->k_w;
    const int32_t span = (p->out_h - 1) * wq + p->out_w; /* up to output (out_h-1, out_w-1) */
    const size_t plane = (size_t)p->in_h * (size_t)p->in_w, block = (size_t)hq * (size_t)wq;
    const int32_t xmax = mico_host_max_code(p->in_fmt);
    int16_t *x = mico_host_x, *raw = mico_host_patch;
    int32_t *acc = mico_host_acc, *res = mico_host_acc + MICO_HOST_ACC;
    int32_t c, y, i, t, oy, ox;
    int32_t off[64];
    int16_t wt[64];
    if (p->in_fmt.bits > 8 || taps > 64 || (size_t)sh * (size_t)sw * block + 16 > MICO_HOST_X ||
        plane > MICO_HOST_PATCH || span > MICO_HOST_ACC || npix > MICO_HOST_ACC) {
        return 0;
    }
    for (t = 0; t < taps; t++) { /* where tap t of output (0, 0) is in the phase blocks */
        const int32_t r = (t / p->k_w) * p->dil_h, q = (t % p->k_w) * p->dil_w;
        off[t] = (int32_t)((size_t)((r % sh) * sw + q % sw) * block) + (r / sh) * wq + q / sw;
    }
    for (i = 0; i < sh * sw * (int32_t)block + 16; i++) {
        x[i] = 0; /* the padding (never written below) */
    }
    for (c = 0; c < p->in_c; c++) {
        const int32_t b = p->bias[c];
        int32_t wsum = 0;
        mico_host_unpack(in, (size_t)c * plane, (int32_t)plane, p->in_fmt, raw);
        for (y = 0; y < p->in_h; y++) {
            const int32_t r = y + p->pad_h;
            const int16_t *MICO_RESTRICT src = raw + (size_t)y * (size_t)p->in_w;
            int16_t *MICO_RESTRICT row = x + (size_t)((r % sh) * sw) * block +
                                         (size_t)(r / sh) * (size_t)wq;
            int32_t f;
            if (sw == 1) {
                for (i = 0; i < p->in_w; i++) {
                    row[p->pad_w + i] = src[i];
                }
                continue;
            }
            if (sw == 2) { /* both phases in one loop (vectorised: a de-interleave) */
                int16_t *MICO_RESTRICT da = row + (size_t)(p->pad_w % 2) * block + p->pad_w / 2;
                int16_t *MICO_RESTRICT db =
                    row + (size_t)((p->pad_w + 1) % 2) * block + (p->pad_w + 1) / 2;
                for (i = 0; i < p->in_w / 2; i++) {
                    da[i] = src[2 * i];
                    db[i] = src[2 * i + 1];
                }
                if (p->in_w & 1) {
                    da[i] = src[2 * i];
                }
                continue;
            }
            for (f = 0; f < sw; f++) { /* input columns i with (i + pad_w) % sw == f */
                const int32_t i0 = ((f - p->pad_w) % sw + sw) % sw, q0 = (i0 + p->pad_w) / sw;
                const int32_t n_f = p->in_w > i0 ? (p->in_w - i0 + sw - 1) / sw : 0;
                int16_t *MICO_RESTRICT dst = row + (size_t)f * block + (size_t)q0;
                const int16_t *MICO_RESTRICT s0 = src + i0;
                for (i = 0; i < n_f; i++) {
                    dst[i] = s0[(size_t)i * (size_t)sw];
                }
            }
        }
        mico_host_unpack_w(p->weight, (size_t)c * (size_t)taps, taps, p->w_bits, wt);
        for (t = 0; t < taps; t++) {
            wsum += wt[t] < 0 ? -wt[t] : wt[t];
        }
        if (taps == 9 && p->out_w >= MICO_HOST_DW_ROWS) { /* a row at a time, into res */
            const int narrow = wsum * xmax <= 32767; /* every sum fits int16 */
            for (oy = 0; oy < p->out_h; oy++) {
                const int16_t *xr = x + (size_t)oy * (size_t)wq;
                int32_t *d = res + (size_t)oy * (size_t)p->out_w;
                if (narrow) {
                    mico_host_dw9n(xr, off, wt, p->out_w, b, d);
                } else {
                    mico_host_dw9w(xr, off, wt, p->out_w, b, d);
                }
            }
        } else if (taps == 9) { /* short rows: the whole plane in one run, then compacted */
            if (wsum * xmax <= 32767) {
                mico_host_dw9n(x, off, wt, span, b, acc);
            } else {
                mico_host_dw9w(x, off, wt, span, b, acc);
            }
            for (oy = 0; oy < p->out_h; oy++) {
                const int32_t *MICO_RESTRICT a = acc + (size_t)oy * (size_t)wq;
                int32_t *MICO_RESTRICT d = res + (size_t)oy * (size_t)p->out_w;
                for (ox = 0; ox < p->out_w; ox++) {
                    d[ox] = a[ox];
                }
            }
        } else {
            for (i = 0; i < span; i++) {
                acc[i] = b;
            }
            for (t = 0; t < taps; t++) {
                const int16_t *MICO_RESTRICT src = x + off[t];
                const int16_t wv = wt[t];
                int32_t *MICO_RESTRICT a = acc;
                for (i = 0; i < span; i++) { /* the product fits int16 exactly */
                    a[i] += (int16_t)(wv * src[i]);
                }
            }
            for (oy = 0; oy < p->out_h; oy++) {
                const int32_t *MICO_RESTRICT a = acc + (size_t)oy * (size_t)wq;
                int32_t *MICO_RESTRICT d = res + (size_t)oy * (size_t)p->out_w;
                for (ox = 0; ox < p->out_w; ox++) {
                    d[ox] = a[ox];
                }
            }
        }
        mico_host_store(&p->out, c, 0, res, npix, out, (size_t)c * (size_t)npix);
    }
    return 1;
}

/* acc[k] = sum over t < taps of w[t * cp + k] s[off[t] + k] for 16 channels k (the products
 * fit int16 exactly: |code| <= 255, |weight| <= 127). */
static MICO_HOST_INLINE void mico_host_dw16(const int16_t *MICO_RESTRICT s,
                                             const int32_t *off,
                                             const int16_t *MICO_RESTRICT w, int32_t cp,
                                             int32_t taps, int32_t *MICO_RESTRICT acc)
{
    int32_t a[16] = {0};
    int32_t t, k;
    MICO_HOST_UNROLL
    for (t = 0; t < taps; t++) {
        const int16_t *MICO_RESTRICT st = s + off[t];
        const int16_t *MICO_RESTRICT wt = w + t * cp;
        for (k = 0; k < 16; k++) {
            a[k] += (int16_t)(wt[k] * st[k]);
        }
    }
    for (k = 0; k < 16; k++) {
        acc[k] = a[k];
    }
}

/* The same with int16 sums into out16, exact while taps |x| |w| <= 32767 (sub-byte codes and
 * weights). */
static MICO_HOST_INLINE void mico_host_dw16s(const int16_t *MICO_RESTRICT s,
                                              const int32_t *off,
                                              const int16_t *MICO_RESTRICT w, int32_t cp,
                                              int32_t taps, int16_t *MICO_RESTRICT out16)
{
    int16_t a[16];
    int32_t t, k;
    memset(a, 0, sizeof a);
    MICO_HOST_UNROLL
    for (t = 0; t < taps; t++) {
        const int16_t *MICO_RESTRICT st = s + off[t];
        const int16_t *MICO_RESTRICT wt = w + t * cp;
        for (k = 0; k < 16; k++) {
            a[k] = (int16_t)(a[k] + wt[k] * st[k]);
        }
    }
    memcpy(out16, a, sizeof a); /* (a copy loop here makes gcc 12 extract every lane) */
}

/* The sums of output pixel `pix` of a depthwise layer over its HWC planes x (wp pixels a
 * row), all channels (padded to 16) into acc. */
static MICO_HOST_INLINE void mico_host_dw_pixel(const MicoConv2d *p, const int16_t *x,
                                                 int32_t wp, const int32_t *off,
                                                 const int16_t *wt, int narrow, int32_t pix,
                                                 int32_t *MICO_RESTRICT acc)
{
    const int32_t n_c = p->in_c, cp = (n_c + 15) & ~15, taps = p->k_h * p->k_w;
    const int32_t oy = pix / p->out_w, ox = pix % p->out_w;
    const int16_t *base =
        x + ((size_t)(oy * p->stride_h) * (size_t)wp + (size_t)(ox * p->stride_w)) * (size_t)n_c;
    int32_t c0, k;
    for (c0 = 0; c0 < cp; c0 += 16) { /* 16 channels in registers over the taps */
        if (narrow) {
            int16_t s16[16];
            if (taps == 9) { /* 3x3: the tap loop unrolled */
                mico_host_dw16s(base + c0, off, wt + c0, cp, 9, s16);
            } else {
                mico_host_dw16s(base + c0, off, wt + c0, cp, taps, s16);
            }
            for (k = 0; k < 16; k++) {
                acc[c0 + k] = s16[k];
            }
        } else if (taps == 9) { /* 3x3: the tap loop unrolled */
            mico_host_dw16(base + c0, off, wt + c0, cp, 9, acc + c0);
        } else {
            mico_host_dw16(base + c0, off, wt + c0, cp, taps, acc + c0);
        }
    }
}

/* mico_host_dw_hwc's pixels for a layer of few pixels and byte outputs whose channels all
 * take mico_host_rq16 (table rqt): each pixel's sums are requantized over its channels at
 * once and stored straight into the CHW output (the per-channel runs of mico_host_store are
 * then too short to pay for their set-up). */
MICO_HOST_CLONES static void mico_host_dw_hwc_rq(const MicoConv2d *p, const int16_t *x,
                                                 int32_t wp, const int32_t *off,
                                                 const int16_t *wt, int narrow,
                                                 const int32_t *rqt, void *out)
{
    const int32_t npix = p->out_h * p->out_w;
    int32_t *acc = mico_host_acc + MICO_HOST_ACC;
    int32_t j;
    for (j = 0; j < npix; j++) {
        mico_host_dw_pixel(p, x, wp, off, wt, narrow, j, acc);
        mico_host_rq_bytes(rqt, p->in_c, acc, p->in_c, &p->out, (uint8_t *)out + j,
                           (size_t)npix, mico_host_staged ? mico_host_stage + j : 0);
    }
}

/* Depthwise convolution over the HWC input (for narrow planes, where the rows above are too
 * short for vectors): per output pixel, one vectorised loop over its channels (padded to 16)
 * per tap; blocks of MICO_HOST_PIX pixels wait in a tile [channel][pixel] and are requantized
 * and packed a channel at a time. The whole input is read before any output is
 * stored. Returns 0 when the input or the weights do not fit the scratch arrays. */
MICO_HOST_CLONES static int mico_host_dw_hwc(const MicoConv2d *p, const void *in, void *out)
{
    const int32_t n_c = p->in_c, cp = (n_c + 15) & ~15, taps = p->k_h * p->k_w;
    const int32_t hp = mico_host_extent(p->in_h, p->pad_h, p->out_h, p->stride_h, p->dil_h, p->k_h);
    const int32_t wp = mico_host_extent(p->in_w, p->pad_w, p->out_w, p->stride_w, p->dil_w, p->k_w);
    const int32_t npix = p->out_h * p->out_w;
    const size_t size = (size_t)hp * (size_t)wp * (size_t)n_c;
    const int32_t mw = p->w_bits == 1 ? 1 : 1 << (p->w_bits - 1);
    /* int16 sums when no sum of the taps' products can leave int16 */
    const int narrow = p->in_fmt.bits <= 8 &&
                       (int64_t)taps * mico_host_max_code(p->in_fmt) * mw <= 32767;
    int16_t *x = mico_host_x, *wt, *cached;
    int32_t *tile = mico_host_acc, *acc = mico_host_acc + MICO_HOST_ACC;
    const int32_t *rqt;
    int fill;
    int32_t off[64];
    int16_t tmp[64];
    int32_t c, t, i, pix0, j;
    if (p->in_fmt.bits > 8 || taps > 64 || size + (size_t)cp > MICO_HOST_X ||
        (size_t)(taps + 1) * (size_t)cp > MICO_HOST_W || cp * MICO_HOST_PIX > MICO_HOST_ACC) {
        return 0;
    }
    mico_host_planes(p, in, 0, n_c, n_c, hp, wp, x);
    for (i = 0; i < cp; i++) {
        x[size + (size_t)i] = 0; /* read (times zero weights) past the last pixel */
    }
    for (t = 0; t < taps; t++) {
        off[t] = ((t / p->k_w) * p->dil_h * wp + (t % p->k_w) * p->dil_w) * n_c;
    }
    /* few pixels: requantized a pixel at a time over the channels (with many pixels, the
     * per-channel runs of mico_host_store cost less than the strided byte stores) */
    rqt = npix <= MICO_HOST_DW_RQ_PIX ? mico_host_rq_table(&p->out, p->bias, n_c) : 0;
    cached = mico_host_weights(p->weight, mico_host_wbytes((size_t)n_c * (size_t)taps, p->w_bits),
                               2, taps * cp, &fill);
    wt = cached ? cached : mico_host_w;
    for (c = 0; c < cp && (fill || !cached); c++) { /* wt[t * cp + c]: tap t of channel c */
        if (c < n_c) {
            mico_host_unpack_w(p->weight, (size_t)c * (size_t)taps, taps, p->w_bits, tmp);
        }
        for (t = 0; t < taps; t++) {
            wt[t * cp + c] = c < n_c ? tmp[t] : 0; /* zero past n_c */
        }
    }
    if (rqt) {
        mico_host_dw_hwc_rq(p, x, wp, off, wt, narrow, rqt, out);
        return 1;
    }
    for (pix0 = 0; pix0 < npix; pix0 += MICO_HOST_PIX) {
        const int32_t np = npix - pix0 < MICO_HOST_PIX ? npix - pix0 : MICO_HOST_PIX;
        for (j = 0; j < np; j++) {
            mico_host_dw_pixel(p, x, wp, off, wt, narrow, pix0 + j, acc);
            for (c = 0; c < n_c; c++) {
                tile[c * MICO_HOST_PIX + j] = acc[c];
            }
        }
        for (c = 0; c < n_c; c++) {
            mico_host_store(&p->out, c, p->bias[c], tile + c * MICO_HOST_PIX, np, out,
                            (size_t)c * (size_t)npix + (size_t)pix0);
        }
    }
    return 1;
}

/* Pointwise micro-kernel of int16 sums: s[c * 16 + j] = sum over k < kn of w[4 k + c]
 * x[k xs + j], for 4 output channels (c) and 16 pixels (j) in vector lanes; the input channel
 * k is the reduction loop, so no horizontal sums; int16 products and sums, exact while
 * kn |x| |w| <= 32767 (the caller chunks the input channels so). */
static MICO_HOST_INLINE void mico_host_pw_k16(const int16_t *MICO_RESTRICT x, size_t xs,
                                               const int16_t *MICO_RESTRICT w, int32_t kn,
                                               int16_t *MICO_RESTRICT s)
{
    int16_t a[4][16];
    int32_t k, j;
    memset(a, 0, sizeof a);
    for (k = 0; k < kn; k++) {
        const int16_t *MICO_RESTRICT xr = x + (size_t)k * xs;
        const int32_t w0 = w[4 * k], w1 = w[4 * k + 1], w2 = w[4 * k + 2], w3 = w[4 * k + 3];
        for (j = 0; j < 16; j++) {
            const int32_t v = xr[j];
            a[0][j] = (int16_t)(a[0][j] + w0 * v);
            a[1][j] = (int16_t)(a[1][j] + w1 * v);
            a[2][j] = (int16_t)(a[2][j] + w2 * v);
            a[3][j] = (int16_t)(a[3][j] + w3 * v);
        }
    }
    memcpy(s, a, sizeof a); /* (a copy loop here makes gcc 12 extract every lane) */
}

/* a[j] (+)= sum over k < K of w[4 k] x[k xs + j] for j < n, K = 8, 4, 2 or 1: one output
 * channel's row over K input rows at a time, the sums in registers (a loop the compiler
 * vectorises over j; a 4-channel x 16-pixel tile of int32 accumulators went through memory
 * on every input row). */
#define MICO_HOST_PW_ROW(NAME, TERMS)                                                        \
    static MICO_HOST_INLINE void NAME(const int32_t *MICO_RESTRICT x, size_t xs,            \
                                      const int32_t *w, int add, int32_t n,                  \
                                      int32_t *MICO_RESTRICT a)                              \
    {                                                                                        \
        int32_t j;                                                                           \
        if (add) {                                                                           \
            for (j = 0; j < n; j++) {                                                        \
                a[j] += TERMS;                                                               \
            }                                                                                \
            return;                                                                          \
        }                                                                                    \
        for (j = 0; j < n; j++) {                                                            \
            a[j] = TERMS;                                                                    \
        }                                                                                    \
    }
#define MICO_HOST_T(K) w[4 * (K)] * x[(K) * xs + (size_t)j]
MICO_HOST_PW_ROW(mico_host_pw_row1, MICO_HOST_T(0))
MICO_HOST_PW_ROW(mico_host_pw_row2, MICO_HOST_T(0) + MICO_HOST_T(1))
MICO_HOST_PW_ROW(mico_host_pw_row4,
                 MICO_HOST_T(0) + MICO_HOST_T(1) + MICO_HOST_T(2) + MICO_HOST_T(3))
MICO_HOST_PW_ROW(mico_host_pw_row8, MICO_HOST_T(0) + MICO_HOST_T(1) + MICO_HOST_T(2) +
                                        MICO_HOST_T(3) + MICO_HOST_T(4) + MICO_HOST_T(5) +
                                        MICO_HOST_T(6) + MICO_HOST_T(7))
#undef MICO_HOST_T
#undef MICO_HOST_PW_ROW

/* Whether a pointwise layer takes mico_host_pw rather than the GEMM (cost per output in
 * hundredths of an instruction, measured with callgrind: the GEMM pays a horizontal sum per
 * output, mico_host_pw the pixels padded to 16), and in *chunk the input channels its int16
 * sums take at a time (0: int32 sums). A 1x1 layer whose codes and weights allow int16 sums
 * still takes int32 ones when they cost less (few input channels: the int16 micro-kernel's
 * fixed cost per 16 pixels, zeroing, copying out and widening its sums, outweighs its
 * cheaper products; MobileNetV2's 8- and 16-channel expansions at W4A4). */
static int mico_host_pw_takes(const MicoConv2d *p, int32_t *chunk)
{
    const int32_t npix = p->out_h * p->out_w, npixp = (npix + 15) & ~15;
    const int32_t mw = p->w_bits == 1 ? 1 : 1 << (p->w_bits - 1);
    const int32_t bound = mico_host_max_code(p->in_fmt) * mw;
    /* int32 sums (mico_host_pw_row8), refitted on this round's kernels: a pass over 8 input
     * rows per output channel, a fixed cost per channel */
    const int64_t pw32 = 45 * (int64_t)p->in_c * npixp / npix + 300 +
                         100 * (200 + 5 * (int64_t)p->in_c) / npix;
    const int64_t gemm32 = 1600 + 38 * (int64_t)mico_host_kpad(p->in_c);
    int64_t pw, gemm;
    *chunk = bound > 0 ? 32767 / bound : p->in_c;
    *chunk = *chunk >= 8 ? *chunk : 0; /* shorter chunks cost more in widening than they save */
    pw = ((int64_t)p->in_c * 25 + 600) * npixp / npix + 300;
    if (*chunk && p->k_h * p->k_w == 1 && pw32 < pw) {
        *chunk = 0; /* then also pw32 < gemm32: the GEMM costs more than int16 sums */
    }
    if (!*chunk) {
        return pw32 < gemm32;
    }
    gemm = 1600 + 25 * (int64_t)mico_host_kpad(p->in_c);
    return pw < gemm;
}

/* Pointwise convolution (1x1, stride 1, no padding, one group) over the CHW input, pixels in
 * vector lanes: the input planes are unpacked once (rows of npix codes padded with zeros to
 * a multiple of 16); int16 sums: every 4 output channels x 16 pixels run a micro-kernel over
 * the input channels; int32 sums: each output channel's row sums 8 input rows a pass
 * (mico_host_pw_row8, then 4, 2, 1); each output channel's sums are requantized and packed
 * in one run. Weights are laid out once as [channel / 4][input channel][channel % 4]
 * (int32, or int16 for the int16 sums). Returns 0 when the planes, sums or weights do not
 * fit. */
MICO_HOST_CLONES static int mico_host_pw(const MicoConv2d *p, const void *in, void *out,
                                         int32_t chunk)
{
    const int32_t taps = p->k_h * p->k_w, kn = p->in_c * taps, n_out = p->out_c;
    const int32_t n4 = (n_out + 3) & ~3;
    const int32_t npix = p->out_h * p->out_w, npixp = (npix + 15) & ~15;
    const size_t all = (size_t)kn * (size_t)npix, rows = (size_t)kn * (size_t)npixp;
    const size_t wsize = (size_t)n4 * (size_t)kn * (chunk ? 1u : 2u);
    const size_t plane = (size_t)p->in_h * (size_t)p->in_w;
    /* 1x1, stride 1, no padding: the input planes are the rows; otherwise rows of taps */
    const int direct = taps == 1 && p->stride_h == 1 && p->stride_w == 1 && p->pad_h == 0 &&
                       p->pad_w == 0 && p->out_h == p->in_h && p->out_w == p->in_w;
    int32_t *acc = mico_host_acc;
    int16_t *x16 = mico_host_x, *w16;
    int32_t *w32 = 0;
    int16_t s[64];
    int32_t o, c, k, j, p0, k0;
    int fill;
    if (rows + (direct ? all : 0) > MICO_HOST_X || rows > MICO_HOST_PWX ||
        (!direct && plane > MICO_HOST_PATCH) || p->groups != 1 ||
        (size_t)4 * (size_t)npixp > 2 * MICO_HOST_ACC || wsize > (size_t)INT32_MAX) {
        return 0;
    }
    w16 = mico_host_weights(p->weight, mico_host_wbytes((size_t)n_out * (size_t)kn, p->w_bits),
                            chunk ? 4 : 5, (int32_t)wsize, &fill);
    if (!w16) {
        return 0;
    }
    if (!chunk) {
        w32 = mico_host_cache_u.w + (w16 - mico_host_cache) / 2;
    }
    for (o = 0; fill && o < n4; o++) { /* weight (o, k) at [o / 4][k][o % 4] */
        int16_t *row = mico_host_patch;
        if (o < n_out) {
            mico_host_unpack_w(p->weight, (size_t)o * (size_t)kn, kn, p->w_bits, row);
        }
        for (k = 0; k < kn; k++) {
            const size_t at = ((size_t)(o / 4) * (size_t)kn + (size_t)k) * 4u + (size_t)(o % 4);
            const int16_t v = o < n_out ? row[k] : 0;
            if (chunk) {
                w16[at] = v;
            } else {
                w32[at] = v;
            }
        }
    }
    /* the codes, then rows of npixp (zeros past npix): int16 in place, or widened to int32 */
    if (!direct) { /* row (c, ky, kx): input (c, oy sh - ph + ky dh, ox sw - pw + kx dw) */
        /* with a column stride, each plane is first split by column phase (column q of row y
         * at ph[(q % sw) * pblock + y * wq + q / sw]), so that every row of taps is a
         * contiguous copy (a strided gather cost several instructions per code) */
        const int32_t sw = p->stride_w, wq = (p->in_w + sw - 1) / sw;
        const size_t pblock = (size_t)p->in_h * (size_t)wq;
        const int split = sw > 1 && (size_t)sw * pblock <= MICO_HOST_W;
        int16_t *ph = mico_host_w;
        for (c = 0; c < p->in_c; c++) {
            const int16_t *codes = mico_host_patch;
            int32_t t, y, q;
            mico_host_unpack(in, (size_t)c * plane, (int32_t)plane, p->in_fmt, mico_host_patch);
            for (y = 0; split && y < p->in_h; y++) {
                const int16_t *MICO_RESTRICT src = codes + (size_t)y * (size_t)p->in_w;
                int16_t *MICO_RESTRICT d0 = ph + (size_t)y * (size_t)wq;
                int16_t *MICO_RESTRICT d1 = d0 + pblock;
                int32_t f;
                if (sw == 2) { /* both phases in one loop (vectorised: a de-interleave) */
                    for (q = 0; q < p->in_w / 2; q++) {
                        d0[q] = src[2 * q];
                        d1[q] = src[2 * q + 1];
                    }
                    if (p->in_w & 1) {
                        d0[q] = src[2 * q];
                    }
                    continue;
                }
                for (f = 0; f < sw; f++) {
                    int16_t *MICO_RESTRICT dst = d0 + (size_t)f * pblock;
                    const int32_t n_f = (p->in_w - f + sw - 1) / sw;
                    for (q = 0; q < n_f; q++) {
                        dst[q] = src[q * sw + f];
                    }
                }
            }
            for (t = 0; t < taps; t++) {
                const int32_t ky = t / p->k_w, kx = t % p->k_w, r = c * taps + t;
                const int32_t dx = kx * p->dil_w - p->pad_w;
                /* the phase of the column and its offset in the phase's rows */
                const int32_t f = ((dx % sw) + sw) % sw, e = (dx - f) / sw;
                /* the columns inside the input: ox in [lo, hi) */
                int32_t lo = dx >= 0 ? 0 : (-dx + sw - 1) / sw;
                int32_t hi = p->in_w - dx <= 0 ? 0 : (p->in_w - dx + sw - 1) / sw;
                int32_t oy;
                hi = hi < p->out_w ? hi : p->out_w;
                lo = lo < hi ? lo : hi;
                for (oy = 0; split && oy < p->out_h; oy++) {
                    const int32_t iy = oy * p->stride_h - p->pad_h + ky * p->dil_h;
                    const size_t at = (size_t)r * (size_t)npixp + (size_t)oy * (size_t)p->out_w;
                    const int inside = iy >= 0 && iy < p->in_h;
                    const int32_t a = inside ? lo : p->out_w, z = inside ? hi : p->out_w;
                    /* the code of column ox is srcp[ox + e] */
                    const int16_t *MICO_RESTRICT srcp =
                        ph + (size_t)f * pblock + (size_t)(inside ? iy : 0) * (size_t)wq;
                    int32_t ox;
                    if (chunk) {
                        int16_t *MICO_RESTRICT dst = x16 + at;
                        for (ox = 0; ox < a; ox++) {
                            dst[ox] = 0;
                        }
                        for (ox = a; ox < z; ox++) {
                            dst[ox] = srcp[ox + e];
                        }
                        for (ox = z; ox < p->out_w; ox++) {
                            dst[ox] = 0;
                        }
                    } else {
                        int32_t *MICO_RESTRICT dst = mico_host_x32 + at;
                        for (ox = 0; ox < a; ox++) {
                            dst[ox] = 0;
                        }
                        for (ox = a; ox < z; ox++) {
                            dst[ox] = srcp[ox + e];
                        }
                        for (ox = z; ox < p->out_w; ox++) {
                            dst[ox] = 0;
                        }
                    }
                }
                for (oy = 0; !split && oy < p->out_h; oy++) {
                    const int32_t iy = oy * p->stride_h - p->pad_h + ky * p->dil_h;
                    const size_t at = (size_t)r * (size_t)npixp + (size_t)oy * (size_t)p->out_w;
                    const int16_t *MICO_RESTRICT src = codes + (size_t)(iy > 0 ? iy : 0) *
                                                                   (size_t)p->in_w;
                    const int inside = iy >= 0 && iy < p->in_h;
                    int32_t ox;
                    if (chunk) {
                        int16_t *MICO_RESTRICT dst = x16 + at;
                        for (ox = 0; ox < p->out_w; ox++) {
                            dst[ox] = 0;
                        }
                        for (ox = lo; inside && ox < hi; ox++) {
                            dst[ox] = src[ox * sw + dx];
                        }
                    } else {
                        int32_t *MICO_RESTRICT dst = mico_host_x32 + at;
                        for (ox = 0; ox < p->out_w; ox++) {
                            dst[ox] = 0;
                        }
                        for (ox = lo; inside && ox < hi; ox++) {
                            dst[ox] = src[ox * sw + dx];
                        }
                    }
                }
                for (j = npix; j < npixp; j++) {
                    if (chunk) {
                        x16[(size_t)r * (size_t)npixp + (size_t)j] = 0;
                    } else {
                        mico_host_x32[(size_t)r * (size_t)npixp + (size_t)j] = 0;
                    }
                }
            }
        }
    } else if (chunk && npixp == npix) {
        mico_host_unpack(in, 0, (int32_t)all, p->in_fmt, x16);
    } else if (chunk && ((size_t)npix * (size_t)p->in_fmt.bits) % 8u == 0) {
        for (k = 0; k < kn; k++) { /* rows start on a byte: each unpacked in place */
            int16_t *MICO_RESTRICT dst = x16 + (size_t)k * (size_t)npixp;
            mico_host_unpack(in, (size_t)k * (size_t)npix, npix, p->in_fmt, dst);
            for (j = npix; j < npixp; j++) {
                dst[j] = 0;
            }
        }
    } else {
        int16_t *codes = mico_host_x + (chunk ? rows : 0);
        mico_host_unpack(in, 0, (int32_t)all, p->in_fmt, codes);
        for (k = 0; k < kn; k++) {
            const int16_t *MICO_RESTRICT src = codes + (size_t)k * (size_t)npix;
            if (chunk) {
                int16_t *MICO_RESTRICT dst = x16 + (size_t)k * (size_t)npixp;
                for (j = 0; j < npix; j++) {
                    dst[j] = src[j];
                }
                for (; j < npixp; j++) {
                    dst[j] = 0;
                }
            } else {
                int32_t *MICO_RESTRICT dst = mico_host_x32 + (size_t)k * (size_t)npixp;
                for (j = 0; j < npix; j++) {
                    dst[j] = src[j];
                }
                for (; j < npixp; j++) {
                    dst[j] = 0;
                }
            }
        }
    }
    for (o = 0; o < n_out; o += 4) {
        const int32_t nb = n_out - o < 4 ? n_out - o : 4;
        for (c = 0; !chunk && c < nb; c++) { /* int32 sums: a channel's row, 8 inputs a pass */
            int32_t *MICO_RESTRICT a = acc + (size_t)c * (size_t)npixp;
            for (k0 = 0; k0 < kn;) {
                const int32_t *xr = mico_host_x32 + (size_t)k0 * (size_t)npixp;
                const int32_t *wr = w32 + (size_t)o * (size_t)kn + (size_t)k0 * 4u + (size_t)c;
                const int32_t left = kn - k0;
                if (left >= 8) {
                    mico_host_pw_row8(xr, (size_t)npixp, wr, k0 > 0, npixp, a);
                    k0 += 8;
                } else if (left >= 4) {
                    mico_host_pw_row4(xr, (size_t)npixp, wr, k0 > 0, npixp, a);
                    k0 += 4;
                } else if (left >= 2) {
                    mico_host_pw_row2(xr, (size_t)npixp, wr, k0 > 0, npixp, a);
                    k0 += 2;
                } else {
                    mico_host_pw_row1(xr, (size_t)npixp, wr, k0 > 0, npixp, a);
                    k0 += 1;
                }
            }
        }
        for (p0 = 0; chunk && p0 < npixp; p0 += 16) {
            for (k0 = 0; k0 < kn; k0 += chunk) {
                const int32_t n = kn - k0 < chunk ? kn - k0 : chunk;
                mico_host_pw_k16(x16 + (size_t)k0 * (size_t)npixp + (size_t)p0, (size_t)npixp,
                                 w16 + ((size_t)o * (size_t)kn + (size_t)k0 * 4u), n, s);
                for (c = 0; c < 4; c++) {
                    int32_t *MICO_RESTRICT a = acc + (size_t)c * (size_t)npixp + (size_t)p0;
                    for (j = 0; j < 16; j++) {
                        a[j] = (k0 ? a[j] : 0) + s[c * 16 + j];
                    }
                }
            }
        }
        for (c = 0; c < nb; c++) {
            mico_host_store(&p->out, o + c, p->bias[o + c], acc + (size_t)c * (size_t)npixp,
                            npix, out, (size_t)(o + c) * (size_t)npix);
        }
    }
    return 1;
}

void mico_qconv2d_host(const MicoConv2d *p, const void *in, void *out)
{
    const size_t total = (size_t)p->out_c * (size_t)p->out_h * (size_t)p->out_w;
    int done;
    mico_host_stage_begin(&p->out, total);
    if (p->groups == p->in_c && p->groups == p->out_c) {
        done = (p->out_w >= MICO_HOST_DW_WIDE && mico_host_dw(p, in, out)) ||
               mico_host_dw_hwc(p, in, out) || mico_host_dw(p, in, out);
    } else {
        int32_t chunk = 0;
        done = 0;
        if (p->groups == 1 && p->k_h == 1 && p->k_w == 1 && p->stride_h == 1 &&
            p->stride_w == 1 && p->pad_h == 0 && p->pad_w == 0 && p->in_fmt.bits <= 8 &&
            p->out_h == p->in_h && p->out_w == p->in_w && mico_host_pw_takes(p, &chunk)) {
            done = mico_host_pw(p, in, out, chunk);
        } else if (p->groups == 1 && p->in_fmt.bits <= 8 &&
                   p->in_c * p->k_h * p->k_w <= MICO_HOST_ROWS_K &&
                   p->out_h * p->out_w >= 256) { /* few taps: rows of taps, pixels in lanes */
            mico_host_pw_takes(p, &chunk);
            done = mico_host_pw(p, in, out, chunk);
        }
        done = done || mico_host_conv(p, in, out);
    }
    if (done) {
        mico_host_stage_end(&p->out, out, total);
        return;
    }
    mico_host_staged = 0;
    mico_qconv2d(p, in, out); /* too large for the scratch arrays: the portable paths */
}

/* Linear layers: each input row unpacked once (zero-padded to kp), 4 output features at a
 * time against it; a row's sums are requantized and packed together. */
MICO_HOST_CLONES static void mico_host_linear(const MicoLinear *p, const void *in, void *out)
{
    const int32_t k_n = p->in_features, n_out = p->out_features, kp = mico_host_kpad(k_n);
    const int32_t n4 = (n_out + 3) / 4 * 4;
    int16_t *x = mico_host_patch, *wb = mico_host_w, *rows = 0;
    int32_t *acc = mico_host_acc;
    int32_t r, o, c, k;
    const int s8 = p->w_bits == 8;
    int fill = 0;
    if (p->in_fmt.bits > 8 || kp > MICO_HOST_PATCH || 4 * kp > MICO_HOST_W ||
        n_out + 4 > MICO_HOST_ACC) {
        mico_qlinear(p, in, out);
        return;
    }
    if (!s8 && (size_t)n4 * (size_t)kp <= (size_t)INT32_MAX) { /* narrower weights: once */
        rows = mico_host_weights(p->weight,
                                 mico_host_wbytes((size_t)n_out * (size_t)k_n, p->w_bits), 3,
                                 n4 * kp, &fill);
    }
    for (o = 0; rows && fill && o < n4; o++) { /* rows past n_out: zero weights */
        int16_t *row = rows + (size_t)o * (size_t)kp;
        k = 0;
        if (o < n_out) {
            mico_host_unpack_w(p->weight, (size_t)o * (size_t)k_n, k_n, p->w_bits, row);
            k = k_n;
        }
        for (; k < kp; k++) {
            row[k] = 0;
        }
    }
    for (r = 0; r < p->rows; r++) {
        mico_host_unpack(in, (size_t)r * (size_t)k_n, k_n, p->in_fmt, x);
        for (k = k_n; k < kp; k++) {
            x[k] = 0;
        }
        for (o = 0; o < n_out; o += 4) {
            const int32_t nb = n_out - o < 4 ? n_out - o : 4;
            int32_t s[8];
            if (rows) {
                mico_host_mk41(rows + (size_t)o * (size_t)kp, x, kp, s);
            } else if (s8 && nb == 4) {
                mico_host_mk41_s8((const int8_t *)(const void *)p->weight + (size_t)o * (size_t)k_n,
                                  (size_t)k_n, x, k_n, s);
            } else {
                for (c = 0; c < 4; c++) {
                    int16_t *row = wb + (size_t)c * (size_t)kp;
                    k = 0;
                    if (c < nb) {
                        mico_host_unpack_w(p->weight, (size_t)(o + c) * (size_t)k_n, k_n,
                                           p->w_bits, row);
                        k = k_n;
                    }
                    for (; k < kp; k++) {
                        row[k] = 0;
                    }
                }
                mico_host_mk41(wb, x, kp, s);
            }
            for (c = 0; c < nb; c++) {
                acc[o + c] = s[c] + p->bias[o + c];
            }
        }
        for (o = 0; o < n_out; o++) {
            const MicoRq q = mico_rq(&p->out, o);
            acc[o] = mico_rq_apply(&q, acc[o]);
        }
        mico_host_pack(out, (size_t)r * (size_t)n_out, acc, n_out, p->out.fmt);
    }
}
/* Elementwise add (residual connections): mico_add's arithmetic, v = a m_a + b m_b in 64-bit
 * integers, rounded half away from zero by 2^shift and clamped, over runs of unpacked codes in
 * a loop the compiler vectorises. */
MICO_HOST_CLONES static void mico_host_add(const MicoAdd *p, const void *a, const void *b,
                                           void *out)
{
    const int binary = p->fmt.bits == 1 && p->fmt.is_signed;
    const int64_t m_a = p->m_a, m_b = p->m_b, lo = p->lo, hi = p->hi;
    const int32_t shift = p->shift;
    const int64_t rnd = (int64_t)1 << (shift - 1);
    int32_t *va = mico_host_acc, *vb = mico_host_acc + MICO_HOST_ACC;
    int16_t *ca = mico_host_x, *cb = mico_host_x + MICO_HOST_ACC;
    const int codes = p->a_fmt.bits <= 8 && p->b_fmt.bits <= 8; /* int16 runs */
    int32_t i0, j;
    if (binary) {
        mico_add(p, a, b, out);
        return;
    }
    for (i0 = 0; i0 < p->n; i0 += MICO_HOST_ACC) {
        const int32_t n = p->n - i0 < MICO_HOST_ACC ? p->n - i0 : MICO_HOST_ACC;
        if (codes) {
            mico_host_unpack(a, (size_t)i0, n, p->a_fmt, ca);
            mico_host_unpack(b, (size_t)i0, n, p->b_fmt, cb);
            for (j = 0; j < n; j++) {
                va[j] = ca[j];
                vb[j] = cb[j];
            }
        } else {
            mico_unpack_i32(a, (size_t)i0, n, p->a_fmt, va);
            mico_unpack_i32(b, (size_t)i0, n, p->b_fmt, vb);
        }
        for (j = 0; j < n; j++) {
            const int64_t v = (int64_t)va[j] * m_a + (int64_t)vb[j] * m_b;
            const int64_t mag = ((v < 0 ? -v : v) + rnd) >> shift;
            const int64_t r = v < 0 ? -mag : mag;
            va[j] = (int32_t)(r < lo ? lo : r > hi ? hi : r);
        }
        mico_host_pack(out, (size_t)i0, va, n, p->fmt);
    }
}
/* The entry points (the versioned functions stay static: one symbol each for the linker). */
void mico_qlinear_host(const MicoLinear *p, const void *in, void *out)
{
    mico_host_linear(p, in, out);
}

void mico_add_host(const MicoAdd *p, const void *a, const void *b, void *out)
{
    mico_host_add(p, a, b, out);
}
#endif /* MICO_HOST_KERNELS */
