"""The host target: build a generated project with the machine's C compiler and run it.

``build(project, cc="gcc" | "clang", sanitize=False)`` runs ``make TARGET=host CC=cc
[SANITIZE=1]``; ``sanitize`` adds AddressSanitizer and UndefinedBehaviorSanitizer (any report
stops the program, and ``run`` raises with it). ``run`` executes the program ``build`` made last.
``profile`` counts each inference's instructions exactly under ``valgrind --tool=callgrind``
(only inside ``<name>_run``: no start-up, no file I/O) and times inferences natively.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
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
        run_make(project, variables, timeout, f"building {project.directory} with {cc}", "host")
    except BuildError as exc:
        if sanitize and "libclang_rt" in str(exc):
            raise BuildError(
                f"{exc}\n{cc} has no sanitizer runtime; install it (Debian: apt-get install "
                "libclang-rt-<version>-dev) or build with gcc"
            ) from None
        raise
    return project.directory / executable(project.name, "host")


def run(
    project: CProject, samples: np.ndarray, timeout: float = 300, weights: Path | None = None
) -> np.ndarray:
    """Run the built program on ``samples`` (N, *input_shape[1:]); return the outputs
    (N, *output_shape[1:]) as ``project.output_dtype``. A crash, a sanitizer report, a bad
    exit or a time-out raises BuildError with the program's output. A project compiled with
    ``--weights-file`` reads ``weights`` (default: its own ``<name>.bin``)."""
    exe = project.directory / executable(project.name, "host")
    if not exe.exists():
        raise BuildError(f"{exe} does not exist; build the project first")
    with tempfile.TemporaryDirectory(prefix="mico-run-") as tmp:
        inputs, outputs = Path(tmp) / "inputs.bin", Path(tmp) / "outputs.bin"
        count = write_samples(project, samples, inputs)
        if count == 0:
            return no_outputs(project)
        env = {**SANITIZER_ENV, **os.environ}  # the caller's settings win
        command = [str(exe), str(inputs), str(outputs)]
        if project.weights_file is not None:
            command.append(str(weights or project.directory / project.weights_file))
        run_program(command, exe.name, timeout, env=env)
        return read_outputs(project, outputs, count, str(exe))


def weights_arguments(exe: Path) -> list[str]:
    """The weights-file argument of a program built from a ``--weights-file`` project (its
    own ``<name>.bin``, by absolute path: runs elsewhere than the project find it), else none."""
    import json

    try:
        info = json.loads((exe.parent / "mico.json").read_text()).get("weights_file", {})
    except (OSError, ValueError):
        return []
    if info.get("format") != "mico-weights":
        return []
    return [str((exe.parent / info["file"]).resolve())]


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


# ---------------------------------------------------------------------- callgrind
VALGRIND_PACKAGE = "valgrind"
#: how long one timed run should compute, so that the start-up cost cancels out cleanly
TIMED_RUN_SECONDS = 0.25
#: the fewest inferences a timed run holds: a slow model's time per inference is not the
#: difference of two short process runs (ResNet8's portable build, about 70 M instructions,
#: was timed on 2 inferences and read anywhere from 5 to 28 ms)
MIN_TIMED_INFERENCES = 16
_SUMMARY = re.compile(r"^summary:\s*(\d+)\s*$", re.M)
_TRIGGER = re.compile(r"^desc: Trigger: (.*)$", re.M)


@dataclass(frozen=True)
class HostProfile:
    """Exact instructions of every inference (callgrind) and measured wall time.

    ``instructions`` holds one count per sample: the instructions ``<name>_run`` executed
    (callees included), nothing of process start-up, file reading or printing, counted after a
    warm-up inference (:func:`steady_callgrind_counts`).
    ``wall_seconds`` holds one wall time per inference per repeat, measured natively.
    """

    instructions: np.ndarray  # int64, one per sample
    wall_seconds: np.ndarray  # float64, one per repeat (seconds per inference)
    inferences_per_timed_run: int
    #: the warm-up inference's count (sample 0 run first): one-time work such as the host
    #: kernels laying out each layer's weights on its first call is in it, not in ``instructions``
    first_inference: int = 0

    @property
    def instructions_per_inference(self) -> int:
        """The largest count (counts differ only where kernels branch on data)."""
        return int(self.instructions.max()) if self.instructions.size else 0

    @property
    def wall_median(self) -> float:
        return float(np.median(self.wall_seconds)) if self.wall_seconds.size else 0.0

    @property
    def wall_spread(self) -> tuple[float, float]:
        """(min, max) of the per-inference wall times over the repeats."""
        if not self.wall_seconds.size:
            return (0.0, 0.0)
        return (float(self.wall_seconds.min()), float(self.wall_seconds.max()))


def require_valgrind() -> None:
    """Raise BuildError with the apt line when valgrind is not installed."""
    require_tools("host (callgrind)", {"valgrind": VALGRIND_PACKAGE})


def callgrind_counts(
    exe: Path, function: str, inputs: Path, samples: int, timeout: float = 600
) -> np.ndarray:
    """Instructions of each call of ``function`` while ``exe`` runs on ``inputs``.

    Callgrind collects only inside ``function`` (``--toggle-collect``) and writes one profile
    part after each of its calls (``--dump-after``); each part's summary is one call's
    instruction count. ``LD_BIND_NOW`` resolves library symbols at start-up, so the first
    call does not pay the dynamic linker's lazy binding.
    """
    require_valgrind()
    if not exe.exists():
        raise BuildError(f"{exe} does not exist; build the project first (mico.targets.host.build)")
    with tempfile.TemporaryDirectory(prefix="mico-callgrind-") as tmp:
        out = Path(tmp) / "callgrind.out"
        command = [
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
            f"--toggle-collect={function}", f"--dump-after={function}",
            "--dump-instr=no", "--dump-line=no", "--compress-strings=no",
            str(exe), str(inputs), str(Path(tmp) / "outputs.bin"), *weights_arguments(exe),
        ]  # fmt: skip
        env = {**os.environ, "LD_BIND_NOW": "1"}
        run_program(command, f"{exe.name} under callgrind", timeout, cwd=Path(tmp), env=env)
        counts = []
        for part in sorted(Path(tmp).glob("callgrind.out.*"), key=lambda p: int(p.suffix[1:])):
            data = part.read_text(errors="replace")
            trigger = _TRIGGER.search(data)
            summary = _SUMMARY.search(data)
            if trigger and function in trigger.group(1) and summary:
                counts.append(int(summary.group(1)))
    if len(counts) != samples:
        raise BuildError(
            f"callgrind saw {len(counts)} calls of {function} in {exe.name} for {samples} "
            f"samples; is {function} the program's inference function?"
        )
    return np.array(counts, dtype=np.int64)


def steady_callgrind_counts(
    project: CProject, samples: np.ndarray, work: Path, timeout: float = 600
) -> tuple[np.ndarray, int]:
    """Instructions of one inference per sample in the steady state, and the first call's.

    The program runs sample 0 once more before the samples: the host kernels lay out each
    layer's weights on its first call (``mico_host_gemm.c``), a one-time cost a deployed
    program pays once, not per inference. Returns (a count per sample, the warm-up's count).
    """
    x = np.asarray(samples, dtype=np.float32)
    inputs = work / "steady_inputs.bin"
    count = write_samples(project, np.concatenate([x[:1], x]), inputs)
    if count < 2:
        raise BuildError("profiling needs at least one sample")
    exe = project.directory / executable(project.name, "host")
    counts = callgrind_counts(exe, f"{project.name}_run", inputs, count, timeout)
    return counts[1:], int(counts[0])


def profile(
    project: CProject,
    samples: np.ndarray,
    repeats: int = 5,
    timeout: float = 600,
) -> HostProfile:
    """Instructions per inference under callgrind, and wall time per inference.

    Instructions: exact, per sample, counted in ``<name>_run`` only after a warm-up
    inference (see :func:`steady_callgrind_counts`). Wall time: the native program runs
    ``repeats`` times on the samples tiled to about ``TIMED_RUN_SECONDS`` of work (and at least
    ``MIN_TIMED_INFERENCES`` inferences), and as often
    on one sample; a tiled run's time minus the fastest one-sample run (the start-up and the
    first inference), over the extra inferences, is one inference's wall time.
    Build the project first (:func:`build`); a missing executable raises BuildError.
    """
    if repeats < 1:
        raise BuildError(f"repeats must be at least 1, got {repeats}")
    exe = project.directory / executable(project.name, "host")
    if not exe.exists():
        raise BuildError(f"{exe} does not exist; build the project first (mico.targets.host.build)")
    require_valgrind()
    x = np.asarray(samples, dtype=np.float32)
    with tempfile.TemporaryDirectory(prefix="mico-profile-") as tmp:
        inputs = Path(tmp) / "inputs.bin"
        count = write_samples(project, x, inputs)
        if count == 0:
            raise BuildError("profiling needs at least one sample")
        instructions, first = steady_callgrind_counts(project, x, Path(tmp), timeout)
        # about 1e9 instructions a second: enough inferences for TIMED_RUN_SECONDS of work
        per = max(1, int(instructions.max()))
        tiles = max(1, min(100_000 // count, math.ceil(TIMED_RUN_SECONDS * 1e9 / per / count)))
        tiles = max(tiles, math.ceil(MIN_TIMED_INFERENCES / count))
        many = Path(tmp) / "many.bin"
        write_samples(project, np.concatenate([x] * tiles), many)
        one = Path(tmp) / "one.bin"
        write_samples(project, x[:1], one)
        n = count * tiles
        t_many, t_one = [], []
        for _ in range(repeats):
            t_many.append(_timed(exe, many, Path(tmp), timeout))
            t_one.append(_timed(exe, one, Path(tmp), timeout))
    # start-up is a fixed cost: its best estimate is the fastest one-sample run
    start_up = min(t_one)
    walls = [max(t - start_up, 0.0) / (n - 1) for t in t_many]
    return HostProfile(instructions, np.array(walls, dtype=np.float64), n, first)


def _timed(exe: Path, inputs: Path, work: Path, timeout: float) -> float:
    """Wall seconds of one native run of ``exe`` on ``inputs``."""
    start = time.perf_counter()
    command = [str(exe), str(inputs), str(work / "out.bin"), *weights_arguments(exe)]
    run_program(command, exe.name, timeout, cwd=work)
    return time.perf_counter() - start
