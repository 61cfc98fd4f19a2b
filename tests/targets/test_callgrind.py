"""Host instructions under callgrind: exact, repeatable counts of ``<name>_run`` only, that grow
with the model; wall time per inference as a median with its spread; clear errors when valgrind
or the program is missing."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from mico.codegen import emit_c_project
from mico.errors import BuildError
from mico.models.cnn import SmallCNN
from mico.pipeline import lower_model, quantize_ptq
from mico.quant import QuantPlan
from mico.targets import host

needs_valgrind = pytest.mark.skipif(
    shutil.which("valgrind") is None, reason="valgrind missing: apt-get install valgrind"
)


@pytest.fixture(scope="module")
def built(project):
    host.build(project)
    return project


@needs_valgrind
def test_two_runs_count_the_same_instructions(built, samples):
    first = host.profile(built, samples[:4], repeats=3)
    second = host.profile(built, samples[:4], repeats=1)
    assert first.instructions.dtype == np.int64 and first.instructions.shape == (4,)
    np.testing.assert_array_equal(first.instructions, second.instructions)
    assert first.instructions_per_inference == int(first.instructions.max())
    assert 10_000 < first.instructions_per_inference < 1_000_000
    assert first.wall_seconds.shape == (3,) and (first.wall_seconds >= 0).all()
    low, high = first.wall_spread
    assert low <= first.wall_median <= high
    assert first.inferences_per_timed_run >= host.MIN_TIMED_INFERENCES


@needs_valgrind
def test_counts_exclude_start_up(built, samples):
    exe = built.directory / "cnn"
    inputs = built.directory / "inputs.bin"
    counts = host.callgrind_counts(exe, "cnn_run", inputs, 4)
    assert counts.shape == (4,) and (counts > 0).all()
    # the first inference costs what the others do: no loader, libc or file start-up in it
    assert counts.max() - counts.min() < counts.min() // 100
    with pytest.raises(BuildError, match="saw 0 calls of main_loop"):
        host.callgrind_counts(exe, "main_loop", inputs, 4)


@needs_valgrind
def test_a_bigger_model_counts_more(built, samples, calibration_batches, tmp_path):
    torch.manual_seed(0)
    wide = SmallCNN(channels=(16, 32)).eval()
    plan = QuantPlan.parse("conv1=8/8,conv2=4/4,fc=2/8")
    graph = lower_model(quantize_ptq(wide, plan, calibration_batches), torch.zeros(1, 1, 8, 8))
    bigger = emit_c_project(graph, tmp_path / "wide", "wide")
    host.build(bigger)
    small = host.profile(built, samples[:2], repeats=1).instructions_per_inference
    large = host.profile(bigger, samples[:2], repeats=1).instructions_per_inference
    assert large > 2 * small


def test_missing_valgrind_names_the_package(built, samples, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(BuildError, match=r"apt-get install valgrind"):
        host.profile(built, samples[:1])


def test_missing_program_is_a_build_error(static_graph, samples, tmp_path):
    fresh = emit_c_project(static_graph, Path(tmp_path) / "fresh", "cnn")
    with pytest.raises(BuildError, match="does not exist; build the project first"):
        host.profile(fresh, samples[:1])
    with pytest.raises(BuildError, match="repeats must be at least 1"):
        host.profile(fresh, samples[:1], repeats=0)


@needs_valgrind
def test_host_kernels_weight_layout_is_counted_apart(static_graph, samples, tmp_path):
    """The host kernels lay out each layer's weights on its first call: a one-time cost that
    the per-inference counts (whole program and per node) leave out and report apart."""
    from mico.deploy import generation_extensions
    from mico.hw.nodes import host_node_costs

    project = emit_c_project(static_graph, tmp_path / "hk", "hk",
                             isa_extensions=generation_extensions(["host"]))  # fmt: skip
    host.build(project)
    counts, first = host.steady_callgrind_counts(project, samples[:3], tmp_path)
    assert counts.shape == (3,)
    # the warm-up ran sample 0: it costs more than sample 0 in the steady state
    assert first > counts[0]
    # every steady inference costs about the same (no one-time work left in any of them)
    assert counts.max() - counts.min() < counts.min() // 20
    profile = host.profile(project, samples[:3], repeats=1)
    np.testing.assert_array_equal(profile.instructions, counts)
    assert profile.first_inference == first
    # the nodes of the steady inference add up to it (the markers' glue aside)
    nodes = host_node_costs(project, samples[0])
    assert all(count > 0 for _, count in nodes.nodes)
    total = sum(count for _, count in nodes.nodes) + nodes.tail
    assert abs(total - int(counts[0])) < 40 * len(nodes.nodes) + 1000
