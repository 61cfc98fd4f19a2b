"""When a measured record may be reused: the program it measured is the program mico would
build now.

A record (one single-layer or whole-model program measured on a target) carries a
:class:`ProgramKey`: the hash of every file of the program as built (``program``), the hash of
each C kernel source the program compiled (``kernels``: only the files the generator copied
into that project, so a change to a kernel file the program does not use keeps the record),
and the hash of mico's Python that generates and builds programs (``generator``).

A record is reused without compiling anything when its kernel files and the generator are
unchanged (:meth:`ProgramKey.fresh`); when either changed, the program is generated again and
the record is still reused if the program's files hash the same (:meth:`ProgramKey.same_program`:
a change elsewhere in mico that leaves the program byte-identical), else measured again.
So a record is never reused for a program whose code differs from the one it measured.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

#: files of a project that make its program (sources, headers, the build's flags)
PROGRAM_SUFFIXES = (".c", ".h", ".S")
PROGRAM_FILES = ("Makefile",)
#: mico's Python that does not generate or build programs (measurement, search, commands);
#: every other module of the package is part of the generator hash
NOT_GENERATOR = ("hw", "search", "__main__.py")
#: ... except the modules of mico.hw that make the measured programs (single-layer models,
#: the zoo programs' plans and calibration, the instrumented main.c) or what a record says of
#: them (each node's kernel path)
MEASURED_PROGRAMS = ("hw/programs.py", "hw/modelprof.py", "hw/nodes.py", "hw/opshape.py")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def kernel_sources() -> dict[str, bytes]:
    """mico's C kernel library (``mico/csrc``): file name -> contents."""
    folder = resources.files("mico.csrc")
    return {
        entry.name: entry.read_bytes()
        for entry in folder.iterdir()
        if entry.name.endswith(PROGRAM_SUFFIXES)
    }


def kernel_hashes(names: Iterable[str] | None = None) -> dict[str, str]:
    """The current hash of each kernel source (all of them, or those of ``names``; a file that
    no longer exists hashes to ``""``)."""
    sources = kernel_sources()
    wanted = sorted(sources) if names is None else sorted(names)
    return {name: _digest(sources[name]) if name in sources else "" for name in wanted}


def _generator_files(root: Path) -> list[Path]:
    files = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.as_posix() not in MEASURED_PROGRAMS and (
            rel.parts[0] in NOT_GENERATOR or rel.parts[0].startswith("cli")
        ):
            continue
        files.append(path)
    return files


@lru_cache(maxsize=1)
def generator_hash() -> str:
    """A hash of the mico Python that turns a model into a built program (quantization, IR,
    passes, code generation, targets' builds), and the torch version that runs it."""
    import torch

    import mico

    root = Path(mico.__file__).parent
    digest = hashlib.sha256(torch.__version__.encode())
    for path in _generator_files(root):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def program_hash(directory: Path, extra: str = "") -> str:
    """A hash of the files of a generated project that make its program, and of ``extra``
    (what the measurement adds to it: the instrumented ``main.c``)."""
    digest = hashlib.sha256(extra.encode())
    for path in sorted(Path(directory).iterdir()):
        if path.is_file() and (path.suffix in PROGRAM_SUFFIXES or path.name in PROGRAM_FILES):
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def project_kernels(directory: Path) -> list[str]:
    """The kernel sources a generated project compiles (its files that are mico's kernels)."""
    library = set(kernel_sources())
    return sorted(p.name for p in Path(directory).iterdir() if p.name in library)


@dataclass(frozen=True)
class ProgramKey:
    """What a measured program was: its files' hash, its kernels' hashes, the generator's."""

    program: str
    generator: str
    kernels: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of_project(cls, directory: Path, extra: str = "") -> ProgramKey:
        """The key of the project in ``directory`` as generated now (``extra``: see
        :func:`program_hash`)."""
        return cls(program_hash(directory, extra), generator_hash(),
                   kernel_hashes(project_kernels(directory)))  # fmt: skip

    def fresh(self) -> bool:
        """The program would be generated the same now: the same generator and the same
        contents of every kernel file it compiled (other kernel files may have changed)."""
        if not self.program or self.generator != generator_hash() or not self.kernels:
            return False
        return kernel_hashes(self.kernels) == dict(self.kernels)

    def same_program(self, other: ProgramKey) -> bool:
        """Whether ``other`` (a program generated now) is byte for byte the one measured."""
        return bool(self.program) and self.program == other.program

    def to_dict(self) -> dict[str, Any]:
        return {"program": self.program, "generator": self.generator,
                "kernels": dict(self.kernels)}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> ProgramKey:
        data = data or {}
        return cls(str(data.get("program", "")), str(data.get("generator", "")),
                   {str(k): str(v) for k, v in dict(data.get("kernels", {})).items()})  # fmt: skip

    def to_text(self) -> str:
        """One CSV cell: ``program/generator/file=hash;file=hash``."""
        kernels = ";".join(f"{k}={v}" for k, v in sorted(self.kernels.items()))
        return f"{self.program}/{self.generator}/{kernels}"

    @classmethod
    def from_text(cls, text: str) -> ProgramKey:
        parts = (text or "").split("/", 2)
        if len(parts) != 3:
            return cls("", "")
        kernels = dict(item.split("=", 1) for item in parts[2].split(";") if "=" in item)
        return cls(parts[0], parts[1], kernels)
