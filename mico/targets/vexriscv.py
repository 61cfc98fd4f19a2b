"""The vexriscv target: cycle-accurate runs of the generated C on a VexRiscv RTL core.

The core is one of the verilog files of the ``pythondata-cpu-vexriscv`` package (VexRiscv as
LiteX configures it), verilated with mico's test bench (``vexriscv_bench/bench.cpp``) into a
simulator, built once per variant and cached in ``$MICO_CACHE/vexriscv`` (``~/.cache/mico``).
The bench gives the core single-cycle RAM at 0x40000000 and I/O registers through which the
program's ``fopen`` / ``fread`` / ``fwrite`` / ``printf`` reach files in the run directory.

``build`` runs ``make TARGET=vexriscv`` in a generated project: the same compiler, flags,
picolibc and ``main.c`` as the rv32 target, linked for the bench's memory map with the bench's
system calls (``vexriscv_bench/``) instead of semihosting. ``run`` copies the samples next to
the ELF in a scratch directory, runs the simulator and returns the outputs with, for each
inference, the instructions it retired (``main.c`` reads the core's ``instret`` CSR around
every call and prints the difference) and the cycles it took (the bench notes the cycle at
which each of those two ``instret`` reads retires: the mcycle difference around the call).
On the IMAC variant (rv32imac, the rv32 target's ISA) the program is the rv32 program, so
the instruction counts equal qemu's.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mico.codegen.makefile import RV32_CC, executable
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

#: the bench's sources: bench.cpp (the simulator), the program's linker script, crt and syscalls
BENCH_DIR = Path(__file__).with_name("vexriscv_bench")

#: Variant (``pythondata_cpu_vexriscv/verilog/VexRiscv_<variant>.v``) -> the ISA its programs
#: are built for. Only the variants with the full CSR set (``csrPluginConfig all``: mcycle,
#: minstret and the user-level instret main.c reads) and no debug port are listed.
VARIANTS = {
    "IMAC": "-march=rv32imac -mabi=ilp32",
    "Full": "-march=rv32im -mabi=ilp32",
    "FullCfu": "-march=rv32im -mabi=ilp32",
}
DEFAULT_VARIANT = "IMAC"

#: verilator's flags: the top module of every file is VexRiscv; lint warnings are the generator's
VERILATOR_FLAGS = [
    "--cc", "--exe", "--build", "-j", "2", "-O2",
    "--top-module", "VexRiscv", "--prefix", "VVexRiscv",
    "-Wno-fatal", "-Wno-lint", "-Wno-style",
]  # fmt: skip
SIMULATOR = "vexriscv_sim"
TOOLS = {
    "make": "make",
    RV32_CC: "gcc-riscv64-unknown-elf picolibc-riscv64-unknown-elf",
    "verilator": "verilator",
}
#: the bench's own exit statuses (the program's are below 64)
_BENCH_STATUS = {64: "bad program or arguments", 65: "trap", 66: "cycle limit", 67: "bus error"}
_INSTRET = re.compile(r"^instret (\d+)\s*$", re.M)


def available() -> bool:
    """Whether verilator, the rv32 cross compiler and pythondata-cpu-vexriscv are installed."""
    return all(shutil.which(tool) for tool in TOOLS) and _verilog_dir() is not None


def missing_tools_hint() -> str:
    """What to install for the vexriscv target."""
    hint = "apt-get install verilator gcc-riscv64-unknown-elf picolibc-riscv64-unknown-elf"
    if _verilog_dir() is None:
        hint += "; pip install pythondata-cpu-vexriscv"
    return hint


@dataclass(frozen=True)
class Simulation:
    """One run of a program on the bench: its exit status, console and instret marks."""

    status: int
    stdout: str
    stderr: str
    #: (cycle, value) of every retired instret read, in order (int64, shape (n, 2))
    marks: np.ndarray
    #: cycles from reset to the program's exit
    cycles: int


@dataclass(frozen=True)
class VexRiscvRun:
    """Outputs of every sample, and the instructions and cycles each inference took."""

    outputs: np.ndarray
    instructions: np.ndarray  # int64, one count per sample (minstret around the call)
    cycles: np.ndarray  # int64, one count per sample (mcycle around the call)
    variant: str

    @property
    def instructions_per_inference(self) -> int:
        """The largest count (counts differ only where kernels branch on data)."""
        return int(self.instructions.max()) if self.instructions.size else 0

    @property
    def cycles_per_inference(self) -> int:
        """The largest cycle count."""
        return int(self.cycles.max()) if self.cycles.size else 0


def verilog(variant: str = DEFAULT_VARIANT) -> Path:
    """The verilog file of ``variant``; an unknown variant or a missing package raises."""
    if variant not in VARIANTS:
        raise BuildError(
            f"unknown VexRiscv variant {variant!r}; use one of {', '.join(VARIANTS)} (the "
            "variants with cycle and instret counters)"
        )
    directory = _verilog_dir()
    if directory is None:
        raise BuildError(
            "the vexriscv target needs the VexRiscv verilog: pip install pythondata-cpu-vexriscv"
        )
    path = directory / f"VexRiscv_{variant}.v"
    if not path.is_file():
        raise BuildError(f"{path} is missing; reinstall pythondata-cpu-vexriscv")
    return path


def cache_dir() -> Path:
    """Where verilated simulators live (``$MICO_CACHE/vexriscv`` or ``~/.cache/mico/vexriscv``)."""
    root = os.environ.get("MICO_CACHE") or Path.home() / ".cache" / "mico"
    return Path(root) / "vexriscv"


def simulator(variant: str = DEFAULT_VARIANT, timeout: float = 900) -> Path:
    """The verilated simulator of ``variant``, built on first use and cached.

    The cache entry is named by the variant and a hash of the verilog, the bench source,
    verilator's version and flags, so a change to any of them builds a new one. A failing
    verilator raises BuildError with its output.
    """
    require_tools("vexriscv", {"verilator": "verilator"})
    source = verilog(variant)
    bench = BENCH_DIR / "bench.cpp"
    version = subprocess.run(
        ["verilator", "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    digest = hashlib.sha256()
    for part in (source.read_bytes(), bench.read_bytes(), version.encode(),
                 " ".join(VERILATOR_FLAGS).encode()):  # fmt: skip
        digest.update(hashlib.sha256(part).digest())
    final = cache_dir() / f"{variant}-{digest.hexdigest()[:16]}"
    binary = final / SIMULATOR
    if binary.is_file() and os.access(binary, os.X_OK):
        return binary
    final.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{variant}-", dir=final.parent))
    try:
        command = ["verilator", *VERILATOR_FLAGS, "--Mdir", str(scratch / "obj"),
                   "-o", SIMULATOR, str(source), str(bench)]  # fmt: skip
        try:
            result = subprocess.run(
                command, capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            raise BuildError(
                f"verilating {source.name} took more than {timeout:g} s and was stopped"
            ) from None
        built = scratch / "obj" / SIMULATOR
        if result.returncode != 0 or not built.is_file():
            raise BuildError(
                f"verilator failed to build the {variant} simulator from {source.name} and "
                f"{bench} (exit {result.returncode}); check that verilator >= 5 and a C++ "
                f"compiler are installed. Its output:\n"
                f"{(result.stdout + result.stderr)[-TAIL:]}"
            )
        staged = scratch / "sim"
        staged.mkdir()
        shutil.move(str(built), staged / SIMULATOR)
        try:
            staged.rename(final)  # atomic: a concurrent build of the same entry may win
        except OSError:
            if not binary.is_file():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return binary


def build(project: CProject, variant: str = DEFAULT_VARIANT, timeout: float = 300) -> Path:
    """``make TARGET=vexriscv`` for ``variant``'s ISA; return the ELF. Errors raise BuildError."""
    verilog(variant)  # a known variant, and the package is installed
    arch = VARIANTS[variant]
    require_tools("vexriscv", {t: TOOLS[t] for t in ("make", RV32_CC)})
    run_make(
        project,
        ["TARGET=vexriscv", f"MICO_VEXRISCV={BENCH_DIR}", f"VEXRISCV_ARCH={arch}"],
        timeout,
        f"building {project.directory} for vexriscv ({variant})",
        "vexriscv",
    )
    return project.directory / executable(project.name, "vexriscv")


def simulate(
    elf: Path,
    variant: str = DEFAULT_VARIANT,
    cwd: Path | None = None,
    timeout: float = 600,
    max_cycles: int | None = None,
) -> Simulation:
    """Run ``elf`` on ``variant``'s simulator in ``cwd``; return its status, console and marks.

    The program's own exit status is returned; the bench's failures (an ELF it cannot load, a
    trap, the cycle limit) and a time-out raise BuildError with the bench's message.
    """
    elf = Path(elf)
    if not elf.is_file():
        raise BuildError(f"{elf} does not exist; build the project for vexriscv first")
    _check_isa(elf, variant)
    sim = simulator(variant)
    with tempfile.TemporaryDirectory(prefix="mico-vexriscv-marks-") as tmp:
        marks_path = Path(tmp) / "marks.txt"
        command = [str(sim), "--marks", str(marks_path)]
        if max_cycles is not None:
            command += ["--max-cycles", str(int(max_cycles))]
        command.append(str(elf.resolve()))
        try:
            result = subprocess.run(
                command, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired as exc:
            output = (text(exc.stdout) + text(exc.stderr))[-TAIL:]
            raise BuildError(
                f"the VexRiscv {variant} simulator ran {elf.name} for more than {timeout:g} s "
                f"and was stopped; its last output:\n{output}"
            ) from None
        if result.returncode in _BENCH_STATUS or result.returncode < 0:
            what = _BENCH_STATUS.get(result.returncode) or exit_status(result.returncode)
            raise BuildError(
                f"{elf.name} on the VexRiscv {variant} bench failed ({what}):\n"
                f"{(result.stdout + result.stderr)[-TAIL:]}"
            )
        raw = marks_path.read_text() if marks_path.exists() else ""
    marks = np.array([[int(v) for v in line.split()] for line in raw.splitlines()], np.int64)
    total = re.search(r"vexriscv bench: (\d+) cycles", result.stderr)
    return Simulation(
        status=result.returncode,
        stdout=result.stdout,
        stderr=result.stderr,
        marks=marks.reshape(-1, 2),
        cycles=int(total.group(1)) if total else 0,
    )


def run(
    project: CProject,
    samples: np.ndarray,
    variant: str = DEFAULT_VARIANT,
    timeout: float = 600,
    max_cycles: int | None = None,
) -> VexRiscvRun:
    """Run the built ELF on ``samples``; a failure, a trap or a time-out raises BuildError."""
    elf = project.directory / executable(project.name, "vexriscv")
    if not elf.exists():
        raise BuildError(f"{elf} does not exist; build the project for vexriscv first")
    with tempfile.TemporaryDirectory(prefix="mico-vexriscv-") as tmp:
        work = Path(tmp)
        count = write_samples(project, samples, work / "inputs.bin")
        if count == 0:
            empty = np.zeros(0, dtype=np.int64)
            return VexRiscvRun(no_outputs(project), empty, empty.copy(), variant)
        if project.weights_file is not None:  # --weights-file: opened in the run directory
            shutil.copyfile(project.directory / project.weights_file, work / project.weights_file)
        sim = simulate(elf, variant, cwd=work, timeout=timeout, max_cycles=max_cycles)
        if sim.status != 0:
            raise BuildError(
                f"{elf.name} on the VexRiscv {variant} bench failed (exit {sim.status}):\n"
                f"{(sim.stdout + sim.stderr)[-TAIL:]}"
            )
        outputs = read_outputs(project, work / "outputs.bin", count, f"{elf.name} on VexRiscv")
    instructions = np.array([int(c) for c in _INSTRET.findall(sim.stdout)], dtype=np.int64)
    if instructions.size != count or len(sim.marks) != 2 * count:
        raise BuildError(
            f"{elf.name} reported {instructions.size} instruction counts and the bench saw "
            f"{len(sim.marks)} instret reads for {count} samples (expected {count} and "
            f"{2 * count}); was main.c changed?"
        )
    start, end = sim.marks[0::2], sim.marks[1::2]
    if not np.array_equal(end[:, 1] - start[:, 1], instructions):
        raise BuildError(
            f"the instret values the bench saw retire disagree with the counts {elf.name} "
            "printed; the bench's marks are not where main.c reads instret"
        )
    return VexRiscvRun(outputs, instructions, end[:, 0] - start[:, 0], variant)


def _verilog_dir() -> Path | None:
    """``pythondata_cpu_vexriscv/verilog``, or None when the package is not installed."""
    try:
        import pythondata_cpu_vexriscv  # type: ignore[import-untyped]
    except ImportError:
        return None
    return Path(pythondata_cpu_vexriscv.data_location)


def _check_isa(elf: Path, variant: str) -> None:
    """Refuse an ELF with compressed instructions on a variant without them."""
    verilog(variant)
    arch = VARIANTS[variant]
    header = elf.read_bytes()[:52]
    if len(header) < 52 or header[:4] != b"\x7fELF":
        raise BuildError(f"{elf} is not an ELF file; build the project for vexriscv")
    compressed = bool(int.from_bytes(header[36:40], "little") & 1)  # EF_RISCV_RVC
    if compressed and "c" not in arch.split()[0].removeprefix("-march=rv32"):
        raise BuildError(
            f"{elf.name} uses compressed instructions, which VexRiscv {variant} "
            f"({arch.split()[0].removeprefix('-march=')}) does not run; build it with "
            f"build(project, variant={variant!r}) first"
        )
