"""The LLaMa in the static (integer-only) C mode: token ids in, int32 logits out, through the
integer embedding, RMSNorm, rotary embedding, causal softmax, SiLU table and SwiGLU product;
bit-exact with the Python reference on the host for W8A8, W4A4, W4A8 and a mixed plan with
1- and 2-bit weights, and on rv32 for W8A8."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from mico.codegen.compile import DEPLOYABLE_MODELS, DYNAMIC_ONLY_MODELS, compile_model
from mico.errors import UnsupportedOpError
from mico.ir.ops import llama_ops, mico_ops
from mico.models import from_zoo
from mico.quant import QuantConfig, calibrate, quantize_model
from mico.targets import host, rv32

#: a mixed plan of the 15 layers: 1-, 2-, 4- and 8-bit weights, 4- and 8-bit activations
MIXED = [[1, 2, 4, 8, 2, 4, 1, 2, 1, 2, 4, 8, 1, 2, 8],
         [8, 8, 4, 8, 4, 8, 8, 4, 8, 8, 4, 4, 4, 8, 8]]  # fmt: skip


def static_llama(plan, seq_len: int = 64, seed: int = 0):
    """A calibrated static-mode zoo tinyllama, its calibration tokens and token samples."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = from_zoo("tinyllama").eval()
    n = model.n_layers
    if isinstance(plan, str):
        w, a = (int(b) for b in plan.split("/"))
        plan = [[w] * n, [a] * n]
    model.set_qscheme(plan, act_mode="static")
    calibration = torch.randint(0, 512, (4, seq_len), generator=gen)
    calibrate(model, [calibration])
    samples = torch.randint(0, 512, (3, seq_len), generator=gen)
    return model, calibration, samples


def test_tinyllama_is_deployable_in_both_modes():
    assert "tinyllama" in DEPLOYABLE_MODELS and "tinyllama" not in DYNAMIC_ONLY_MODELS


@pytest.fixture(scope="module")
def w8a8(tmp_path_factory):
    """The W8A8 program for 64 tokens (compiled once for the host and the rv32 test)."""
    model, calibration, samples = static_llama("8/8")
    out = tmp_path_factory.mktemp("llama") / "ll"
    compiled = compile_model(model, calibration[:1], out, "llm", mode="static",
                             calibration=[calibration])  # fmt: skip
    return compiled, samples.float().numpy()  # token ids as exact float32 integers


@pytest.mark.slow
def test_tinyllama_static_w8a8_is_bit_exact_and_integer_only(w8a8):
    compiled, x = w8a8
    ops = {n.op for n in compiled.graph.nodes}
    llama = {llama_ops.QEMBEDDING, llama_ops.QRMSNORM, llama_ops.QROPE, llama_ops.QSOFTMAX_PREFIX}
    assert llama | {mico_ops.LUT, mico_ops.QMUL, mico_ops.QMATMUL} <= ops
    assert not any(n.op.startswith("aten.") for n in compiled.graph.nodes)
    source = (compiled.project.directory / "llm.c").read_text()
    run = source.split("int llm_run")[1]
    assert "mico_f32_" not in run and "mico_qrope(" in run
    assert "mico_first_bad_token(input, LLM_INPUT_SIZE, 512)" in source
    host.build(compiled.project)
    reference = compiled.reference(x)
    assert np.array_equal(host.run(compiled.project, x), reference)
    # the integer program is close to the PyTorch static model
    real = reference * compiled.graph.outputs[0].scale
    expected = compiled.pytorch(x)
    top1 = float((real.argmax(-1) == expected.argmax(-1)).mean())
    assert np.abs(real - expected).max() < 0.1 * (expected.max() - expected.min())
    assert top1 > 0.8, top1


@pytest.mark.slow
@pytest.mark.parametrize("plan", ["4/4", "4/8", "mixed"])
def test_tinyllama_static_plans_are_bit_exact(tmp_path, plan):
    """Short sequences (16 tokens) keep the grid fast; the program is built for that length."""
    model, calibration, samples = static_llama(MIXED if plan == "mixed" else plan, seq_len=16)
    compiled = compile_model(model, calibration[:1], tmp_path / "ll", "llm", mode="static",
                             calibration=[calibration])  # fmt: skip
    host.build(compiled.project)
    x = samples.float().numpy()
    assert np.array_equal(host.run(compiled.project, x), compiled.reference(x))


class _Masked(nn.Module):
    """Attention scores plus a constant additive mask, then softmax."""

    def __init__(self, mask: torch.Tensor) -> None:
        super().__init__()
        self.q, self.k = nn.Linear(8, 8), nn.Linear(8, 8)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = torch.matmul(self.q(x), self.k(x).transpose(1, 2)) + self.mask
        return torch.softmax(scores, dim=-1)


def _lower_masked(mask: torch.Tensor):
    from mico.codegen.compile import lower

    torch.manual_seed(0)
    model = _Masked(mask).eval()
    quantize_model(model, "8/8", QuantConfig(act_mode="static"),
                   example_inputs=torch.zeros(1, 4, 8))  # fmt: skip
    x = torch.randn(4, 4, 8)
    calibrate(model, [x])
    return lower(model, x[:1], "static", [x])[0], x


def test_a_causal_mask_lowers_to_the_prefix_softmax_and_matches_float():
    graph, x = _lower_masked(torch.full((4, 4), -1e9).triu(1))
    assert llama_ops.QSOFTMAX_PREFIX in {n.op for n in graph.nodes}
    from mico.execute import run_graph

    probs = run_graph(graph, x)[0].numpy() * graph.outputs[0].scale
    assert np.all(np.triu(probs, 1) == 0)  # masked positions: exactly 0
    assert np.allclose(probs.sum(-1), 1.0, atol=0.05)


@pytest.mark.parametrize(
    ("edit", "message"),
    [((0, 3, 0.0), "not a non-empty prefix"), ((2, 1, -3.0), "values other than 0 and large")],
)
def test_a_mask_that_is_not_causal_is_refused_naming_it(edit, message):
    mask = torch.full((4, 4), -1e9).triu(1)
    mask[edit[0], edit[1]] = edit[2]
    with pytest.raises(UnsupportedOpError, match=rf"masked softmax at .*{message}"):
        _lower_masked(mask)


@pytest.mark.slow
@pytest.mark.skipif(not rv32.available(), reason=rv32.missing_tools_hint())
def test_tinyllama_static_w8a8_is_bit_exact_on_rv32(w8a8):
    """The integer-only program on a core without an FPU (rv32imc under qemu): one sample of
    64 tokens, the same int32 logits as the Python reference."""
    compiled, x = w8a8
    rv32.build(compiled.project)
    result = rv32.run(compiled.project, x[:1])
    assert np.array_equal(result.outputs, compiled.reference(x[:1]))
