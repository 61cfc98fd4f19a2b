"""What the targets share: missing tools, sample and output files."""

from __future__ import annotations

import numpy as np
import pytest

from mico.codegen.project import CProject
from mico.errors import BuildError
from mico.targets import host, rv32
from mico.targets.io import (
    exit_status,
    read_outputs,
    require_tools,
    run_program,
    text,
    write_samples,
)

PROJECT = CProject(None, "m", [], None, None, (1, 1, 2, 2), (1, 3), 1.0, [])  # type: ignore[arg-type]


def test_missing_tools_name_the_tool_and_the_debian_package(monkeypatch):
    monkeypatch.setattr(
        "shutil.which", lambda tool: None if tool == "qemu-system-riscv32" else "/x"
    )
    with pytest.raises(BuildError, match=r"rv32 target needs qemu-system-riscv32 on PATH.*"
                       r"apt-get install qemu-system-misc"):  # fmt: skip
        require_tools("rv32", rv32.TOOLS)
    assert not rv32.available()
    assert "qemu-system-misc" in rv32.missing_tools_hint()
    require_tools("host", host.TOOLS)  # present


def test_samples_round_trip_and_shape_checks(tmp_path):
    samples = np.arange(8, dtype=np.float64).reshape(2, 1, 2, 2)
    assert write_samples(PROJECT, samples, tmp_path / "inputs.bin") == 2
    np.testing.assert_array_equal(
        np.fromfile(tmp_path / "inputs.bin", dtype="<f4"), samples.ravel().astype(np.float32)
    )
    with pytest.raises(BuildError, match=r"samples of shape \(1, 3, 3\) do not match"):
        write_samples(PROJECT, np.zeros((2, 1, 3, 3)), tmp_path / "bad.bin")


def test_outputs_are_checked_and_shaped(tmp_path):
    path = tmp_path / "outputs.bin"
    with pytest.raises(BuildError, match=r"prog wrote no outputs\.bin"):
        read_outputs(PROJECT, path, 2, "prog")
    np.arange(6, dtype="<i4").tofile(path)
    assert read_outputs(PROJECT, path, 2, "prog").tolist() == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(BuildError, match="prog wrote 6 values, expected 9"):
        read_outputs(PROJECT, path, 3, "prog")


def test_exit_status_names_signals_and_output_is_text():
    assert exit_status(3) == "exit 3"
    assert exit_status(-6) == "killed by SIGABRT"
    assert exit_status(-11) == "killed by SIGSEGV"
    assert exit_status(-200) == "killed by signal 200"
    assert text(None) == "" and text(b"ok\xff") == "ok\ufffd" and text("ok") == "ok"


def test_run_program_reports_failures_and_time_outs():
    assert run_program(["true"], "true", 10).returncode == 0
    with pytest.raises(BuildError, match=r"(?s)sh failed \(exit 4\):.*said no"):
        run_program(["sh", "-c", "echo said no >&2; exit 4"], "sh", 10)
    with pytest.raises(BuildError, match=r"(?s)sh failed \(killed by SIGKILL\)"):
        run_program(["sh", "-c", "kill -9 $$"], "sh", 10)
    with pytest.raises(BuildError, match=r"(?s)sleep ran for more than 0\.2 s and was stopped"):
        run_program(["sleep", "5"], "sleep", 0.2)
