"""The host target: build a generated project with the machine's C compiler and run it."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from mico.codegen.project import CProject
from mico.errors import BuildError

_TAIL = 4000


def _require_tools() -> None:
    missing = [tool for tool in ("make", "cc") if shutil.which(tool) is None]
    if missing:
        raise BuildError(
            f"the host build needs {' and '.join(missing)} on PATH; install them "
            "(Debian: apt-get install gcc make)"
        )


def build(project: CProject, timeout: float = 300) -> Path:
    """``make TARGET=host`` in the project; return the executable. Compiler errors raise."""
    _require_tools()
    result = subprocess.run(
        ["make", "-C", str(project.directory), "TARGET=host"],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise BuildError(
            f"building {project.directory} failed (make exit {result.returncode}):\n"
            f"{(result.stdout + result.stderr)[-_TAIL:]}"
        )
    return project.directory / project.name


def run(project: CProject, samples: np.ndarray, timeout: float = 300) -> np.ndarray:
    """Run the built program on ``samples`` (N, *input_shape[1:]); return int32 (N, outputs)."""
    exe = project.directory / project.name
    if not exe.exists():
        raise BuildError(f"{exe} does not exist; build the project first")
    data = np.ascontiguousarray(samples, dtype=np.float32)
    per_sample = int(np.prod(project.input_shape[1:]))
    if data.size != len(data) * per_sample:
        raise BuildError(
            f"samples of shape {data.shape[1:]} do not match the model input "
            f"{project.input_shape[1:]}"
        )
    n_out = int(np.prod(project.output_shape[1:]))
    with tempfile.TemporaryDirectory(prefix="mico-run-") as tmp:
        inputs, outputs = Path(tmp) / "inputs.bin", Path(tmp) / "outputs.bin"
        data.astype("<f4").tofile(inputs)
        result = subprocess.run(
            [str(exe), str(inputs), str(outputs)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if result.returncode != 0:
            raise BuildError(f"{exe} exited with {result.returncode}: {result.stderr[-_TAIL:]}")
        out = np.fromfile(outputs, dtype="<i4")
    if out.size != len(data) * n_out:
        raise BuildError(f"{exe} wrote {out.size} integers, expected {len(data) * n_out}")
    return out.reshape(len(data), *project.output_shape[1:])


def section_sizes(project: CProject) -> dict[str, int]:
    """``size`` of the model's object code (text, data, bss), when binutils is present."""
    exe = project.directory / project.name
    if shutil.which("size") is None or not exe.exists():
        return {}
    result = subprocess.run(
        ["size", "-A", "-d", str(exe)], capture_output=True, text=True, check=False
    )
    sizes: dict[str, int] = {}
    for line in result.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].startswith(".") and parts[1].isdigit():
            sizes[parts[0]] = int(parts[1])
    return sizes
