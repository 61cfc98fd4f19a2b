/* Input check: mico refuses NaN and Inf inputs (as the Python side does, mico/numerics.py).
 *
 * The test is on the bit pattern (exponent all ones), so it needs no FPU and holds under any
 * floating-point compiler flags. The bits are read through a union (C99 TC3), which compiles
 * to one aligned load on every target (memcpy became four byte loads on rv32imac). */
#include "mico_nn.h"

/* The first NaN or Inf of x[0..n), or n. Host builds (MICO_HOST_KERNELS) first skip whole
 * blocks of MICO_CHECK_BLOCK values tested without an exit inside (the exponent bits of each
 * value, masked, plus one exponent unit reach bit 31 exactly when they are all ones), a loop
 * the compiler vectorises; the value-by-value loop then starts at the first flagged block, so
 * the index is the same. */
#define MICO_CHECK_BLOCK 64

size_t mico_first_nonfinite(const float *x, size_t n)
{
    size_t i = 0;
#ifdef MICO_HOST_KERNELS
    for (; i + MICO_CHECK_BLOCK <= n; i += MICO_CHECK_BLOCK) {
        uint32_t any = 0;
        size_t j;
        for (j = 0; j < MICO_CHECK_BLOCK; j++) {
            union {
                float f;
                uint32_t u;
            } bits;
            bits.f = x[i + j];
            any |= (bits.u & 0x7f800000u) + 0x00800000u;
        }
        if (any & 0x80000000u) {
            break; /* the loop below finds it in this block */
        }
    }
#endif
    for (; i < n; i++) {
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
