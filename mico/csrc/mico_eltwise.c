/* Elementwise and data-movement kernels on packed codes: requantize / clamp / widen, residual
 * add, concat, strided copy (transpose, permute, slice).
 *
 * IN-PLACE CONTRACT (the planner relies on it to let mico_requant and mico_add write their
 * output over their own input, displaced): outputs are produced in increasing index order;
 * every input element of output i is read no later than output i is written; no input that
 * only an earlier output needed is read after a later output has been written.
 *
 * Every kernel works in runs of up to MICO_ELT_RUN elements: unpack the run's inputs, compute,
 * pack the run's outputs (all inputs of a run are read before any of its outputs is written).
 * Stack: under 1 KB. */
#include "mico_nn.h"

#define MICO_ELT_RUN 64 /* elements per run */

void mico_requant(const MicoRequant *p, const void *in, void *out)
{
    int32_t v[MICO_ELT_RUN];
    int32_t i0, j;
    for (i0 = 0; i0 < p->n; i0 += MICO_ELT_RUN) {
        const int32_t n = p->n - i0 < MICO_ELT_RUN ? p->n - i0 : MICO_ELT_RUN;
        mico_unpack_i32(in, (size_t)i0, n, p->in_fmt, v);
        for (j = 0; j < n;) { /* runs of one channel */
            const int32_t i = i0 + j;
            const int32_t ch = p->channels > 1 ? (i / p->inner) % p->channels : 0;
            const int32_t left = p->channels > 1 ? p->inner - i % p->inner : n - j;
            const int32_t len = left < n - j ? left : n - j;
            const MicoRq rq = mico_rq(&p->out, ch);
            mico_rq_run_fast(&rq, v + j, len);
            j += len;
        }
        mico_pack(out, (size_t)i0, v, n, p->out.fmt);
    }
}

void mico_add(const MicoAdd *p, const void *a, const void *b, void *out)
{
    const int binary = p->fmt.bits == 1 && p->fmt.is_signed;
    int32_t va[MICO_ELT_RUN], vb[MICO_ELT_RUN];
    int32_t i0, j;
    for (i0 = 0; i0 < p->n; i0 += MICO_ELT_RUN) {
        const int32_t n = p->n - i0 < MICO_ELT_RUN ? p->n - i0 : MICO_ELT_RUN;
        mico_unpack_i32(a, (size_t)i0, n, p->a_fmt, va);
        mico_unpack_i32(b, (size_t)i0, n, p->b_fmt, vb);
        for (j = 0; j < n; j++) {
            const int64_t v = (int64_t)va[j] * (int64_t)p->m_a + (int64_t)vb[j] * (int64_t)p->m_b;
            int64_t r = mico_round_shift(v, p->shift);
            if (binary) {
                r = r >= 0 ? 1 : -1;
            }
            if (r < p->lo) {
                r = p->lo;
            }
            if (r > p->hi) {
                r = p->hi;
            }
            va[j] = (int32_t)r;
        }
        mico_pack(out, (size_t)i0, va, n, p->fmt);
    }
}

void mico_concat_part(const MicoConcatPart *p, const void *in, void *out)
{
    const MicoRq rq = mico_rq(&p->out, 0);
    int32_t v[MICO_ELT_RUN];
    int32_t o, j0;
    for (o = 0; o < p->outer; o++) {
        const size_t src = (size_t)o * (size_t)p->in_inner;
        const size_t dst = (size_t)o * (size_t)p->out_inner + (size_t)p->offset;
        for (j0 = 0; j0 < p->in_inner; j0 += MICO_ELT_RUN) {
            const int32_t n = p->in_inner - j0 < MICO_ELT_RUN ? p->in_inner - j0 : MICO_ELT_RUN;
            mico_unpack_i32(in, src + (size_t)j0, n, p->in_fmt, v);
            mico_rq_run_fast(&rq, v, n);
            mico_pack(out, dst + (size_t)j0, v, n, p->out.fmt);
        }
    }
}

void mico_copy(const MicoCopy *p, const void *in, void *out)
{
    const int32_t last = p->rank - 1;
    const int32_t len = p->rank > 0 ? p->shape[last] : 1; /* the innermost dimension: a run */
    const int32_t step = p->rank > 0 ? p->stride[last] : 0;
    const MicoRq rq = mico_rq(&p->out, 0);
    int32_t idx[MICO_MAX_RANK];
    int32_t v[MICO_ELT_RUN];
    size_t n = 1, i;
    int32_t k, j0, j;
    for (k = 0; k < last; k++) {
        idx[k] = 0;
        n *= (size_t)p->shape[k];
    }
    if (len <= 0) {
        return;
    }
    for (i = 0; i < n; i++) {
        int64_t src = p->offset;
        for (k = 0; k < last; k++) {
            src += (int64_t)idx[k] * (int64_t)p->stride[k];
        }
        for (j0 = 0; j0 < len; j0 += MICO_ELT_RUN) {
            const int32_t m = len - j0 < MICO_ELT_RUN ? len - j0 : MICO_ELT_RUN;
            const int64_t s0 = src + (int64_t)j0 * (int64_t)step;
            if (step == 1) {
                mico_unpack_i32(in, (size_t)s0, m, p->in_fmt, v);
            } else {
                for (j = 0; j < m; j++) {
                    v[j] = mico_load(in, (size_t)(s0 + (int64_t)j * (int64_t)step), p->in_fmt);
                }
            }
            mico_rq_run_fast(&rq, v, m);
            mico_pack(out, i * (size_t)len + (size_t)j0, v, m, p->out.fmt);
        }
        for (k = last - 1; k >= 0; k--) {
            if (++idx[k] < p->shape[k]) {
                break;
            }
            idx[k] = 0;
        }
    }
}
