"""Seed 004's examples with the imports changed to mico (tt_transformers_v2 -> mico.registry).

The seed's base classes (``BaseAttention``, ``BaseFFN``) belong to its transformer library; small
stand-ins below play their part, and ``flash_attention_v3_kernel`` is a stand-in kernel (plain
scaled dot-product attention). Everything after the stand-ins is the seed's code.
"""

from __future__ import annotations

from abc import abstractmethod

import torch
from torch import nn

from mico.registry import ModelFactory, ModuleRegistry, register_module


class BaseAttention(nn.Module):
    """Stand-in for the seed's attention base: q/k/v projections, ``compute_attention`` hook."""

    def __init__(self, hidden_dim: int, num_heads: int, device=None):
        super().__init__()
        self.hidden_dim = hidden_dim
        self.num_heads = num_heads
        self.device = device
        self.qkv = nn.Linear(hidden_dim, 3 * hidden_dim)

    def compute_qkv(self, x):
        return self.qkv(x).chunk(3, dim=-1)

    @abstractmethod
    def compute_attention(self, q, k, v, mask=None): ...

    def forward(self, x, mask=None):
        q, k, v = self.compute_qkv(x)
        return self.compute_attention(q, k, v, mask)


class BaseFFN(nn.Module):
    """Stand-in for the seed's FFN base: up projection, GELU, down projection."""

    def __init__(self, hidden_dim: int, intermediate_dim: int, device=None):
        super().__init__()
        self.up = nn.Linear(hidden_dim, intermediate_dim)
        self.down = nn.Linear(intermediate_dim, hidden_dim)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x)))


def flash_attention_v3_kernel(q, k, v, window_size, mask=None):
    """Stand-in kernel: attention restricted to a causal window of ``window_size`` tokens."""
    n = q.shape[-2]
    idx = torch.arange(n)
    allowed = (idx[None, :] <= idx[:, None]) & (idx[:, None] - idx[None, :] < window_size)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)


def test_example_1_custom_module_without_registration():
    class FlashAttentionV3(BaseAttention):
        """My custom Flash Attention implementation - no registration needed!"""

        def __init__(self, hidden_dim: int, num_heads: int, window_size: int = 2048, device=None):
            super().__init__(hidden_dim, num_heads, device)
            self.window_size = window_size

        def compute_attention(self, q, k, v, mask=None):
            return flash_attention_v3_kernel(q, k, v, self.window_size, mask)

    attn = FlashAttentionV3(hidden_dim=16, num_heads=2, window_size=4)
    assert attn(torch.randn(1, 6, 16)).shape == (1, 6, 16)
    # "just pass the class": the factory takes an unregistered class
    model = ModelFactory.from_config(
        {
            "layers": [
                {
                    "name": "attn",
                    "module": FlashAttentionV3,
                    "config": {"hidden_dim": 16, "num_heads": 2, "window_size": 4},
                }
            ]
        }
    )
    assert model(torch.randn(1, 6, 16)).shape == (1, 6, 16)


def test_example_2_registering_for_discovery():
    with ModuleRegistry.scoped():

        @register_module(
            name="flash-attention-v3",
            category="attention",
            description="Optimized Flash Attention V3 with sliding window support",
            author="Research Team",
            version="3.0.0",
            hardware_support=["cuda", "ttnn"],
            tags=["production", "optimized", "sliding-window"],
            alias="flash3",  # Short alias
        )
        class FlashAttentionV3(BaseAttention):
            """Flash Attention V3 with improved memory efficiency."""

            def __init__(
                self, hidden_dim: int, num_heads: int, window_size: int = 2048, device=None
            ):
                super().__init__(hidden_dim, num_heads, device)
                self.window_size = window_size

            def compute_attention(self, q, k, v, mask=None):
                return flash_attention_v3_kernel(q, k, v, self.window_size, mask)

        attentions = ModuleRegistry.list_modules(category="attention")
        lines = [f"{attn.name}: {attn.description}" for attn in attentions]
        assert lines == [
            "flash-attention-v3: Optimized Flash Attention V3 with sliding window support"
        ]
        results = ModuleRegistry.search("sliding window")
        assert [r.name for r in results] == ["flash-attention-v3"]
        FlashAttnClass = ModuleRegistry.get_module("flash3")  # Using alias
        attn = FlashAttnClass(hidden_dim=16, num_heads=2)
        assert attn.window_size == 2048
        errors = ModuleRegistry.validate_config(
            "flash-attention-v3",
            {
                "hidden_dim": 4096,
                "num_heads": 32,
                # "window_size" is optional with default
            },
        )
        assert errors == []


def test_example_3_community_module_and_docs():
    with ModuleRegistry.scoped():

        @register_module(
            name="mixture-of-depths-ffn",
            category="ffn",
            description="Mixture of Depths FFN - dynamically skips computation for some tokens",
            author="Community Contributor",
            version="0.1.0",
            hardware_support=["cuda", "ttnn"],
            tags=["experimental", "efficiency", "mod"],
            performance_hints={
                "speedup": "1.5-2x on long sequences",
                "memory": "30% reduction",
            },
        )
        class MixtureOfDepthsFFN(BaseFFN):
            """Dynamically routes tokens through FFN based on importance."""

            def __init__(
                self,
                hidden_dim: int,
                intermediate_dim: int,
                routing_threshold: float = 0.5,
                device=None,
            ):
                super().__init__(hidden_dim, intermediate_dim, device)
                self.routing_threshold = routing_threshold
                self.router = nn.Linear(hidden_dim, 1)

            def forward(self, x):
                importance = torch.sigmoid(self.router(x))
                mask = (importance > self.routing_threshold).squeeze(-1)
                output = x.clone()
                if mask.any():
                    selected = x[mask]
                    processed = super().forward(selected)
                    output[mask] = processed
                return output

        ffn = MixtureOfDepthsFFN(8, 16)
        assert ffn(torch.randn(2, 5, 8)).shape == (2, 5, 8)
        docs = ModuleRegistry.generate_docs()
        assert "### mixture-of-depths-ffn" in docs
        assert "**Author**: Community Contributor" in docs
        assert "speedup: 1.5-2x on long sequences" in docs
        assert "| `routing_threshold` | `float` | no | `0.5` |" in docs


def test_section_4_factory_with_registered_and_unregistered_modules():
    class MyUnregisteredAttention(BaseAttention):
        def compute_attention(self, q, k, v, mask=None):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    with ModuleRegistry.scoped():

        @register_module(name="flash-attention-v3", category="attention", alias="flash3")
        class FlashAttentionV3(BaseAttention):
            def __init__(
                self, hidden_dim: int, num_heads: int, window_size: int = 2048, device=None
            ):
                super().__init__(hidden_dim, num_heads, device)
                self.window_size = window_size

            def compute_attention(self, q, k, v, mask=None):
                return flash_attention_v3_kernel(q, k, v, self.window_size, mask)

        config = {
            "layers": [
                {
                    "name": "attention_0",
                    "module": "flash-attention-v3",  # Registered module by name
                    "config": {"hidden_dim": 16, "num_heads": 2},
                },
                {
                    "name": "attention_1",
                    "module": MyUnregisteredAttention,  # Direct class reference
                    "config": {"hidden_dim": 16, "num_heads": 2},
                },
            ]
        }
        model = ModelFactory.from_config(config, device="cpu")
        assert isinstance(model.layers["attention_0"], FlashAttentionV3)
        assert isinstance(model.layers["attention_1"], MyUnregisteredAttention)
        assert model(torch.randn(1, 4, 16)).shape == (1, 4, 16)
