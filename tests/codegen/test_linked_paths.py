"""Small layers on the fast paths their program links anyway (mico.codegen.linked_paths): a
layer below a path's size gate takes the path when another layer of the program calls the same
entry point, in the generated program and in the latency proxies' view of it alike, and the
program stays bit-exact. LeNet-5's fc2 / fc3 (10,080 and 840 MACs) are the case: fc1 links the
lanes, popcount or byte path of its width."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest
import torch

from mico.codegen import emit_c_project
from mico.codegen.linked_paths import UNGATED_MACS, gate_macs, ungated_layers
from mico.execute import run_graph
from mico.hw.layers import model_layer_shapes
from mico.hw.opshape import graph_op_shapes, kernel_path, layers_as_ops, op_from_layer
from mico.ir import extract_ir
from mico.models import from_zoo
from mico.passes import lower_static
from mico.quant import calibrate, fuse_model
from mico.targets import host

_CALL = re.compile(r"^\s*(mico_q(?:conv2d|linear)\w*)\(", re.M)


def _lenet_graph(bits):
    torch.manual_seed(0)
    model = from_zoo("lenet")
    n = model.n_layers
    model.set_qscheme([[bits] * n, [bits] * n], act_mode="static")
    example = model.example_input()
    batches = [torch.randn((4, *example.shape[1:]), generator=torch.Generator().manual_seed(1))]
    model = fuse_model(model, example).eval()
    calibrate(model, batches)
    return lower_static(extract_ir(model, example), batches), example


@pytest.fixture(scope="module")
def lenet_graphs():
    return {bits: _lenet_graph(bits)[0] for bits in (8, 4, 1)}


def _linears(graph):
    return [n for n in graph.nodes if n.op == "mico.qlinear"]


def test_small_layers_join_the_path_fc1_links(lenet_graphs):
    _, _, fc3 = (n.name for n in _linears(lenet_graphs[1]))
    # popcount, linked by fc1 (fc2, 10,080 MACs, is above the linear popcount gate itself)
    assert ungated_layers(lenet_graphs[1].nodes) == {fc3}
    _, _, fc3 = (n.name for n in _linears(lenet_graphs[8]))
    assert ungated_layers(lenet_graphs[8].nodes) == {fc3}  # fc2 is above the byte path's gate
    # W4A4: fc2 joins fc1's lanes; fc3 (10 outputs of 16 a word) would cost the lanes more
    # than the plain kernel, so it has no lanes path to join
    _, fc2, fc3 = (n.name for n in _linears(lenet_graphs[4]))
    assert ungated_layers(lenet_graphs[4].nodes) == {fc2}


def test_gate_macs():
    class Ctx:
        ungated = frozenset({"a"})
        ungate_all = False

    class N:
        name = "a"

    ctx, node = Ctx(), N()
    assert gate_macs(ctx, node, 100) == UNGATED_MACS
    node.name = "b"
    assert gate_macs(ctx, node, 100) == 100
    ctx.ungate_all = True
    assert gate_macs(ctx, node, 100) == UNGATED_MACS


def test_proxy_sees_the_program_paths(lenet_graphs):
    """graph_op_shapes names each conv / linear node's path as the program calls it."""
    graph = lenet_graphs[1]
    project = emit_c_project(graph, _tmp(), "m")
    calls = _CALL.findall((project.directory / "m.c").read_text())
    ops = [op for op in graph_op_shapes(graph) if op.kind in ("conv2d", "linear")]
    assert [op.path for op in ops] == [kernel_path(k) for k in calls]
    assert [op.path for op in ops if op.kind == "linear"] == ["bin_swar"] * 3


def test_layer_list_proxy_matches_the_graph():
    """layers_as_ops (the search's view: layer shapes, no graph) lifts the same layers."""
    model = from_zoo("lenet")
    example = model.example_input()
    layers = [layer.with_bits(1, 1) for layer in model_layer_shapes(model, example)]
    paths = [op.path for op in layers_as_ops(layers) if op.kind == "linear"]
    assert paths == ["bin_swar"] * 3
    # each layer alone keeps the gate: fc3 (840 MACs) on its own has no popcount kernel to
    # share; fc2 (10,080) is above the linear gate
    assert op_from_layer(layers[4]).path == "linear"
    assert op_from_layer(layers[3]).path == "bin_swar"


def _tmp():
    import tempfile
    from pathlib import Path

    return Path(tempfile.mkdtemp(prefix="mico-linked-"))


def test_generated_lenet_w1a1_takes_popcount_everywhere_bit_exact(tmp_path):
    graph, example = _lenet_graph(1)
    project = emit_c_project(graph, tmp_path / "c", "m")
    calls = _CALL.findall((project.directory / "m.c").read_text())
    assert [c for c in calls if "linear" in c] == ["mico_qlinear_bin_swar"] * 3
    host.build(project, sanitize=True)
    samples = torch.randn((4, *example.shape[1:]), generator=torch.Generator().manual_seed(7))
    reference = run_graph(graph, samples)[0].numpy()
    assert np.array_equal(host.run(project, samples.numpy()).reshape(reference.shape), reference)


@pytest.mark.skipif(shutil.which("clang") is None, reason="needs clang (apt install clang)")
def test_small_last_layer_on_lanes_is_clean_under_clang_ubsan(tmp_path):
    """LeNet W2A2: fc3 (int32 outputs, no multipliers) takes the lanes fc1 links; its store
    must not offset the absent multipliers (NULL + 0 is undefined: clang's UBSan stops it)."""
    graph, example = _lenet_graph(2)
    project = emit_c_project(graph, tmp_path / "c", "m")
    calls = _CALL.findall((project.directory / "m.c").read_text())
    assert calls[-1].startswith("mico_qlinear_lanes_")
    host.build(project, cc="clang", sanitize=True)
    samples = torch.randn((2, *example.shape[1:]), generator=torch.Generator().manual_seed(3))
    reference = run_graph(graph, samples)[0].numpy()
    assert np.array_equal(host.run(project, samples.numpy()).reshape(reference.shape), reference)
