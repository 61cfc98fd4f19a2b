/* Elementwise and data-movement kernels on packed codes: requantize / clamp / widen, residual
 * add, concat, strided copy (transpose, permute, slice). */
#include "mico_nn.h"

void mico_requant(const MicoRequant *p, const void *in, void *out)
{
    int32_t i;
    for (i = 0; i < p->n; i++) {
        const int32_t ch = p->channels > 1 ? (i / p->inner) % p->channels : 0;
        mico_store(out, (size_t)i, mico_finish(mico_load(in, (size_t)i, p->in_fmt), ch, &p->out),
                   p->out.fmt);
    }
}

void mico_add(const MicoAdd *p, const void *a, const void *b, void *out)
{
    const int binary = p->fmt.bits == 1 && p->fmt.is_signed;
    int32_t i;
    for (i = 0; i < p->n; i++) {
        const int64_t v = (int64_t)mico_load(a, (size_t)i, p->a_fmt) * (int64_t)p->m_a +
                          (int64_t)mico_load(b, (size_t)i, p->b_fmt) * (int64_t)p->m_b;
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
        mico_store(out, (size_t)i, (int32_t)r, p->fmt);
    }
}

void mico_concat_part(const MicoConcatPart *p, const void *in, void *out)
{
    int32_t o, j;
    for (o = 0; o < p->outer; o++) {
        const size_t src = (size_t)o * (size_t)p->in_inner;
        const size_t dst = (size_t)o * (size_t)p->out_inner + (size_t)p->offset;
        for (j = 0; j < p->in_inner; j++) {
            const int32_t v = mico_load(in, src + (size_t)j, p->in_fmt);
            mico_store(out, dst + (size_t)j, mico_finish(v, 0, &p->out), p->out.fmt);
        }
    }
}

void mico_copy(const MicoCopy *p, const void *in, void *out)
{
    int32_t idx[MICO_MAX_RANK];
    size_t n = 1, i;
    int32_t k;
    for (k = 0; k < p->rank; k++) {
        idx[k] = 0;
        n *= (size_t)p->shape[k];
    }
    for (i = 0; i < n; i++) {
        int64_t src = p->offset;
        for (k = 0; k < p->rank; k++) {
            src += (int64_t)idx[k] * (int64_t)p->stride[k];
        }
        mico_store(out, i, mico_finish(mico_load(in, (size_t)src, p->in_fmt), 0, &p->out),
                   p->out.fmt);
        for (k = p->rank - 1; k >= 0; k--) {
            if (++idx[k] < p->shape[k]) {
                break;
            }
            idx[k] = 0;
        }
    }
}
