/*
 * mico_f32.h - float32 kernels of mico's dynamic execution mode (plain C99, no allocation).
 *
 * In the dynamic mode (the seed framework's behaviour) tensors between layers are float32;
 * each quantized layer quantizes its input at run time (a per-sample scale), accumulates
 * integer products of codes with packed weights in int32, and writes float32:
 *     y = (float)acc * (s_a * s_w[c]) + bias[c]      (float32 operations, in this order)
 * which is exactly what mico.quant's Bit* layers compute in eval mode.
 *
 * Conventions: tensors are contiguous, row-major (NCHW / NCL), batch 1. Sizes are int32_t.
 * Every elementwise kernel may run in place (y == x, or y == a for binary ops).
 * Strided kernels take element strides; a stride of 0 broadcasts; ndim <= MICO_MAX_DIMS.
 * Layers (conv, linear, matmul, pooling) write outputs that must not alias their inputs.
 */
#ifndef MICO_F32_H
#define MICO_F32_H

#include <stddef.h>
#include <stdint.h>

#define MICO_MAX_DIMS 6

/* A float32 tensor as kernels registered through mico.codegen.MiCoOpRegistry receive it
 * (seed 000's handlers call them as fn(&out, &in0, ..., params...)). */
typedef struct {
    float *data;
    int32_t ndim;
    int32_t shape[MICO_MAX_DIMS];
    int32_t numel;
} MicoTensor;

/* ---------------------------------------------------------------- elementwise */
enum {
    MICO_UNARY_RELU = 0,
    MICO_UNARY_CLAMP,        /* min(max(x, p0), p1): hardtanh, relu6 */
    MICO_UNARY_SIGMOID,
    MICO_UNARY_TANH,
    MICO_UNARY_GELU,         /* exact: 0.5 x (1 + erf(x / sqrt 2)) */
    MICO_UNARY_GELU_TANH,    /* the tanh approximation */
    MICO_UNARY_SILU,
    MICO_UNARY_ELU,          /* alpha = p0 */
    MICO_UNARY_LEAKY_RELU,   /* negative slope = p0 */
    MICO_UNARY_HARDSWISH,
    MICO_UNARY_HARDSIGMOID,
    MICO_UNARY_EXP,
    MICO_UNARY_NEG,
    MICO_UNARY_ABS,
    MICO_UNARY_SQRT,
    MICO_UNARY_RSQRT,
    MICO_UNARY_AFFINE,       /* x * p0 + p1 (a scalar mul/add) */
    MICO_UNARY_POW           /* x ** p0 (p0 == 2: x * x exactly) */
};

void mico_f32_unary(int32_t op, const float *x, float *y, int32_t n, float p0, float p1);

/* out[i] = index[i] >= 0 ? in[index[i]] : fill (padding in any mode, as a gather). */
void mico_f32_gather(const float *in, float *out, const int32_t *index, int32_t n, float fill);

/* Embedding lookup: out[t, :] = table[ids[t], :] for n token ids held as exact float32
 * integers (checked against the table's rows before the model runs: mico_first_bad_token). */
void mico_f32_embedding(const float *ids, const float *table, float *out, int32_t n,
                        int32_t dim);

enum {
    MICO_BINARY_ADD = 0,
    MICO_BINARY_SUB,
    MICO_BINARY_MUL,
    MICO_BINARY_DIV,
    MICO_BINARY_MAX,
    MICO_BINARY_MIN
};

/* y[i] = a[i] op b[i], same number of elements, no broadcast (the common fast case). */
void mico_f32_binary(int32_t op, const float *a, const float *b, float *y, int32_t n);

/* y = a op b with broadcasting: out_shape has ndim dims; a_strides / b_strides are the
 * element strides of a and b over out_shape (0 where that operand broadcasts). */
void mico_f32_binary_bcast(int32_t op, const float *a, const int32_t *a_strides, const float *b,
                           const int32_t *b_strides, float *y, const int32_t *out_shape,
                           int32_t ndim);

/* Per-channel affine (inference batch norm, or a folded scale): for c in channels,
 * y[c, j] = x[c, j] * mul[c] + add[c], j < inner. mul or add may be NULL (1 / 0). */
void mico_f32_channel_affine(const float *x, float *y, int32_t channels, int32_t inner,
                             const float *mul, const float *add);

/* ---------------------------------------------------------------- data movement */
/* Copy a strided view: for every index i of `shape` (ndim dims),
 * dst[dst_offset + sum i_k dst_strides[k]] = src[src_offset + sum i_k src_strides[k]].
 * Covers transpose/permute, slice, select, expand, and concat (one call per input). */
void mico_f32_copy_strided(const float *src, int32_t src_offset, const int32_t *src_strides,
                           float *dst, int32_t dst_offset, const int32_t *dst_strides,
                           const int32_t *shape, int32_t ndim);

/* ---------------------------------------------------------------- reductions */
/* x viewed as [outer, reduce, inner]: y[o, i] = mean / sum / max over r of x[o, r, i].
 * Sums run in float64 in index order and round once to float32. */
enum { MICO_REDUCE_MEAN = 0, MICO_REDUCE_SUM, MICO_REDUCE_MAX, MICO_REDUCE_MIN };
void mico_f32_reduce(int32_t op, const float *x, float *y, int32_t outer, int32_t reduce,
                     int32_t inner);

/* Softmax / log-softmax over the middle axis of [outer, len, inner] (max-subtracted). */
void mico_f32_softmax(const float *x, float *y, int32_t outer, int32_t len, int32_t inner,
                      int32_t log);

/* Layer norm over the last `n` elements of each of `outer` rows; gamma/beta may be NULL. */
void mico_f32_layer_norm(const float *x, float *y, int32_t outer, int32_t n, const float *gamma,
                         const float *beta, float eps);

/* ---------------------------------------------------------------- pooling (NCHW, 1-D as H=1) */
typedef struct {
    int32_t channels, in_h, in_w, out_h, out_w;
    int32_t k_h, k_w, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
    int32_t count_include_pad; /* avg: divide by the full window (1) or the valid cells (0) */
    int32_t divisor;           /* avg: divisor_override when > 0 */
} MicoPool2dF;

/* Max pooling; padding cells are -inf (torch semantics). ceil_mode is expressed through
 * out_h / out_w: windows that start inside the input and overrun it are clipped. */
void mico_f32_maxpool2d(const MicoPool2dF *p, const float *x, float *y);
void mico_f32_avgpool2d(const MicoPool2dF *p, const float *x, float *y);
/* Adaptive average pooling, torch's bins: start = floor(i*in/out), end = ceil((i+1)*in/out). */
void mico_f32_adaptive_avgpool2d(int32_t channels, int32_t in_h, int32_t in_w, int32_t out_h,
                                 int32_t out_w, const float *x, float *y);

/* ---------------------------------------------------------------- float layers */
typedef struct {
    int32_t in_c, in_h, in_w, out_c, out_h, out_w;
    int32_t k_h, k_w, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups;
    const float *weight; /* [out_c, in_c/groups, k_h, k_w] */
    const float *bias;   /* [out_c] or NULL */
} MicoConv2dF;
void mico_f32_conv2d(const MicoConv2dF *p, const float *x, float *y);

/* y[r, o] = sum_i x[r, i] w[o, i] + bias[o] for each of `rows` rows (a Linear on sequences). */
void mico_f32_linear(int32_t rows, int32_t in_features, int32_t out_features, const float *w,
                     const float *bias, const float *x, float *y);

/* Batched matmul: y[b] = a[b] (m x k) @ b[b] (k x n); batch strides in elements, 0 broadcasts. */
void mico_f32_matmul(const float *a, int32_t a_batch_stride, const float *b,
                     int32_t b_batch_stride, float *y, int32_t batch, int32_t m, int32_t k,
                     int32_t n);

/* ---------------------------------------------------------------- dynamic quantization */
/* How a quantized layer quantizes its float input at run time (mico.quant.dynamic_scale):
 * scale = max|x| / qmax (signed) or max(x, 0) / qmax (unsigned), or mean|x| (absmean, for
 * binary and ternary activations; summed in float64 in index order, divided by n, rounded to
 * float32); a zero scale, or one whose reciprocal overflows float32, becomes 1. Codes: v = x * (1.0f / scale) in float32, rounded half
 * away from zero, clamped to [qmin, qmax]; binary codes are +1 when v >= 0, else -1. */
typedef struct {
    int32_t bits;      /* code width 1..8 (ternary: 2, signed) */
    int32_t is_signed; /* signed codes are symmetric: [-(2^(b-1)-1), 2^(b-1)-1]; 1-bit: {-1,+1} */
    int32_t absmean;
    int32_t qmin, qmax;
    int32_t asymmetric; /* a zero point per call (mico.quant.dynamic_asymmetric): is_signed 0,
                         * qmin 0, qmax 2^b-1; the codes are stored as fields code + zero */
} MicoDynQuant;

/* Quantize n floats to one code per byte; return the scale used. Signed codes are int8_t;
 * unsigned codes (up to 255) are stored as uint8_t: read `codes` through a uint8_t pointer.
 * A scale beyond float32 (an activation reached Inf) sets mico_dyn_overflow. */
float mico_dyn_quantize(const MicoDynQuant *q, const float *x, int8_t *codes, int32_t n);

/* The same, for asymmetric layers too: *zero receives the zero point (0 when symmetric). With
 * lo = min(min x, 0), hi = max(max x, 0): scale = (hi - lo) / qmax, zero = round(-lo / scale)
 * clamped to [0, qmax] (float32, 1.0f / scale as the reciprocal), codes c = round(x / scale)
 * clamped to [-zero, qmax - zero], stored as the uint8_t field c + zero. */
float mico_dyn_quantize_zero(const MicoDynQuant *q, const float *x, int8_t *codes, int32_t n,
                             int32_t *zero);

/* Set when a run-time scale overflowed float32: the sample is too large for the model. The
 * generated run function clears it first and, when set, returns <NAME>_ERR_OVERFLOW (the
 * Python reference raises InputError on the same sample). */
extern int mico_dyn_overflow;

/* A quantized convolution in the dynamic mode. Weights are signed codes packed LSB-first at
 * w_bits (mico_nn.h's layout); w_scale has out_c entries when w_per_channel, else one. */
typedef struct {
    int32_t in_c, in_h, in_w, out_c, out_h, out_w;
    int32_t k_h, k_w, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups;
    int32_t w_bits, w_per_channel;
    const uint8_t *weight;
    const float *w_scale;
    const float *bias; /* or NULL */
    MicoDynQuant act;
} MicoBitConv2dF;

/* `codes` is scratch of in_c*in_h*in_w bytes. */
void mico_bit_conv2d_f32(const MicoBitConv2dF *p, const float *x, float *y, int8_t *codes);

typedef struct {
    int32_t rows, in_features, out_features; /* rows: the product of the leading dims */
    int32_t w_bits, w_per_channel;
    const uint8_t *weight;
    const float *w_scale;
    const float *bias; /* or NULL */
    MicoDynQuant act;
} MicoBitLinearF;

/* One dynamic scale over all rows*in_features inputs; `codes` is scratch of that many bytes. */
void mico_bit_linear_f32(const MicoBitLinearF *p, const float *x, float *y, int8_t *codes);

/* The taps k < k_n of a window starting at `start` (step `dil`) that land in [0, size):
 * [*k0, *k1). Shared by the float and the dynamic quantized convolutions. */
static inline void mico_conv_taps(int32_t start, int32_t k_n, int32_t dil, int32_t size,
                                  int32_t *k0, int32_t *k1)
{
    int32_t lo = 0, hi = k_n;
    if (start < 0) {
        lo = (-start + dil - 1) / dil;
    }
    if (start + (hi - 1) * dil >= size) {
        hi = size - start <= 0 ? 0 : (size - start + dil - 1) / dil;
    }
    if (hi < lo) {
        hi = lo;
    }
    *k0 = lo;
    *k1 = hi;
}

#endif /* MICO_F32_H */
