/* Pooling on packed codes (or int32): 2-D max pooling (NCHW, batch 1; padding never wins the
 * max), 2-D average pooling and global average pooling, as integer sums followed by one
 * requantization.
 *
 * IN-PLACE CONTRACT (the planner relies on it to let these kernels write their output over
 * their own input, displaced):
 *  - mico_maxpool2d / mico_avgpool2d produce outputs channel by channel, and within a channel
 *    output row by output row in increasing order; once any part of output row (c, oy) has
 *    been stored, no input that only output rows before (c, oy) need is read again;
 *  - mico_mean produces outputs in increasing index order, reads every input of output i
 *    before it writes output i, and never reads an input that only an earlier output needed
 *    after writing a later output.
 *
 * Max pooling (targets other than the host kernels): each output takes the largest field of
 * its window read in place (mico_maxpool_fields). Average pooling (and max pooling on the
 * host kernels), 2-D pooling: for each output row and run of up to MICO_POOL_OUT outputs, the input rows of
 * the windows are unpacked once (only the columns the run needs) and folded into one int32 row
 * (column max or sum), then each output reduces its columns of that row. Stack: about 1 KB. */
#include "mico_nn.h"

#define MICO_POOL_ROW 96 /* input columns of one run */
#define MICO_POOL_OUT 48 /* outputs of one run */

#ifdef MICO_HOST_KERNELS
/* Host builds (make TARGET=host): codes are unpacked in loops the compiler vectorises, a byte
 * at a time for byte-aligned runs of 8-, 4-, 2- and 1-bit codes (a field x maps to the code
 * ((x ^ flip) << sh) - off, mico_nn.h's MicoFieldMap); the head and tail of a run inside
 * bytes, and other widths, through mico_unpack. Other targets keep the portable run readers. */
static void mico_pool_unpack16(const void *buf, size_t start, int32_t n, MicoFmt f,
                               int16_t *dst)
{
    const MicoFieldMap m = mico_field_map(f);
    const int32_t flip = (int32_t)m.x, sh = (int32_t)m.sh, off = m.o;
    const int32_t per = f.bits == 8 ? 1 : f.bits == 4 ? 2 : f.bits == 2 ? 4 : 8;
    const uint8_t *src;
    int32_t h, body, i, k;
    if (f.bits > 8 || (f.bits != 8 && f.bits != 4 && f.bits != 2 && f.bits != 1)) {
        mico_unpack(buf, start, n, f, dst);
        return;
    }
    h = (int32_t)(((size_t)per - start % (size_t)per) % (size_t)per);
    h = h < n ? h : n;
    body = (n - h) / per * per;
    mico_unpack(buf, start, h, f, dst);
    src = (const uint8_t *)buf + (start + (size_t)h) * (size_t)f.bits / 8u;
    dst += h;
#define MICO_POOL_BYTES(PER, BITS)                                                            \
    for (i = 0; i < body / (PER); i++) {                                                       \
        const int32_t byte = src[i];                                                           \
        for (k = 0; k < (PER); k++) {                                                          \
            const int32_t field = (byte >> (k * (BITS))) & ((1 << (BITS)) - 1);                \
            dst[i * (PER) + k] = (int16_t)(((field ^ flip) << sh) - off);                      \
        }                                                                                      \
    }
    if (f.bits == 8) {
        MICO_POOL_BYTES(1, 8)
    } else if (f.bits == 4) {
        MICO_POOL_BYTES(2, 4)
    } else if (f.bits == 2) {
        MICO_POOL_BYTES(4, 2)
    } else {
        MICO_POOL_BYTES(8, 1)
    }
#undef MICO_POOL_BYTES
    mico_unpack(buf, start + (size_t)(h + body), n - h - body, f, dst + body);
}

/* The same into int32 (int32 tensors copied). */
static void mico_pool_unpack_i32(const void *buf, size_t start, int32_t n, MicoFmt f,
                                 int32_t *dst)
{
    int16_t t[MICO_POOL_ROW];
    int32_t i, j;
    if (f.bits > 8) {
        mico_unpack_i32(buf, start, n, f, dst);
        return;
    }
    for (i = 0; i < n; i += MICO_POOL_ROW) {
        const int32_t k = n - i < MICO_POOL_ROW ? n - i : MICO_POOL_ROW;
        mico_pool_unpack16(buf, start + (size_t)i, k, f, t);
        for (j = 0; j < k; j++) {
            dst[i + j] = t[j];
        }
    }
}
#else
#define mico_pool_unpack_i32 mico_unpack_i32
#endif

/* col[t] = max (or sum) over the rows iy0 + ky * dil_h (ky < k_h) inside the image of input
 * column ix0 + t (t < span), `fill` outside the image; returns the number of rows folded. */
static MICO_NOINLINE int32_t mico_pool_fold(const void *in, MicoFmt fmt, size_t plane,
                                            int32_t in_h, int32_t in_w, int32_t iy0, int32_t k_h,
                                            int32_t dil_h, int32_t ix0, int32_t span,
                                            int32_t fill, int is_max, int32_t *col)
{
    int32_t row[MICO_POOL_ROW];
    const int32_t lead = ix0 < 0 ? (-ix0 < span ? -ix0 : span) : 0;
    int32_t mid = in_w - (ix0 + lead), ky, t, rows = 0;
    mid = mid < span - lead ? mid : span - lead;
    mid = mid > 0 ? mid : 0;
    for (ky = 0; ky < k_h; ky++) {
        const int32_t iy = iy0 + ky * dil_h;
        if (iy < 0 || iy >= in_h) {
            continue;
        }
        mico_pool_unpack_i32(in, plane + (size_t)iy * (size_t)in_w + (size_t)(ix0 + lead), mid,
                             fmt, rows ? row + lead : col + lead);
        if (rows == 0) {
            for (t = 0; t < lead; t++) {
                col[t] = fill;
            }
            for (t = lead + mid; t < span; t++) {
                col[t] = fill;
            }
        } else if (is_max) {
            for (t = lead; t < lead + mid; t++) {
                col[t] = row[t] > col[t] ? row[t] : col[t];
            }
        } else {
            for (t = lead; t < lead + mid; t++) {
                col[t] += row[t];
            }
        }
        rows++;
    }
    return rows;
}

/* Window geometry shared by max and average pooling. */
typedef struct {
    int32_t channels, in_h, in_w, out_h, out_w;
    int32_t k_h, k_w, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
} MicoPoolGeom;

#ifdef MICO_HOST_KERNELS
#define MICO_POOL_PLANE 16384 /* codes of one channel's input (or output) plane */
#define MICO_POOL_COLS 2048   /* columns a row of windows spans */
static int16_t mico_pool_x[MICO_POOL_PLANE];
static int32_t mico_pool_res[MICO_POOL_PLANE];

/* mico_pool2d on the host: a channel's input plane is unpacked in one run, each output row
 * folds its window rows into one int32 row (padding columns hold `fill`) and reduces the
 * taps over the whole row, and the channel's outputs are packed in one run once all of its
 * inputs were read (the in-place contract above holds: a channel is read whole before any of
 * its outputs is stored). Returns 0 when a plane or a row does not fit. */
static int mico_pool2d_host(const MicoPoolGeom *g, int is_max, int include_pad, MicoFmt in_fmt,
                            const MicoOut *rq_out, MicoFmt out_fmt, const void *in, void *out)
{
    const size_t plane = (size_t)g->in_h * (size_t)g->in_w;
    const size_t oplane = (size_t)g->out_h * (size_t)g->out_w;
    const int32_t span = (g->out_w - 1) * g->stride_w + (g->k_w - 1) * g->dil_w + 1;
    const int32_t fill = is_max ? INT32_MIN : 0; /* padding never wins a max */
    int32_t col[MICO_POOL_COLS];
    int32_t c, oy, ox, ky, kx, t;
    if (in_fmt.bits > 8 || plane > MICO_POOL_PLANE || oplane > MICO_POOL_PLANE ||
        span > MICO_POOL_COLS || span <= g->pad_w || g->pad_w < 0 || g->pad_h < 0) {
        return 0;
    }
    for (c = 0; c < g->channels; c++) {
        mico_pool_unpack16(in, (size_t)c * plane, (int32_t)plane, in_fmt, mico_pool_x);
        for (oy = 0; oy < g->out_h; oy++) {
            const int32_t iy0 = oy * g->stride_h - g->pad_h;
            int32_t *vals = mico_pool_res + (size_t)oy * (size_t)g->out_w;
            int32_t rows_in = 0;
            for (t = 0; t < span; t++) {
                col[t] = fill;
            }
            for (ky = 0; ky < g->k_h; ky++) {
                const int32_t iy = iy0 + ky * g->dil_h;
                /* col[t] is input column t - pad_w */
                const int32_t n = g->in_w < span - g->pad_w ? g->in_w : span - g->pad_w;
                const int16_t *row = mico_pool_x + (size_t)(iy > 0 ? iy : 0) * (size_t)g->in_w;
                int32_t *dst = col + g->pad_w;
                if (iy < 0 || iy >= g->in_h) {
                    continue;
                }
                if (rows_in == 0) {
                    for (t = 0; t < n; t++) {
                        dst[t] = row[t];
                    }
                } else if (is_max) {
                    for (t = 0; t < n; t++) {
                        dst[t] = row[t] > dst[t] ? row[t] : dst[t];
                    }
                } else {
                    for (t = 0; t < n; t++) {
                        dst[t] += row[t];
                    }
                }
                rows_in++;
            }
            for (ox = 0; ox < g->out_w; ox++) {
                vals[ox] = fill;
            }
            for (kx = 0; rows_in && kx < g->k_w; kx++) {
                const int32_t *cx = col + kx * g->dil_w;
                for (ox = 0; ox < g->out_w; ox++) {
                    const int32_t v = cx[ox * g->stride_w];
                    vals[ox] = !is_max ? vals[ox] + v : (v > vals[ox] ? v : vals[ox]);
                }
            }
            for (ox = 0; !is_max && ox < g->out_w; ox++) {
                int32_t count = 0;
                MicoRq rq;
                for (kx = 0; kx < g->k_w; kx++) { /* inputs: rows inside x columns inside */
                    const int32_t ix = ox * g->stride_w - g->pad_w + kx;
                    count += ix >= 0 && ix < g->in_w;
                }
                count = include_pad ? g->k_h * g->k_w : count * rows_in;
                rq = mico_rq(rq_out, count - 1);
                mico_rq_run(&rq, vals + ox, 1);
            }
        }
        mico_pack(out, (size_t)c * oplane, mico_pool_res, (int32_t)oplane, out_fmt);
    }
    return 1;
}
#endif

/* Max (is_max) or average pooling: runs of up to MICO_POOL_OUT outputs of one output row; the
 * run's input columns are folded over the window rows in pieces of at most MICO_POOL_ROW
 * columns (one piece unless a window is wider than that), then each output reduces its taps.
 * Average pooling stores window sums through the multiplier of the window's input count. */
static void mico_pool2d(const MicoPoolGeom *g, int is_max, int include_pad, MicoFmt in_fmt,
                        const MicoOut *rq_out, MicoFmt out_fmt, const void *in, void *out)
{
    const int32_t reach = (g->k_w - 1) * g->dil_w + 1;
    const int32_t fill = is_max ? INT32_MIN : 0; /* padding never wins a max */
    int32_t group = reach <= MICO_POOL_ROW ? (MICO_POOL_ROW - reach) / g->stride_w + 1 : 1;
    int32_t col[MICO_POOL_ROW];
    int32_t vals[MICO_POOL_OUT];
    size_t o = 0;
    int32_t c, oy, ox0, ox, ky, kx, c0;
#ifdef MICO_HOST_KERNELS
    if (mico_pool2d_host(g, is_max, include_pad, in_fmt, rq_out, out_fmt, in, out)) {
        return;
    }
#endif
    group = group < MICO_POOL_OUT ? group : MICO_POOL_OUT;
    for (c = 0; c < g->channels; c++) {
        const size_t plane = (size_t)c * (size_t)g->in_h * (size_t)g->in_w;
        for (oy = 0; oy < g->out_h; oy++) {
            const int32_t iy0 = oy * g->stride_h - g->pad_h;
            int32_t rows_in = 0; /* window rows inside the image */
            for (ky = 0; ky < g->k_h; ky++) {
                rows_in += iy0 + ky * g->dil_h >= 0 && iy0 + ky * g->dil_h < g->in_h;
            }
            for (ox0 = 0; ox0 < g->out_w; ox0 += group) {
                const int32_t n = g->out_w - ox0 < group ? g->out_w - ox0 : group;
                const int32_t ix0 = ox0 * g->stride_w - g->pad_w;
                const int32_t span = (n - 1) * g->stride_w + reach;
                for (ox = 0; ox < n; ox++) {
                    vals[ox] = fill;
                }
                for (c0 = 0; rows_in && c0 < span; c0 += MICO_POOL_ROW) {
                    const int32_t len = span - c0 < MICO_POOL_ROW ? span - c0 : MICO_POOL_ROW;
                    mico_pool_fold(in, in_fmt, plane, g->in_h, g->in_w, iy0, g->k_h, g->dil_h,
                                   ix0 + c0, len, fill, is_max, col);
                    for (ox = 0; ox < n; ox++) {
                        for (kx = 0; kx < g->k_w; kx++) {
                            const int32_t t = ox * g->stride_w + kx * g->dil_w - c0;
                            if (t >= 0 && t < len) {
                                vals[ox] = !is_max ? vals[ox] + col[t]
                                                   : (col[t] > vals[ox] ? col[t] : vals[ox]);
                            }
                        }
                    }
                }
                for (ox = 0; !is_max && ox < n; ox++) {
                    int32_t count = 0;
                    MicoRq rq;
                    for (kx = 0; kx < g->k_w; kx++) { /* inputs: rows inside x columns inside */
                        const int32_t ix = ix0 + ox * g->stride_w + kx;
                        count += ix >= 0 && ix < g->in_w;
                    }
                    count = include_pad ? g->k_h * g->k_w : count * rows_in;
                    rq = mico_rq(rq_out, count - 1);
                    mico_rq_run(&rq, vals + ox, 1);
                }
                mico_pack(out, o, vals, n, out_fmt);
                o += (size_t)n;
            }
        }
    }
}

#ifndef MICO_HOST_KERNELS
/* Max pooling on the fields of codes (1 to 8 bits; those of 3, 5, 6, 7 bits may span two
 * bytes) or int32 values: a field f stands for the code ((f ^ x) << sh) - o (mico_field_map),
 * increasing in f ^ x (int32: v ^ 2^31 as unsigned), so the window's largest code is that of
 * its largest f ^ x, read in place (no unpacking into rows); each output reads its
 * window's taps inside the image (padding never wins). Runs of up to MICO_POOL_OUT outputs of
 * one channel (across its rows) are stored together once their inputs were read, in order
 * (the in-place contract above holds: a store only comes later than it would row by row). */
/* n fields v of the output from element o on: bytes when they span whole ones (fields of 1,
 * 2, 4 or 8 bits), else codes packed; int32 values stored. */
static MICO_NOINLINE void mico_maxpool_store(void *out, size_t o, int32_t *v, int32_t n,
                                             MicoFmt f)
{
    const MicoFieldMap m = mico_field_map(f);
    const uint32_t bits = m.bits;
    int32_t i;
    if (bits > 8u) { /* int32 values (fields v ^ 2^31) */
        for (i = 0; i < n; i++) {
            ((int32_t *)out)[o + (size_t)i] = (int32_t)((uint32_t)v[i] ^ 0x80000000u);
        }
        return;
    }
    if ((8u % bits) == 0u && (o * bits) % 8u == 0u && ((size_t)n * bits) % 8u == 0u) {
        uint8_t *dst = (uint8_t *)out + o * bits / 8u;
        for (i = 0; i < n;) {
            uint32_t byte = 0, at;
            for (at = 0; at < 8u; at += bits) {
                byte |= (uint32_t)v[i++] << at;
            }
            *dst++ = (uint8_t)byte;
        }
        return;
    }
    for (i = 0; i < n; i++) {
        v[i] = (int32_t)(((uint32_t)v[i] ^ m.x) << m.sh) - m.o;
    }
    mico_pack(out, o, v, n, f);
}

/* The field at bit `bit` of q (b bits; int32 values: b 32), in its low bits: of 3, 5, 6 or 7
 * bits it may span two bytes. */
static uint32_t mico_maxpool_field(const uint8_t *q, size_t bit, uint32_t b)
{
    uint32_t f;
    if (b > 8u) {
        return (uint32_t)((const int32_t *)(const void *)q)[bit >> 5];
    }
    f = q[bit >> 3];
    if ((bit & 7u) + b > 8u) {
        f |= (uint32_t)q[(bit >> 3) + 1u] << 8;
    }
    return f >> (bit & 7u);
}

static MICO_NOINLINE void mico_maxpool_fields(const MicoMaxPool2d *p, const void *in, void *out)
{
    const MicoFieldMap m = mico_field_map(p->fmt);
    const uint8_t *q = (const uint8_t *)in;
    const int32_t in_h = p->in_h, in_w = p->in_w, out_w = p->out_w, k_h = p->k_h, k_w = p->k_w;
    const int32_t sw = p->stride_w, pw = p->pad_w, dh = p->dil_h, dw = p->dil_w;
    const uint32_t bits = m.bits, mask = m.mask, step = (uint32_t)dw * bits;
    const uint32_t x = bits > 8u ? 0x80000000u : m.x; /* int32: signed order */
    const int inside = bits <= 8u && 8u % bits == 0u; /* fields inside a byte */
    const size_t row_bits = (size_t)in_w * bits, plane_bits = (size_t)in_h * row_bits;
    int32_t vals[MICO_POOL_OUT];
    size_t o = 0;
    int32_t c, oy, ox0, ox, ky, kx, nv = 0;
    for (c = 0; c < p->channels; c++) {
        for (oy = 0; oy < p->out_h; oy++) {
            const int32_t iy0 = oy * p->stride_h - p->pad_h;
            int32_t ky0 = 0, ky1 = k_h; /* window rows inside the image */
            while (ky0 < k_h && iy0 + ky0 * dh < 0) {
                ky0++;
            }
            while (ky1 > ky0 && iy0 + (ky1 - 1) * dh >= in_h) {
                ky1--;
            }
            for (ox0 = 0; ox0 < out_w;) {
                const int32_t n = out_w - ox0 < MICO_POOL_OUT - nv ? out_w - ox0
                                                                    : MICO_POOL_OUT - nv;
                for (ox = ox0; ox < ox0 + n; ox++) {
                    const int32_t ix0 = ox * sw - pw;
                    int32_t kx0 = 0, kx1 = k_w; /* window columns inside the image */
                    uint32_t best = 0;
                    while (kx0 < k_w && ix0 + kx0 * dw < 0) {
                        kx0++;
                    }
                    while (kx1 > kx0 && ix0 + (kx1 - 1) * dw >= in_w) {
                        kx1--;
                    }
                    for (ky = ky0; ky < ky1; ky++) {
                        size_t bit = (size_t)c * plane_bits + (size_t)(iy0 + ky * dh) * row_bits +
                                     (size_t)(ix0 + kx0 * dw) * bits;
                        for (kx = kx0; inside && kx < kx1; kx++, bit += step) {
                            const uint32_t f = (((uint32_t)q[bit >> 3] >> (bit & 7u)) & mask) ^ x;
                            best = f > best ? f : best;
                        }
                        for (kx = kx0; !inside && kx < kx1; kx++, bit += step) {
                            const uint32_t f = (mico_maxpool_field(q, bit, bits) & mask) ^ x;
                            best = f > best ? f : best;
                        }
                    }
                    vals[nv++] = (int32_t)(best ^ (bits > 8u ? 0u : x)); /* the output's field */
                }
                ox0 += n;
                if (nv == MICO_POOL_OUT) {
                    mico_maxpool_store(out, o, vals, nv, p->fmt);
                    o += (size_t)nv;
                    nv = 0;
                }
            }
        }
        if (nv > 0) { /* the channel's last run */
            mico_maxpool_store(out, o, vals, nv, p->fmt);
            o += (size_t)nv;
            nv = 0;
        }
    }
}
#endif

void mico_maxpool2d(const MicoMaxPool2d *p, const void *in, void *out)
{
    const MicoPoolGeom g = {p->channels, p->in_h,     p->in_w,     p->out_h, p->out_w,
                            p->k_h,      p->k_w,      p->stride_h, p->stride_w,
                            p->pad_h,    p->pad_w,    p->dil_h,    p->dil_w};
#ifndef MICO_HOST_KERNELS
    (void)g;
    mico_maxpool_fields(p, in, out);
#else
    mico_pool2d(&g, 1, 0, p->fmt, NULL, p->fmt, in, out);
#endif
}

void mico_avgpool2d(const MicoAvgPool2d *p, const void *in, void *out)
{
    const MicoPoolGeom g = {p->channels, p->in_h,     p->in_w,     p->out_h, p->out_w,
                            p->k_h,      p->k_w,      p->stride_h, p->stride_w,
                            p->pad_h,    p->pad_w,    1,           1};
    mico_pool2d(&g, 0, p->count_include_pad, p->in_fmt, &p->out, p->out.fmt, in, out);
}


#ifdef MICO_HOST_KERNELS
#define MICO_MEAN_RUN 4096 /* codes unpacked at a time */
/* Host builds: the codes of as many whole outputs as fit MICO_MEAN_RUN are unpacked in one run
 * (vectorised), each output sums its codes, and the run's outputs are requantized and packed
 * together after all of its inputs were read (the in-place contract above still holds). */
void mico_mean(const MicoMean *p, const void *in, void *out)
{
    int16_t codes[MICO_MEAN_RUN];
    int32_t res[MICO_POOL_OUT];
    const int32_t group = p->count <= MICO_MEAN_RUN ? MICO_MEAN_RUN / p->count : 1;
    const int32_t per_run = group < MICO_POOL_OUT ? group : MICO_POOL_OUT;
    int32_t o0, o, j, i;
    if (p->in_fmt.bits > 8) {
        for (o = 0; o < p->outer; o++) { /* int32 inputs */
            const int32_t *v = (const int32_t *)in + (size_t)o * (size_t)p->count;
            int32_t acc = 0;
            MicoRq rq;
            for (i = 0; i < p->count; i++) {
                acc += v[i];
            }
            rq = mico_rq(&p->out, o);
            mico_rq_run(&rq, &acc, 1);
            mico_pack(out, (size_t)o, &acc, 1, p->out.fmt);
        }
        return;
    }
    for (o0 = 0; o0 < p->outer; o0 += per_run) {
        const int32_t g = p->outer - o0 < per_run ? p->outer - o0 : per_run;
        const int whole = p->count <= MICO_MEAN_RUN; /* the run's codes in one unpack */
        if (whole) {
            mico_pool_unpack16(in, (size_t)o0 * (size_t)p->count, g * p->count, p->in_fmt,
                               codes);
        }
        for (o = 0; o < g; o++) {
            int32_t acc = 0;
            for (j = 0; j < p->count; j += MICO_MEAN_RUN) {
                const int32_t n = p->count - j < MICO_MEAN_RUN ? p->count - j : MICO_MEAN_RUN;
                const int16_t *c = codes + (whole ? (size_t)o * (size_t)p->count : 0u);
                if (!whole) {
                    mico_pool_unpack16(in, (size_t)(o0 + o) * (size_t)p->count + (size_t)j, n,
                                       p->in_fmt, codes);
                }
                for (i = 0; i < n; i++) {
                    acc += c[i];
                }
            }
            res[o] = acc;
        }
        if (p->out.n_mult <= 1) { /* one multiplier: the run's outputs in one loop */
            const MicoRq rq = mico_rq(&p->out, o0);
            mico_rq_run_fast(&rq, res, g);
        } else {
            for (o = 0; o < g; o++) {
                const MicoRq rq = mico_rq(&p->out, o0 + o);
                mico_rq_run(&rq, &res[o], 1);
            }
        }
        mico_pack(out, (size_t)o0, res, g, p->out.fmt);
    }
}
#else
/* Codes of 1, 2, 4 or 8 bits are summed from their packed bytes, a 32-bit word at a time
 * (SWAR): a field f maps to its code as ((f ^ x) << sh) - o (mico_field_map), so a run's sum
 * of codes is (S << sh) - n o with S the sum of the fields f ^ x, x repeated in every field of
 * a word. The fields of a word are added within each byte (1-bit fields: at most 8 a byte,
 * 2-bit: at most 12; 4-bit: low and high fields apart, 15), those bytes over up to 30, 20
 * or 17 words, then folded; bytes (8-bit codes) go into 16-bit halves, 128 words at a time.
 * Words are read at aligned addresses: a run's first and last words are masked to its bits
 * (and read byte by byte where they reach past the tensor), the words between read whole.
 * Other widths unpack runs of MICO_POOL_OUT codes. Up to MICO_POOL_OUT outputs are
 * requantized and packed together once their inputs were read (the in-place contract above
 * holds). */
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__) &&                              \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define MICO_MEAN_LE 1 /* a word's bytes in stream order: masks by bit positions hold */
#else
#define MICO_MEAN_LE 0
#endif

/* The sum of the b-bit fields (b 1, 2 or 4) of each byte of w, in that byte; 8: w. */
static inline uint32_t mico_mean_lanes(uint32_t w, uint32_t b)
{
    if (b == 8u) {
        return w;
    }
    if (b == 1u) {
        w -= (w >> 1) & 0x55555555u;
    }
    if (b <= 2u) {
        w = (w & 0x33333333u) + ((w >> 2) & 0x33333333u);
    }
    return (w & 0x0f0f0f0fu) + ((w >> 4) & 0x0f0f0f0fu);
}

/* The sum of the four bytes of a. */
static inline uint32_t mico_mean_fold(uint32_t a)
{
    a = (a & 0x00ff00ffu) + ((a >> 8) & 0x00ff00ffu);
    return (a & 0xffffu) + (a >> 16);
}

/* Word k of the stream counted from the aligned address below in (in: `off` bytes past it,
 * the tensor nbytes long), bytes in stream order from the low one; bytes outside the tensor
 * read as 0. */
static inline uint32_t mico_mean_word(const uint8_t *in, size_t nbytes, size_t off, size_t k)
{
    const size_t at = 4u * k;
    uint32_t w = 0;
    size_t i;
    if (MICO_MEAN_LE && at >= off && at - off + 4u <= nbytes) {
        return *(const uint32_t *)(const void *)(in + (at - off));
    }
    for (i = 0; i < 4u; i++) {
        if (at + i >= off && at + i - off < nbytes) {
            w |= (uint32_t)in[at + i - off] << (8u * i);
        }
    }
    return w;
}

/* S over n whole aligned words w (x in every field), two a step. */
#define MICO_MEAN_BODY(B, K)                                                                     \
    while (n > 0) {                                                                               \
        const size_t c = n < (K) ? n : (K);                                                       \
        const uint32_t *const end = w + (c & ~(size_t)1);                                         \
        uint32_t a = 0;                                                                           \
        for (; w < end; w += 2) {                                                                 \
            a += mico_mean_lanes(w[0] ^ x, B) + mico_mean_lanes(w[1] ^ x, B);                     \
        }                                                                                         \
        if (c & 1u) {                                                                             \
            a += mico_mean_lanes(*w++ ^ x, B);                                                    \
        }                                                                                         \
        total += mico_mean_fold(a);                                                               \
        n -= c;                                                                                   \
    }
static inline uint32_t mico_mean_words(const uint32_t *w, size_t n, uint32_t b,
                                              uint32_t x)
{
    uint32_t total = 0;
    if (b == 4u) { /* low and high fields apart: at most 15 a byte and word */
        while (n > 0) {
            const size_t c = n < 17u ? n : 17u;
            const uint32_t *const end = w + c;
            uint32_t lo = 0, hi = 0;
            for (; w < end; w++) {
                const uint32_t v = *w ^ x;
                lo += v & 0x0f0f0f0fu;
                hi += (v >> 4) & 0x0f0f0f0fu;
            }
            total += mico_mean_fold(lo) + mico_mean_fold(hi);
            n -= c;
        }
    } else if (b == 2u) {
        MICO_MEAN_BODY(2u, 20u)
    } else if (b == 1u) {
        MICO_MEAN_BODY(1u, 30u)
    } else {
        while (n > 0) { /* bytes: 16-bit halves */
            const size_t c = n < 128u ? n : 128u;
            const uint32_t *const end = w + c;
            uint32_t a = 0;
            for (; w < end; w++) {
                const uint32_t v = *w ^ x;
                a += (v & 0x00ff00ffu) + ((v >> 8) & 0x00ff00ffu);
            }
            total += (a & 0xffffu) + (a >> 16);
            n -= c;
        }
    }
    return total;
}

/* S (x: x in every field of a word) of bits [s, e) of the packed tensor at in (nbytes long;
 * s < e, both multiples of b). */
static MICO_NOINLINE uint32_t mico_mean_run(const uint8_t *in, size_t nbytes, size_t s,
                                            size_t e, uint32_t b, uint32_t x)
{
    const size_t off = (size_t)((uintptr_t)in & 3u);
    const size_t s1 = s + 8u * off, e1 = e + 8u * off; /* from the aligned address */
    const size_t ws = s1 >> 5, we = (e1 - 1u) >> 5;
    const uint32_t head = ~0u << (s1 & 31u), tail = ~0u >> (31u - ((e1 - 1u) & 31u));
    uint32_t total;
    if (ws == we) {
        return mico_mean_fold(mico_mean_lanes((mico_mean_word(in, nbytes, off, ws) ^ x) &
                                              head & tail, b));
    }
    total = mico_mean_fold(mico_mean_lanes((mico_mean_word(in, nbytes, off, ws) ^ x) & head, b)) +
            mico_mean_fold(mico_mean_lanes((mico_mean_word(in, nbytes, off, we) ^ x) & tail, b));
    if (we - ws > 1u) {
        total += mico_mean_words((const uint32_t *)(const void *)(in + (4u * (ws + 1u) - off)),
                                 we - ws - 1u, b, x);
    }
    return total;
}

void mico_mean(const MicoMean *p, const void *in, void *out)
{
    int32_t buf[MICO_POOL_OUT], res[MICO_POOL_OUT];
    const MicoFieldMap m = mico_field_map(p->in_fmt);
    const uint32_t b = (uint32_t)p->in_fmt.bits;
    const int swar = b == 1u || b == 2u || b == 4u || b == 8u;
    const uint32_t x = m.x * (b == 1u   ? 0xffffffffu
                              : b == 2u ? 0x55555555u
                              : b == 4u ? 0x11111111u
                                        : 0x01010101u);
    const size_t nbytes = ((size_t)p->outer * (size_t)p->count * b + 7u) >> 3;
    int32_t o0, o, j, i;
    for (o0 = 0; o0 < p->outer; o0 += MICO_POOL_OUT) {
        const int32_t g = p->outer - o0 < MICO_POOL_OUT ? p->outer - o0 : MICO_POOL_OUT;
        for (o = 0; o < g; o++) {
            const size_t base = (size_t)(o0 + o) * (size_t)p->count;
            int32_t acc = 0;
            if (b > 8u) { /* int32 inputs */
                const int32_t *v = (const int32_t *)in + base;
                for (i = 0; i < p->count; i++) {
                    acc += v[i];
                }
            } else if (swar) {
                const uint32_t sum = mico_mean_run((const uint8_t *)in, nbytes, base * b,
                                                   (base + (size_t)p->count) * b, b, x);
                acc = (int32_t)(sum << m.sh) - p->count * m.o;
            } else {
                for (j = 0; j < p->count; j += MICO_POOL_OUT) {
                    const int32_t n = p->count - j < MICO_POOL_OUT ? p->count - j : MICO_POOL_OUT;
                    mico_unpack_i32(in, base + (size_t)j, n, p->in_fmt, buf);
                    for (i = 0; i < n; i++) {
                        acc += buf[i];
                    }
                }
            }
            res[o] = acc;
        }
        if (p->out.n_mult <= 1) { /* one multiplier: the run's outputs in one loop */
            const MicoRq rq = mico_rq(&p->out, o0);
            mico_rq_run_fast(&rq, res, g);
        } else {
            for (o = 0; o < g; o++) {
                const MicoRq rq = mico_rq(&p->out, o0 + o);
                mico_rq_run_fast(&rq, &res[o], 1);
            }
        }
        mico_pack(out, (size_t)o0, res, g, p->out.fmt);
    }
}
#endif /* MICO_HOST_KERNELS */
