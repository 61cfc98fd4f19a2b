"""The rv64 target: the generated C, built for riscv64 Linux (static glibc) and run under
qemu-riscv64 (qemu-user), equals the Python reference bit for bit; failures raise BuildError."""

from __future__ import annotations

import numpy as np
import pytest

from mico.errors import BuildError
from mico.targets import rv64

needs_rv64 = pytest.mark.skipif(
    not rv64.available(), reason="rv64 toolchain missing: " + rv64.missing_tools_hint()
)


@needs_rv64
def test_rv64_output_equals_python_reference(project, samples, reference):
    exe = rv64.build(project)
    assert exe == project.directory / "cnn.rv64"
    header = exe.read_bytes()[:20]
    assert header[:4] == b"\x7fELF" and header[4] == 2  # ELFCLASS64
    assert int.from_bytes(header[18:20], "little") == 243  # EM_RISCV
    command = (project.directory / ".cnn.rv64.cmd").read_text()
    assert "-static" in command and "-ffp-contract=off" in command
    outputs = rv64.run(project, samples)
    assert outputs.dtype == np.int32 and outputs.shape == (len(samples), 10)
    np.testing.assert_array_equal(outputs, reference)


@needs_rv64
def test_running_before_building_and_bad_samples_raise(static_graph, tmp_path):
    from mico.codegen import emit_c_project

    project = emit_c_project(static_graph, tmp_path, "cnn")
    with pytest.raises(BuildError, match=r"cnn\.rv64 does not exist; build the project for rv64"):
        rv64.run(project, np.zeros((1, 1, 8, 8), np.float32))
    rv64.build(project)
    with pytest.raises(BuildError, match="do not match the model input"):
        rv64.run(project, np.zeros((2, 1, 4, 4), np.float32))


@needs_rv64
def test_a_crash_under_qemu_surfaces_with_the_signal_and_the_output(bad_project, samples):
    project = bad_project("abort")
    rv64.build(project)
    with pytest.raises(
        BuildError, match=r"(?s)cnn\.rv64 under qemu-riscv64 failed \(killed by SIGABRT\):.*abort"
    ):
        rv64.run(project, samples[:1])


@needs_rv64
def test_a_program_that_hangs_under_qemu_is_stopped(bad_project, samples):
    project = bad_project("loop")
    rv64.build(project)
    with pytest.raises(BuildError, match=r"under qemu-riscv64 ran for more than 0\.3 s"):
        rv64.run(project, samples[:1], timeout=0.3)


@needs_rv64
def test_compiler_errors_surface_with_the_tool_output(bad_project):
    project = bad_project("exit3")
    (project.directory / "cnn.c").write_text("int broken = ;\n")
    with pytest.raises(BuildError, match=r"(?s)building .* for rv64 failed.*cnn\.c"):
        rv64.build(project)


def test_missing_tools_name_the_packages(project, monkeypatch):
    monkeypatch.setattr("shutil.which", lambda tool: None if tool == "qemu-riscv64" else "/x")
    assert not rv64.available()
    hint = rv64.missing_tools_hint()
    for package in ("qemu-user", "gcc-riscv64-linux-gnu", "libc6-dev-riscv64-cross"):
        assert package in hint
    with pytest.raises(
        BuildError, match=r"rv64 target needs qemu-riscv64.*apt-get install qemu-user"
    ):
        rv64.run(project, np.zeros((1, 1, 8, 8), np.float32))
    monkeypatch.setattr("shutil.which", lambda tool: None)
    with pytest.raises(
        BuildError,
        match=r"needs make, riscv64-linux-gnu-gcc on PATH.*"
        r"gcc-riscv64-linux-gnu libc6-dev-riscv64-cross make",
    ):
        rv64.build(project)


def test_a_missing_cross_libc_is_named(project, monkeypatch):
    monkeypatch.setattr("shutil.which", lambda tool: "/x")
    monkeypatch.setattr(rv64, "_has_libc", lambda compiler: False)
    assert not rv64.available()
    with pytest.raises(BuildError, match=r"finds no static C library.*libc6-dev-riscv64-cross"):
        rv64.build(project)
