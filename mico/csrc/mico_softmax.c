/* Integer softmax over the last dimension (the static mode's attention): per row, the largest
 * code is found, each code's distance to it looks up exp(d * scale) in Q15 (a table built at
 * compile time), and the output code is round(e * qmax / sum) in integer arithmetic, so the
 * Python reference computes exactly the same codes. */
#include "mico_nn.h"

void mico_qsoftmax(const void *in, MicoFmt in_fmt, void *out, MicoFmt out_fmt, int32_t rows,
                   int32_t n, const int32_t *exp_q15, int32_t table_len, int32_t qmax)
{
    int32_t r, i;
    for (r = 0; r < rows; r++) {
        const size_t base = (size_t)r * (size_t)n;
        int32_t top = mico_load(in, base, in_fmt);
        int64_t sum = 0;
        for (i = 1; i < n; i++) {
            const int32_t v = mico_load(in, base + (size_t)i, in_fmt);
            top = v > top ? v : top;
        }
        for (i = 0; i < n; i++) {
            int32_t d = top - mico_load(in, base + (size_t)i, in_fmt);
            sum += exp_q15[d < table_len ? d : table_len - 1];
        }
        for (i = 0; i < n; i++) {
            int32_t d = top - mico_load(in, base + (size_t)i, in_fmt);
            int64_t e = exp_q15[d < table_len ? d : table_len - 1];
            int64_t q = (2 * e * qmax + sum) / (2 * sum); /* round half up, all non-negative */
            mico_store(out, base + (size_t)i, (int32_t)q, out_fmt);
        }
    }
}
