/* Integer 2-D convolution (NCHW, batch 1) on packed codes with packed weights (OIHW).
 * Any kernel, stride, padding (zeros), dilation and groups (depthwise included).
 *
 * Loop order: for each output channel and output row, a tile of up to MICO_CONV_TILE outputs
 * accumulates in int32 on the stack; each weight is decoded once per tile, and the loop over
 * the tile runs only over the outputs whose input tap is inside the image (no bounds test per
 * multiply-accumulate). 8-bit inputs are read as bytes, other widths through mico_load. */
#include "mico_nn.h"

#ifndef MICO_CONV_TILE
#define MICO_CONV_TILE 64 /* outputs of one row accumulated at once (4 bytes each, on the stack) */
#endif

/* First output column whose tap kx lands inside the row, and one past the last. */
static void mico_valid_cols(const MicoConv2d *p, int32_t kx, int32_t *first, int32_t *end)
{
    const int32_t lo = p->pad_w - kx * p->dil_w;            /* ox * stride >= lo */
    const int32_t hi = p->in_w - 1 + p->pad_w - kx * p->dil_w; /* ox * stride <= hi */
    *first = lo > 0 ? (lo + p->stride_w - 1) / p->stride_w : 0;
    *end = hi >= 0 ? hi / p->stride_w + 1 : 0;
}

void mico_qconv2d(const MicoConv2d *p, const void *in, void *out)
{
    const int32_t in_per_group = p->in_c / p->groups;
    const int32_t out_per_group = p->out_c / p->groups;
    const int32_t taps = p->k_h * p->k_w;
    const size_t in_plane = (size_t)p->in_h * (size_t)p->in_w;
    const int in_u8 = p->in_fmt.bits == 8 && !p->in_fmt.is_signed;
    const int in_s8 = p->in_fmt.bits == 8 && p->in_fmt.is_signed;
    int32_t acc[MICO_CONV_TILE];
    MicoFmt w_fmt;
    int32_t oc, oy, ox0, ox, ic, ky, kx;

    w_fmt.bits = p->w_bits;
    w_fmt.is_signed = 1;
    for (oc = 0; oc < p->out_c; oc++) {
        const int32_t ic0 = (oc / out_per_group) * in_per_group;
        const size_t w_base = (size_t)oc * (size_t)in_per_group * (size_t)taps;
        for (oy = 0; oy < p->out_h; oy++) {
            for (ox0 = 0; ox0 < p->out_w; ox0 += MICO_CONV_TILE) {
                const int32_t ox1 =
                    ox0 + MICO_CONV_TILE < p->out_w ? ox0 + MICO_CONV_TILE : p->out_w;
                const size_t out_row = ((size_t)oc * (size_t)p->out_h + (size_t)oy) *
                                       (size_t)p->out_w;
                for (ox = ox0; ox < ox1; ox++) {
                    acc[ox - ox0] = p->bias[oc];
                }
                for (ic = 0; ic < in_per_group; ic++) {
                    const size_t plane = (size_t)(ic0 + ic) * in_plane;
                    for (ky = 0; ky < p->k_h; ky++) {
                        const int32_t iy = oy * p->stride_h - p->pad_h + ky * p->dil_h;
                        if (iy < 0 || iy >= p->in_h) {
                            continue;
                        }
                        for (kx = 0; kx < p->k_w; kx++) {
                            const int32_t w = mico_load(
                                p->weight,
                                w_base + (size_t)(ic * taps + ky * p->k_w + kx), w_fmt);
                            int32_t first, end, *a;
                            size_t xi;
                            if (w == 0) {
                                continue;
                            }
                            mico_valid_cols(p, kx, &first, &end);
                            if (first < ox0) {
                                first = ox0;
                            }
                            if (end > ox1) {
                                end = ox1;
                            }
                            if (first >= end) {
                                continue;
                            }
                            /* input index of output column `first` for this tap */
                            xi = plane + (size_t)iy * (size_t)p->in_w +
                                 (size_t)(first * p->stride_w - p->pad_w + kx * p->dil_w);
                            a = acc + (first - ox0);
                            if (in_u8) {
                                const uint8_t *x = (const uint8_t *)in + xi;
                                for (ox = first; ox < end; ox++, x += p->stride_w) {
                                    *a++ += (int32_t)*x * w;
                                }
                            } else if (in_s8) {
                                const int8_t *x = (const int8_t *)in + xi;
                                for (ox = first; ox < end; ox++, x += p->stride_w) {
                                    *a++ += (int32_t)*x * w;
                                }
                            } else {
                                for (ox = first; ox < end; ox++, xi += (size_t)p->stride_w) {
                                    *a++ += mico_load(in, xi, p->in_fmt) * w;
                                }
                            }
                        }
                    }
                }
                for (ox = ox0; ox < ox1; ox++) {
                    mico_store(out, out_row + (size_t)ox, mico_finish(acc[ox - ox0], oc, &p->out),
                               p->out.fmt);
                }
            }
        }
    }
}
