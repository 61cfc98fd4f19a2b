/* Products of two code tensors (the static mode's x * gate and attention's q @ k^T): integer
 * products accumulated in int32, then stored as the MicoOut says (rescale, clamp, format). */
#include "mico_nn.h"

void mico_qmul(const void *a, MicoFmt fa, const void *b, MicoFmt fb, void *out,
               const MicoOut *o, int32_t n)
{
    const MicoRq q = mico_rq(o, 0);
    int32_t i;
    for (i = 0; i < n; i++) {
        int32_t acc = mico_load(a, (size_t)i, fa) * mico_load(b, (size_t)i, fb);
        mico_store(out, (size_t)i, mico_rq_apply(&q, acc), o->fmt);
    }
}

void mico_qmatmul(const void *a, MicoFmt fa, const void *b, MicoFmt fb, void *out,
                  const MicoOut *o, int32_t batch, int32_t m, int32_t k, int32_t n)
{
    const MicoRq q = mico_rq(o, 0);
    int32_t s, i, j, t;
    for (s = 0; s < batch; s++) {
        const size_t a0 = (size_t)s * (size_t)m * (size_t)k;
        const size_t b0 = (size_t)s * (size_t)k * (size_t)n;
        const size_t c0 = (size_t)s * (size_t)m * (size_t)n;
        for (i = 0; i < m; i++) {
            for (j = 0; j < n; j++) {
                int32_t acc = 0;
                for (t = 0; t < k; t++) {
                    acc += mico_load(a, a0 + (size_t)i * (size_t)k + (size_t)t, fa)
                         * mico_load(b, b0 + (size_t)t * (size_t)n + (size_t)j, fb);
                }
                mico_store(out, c0 + (size_t)i * (size_t)n + (size_t)j, mico_rq_apply(&q, acc),
                           o->fmt);
            }
        }
    }
}

void mico_qgather(const void *in, MicoFmt fmt, void *out, const int32_t *index, int32_t n,
                  int32_t fill)
{
    int32_t i;
    for (i = 0; i < n; i++) {
        mico_store(out, (size_t)i, index[i] >= 0 ? mico_load(in, (size_t)index[i], fmt) : fill,
                   fmt);
    }
}

/* Adaptive average pooling to sizes that need not divide the input: output (i, j) averages
 * rows [rs[i], re[i]) and columns [cs[j], ce[j]); the window's input count selects its
 * multiplier (o->m[count - 1]), as in mico_qavgpool2d. */
void mico_qadaptavg(const void *in, MicoFmt fi, void *out, const MicoOut *o, int32_t c,
                    int32_t h, int32_t w, int32_t oh, int32_t ow, const int32_t *rs,
                    const int32_t *re, const int32_t *cs, const int32_t *ce)
{
    int32_t ch, i, j, r, k;
    for (ch = 0; ch < c; ch++) {
        const size_t plane = (size_t)ch * (size_t)h * (size_t)w;
        for (i = 0; i < oh; i++) {
            for (j = 0; j < ow; j++) {
                int32_t sum = 0;
                const int32_t count = (re[i] - rs[i]) * (ce[j] - cs[j]);
                for (r = rs[i]; r < re[i]; r++) {
                    for (k = cs[j]; k < ce[j]; k++) {
                        sum += mico_load(in, plane + (size_t)r * (size_t)w + (size_t)k, fi);
                    }
                }
                mico_store(out, ((size_t)ch * (size_t)oh + (size_t)i) * (size_t)ow + (size_t)j,
                           mico_finish(sum, count - 1, o), o->fmt);
            }
        }
    }
}
