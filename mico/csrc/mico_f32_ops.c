/*
 * mico_f32_ops.c - elementwise, data movement, reduction and normalization kernels of the
 * dynamic (float32) execution mode. See mico_f32.h for the contract.
 */
#include "mico_f32.h"

#include <math.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* ---------------------------------------------------------------- elementwise */

static float relu6_clip(float v)
{
    /* min(max(v, 0), 6), the ReLU6 inside hardswish / hardsigmoid */
    if (v < 0.0f) {
        v = 0.0f;
    }
    if (v > 6.0f) {
        v = 6.0f;
    }
    return v;
}

void mico_f32_unary(int32_t op, const float *x, float *y, int32_t n, float p0, float p1)
{
    int32_t i;
    switch (op) {
    case MICO_UNARY_RELU:
        for (i = 0; i < n; i++) {
            float v = x[i];
            y[i] = (v > 0.0f || v != v) ? v : 0.0f;
        }
        break;
    case MICO_UNARY_CLAMP:
        for (i = 0; i < n; i++) {
            float v = x[i];
            if (v < p0) {
                v = p0;
            }
            if (v > p1) {
                v = p1;
            }
            y[i] = v;
        }
        break;
    case MICO_UNARY_SIGMOID:
        for (i = 0; i < n; i++) {
            y[i] = 1.0f / (1.0f + expf(-x[i]));
        }
        break;
    case MICO_UNARY_TANH:
        for (i = 0; i < n; i++) {
            y[i] = tanhf(x[i]);
        }
        break;
    case MICO_UNARY_GELU:
        for (i = 0; i < n; i++) {
            float v = x[i];
            y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752440f));
        }
        break;
    case MICO_UNARY_GELU_TANH:
        for (i = 0; i < n; i++) {
            float v = x[i];
            float inner = 0.79788456080286535588f * (v + 0.044715f * v * v * v);
            y[i] = 0.5f * v * (1.0f + tanhf(inner));
        }
        break;
    case MICO_UNARY_SILU:
        for (i = 0; i < n; i++) {
            float v = x[i];
            y[i] = v / (1.0f + expf(-v));
        }
        break;
    case MICO_UNARY_ELU:
        for (i = 0; i < n; i++) {
            float v = x[i];
            y[i] = v > 0.0f ? v : p0 * expm1f(v);
        }
        break;
    case MICO_UNARY_LEAKY_RELU:
        for (i = 0; i < n; i++) {
            float v = x[i];
            y[i] = v > 0.0f ? v : v * p0;
        }
        break;
    case MICO_UNARY_HARDSWISH:
        for (i = 0; i < n; i++) {
            float v = x[i];
            y[i] = v * relu6_clip(v + 3.0f) / 6.0f;
        }
        break;
    case MICO_UNARY_HARDSIGMOID:
        for (i = 0; i < n; i++) {
            y[i] = relu6_clip(x[i] + 3.0f) / 6.0f;
        }
        break;
    case MICO_UNARY_EXP:
        for (i = 0; i < n; i++) {
            y[i] = expf(x[i]);
        }
        break;
    case MICO_UNARY_NEG:
        for (i = 0; i < n; i++) {
            y[i] = -x[i];
        }
        break;
    case MICO_UNARY_ABS:
        for (i = 0; i < n; i++) {
            y[i] = fabsf(x[i]);
        }
        break;
    case MICO_UNARY_SQRT:
        for (i = 0; i < n; i++) {
            y[i] = sqrtf(x[i]);
        }
        break;
    case MICO_UNARY_RSQRT:
        for (i = 0; i < n; i++) {
            y[i] = 1.0f / sqrtf(x[i]);
        }
        break;
    case MICO_UNARY_AFFINE:
        for (i = 0; i < n; i++) {
            float v = x[i] * p0;
            y[i] = v + p1;
        }
        break;
    case MICO_UNARY_POW:
        for (i = 0; i < n; i++) {
            y[i] = p0 == 2.0f ? x[i] * x[i] : powf(x[i], p0);
        }
        break;
    default:
        break;
    }
}

/* torch.maximum / torch.minimum: a NaN in either operand gives NaN. */
static float fmax_nan(float a, float b)
{
    if (a != a || b != b) {
        return a != a ? a : b;
    }
    return a > b ? a : b;
}

static float fmin_nan(float a, float b)
{
    if (a != a || b != b) {
        return a != a ? a : b;
    }
    return a < b ? a : b;
}

/* y[i] = a[i * sa] op b[i * sb] for i < n. */
static void binary_run(int32_t op, const float *a, int32_t sa, const float *b, int32_t sb,
                       float *y, int32_t n)
{
    int32_t i;
    switch (op) {
    case MICO_BINARY_ADD:
        for (i = 0; i < n; i++) {
            y[i] = a[(ptrdiff_t)i * sa] + b[(ptrdiff_t)i * sb];
        }
        break;
    case MICO_BINARY_SUB:
        for (i = 0; i < n; i++) {
            y[i] = a[(ptrdiff_t)i * sa] - b[(ptrdiff_t)i * sb];
        }
        break;
    case MICO_BINARY_MUL:
        for (i = 0; i < n; i++) {
            y[i] = a[(ptrdiff_t)i * sa] * b[(ptrdiff_t)i * sb];
        }
        break;
    case MICO_BINARY_DIV:
        for (i = 0; i < n; i++) {
            y[i] = a[(ptrdiff_t)i * sa] / b[(ptrdiff_t)i * sb];
        }
        break;
    case MICO_BINARY_MAX:
        for (i = 0; i < n; i++) {
            y[i] = fmax_nan(a[(ptrdiff_t)i * sa], b[(ptrdiff_t)i * sb]);
        }
        break;
    case MICO_BINARY_MIN:
        for (i = 0; i < n; i++) {
            y[i] = fmin_nan(a[(ptrdiff_t)i * sa], b[(ptrdiff_t)i * sb]);
        }
        break;
    default:
        break;
    }
}

void mico_f32_binary(int32_t op, const float *a, const float *b, float *y, int32_t n)
{
    binary_run(op, a, 1, b, 1, y, n);
}

void mico_f32_binary_bcast(int32_t op, const float *a, const int32_t *a_strides, const float *b,
                           const int32_t *b_strides, float *y, const int32_t *out_shape,
                           int32_t ndim)
{
    int32_t idx[MICO_MAX_DIMS];
    ptrdiff_t ao = 0, bo = 0;
    int32_t d, inner, last;
    if (ndim <= 0) {
        binary_run(op, a, 0, b, 0, y, 1);
        return;
    }
    if (ndim > MICO_MAX_DIMS) {
        return;
    }
    for (d = 0; d < ndim; d++) {
        if (out_shape[d] <= 0) {
            return;
        }
        idx[d] = 0;
    }
    last = ndim - 1;
    inner = out_shape[last];
    for (;;) {
        binary_run(op, a + ao, a_strides[last], b + bo, b_strides[last], y, inner);
        y += inner;
        /* odometer over the outer dimensions */
        d = last - 1;
        while (d >= 0) {
            idx[d]++;
            ao += a_strides[d];
            bo += b_strides[d];
            if (idx[d] < out_shape[d]) {
                break;
            }
            ao -= (ptrdiff_t)a_strides[d] * out_shape[d];
            bo -= (ptrdiff_t)b_strides[d] * out_shape[d];
            idx[d] = 0;
            d--;
        }
        if (d < 0) {
            return;
        }
    }
}

void mico_f32_channel_affine(const float *x, float *y, int32_t channels, int32_t inner,
                             const float *mul, const float *add)
{
    int32_t c, j;
    for (c = 0; c < channels; c++) {
        const float *xc = x + (ptrdiff_t)c * inner;
        float *yc = y + (ptrdiff_t)c * inner;
        float m = mul ? mul[c] : 1.0f;
        float s = add ? add[c] : 0.0f;
        for (j = 0; j < inner; j++) {
            float v = xc[j] * m;
            yc[j] = v + s;
        }
    }
}

/* ---------------------------------------------------------------- data movement */

void mico_f32_copy_strided(const float *src, int32_t src_offset, const int32_t *src_strides,
                           float *dst, int32_t dst_offset, const int32_t *dst_strides,
                           const int32_t *shape, int32_t ndim)
{
    int32_t idx[MICO_MAX_DIMS];
    ptrdiff_t so = src_offset, dof = dst_offset;
    int32_t d, i, inner, last, ss, ds;
    if (ndim <= 0) {
        dst[dof] = src[so];
        return;
    }
    if (ndim > MICO_MAX_DIMS) {
        return;
    }
    for (d = 0; d < ndim; d++) {
        if (shape[d] <= 0) {
            return;
        }
        idx[d] = 0;
    }
    last = ndim - 1;
    inner = shape[last];
    ss = src_strides[last];
    ds = dst_strides[last];
    for (;;) {
        const float *s = src + so;
        float *t = dst + dof;
        if (ss == 1 && ds == 1) {
            for (i = 0; i < inner; i++) {
                t[i] = s[i];
            }
        } else {
            for (i = 0; i < inner; i++) {
                t[(ptrdiff_t)i * ds] = s[(ptrdiff_t)i * ss];
            }
        }
        d = last - 1;
        while (d >= 0) {
            idx[d]++;
            so += src_strides[d];
            dof += dst_strides[d];
            if (idx[d] < shape[d]) {
                break;
            }
            so -= (ptrdiff_t)src_strides[d] * shape[d];
            dof -= (ptrdiff_t)dst_strides[d] * shape[d];
            idx[d] = 0;
            d--;
        }
        if (d < 0) {
            return;
        }
    }
}

/* ---------------------------------------------------------------- reductions */

void mico_f32_reduce(int32_t op, const float *x, float *y, int32_t outer, int32_t reduce,
                     int32_t inner)
{
    int32_t o, r, i;
    for (o = 0; o < outer; o++) {
        const float *xo = x + (ptrdiff_t)o * reduce * inner;
        float *yo = y + (ptrdiff_t)o * inner;
        for (i = 0; i < inner; i++) {
            const float *xi = xo + i;
            if (op == MICO_REDUCE_MEAN || op == MICO_REDUCE_SUM) {
                double acc = 0.0;
                for (r = 0; r < reduce; r++) {
                    acc += (double)xi[(ptrdiff_t)r * inner];
                }
                if (op == MICO_REDUCE_MEAN) {
                    acc /= (double)reduce;
                }
                yo[i] = (float)acc;
            } else if (op == MICO_REDUCE_MAX || op == MICO_REDUCE_MIN) {
                float best = op == MICO_REDUCE_MAX ? -INFINITY : INFINITY;
                for (r = 0; r < reduce; r++) {
                    float v = xi[(ptrdiff_t)r * inner];
                    best = op == MICO_REDUCE_MAX ? fmax_nan(v, best) : fmin_nan(v, best);
                }
                yo[i] = best;
            }
        }
    }
}

void mico_f32_softmax(const float *x, float *y, int32_t outer, int32_t len, int32_t inner,
                      int32_t log)
{
    int32_t o, r, i;
    for (o = 0; o < outer; o++) {
        for (i = 0; i < inner; i++) {
            const float *xi = x + (ptrdiff_t)o * len * inner + i;
            float *yi = y + (ptrdiff_t)o * len * inner + i;
            float mx = -INFINITY;
            double sum = 0.0;
            for (r = 0; r < len; r++) {
                mx = fmax_nan(xi[(ptrdiff_t)r * inner], mx);
            }
            if (log) {
                float lse;
                for (r = 0; r < len; r++) {
                    sum += (double)expf(xi[(ptrdiff_t)r * inner] - mx);
                }
                lse = logf((float)sum);
                for (r = 0; r < len; r++) {
                    float v = xi[(ptrdiff_t)r * inner] - mx;
                    yi[(ptrdiff_t)r * inner] = v - lse;
                }
            } else {
                float inv;
                for (r = 0; r < len; r++) {
                    float e = expf(xi[(ptrdiff_t)r * inner] - mx);
                    yi[(ptrdiff_t)r * inner] = e;
                    sum += (double)e;
                }
                inv = (float)sum;
                for (r = 0; r < len; r++) {
                    yi[(ptrdiff_t)r * inner] = yi[(ptrdiff_t)r * inner] / inv;
                }
            }
        }
    }
}

void mico_f32_layer_norm(const float *x, float *y, int32_t outer, int32_t n, const float *gamma,
                         const float *beta, float eps)
{
    int32_t o, j;
    for (o = 0; o < outer; o++) {
        const float *xo = x + (ptrdiff_t)o * n;
        float *yo = y + (ptrdiff_t)o * n;
        double mean = 0.0, var = 0.0;
        float m, rstd;
        for (j = 0; j < n; j++) {
            mean += (double)xo[j];
        }
        mean /= (double)n;
        for (j = 0; j < n; j++) {
            double d = (double)xo[j] - mean;
            var += d * d;
        }
        var /= (double)n;
        m = (float)mean;
        rstd = (float)(1.0 / sqrt(var + (double)eps));
        for (j = 0; j < n; j++) {
            float v = (xo[j] - m) * rstd;
            if (gamma) {
                v = v * gamma[j];
            }
            if (beta) {
                v = v + beta[j];
            }
            yo[j] = v;
        }
    }
}

void mico_f32_embedding(const float *ids, const float *table, float *out, int32_t n,
                        int32_t dim)
{
    int32_t t;
    for (t = 0; t < n; t++) {
        memcpy(out + (size_t)t * (size_t)dim, table + (size_t)ids[t] * (size_t)dim,
               sizeof(float) * (size_t)dim);
    }
}

void mico_f32_gather(const float *in, float *out, const int32_t *index, int32_t n, float fill)
{
    int32_t i;
    for (i = 0; i < n; i++) {
        out[i] = index[i] >= 0 ? in[index[i]] : fill;
    }
}
