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
