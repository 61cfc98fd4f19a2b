"""The rv32 target: rv32imac bare metal (picolibc, semihosting) under qemu-system-riscv32.

``build`` runs ``make TARGET=rv32`` in a generated project; ``run`` copies the samples next to
the ELF in a scratch directory, runs qemu with ``-icount shift=0`` (one instruction per
virtual clock tick, so counts repeat exactly), reads ``outputs.bin`` back through
semihosting and returns the outputs with each inference's retired-instruction count (the
``instret`` CSR, read by ``main.c`` around every call) and how deep each inference's stack went
(``main.c`` paints the stack below it before the call and finds the lowest word overwritten
after it). ``model_sizes`` compiles the model
and its kernels alone (no libc, no ``main``) and reports their sections: the flash and RAM
the model itself needs on the device.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mico.codegen.makefile import (
    QEMU_RV32,
    RV32_ARCH,
    RV32_CC,
    RV32_GC,
    RV32_SECTIONS,
    executable,
)
from mico.codegen.project import CProject
from mico.errors import BuildError
from mico.targets.io import (
    TAIL,
    exit_status,
    no_outputs,
    read_outputs,
    require_tools,
    run_make,
    text,
    write_samples,
)

_INSTRET = re.compile(r"^instret (\d+)\s*$", re.M)
_STACK = re.compile(r"^stack (> )?(\d+)\s*$", re.M)
SIZE_TOOL = "riscv64-unknown-elf-size"
TOOLS = {
    "make": "make",
    RV32_CC: "gcc-riscv64-unknown-elf picolibc-riscv64-unknown-elf",
    SIZE_TOOL: "binutils-riscv64-unknown-elf",
    "qemu-system-riscv32": "qemu-system-misc",
}


def available() -> bool:
    """Whether the rv32 cross compiler, binutils and qemu are installed."""
    return all(shutil.which(tool) for tool in TOOLS)


def missing_tools_hint() -> str:
    """What to install for the rv32 target."""
    return "install " + " ".join(sorted(set(" ".join(TOOLS.values()).split()) - {"make"}))


@dataclass(frozen=True)
class Rv32Run:
    """Outputs of every sample and the instructions each inference retired."""

    outputs: np.ndarray
    instructions: np.ndarray  # int64, one count per sample
    #: bytes of stack each inference used below main's frame (empty: not measured)
    stack: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: an inference reached the bottom of the painted probe: ``stack`` is a lower bound
    stack_beyond_probe: bool = False

    @property
    def instructions_per_inference(self) -> int:
        """The largest count (counts differ only where kernels branch on data)."""
        return int(self.instructions.max()) if self.instructions.size else 0

    @property
    def stack_bytes(self) -> int | None:
        """The deepest stack of any inference (None when the program did not measure it)."""
        return int(self.stack.max()) if self.stack.size else None


def build(project: CProject, timeout: float = 300) -> Path:
    """``make TARGET=rv32``; return the ELF. Compiler or linker errors raise BuildError."""
    require_tools("rv32", {t: TOOLS[t] for t in ("make", RV32_CC)})
    run_make(project, ["TARGET=rv32"], timeout, f"building {project.directory} for rv32", "rv32")
    return project.directory / executable(project.name, "rv32")


def run(
    project: CProject, samples: np.ndarray, timeout: float = 600, weights: Path | None = None
) -> Rv32Run:
    """Run the ELF under qemu on ``samples``; a crash, bad exit or time-out raises BuildError.
    A project compiled with ``--weights-file`` reads ``weights`` (default: its own
    ``<name>.bin``), copied beside the samples as ``<name>.bin`` (semihosting opens it)."""
    require_tools("rv32", {"qemu-system-riscv32": TOOLS["qemu-system-riscv32"]})
    elf = project.directory / executable(project.name, "rv32")
    if not elf.exists():
        raise BuildError(f"{elf} does not exist; build the project for rv32 first")
    with tempfile.TemporaryDirectory(prefix="mico-rv32-") as tmp:
        work = Path(tmp)
        count = write_samples(project, samples, work / "inputs.bin")
        if count == 0:
            return Rv32Run(no_outputs(project), np.zeros(0, dtype=np.int64))
        if project.weights_file is not None:
            source = weights or project.directory / project.weights_file
            shutil.copyfile(source, work / f"{project.name}.bin")
        command = [*shlex.split(QEMU_RV32), "-kernel", str(elf)]
        try:
            result = subprocess.run(
                command, cwd=work, capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired as exc:
            output = (text(exc.stdout) + text(exc.stderr))[-TAIL:]  # console: stderr
            raise BuildError(
                f"qemu-system-riscv32 ran {elf.name} for more than {timeout:g} s and was "
                f"stopped; its last output:\n{output}"
            ) from None
        if result.returncode != 0:
            raise BuildError(
                f"{elf.name} under qemu failed ({exit_status(result.returncode)}):\n"
                f"{(result.stdout + result.stderr)[-TAIL:]}"
            )
        outputs = read_outputs(project, work / "outputs.bin", count, f"{elf.name} under qemu")
    console = result.stdout + result.stderr  # qemu prints the semihosting console on stderr
    counts = np.array([int(c) for c in _INSTRET.findall(console)], dtype=np.int64)
    if counts.size != count:
        raise BuildError(
            f"{elf.name} reported {counts.size} instruction counts for {count} samples"
        )
    depths = _STACK.findall(console)
    stack = np.array([int(n) for _, n in depths], dtype=np.int64)
    if stack.size not in (0, count):
        raise BuildError(f"{elf.name} reported {stack.size} stack depths for {count} samples")
    return Rv32Run(outputs, counts, stack, any(beyond for beyond, _ in depths))


def model_sizes(project: CProject) -> dict[str, int]:
    """Sections of the model and its kernels, linked alone for rv32 (bytes).

    The sources are compiled as the rv32 build compiles them (one section per function) and
    linked with ``--gc-sections`` from ``<name>_run``: what the model calls, and nothing it
    does not. ``flash`` = text + rodata + data (code, packed weights, initial values), ``ram`` =
    data + bss (the arena and other state). libc and ``main.c`` are not counted.
    """
    require_tools("rv32", {t: TOOLS[t] for t in (RV32_CC, SIZE_TOOL)})
    sources = [f for f in project.files if f.endswith(".c") and f != "main.c"]
    with tempfile.TemporaryDirectory(prefix="mico-rv32-size-") as tmp:
        objects = []
        for source in sources:
            obj = Path(tmp) / (Path(source).stem + ".o")
            _tool(
                [RV32_CC, *shlex.split(RV32_ARCH), "--specs=picolibc.specs", "-O2", "-std=c99",
                 *shlex.split(RV32_SECTIONS), "-c", str(project.directory / source),
                 "-o", str(obj)],
                f"compiling {source} for rv32",
            )  # fmt: skip
            objects.append(str(obj))
        elf = Path(tmp) / "model.elf"
        # the toolchain's default linker script: separate .text / .rodata, no memory regions
        _tool(
            [RV32_CC, *shlex.split(RV32_ARCH), "-nostdlib", "-nostartfiles", RV32_GC,
             f"-Wl,-e,{project.name}_run", "-Wl,--unresolved-symbols=ignore-all",
             "-o", str(elf), *objects],
            f"linking {project.name} for rv32",
        )  # fmt: skip
        listing = subprocess.run(
            [SIZE_TOOL, "-A", "-d", str(elf)], capture_output=True, text=True, check=False
        ).stdout
    return _section_totals(listing)


def _tool(command: list[str], what: str) -> None:
    """Run a toolchain command; a failure raises BuildError with its output."""
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BuildError(f"{what} failed:\n{result.stderr[-TAIL:]}")


def _section_totals(listing: str) -> dict[str, int]:
    """text / rodata / data / bss totals (and flash, ram) of a ``size -A -d`` listing."""
    totals = {"text": 0, "rodata": 0, "data": 0, "bss": 0}
    for line in listing.splitlines():
        parts = line.split()
        if len(parts) < 2 or not parts[1].isdigit() or not parts[0].startswith("."):
            continue
        section = parts[0]
        for key in ("text", "rodata", "data", "bss"):
            if section == f".{key}" or section.startswith(f".{key}."):
                totals[key] += int(parts[1])
                break
        else:
            if section.startswith((".srodata", ".sdata2")):
                totals["rodata"] += int(parts[1])
            elif section.startswith(".sdata"):
                totals["data"] += int(parts[1])
            elif section.startswith(".sbss"):
                totals["bss"] += int(parts[1])
    totals["flash"] = totals["text"] + totals["rodata"] + totals["data"]
    totals["ram"] = totals["data"] + totals["bss"]
    return totals
