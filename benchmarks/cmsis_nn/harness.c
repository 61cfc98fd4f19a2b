/*
 * harness.c - one CMSIS-NN int8 layer on rv32imac under qemu-system-riscv32 -icount shift=0.
 *
 * Written for benchmarks/cmsis_nn.py, which generates "case.h" (the layer's geometry, its
 * seeded int8 input, int8 weights, int32 bias, requantization multipliers and shifts, and
 * CASE_KIND) and links this file against CMSIS-NN's portable C sources taken from the user's
 * own CMSIS-NN checkout. Nothing of CMSIS-NN is copied here: only its public API is called.
 *
 * The instret CSR is read right before and right after the kernel call; the same two reads
 * with nothing between them give the cost of the measurement itself, printed apart so that
 * the script subtracts it. Everything the call needs (dimension and parameter structs, the
 * scratch buffer) is set up before the first read. Printed on the console:
 *
 *   empty N      instructions of two back-to-back instret reads
 *   instret N    instructions of the two reads around the kernel call
 *   status S     the kernel's arm_cmsis_nn_status (0: success)
 *   out HEX...   the output bytes, 32 per line, in CMSIS-NN's layout (NHWC)
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "arm_nnfunctions.h"

#include "case.h"

#define KIND_CONV 1     /* arm_convolve_s8 */
#define KIND_CONV_1X1 2 /* arm_convolve_1x1_s8_fast */
#define KIND_DW_3X3 3   /* arm_depthwise_conv_3x3_s8 */
#define KIND_FC 4       /* arm_fully_connected_s8 */

#define SCRATCH_BYTES 65536

static int32_t scratch[SCRATCH_BYTES / sizeof(int32_t)];
static int8_t output[CASE_OUTPUT_SIZE];

/* csrrs rd, instret (0xC02), x0: written with .insn so that no zicsr extension is needed */
static inline unsigned long read_instret(void)
{
    unsigned long value;
    __asm__ volatile(".insn i 0x73, 2, %0, x0, -1022" : "=r"(value) : : "memory");
    return value;
}

int main(void)
{
    cmsis_nn_context ctx;
    cmsis_nn_dims input_dims = {CASE_IN_N, CASE_IN_H, CASE_IN_W, CASE_IN_C};
    cmsis_nn_dims filter_dims = {CASE_FIL_N, CASE_FIL_H, CASE_FIL_W, CASE_FIL_C};
    cmsis_nn_dims bias_dims = {1, 1, 1, CASE_OUT_C};
    cmsis_nn_dims output_dims = {CASE_IN_N, CASE_OUT_H, CASE_OUT_W, CASE_OUT_C};
    int32_t needed = 0;
    unsigned long t0, t1, empty, spent;
    arm_cmsis_nn_status status;
    int32_t i;

#if CASE_KIND == KIND_CONV || CASE_KIND == KIND_CONV_1X1
    cmsis_nn_conv_params params;
    cmsis_nn_per_channel_quant_params quant = {case_multiplier, case_shift};
    params.input_offset = CASE_INPUT_OFFSET;
    params.output_offset = CASE_OUTPUT_OFFSET;
    params.stride.w = params.stride.h = CASE_STRIDE;
    params.padding.w = params.padding.h = CASE_PAD;
    params.dilation.w = params.dilation.h = 1;
    params.activation.min = CASE_ACT_MIN;
    params.activation.max = CASE_ACT_MAX;
#if CASE_KIND == KIND_CONV
    needed = arm_convolve_s8_get_buffer_size(&input_dims, &filter_dims);
#else
    needed = arm_convolve_1x1_s8_fast_get_buffer_size(&input_dims);
#endif
#elif CASE_KIND == KIND_DW_3X3
    cmsis_nn_dw_conv_params params;
    cmsis_nn_per_channel_quant_params quant = {case_multiplier, case_shift};
    params.input_offset = CASE_INPUT_OFFSET;
    params.output_offset = CASE_OUTPUT_OFFSET;
    params.ch_mult = 1;
    params.stride.w = params.stride.h = CASE_STRIDE;
    params.padding.w = params.padding.h = CASE_PAD;
    params.dilation.w = params.dilation.h = 1;
    params.activation.min = CASE_ACT_MIN;
    params.activation.max = CASE_ACT_MAX;
    needed = 0; /* arm_depthwise_conv_3x3_s8 uses no scratch buffer */
#elif CASE_KIND == KIND_FC
    cmsis_nn_fc_params params;
    cmsis_nn_per_tensor_quant_params quant = {case_multiplier[0], case_shift[0]};
    params.input_offset = CASE_INPUT_OFFSET;
    params.filter_offset = 0;
    params.output_offset = CASE_OUTPUT_OFFSET;
    params.activation.min = CASE_ACT_MIN;
    params.activation.max = CASE_ACT_MAX;
    needed = arm_fully_connected_s8_get_buffer_size(&filter_dims);
#else
#error "case.h sets no known CASE_KIND"
#endif

    if (needed < 0 || needed > SCRATCH_BYTES) {
        printf("error: the kernel asks for %ld scratch bytes, the harness has %d\n", (long)needed,
               SCRATCH_BYTES);
        return 1;
    }
    memset(scratch, 0, sizeof scratch);
    ctx.buf = needed > 0 ? (void *)scratch : NULL;
    ctx.size = needed;
#if CASE_KIND == KIND_CONV
    ctx.buf = scratch; /* arm_convolve_s8 refuses a NULL buffer */
#endif

    t0 = read_instret();
    t1 = read_instret();
    empty = t1 - t0;

    t0 = read_instret();
#if CASE_KIND == KIND_CONV
    status = arm_convolve_s8(&ctx, &params, &quant, &input_dims, case_input, &filter_dims,
                             case_filter, &bias_dims, case_bias, NULL, &output_dims, output);
#elif CASE_KIND == KIND_CONV_1X1
    status = arm_convolve_1x1_s8_fast(&ctx, &params, &quant, &input_dims, case_input, &filter_dims,
                                      case_filter, &bias_dims, case_bias, &output_dims, output);
#elif CASE_KIND == KIND_DW_3X3
    status = arm_depthwise_conv_3x3_s8(&ctx, &params, &quant, &input_dims, case_input,
                                       &filter_dims, case_filter, &bias_dims, case_bias,
                                       &output_dims, output);
#else
    status = arm_fully_connected_s8(&ctx, &params, &quant, &input_dims, case_input, &filter_dims,
                                    case_filter, &bias_dims, case_bias, &output_dims, output);
#endif
    t1 = read_instret();
    spent = t1 - t0;

    printf("empty %lu\n", empty);
    printf("instret %lu\n", spent);
    printf("status %d\n", (int)status);
    for (i = 0; i < CASE_OUTPUT_SIZE; i++) {
        printf("%s%02x", i % 32 == 0 ? "out " : "", (unsigned)(uint8_t)output[i]);
        if (i % 32 == 31 || i == CASE_OUTPUT_SIZE - 1) {
            printf("\n");
        }
    }
    return status == ARM_CMSIS_NN_SUCCESS ? 0 : 1;
}
