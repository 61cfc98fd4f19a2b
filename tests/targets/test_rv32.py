"""The rv32 target: the generated C, built for rv32imac bare metal and run under
qemu-system-riscv32, equals the Python reference bit for bit; instruction counts repeat."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
import torch

from mico.codegen import emit_c_project
from mico.errors import BuildError
from mico.execute import run_graph
from mico.pipeline import lower_model, quantize_ptq
from mico.quant import QuantPlan
from mico.targets import rv32

pytestmark = pytest.mark.skipif(
    not rv32.available(), reason="rv32 toolchain missing: " + rv32.missing_tools_hint()
)

PLANS = [
    "conv1=8/8,conv2=4/4,fc=2/8",
    "conv1=1/1,conv2=7/2,fc=1.58/3",
    "conv1=2/6,conv2=5/7,fc=8/1",
]


def _project(model, batches, plan, directory):
    graph = lower_model(
        quantize_ptq(model, QuantPlan.parse(plan), batches), torch.zeros(1, 1, 8, 8), "cnn"
    )
    return graph, emit_c_project(graph, directory, "cnn")


@pytest.mark.parametrize("plan", PLANS)
def test_rv32_output_equals_python_reference(
    plan, trained_cnn, calibration_batches, digits_split, tmp_path
):
    graph, project = _project(trained_cnn, calibration_batches, plan, tmp_path / "c")
    elf = rv32.build(project)
    assert elf.name == "cnn.elf" and elf.read_bytes()[:4] == b"\x7fELF"
    assert elf.read_bytes()[4] == 1  # ELFCLASS32
    samples = digits_split.x_test[:60]
    result = rv32.run(project, samples)
    reference = run_graph(graph, samples)[0].numpy()
    assert result.outputs.dtype == np.int32 and result.outputs.shape == (60, 10)
    np.testing.assert_array_equal(result.outputs, reference)
    assert result.instructions.shape == (60,)
    assert result.instructions.min() > 1000
    again = rv32.run(project, samples[:5])
    np.testing.assert_array_equal(again.instructions, result.instructions[:5])  # -icount: exact
    # each inference's stack depth, measured below main: the kernels' frames, never the probe's
    assert result.stack.shape == (60,) and not result.stack_beyond_probe
    assert 64 < result.stack_bytes < 65536 and result.stack.min() == result.stack_bytes
    np.testing.assert_array_equal(again.stack, result.stack[:5])


def test_stack_deeper_than_the_probe_is_a_lower_bound(trained_cnn, calibration_batches, tmp_path):
    """MICO_STACK_PROBE sets how far below main the program looks; an inference that goes
    deeper is reported as "> probe" (a lower bound), and 0 turns the measurement off."""
    _, project = _project(trained_cnn, calibration_batches, PLANS[0], tmp_path / "c")
    rv32.build(project)
    samples = np.zeros((2, 1, 8, 8), np.float32)
    full = rv32.run(project, samples)
    assert full.stack_bytes is not None and full.stack_bytes > 64
    make = ["make", "-s", "-C", str(project.directory), "TARGET=rv32"]
    subprocess.run([*make, "MICO_STACK_PROBE=64"], check=True, capture_output=True)
    shallow = rv32.run(project, samples)
    assert shallow.stack_beyond_probe and shallow.stack_bytes <= 64
    np.testing.assert_array_equal(shallow.outputs, full.outputs)
    np.testing.assert_array_equal(shallow.instructions, full.instructions)  # outside the count
    subprocess.run([*make, "MICO_STACK_PROBE=0"], check=True, capture_output=True)
    off = rv32.run(project, samples)
    assert off.stack_bytes is None and not off.stack_beyond_probe
    np.testing.assert_array_equal(off.instructions, full.instructions)


def test_model_sizes_count_the_model_not_libc(trained_cnn, calibration_batches, tmp_path):
    _, project = _project(trained_cnn, calibration_batches, PLANS[0], tmp_path / "c")
    sizes = rv32.model_sizes(project)
    assert sizes["ram"] >= project.arena.size  # the arena is in .bss
    assert sizes["rodata"] >= project.weight_bytes  # packed weights are const data
    assert sizes["flash"] == sizes["text"] + sizes["rodata"] + sizes["data"]
    # at most what the model's own objects hold (gc-sections drops, libc adds nothing) ...
    own = 0
    for source in (f for f in project.files if f.endswith(".c") and f != "main.c"):
        obj = tmp_path / (source + ".o")
        subprocess.run(
            [rv32.RV32_CC, *rv32.RV32_ARCH.split(), "--specs=picolibc.specs", "-O2", "-std=c99",
             *rv32.RV32_SECTIONS.split(), "-c", str(project.directory / source), "-o", str(obj)],
            check=True, capture_output=True,
        )  # fmt: skip
        listing = subprocess.run(
            [rv32.SIZE_TOOL, "-A", "-d", str(obj)], check=True, capture_output=True, text=True
        ).stdout
        own += rv32._section_totals(listing)["flash"]
    assert sizes["flash"] <= own
    # ... while the whole program links libc's code, which the figure leaves out
    symbols = subprocess.run(
        [rv32.SIZE_TOOL.replace("-size", "-nm"), str(rv32.build(project))],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert "memset" in symbols or "memcpy" in symbols


def test_model_sizes_link_only_the_kernel_paths_the_model_calls(
    trained_cnn, calibration_batches, tmp_path
):
    """The cnn's convolutions call the im2col path directly: linked with --gc-sections, the
    depthwise and dispatch code is dropped. Calling the dispatcher instead pulls it back in."""
    _, project = _project(trained_cnn, calibration_batches, PLANS[0], tmp_path / "c")
    source = project.directory / "cnn.c"
    text = source.read_text()
    assert "mico_qconv2d_tiled(" in text and "mico_qconv2d(" not in text
    direct = rv32.model_sizes(project)
    source.write_text(text.replace("mico_qconv2d_tiled(", "mico_qconv2d("))
    dispatched = rv32.model_sizes(project)
    # the same weights; the dispatcher adds only the word kernels' tables of both widths
    # (mico_qconv2d_tiled_sub4 / _sub2, 24 B each)
    assert 0 <= dispatched["rodata"] - direct["rodata"] <= 48
    assert dispatched["text"] > direct["text"] + 1000  # the depthwise path and its helpers
    rv32.build(project)  # the generated Makefile links the same way, and still links


def test_running_before_building_and_bad_samples_raise(trained_cnn, calibration_batches, tmp_path):
    _, project = _project(trained_cnn, calibration_batches, PLANS[0], tmp_path / "c")
    with pytest.raises(BuildError, match=r"cnn\.elf does not exist; build the project for rv32"):
        rv32.run(project, np.zeros((1, 1, 8, 8), np.float32))
    rv32.build(project)
    with pytest.raises(BuildError, match="do not match the model input"):
        rv32.run(project, np.zeros((2, 1, 4, 4), np.float32))


def test_emulator_time_out_is_reported(trained_cnn, calibration_batches, tmp_path):
    _, project = _project(trained_cnn, calibration_batches, PLANS[0], tmp_path / "c")
    rv32.build(project)
    with pytest.raises(BuildError, match=r"ran cnn\.elf for more than .* and was stopped"):
        # far more work than 0.05 s allows on any machine (a few seconds of emulation)
        rv32.run(project, np.zeros((20000, 1, 8, 8), np.float32), timeout=0.05)


def test_compiler_errors_surface_with_the_tool_output(trained_cnn, calibration_batches, tmp_path):
    _, project = _project(trained_cnn, calibration_batches, PLANS[0], tmp_path / "c")
    (project.directory / "cnn.c").write_text("int broken = ;\n")
    with pytest.raises(BuildError, match=r"(?s)building .* for rv32 failed.*cnn\.c"):
        rv32.build(project)


def test_unknown_make_target_is_refused(trained_cnn, calibration_batches, tmp_path):
    _, project = _project(trained_cnn, calibration_batches, PLANS[0], tmp_path / "c")
    result = subprocess.run(
        ["make", "-C", str(project.directory), "TARGET=avr"], capture_output=True, text=True
    )
    assert result.returncode != 0
    assert (
        "TARGET=avr is not supported; use TARGET=host, TARGET=rv32 or TARGET=rv64" in result.stderr
    )
