/* Integer LayerNorm over the last dimension (the static mode's transformers): with n codes x
 * per row, c = n*x - sum(x) centres them exactly, r = isqrt(sum(c^2) + eps_q) is the row's
 * deviation, y = round(c * K / r) the normalised value in fixed point (K = sqrt(n) * 2^F), and
 * out = round((y * G[j] + B[j]) / 2^shift) applies gamma and beta (G, B: fixed point, per
 * channel) and the output scale. Every step is an integer operation the Python reference
 * repeats exactly; no FPU is needed. */
#include "mico_nn.h"

void mico_qlayernorm(const void *in, MicoFmt in_fmt, void *out, MicoFmt out_fmt, int32_t rows,
                     int32_t n, int64_t eps_q, int64_t k, const int32_t *g, const int64_t *b,
                     int32_t shift, int32_t lo, int32_t hi)
{
    const int binary = out_fmt.bits == 1 && out_fmt.is_signed;
    int32_t r, i;
    for (r = 0; r < rows; r++) {
        const size_t base = (size_t)r * (size_t)n;
        int64_t sum = 0, q = 0;
        uint64_t dev;
        for (i = 0; i < n; i++) {
            sum += mico_load(in, base + (size_t)i, in_fmt);
        }
        for (i = 0; i < n; i++) {
            const int64_t c = (int64_t)n * mico_load(in, base + (size_t)i, in_fmt) - sum;
            q += c * c;
        }
        dev = mico_isqrt((uint64_t)(q + eps_q));
        for (i = 0; i < n; i++) {
            const int64_t c = (int64_t)n * mico_load(in, base + (size_t)i, in_fmt) - sum;
            const int64_t y = dev == 0 ? 0 : mico_div_round(c * k, (int64_t)dev);
            int64_t v = mico_round_shift(y * g[i] + b[i], shift);
            if (binary) { /* binary {-1, +1} codes: the sign, zero counting as +1 */
                v = v >= 0 ? 1 : -1;
            }
            v = v < lo ? lo : (v > hi ? hi : v);
            mico_store(out, base + (size_t)i, (int32_t)v, out_fmt);
        }
    }
}
