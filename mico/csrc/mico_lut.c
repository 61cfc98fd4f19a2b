/* Table entries are the output fields: codes as two's complement bytes (signed), or code +
 * zero point (unsigned, so asymmetric codes fit a byte too). */
/* Elementwise functions of codes by table lookup (the static mode's sigmoid, tanh, GELU, SiLU,
 * hardswish, ...): the compiler evaluates the function once per possible input code and stores
 * the output codes, so the device only indexes a table and the result equals the Python
 * reference by construction. */
#include "mico_nn.h"

void mico_lut(const void *in, void *out, int32_t n, MicoFmt in_fmt, MicoFmt out_fmt,
              const uint8_t *table, int32_t in_min)
{
    int32_t i;
    for (i = 0; i < n; i++) {
        uint8_t raw = table[mico_load(in, (size_t)i, in_fmt) - in_min];
        int32_t v = out_fmt.is_signed ? (int32_t)(int8_t)raw : (int32_t)raw - out_fmt.zero;
        mico_store(out, (size_t)i, v, out_fmt);
    }
}
