/* The static (integer-only) mode's LLaMa kernels: embedding lookup into packed codes, integer
 * RMSNorm, rotary position embedding with Q14 tables, and the integer softmax restricted to a
 * prefix of each row (the causal mask). Every step is an integer operation that the Python
 * reference (mico/ir/ops/llama_ops.py) repeats exactly; no FPU is needed past the input, whose
 * token ids arrive as exact float32 integers (checked by mico_first_bad_token). */
#include "mico_nn.h"

void mico_qembedding(const float *ids, const void *table, MicoFmt tf, void *out, MicoFmt of,
                     int32_t n, int32_t dim)
{
    int32_t t, i;
    for (t = 0; t < n; t++) {
        const size_t row = (size_t)(int32_t)ids[t] * (size_t)dim;
        const size_t base = (size_t)t * (size_t)dim;
        for (i = 0; i < dim; i++) {
            mico_store(out, base + (size_t)i, mico_load(table, row + (size_t)i, tf), of);
        }
    }
}

void mico_qrmsnorm(const void *in, MicoFmt in_fmt, void *out, MicoFmt out_fmt, int32_t rows,
                   int32_t n, int32_t pre, int64_t eps_q, int64_t k, const int32_t *g,
                   int32_t shift, int32_t lo, int32_t hi)
{
    const int64_t unit = (int64_t)1 << pre;
    const int binary = out_fmt.bits == 1 && out_fmt.is_signed;
    int32_t r, i;
    for (r = 0; r < rows; r++) {
        const size_t base = (size_t)r * (size_t)n;
        int64_t sum = 0;
        uint64_t dev;
        for (i = 0; i < n; i++) {
            const int64_t x = mico_load(in, base + (size_t)i, in_fmt);
            sum += x * x;
        }
        dev = mico_isqrt(((uint64_t)sum << (2 * pre)) + (uint64_t)eps_q);
        for (i = 0; i < n; i++) {
            const int64_t x = mico_load(in, base + (size_t)i, in_fmt);
            const int64_t y = dev == 0 ? 0 : mico_div_round(x * unit * k, (int64_t)dev);
            int64_t v = mico_round_shift(y * g[i], shift);
            if (binary) { /* binary {-1, +1} codes: the sign, zero counting as +1 */
                v = v >= 0 ? 1 : -1;
            }
            v = v < lo ? lo : (v > hi ? hi : v);
            mico_store(out, base + (size_t)i, (int32_t)v, out_fmt);
        }
    }
}

void mico_qrope(const void *in, MicoFmt in_fmt, void *out, const MicoOut *o, int32_t heads,
                int32_t positions, int32_t half, const int32_t *cos_q, const int32_t *sin_q)
{
    const MicoRq q = mico_rq(o, 0);
    int32_t h, t, i;
    for (h = 0; h < heads; h++) {
        for (t = 0; t < positions; t++) {
            const size_t base = ((size_t)h * (size_t)positions + (size_t)t) * 2u * (size_t)half;
            const int32_t *c = cos_q + (size_t)t * (size_t)half;
            const int32_t *s = sin_q + (size_t)t * (size_t)half;
            for (i = 0; i < half; i++) {
                const size_t j = base + 2u * (size_t)i;
                const int32_t x0 = mico_load(in, j, in_fmt);
                const int32_t x1 = mico_load(in, j + 1u, in_fmt);
                mico_store(out, j, mico_rq_apply(&q, x0 * c[i] - x1 * s[i]), o->fmt);
                mico_store(out, j + 1u, mico_rq_apply(&q, x0 * s[i] + x1 * c[i]), o->fmt);
            }
        }
    }
}

void mico_qsoftmax_prefix(const void *in, MicoFmt in_fmt, void *out, MicoFmt out_fmt,
                          int32_t rows, int32_t n, const int32_t *exp_q15, int32_t table_len,
                          int32_t qmax, const int32_t *limits, int32_t n_limits)
{
    int32_t r, i;
    for (r = 0; r < rows; r++) {
        const size_t base = (size_t)r * (size_t)n;
        const int32_t limit = limits[r % n_limits];
        int32_t top = mico_load(in, base, in_fmt);
        int64_t sum = 0;
        for (i = 1; i < limit; i++) {
            const int32_t v = mico_load(in, base + (size_t)i, in_fmt);
            top = v > top ? v : top;
        }
        for (i = 0; i < limit; i++) {
            const int32_t d = top - mico_load(in, base + (size_t)i, in_fmt);
            sum += exp_q15[d < table_len ? d : table_len - 1];
        }
        for (i = 0; i < n; i++) {
            int64_t q = 0;
            if (i < limit) {
                const int32_t d = top - mico_load(in, base + (size_t)i, in_fmt);
                const int64_t e = exp_q15[d < table_len ? d : table_len - 1];
                q = (2 * e * qmax + sum) / (2 * sum); /* round half up, all non-negative */
            }
            mico_store(out, base + (size_t)i, (int32_t)q, out_fmt);
        }
    }
}
