"""The host target: build a generated project with the machine's C compiler and run it.

``build(project, cc="gcc" | "clang", sanitize=False)`` runs ``make TARGET=host CC=cc
[SANITIZE=1]``; ``sanitize`` adds AddressSanitizer and UndefinedBehaviorSanitizer (any report
stops the program, and ``run`` raises with it). ``run`` executes the program ``build`` made last.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from mico.codegen.makefile import executable
from mico.codegen.project import CProject
from mico.errors import BuildError
from mico.targets.io import (
    no_outputs,
    read_outputs,
    require_tools,
    run_make,
    run_program,
    write_samples,
)

DEFAULT_CC = "gcc"
TOOLS = {"make": "make", "cc": "gcc"}
COMPILER_PACKAGES = {"cc": "gcc", "gcc": "gcc", "clang": "clang"}
# what a sanitized program reads from the environment: report with a stack, exit non-zero
SANITIZER_ENV = {
    "ASAN_OPTIONS": "abort_on_error=0:exitcode=1",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
}


def compiler_package(cc: str) -> str:
    """The Debian package that provides the compiler ``cc`` (``clang-14`` -> ``clang-14``)."""
    base = Path(cc).name
    return COMPILER_PACKAGES.get(base, base)


def build(
    project: CProject, cc: str = DEFAULT_CC, sanitize: bool = False, timeout: float = 300
) -> Path:
    """``make TARGET=host CC=cc`` (``SANITIZE=1`` with ``sanitize``); return the executable.

    A missing compiler or a compiler error raises BuildError with the tool's output.
    """
    require_tools("host", {"make": "make", cc: compiler_package(cc)})
    variables = ["TARGET=host", f"CC={cc}", f"SANITIZE={int(sanitize)}"]
    try:
        run_make(project, variables, timeout, f"building {project.directory} with {cc}")
    except BuildError as exc:
        if sanitize and "libclang_rt" in str(exc):
            raise BuildError(
                f"{exc}\n{cc} has no sanitizer runtime; install it (Debian: apt-get install "
                "libclang-rt-<version>-dev) or build with gcc"
            ) from None
        raise
    return project.directory / executable(project.name, "host")


def run(project: CProject, samples: np.ndarray, timeout: float = 300) -> np.ndarray:
    """Run the built program on ``samples`` (N, *input_shape[1:]); return the outputs
    (N, *output_shape[1:]) as ``project.output_dtype``. A crash, a sanitizer report, a bad
    exit or a time-out raises BuildError with the program's output."""
    exe = project.directory / executable(project.name, "host")
    if not exe.exists():
        raise BuildError(f"{exe} does not exist; build the project first")
    with tempfile.TemporaryDirectory(prefix="mico-run-") as tmp:
        inputs, outputs = Path(tmp) / "inputs.bin", Path(tmp) / "outputs.bin"
        count = write_samples(project, samples, inputs)
        if count == 0:
            return no_outputs(project)
        env = {**SANITIZER_ENV, **os.environ}  # the caller's settings win
        run_program([str(exe), str(inputs), str(outputs)], exe.name, timeout, env=env)
        return read_outputs(project, outputs, count, str(exe))


def section_sizes(project: CProject) -> dict[str, int]:
    """``size`` of the model's object code (text, data, bss), when binutils is present."""
    exe = project.directory / executable(project.name, "host")
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


def run_debug(
    project: CProject, sample: np.ndarray, timeout: float = 300
) -> list[tuple[str, bytes]]:
    """Build a copy of the project with ``DEBUG=1``, run it on one sample and return every
    intermediate tensor it recorded, ``(node name, bytes)`` in schedule order. The project's
    own build is left untouched."""
    from mico.execute.layerwise import read_intermediates

    require_tools("host", TOOLS)
    with tempfile.TemporaryDirectory(prefix="mico-debug-") as tmp:
        copy = dataclasses.replace(project, directory=Path(tmp) / "project")
        shutil.copytree(project.directory, copy.directory)
        run_make(copy, ["TARGET=host", "DEBUG=1"], timeout, f"building {copy.directory} (DEBUG=1)")
        exe = copy.directory / executable(project.name, "host")
        write_samples(project, np.asarray(sample)[None], copy.directory / "inputs.bin")
        run_program([str(exe)], exe.name, timeout, cwd=copy.directory, env=dict(os.environ))
        return read_intermediates(copy.directory / "intermediates.bin")
