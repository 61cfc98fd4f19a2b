"""The host target: build a generated project with the machine's C compiler and run it."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from mico.codegen.project import CProject
from mico.errors import BuildError
from mico.targets.io import TAIL, read_outputs, require_tools, write_samples

TOOLS = {"make": "make", "cc": "gcc"}


def build(project: CProject, timeout: float = 300) -> Path:
    """``make TARGET=host`` in the project; return the executable. Compiler errors raise."""
    require_tools("host", TOOLS)
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
            f"{(result.stdout + result.stderr)[-TAIL:]}"
        )
    return project.directory / project.name


def run(project: CProject, samples: np.ndarray, timeout: float = 300) -> np.ndarray:
    """Run the built program on ``samples`` (N, *input_shape[1:]); return int32 (N, outputs)."""
    exe = project.directory / project.name
    if not exe.exists():
        raise BuildError(f"{exe} does not exist; build the project first")
    with tempfile.TemporaryDirectory(prefix="mico-run-") as tmp:
        inputs, outputs = Path(tmp) / "inputs.bin", Path(tmp) / "outputs.bin"
        count = write_samples(project, samples, inputs)
        result = subprocess.run(
            [str(exe), str(inputs), str(outputs)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if result.returncode != 0:
            raise BuildError(f"{exe} exited with {result.returncode}: {result.stderr[-TAIL:]}")
        return read_outputs(project, outputs, count, str(exe))


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
