/* Integer 2-D convolution (NCHW, batch 1) on codes with packed weights (OIHW). */
#include "mico_nn.h"

void mico_qconv2d(const MicoConv2d *p, const void *in, void *out)
{
    const int32_t in_per_group = p->in_c / p->groups;
    const int32_t out_per_group = p->out_c / p->groups;
    const int32_t w_per_out = in_per_group * p->k_h * p->k_w;
    int32_t oc, oy, ox, ic, ky, kx;

    for (oc = 0; oc < p->out_c; oc++) {
        const int32_t ic0 = (oc / out_per_group) * in_per_group;
        const uint32_t w_base = (uint32_t)oc * (uint32_t)w_per_out;
        for (oy = 0; oy < p->out_h; oy++) {
            for (ox = 0; ox < p->out_w; ox++) {
                int32_t acc = p->bias[oc];
                for (ic = 0; ic < in_per_group; ic++) {
                    const size_t plane = (size_t)(ic0 + ic) * (size_t)p->in_h * (size_t)p->in_w;
                    for (ky = 0; ky < p->k_h; ky++) {
                        const int32_t iy = oy * p->stride_h - p->pad_h + ky * p->dil_h;
                        if (iy < 0 || iy >= p->in_h) {
                            continue;
                        }
                        for (kx = 0; kx < p->k_w; kx++) {
                            const int32_t ix = ox * p->stride_w - p->pad_w + kx * p->dil_w;
                            uint32_t wi;
                            if (ix < 0 || ix >= p->in_w) {
                                continue;
                            }
                            wi = w_base + (uint32_t)((ic * p->k_h + ky) * p->k_w + kx);
                            acc += mico_load_code(in, plane + (size_t)(iy * p->in_w + ix),
                                                  p->in_signed) *
                                   mico_unpack_signed(p->weight, wi, (uint32_t)p->w_bits);
                        }
                    }
                }
                mico_store_result(out, ((size_t)oc * (size_t)p->out_h + (size_t)oy) *
                                           (size_t)p->out_w + (size_t)ox,
                                  acc, p->relu, &p->out);
            }
        }
    }
}
