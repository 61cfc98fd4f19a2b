"""Builds of measured programs that compile each kernel source once, not once per program.

A generated project's Makefile compiles every source in one compiler call. A profile builds
hundreds of programs that share the same kernel files, so :func:`build` asks ``make`` for that
call (``make -n -B``, the project's own flags), compiles each source to an object apart (as the
compiler driver does inside that call), takes the objects of unchanged sources from a cache
keyed by the compiler, the flags, the source and the headers it includes (mico's kernels and
the bench's files; the model's own sources are compiled each time), and links them in the
same order with the same flags. The executable is the one ``make`` builds: the same objects
in the same order, byte for byte on rv32 and the host (tests/hw/test_profile_keys.py); on the
VexRiscv bench the loaded image is the same and only the symbol naming its assembly file
differs (``make`` names it after a temporary object, differently on every build).
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

from mico.codegen.makefile import executable
from mico.codegen.project import CProject
from mico.errors import BuildError
from mico.hw.keys import kernel_sources
from mico.targets.io import TAIL

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE_SUFFIXES = (".c", ".S")


def cache_dir() -> Path:
    """Where compiled kernel objects are kept (beside the profiles)."""
    from mico.hw.profile import cache_dir as profiles

    return profiles().parent / "objects"


@lru_cache(maxsize=8)
def _compiler_id(cc: str) -> str:
    result = subprocess.run([cc, "--version"], capture_output=True, text=True, check=False)
    return hashlib.sha256((cc + result.stdout).encode()).hexdigest()[:16]


def _command(project: CProject, variables: list[str], kind: str) -> tuple[list[str], list[str]]:
    """The compiler call ``make`` would run to build the project's executable, and the shell
    lines writing its command stamp (``.<executable>.cmd``)."""
    exe = executable(project.name, kind)
    result = subprocess.run(["make", "-n", "-B", *variables], cwd=project.directory,
                            capture_output=True, text=True, check=False)  # fmt: skip
    if result.returncode != 0:
        raise BuildError(f"make -n in {project.directory} failed:\n{result.stderr[-TAIL:]}")
    stamps = [line for line in result.stdout.splitlines()
              if line.startswith("echo") and f".{exe}.cmd" in line]  # fmt: skip
    for line in result.stdout.splitlines():
        words = shlex.split(line)
        if "-o" in words and words[words.index("-o") + 1] == exe and not line.startswith("echo"):
            return words, stamps
    raise BuildError(f"make -n in {project.directory} names no command building {exe}")


def _headers(source: Path, seen: set[Path] | None = None) -> list[Path]:
    """The quoted headers ``source`` includes, found beside it, recursively."""
    seen = set() if seen is None else seen
    for name in _INCLUDE.findall(source.read_text(errors="replace")):
        header = source.parent / name
        if header.is_file() and header not in seen:
            seen.add(header)
            _headers(header, seen)
    return sorted(seen)


def _run(words: list[str], cwd: Path, what: str, timeout: float) -> None:
    try:
        result = subprocess.run(words, cwd=cwd, capture_output=True, text=True,
                                timeout=timeout, check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise BuildError(f"{what} took more than {timeout:g} s and was stopped") from None
    if result.returncode != 0:
        raise BuildError(f"{what} failed:\n{(result.stdout + result.stderr)[-TAIL:]}")


def build(
    project: CProject,
    variables: list[str],
    kind: str,
    timeout: float = 300,
    store: Path | None = None,
) -> Path:
    """Build ``project``'s executable for ``kind`` (``rv32``, ``host``, ``vexriscv``) as
    ``make <variables>`` does, each source's object taken from the cache (``store``, else
    :func:`cache_dir`) when the compiler, the flags, the source and its headers are unchanged;
    return the executable. The project's command stamp is written as ``make`` writes it, so a
    later ``make`` with the same variables finds the executable up to date."""
    words, stamps = _command(project, variables, kind)
    cc, rest = words[0], words[1:]
    out = rest.index("-o")
    exe = rest[out + 1]
    rest = rest[:out] + rest[out + 2 :]
    sources = [w for w in rest if w.endswith(SOURCE_SUFFIXES) and not w.startswith("-")]
    libs = [w for w in rest if w.startswith("-l")]
    flags = [w for w in rest if w not in sources and w not in libs]
    store = cache_dir() if store is None else store
    store.mkdir(parents=True, exist_ok=True)
    for line in stamps:  # before the executable, so that the executable is the newer file
        _run(["sh", "-c", line], project.directory, f"writing {project.directory}'s build stamp",
             timeout)  # fmt: skip
    shared = set(kernel_sources())
    objects = []
    with tempfile.TemporaryDirectory(prefix="mico-objects-") as tmp:
        for source in sources:
            path = Path(source) if os.path.isabs(source) else project.directory / source
            if path.name not in shared and not os.path.isabs(source):  # the model's own
                obj_path = Path(tmp) / f"{path.stem}.o"
                _run([cc, *flags, "-c", source, "-o", str(obj_path)], project.directory,
                     f"compiling {source} in {project.directory}", timeout)  # fmt: skip
                objects.append(str(obj_path))
                continue
            digest = hashlib.sha256(_compiler_id(cc).encode())
            digest.update(shlex.join(flags).encode())
            digest.update(source.encode())  # the file name is in the object (its symbol)
            for item in (path, *_headers(path)):
                digest.update(item.name.encode())
                digest.update(item.read_bytes())
            obj = store / f"{Path(source).stem}-{digest.hexdigest()[:24]}.o"
            if not obj.is_file():
                partial = Path(tmp) / obj.name
                _run([cc, *flags, "-c", source, "-o", str(partial)], project.directory,
                     f"compiling {source} in {project.directory}", timeout)  # fmt: skip
                os.replace(partial, obj)  # whole or absent, for concurrent builds
            objects.append(str(obj))
        _run([cc, *flags, "-o", exe, *objects, *libs], project.directory,
             f"linking {project.directory / exe}", timeout)  # fmt: skip
    return project.directory / exe


def rv32_variables() -> list[str]:
    """``make`` variables of :func:`mico.targets.rv32.build`."""
    return ["TARGET=rv32"]


def host_variables() -> list[str]:
    """``make`` variables of :func:`mico.targets.host.build` (default compiler)."""
    from mico.targets.host import DEFAULT_CC

    return ["TARGET=host", f"CC={DEFAULT_CC}", "SANITIZE=0"]


def vexriscv_variables(variant: str) -> list[str]:
    """``make`` variables of :func:`mico.targets.vexriscv.build` for ``variant``."""
    from mico.targets.vexriscv import BENCH_DIR, VARIANTS

    return ["TARGET=vexriscv", f"MICO_VEXRISCV={BENCH_DIR}", f"VEXRISCV_ARCH={VARIANTS[variant]}"]


def build_for(project: CProject, kind: str, variant: str = "", timeout: float = 300) -> Path:
    """:func:`build` with the variables the target's own ``build`` passes to ``make``."""
    if kind == "rv32":
        return build(project, rv32_variables(), kind, timeout)
    if kind == "host":
        return build(project, host_variables(), kind, timeout)
    if kind == "vexriscv":
        from mico.targets import vexriscv

        vexriscv.verilog(variant)  # a known variant, and the package is installed
        return build(project, vexriscv_variables(variant), kind, timeout)
    raise BuildError(f"no cached build for '{kind}' programs")
