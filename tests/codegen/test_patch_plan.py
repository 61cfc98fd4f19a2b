"""Patch-based execution (mico.codegen.patch_plan): the first layers in row bands.

A tiny MobileNet-like model at 32x32 runs its first layers in bands: the C output equals the
Python integer reference bit for bit, the arena is strictly below the whole-tensor plan's,
``patch="off"`` writes the same project as before, and a model without a qualifying prefix
is left alone.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch
from torch import nn

from mico.codegen.compile import compile_model, lower
from mico.codegen.patch_plan import (
    band_ranges,
    choose_patches,
    load_fa,
    patched_buffers,
    stage_ends,
)
from mico.codegen.planner import plan_graph
from mico.codegen.project import emit_c_project
from mico.errors import CompileError
from mico.execute import run_graph
from mico.ir.ops import mico_ops
from mico.quant import QuantConfig, calibrate, quantize_model
from mico.quant.order import quantizable_layers
from mico.targets import host


def _cbr(i: int, o: int, k: int, s: int, g: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(i, o, k, s, k // 2, groups=g, bias=False), nn.BatchNorm2d(o), nn.ReLU6()
    )


class TinyMobileNet(nn.Module):
    """Stem, a stride-2 inverted residual block, one with a residual, a head."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(_cbr(3, 8, 3, 2), _cbr(8, 8, 3, 1, 8), nn.Conv2d(8, 4, 1))
        self.down = nn.Sequential(_cbr(4, 24, 1, 1), _cbr(24, 24, 3, 2, 24), nn.Conv2d(24, 8, 1))
        self.block = nn.Sequential(_cbr(8, 16, 1, 1), _cbr(16, 16, 3, 1, 16), nn.Conv2d(16, 8, 1))
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.down(self.stem(x))
        x = x + self.block(x)
        return self.head(x.mean((2, 3)))


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(48, 32), nn.Linear(32, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def _static(model: nn.Module, x: torch.Tensor, bits: str = "8/8") -> nn.Module:
    plan = ",".join(f"{n}={bits}" for n in quantizable_layers(model, x[:1]))
    quantize_model(model, plan, QuantConfig(act_mode="static", weight_granularity="channel"))
    model.eval()
    calibrate(model, [x])
    return model


_GRAPHS: dict[str, tuple] = {}


def _tiny(bits: str = "8/8"):
    """The tiny model's lowered static graph at ``bits`` and its samples (lowered once)."""
    if bits not in _GRAPHS:
        torch.manual_seed(0)
        x = torch.randn(6, 3, 32, 32)
        model = _static(TinyMobileNet().eval(), x, bits)
        _GRAPHS[bits] = lower(model, x[:1], "static", [x])[0], x
    return _GRAPHS[bits]


@pytest.mark.parametrize("bits", ["8/8", "4/4"])
def test_bands_bit_exact_and_arena_lower(tmp_path, bits):
    graph, x = _tiny(bits)
    reference = run_graph(graph, x)[0].numpy()
    arenas = {}
    for patch in ("off", "auto"):
        project = emit_c_project(graph, tmp_path / patch, "tiny", patch=patch)
        host.build(project)
        np.testing.assert_array_equal(host.run(project, x.numpy()), reference)
        arenas[patch] = project.arena.size
        summary = project.patch
        assert summary is not None and summary["patched"] == (patch == "auto")
    assert arenas["auto"] < arenas["off"]
    assert summary["arena_without_patches"] == arenas["off"]
    assert summary["arena_bytes"] == arenas["auto"]
    assert summary["extra_macs"] == summary["stage_macs_in_bands"] - summary["stage_macs"] >= 0
    assert not any("add" in name for name in summary["stage"])  # ends before the residual


def test_compile_model_takes_the_option(tmp_path):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 32, 32)
    model = _static(TinyMobileNet().eval(), x)
    compiled = compile_model(model, x[:1], tmp_path / "p", "tiny", "static", calibration=[x],
                             patch="auto")  # fmt: skip
    assert compiled.project.patch["patched"]
    manifest = json.loads((tmp_path / "p" / "mico.json").read_text())
    assert manifest["patch"]["arena_bytes"] == compiled.project.arena.size
    with pytest.raises(CompileError, match="patch mode"):
        compile_model(model, x[:1], tmp_path / "q", "tiny", "static", patch="on")


def test_host_kernels_with_patches(tmp_path):
    """The host GEMM kernels take every band, a band padded deeper at its bottom than at its
    top included (they size the padded input from the output rows), bit-exact."""
    graph, x = _tiny()
    project = emit_c_project(graph, tmp_path / "h", "tiny", patch="auto",
                             isa_extensions=("xautovec",))  # fmt: skip
    assert project.patch["patched"]
    assert "mico_qconv2d(" not in (tmp_path / "h" / "tiny.c").read_text()
    host.build(project)
    np.testing.assert_array_equal(host.run(project, x.numpy()), run_graph(graph, x)[0].numpy())


def test_weights_file_project_with_patches(tmp_path):
    """The band structs are constants like any other: a weights-file project loads them."""
    graph, x = _tiny()
    project = emit_c_project(graph, tmp_path / "wf", "tiny", patch="auto", weights_file=True)
    assert project.patch["patched"]
    host.build(project)
    np.testing.assert_array_equal(host.run(project, x.numpy()), run_graph(graph, x)[0].numpy())


def test_off_is_the_whole_tensor_project(tmp_path):
    graph, _ = _tiny()
    before = emit_c_project(graph, tmp_path / "default", "tiny")
    off = emit_c_project(graph, tmp_path / "off", "tiny", patch="off")
    # the whole-tensor plan, plus the kernels' planned scratch (mico.codegen.scratch)
    assert off.arena.size == before.arena.size >= plan_graph(graph).size
    for name in ("tiny.c", "tiny_weights.h"):
        assert (tmp_path / "off" / name).read_text() == (tmp_path / "default" / name).read_text()
    assert off.patch["patched"] is False and off.patch["why"] == "off"


def test_plan_is_sound():
    """Every band buffer is planned apart from what lives with it; bands cover the output."""
    graph, _ = _tiny()
    plan = choose_patches(graph)
    assert plan is not None and plan.arena.size < plan.whole.size
    assert plan.load_fa == load_fa(graph) > plan.arena.size
    buffers = patched_buffers(graph, plan.stage, plan.bands)
    offsets = plan.arena.offsets
    for i, a in enumerate(buffers):
        for b in buffers[i + 1 :]:
            if a.size and b.size and a.overlaps_in_time(b) and a.name not in plan.arena.ties:
                if b.name in plan.arena.ties:
                    continue
                apart = offsets[a.name] + a.size <= offsets[b.name]
                assert apart or offsets[b.name] + b.size <= offsets[a.name], (a, b)
    out = plan.stage[-1].output
    covered = [need[id(out)] for need in plan.bands]
    assert covered[0][0] == 0 and covered[-1][1] == out.type.shape[2]
    assert all(a[1] == b[0] for a, b in itertools.pairwise(covered))


def test_band_ranges_follow_the_receptive_field():
    graph, _ = _tiny()
    ends = stage_ends(graph)
    assert ends and graph.nodes[0].op == mico_ops.QUANTIZE
    stage = graph.nodes[: ends[1]]  # quantize, then the 3x3 stride-2 stem conv (pad 1)
    conv = stage[-1]
    assert conv.attrs["stride"][0] == 2 and conv.attrs["padding"][0] == 1
    need = band_ranges(stage, (0, 4))
    assert need[id(conv.inputs[0])] == (0, 8)  # rows -1..7: the first is padding
    need = band_ranges(stage, (4, 8))
    assert need[id(conv.inputs[0])] == (7, 16)
    need = band_ranges(stage, (12, 16))
    assert need[id(conv.inputs[0])] == (23, 32)  # row 32 is padding


def test_no_qualifying_prefix_is_unchanged(tmp_path):
    torch.manual_seed(0)
    x = torch.randn(4, 3, 4, 4)
    model = _static(Mlp().eval(), x)
    graph, _ = lower(model, x[:1], "static", [x])
    assert stage_ends(graph) == [] and choose_patches(graph) is None
    off = emit_c_project(graph, tmp_path / "off", "mlp", patch="off")
    auto = emit_c_project(graph, tmp_path / "auto", "mlp", patch="auto")
    assert auto.arena.size == off.arena.size
    assert (tmp_path / "auto" / "mlp.c").read_text() == (tmp_path / "off" / "mlp.c").read_text()
    assert auto.patch["patched"] is False and auto.patch["why"] == "no qualifying prefix"


def test_cli_verify_with_patches(tmp_path):
    """``mico verify --patch auto``: the program agrees bit for bit, memory.json says why."""
    from typer.testing import CliRunner

    from mico.cli import app

    out = tmp_path / "v"
    args = ["verify", "small_cnn", "--plan", "8/8", "--mode", "static", "--samples", "3"]
    result = CliRunner().invoke(app, [*args, "--patch", "auto", "-o", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    patch = json.loads((out / "memory.json").read_text())["patch"]
    assert patch["mode"] == "auto" and "arena_bytes" in patch
    bad = CliRunner().invoke(app, ["compile", "small_cnn", "--patch", "on", "-o", str(out) + "b"])
    assert bad.exit_code != 0 and "patch mode" in bad.output
