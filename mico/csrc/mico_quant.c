/* Input quantization: mico.quant.arithmetic.quantize, in float32. */
#include <math.h>

#include "mico_nn.h"

void mico_quantize_f32(const float *x, void *codes, size_t n, float inv_scale,
                       int32_t is_signed, int32_t binary, int32_t qmin, int32_t qmax)
{
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
        if (is_signed) {
            ((int8_t *)codes)[i] = (int8_t)q;
        } else {
            ((uint8_t *)codes)[i] = (uint8_t)q;
        }
    }
}
