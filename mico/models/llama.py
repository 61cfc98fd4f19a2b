"""A tiny LLaMA-style decoder-only language model (llama2.c layout) for TinyStories."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from mico.models.base import MiCoModel
from mico.models.zoo import register_model


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x**2) + eps) * weight`` over the last dimension."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotary_tables(
    head_dim: int, max_seq_len: int, theta: float = 10000.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and ``sin`` of the rotary angles, each ``(max_seq_len, head_dim // 2)``."""
    freqs = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float32), freqs)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the interleaved pairs ``(x[2i], x[2i+1])`` of ``x (N, H, T, hd)`` (llama2.c)."""
    pairs = x.unflatten(-1, (-1, 2))
    x0, x1 = pairs[..., 0], pairs[..., 1]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)


class Attention(nn.Module):
    """Causal multi-head attention with rotary embeddings; ``wq``/``wk``/``wv``/``wo`` are
    bias-free ``nn.Linear`` layers. ``n_kv_heads < n_heads`` gives grouped-query attention."""

    def __init__(self, dim: int, n_heads: int, n_kv_heads: int) -> None:
        super().__init__()
        if dim % n_heads or n_heads % n_kv_heads:
            raise ValueError(
                f"dim ({dim}) must be divisible by n_heads ({n_heads}), "
                f"and n_heads by n_kv_heads ({n_kv_heads})"
            )
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.head_dim = dim // n_heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        q = self.wq(x).unflatten(-1, (self.n_heads, self.head_dim)).transpose(1, 2)
        k = self.wk(x).unflatten(-1, (self.n_kv_heads, self.head_dim)).transpose(1, 2)
        v = self.wv(x).unflatten(-1, (self.n_kv_heads, self.head_dim)).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if self.n_kv_heads != self.n_heads:
            rep = self.n_heads // self.n_kv_heads
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale + mask
        out = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.wo(out.transpose(1, 2).flatten(2))


class FeedForward(nn.Module):
    """SwiGLU MLP: ``w2(silu(w1(x)) * w3(x))``, bias-free Linears."""

    def __init__(self, dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    """``x + attention(rmsnorm(x))`` then ``x + feed_forward(rmsnorm(x))``."""

    def __init__(self, dim: int, n_heads: int, n_kv_heads: int, hidden_dim: int, eps: float):
        super().__init__()
        self.attention_norm = RMSNorm(dim, eps)
        self.attention = Attention(dim, n_heads, n_kv_heads)
        self.ffn_norm = RMSNorm(dim, eps)
        self.feed_forward = FeedForward(dim, hidden_dim)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin, mask)
        return x + self.feed_forward(self.ffn_norm(x))


@register_model(
    "tinyllama",
    input_shape=(64,),
    dataset="tinystories",
    description="LLaMA decoder: dim 64, 2 layers, 4 heads, vocab 512, RoPE, SwiGLU (~172k params)",
)
class LLaMa(MiCoModel):
    """LLaMA-style decoder-only transformer in llama2.c's layout and parameter names.

    Token embedding (not quantized) -> ``n_layers`` blocks of pre-RMSNorm causal attention with
    rotary position embeddings and a SwiGLU MLP -> RMSNorm -> ``output`` Linear to the vocabulary
    (untied from the embedding). Input token ids ``(N, T)`` (``T <= max_seq_len``), output logits
    ``(N, T, vocab_size)``. The MLP width is ``hidden_dim``, or llama2.c's ``2/3 * 4 * dim``
    rounded up to ``multiple_of``.

    Default (dim 64, 2 layers, 4 heads, vocab 512, 64 tokens): about 172k parameters of which
    33k are the embedding; 15 quantizable Linear layers (7 per block + ``output``). The depth is
    ``self.depth`` (``n_layers`` is the base class's quantizable-layer count). Exportable with
    ``torch.export``; not meant for ``torch.fx.symbolic_trace`` (the sequence length slices the
    rotary tables and the mask).
    """

    default_input_shape = (64,)
    input_dtype = torch.long
    task = "language"

    def __init__(
        self,
        dim: int = 64,
        n_layers: int = 2,
        n_heads: int = 4,
        vocab_size: int = 512,
        max_seq_len: int = 64,
        n_kv_heads: int | None = None,
        hidden_dim: int | None = None,
        multiple_of: int = 32,
        norm_eps: float = 1e-5,
    ) -> None:
        super().__init__()
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        if hidden_dim is None:
            hidden_dim = int(2 * (4 * dim) / 3)
            hidden_dim = multiple_of * ((hidden_dim + multiple_of - 1) // multiple_of)
        self.dim = dim
        self.depth = n_layers
        self.n_heads = n_heads
        self.vocab_size = vocab_size
        self.max_seq_len = max_seq_len
        self.default_input_shape = (max_seq_len,)
        self.tok_embeddings = nn.Embedding(vocab_size, dim)
        self.layers = nn.ModuleList(
            TransformerBlock(dim, n_heads, n_kv_heads, hidden_dim, norm_eps)
            for _ in range(n_layers)
        )
        self.norm = RMSNorm(dim, norm_eps)
        self.output = nn.Linear(dim, vocab_size, bias=False)
        cos, sin = rotary_tables(dim // n_heads, max_seq_len)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        # Additive causal mask: a large finite negative (not -inf) above the diagonal.
        mask = torch.full((max_seq_len, max_seq_len), -1e9).triu(1)
        self.register_buffer("causal_mask", mask, persistent=False)
        self._init_weights(n_layers)

    def _init_weights(self, n_layers: int) -> None:
        for m in self.modules():
            if isinstance(m, nn.Linear | nn.Embedding):
                nn.init.normal_(m.weight, std=0.02)
        for name, p in self.named_parameters():  # llama2.c: scaled residual projections
            if name.endswith(("w3.weight", "wo.weight")):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * n_layers))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        seq_len = tokens.size(1)
        x = self.tok_embeddings(tokens)
        cos, sin = self.rope_cos[:seq_len], self.rope_sin[:seq_len]
        mask = self.causal_mask[:seq_len, :seq_len]
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.output(self.norm(x))

    @torch.no_grad()
    def generate(
        self,
        tokens: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 0.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Extend ``tokens (N, T)`` by ``max_new_tokens``: greedy when ``temperature == 0``,
        else sampling from ``softmax(logits / temperature)`` (optionally the ``top_k`` best)."""
        for _ in range(max_new_tokens):
            logits = self(tokens[:, -self.max_seq_len :])[:, -1]
            if temperature == 0.0:
                nxt = logits.argmax(-1, keepdim=True)
            else:
                logits = logits / temperature
                if top_k is not None:
                    kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, -1:]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                nxt = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator)
            tokens = torch.cat([tokens, nxt], dim=1)
        return tokens
