/* Input quantization: mico.quant.arithmetic.quantize, in float32, to packed codes. */
#include <math.h>

#include "mico_nn.h"

void mico_quantize_f32(const float *x, void *codes, size_t n, float inv_scale, MicoFmt fmt,
                       int32_t qmin, int32_t qmax)
{
    const int binary = fmt.is_signed && fmt.bits == 1;
    size_t i;
    for (i = 0; i < n; i++) {
        float v = x[i] * inv_scale;
        int32_t q;
        if (binary) {
            q = v >= 0.0f ? 1 : -1;
        } else {
            /* round half away from zero without double rounding: see round_half_away */
            float a = fabsf(v);
            float r = floorf(a);
            float lo = (float)qmin;
            float hi = (float)qmax;
            if (a - r >= 0.5f) {
                r += 1.0f;
            }
            if (v < 0.0f) {
                r = -r;
            }
            if (r < lo) {
                r = lo;
            }
            if (r > hi) {
                r = hi;
            }
            q = (int32_t)r;
        }
        mico_store(codes, i, q, fmt);
    }
}
