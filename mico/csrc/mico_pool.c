/* Pooling on packed codes (or int32): 2-D max pooling (NCHW, batch 1; padding never wins the
 * max), 2-D average pooling and global average pooling, as integer sums followed by one
 * requantization. */
#include "mico_nn.h"

void mico_maxpool2d(const MicoMaxPool2d *p, const void *in, void *out)
{
    int32_t c, oy, ox, ky, kx;
    for (c = 0; c < p->channels; c++) {
        const size_t plane = (size_t)c * (size_t)p->in_h * (size_t)p->in_w;
        for (oy = 0; oy < p->out_h; oy++) {
            for (ox = 0; ox < p->out_w; ox++) {
                int32_t best = INT32_MIN;
                for (ky = 0; ky < p->k_h; ky++) {
                    const int32_t iy = oy * p->stride_h - p->pad_h + ky * p->dil_h;
                    if (iy < 0 || iy >= p->in_h) {
                        continue;
                    }
                    for (kx = 0; kx < p->k_w; kx++) {
                        const int32_t ix = ox * p->stride_w - p->pad_w + kx * p->dil_w;
                        int32_t v;
                        if (ix < 0 || ix >= p->in_w) {
                            continue;
                        }
                        v = mico_load(in, plane + (size_t)iy * (size_t)p->in_w + (size_t)ix,
                                      p->fmt);
                        if (v > best) {
                            best = v;
                        }
                    }
                }
                mico_store(out,
                           ((size_t)c * (size_t)p->out_h + (size_t)oy) * (size_t)p->out_w +
                               (size_t)ox,
                           best, p->fmt);
            }
        }
    }
}

void mico_avgpool2d(const MicoAvgPool2d *p, const void *in, void *out)
{
    int32_t c, oy, ox, ky, kx;
    for (c = 0; c < p->channels; c++) {
        const size_t plane = (size_t)c * (size_t)p->in_h * (size_t)p->in_w;
        for (oy = 0; oy < p->out_h; oy++) {
            for (ox = 0; ox < p->out_w; ox++) {
                int32_t sum = 0, count = 0;
                for (ky = 0; ky < p->k_h; ky++) {
                    const int32_t iy = oy * p->stride_h - p->pad_h + ky;
                    if (iy < 0 || iy >= p->in_h) {
                        continue;
                    }
                    for (kx = 0; kx < p->k_w; kx++) {
                        const int32_t ix = ox * p->stride_w - p->pad_w + kx;
                        if (ix < 0 || ix >= p->in_w) {
                            continue;
                        }
                        sum += mico_load(in, plane + (size_t)iy * (size_t)p->in_w + (size_t)ix,
                                         p->in_fmt);
                        count++;
                    }
                }
                if (p->count_include_pad) {
                    count = p->k_h * p->k_w;
                }
                mico_store(out,
                           ((size_t)c * (size_t)p->out_h + (size_t)oy) * (size_t)p->out_w +
                               (size_t)ox,
                           mico_finish(sum, count - 1, &p->out), p->out.fmt);
            }
        }
    }
}

void mico_mean(const MicoMean *p, const void *in, void *out)
{
    int32_t o, j;
    for (o = 0; o < p->outer; o++) {
        const size_t base = (size_t)o * (size_t)p->count;
        int32_t acc = 0;
        for (j = 0; j < p->count; j++) {
            acc += mico_load(in, base + (size_t)j, p->in_fmt);
        }
        mico_store(out, (size_t)o, mico_finish(acc, o, &p->out), p->out.fmt);
    }
}
