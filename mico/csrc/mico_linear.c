/* Integer fully-connected layer on codes with packed weights (out x in, row-major). */
#include "mico_nn.h"

void mico_qlinear(const MicoLinear *p, const void *in, void *out)
{
    int32_t o, i;
    for (o = 0; o < p->out_features; o++) {
        const uint32_t w_base = (uint32_t)o * (uint32_t)p->in_features;
        int32_t acc = p->bias[o];
        for (i = 0; i < p->in_features; i++) {
            acc += mico_load_code(in, (size_t)i, p->in_signed) *
                   mico_unpack_signed(p->weight, w_base + (uint32_t)i, (uint32_t)p->w_bits);
        }
        mico_store_result(out, (size_t)o, acc, p->relu, &p->out);
    }
}
