/* Input check: mico refuses NaN and Inf inputs (as the Python side does, mico/numerics.py).
 *
 * The test is on the bit pattern (exponent all ones), so it needs no FPU and holds under any
 * floating-point compiler flags. */
#include <string.h>

#include "mico_nn.h"

size_t mico_first_nonfinite(const float *x, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        if ((u & 0x7f800000u) == 0x7f800000u) {
            return i;
        }
    }
    return n;
}
