"""A tiny Vision Transformer (Dosovitskiy et al. 2021) for 32x32 / 28x28 images."""

from __future__ import annotations

import math

import torch
from torch import nn

from mico.models.base import MiCoModel
from mico.models.zoo import register_model


class SelfAttention(nn.Module):
    """Multi-head self-attention with explicit ``q``/``k``/``v``/``proj`` ``nn.Linear`` layers.

    Written with plain ``matmul`` and ``softmax`` (no fused kernels) so every projection is a
    separately quantizable layer and the graph lowers to simple ops.
    """

    def __init__(self, dim: int, n_heads: int) -> None:
        super().__init__()
        if dim % n_heads:
            raise ValueError(f"dim ({dim}) must be divisible by n_heads ({n_heads})")
        self.n_heads = n_heads
        self.head_dim = dim // n_heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        # (N, T, D) -> (N, H, T, D/H)
        return x.unflatten(-1, (self.n_heads, self.head_dim)).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self._heads(self.q(x)), self._heads(self.k(x)), self._heads(self.v(x))
        attn = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * self.scale, dim=-1)
        out = torch.matmul(attn, v).transpose(1, 2).flatten(2)
        return self.proj(out)


class EncoderBlock(nn.Module):
    """Pre-norm transformer encoder block: ``x + attn(LN(x))`` then ``x + MLP(LN(x))``."""

    def __init__(self, dim: int, n_heads: int, mlp_dim: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, n_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, mlp_dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(mlp_dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(self.act(self.fc1(self.norm2(x))))


@register_model(
    "vit_tiny",
    input_shape=(3, 32, 32),
    dataset="cifar10",
    description="ViT: 4x4 conv patches, 2 encoder blocks, dim 64, 4 heads (~75k params)",
)
class ViT(MiCoModel):
    """Tiny ViT: ``conv(patch x patch, stride patch)`` patch embedding, a learned class token
    and position embeddings, ``depth`` pre-norm encoder blocks (LayerNorm, multi-head
    self-attention with separate q/k/v/proj Linears, GELU MLP), final LayerNorm, and a linear
    head on the class token.

    Default (3, 32, 32), patch 4 (64 patches + class token), dim 64, 2 blocks, 4 heads, MLP 128:
    about 75k parameters, 14 quantizable layers (1 Conv2d, 13 Linear). For MNIST use
    ``ViT(in_channels=1, image_size=28)`` (49 patches). Traceable by ``torch.export``; also by
    ``torch.fx.symbolic_trace``.
    """

    default_input_shape = (3, 32, 32)

    def __init__(
        self,
        in_channels: int = 3,
        num_classes: int = 10,
        image_size: int = 32,
        patch_size: int = 4,
        dim: int = 64,
        depth: int = 2,
        n_heads: int = 4,
        mlp_dim: int = 128,
    ) -> None:
        super().__init__()
        if image_size % patch_size:
            raise ValueError(
                f"image_size ({image_size}) must be divisible by patch_size ({patch_size})"
            )
        self.default_input_shape = (in_channels, image_size, image_size)
        self.depth = depth
        n_patches = (image_size // patch_size) ** 2
        self.patch_embed = nn.Conv2d(in_channels, dim, patch_size, stride=patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, n_patches + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*(EncoderBlock(dim, n_heads, mlp_dim) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)  # (N, patches, dim)
        cls = self.cls_token.expand(x.size(0), -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])
