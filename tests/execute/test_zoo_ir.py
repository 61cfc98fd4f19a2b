"""Every zoo model, FP32 and fake-quantized (W4/A8, dynamic activations): extract -> save ->
load -> execute_ir equals PyTorch eager (same dtype, max abs error <= 1e-5) and verify_ir is ok."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from mico.execute import execute_ir, verify_ir
from mico.frontend import extract_ir
from mico.ir.serialize import load_ir, save_ir
from mico.models import from_zoo, model_names

NAMES = model_names()


def _random_input(model: nn.Module, seed: int) -> torch.Tensor:
    """Random data shaped like ``model.example_input()`` (token ids for language models)."""
    example = model.example_input()
    g = torch.Generator().manual_seed(seed)
    if example.dtype == torch.long:
        vocab = model.tok_embeddings.num_embeddings
        return torch.randint(0, vocab, example.shape, generator=g)
    return torch.randn(example.shape, generator=g, dtype=example.dtype)


def _check(model: nn.Module, name: str, tmp_path: Path) -> None:
    x = _random_input(model, seed=1)
    graph = extract_ir(model, (x,), name)
    loaded = load_ir(save_ir(graph, tmp_path / f"{name}.json"))
    assert [n.op for n in loaded.nodes] == [n.op for n in graph.nodes]
    got = execute_ir(loaded, x)
    with torch.no_grad():
        expected = model(x)
    assert len(got) == 1
    assert got[0].dtype == expected.dtype and got[0].shape == expected.shape
    assert (got[0] - expected).abs().max().item() <= 1e-5
    report = verify_ir(loaded, model, (x,))
    assert report.ok, report.summary()


@pytest.mark.parametrize("name", NAMES)
def test_fp32_zoo_model_round_trips_and_executes(name: str, tmp_path: Path) -> None:
    torch.manual_seed(0)
    _check(from_zoo(name).eval(), name, tmp_path)


MIXED_BITS = [8, 4, 1.58, 2, 6, 3, 5, 7, 1]


@pytest.mark.parametrize("name", NAMES)
def test_quantized_zoo_model_round_trips_and_executes(name: str, tmp_path: Path) -> None:
    """A mixed plan (ternary and binary included), per-channel weights on every other model."""
    torch.manual_seed(0)
    model = from_zoo(name).eval()
    n = model.n_layers
    plan = [
        [MIXED_BITS[i % len(MIXED_BITS)] for i in range(n)],
        [MIXED_BITS[(i + 3) % len(MIXED_BITS)] for i in range(n)],
    ]
    granularity = "channel" if NAMES.index(name) % 2 else "tensor"
    model.set_qscheme(plan, weight_granularity=granularity)
    _check(model, name, tmp_path)
    graph = extract_ir(model, (_random_input(model, seed=3),))
    quantized = [n for n in graph.nodes if n.op.startswith("mico.bit_")]
    assert len(quantized) == model.n_layers
