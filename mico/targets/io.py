"""What every target shares: tool checks and the sample / output files ``main.c`` exchanges."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from mico.codegen.project import CProject
from mico.errors import BuildError

TAIL = 4000  # characters of tool output kept in error messages


def require_tools(target: str, tools: Mapping[str, str]) -> None:
    """Raise BuildError naming the missing ``tools`` (tool -> Debian package) of ``target``."""
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        packages = " ".join(sorted({tools[t] for t in missing}))
        raise BuildError(
            f"the {target} target needs {', '.join(missing)} on PATH; install them "
            f"(Debian: apt-get install {packages})"
        )


def write_samples(project: CProject, samples: np.ndarray, path: Path) -> int:
    """Write ``samples`` as the float32 ``inputs.bin`` main.c reads; return their count."""
    data = np.ascontiguousarray(samples, dtype=np.float32)
    per_sample = int(np.prod(project.input_shape[1:]))
    if data.size != len(data) * per_sample:
        raise BuildError(
            f"samples of shape {data.shape[1:]} do not match the model input "
            f"{project.input_shape[1:]}"
        )
    data.astype("<f4").tofile(path)
    return len(data)


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
