/*
 * mico_f32_layers.c - float32 convolution, linear and matmul of the dynamic execution mode.
 * See mico_f32.h for the contract. Outputs must not alias inputs.
 */
#include "mico_f32.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

void mico_f32_conv2d(const MicoConv2dF *p, const float *x, float *y)
{
    const int32_t cig = p->in_c / p->groups, cog = p->out_c / p->groups;
    const int32_t ksize = p->k_h * p->k_w, plane = p->in_h * p->in_w;
    int32_t oc, oh, ow, ic, kh, kw;
    for (oc = 0; oc < p->out_c; oc++) {
        const float *wo = p->weight + (ptrdiff_t)oc * cig * ksize;
        const float *xg = x + (ptrdiff_t)(oc / cog) * cig * plane;
        const float b = p->bias ? p->bias[oc] : 0.0f;
        for (oh = 0; oh < p->out_h; oh++) {
            const int32_t h0 = oh * p->stride_h - p->pad_h;
            int32_t kh0, kh1;
            mico_conv_taps(h0, p->k_h, p->dil_h, p->in_h, &kh0, &kh1);
            for (ow = 0; ow < p->out_w; ow++) {
                const int32_t w0 = ow * p->stride_w - p->pad_w;
                int32_t kw0, kw1;
                float acc = 0.0f;
                mico_conv_taps(w0, p->k_w, p->dil_w, p->in_w, &kw0, &kw1);
                for (ic = 0; ic < cig; ic++) {
                    const float *xc = xg + (ptrdiff_t)ic * plane;
                    const float *wc = wo + (ptrdiff_t)ic * ksize;
                    for (kh = kh0; kh < kh1; kh++) {
                        const float *row = xc + (ptrdiff_t)(h0 + kh * p->dil_h) * p->in_w;
                        const float *wr = wc + kh * p->k_w;
                        for (kw = kw0; kw < kw1; kw++) {
                            float t = row[w0 + kw * p->dil_w] * wr[kw];
                            acc = acc + t;
                        }
                    }
                }
                *y++ = acc + b;
            }
        }
    }
}

void mico_f32_linear(int32_t rows, int32_t in_features, int32_t out_features, const float *w,
                     const float *bias, const float *x, float *y)
{
    int32_t r, o, i;
    for (r = 0; r < rows; r++) {
        const float *xr = x + (ptrdiff_t)r * in_features;
        float *yr = y + (ptrdiff_t)r * out_features;
        for (o = 0; o < out_features; o++) {
            const float *wo = w + (ptrdiff_t)o * in_features;
            float acc = 0.0f;
            for (i = 0; i < in_features; i++) {
                float t = xr[i] * wo[i];
                acc = acc + t;
            }
            yr[o] = bias ? acc + bias[o] : acc;
        }
    }
}

void mico_f32_matmul(const float *a, int32_t a_batch_stride, const float *b,
                     int32_t b_batch_stride, float *y, int32_t batch, int32_t m, int32_t k,
                     int32_t n)
{
    int32_t t, i, p, j;
    for (t = 0; t < batch; t++) {
        const float *at = a + (ptrdiff_t)t * a_batch_stride;
        const float *bt = b + (ptrdiff_t)t * b_batch_stride;
        float *yt = y + (ptrdiff_t)t * m * n;
        for (i = 0; i < m; i++) {
            const float *ar = at + (ptrdiff_t)i * k;
            float *yr = yt + (ptrdiff_t)i * n;
            for (j = 0; j < n; j++) {
                yr[j] = 0.0f;
            }
            /* row i of y accumulates rows of b: each y[i, j] still sums over p in order */
            for (p = 0; p < k; p++) {
                const float av = ar[p];
                const float *br = bt + (ptrdiff_t)p * n;
                for (j = 0; j < n; j++) {
                    float v = av * br[j];
                    yr[j] = yr[j] + v;
                }
            }
        }
    }
}
