"""The dynamic mode end to end: every deployable zoo model compiles to C that computes what the
PyTorch model computes (float outputs to 1e-5 relative), across weight/activation widths."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from mico.codegen import compile_model
from mico.codegen.compile import DEPLOYABLE_MODELS
from mico.codegen.dynamic import prepare_dynamic
from mico.codegen.planner import plan_graph
from mico.deploy import DeployOptions, verify_compiled
from mico.errors import CompileError
from mico.execute import compare_outputs
from mico.ir import extract_ir
from mico.models import from_zoo
from mico.quant import QuantConfig, fuse_model
from mico.targets import host

#: token models have their own tests (random float samples are no token ids):
#: tests/codegen/test_transformer_dynamic.py
DEPLOYABLE = [m for m in DEPLOYABLE_MODELS if m != "tinyllama"]
WIDTHS = [1, 2, 3, 4, 5, 6, 7, 8, 1.58]


def _plan(name: str, index: int, n: int) -> list[list[float]]:
    """A sample of the grid: uniform widths for some models, seeded mixed plans for others."""
    if index % 3 == 0:
        w = WIDTHS[index % len(WIDTHS)]
        return [[w] * n, [WIDTHS[(index + 4) % len(WIDTHS)]] * n]
    rng = random.Random(name)
    return [[rng.choice(WIDTHS) for _ in range(n)], [rng.choice(WIDTHS) for _ in range(n)]]


def _quantized(name: str, index: int):
    torch.manual_seed(index)
    model = from_zoo(name).eval()
    n = model.n_layers
    granularity = "channel" if index % 2 else "tensor"
    config = QuantConfig(act_mode="dynamic", weight_granularity=granularity)
    model.set_qscheme(_plan(name, index, n), config=config)
    return model


@pytest.mark.parametrize("name", DEPLOYABLE)
def test_zoo_model_compiles_and_matches_pytorch(name, tmp_path):
    model = _quantized(name, DEPLOYABLE.index(name))
    example = model.example_input()
    compiled = compile_model(model, example, tmp_path / name, "m", mode="dynamic")
    host.build(compiled.project)
    samples = torch.randn(3, *example.shape[1:]).numpy()
    c_out = host.run(compiled.project, samples)
    expected = compiled.reference(samples)
    assert c_out.dtype == np.float32 and c_out.shape == expected.shape
    agreement = compare_outputs(c_out, expected, rtol=1e-5)
    assert agreement.all_within_tolerance, agreement.summary()
    assert agreement.top1 == 3
    # the reference is the PyTorch model's graph; eager PyTorch agrees up to summation order
    eager = compare_outputs(compiled.pytorch(samples), expected, rtol=1e-3)
    assert eager.top1 >= 2, eager.summary()
    arena = compiled.project.arena
    assert arena.size >= arena.lower_bound > 0


@pytest.mark.parametrize("name", ["resnet8", "mobilenetv2", "shufflenetv2", "m5"])
def test_sanitized_build_runs_clean(name, tmp_path):
    model = _quantized(name, 1)
    example = model.example_input()
    compiled = compile_model(model, example, tmp_path / name, "m")
    host.build(compiled.project, sanitize=True)
    samples = torch.randn(1, *example.shape[1:]).numpy()
    agreement = compare_outputs(host.run(compiled.project, samples), compiled.reference(samples))
    assert agreement.all_within_tolerance


@pytest.mark.parametrize("name", ["small_cnn", "m5"])
def test_in_place_execution_shrinks_the_arena(name):
    """ReLU after a (BN-folded) convolution overwrites its input: m5's arena drops by 37%."""
    model = _quantized(name, 0)
    example = model.example_input()
    folded = fuse_model(model, example)

    def arena(inplace: bool) -> int:
        return plan_graph(prepare_dynamic(extract_ir(folded, example), inplace=inplace)).size

    assert arena(True) <= 0.7 * arena(False)


def test_compile_leaves_the_callers_model_alone(tmp_path):
    model = _quantized("resnet8", 0).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    compile_model(model, model.example_input(), tmp_path / "p", "m")
    assert model.training
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert any("bn" in k or ".1." in k for k in before)  # BN is still there


def test_static_scales_are_refused_in_dynamic_mode(tmp_path, calibration_batches):
    from mico.models import SmallCNN
    from mico.quant import calibrate

    model = SmallCNN(channels=(4, 8)).eval()
    model.set_qscheme([[8] * 3, [8] * 3], act_mode="static")
    calibrate(model, calibration_batches[:1])
    with pytest.raises(CompileError, match=r"static activation scales.*mode='static'"):
        compile_model(model, torch.zeros(1, 1, 8, 8), tmp_path / "p", "m", mode="dynamic")
    assert not (tmp_path / "p").exists()  # nothing half-written


def test_existing_project_survives_a_failed_compile(tmp_path):
    model = _quantized("small_cnn", 0)
    out = tmp_path / "p"
    compile_model(model, model.example_input(), out, "m")
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(CompileError, match="not a C identifier"):
        compile_model(model, model.example_input(), out, "bad-name")
    assert sorted(p.name for p in out.iterdir()) == before


def test_unknown_mode_is_refused(tmp_path):
    model = _quantized("mlp", 0)
    with pytest.raises(CompileError, match="unknown mode 'fast'"):
        compile_model(model, model.example_input(), tmp_path / "p", mode="fast")


def test_first_differing_layer_is_found(tmp_path):
    model = _quantized("small_cnn", 0)
    example = model.example_input()
    compiled = compile_model(model, example, tmp_path / "p", "m")
    weights = compiled.project.directory / "m_weights.h"
    text = weights.read_text()
    # corrupt the scale of the second convolution's weights
    marker = "conv2_weight_scale[1] = {\n    "
    assert marker in text
    start = text.index(marker) + len(marker)
    end = text.index("f", start)
    weights.write_text(text[:start] + "0x1.0p-3" + text[end:])
    samples = torch.randn(2, *example.shape[1:]).numpy()
    result = verify_compiled(compiled, samples, DeployOptions(), log=lambda _: None)
    (entry,) = result.results
    assert not entry.ok
    assert entry.difference is not None
    assert entry.difference.node == "bit_conv2d_1"
    assert "differs first" in str(entry.difference)
