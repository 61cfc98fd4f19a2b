/* 2-D max pooling (NCHW, batch 1) on codes or int32; padding never wins the max. */
#include "mico_nn.h"

static int32_t mico_load_elem(const void *x, size_t i, int32_t elem)
{
    if (elem == MICO_I32) {
        return ((const int32_t *)x)[i];
    }
    return mico_load_code(x, i, elem == MICO_I8);
}

static void mico_store_elem(void *x, size_t i, int32_t v, int32_t elem)
{
    if (elem == MICO_I32) {
        ((int32_t *)x)[i] = v;
    } else if (elem == MICO_I8) {
        ((int8_t *)x)[i] = (int8_t)v;
    } else {
        ((uint8_t *)x)[i] = (uint8_t)v;
    }
}

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
                        v = mico_load_elem(in, plane + (size_t)(iy * p->in_w + ix), p->elem);
                        if (v > best) {
                            best = v;
                        }
                    }
                }
                mico_store_elem(out, ((size_t)c * (size_t)p->out_h + (size_t)oy) *
                                         (size_t)p->out_w + (size_t)ox,
                                best, p->elem);
            }
        }
    }
}
