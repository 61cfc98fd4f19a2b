/*
 * mico_f32_pool.c - float32 pooling of the dynamic execution mode (NCHW, 1-D as H = 1).
 * See mico_f32.h for the contract; the arithmetic follows torch's CPU kernels.
 */
#include "mico_f32.h"

#include <math.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* The taps k < k_n of a window starting at `start` (step `dil`) that land in [0, size):
 * k in [*k0, *k1). */
static void valid_taps(int32_t start, int32_t k_n, int32_t dil, int32_t size, int32_t *k0,
                       int32_t *k1)
{
    int32_t lo = 0, hi = k_n;
    if (start < 0) {
        lo = (-start + dil - 1) / dil; /* first k with start + k*dil >= 0 */
    }
    if (start + (hi - 1) * dil >= size) {
        hi = size - start <= 0 ? 0 : (size - start + dil - 1) / dil; /* k*dil < size - start */
    }
    if (hi < lo) {
        hi = lo;
    }
    *k0 = lo;
    *k1 = hi;
}

void mico_f32_maxpool2d(const MicoPool2dF *p, const float *x, float *y)
{
    int32_t c, oh, ow, kh, kw;
    for (c = 0; c < p->channels; c++) {
        const float *xc = x + (ptrdiff_t)c * p->in_h * p->in_w;
        for (oh = 0; oh < p->out_h; oh++) {
            int32_t h0 = oh * p->stride_h - p->pad_h, kh0, kh1;
            valid_taps(h0, p->k_h, p->dil_h, p->in_h, &kh0, &kh1);
            for (ow = 0; ow < p->out_w; ow++) {
                int32_t w0 = ow * p->stride_w - p->pad_w, kw0, kw1;
                float best = -INFINITY;
                valid_taps(w0, p->k_w, p->dil_w, p->in_w, &kw0, &kw1);
                for (kh = kh0; kh < kh1; kh++) {
                    const float *row = xc + (ptrdiff_t)(h0 + kh * p->dil_h) * p->in_w;
                    for (kw = kw0; kw < kw1; kw++) {
                        float v = row[w0 + kw * p->dil_w];
                        if (v > best || v != v) {
                            best = v;
                        }
                    }
                    if (best != best) {
                        break;
                    }
                }
                *y++ = best;
            }
        }
    }
}

/* How many taps of a window starting at `start` lie before `limit`. */
static int32_t taps_before(int32_t start, int32_t k_n, int32_t dil, int32_t limit)
{
    int32_t n;
    if (start >= limit) {
        return 0;
    }
    n = (limit - start + dil - 1) / dil;
    return n < k_n ? n : k_n;
}

void mico_f32_avgpool2d(const MicoPool2dF *p, const float *x, float *y)
{
    int32_t c, oh, ow, kh, kw;
    for (c = 0; c < p->channels; c++) {
        const float *xc = x + (ptrdiff_t)c * p->in_h * p->in_w;
        for (oh = 0; oh < p->out_h; oh++) {
            int32_t h0 = oh * p->stride_h - p->pad_h, kh0, kh1;
            /* torch: the window counts cells up to the padded border (in + pad) */
            int32_t full_h = taps_before(h0, p->k_h, p->dil_h, p->in_h + p->pad_h);
            valid_taps(h0, p->k_h, p->dil_h, p->in_h, &kh0, &kh1);
            for (ow = 0; ow < p->out_w; ow++) {
                int32_t w0 = ow * p->stride_w - p->pad_w, kw0, kw1, div;
                int32_t full_w = taps_before(w0, p->k_w, p->dil_w, p->in_w + p->pad_w);
                float sum = 0.0f;
                valid_taps(w0, p->k_w, p->dil_w, p->in_w, &kw0, &kw1);
                if (kh1 <= kh0 || kw1 <= kw0) {
                    *y++ = 0.0f; /* no input cell: torch leaves 0 */
                    continue;
                }
                for (kh = kh0; kh < kh1; kh++) {
                    const float *row = xc + (ptrdiff_t)(h0 + kh * p->dil_h) * p->in_w;
                    for (kw = kw0; kw < kw1; kw++) {
                        sum += row[w0 + kw * p->dil_w];
                    }
                }
                if (p->divisor > 0) {
                    div = p->divisor;
                } else if (p->count_include_pad) {
                    div = full_h * full_w;
                } else {
                    div = (kh1 - kh0) * (kw1 - kw0);
                }
                *y++ = sum / (float)div;
            }
        }
    }
}

void mico_f32_adaptive_avgpool2d(int32_t channels, int32_t in_h, int32_t in_w, int32_t out_h,
                                 int32_t out_w, const float *x, float *y)
{
    int32_t c, oh, ow, h, w;
    for (c = 0; c < channels; c++) {
        const float *xc = x + (ptrdiff_t)c * in_h * in_w;
        for (oh = 0; oh < out_h; oh++) {
            int32_t h0 = (int32_t)(((int64_t)oh * in_h) / out_h);
            int32_t h1 = (int32_t)((((int64_t)oh + 1) * in_h + out_h - 1) / out_h);
            for (ow = 0; ow < out_w; ow++) {
                int32_t w0 = (int32_t)(((int64_t)ow * in_w) / out_w);
                int32_t w1 = (int32_t)((((int64_t)ow + 1) * in_w + out_w - 1) / out_w);
                float sum = 0.0f;
                for (h = h0; h < h1; h++) {
                    const float *row = xc + (ptrdiff_t)h * in_w;
                    for (w = w0; w < w1; w++) {
                        sum += row[w];
                    }
                }
                *y++ = sum / (float)((h1 - h0) * (w1 - w0));
            }
        }
    }
}
