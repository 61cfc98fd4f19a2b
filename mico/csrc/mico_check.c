/* Input check: mico refuses NaN and Inf inputs (as the Python side does, mico/numerics.py).
 *
 * The test is on the bit pattern (exponent all ones), so it needs no FPU and holds under any
 * floating-point compiler flags. The bits are read through a union (C99 TC3), which compiles
 * to one aligned load on every target (memcpy became four byte loads on rv32imac). */
#include "mico_nn.h"

size_t mico_first_nonfinite(const float *x, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) {
        union {
            float f;
            uint32_t u;
        } bits;
        bits.f = x[i];
        if ((bits.u & 0x7f800000u) == 0x7f800000u) {
            return i;
        }
    }
    return n;
}

size_t mico_first_bad_token(const float *x, size_t n, int32_t vocab)
{
    size_t i;
    for (i = 0; i < n; i++) {
        /* an integer in [0, vocab): the comparisons are false for NaN too */
        if (!(x[i] >= 0.0f && x[i] < (float)vocab) || x[i] != (float)(int32_t)x[i]) {
            return i;
        }
    }
    return n;
}
