"""Every deployable zoo model in static mode: mixed plan, BN folded, calibrated, lowered to
integer-only ops, emitted as C, built (ASan + UBSan) and run on the host -- bit-exact with the
Python reference -- and close to the PyTorch static model. Packed activations: a W4A4 arena is
about half a W8A8 one."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from mico.codegen import emit_c_project
from mico.codegen.compile import DEPLOYABLE_MODELS
from mico.codegen.planner import plan_graph
from mico.execute import run_graph
from mico.ir import extract_ir
from mico.ir.ops.registry import OpRegistry
from mico.models import from_zoo
from mico.passes import lower_static
from mico.quant import calibrate, fuse_model
from mico.targets import host

#: token models have their own tests (random float samples are no token ids):
#: tests/codegen/test_transformer_static.py
ZOO = [m for m in DEPLOYABLE_MODELS if m != "tinyllama"]
BITS = [8, 4, 1.58, 2, 6, 3, 5, 7, 1]  # ternary and binary included


def _randomize_batchnorm(model: nn.Module, gen: torch.Generator) -> None:
    """Trained-looking BN statistics, so folding gives per-channel scales and real biases."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm1d | nn.BatchNorm2d):
            c = m.num_features
            with torch.no_grad():
                m.weight.copy_(torch.rand(c, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(c, generator=gen) * 0.2)
                m.running_mean.copy_(torch.randn(c, generator=gen) * 0.2)
                m.running_var.copy_(torch.rand(c, generator=gen) + 0.5)


def static_model(name: str, bits=None, granularity: str = "tensor", seed: int = 0, batch: int = 8):
    """A calibrated, BN-folded static-mode zoo model, its calibration batches and example."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = from_zoo(name)
    _randomize_batchnorm(model, gen)
    n = model.n_layers
    if bits is not None:
        plan = [[bits] * n, [bits] * n]
    else:  # a mixed plan, different for every model; 8-bit input codes
        k = ZOO.index(name)
        plan = [[BITS[(i + k) % len(BITS)] for i in range(n)],
                [8] + [BITS[(i + k + 3) % len(BITS)] for i in range(1, n)]]  # fmt: skip
    model.set_qscheme(plan, act_mode="static", weight_granularity=granularity)
    example = model.example_input()
    batches = [torch.randn((batch, *example.shape[1:]), generator=gen)]
    model = fuse_model(model, example).eval()
    calibrate(model, batches)
    return model, batches, example


#: the ViT's static program also quantizes what its fake-quant PyTorch model keeps in float
#: (LayerNorm, softmax and GELU outputs, the residual stream; all at 8 bits), so under this
#: mixed plan with 1- and 2-bit layers it strays further from PyTorch (bit-exactness with its
#: reference is unaffected; at W8A8 the gap is 0.07)
TOLERANCE = {"vit_tiny": 0.4}


@pytest.mark.parametrize("name", ZOO)
def test_zoo_model_static_c_is_bit_exact(name, tmp_path, record_property):
    granularity = "channel" if ZOO.index(name) % 2 else "tensor"
    model, batches, example = static_model(name, granularity=granularity)
    graph = lower_static(extract_ir(model, example), batches)
    for node in graph.nodes:  # the ops' declared type rules agree with the lowering
        if OpRegistry.rule(node.op, "infer") is not None:
            assert OpRegistry.infer(node.op, node.inputs, node.attrs) == node.output.type
    samples = torch.randn((4, *example.shape[1:]), generator=torch.Generator().manual_seed(7))

    project = emit_c_project(graph, tmp_path / "c", "m")
    host.build(project, sanitize=True)
    c_out = host.run(project, samples.numpy())
    reference = run_graph(graph, samples)[0].numpy()
    assert np.array_equal(c_out.reshape(reference.shape), reference)

    # the integer program computes (up to rounding) what the PyTorch static model computes
    with torch.no_grad():
        expected = model(samples).numpy()
    real = reference * graph.outputs[0].scale
    spread = float(expected.max() - expected.min()) or float(np.abs(expected).max()) or 1.0
    relative = float(np.abs(real - expected).max()) / spread
    top1 = float((real.argmax(-1) == expected.argmax(-1)).mean())
    record_property("relative_error", relative)
    record_property("top1_agreement", top1)
    print(f"{name}: max |C - PyTorch| / output range = {relative:.3f}, top-1 agreement {top1}")
    assert relative < TOLERANCE.get(name, 0.25)


@pytest.mark.parametrize("name", ["resnet8", "mobilenetv2", "shufflenetv2", "dscnn", "m5"])
def test_w4a4_arena_is_about_half_of_w8a8(name):
    """Activations are stored packed at their bit-width: 4-bit codes take half a byte."""
    arenas = {}
    for bits in (8, 4):
        model, batches, example = static_model(name, bits=bits, batch=2)
        graph = lower_static(extract_ir(model, example), batches)
        arenas[bits] = plan_graph(graph).size
    assert arenas[4] <= 0.6 * arenas[8], arenas
