"""A KV-cached one-token decode step for the generation program (LLaMA layout, float layers).

Without a cache, each new token runs the model on the whole window (``seq_len`` positions). With
it, ``gen_decode(token, pos)`` runs one position: the token's embedding through every block,
keeping each layer's rotated keys and values in a cache, and attention over the cached
positions; the logits of position ``pos`` come out. It calls the kernels the model's project
calls (``mico_f32_linear``, ``mico_f32_matmul``, ``mico_f32_unary``, ``mico_f32_reduce``,
``mico_f32_softmax``) on one row, with the same constants, so each value is the one the full
window computes at that position, bit for bit:

- a causal model's position ``t`` never reads positions after it; in the window they are
  masked with ``-1e9``, here the cache is zero there and gets the same mask: ``exp`` is 0 for
  both, and the zero weights add exact zeros to the same sums in the same order;
- every kernel handles rows independently (the same sum order for one row as for 64).

The window slides once the context is longer than ``seq_len``: every position moves, the cached
rotary keys no longer hold, and the program falls back to the full window (as without a cache).

Memory: keys ``[layer][head][head_dim][seq_len]`` (transposed, the layout the score matmul
reads), values ``[layer][head][seq_len][head_dim]``, float32, plus a few rows of scratch. Both
are laid over the model's arena when they fit: the arena is only used by the full-window run,
which only happens once the cache is dead; otherwise they are one static buffer of their own.

Only the zoo's LLaMA layout (``mico.models.llama.LLaMa``, ``n_kv_heads == n_heads``) compiled
with float layers is cached here; a static (integer-only) project gets the cache of codes of
:mod:`mico.codegen.decode_static_c`; :func:`decode_plan` says why another model is not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from torch import nn


@dataclass(frozen=True)
class DecodePlan:
    """What the decode step needs: shapes, constants, symbols, and its memory."""

    dim: int
    layers: int
    heads: int
    head_dim: int
    hidden: int
    vocab: int
    seq_len: int
    eps: float  # float32 values
    scale: float
    arena_bytes: int  # the model's arena

    @property
    def cache_bytes(self) -> int:
        """Keys and values of every layer, head and position (float32)."""
        return 2 * self.layers * self.heads * self.head_dim * self.seq_len * 4

    @property
    def scratch_bytes(self) -> int:
        """One position's activations: x, 2 normalised rows, q, k, v, the attention output,
        the scores of every head, 2 hidden rows, the norm's scalars and the logits."""
        rows = 7 * self.dim + self.heads * self.seq_len + 2 * self.hidden + 2 + self.vocab
        return rows * 4

    @property
    def in_arena(self) -> bool:
        """Whether cache and scratch fit inside the model's arena (then they cost no RAM)."""
        return self.cache_bytes + self.scratch_bytes <= self.arena_bytes

    @property
    def extra_ram(self) -> int:
        """RAM the cache adds to the program: 0 inside the arena, else cache and scratch."""
        return 0 if self.in_arena else self.cache_bytes + self.scratch_bytes

    def memory(self) -> dict[str, int | bool]:
        """The figures the generation report gives (offsets: inside the arena, when there)."""
        return {
            "model_arena": self.arena_bytes,
            "kv_cache": self.cache_bytes,
            "decode_scratch": self.scratch_bytes,
            "kv_in_arena": self.in_arena,
            "kv_extra_ram": self.extra_ram,
            "kv_cache_offset": 0,  # keys then values, then the scratch (gen_kv_t)
            "decode_scratch_offset": self.cache_bytes,
        }


def _linears(model: nn.Module) -> list[str]:
    names = [f"layers_{i}_attention_w{p}_weight" for i in range(model.depth) for p in "qkvo"]
    names += [f"layers_{i}_feed_forward_w{p}_weight" for i in range(model.depth) for p in "123"]
    return [*names, "output_weight"]


def _params(model: nn.Module) -> list[str]:
    names = [f"param_layers_{i}_{n}_norm_weight" for i in range(model.depth)
             for n in ("attention", "ffn")]  # fmt: skip
    return [*names, "param_norm_weight", "param_tok_embeddings_weight", "param_rope_cos",
            "param_rope_sin", "param_causal_mask"]  # fmt: skip


def decode_plan(model: nn.Module, directory: Path, name: str, arena_bytes: int) -> DecodePlan | str:
    """The decode step for ``model``'s project in ``directory``, or why there is none (a
    static-mode project: :func:`mico.codegen.decode_static_c.static_decode_plan`)."""
    from mico.codegen.decode_static_c import static_decode_plan
    from mico.models.llama import LLaMa

    source = (Path(directory) / f"{name}.c").read_text()
    if "mico_qembedding(" in source:  # the static mode's integer embedding
        return static_decode_plan(model, directory, name, arena_bytes)  # type: ignore[return-value]
    if not isinstance(model, LLaMa):
        return f"the KV cache is built for the zoo's LLaMA layout, not {type(model).__name__}"
    attention = model.layers[0].attention
    if attention.n_kv_heads != attention.n_heads:
        return "the KV cache does not take grouped-query attention (n_kv_heads < n_heads) yet"
    for symbol in _linears(model):
        if not re.search(rf"mico_f32_linear\([^;]*\b{symbol}\b", source):
            return (
                f"{symbol} is not a float layer in {name}.c (the KV cache takes float layers; "
                "quantized layers scale their activations over the whole window)"
            )
    for symbol in _params(model):
        if not re.search(rf"\(\(float \*\){symbol}\)", source):
            return f"{name}.c does not use the float constant {symbol} the decode step reads"
    depth = model.depth
    expected = {  # the window's kernel calls the decode step repeats on one row
        "mico_f32_linear(": 7 * depth + 1,
        "mico_f32_matmul(": 2 * depth,
        "mico_f32_softmax(": depth,
        "MICO_UNARY_RSQRT,": 2 * depth + 1,
        "MICO_UNARY_SILU,": depth,
        "MICO_REDUCE_MEAN,": 2 * depth + 1,
    }
    for call, count in expected.items():
        if source.count(call) != count:
            return (
                f"{name}.c has {source.count(call)} {call.rstrip('(,')} calls where the decode "
                f"step repeats {count}: the model is not the LLaMA layout it was written for"
            )
    eps = float(np.float32(model.layers[0].attention_norm.eps))
    scale = float(np.float32(attention.scale))
    for constant in (eps, scale):
        if f"{constant.hex()}f" not in source:
            return f"{name}.c does not use the constant {constant!r} the decode step uses"
    hidden = model.layers[0].feed_forward.w1.out_features
    return DecodePlan(
        dim=model.dim, layers=model.depth, heads=attention.n_heads, head_dim=attention.head_dim,
        hidden=hidden, vocab=model.vocab_size, seq_len=model.max_seq_len,
        eps=eps, scale=scale, arena_bytes=arena_bytes,
    )  # fmt: skip


def decode_source(plan: DecodePlan) -> str:
    """C of ``gen_decode(token, pos, logits)`` (to follow ``#include "<name>.c"``); a static
    plan writes its own (:mod:`mico.codegen.decode_static_c`)."""
    if not isinstance(plan, DecodePlan):
        return plan.source()
    p = plan
    storage = (
        "#define KV ((gen_kv_t *)(void *)mico_arena.bytes) /* laid over the model's arena */"
        if p.in_arena
        else "static gen_kv_t gen_kv_storage; /* does not fit in the arena: its own RAM */\n"
        "#define KV (&gen_kv_storage)"
    )
    return f"""/* ---- the KV-cached decode step (mico.codegen.decode_c) ---- */
#define KV_L {p.layers}
#define KV_H {p.heads}
#define KV_HD {p.head_dim}
#define KV_D {p.dim}
#define KV_F {p.hidden}
#define KV_T {p.seq_len}
#define KV_V {p.vocab}
typedef struct {{
    float k[KV_L][KV_H][KV_HD][KV_T]; /* rotated keys, transposed: the score matmul's B */
    float v[KV_L][KV_H][KV_T][KV_HD];
    float x[KV_D], xb[KV_D], q[KV_D], kn[KV_D], vn[KV_D], att[KV_D], xo[KV_D];
    float scores[KV_H][KV_T], hb[KV_F], hb2[KV_F], rms[2], logits[KV_V];
}} gen_kv_t;
{storage}
typedef char gen_kv_size_check[sizeof(gen_kv_t) == {p.cache_bytes + p.scratch_bytes} ? 1 : -1];

/* x * rsqrt(mean(x^2) + eps) * w, with the model's kernels on one row */
static void kv_rmsnorm(const float *x, const float *w, float *out) {{
    mico_f32_unary(MICO_UNARY_POW, x, out, KV_D, 2.0f, 0.0f);
    mico_f32_reduce(MICO_REDUCE_MEAN, out, KV->rms, 1, KV_D, 1);
    mico_f32_unary(MICO_UNARY_AFFINE, KV->rms, KV->rms, 1, 1.0f, {p.eps.hex()}f);
    mico_f32_unary(MICO_UNARY_RSQRT, KV->rms, KV->rms, 1, 0.0f, 0.0f);
    for (int32_t i = 0; i < KV_D; i++) out[i] = x[i] * KV->rms[0];
    for (int32_t i = 0; i < KV_D; i++) out[i] = out[i] * w[i];
}}

/* rotate the interleaved pairs of one position's heads (x0 cos - x1 sin, x0 sin + x1 cos) */
static void kv_rope(float *x, int32_t pos) {{
    const float *cos_t = (const float *)param_rope_cos + pos * (KV_HD / 2);
    const float *sin_t = (const float *)param_rope_sin + pos * (KV_HD / 2);
    for (int32_t h = 0; h < KV_H; h++)
        for (int32_t i = 0; i < KV_HD / 2; i++) {{
            float *pair = x + h * KV_HD + 2 * i;
            float x0 = pair[0], x1 = pair[1];
            float a = x0 * cos_t[i], b = x1 * sin_t[i], c = x0 * sin_t[i], d = x1 * cos_t[i];
            pair[0] = a - b;
            pair[1] = c + d;
        }}
}}

static void kv_reset(void) {{ memset(KV, 0, sizeof(gen_kv_t)); }}

/* Position pos (< KV_T) of token: fills the cache at pos; the logits when want_logits. */
static void gen_decode(int32_t token, int32_t pos, int want_logits) {{
    gen_kv_t *kv = KV;
    const float *mask = (const float *)param_causal_mask + (size_t)pos * KV_T;
    memcpy(kv->x, (const float *)param_tok_embeddings_weight + (size_t)token * KV_D,
           sizeof kv->x);
{_layers(p)}
    if (!want_logits) return;
    kv_rmsnorm(kv->x, (const float *)param_norm_weight, kv->xb);
    mico_f32_linear(1, KV_D, KV_V, output_weight, 0, kv->xb, kv->logits);
}}
"""


def _layers(p: DecodePlan) -> str:
    lines = []
    for layer in range(p.layers):
        w = f"layers_{layer}_"
        lines.append(f"""    /* layer {layer} */
    kv_rmsnorm(kv->x, (const float *)param_layers_{layer}_attention_norm_weight, kv->xb);
    mico_f32_linear(1, KV_D, KV_D, {w}attention_wq_weight, 0, kv->xb, kv->q);
    mico_f32_linear(1, KV_D, KV_D, {w}attention_wk_weight, 0, kv->xb, kv->kn);
    mico_f32_linear(1, KV_D, KV_D, {w}attention_wv_weight, 0, kv->xb, kv->vn);
    kv_rope(kv->q, pos);
    kv_rope(kv->kn, pos);
    for (int32_t h = 0; h < KV_H; h++)
        for (int32_t d = 0; d < KV_HD; d++) {{
            kv->k[{layer}][h][d][pos] = kv->kn[h * KV_HD + d];
            kv->v[{layer}][h][pos][d] = kv->vn[h * KV_HD + d];
        }}
    for (int32_t h = 0; h < KV_H; h++) {{
        mico_f32_matmul(kv->q + h * KV_HD, 0, &kv->k[{layer}][h][0][0], 0, kv->scores[h], 1, 1,
                        KV_HD, KV_T);
        mico_f32_unary(MICO_UNARY_AFFINE, kv->scores[h], kv->scores[h], KV_T, {p.scale.hex()}f,
                       0.0f);
        for (int32_t j = 0; j < KV_T; j++) kv->scores[h][j] = kv->scores[h][j] + mask[j];
    }}
    mico_f32_softmax(&kv->scores[0][0], &kv->scores[0][0], KV_H, KV_T, 1, 0);
    for (int32_t h = 0; h < KV_H; h++)
        mico_f32_matmul(kv->scores[h], 0, &kv->v[{layer}][h][0][0], 0, kv->att + h * KV_HD, 1, 1,
                        KV_T, KV_HD);
    mico_f32_linear(1, KV_D, KV_D, {w}attention_wo_weight, 0, kv->att, kv->xo);
    for (int32_t i = 0; i < KV_D; i++) kv->x[i] = kv->x[i] + kv->xo[i];
    kv_rmsnorm(kv->x, (const float *)param_layers_{layer}_ffn_norm_weight, kv->xb);
    mico_f32_linear(1, KV_D, KV_F, {w}feed_forward_w1_weight, 0, kv->xb, kv->hb);
    mico_f32_unary(MICO_UNARY_SILU, kv->hb, kv->hb, KV_F, 0.0f, 0.0f);
    mico_f32_linear(1, KV_D, KV_F, {w}feed_forward_w3_weight, 0, kv->xb, kv->hb2);
    for (int32_t i = 0; i < KV_F; i++) kv->hb[i] = kv->hb[i] * kv->hb2[i];
    mico_f32_linear(1, KV_F, KV_D, {w}feed_forward_w2_weight, 0, kv->hb, kv->xo);
    for (int32_t i = 0; i < KV_D; i++) kv->x[i] = kv->x[i] + kv->xo[i];""")
    return "\n".join(lines)
