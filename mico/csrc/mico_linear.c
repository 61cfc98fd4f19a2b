/* Integer fully-connected layer on packed codes with packed weights (out x in, row-major).
 * The input is `rows` rows of in_features codes; the output rows of out_features. */
#include "mico_nn.h"

void mico_qlinear(const MicoLinear *p, const void *in, void *out)
{
    MicoFmt w_fmt;
    int32_t r, o, i;
    w_fmt.bits = p->w_bits;
    w_fmt.is_signed = 1;
    for (r = 0; r < p->rows; r++) {
        const size_t x_base = (size_t)r * (size_t)p->in_features;
        for (o = 0; o < p->out_features; o++) {
            const size_t w_base = (size_t)o * (size_t)p->in_features;
            int32_t acc = p->bias[o];
            for (i = 0; i < p->in_features; i++) {
                acc += mico_load(in, x_base + (size_t)i, p->in_fmt) *
                       mico_load(p->weight, w_base + (size_t)i, w_fmt);
            }
            mico_store(out, (size_t)r * (size_t)p->out_features + (size_t)o,
                       mico_finish(acc, o, &p->out), p->out.fmt);
        }
    }
}
