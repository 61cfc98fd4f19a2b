"""Flash a program carries on rv32, predicted from its objects' section graph without linking.

rv32 programs are compiled with one section per function and constant and linked with
``--gc-sections``: the linker keeps what the entry point reaches through relocations and drops
the rest. So the bytes a set of entry points links is the closure, over the section reference
graph, of the sections defining them. :class:`SectionGraph` reads each object's sections,
symbols and relocations (``readelf -S -r -s``), resolves undefined symbols first among the
program's objects, then in the libraries the target links (picolibc's ``libc.a``, ``libm.a``,
``libgcc.a``, ``libsemihost.a``: the archive member defining a symbol is read on demand), and
sums the closure's text, rodata and data (data is in flash too: its initial values).

Two things make the linked bytes differ from the objects' section sizes, both modelled:
* relaxation: the linker shortens a ``call`` (``auipc``+``jalr``, 8 bytes) whose target is near
  to ``jal`` (4) or ``c.jal`` (2, rv32c, within 2 KiB); the closure is laid out in link order
  and every relaxable call is shortened by the distance to its target;
* alignment: each input section starts at its alignment; the layout adds that padding.

:func:`program_flash` answers for a lowered graph: the scheme's C source (``<name>.c``: the run
function, the constants and kernel parameters) compiled alone, mico's kernels compiled once per
compiler and flags (the objects shared with :mod:`mico.hw.objcache`) and the closure of
``<name>_run``, plus the runtime every program links (``crt0``, picolibc's start-up and exit:
a trivial program linked once, its library sections not counted twice).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from mico.errors import BuildError, CompileError

READELF = "riscv64-unknown-elf-readelf"
NM = "riscv64-unknown-elf-nm"
AR = "riscv64-unknown-elf-ar"
#: what flash estimates need: the cross compiler and picolibc, and binutils to read objects
TOOLS = {
    "riscv64-unknown-elf-gcc": "gcc-riscv64-unknown-elf picolibc-riscv64-unknown-elf",
    READELF: "binutils-riscv64-unknown-elf",
    NM: "binutils-riscv64-unknown-elf",
    AR: "binutils-riscv64-unknown-elf",
    "make": "make",
}
#: sections whose bytes are in flash (data: its initial values, copied to RAM at start-up)
FLASH_KINDS = ("text", "rodata", "data")
#: a c.jal (rv32c) reaches +-2 KiB, a jal +-1 MiB
CJAL_RANGE = 2048 - 2
JAL_RANGE = (1 << 20) - 2

_SECTION = re.compile(
    r"^\s*\[\s*(\d+)\]\s+(\S+)\s+(\S+)\s+[0-9a-f]+\s+[0-9a-f]+\s+([0-9a-f]+)\s+[0-9a-f]+\s+"
    r"(?:([A-Za-z]+)\s+)?(\d+)\s+(\d+)\s+(\d+)\s*$"
)
_SYMBOL = re.compile(
    r"^\s*(\d+):\s+([0-9a-f]+)\s+(\d+|0x[0-9a-f]+)\s+(\S+)\s+(\S+)\s+\S+(?:\s+\[[^\]]*\])?"
    r"\s+(\S+)\s*(\S*)\s*$"
)
_RELA_HEAD = re.compile(r"^Relocation section '([^']+)'")
_RELA = re.compile(r"^([0-9a-f]+)\s+([0-9a-f]+)\s+(R_RISCV_\w+)\b")
_CALLS = ("R_RISCV_CALL", "R_RISCV_CALL_PLT")
_NO_SYMBOL = ("R_RISCV_RELAX", "R_RISCV_ALIGN", "R_RISCV_NONE")


def require_tools(what: str = "the rv32 flash estimate") -> None:
    """Raise :class:`BuildError` naming what to install when the rv32 toolchain is missing
    (``what``: the figure that needs it, named in the message)."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        packages = " ".join(sorted({p for t in missing for p in TOOLS[t].split()}))
        raise BuildError(
            f"{what} needs {', '.join(missing)} on PATH (it compiles the "
            f"program's sources for rv32 and reads their sections); install them (Debian: "
            f"apt-get install {packages})"
        )


def section_kind(name: str) -> str | None:
    """``text``, ``rodata``, ``data`` or ``bss`` for an allocated section's name, else None."""
    for kind, prefixes in (
        ("text", (".text",)),
        ("rodata", (".rodata", ".srodata", ".sdata2")),
        ("data", (".data", ".sdata")),
        ("bss", (".bss", ".sbss", ".tbss", ".tdata")),
    ):
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            return "bss" if name.startswith(".tdata") else kind
    return None


@dataclass
class Section:
    """One allocated input section: its bytes, alignment and what it references."""

    obj: str
    index: int
    name: str
    size: int
    align: int
    kind: str
    #: sections of the same object it references (local symbols, section symbols)
    local: set[int] = field(default_factory=set)
    #: global symbols it references (resolved across objects and libraries)
    globals: set[str] = field(default_factory=set)
    #: relaxable calls: (offset in the section, target: ("local", index, value) or
    #: ("global", name, addend))
    calls: list[tuple[int, tuple[str, Any, int]]] = field(default_factory=list)


@dataclass
class ObjectFile:
    """The allocated sections of one object and the global symbols it defines."""

    name: str
    sections: dict[int, Section]
    defines: dict[str, tuple[int, int]]  # global symbol -> (section index, value)
    #: function symbols (local and global) by the section defining them
    functions: dict[int, list[str]] = field(default_factory=dict)


def _int(text: str) -> int:
    return int(text, 16) if text.startswith("0x") else int(text)


def parse_readelf(name: str, listing: str) -> ObjectFile:
    """An :class:`ObjectFile` from ``readelf -S -r -s -W`` of one relocatable object."""
    sections: dict[int, Section] = {}
    rela_target: dict[str, int] = {}
    headers: dict[int, tuple[str, str, int, str, int]] = {}
    symbols: dict[int, tuple[str, int, str, int]] = {}  # index -> (name, ndx, bind, value)
    kinds: dict[int, str] = {}  # symbol index -> its type (FUNC, OBJECT, SECTION, ...)
    relocs: list[tuple[str, int, int, str]] = []  # rela section, offset, symbol, type
    current: str | None = None
    in_symbols = False
    for line in listing.splitlines():
        head = _RELA_HEAD.match(line)
        if head:
            current, in_symbols = head.group(1), False
            continue
        if line.startswith("Symbol table"):
            current, in_symbols = None, True
            continue
        m = _SECTION.match(line)
        if m and not in_symbols and current is None:
            index, sname, stype, size = int(m.group(1)), m.group(2), m.group(3), m.group(4)
            headers[index] = (sname, stype, int(size, 16), m.group(5) or "", int(m.group(8)))
            if stype == "RELA":
                rela_target[sname] = int(m.group(7))
            continue
        if in_symbols:
            s = _SYMBOL.match(line)
            if s:
                ndx = s.group(6)
                kinds[int(s.group(1))] = s.group(4)
                symbols[int(s.group(1))] = (
                    s.group(7),
                    int(ndx) if ndx.isdigit() else -1,
                    s.group(5),
                    int(s.group(2), 16),
                )
            continue
        if current is not None:
            r = _RELA.match(line)
            if r:
                relocs.append((current, int(r.group(1), 16), int(r.group(2), 16) >> 8, r.group(3)))
    for index, (sname, stype, size, flags, align) in headers.items():
        kind = section_kind(sname)
        if "A" in flags and kind is not None and stype in ("PROGBITS", "NOBITS"):
            sections[index] = Section(name, index, sname, size, max(align, 1), kind)
    defines = {
        sym: (ndx, value)
        for sym, ndx, bind, value in symbols.values()
        if bind in ("GLOBAL", "WEAK") and ndx > 0 and sym
    }
    functions: dict[int, list[str]] = {}
    for index, (sym, ndx, _, _) in symbols.items():
        if kinds.get(index) == "FUNC" and ndx in sections and sym:
            functions.setdefault(ndx, []).append(sym)
    for rela, offset, sym_index, rtype in relocs:
        target = sections.get(rela_target.get(rela, -1))
        if target is None or rtype in _NO_SYMBOL or sym_index not in symbols:
            continue
        sym, ndx, bind, value = symbols[sym_index]
        if bind == "LOCAL" and ndx > 0:
            if ndx != target.index:
                target.local.add(ndx)
            ref: tuple[str, Any, int] = ("local", ndx, value)
        elif sym:
            target.globals.add(sym)
            ref = ("global", sym, 0)
        else:
            continue
        if rtype in _CALLS:
            target.calls.append((offset, ref))
    return ObjectFile(name, sections, defines, functions)


def _run(command: Sequence[str], what: str, cwd: Path | None = None) -> str:
    result = subprocess.run(list(command), capture_output=True, text=True, cwd=cwd, check=False)
    if result.returncode != 0:
        raise BuildError(f"{what} failed:\n{(result.stdout + result.stderr)[-2000:]}")
    return result.stdout


def read_object(path: Path, name: str | None = None) -> ObjectFile:
    """Parse the relocatable object at ``path`` (``readelf -S -r -s -W``)."""
    listing = _run([READELF, "-S", "-r", "-s", "-W", str(path)], f"reading {path}")
    return parse_readelf(name or path.name, listing)


@dataclass(frozen=True)
class Library:
    """A static library the link searches: where each global symbol is defined."""

    path: Path
    members: dict[str, str]  # symbol -> member name (the first member defining it)


@lru_cache(maxsize=16)
def read_library(path: Path) -> Library:
    """The global symbols ``path`` defines (``nm``), each with the first member defining it."""
    listing = _run([NM, "-A", "-g", "--defined-only", str(path)], f"listing {path}")
    members: dict[str, str] = {}
    for line in listing.splitlines():
        where, _, rest = line.rpartition(":")
        parts = rest.split()
        if len(parts) < 3 or parts[1] in ("U", "w", "v"):
            continue
        member = where.rpartition(":")[2]
        members.setdefault(parts[2], member)
    return Library(path, members)


@lru_cache(maxsize=512)
def _library_member(path: Path, member: str) -> ObjectFile:
    with tempfile.TemporaryDirectory(prefix="mico-codesize-") as tmp:
        data = subprocess.run([AR, "p", str(path), member], capture_output=True, check=False)
        if data.returncode != 0:
            raise BuildError(f"extracting {member} from {path} failed: {data.stderr[-500:]!r}")
        obj = Path(tmp) / "member.o"
        obj.write_bytes(data.stdout)
        return read_object(obj, f"{path.name}({member})")


@dataclass
class Closure:
    """What a set of entry points links: sections by object, and their linked bytes."""

    sections: list[Section]
    #: bytes by kind (text, rodata, data) after relaxation and alignment, and by object
    by_kind: dict[str, int]
    by_object: dict[str, int]
    #: bytes the linker saves by relaxing calls (already taken off ``by_kind``)
    relaxed: int
    unresolved: set[str]

    @property
    def flash(self) -> int:
        return sum(self.by_kind.get(k, 0) for k in FLASH_KINDS)


class SectionGraph:
    """The section reference graph of a program's objects and the libraries they link."""

    def __init__(
        self,
        objects: Sequence[ObjectFile],
        libraries: Sequence[Path] = (),
        exclude: Iterable[tuple[str, str]] = (),
    ) -> None:
        """``objects`` in link order; ``libraries`` searched in order for undefined symbols;
        ``exclude``: ``(object name, section name)`` pairs linked anyway (the runtime's), not
        counted."""
        self.objects = list(objects)
        self.libraries = [read_library(Path(p)) for p in libraries]
        self.exclude = set(exclude)
        self.defined: dict[str, tuple[ObjectFile, int, int]] = {}
        for obj in self.objects:
            for sym, (ndx, value) in obj.defines.items():
                self.defined.setdefault(sym, (obj, ndx, value))
        self._loaded: list[ObjectFile] = []

    def resolve(self, symbol: str) -> tuple[ObjectFile, int, int] | None:
        """The object, section and value defining ``symbol``: the program's objects first, then
        the first library member defining it (loaded, and its other symbols defined, as the
        linker does)."""
        if symbol in self.defined:
            return self.defined[symbol]
        for library in self.libraries:
            member = library.members.get(symbol)
            if member is not None:
                obj = _library_member(library.path, member)
                self._loaded.append(obj)
                for sym, (ndx, value) in obj.defines.items():
                    self.defined.setdefault(sym, (obj, ndx, value))
                return self.defined.get(symbol)
        return None

    def closure(self, entry_points: Iterable[str]) -> Closure:
        """The sections ``entry_points`` reach and their linked bytes (an entry point no
        object or library defines raises :class:`CompileError`)."""
        roots: list[tuple[ObjectFile, int]] = []
        for name in entry_points:
            found = self.resolve(name)
            if found is None:
                raise CompileError(f"no object or library defines the entry point '{name}'")
            roots.append((found[0], found[1]))
        seen: dict[tuple[int, int], tuple[ObjectFile, Section]] = {}
        stack = list(roots)
        unresolved: set[str] = set()
        while stack:
            obj, index = stack.pop()
            key = (id(obj), index)
            section = obj.sections.get(index)
            if key in seen or section is None:
                continue
            seen[key] = (obj, section)
            stack.extend((obj, i) for i in section.local)
            for sym in section.globals:
                found = self.resolve(sym)
                if found is None:
                    unresolved.add(sym)
                else:
                    stack.append((found[0], found[1]))
        kept = [(o, s) for o, s in seen.values() if (o.name, s.name) not in self.exclude]
        return self._layout(kept, unresolved)

    def _order(self, obj: ObjectFile) -> int:
        if obj in self.objects:
            return self.objects.index(obj)
        return len(self.objects) + self._loaded.index(obj)

    def _layout(self, kept: list[tuple[ObjectFile, Section]], unresolved: set[str]) -> Closure:
        """Lay the kept sections out in link order (objects as given, then library members as
        loaded; sections in object order), with alignment, and relax the calls."""
        kept.sort(key=lambda item: (self._order(item[0]), item[1].index))
        address: dict[tuple[int, int], int] = {}
        ends: dict[str, int] = {}
        for obj, sec in kept:
            if sec.kind == "bss":
                continue
            start = ends.get(sec.kind, 0)
            start += -start % sec.align
            address[(id(obj), sec.index)] = start
            ends[sec.kind] = start + sec.size
        relaxed = 0
        by_object: dict[str, int] = {}
        for obj, sec in kept:
            if sec.kind == "bss":
                continue
            saved = 0
            for offset, ref in sec.calls:
                site = address[(id(obj), sec.index)] + offset
                target = self._target(obj, ref, address)
                if target is None:
                    continue  # an undefined weak symbol: the call stays as it is
                distance = abs(target - site)
                saved += 6 if distance <= CJAL_RANGE else 4 if distance <= JAL_RANGE else 0
            relaxed += saved
            by_object[obj.name] = by_object.get(obj.name, 0) + sec.size - saved
        by_kind = {k: 0 for k in FLASH_KINDS}
        for kind, end in ends.items():
            if kind in by_kind:
                by_kind[kind] = end
        by_kind["text"] -= relaxed
        return Closure([s for _, s in kept], by_kind, by_object, relaxed, unresolved)

    def _target(self, obj: ObjectFile, ref: tuple[str, Any, int],
                address: dict[tuple[int, int], int]) -> int | None:  # fmt: skip
        scope, what, value = ref
        if scope == "local":
            base = address.get((id(obj), what))
            return None if base is None else base + value
        found = self.defined.get(what)
        if found is None:
            return None
        base = address.get((id(found[0]), found[1]))
        return None if base is None else base + found[2]


# ---------------------------------------------------------------------------------- rv32 build


def _cache_dir() -> Path:
    from mico.hw.objcache import cache_dir

    return cache_dir()


@lru_cache(maxsize=1)
def build_command() -> tuple[str, tuple[str, ...]]:
    """The compiler and flags of ``make TARGET=rv32`` in a generated project (``make -n`` of
    the project Makefile's template, so the flags are the project's own)."""
    from mico.codegen.makefile import makefile

    with tempfile.TemporaryDirectory(prefix="mico-codesize-") as tmp:
        Path(tmp, "Makefile").write_text(makefile("model", ["main.c", "model.c"]))
        for name in ("main.c", "model.c"):
            Path(tmp, name).write_text("")
        listing = _run(["make", "-n", "-B", "TARGET=rv32"], "make -n TARGET=rv32", Path(tmp))
    for line in listing.splitlines():
        words = shlex.split(line)
        if "-o" in words and words[words.index("-o") + 1] == "model.elf" and words[0] != "echo":
            rest = [w for w in words[1:] if not w.endswith(".c") and w not in ("-lm",)]
            out = rest.index("-o")
            return words[0], tuple(rest[:out] + rest[out + 2 :])
    raise BuildError("make -n TARGET=rv32 names no command building model.elf")


def kernel_object(source: str) -> Path:
    """mico's kernel ``source`` (a file of ``mico/csrc``) compiled for rv32 with the project's
    flags, kept in :mod:`mico.hw.objcache`'s object cache (the same key: compiler, flags, the
    source and the headers it includes)."""
    from mico.hw.objcache import _compiler_id, _headers

    cc, flags = build_command()
    store = _cache_dir()
    store.mkdir(parents=True, exist_ok=True)
    with resources.as_file(resources.files("mico.csrc") / source) as path:
        if not path.is_file():
            raise CompileError(f"'{source}' is not one of mico's kernel sources (mico/csrc)")
        digest = hashlib.sha256(_compiler_id(cc).encode())
        digest.update(shlex.join(flags).encode())
        digest.update(source.encode())
        for item in (path, *_headers(path)):
            digest.update(item.name.encode())
            digest.update(item.read_bytes())
        obj = store / f"{Path(source).stem}-{digest.hexdigest()[:24]}.o"
        if not obj.is_file():
            with tempfile.TemporaryDirectory(prefix="mico-codesize-") as tmp:
                partial = Path(tmp) / obj.name
                _run([cc, *flags, "-c", source, "-o", str(partial)],
                     f"compiling {source} for rv32", path.parent)  # fmt: skip
                os.replace(partial, obj)
    return obj


def _kernel(source: str) -> ObjectFile:
    """The parsed object of kernel ``source`` as it is now (an edited source is another
    object, so a long-lived process never reads a stale one)."""
    return _read_kernel(kernel_object(source), source.removesuffix(".c") + ".o")


@lru_cache(maxsize=128)
def _read_kernel(path: Path, name: str) -> ObjectFile:
    return read_object(path, name)


_MAP_SECTION = re.compile(r"^ (\.\S+)\s*\n?\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+(\S.*)$", re.M)


def map_sections(text: str) -> list[tuple[str, int, str]]:
    """``(section, bytes, input file)`` of every input section a linker map places."""
    body = text.partition("Linker script and memory map")[2]
    return [(m.group(1), int(m.group(3), 16), m.group(4).strip())
            for m in _MAP_SECTION.finditer(body)]  # fmt: skip


def _member_name(path: str) -> str:
    """``libc.a(memcpy.o)`` for a map's ``/path/libc.a(memcpy.o)``, else the file's name."""
    head, sep, member = path.partition("(")
    return f"{Path(head).name}{sep}{member}" if sep else Path(path).name


TRIVIAL_MAIN = "int main(void)\n{\n    return 0;\n}\n"


@dataclass(frozen=True)
class Runtime:
    """What every rv32 program links besides the model: its flash, the libraries searched, the
    library sections it already holds and its static RAM (data + bss: start-up, stdio)."""

    flash: int
    libraries: tuple[str, ...]
    sections: tuple[tuple[str, str], ...]
    ram: int


def runtime() -> Runtime:
    """The runtime of an rv32 program (``crt0``, picolibc's start-up and exit): a trivial
    ``main`` linked with the project's flags, measured once per compiler and flags and kept
    beside the kernel objects."""
    from mico.hw.objcache import _compiler_id
    from mico.targets.rv32 import SIZE_TOOL, _section_totals

    cc, flags = build_command()
    key = hashlib.sha256((_compiler_id(cc) + shlex.join(flags)).encode()).hexdigest()[:24]
    path = _cache_dir() / f"runtime-{key}.json"
    if path.is_file():
        data = json.loads(path.read_text())
        if "ram" in data:  # (a record from before RAM was kept: measured again)
            return Runtime(data["flash"], tuple(data["libraries"]),
                           tuple(tuple(s) for s in data["sections"]), data["ram"])  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="mico-codesize-") as tmp:
        Path(tmp, "main.c").write_text(TRIVIAL_MAIN)
        _run([cc, *flags, "-Wl,-Map=main.map", "-o", "main.elf", "main.c", "-lm"],
             "linking a trivial rv32 program", Path(tmp))  # fmt: skip
        flash = _section_totals(_run([SIZE_TOOL, "-A", "-d", "main.elf"], "size", Path(tmp)))
        text = Path(tmp, "main.map").read_text()
    libraries = [line.split(None, 1)[1].strip() for line in text.splitlines()
                 if line.startswith("LOAD ") and line.rstrip().endswith(".a")]  # fmt: skip
    sections = sorted({(_member_name(f), s) for s, _, f in map_sections(text) if "(" in f})
    result = Runtime(flash["flash"], tuple(dict.fromkeys(libraries)), tuple(sections),
                     flash["ram"])  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps({"flash": result.flash, "libraries": list(result.libraries),
                                   "sections": [list(s) for s in result.sections],
                                   "ram": result.ram}))  # fmt: skip
    os.replace(partial, path)
    return result


def kernel_graph(kernels: Iterable[str], extra: Sequence[ObjectFile] = ()) -> SectionGraph:
    """The section graph of ``extra`` objects (the model's own) and mico's ``kernels`` (file
    names of ``mico/csrc``) in link order, with the runtime's libraries, whose sections the
    runtime already links not counted again."""
    require_tools()
    base = runtime()
    objects = [*extra, *(_kernel(k) for k in kernels if k.endswith(".c"))]
    return SectionGraph(objects, [Path(p) for p in base.libraries], base.sections)


def kernel_bytes(entry_points: Iterable[str], kernels: Iterable[str] | None = None) -> Closure:
    """Bytes linked on rv32 for ``entry_points`` of mico's kernels (``kernels``: the sources
    to search, default every ``.c`` file of ``mico/csrc``), libraries included."""
    from mico.hw.keys import kernel_sources

    names = sorted(kernel_sources()) if kernels is None else list(kernels)
    return kernel_graph(names).closure(entry_points)


@dataclass(frozen=True)
class ProgramFlash:
    """A scheme's program flash on rv32 by part (bytes)."""

    #: the project's constants as the code generator counts them (``size``)
    constants: int
    #: the model's object: its run function, constants and kernel parameters, as linked
    model: int
    #: mico's kernel code and tables the run function reaches
    kernels: int
    #: picolibc and libgcc functions the kernels call that the runtime does not link already
    libraries: int
    #: the runtime every program links (start-up, exit)
    runtime: int

    @property
    def total(self) -> int:
        """The program's flash: runtime + model object + kernels + libraries."""
        return self.runtime + self.model + self.kernels + self.libraries

    @property
    def code(self) -> int:
        """Flash beyond the constants: total minus ``constants``."""
        return self.total - self.constants


def model_object(
    graph: Any, name: str = "model", align: int = 8, prefer: str = "speed"
) -> tuple[ObjectFile, list[str]]:
    """The scheme's ``<name>.c`` (as :func:`mico.codegen.project.emit_c_project` writes it,
    with the kernel preference ``prefer``) compiled for rv32 in a scratch folder, and the
    kernel sources it links."""
    from mico.codegen.project import model_sources

    files, kernels, extra = model_sources(graph, name, align, prefer)
    if extra:
        raise CompileError(
            f"the flash estimate compiles mico's kernels only; this graph also needs the "
            f"handler kernel(s) {', '.join(sorted(extra))}: build the project for rv32 "
            "(mico.targets.rv32.model_sizes) to measure it"
        )
    cc, flags = build_command()
    with tempfile.TemporaryDirectory(prefix="mico-codesize-") as tmp:
        for file, text in files.items():
            Path(tmp, file).write_text(text)
        _run([cc, *flags, "-c", f"{name}.c", "-o", f"{name}.o"], f"compiling {name}.c for rv32",
             Path(tmp))  # fmt: skip
        return read_object(Path(tmp, f"{name}.o")), kernels


def program_flash(
    graph: Any, name: str = "model", align: int = 8, prefer: str = "speed"
) -> ProgramFlash:
    """The rv32 flash of the program ``mico compile --prefer P`` emits for the lowered
    ``graph``: its run function's closure (model object, kernels, library functions) and the
    runtime. ``prefer="size"`` links the plain kernels only (:mod:`mico.codegen.linked_paths`)."""
    from mico.codegen.linked_paths import check_preference
    from mico.codegen.project import project_flash

    check_preference(prefer)
    require_tools()
    obj, kernels = model_object(graph, name, align, prefer)
    closure = kernel_graph(kernels, [obj]).closure([f"{name}_run"])
    kernel_names = {_kernel(k).name for k in kernels if k.endswith(".c")}
    parts = {"model": 0, "kernels": 0, "libraries": 0}
    for owner, size in closure.by_object.items():
        part = "model" if owner == obj.name else "kernels" if owner in kernel_names else "libraries"
        parts[part] += size
    padding = closure.flash - sum(parts.values())  # alignment between sections
    constants = sum(project_flash(graph, align, prefer).values())
    return ProgramFlash(constants, parts["model"], parts["kernels"] + padding,
                        parts["libraries"], runtime().flash)  # fmt: skip


def _caller_main(name: str) -> str:
    up = name.upper()
    return f"""#include "{name}.h"

static float input[{up}_INPUT_SIZE];
static {name}_output_t output[{up}_OUTPUT_SIZE];

int main(void)
{{
    return {name}_run(input, output);
}}
"""


def linked_flash(
    graph: Any,
    name: str = "model",
    align: int = 8,
    main: str | None = None,
    prefer: str = "speed",
) -> ProgramFlash:
    """What :func:`program_flash` predicts, measured: the program linked for rv32 (``main``:
    the C source of its ``main``, default one that runs the model once) and its linker map
    read back, each input section's linked bytes given to its part (``runtime``: the ELF's
    flash less the other parts, so ``total`` is the ELF's flash; ``prefer``: the program's
    kernel preference)."""
    from mico.codegen.linked_paths import check_preference
    from mico.codegen.project import model_sources, project_flash
    from mico.targets.rv32 import SIZE_TOOL, _section_totals

    check_preference(prefer)
    require_tools()
    files, kernels, _ = model_sources(graph, name, align, prefer)
    objects = {str(kernel_object(k)): "kernels" for k in kernels if k.endswith(".c")}
    cc, flags = build_command()
    with tempfile.TemporaryDirectory(prefix="mico-codesize-") as tmp:
        for file, text in files.items():
            Path(tmp, file).write_text(text)
        Path(tmp, "main.c").write_text(main if main is not None else _caller_main(name))
        _run([cc, *flags, "-c", f"{name}.c", "-o", f"{name}.o"], f"compiling {name}.c",
             Path(tmp))  # fmt: skip
        _run([cc, *flags, "-Wl,-Map=prog.map", "-o", "prog.elf", "main.c", f"{name}.o",
              *objects, "-lm"], f"linking {name} for rv32", Path(tmp))  # fmt: skip
        totals = _section_totals(_run([SIZE_TOOL, "-A", "-d", "prog.elf"], "size", Path(tmp)))
        placed = map_sections(Path(tmp, "prog.map").read_text())
    base = set(runtime().sections)
    parts = {"model": 0, "kernels": 0, "libraries": 0}
    for section, size, owner in placed:
        if section_kind(section) not in FLASH_KINDS:
            continue
        if owner == f"{name}.o":
            parts["model"] += size
        elif owner in objects:
            parts["kernels"] += size
        elif "(" in owner and (_member_name(owner), section) not in base:
            parts["libraries"] += size
    return ProgramFlash(sum(project_flash(graph, align, prefer).values()), parts["model"],
                        parts["kernels"], parts["libraries"],
                        totals["flash"] - sum(parts.values()))  # fmt: skip
