"""What every target shares: tool checks and the sample / output files ``main.c`` exchanges."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from mico.codegen.project import CProject
from mico.errors import BuildError
from mico.numerics import check_finite_samples

TAIL = 4000  # characters of tool output kept in error messages
#: a directory: the targets' builds compile each unchanged kernel source once and keep its
#: object there (mico.hw.objcache), for many builds of the same kernels (a test suite, a grid)
BUILD_CACHE_ENV = "MICO_BUILD_CACHE"


def require_tools(target: str, tools: Mapping[str, str]) -> None:
    """Raise BuildError naming the missing ``tools`` (tool -> Debian package) of ``target``."""
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        packages = " ".join(sorted({tools[t] for t in missing}))
        raise BuildError(
            f"the {target} target needs {', '.join(missing)} on PATH; install them "
            f"(Debian: apt-get install {packages})"
        )


def text(data: str | bytes | None) -> str:
    """Captured tool output as text (a time-out hands back bytes, or nothing)."""
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def exit_status(returncode: int) -> str:
    """``exit 3`` or ``killed by SIGABRT`` (a negative return code is the signal)."""
    if returncode >= 0:
        return f"exit {returncode}"
    try:
        return f"killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"killed by signal {-returncode}"


def run_make(
    project: CProject,
    variables: Sequence[str],
    timeout: float,
    what: str,
    kind: str | None = None,
) -> subprocess.CompletedProcess[str] | None:
    """``make -C <project> *variables``; a failure or time-out raises BuildError that starts
    with ``what`` (``building <dir> with gcc``) and ends with make's output.

    With ``kind`` (the executable's target) and ``$MICO_BUILD_CACHE`` set, the executable is
    built as ``make`` builds it but from cached kernel objects (None is returned); a build
    that fails there is run by ``make``, whose error is the one raised."""
    cache = os.environ.get(BUILD_CACHE_ENV)
    if cache and kind is not None:
        from mico.hw import objcache

        try:
            objcache.build(project, list(variables), kind, timeout, store=Path(cache))
            return None
        except BuildError:
            pass  # make builds it again and says what failed in its own words
    command = ["make", "-C", str(project.directory), *variables]
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        output = text(exc.stdout) + text(exc.stderr)
        raise BuildError(
            f"{what} took more than {timeout:g} s and was stopped; its last output:\n"
            f"{output[-TAIL:]}"
        ) from None
    if result.returncode != 0:
        raise BuildError(
            f"{what} failed (make exit {result.returncode}):\n"
            f"{(result.stdout + result.stderr)[-TAIL:]}"
        )
    return result


def run_program(
    command: Sequence[str],
    program: str,
    timeout: float,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a built program (or its emulator); a time-out, a crash or a non-zero exit raises
    BuildError naming ``program`` with the end of its output."""
    try:
        result = subprocess.run(
            list(command),
            cwd=cwd,
            env=None if env is None else dict(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        output = text(exc.stdout) + text(exc.stderr)
        raise BuildError(
            f"{program} ran for more than {timeout:g} s and was stopped; its last output:\n"
            f"{output[-TAIL:]}"
        ) from None
    if result.returncode != 0:
        raise BuildError(
            f"{program} failed ({exit_status(result.returncode)}):\n"
            f"{(result.stdout + result.stderr)[-TAIL:]}"
        )
    return result


def write_samples(project: CProject, samples: np.ndarray, path: Path) -> int:
    """Write ``samples`` as the float32 ``inputs.bin`` main.c reads; return their count."""
    data = np.ascontiguousarray(samples, dtype=np.float32)
    check_finite_samples(data)  # the C program would stop on them: say which one, before
    per_sample = int(np.prod(project.input_shape[1:]))
    if data.size != len(data) * per_sample:
        raise BuildError(
            f"samples of shape {data.shape[1:]} do not match the model input "
            f"{project.input_shape[1:]}"
        )
    data.astype("<f4").tofile(path)
    return len(data)


def no_outputs(project: CProject) -> np.ndarray:
    """The outputs of zero samples (main.c refuses an empty input file, so it is not run)."""
    return np.zeros((0, *project.output_shape[1:]), dtype=project.output_dtype)


def read_outputs(project: CProject, path: Path, samples: int, program: str) -> np.ndarray:
    """The rows main.c wrote to ``outputs.bin`` (int32 or float32, as the project's output),
    shaped (samples, *output_shape[1:])."""
    if not path.exists():
        raise BuildError(f"{program} wrote no {path.name}")
    out = np.fromfile(path, dtype=np.dtype(project.output_dtype).newbyteorder("<"))
    expected = samples * int(np.prod(project.output_shape[1:]))
    if out.size != expected:
        raise BuildError(f"{program} wrote {out.size} values, expected {expected}")
    return out.reshape(samples, *project.output_shape[1:])
