"""Worst-case stack depth of an rv32 program, bounded statically from GCC's ``-fstack-usage``.

Each function's frame comes from the ``.su`` file GCC writes beside an object compiled with
``-fstack-usage`` (the flag changes no code: the object is the one the program links). The
call graph is :class:`mico.hw.codesize.SectionGraph`'s: one section per function
(``-ffunction-sections``), edges from its relocations, undefined symbols resolved in the
program's objects and then in the libraries the target links. Library members (picolibc,
libgcc) have no ``.su``: their frames are read from their prologues (``objdump -d``: the
``addi sp,sp,-N`` a function opens with; a function that moves ``sp`` by a register is refused).

The bound of a function is its frame plus the deepest of its callees', so the bound is the
deepest chain of frames the program can nest, whatever the data. It refuses what it cannot
bound, with a :class:`~mico.errors.CompileError` naming the function:

* recursion (a cycle in the call graph): no finite bound without knowing the depth. The one
  known exception, :data:`BOUNDED_RECURSION`, is a function that calls itself a known number
  of times at most: its frame counts that many times more;
* a ``dynamic`` frame (``alloca``, a variable-length array) GCC could not bound; a
  ``dynamic,bounded`` frame counts with the bound GCC gives.

Indirect calls: a function whose address a function ``f`` takes (a relocation that is not a
call: a function pointer passed to a callee, or a table of them in ``f``'s constants) may be
called by any function under ``f`` that calls through a register (``jalr``/``jr`` that is not
the ``auipc`` pair of a direct call: :func:`indirect_callers`); the bound follows it there.
mico's kernels use function pointers only that way (an entry passes its block kernels down to
the path that calls them; a depthwise entry picks from a static table); the generated run
function calls every kernel directly. A pointer to a function already on the chain is not
followed (that would be recursion through a pointer, which mico's kernels do not do; a
switch's jump table also reads as an indirect jump), so such recursion is not detected.

``exclude`` names what a program never does although it is linked: a function never entered
(the kernels' stack fallbacks ``mico_nw_stack``, ``mico_lanes_rows_stack``,
``mico_sl_conv_stack``, ``mico_sl_linear_stack``, ``mico_as_stack``:
:data:`mico.codegen.scratch.STACK_FALLBACKS`, when
every layer that could reach them gets its working memory from the arena, which is what each
fallback's caller checks before calling it: :func:`mico.codegen.project.place_scratch`), or a
call never
made, ``caller>callee`` (``caller`` may end in ``*``). Other paths the data does not take
still count (a kernel's plain fallback under its fast path): the bound is safe, not tight.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from mico.errors import CompileError
from mico.hw import codesize
from mico.hw.codesize import ObjectFile, Section, SectionGraph

OBJDUMP = "riscv64-unknown-elf-objdump"
_SU = re.compile(r"^(.*):(\d+):(\d+):(\S+)\t(\d+)\t(\S+)\s*$")
_CLONE = re.compile(r"(\.\d+)+$")
_FUNC_HEAD = re.compile(r"^[0-9a-f]+ <([^>]+)>:\s*$")
_SP_DOWN = re.compile(r"\baddi?\s+sp,sp,-(\d+)\b")
_SP_REG = re.compile(r"\b(?:sub|add)\s+sp,sp,[a-z]")

#: functions that call themselves directly, and how many calls deep at most (the C shows why)
BOUNDED_RECURSION = {
    # mico_nn_run.c: an asymmetric run packs its codes + zero through mico_pack with the zero
    # point cleared, which takes a path that does not recurse
    "mico_pack": 1,
}

#: libgcc's register-save routines (``-msave-restore``, which libgcc's soft-float functions are
#: built with): called as a function's prologue, they lower ``sp`` by this much at most on rv32
#: (ra and s0-s11 in a 16-aligned block) and return with it lowered, so their bytes count in
#: the caller's frame for as long as the caller runs, not as a callee's
SAVE_ROUTINES = "__riscv_save_"
SAVE_ROUTINE_FRAME = 64


@dataclass(frozen=True)
class Frame:
    """One function's frame as ``-fstack-usage`` reports it."""

    function: str
    size: int
    #: ``static``, ``dynamic`` or ``dynamic,bounded``
    qualifier: str
    where: str = ""

    def bytes(self) -> int:
        """The frame's bytes; an unbounded dynamic frame raises :class:`CompileError`."""
        if "dynamic" in self.qualifier and "bounded" not in self.qualifier:
            raise CompileError(
                f"the stack of {self.function} ({self.where or 'unknown source'}) is dynamic and "
                "unbounded (a variable-length array or alloca GCC cannot bound): mico cannot "
                "bound the program's stack; give the array a constant size"
            )
        return self.size


def _cut(caller: str, callee: str, exclude: frozenset[str]) -> bool:
    """Whether ``exclude`` rules out the call ``caller`` -> ``callee`` (``caller>callee``)."""
    caller, callee = _base_name(caller), _base_name(callee)
    for item in exclude:
        head, sep, tail = item.partition(">")
        if (
            sep
            and tail == callee
            and (head == caller or (head.endswith("*") and caller.startswith(head[:-1])))
        ):
            return True
    return False


def _base_name(symbol: str) -> str:
    """``mico_nw_tile_s8.constprop`` for the symbol ``mico_nw_tile_s8.constprop.0`` (``.su``
    files name GCC's clones without their number)."""
    return _CLONE.sub("", symbol)


def parse_su(text: str) -> dict[str, Frame]:
    """The frames of a ``.su`` file by function (clones of one function: the largest)."""
    frames: dict[str, Frame] = {}
    for line in text.splitlines():
        m = _SU.match(line)
        if not m:
            continue
        name = _base_name(m.group(4))
        frame = Frame(name, int(m.group(5)), m.group(6), f"{m.group(1)}:{m.group(2)}")
        old = frames.get(name)
        if old is None or frame.size > old.size or "dynamic" in frame.qualifier:
            frames[name] = frame
    return frames


def compile_frames(
    source: Path, cwd: Path, flags: Sequence[str] | None = None, keep: bool = False
) -> tuple[ObjectFile, dict[str, Frame]]:
    """``source`` compiled for rv32 with the project's flags and ``-fstack-usage`` (in
    ``cwd``): its object and its frames (``keep``: the object stays in ``cwd``)."""
    cc, base = codesize.build_command()
    with tempfile.TemporaryDirectory(prefix="mico-stack-") as tmp:
        obj = Path(cwd if keep else tmp) / (source.stem + ".o")
        codesize._run(
            [cc, *(base if flags is None else flags), "-fstack-usage", "-c", str(source),
             "-o", str(obj)],
            f"compiling {source.name} for rv32 with -fstack-usage", cwd,
        )  # fmt: skip
        su = obj.with_suffix(".su")
        if not su.is_file():
            raise CompileError(f"{cc} wrote no {su.name} for {source}")
        return codesize.read_object(obj, source.stem + ".o"), parse_su(su.read_text())


def kernel_frames(source: str) -> dict[str, Frame]:
    """The frames of mico's kernel ``source`` (``mico/csrc``) on rv32, kept beside the
    kernel objects (the key of :func:`mico.hw.codesize.kernel_object`)."""
    obj = codesize.kernel_object(source)
    path = obj.with_name(f"stack-{obj.stem}.json")
    if path.is_file():
        data = json.loads(path.read_text())
        return {k: Frame(k, v[0], v[1], v[2]) for k, v in data.items()}
    with resources.as_file(resources.files("mico.csrc") / source) as src:
        _, frames = compile_frames(Path(source), src.parent)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps({k: [f.size, f.qualifier, f.where] for k, f in frames.items()}))
    os.replace(partial, path)
    return frames


def library_frames(archive: Path, member: str) -> dict[str, Frame]:
    """Frames of a library member's functions from their code (no ``.su`` for picolibc or
    libgcc: :func:`prologue_frames`)."""
    return _member_facts(archive, member)[0]


@lru_cache(maxsize=512)
def _member_facts(archive: Path, member: str) -> tuple[dict[str, Frame], frozenset[str]]:
    with tempfile.TemporaryDirectory(prefix="mico-stack-") as tmp:
        data = subprocess.run(["riscv64-unknown-elf-ar", "p", str(archive), member],
                              capture_output=True, check=False)  # fmt: skip
        if data.returncode != 0:
            raise CompileError(f"extracting {member} from {archive} failed")
        obj = Path(tmp) / "member.o"
        obj.write_bytes(data.stdout)
        return _code_facts.__wrapped__(obj, f"{archive.name}({member})")


@lru_cache(maxsize=64)
def prologue_frames(obj: Path, where: str = "") -> dict[str, Frame]:
    """Frames of an object's functions read from their code (``objdump -d``): the sum of the
    ``addi sp,sp,-N`` each holds (``add sp,sp,-N``: the compressed form); one that moves ``sp``
    by a register is recorded as an unbounded dynamic frame. For functions GCC wrote no
    ``.su`` line for: libraries, and functions in top-level assembly (``mico_nw_q5_rv32``)."""
    return _code_facts(obj, where)[0]


def indirect_callers(obj: Path) -> frozenset[str]:
    """The functions of an object that call through a register (``jalr``/``jr`` not paired
    with the ``auipc`` of a direct call or tail call; a switch's jump table counts too)."""
    return _code_facts(obj, "")[1]


@lru_cache(maxsize=128)
def _code_facts(obj: Path, where: str) -> tuple[dict[str, Frame], frozenset[str]]:
    listing = codesize._run([OBJDUMP, "-d", str(obj)], f"disassembling {where or obj}")
    frames: dict[str, Frame] = {}
    indirect: set[str] = set()
    current: str | None = None
    previous = ""
    for line in listing.splitlines():
        head = _FUNC_HEAD.match(line)
        if head and not head.group(1).startswith(".L"):  # (a local label: the same function)
            current, previous = head.group(1), ""
            frames[current] = Frame(current, 0, "static", where or obj.name)
            continue
        parts = line.split("\t")
        if current is None or len(parts) < 3:
            continue
        op, args = parts[2].strip(), (parts[3] if len(parts) > 3 else "").split("#")[0].strip()
        old = frames[current]
        down = _SP_DOWN.search(line)
        if down:
            frames[current] = Frame(current, old.size + int(down.group(1)), old.qualifier,
                                    old.where)  # fmt: skip
        elif _SP_REG.search(line):
            frames[current] = Frame(current, old.size, "dynamic", old.where)
        if op in ("jalr", "jr"):
            register = args.split(",")[0]
            if not previous.startswith(f"auipc {register},"):
                indirect.add(current)
        previous = f"{op} {args}"
    return frames, frozenset(indirect)


@dataclass(frozen=True)
class StackBound:
    """The deepest stack a function can reach: bytes, and the chain of frames that reach it."""

    bytes: int
    chain: tuple[tuple[str, int], ...]

    def describe(self) -> str:
        """``f (48) > g (96) > ...``"""
        return " > ".join(f"{name} ({size})" for name, size in self.chain)


class StackGraph:
    """Frames over a :class:`SectionGraph`: the stack bound of any function it defines."""

    def __init__(
        self,
        graph: SectionGraph,
        frames: dict[str, dict[str, Frame]],
        paths: dict[str, Path] | None = None,
    ) -> None:
        """``frames``: each program object's ``.su`` frames, by object name; ``paths``: the
        objects' files, whose code gives the frames of functions the ``.su`` lacks
        (:func:`prologue_frames`); library members get theirs from :func:`library_frames`."""
        self.graph = graph
        self.frames = frames
        self.paths = paths or {}
        self._memo: dict[tuple[Any, ...], StackBound] = {}
        self._labels: dict[tuple[int, int], str] = {}

    def _node(self, obj: ObjectFile, index: int) -> tuple[ObjectFile, Section] | None:
        section = obj.sections.get(index)
        return None if section is None else (obj, section)

    def _resolve(self, name: str, caller: str) -> tuple[ObjectFile, int] | None:
        found = self.graph.resolve(name)
        return None if found is None else (found[0], found[1])

    def _names(self, obj: ObjectFile, section: Section) -> list[str]:
        return obj.functions.get(section.index) or [section.name.removeprefix(".text.")]

    def _frame(self, obj: ObjectFile, section: Section) -> int:
        names = self._names(obj, section)
        table = self.frames.get(obj.name)
        if table is None:
            table = library_frames(*self._member(obj))
        sizes = []
        for name in names:
            frame = table.get(_base_name(name)) or table.get(name)
            if frame is None and obj.name in self.paths:
                frame = prologue_frames(self.paths[obj.name]).get(name)
            if frame is not None:
                sizes.append(frame.bytes())
        # (an alias at another's address, libgcc's __gtsf2 of __gesf2, has no label of its
        # own in the disassembly: the section's code is the one found under another name)
        if not sizes:
            raise CompileError(
                f"no stack usage recorded for {names[0]} in {obj.name}: mico cannot bound the "
                "program's stack (compile it with -fstack-usage)"
            )
        return max(sizes)

    def _edges(
        self, obj: ObjectFile, section: Section
    ) -> tuple[list[tuple[ObjectFile, Section]], list[tuple[ObjectFile, Section]]]:
        """Direct callees, and the functions whose address the section takes (through its
        constants too)."""
        name = self._names(obj, section)[0]
        calls: dict[tuple[int, int], tuple[ObjectFile, Section]] = {}
        for _, (scope, what, _) in section.calls:
            if scope == "local":
                target = (obj, what)
            else:
                found = self._resolve(what, name)
                if found is None:
                    continue  # an undefined weak function: never called
                target = found
            node = self._node(*target)
            if node is not None and node[1].kind == "text":
                calls[(id(node[0]), node[1].index)] = node
        taken: dict[tuple[int, int], tuple[ObjectFile, Section]] = {}
        seen: set[tuple[int, int]] = set()
        todo: list[tuple[ObjectFile, Section]] = [(obj, section)]
        while todo:
            o, s = todo.pop()
            refs = [(o, i) for i in s.local]
            for sym in s.globals:
                found = self._resolve(sym, name)
                if found is not None:
                    refs.append(found)
            for ref in refs:
                node = self._node(*ref)
                if node is None:
                    continue
                key = (id(node[0]), node[1].index)
                if key in seen or key in calls or node[1] is section:
                    continue
                seen.add(key)
                if node[1].kind == "text":
                    taken[key] = node
                elif node[1].kind in ("rodata", "data"):
                    todo.append(node)  # a table of function pointers, or plain constants
        return list(calls.values()), list(taken.values())

    def bound(self, entry: str, exclude: Iterable[str] = ()) -> StackBound:
        """The worst-case stack of a call of ``entry`` (its frame included); ``exclude``:
        functions never entered (bound 0) and calls never made (``caller>callee``). Recursion
        and unbounded dynamic frames raise :class:`CompileError`."""
        found = self.graph.resolve(entry)
        if found is None:
            raise CompileError(f"no object or library defines '{entry}'")
        node = self._node(found[0], found[1])
        if node is None:
            raise CompileError(f"'{entry}' is not defined in an allocated section")
        return self._bound(node, frozenset(exclude), (), ())

    def _indirect(self, obj: ObjectFile, section: Section) -> bool:
        """Whether the function calls through a register (code not at hand: assumed so)."""
        path = self.paths.get(obj.name)
        if path is not None:
            callers = indirect_callers(path)
        elif obj.name in self.frames:
            return True
        else:
            archive, member = self._member(obj)
            callers = _member_facts(archive, member)[1]
        return any(n in callers for n in self._names(obj, section))

    def _member(self, obj: ObjectFile) -> tuple[Path, str]:
        """The archive and member of a library object (``libc.a(memcpy.o)``)."""
        archive, _, member = obj.name.partition("(")
        library = next((lib.path for lib in self.graph.libraries if lib.path.name == archive),
                       None)  # fmt: skip
        if library is None:
            raise CompileError(f"no stack usage for the object {obj.name}")
        return library, member.rstrip(")")

    def _bound(
        self,
        node: tuple[ObjectFile, Section],
        exclude: frozenset[str],
        path: tuple[tuple[int, int], ...],
        pointers: tuple[tuple[ObjectFile, Section], ...],
    ) -> StackBound:
        """``pointers``: functions whose address a caller took (they may be called wherever
        a function calls through a register below it)."""
        obj, section = node
        key = (id(obj), section.index)
        names = self._names(obj, section)
        self._labels[key] = names[0]
        if key in path:
            chain = [*path[path.index(key) :], key]
            raise CompileError(
                f"recursion in the call graph ({' -> '.join(self._label(k) for k in chain)}): "
                "mico cannot bound the stack of a recursive program; make the recursion a loop"
            )
        if any(_base_name(n) in exclude or n in exclude for n in names):
            return StackBound(0, ())
        calls, taken = self._edges(obj, section)
        held = {(id(o), s.index): (o, s) for o, s in (*pointers, *taken)}
        pointers = tuple(held[k] for k in sorted(held))
        memo = (key, exclude, tuple(sorted(held)))
        if memo in self._memo:
            return self._memo[memo]
        frame = self._frame(obj, section)
        calls = [c for c in calls if not _cut(names[0], self._names(*c)[0], exclude)]
        saves = [c for c in calls if self._names(*c)[0].startswith(SAVE_ROUTINES)]
        if saves:  # a prologue in libgcc: its bytes are the caller's frame
            calls = [c for c in calls if not self._names(*c)[0].startswith(SAVE_ROUTINES)]
            frame += SAVE_ROUTINE_FRAME
        again = BOUNDED_RECURSION.get(_base_name(names[0]), 0)
        if again:
            calls = [c for c in calls if c[1] is not section]
            frame *= 1 + again
        here = (*path, key)
        below = [self._bound(c, exclude, here, pointers) for c in calls]
        if pointers and self._indirect(obj, section):
            # (a pointer to a function already on the chain is not followed: mico passes
            # only block kernels down, and a switch's jump table reads as an indirect jump)
            below += [self._bound(t, exclude, here, pointers) for t in pointers
                      if (id(t[0]), t[1].index) not in here]  # fmt: skip
        best = max(below, key=lambda b: b.bytes, default=StackBound(0, ()))
        result = StackBound(frame + best.bytes, ((names[0], frame), *best.chain))
        self._memo[memo] = result
        return result

    def _label(self, key: tuple[int, int]) -> str:
        return self._labels.get(key, "?")


def kernels_stack(
    kernels: Iterable[str], extra: Sequence[tuple[ObjectFile, dict[str, Frame], Path]] = ()
) -> StackGraph:
    """The stack graph of mico's ``kernels`` (sources of ``mico/csrc``) and ``extra`` objects
    with their frames and files (the model's), with the runtime's libraries."""
    sources = [k for k in kernels if k.endswith(".c")]
    graph = codesize.kernel_graph(sources, [o for o, _, _ in extra])
    frames = {o.name: f for o, f, _ in extra}
    paths = {o.name: path for o, _, path in extra}
    for source in sources:
        name = codesize._kernel(source).name
        frames[name] = kernel_frames(source)
        paths[name] = codesize.kernel_object(source)
    return StackGraph(graph, frames, paths)


def kernel_bound(entries: Iterable[str], kernels: Iterable[str],
                 exclude: Iterable[str] = ()) -> int:  # fmt: skip
    """The deepest stack of a call of any of ``entries`` (kernel functions of ``kernels``'
    sources), ``exclude`` never entered; entries no kernel object defines (inline helpers
    of the headers) count 0. Remembered per kernel objects (their sources' digests)."""
    sources = tuple(sorted(k for k in kernels if k.endswith(".c")))
    objects = tuple(str(codesize.kernel_object(k)) for k in sources)
    return _kernel_bound(tuple(sorted(set(entries))), sources, objects,
                         frozenset(exclude))  # fmt: skip


@lru_cache(maxsize=256)
def _kernel_bound(entries: tuple[str, ...], sources: tuple[str, ...], objects: tuple[str, ...],
                  exclude: frozenset[str]) -> int:  # fmt: skip
    del objects  # the cache key: the kernel objects as they are now
    graph = kernels_stack(sources)
    best = 0
    for entry in entries:
        if graph.graph.resolve(entry) is not None:
            best = max(best, graph.bound(entry, exclude).bytes)
    return best


def program_stack(
    graph: Any, name: str = "model", align: int = 8, prefer: str = "speed"
) -> StackBound:
    """The worst-case stack of ``<name>_run`` on rv32 for the program :func:`mico.codegen.
    project.emit_c_project` writes for the lowered ``graph``: ``<name>.c`` and the kernels it
    links compiled with the project's flags (and ``-fstack-usage``), the kernels' stack
    fallbacks that the program's planned scratch rules out not entered. What ``main.c``'s
    stack probe measures below ``main`` (``stack`` in an rv32 run) is at most this."""
    return program_ram(graph, name, align, prefer).stack


def project_stack(project: Any) -> StackBound:
    """The worst-case stack of ``<name>_run`` on rv32 for a generated project as written (a
    :class:`mico.codegen.project.CProject`: its patches included, which
    :func:`program_stack` re-emitting the graph would not have): the project's own
    ``<name>.c`` and handler sources compiled with ``-fstack-usage`` in a scratch copy (the
    project's folder gets no objects), mico's kernels it lists from ``mico/csrc``, the stack
    fallbacks its ``mico.json`` records as never entered (``scratch_placement.excluded``) left
    out. Needs the rv32 toolchain; recursion or an unbounded frame raises CompileError."""
    codesize.require_tools("the rv32 stack bound")
    directory, name = Path(project.directory), project.name
    manifest = directory / "mico.json"
    placement = json.loads(manifest.read_text()).get("scratch_placement") if manifest.is_file() \
        else None  # fmt: skip
    excluded = list((placement or {}).get("excluded", ()))
    ours = {entry.name for entry in resources.files("mico.csrc").iterdir()}
    sources = [f for f in project.files if f.endswith(".c") and f != "main.c"]
    kernels = [f for f in sources if f in ours and f != f"{name}.c"]
    own = [f for f in sources if f not in kernels]
    with tempfile.TemporaryDirectory(prefix="mico-stack-") as tmp:
        for file in project.files:
            if file.endswith((".c", ".h")):
                Path(tmp, file).parent.mkdir(parents=True, exist_ok=True)
                Path(tmp, file).write_bytes((directory / file).read_bytes())
        extra = []
        for file in own:
            obj, frames = compile_frames(Path(file), Path(tmp), keep=True)
            extra.append((obj, frames, Path(tmp, Path(file).stem + ".o")))
        return kernels_stack(kernels, extra).bound(f"{name}_run", excluded)


@dataclass(frozen=True)
class ProgramRam:
    """A scheme's RAM on rv32 by part (bytes): what a device's RAM must hold to run it."""

    #: the static arena (tensors and the kernels' scratch planned in it): ``arena_bytes``
    arena: int
    #: the other data + bss the run function links (the model object besides the arena,
    #: kernels, picolibc / libgcc members the runtime does not link already)
    static: int
    #: data + bss of the runtime every program links (start-up, stdio: a trivial program's)
    runtime: int
    #: the worst-case stack of a call of the run function (its frame and the deepest chain
    #: of kernel frames below it; the caller's own frames are not counted)
    stack: StackBound

    @property
    def total(self) -> int:
        """arena + static + runtime + stack bound."""
        return self.arena + self.static + self.runtime + self.stack.bytes


_ARENA_SYMBOLS = ("mico_arena", "mico_arena_raw")


def program_ram(
    graph: Any, name: str = "model", align: int = 8, prefer: str = "speed"
) -> ProgramRam:
    """The rv32 RAM of the program :func:`mico.codegen.project.emit_c_project` writes for the
    lowered ``graph`` (kernel preference ``prefer``), by part: its arena, the static data and
    bss the run function's closure links (:class:`mico.hw.codesize.SectionGraph`, the sections
    ``--gc-sections`` keeps), the runtime's, and the stack bound of ``<name>_run``
    (:func:`program_stack`), all from one emission and one compilation of ``<name>.c``.
    Needs the rv32 toolchain (:class:`~mico.errors.BuildError` names what to install);
    recursion or an unbounded frame raises :class:`~mico.errors.CompileError`."""
    from mico.codegen.project import model_program

    codesize.require_tools("the rv32 RAM bound (static data and stack)")
    program = model_program(graph, name, align, prefer)
    if program.extra_kernels:
        raise CompileError(
            f"the stack bound compiles mico's kernels only; this graph also needs the handler "
            f"kernel(s) {', '.join(sorted(program.extra_kernels))}"
        )
    excluded = program.scratch_placement["excluded"]
    with tempfile.TemporaryDirectory(prefix="mico-stack-") as tmp:
        for file, text in program.files.items():
            Path(tmp, file).write_text(text)
        obj, frames = compile_frames(Path(f"{name}.c"), Path(tmp), keep=True)
        stack = kernels_stack(program.kernels, [(obj, frames, Path(tmp, f"{name}.o"))])
        bound = stack.bound(f"{name}_run", excluded)
        closure = stack.graph.closure([f"{name}_run"])
    held = sum(sec.size for sec in closure.sections if sec.kind in ("data", "bss"))
    arena_bytes = sum(sec.size for sec in closure.sections if sec.obj == obj.name
                      and sec.name.rsplit(".", 1)[-1] in _ARENA_SYMBOLS)  # fmt: skip
    if arena_bytes < program.arena:
        raise CompileError(
            f"the arena of {name}.c ({program.arena} bytes planned) is not in a section of its "
            f"own in {obj.name} (found {arena_bytes} bytes): compile with -fdata-sections"
        )
    # (an arena aligned beyond 8 bytes is over-allocated by align - 1: counted as static)
    return ProgramRam(program.arena, held - program.arena, codesize.runtime().ram, bound)
