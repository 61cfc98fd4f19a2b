"""Golden end-to-end tests: emit C, build it with -Werror, run it, compare bit for bit."""

import re

import numpy as np
import pytest
import torch

from mico.codegen import emit_c_project
from mico.codegen.emitters import conv2d_kernel
from mico.errors import BuildError, CompileError
from mico.execute import compare_outputs, run_graph
from mico.pipeline import lower_model, quantize_ptq
from mico.quant import QuantPlan, packed_size
from mico.targets import host

PLANS = [
    "conv1=8/8,conv2=4/4,fc=2/8",
    "conv1=8/8,conv2=3/5,fc=1/8",
    "conv1=1/1,conv2=7/2,fc=5/3",
    "conv1=2/6,conv2=6/7,fc=8/1",
]


def _lowered(model, batches, plan):
    return lower_model(
        quantize_ptq(model, QuantPlan.parse(plan), batches), torch.zeros(1, 1, 8, 8), "cnn"
    )


@pytest.mark.parametrize("plan", PLANS)
def test_c_output_equals_python_reference(
    plan, trained_cnn, calibration_batches, digits_split, tmp_path
):
    graph = _lowered(trained_cnn, calibration_batches, plan)
    project = emit_c_project(graph, tmp_path / "c", "cnn")
    host.build(project)
    samples = digits_split.x_test[:120]
    c_out = host.run(project, samples)
    reference = run_graph(graph, samples)[0].numpy()
    assert c_out.dtype == np.int32 and c_out.shape == (120, 10)
    np.testing.assert_array_equal(c_out, reference)
    assert compare_outputs(c_out, reference).all_exact


def test_project_files_flash_and_arena(trained_cnn, calibration_batches, tmp_path):
    graph = _lowered(trained_cnn, calibration_batches, "conv1=8/8,conv2=3/5,fc=1/8")
    project = emit_c_project(graph, tmp_path, "cnn")
    for name in (
        "cnn.h",
        "cnn.c",
        "cnn_weights.h",
        "main.c",
        "Makefile",
        "mico_nn.h",
        "mico_nn_run.c",
        "mico_conv2d.c",
        "mico_linear.c",
        "mico_pool.c",
        "mico_quant.c",
        "mico.json",
    ):
        assert (tmp_path / name).is_file(), name
    # flash holds exactly the packed weights: 36 x 8 bit, 288 x 3 bit, 320 x 1 bit
    assert project.weight_bytes == packed_size(36, 8) + packed_size(288, 3) + packed_size(320, 1)
    assert project.flash["bias"] == 4 * (4 + 8 + 10)
    assert project.arena.size >= project.arena.lower_bound > 0
    sources = "".join((tmp_path / f).read_text() for f in project.files if f.endswith((".c", ".h")))
    assert not re.search(r"\b(malloc|calloc|realloc|free)\s*\(", sources)
    makefile = (tmp_path / "Makefile").read_text()
    assert "-std=c99 -Wall -Wextra -Werror" in makefile
    header = (tmp_path / "cnn.h").read_text()
    assert "#define CNN_INPUT_SIZE 64" in header and "#define CNN_OUTPUT_SIZE 10" in header
    assert f"#define CNN_ARENA_BYTES {project.arena.size}" in header


def test_bad_name_and_unsupported_graph_outputs_are_rejected(trained_cnn, tmp_path):
    from mico.frontend import export_graph
    from mico.ir.dtypes import DataType
    from mico.ir.types import TensorType

    float_graph = export_graph(trained_cnn, torch.zeros(1, 1, 8, 8))
    with pytest.raises(CompileError, match=r"'my-model' is not a C identifier"):
        emit_c_project(float_graph, tmp_path, "my-model")
    out = float_graph.outputs[0]
    out.type = TensorType(out.type.shape, DataType.INT64)
    with pytest.raises(CompileError, match=r"one graph output, float32 \(dynamic mode\) or int32"):
        emit_c_project(float_graph, tmp_path, "cnn")


def test_compiler_errors_surface_as_build_error(trained_cnn, calibration_batches, tmp_path):
    graph = _lowered(trained_cnn, calibration_batches, "conv1=8/8,conv2=8/8,fc=8/8")
    project = emit_c_project(graph, tmp_path, "cnn")
    with open(tmp_path / "cnn.c", "a") as f:
        f.write("\nstatic int unused_variable_breaks_werror;\n")
    with pytest.raises(BuildError, match=r"building .* failed"):
        host.build(project)
    with pytest.raises(BuildError, match="build the project first"):
        host.run(project, np.zeros((1, 1, 8, 8), np.float32))


@pytest.mark.parametrize(
    ("in_bits", "groups", "channels", "kernel", "dil_w", "entry"),
    [
        (8, 1, (3, 16), (3, 3), 1, "mico_qconv2d_tiled"),
        (4, 16, (16, 16), (3, 3), 1, "mico_qconv2d_depthwise3x3"),
        (2, 16, (16, 16), (3, 3), 2, "mico_qconv2d_tiled"),  # column dilation: im2col
        (8, 16, (16, 16), (5, 5), 1, "mico_qconv2d_tiled"),
        (8, 16, (16, 32), (3, 3), 1, "mico_qconv2d_tiled"),  # channel multiplier 2
        (32, 1, (3, 16), (3, 3), 1, "mico_qconv2d_elementwise"),  # int32 input
        (32, 16, (16, 16), (3, 3), 1, "mico_qconv2d_elementwise"),
    ],
)
def test_conv2d_entry_point_follows_the_dispatch_rule(
    in_bits, groups, channels, kernel, dil_w, entry
):
    """The emitter calls the path mico_qconv2d would take (so unused paths can be dropped)."""
    assert conv2d_kernel(in_bits, groups, *channels, kernel, dil_w) == entry
