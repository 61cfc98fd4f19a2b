"""The rv64 target: 64-bit RISC-V Linux programs (rv64gc, glibc linked statically) under
qemu-user.

``build`` runs ``make TARGET=rv64`` (``riscv64-linux-gnu-gcc -static``); ``run`` writes the
samples to a scratch directory and runs ``qemu-riscv64 <model>.rv64 inputs.bin outputs.bin``
there. A static executable needs no RISC-V sysroot at run time.

No instruction counts: qemu-user has no ``-icount``, and the ``instret`` CSR ``main.c`` prints
reads the host's time-stamp counter under it, so those lines are ignored. rv32 under
qemu-system (``mico.targets.rv32``) is the target that counts instructions.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from mico.codegen.makefile import QEMU_RV64, RV64_CC, executable
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

LIBC_PACKAGE = "libc6-dev-riscv64-cross"
TOOLS = {
    "make": "make",
    RV64_CC: f"gcc-riscv64-linux-gnu {LIBC_PACKAGE}",
    QEMU_RV64: "qemu-user",
}
_libc_found: dict[str, bool] = {}  # compiler path -> whether it finds a static libc


def _has_libc(compiler: str) -> bool:
    """Whether ``compiler`` finds ``libc.a`` (the cross libc is a package of its own)."""
    if compiler not in _libc_found:
        try:
            found = subprocess.run(
                [compiler, "-print-file-name=libc.a"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            ).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            found = ""
        _libc_found[compiler] = Path(found).is_absolute() and Path(found).exists()
    return _libc_found[compiler]


def available() -> bool:
    """Whether the riscv64 Linux cross compiler, its static libc and qemu-riscv64 are installed."""
    if not all(shutil.which(tool) for tool in TOOLS):
        return False
    return _has_libc(shutil.which(RV64_CC) or RV64_CC)


def missing_tools_hint() -> str:
    """What to install for the rv64 target."""
    return "install " + " ".join(sorted(set(" ".join(TOOLS.values()).split()) - {"make"}))


def build(project: CProject, timeout: float = 300) -> Path:
    """``make TARGET=rv64``; return the executable. Compiler or linker errors raise BuildError."""
    require_tools("rv64", {t: TOOLS[t] for t in ("make", RV64_CC)})
    compiler = shutil.which(RV64_CC) or RV64_CC
    if not _has_libc(compiler):
        raise BuildError(
            f"{RV64_CC} finds no static C library; install it (Debian: apt-get install "
            f"{LIBC_PACKAGE})"
        )
    run_make(project, ["TARGET=rv64"], timeout, f"building {project.directory} for rv64", "rv64")
    return project.directory / executable(project.name, "rv64")


def run(project: CProject, samples: np.ndarray, timeout: float = 300) -> np.ndarray:
    """Run the executable under qemu-riscv64 on ``samples`` (N, *input_shape[1:]); return the
    outputs (N, *output_shape[1:]) as ``project.output_dtype``. A crash, a bad exit or a
    time-out raises BuildError with the program's output."""
    require_tools("rv64", {QEMU_RV64: TOOLS[QEMU_RV64]})
    exe = project.directory / executable(project.name, "rv64")
    if not exe.exists():
        raise BuildError(f"{exe} does not exist; build the project for rv64 first")
    with tempfile.TemporaryDirectory(prefix="mico-rv64-") as tmp:
        work = Path(tmp)
        count = write_samples(project, samples, work / "inputs.bin")
        if count == 0:
            return no_outputs(project)
        weights = []  # --weights-file: the project's own file
        if project.weights_file is not None:
            weights = [str(project.directory / project.weights_file)]
        run_program(
            [QEMU_RV64, str(exe), "inputs.bin", "outputs.bin", *weights],
            f"{exe.name} under {QEMU_RV64}",
            timeout,
            cwd=work,
        )
        return read_outputs(project, work / "outputs.bin", count, f"{exe.name} under qemu")
