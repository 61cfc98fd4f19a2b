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
 * 2-D pooling: for each output row and run of up to MICO_POOL_OUT outputs, the input rows of
 * the windows are unpacked once (only the columns the run needs) and folded into one int32 row
 * (column max or sum), then each output reduces its columns of that row. Stack: about 1 KB. */
#include "mico_nn.h"

#define MICO_POOL_ROW 96 /* input columns of one run */
#define MICO_POOL_OUT 48 /* outputs of one run */

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
        mico_unpack_i32(in, plane + (size_t)iy * (size_t)in_w + (size_t)(ix0 + lead), mid, fmt,
                        rows ? row + lead : col + lead);
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

void mico_maxpool2d(const MicoMaxPool2d *p, const void *in, void *out)
{
    const MicoPoolGeom g = {p->channels, p->in_h,     p->in_w,     p->out_h, p->out_w,
                            p->k_h,      p->k_w,      p->stride_h, p->stride_w,
                            p->pad_h,    p->pad_w,    p->dil_h,    p->dil_w};
    mico_pool2d(&g, 1, 0, p->fmt, NULL, p->fmt, in, out);
}

void mico_avgpool2d(const MicoAvgPool2d *p, const void *in, void *out)
{
    const MicoPoolGeom g = {p->channels, p->in_h,     p->in_w,     p->out_h, p->out_w,
                            p->k_h,      p->k_w,      p->stride_h, p->stride_w,
                            p->pad_h,    p->pad_w,    1,           1};
    mico_pool2d(&g, 0, p->count_include_pad, p->in_fmt, &p->out, p->out.fmt, in, out);
}

/* Sum of n bytes (T: uint8_t or int8_t codes), four per iteration. */
#define MICO_SUM_BYTES(NAME, T)                                                                  \
    static int32_t NAME(const T *x, int32_t n)                                                    \
    {                                                                                             \
        int32_t acc = 0, i;                                                                       \
        for (i = 0; i + 4 <= n; i += 4) {                                                         \
            acc += (int32_t)x[i] + (int32_t)x[i + 1] + (int32_t)x[i + 2] + (int32_t)x[i + 3];     \
        }                                                                                         \
        for (; i < n; i++) {                                                                      \
            acc += x[i];                                                                          \
        }                                                                                         \
        return acc;                                                                               \
    }
MICO_SUM_BYTES(mico_sum_u8, uint8_t)
MICO_SUM_BYTES(mico_sum_s8, int8_t)

void mico_mean(const MicoMean *p, const void *in, void *out)
{
    int32_t buf[MICO_POOL_OUT];
    int32_t o, j, i;
    for (o = 0; o < p->outer; o++) {
        const size_t base = (size_t)o * (size_t)p->count;
        int32_t acc = 0;
        MicoRq rq;
        if (p->in_fmt.bits == 8) { /* bytes are the codes (plus the zero point) */
            acc = p->in_fmt.is_signed
                      ? mico_sum_s8((const int8_t *)in + base, p->count)
                      : mico_sum_u8((const uint8_t *)in + base, p->count) - p->count * p->in_fmt.zero;
            j = p->count; /* nothing left to unpack */
        } else {
            j = 0;
        }
        for (; j < p->count; j += MICO_POOL_OUT) {
            const int32_t n = p->count - j < MICO_POOL_OUT ? p->count - j : MICO_POOL_OUT;
            mico_unpack_i32(in, base + (size_t)j, n, p->in_fmt, buf);
            for (i = 0; i < n; i++) {
                acc += buf[i];
            }
        }
        rq = mico_rq(&p->out, o);
        mico_rq_run(&rq, &acc, 1);
        mico_pack(out, (size_t)o, &acc, 1, p->out.fmt);
    }
}
