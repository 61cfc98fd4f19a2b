"""A KV-cached one-token decode step for the static (integer-only) LLaMA generation program.

In static mode every scale is a compile-time constant and the model is causal, so the codes
the window computes at position ``t`` never depend on the positions after it: the keys and
values of earlier positions, as codes, stay what they were. ``gen_decode(token, pos)`` runs
one position through the model and keeps its keys and values in a cache of codes.

It is derived from the model's own ``<name>_run`` (the emitted ``<name>.c``), call by call: each
kernel call of the window is repeated on one position with the same kernel, the same param
structs and tables (a struct with the row count baked in is copied into a local and given the
one-row count), so every code equals the window's code at that position, bit for bit:

- row-wise kernels (``mico_qlinear`` and its lane variants, ``mico_qrmsnorm``, ``mico_lut``,
  ``mico_qmul``, ``mico_add``, ``mico_requant`` with one multiplier) compute each row, or each
  element, from that row alone; a call given planned scratch in the window (the sign tables,
  ``mico_qlinear_sign_lut``, through a local copy of its params) is given scratch sized for
  one row in the decode step's own buffer (one for all such calls), never the window's arena,
  which the caches may share;
- ``mico_qrope`` reads the tables of the position it is given: they are passed from row ``pos``;
- the score matmul ``q . K^T`` reads the cache laid out as the window's ``K^T`` buffer (the
  same format, packed as the window packs it): column ``j`` is key ``j``; columns past ``pos``
  hold zeros (or older codes) and give scores the prefix softmax never reads;
- ``mico_qsoftmax_prefix`` takes the limits from row ``pos`` (``limits[pos] = pos + 1``): a
  row's result depends on its own first ``limit`` codes only; its codes past the limit are 0;
- ``P . V`` over the cache laid out as the window's ``V`` buffer: the probabilities past the
  prefix are code 0, so they add exact zeros (integer sums: the order does not matter);
- the window's layout copies (``mico_copy``: transposes between ``[T, H, hd]`` and
  ``[H, T, hd]``) are the identity on one position (the program reads the same buffer); the
  two whose outputs are the score and value matmuls' ``B`` write the position's codes into
  the cache instead (at column / row ``pos``).

Any call outside this list, or a struct whose count is not the window's, and the plan is refused
with the reason (:func:`static_decode_plan` returns a string): nothing is guessed.

Memory: the caches are exactly the window's ``K^T`` and ``V`` buffers of every layer (their
codes packed as the model stores them: one byte per 8-bit code, two 4-bit codes a byte), plus
one position's activations (each node's output its own slice, no reuse: a few KB) and the
int32 logits. Laid over the model's arena when they fit (the arena only serves the full window,
which runs once the cache is dead: past ``seq_len`` tokens the window slides and the program
falls back to it), else a static buffer of their own. Grouped-query attention is not cached.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ALIGN = 8
#: ``/* node: op -> int8[1, 64, 64] */`` and the kernel call under it
_CALL = re.compile(
    r"/\* (\w+): ([\w.]+) -> (\w+?)(\d+)\[([\d, ]+)\] \*/\s*\n\s*(mico_\w+)\((.*)\);"
)
#: the same, the call given planned scratch through a local copy of its params
#: (mico.codegen.emitters._scratch_call): ``{ MicoLinear p_ = sym; p_.scratch = ...;
#: p_.scratch_bytes = n; kernel(&p_, ...); }``
_BLOCK = re.compile(
    r"/\* (\w+): ([\w.]+) -> (\w+?)(\d+)\[([\d, ]+)\] \*/\s*\n\s*\{\s*\n"
    r"\s*Mico\w+ p_ = (\w+);\s*\n\s*p_\.scratch = (MICO_ARENA\(\d+\));\s*\n"
    r"\s*p_\.scratch_bytes = (\d+);\s*\n\s*(mico_\w+)\(&p_, (.*)\);\s*\n\s*\}"
)
_ARENA = re.compile(r"^MICO_ARENA\((\d+)\)$")
#: every node's comment in ``<name>_run``, whatever code follows it
_NODE = re.compile(r"/\* (\w+): [\w.]+ -> \w+\[[\d, ]+\] \*/")


@dataclass
class _Call:
    """One kernel call of the window's ``<name>_run``."""

    node: str
    op: str
    bits: int
    shape: tuple[int, ...]
    func: str
    args: list[str]
    #: the window's planned scratch (arena expression, bytes) of a call given some
    scratch: tuple[str, int] | None = None

    @property
    def out_arg(self) -> int:
        return _OUT_ARG[self.func_kind]

    @property
    def func_kind(self) -> str:
        if self.func in _PLAIN_LINEAR:
            return "mico_qlinear"  # the same call: (&params, in, out)
        return "mico_qlinear_lanes" if self.func.startswith("mico_qlinear_lanes_") else self.func

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape))


#: linear entry points called as mico_qlinear is (&params, in, out), the decode step repeating
#: them one row at a time alike
_PLAIN_LINEAR = ("mico_qlinear_s8", "mico_qlinear_sub4", "mico_qlinear_sub2",
                 "mico_qlinear_sign_lut")  # fmt: skip
#: which argument of each kernel is its output buffer (the others' arena arguments are inputs)
_OUT_ARG = {"mico_qembedding": 3, "mico_qrmsnorm": 2, "mico_qlinear": 2, "mico_qlinear_lanes": 3,
            "mico_copy": 2, "mico_qrope": 2, "mico_qmatmul": 4, "mico_requant": 2,
            "mico_qsoftmax_prefix": 2, "mico_add": 3, "mico_lut": 1, "mico_qmul": 4}  # fmt: skip


class Refused(Exception):
    """The program is not one the decode step can follow (the message says why)."""


def split_args(text: str) -> list[str]:
    """The top-level comma-separated arguments of a C call (braces and parentheses nest)."""
    args, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "({":
            depth += 1
        elif ch in ")}":
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(text[start:i].strip())
            start = i + 1
    args.append(text[start:].strip())
    return args


def _call(m: re.Match) -> _Call:
    shape = tuple(int(d) for d in m[5].split(","))
    return _Call(m[1], m[2], int(m[4]), shape, m[6], split_args(m[7]))


def _block_call(m: re.Match) -> _Call:
    """A call given planned scratch (:data:`_BLOCK`), its params named by their symbol."""
    shape = tuple(int(d) for d in m[5].split(","))
    args = [f"&{m[6]}", *split_args(m[10])]
    return _Call(m[1], m[2], int(m[4]), shape, m[9], args, (m[7], int(m[8])))


def parse_run(source: str, name: str) -> tuple[list[_Call], int]:
    """The kernel calls of ``<name>_run`` in order and the arena offset of the output."""
    body = source.split(f"int {name}_run(", 1)
    if len(body) < 2:
        raise Refused(f"{name}.c has no {name}_run")
    run = body[1]
    found = [(m.start(), _call(m)) for m in _CALL.finditer(run)]
    found += [(m.start(), _block_call(m)) for m in _BLOCK.finditer(run)]
    calls = [c for _, c in sorted(found, key=lambda f: f[0])]
    out = re.search(r"memcpy\(output, MICO_ARENA\((\d+)\), sizeof", run)
    if not calls or out is None:
        raise Refused(f"{name}_run is not a sequence of kernel calls into the arena")
    # a node whose code is not one plain call under its comment (nor one given planned
    # scratch) would be left out of the decode step: refuse rather than skip it
    followed = {c.node for c in calls}
    for node in _NODE.findall(run):
        if node not in followed:
            raise Refused(f"{node}'s code in {name}_run is not one kernel call the decode step "
                          "can repeat")  # fmt: skip
    for c in calls:
        if c.func_kind not in _OUT_ARG:
            raise Refused(f"{c.node} calls {c.func}, which the decode step does not repeat")
        if c.scratch is not None and c.func not in _SCRATCH_SIZE:
            raise Refused(f"{c.node} gives {c.func} planned scratch the decode step cannot size")
    return calls, int(out[1])


def _sign_lut_linear_bytes(fields: dict[str, str], rows: int) -> int:
    """Bytes of scratch ``mico_qlinear_sign_lut`` takes for the layer of these param fields
    with ``rows`` rows (:func:`mico.codegen.scratch.sign_lut_linear_bytes`)."""
    from mico.codegen.scratch import sign_lut_linear_bytes

    fmt = dict(re.findall(r"\.(\w+) = (-?\d+)", fields["in_fmt"]))
    in_fmt = (int(fmt["bits"]), int(fmt["is_signed"]), int(fmt.get("zero", 0)))
    return sign_lut_linear_bytes(rows, int(fields["in_features"]), int(fields["out_features"]),
                                 in_fmt, int(fields["w_bits"]))  # fmt: skip


#: the kernels the decode step repeats given planned scratch, and that scratch's size for
#: their param fields and a row count
_SCRATCH_SIZE = {"mico_qlinear_sign_lut": _sign_lut_linear_bytes}


def struct_fields(sources: str, symbol: str) -> dict[str, str]:
    """The designated initialisers of ``static const Mico* symbol = {...};`` (top level), or of
    ``symbol = (Mico*){...};`` (a weights-file project binds its structs at load time)."""
    name = re.escape(symbol)
    m = re.search(rf"(?:static const Mico\w+ {name} = |\b{name} = \(Mico\w+\))\{{(.*)\}};",
                  sources)  # fmt: skip
    if m is None:
        raise Refused(f"the param struct {symbol} is not in the project's sources")
    fields = {}
    for part in split_args(m[1]):
        key, _, value = part.partition("=")
        fields[key.strip().lstrip(".")] = value.strip()
    return fields


def _permutation(shape: list[int], stride: list[int]) -> bool:
    """Whether input strides ``stride`` of an output of ``shape`` read every input element once,
    i.e. the copy permutes the dims of a contiguous input (the innermost stride 1, each next one
    the product of the sizes inside it)."""
    expected = 1
    for step, size in sorted((st, sz) for sz, st in zip(shape, stride, strict=True) if sz > 1):
        if step != expected:
            return False
        expected *= size
    return True


def _ints(text: str) -> list[int]:
    return [int(v) for v in re.findall(r"-?\d+", text)]


@dataclass
class StaticDecodePlan:
    """The decode step of a static LLaMA program: its C body, caches and scratch."""

    name: str
    seq_len: int
    vocab: int
    arena_bytes: int
    body: list[str] = field(default_factory=list)
    cache_bytes: int = 0
    scratch_bytes: int = 0
    cache_layout: list[str] = field(default_factory=list)  # per cache: what, where, bytes

    @property
    def logits_bytes(self) -> int:
        return self.vocab * 4

    @property
    def total_bytes(self) -> int:
        return self.logits_bytes + self.cache_bytes + self.scratch_bytes

    @property
    def in_arena(self) -> bool:
        return self.total_bytes <= self.arena_bytes

    @property
    def extra_ram(self) -> int:
        return 0 if self.in_arena else self.total_bytes

    def memory(self) -> dict[str, int | bool]:
        """The figures of the generation report (offsets inside gen_kv_t: the int32 logits,
        the caches, one position's activations; decode_scratch counts the logits too)."""
        return {
            "model_arena": self.arena_bytes,
            "kv_cache": self.cache_bytes,
            "decode_scratch": self.scratch_bytes + self.logits_bytes,
            "kv_in_arena": self.in_arena,
            "kv_extra_ram": self.extra_ram,
            "kv_cache_offset": self.logits_bytes,
            "decode_scratch_offset": self.logits_bytes + self.cache_bytes,
        }

    def source(self) -> str:
        """The C of the decode step (see :func:`static_decode_source`)."""
        return static_decode_source(self)


class _Builder:
    """Walks the window's calls and writes the one-position calls."""

    def __init__(self, calls: list[_Call], structs: str, seq_len: int, plan: StaticDecodePlan):
        self.calls, self.structs, self.t, self.plan = calls, structs, seq_len, plan
        self.bufs: dict[int, str] = {}  # call -> its output's one-position buffer
        self.producer: list[dict[int, int]] = []  # per call: arg -> producing call
        self.caches: dict[int, str] = {}  # copy call index -> cache buffer
        self.scratch = 0
        self.kernel_ws = ""  # the kernels' planned scratch on one position (shared by all)

    # ------------------------------------------------------------------ buffers
    def bytes_of(self, call: _Call, rows: int) -> int:
        return (call.numel // self.t * rows * call.bits + 7) // 8

    def fresh(self, size: int) -> str:
        at = self.scratch
        self.scratch += (size + ALIGN - 1) // ALIGN * ALIGN
        return f"KV_SCRATCH({at})"

    def dataflow(self) -> None:
        """Which call wrote each arena argument (a value clobbered by a later write is gone)."""
        live: dict[int, tuple[int, int]] = {}  # start -> (end, call)
        for i, c in enumerate(self.calls):
            if c.numel % self.t:
                raise Refused(f"{c.node}'s output {c.shape} is not a multiple of the window")
            reads = {}
            for a, arg in enumerate(c.args):
                m = _ARENA.match(arg)
                if m is None or a == c.out_arg:
                    continue
                start = int(m[1])
                if start not in live:
                    raise Refused(f"{c.node} reads arena offset {start}, no whole value of the run")
                reads[a] = live[start][1]
            self.producer.append(reads)
            m = _ARENA.match(c.args[c.out_arg])
            if m is None:
                raise Refused(f"{c.node} does not write into the arena")
            start = int(m[1])
            end = start + (c.numel * c.bits + 7) // 8
            for s in [s for s, (e, _) in live.items() if s < end and start < e]:
                del live[s]
            live[start] = (end, i)

    # ------------------------------------------------------------------ attention
    def find_caches(self) -> None:
        """The copies that produce the attention matmuls' B operands become cache writes."""
        kinds = {c.func for c in self.calls}
        if "mico_qsoftmax_prefix" not in kinds:
            raise Refused("the program has no prefix (causal) softmax")
        for i, c in enumerate(self.calls):
            if c.func != "mico_qmatmul":
                continue
            b = self.producer[i].get(2)
            a = self.producer[i].get(0)
            if b is None or a is None or self.calls[b].func != "mico_copy":
                raise Refused(f"{c.node}'s B operand is not a layout copy the cache can replace")
            if self.calls[a].func == "mico_qsoftmax_prefix":
                kind = "v"
            elif int(c.args[9]) == self.t:
                kind = "k"
            else:
                raise Refused(f"{c.node} is neither q . K^T nor P . V")
            size = (self.calls[b].numel * self.calls[b].bits + 7) // 8
            at = self.plan.cache_bytes
            self.plan.cache_bytes += (size + ALIGN - 1) // ALIGN * ALIGN
            self.caches[b] = f"KV_CACHE({at})"
            self.plan.cache_layout.append(f"{kind} of {c.node}: {size} bytes at {at}")

    # ------------------------------------------------------------------ emission
    def arg(self, i: int, a: int) -> str:
        return self.bufs[self.producer[i][a]]

    def one_row_scratch(self, c: _Call) -> int:
        """Bytes of scratch a call given some in the window takes on one position."""
        if c.scratch is None:
            return 0
        return _SCRATCH_SIZE[c.func](struct_fields(self.structs, c.args[0].lstrip("&")), 1)

    def build(self) -> None:
        self.dataflow()
        self.find_caches()
        # the kernels' working memory, as in the window but on one row: one buffer for all,
        # each call's alone while it runs (not the window's arena, which the caches may share)
        most = max((self.one_row_scratch(c) for c in self.calls), default=0)
        if most > 0:
            self.kernel_ws = self.fresh(most)
        body = self.plan.body
        last_write = max(self.caches)  # past it, only the logits need the calls
        for i, c in enumerate(self.calls):
            body.append(f"    /* {c.node}: {c.op} */")
            body.extend(getattr(self, "emit_" + c.func_kind.removeprefix("mico_"))(i, c))
            if i == last_write:
                body.append("    if (!want_logits) return; /* the caches are filled */")

    def out(self, i: int, c: _Call, rows: int = 1) -> str:
        self.bufs[i] = self.fresh(self.bytes_of(c, rows))
        return self.bufs[i]

    def check(self, c: _Call, value: str | int, expected: int, what: str) -> None:
        if int(value) != expected:
            raise Refused(f"{c.node}: {what} is {value}, not the window's {expected}")

    def emit_qembedding(self, i: int, c: _Call) -> list[str]:
        self.check(c, c.args[5], self.t, "the token count")
        a = c.args
        return [f"    mico_qembedding(&tok, {a[1]}, {a[2]}, {self.out(i, c)}, {a[4]}, 1, {a[6]});"]

    def emit_qrmsnorm(self, i: int, c: _Call) -> list[str]:
        self.check(c, c.args[4], self.t, "the row count")
        a = [*c.args]
        a[0], a[2], a[4] = self.arg(i, 0), self.out(i, c), "1"
        return [f"    mico_qrmsnorm({', '.join(a)});"]

    def _linear(self, i: int, c: _Call, n_in: int) -> list[str]:
        symbol = c.args[0].lstrip("&")
        self.check(c, struct_fields(self.structs, symbol).get("rows", "-1"), self.t, ".rows")
        a = [*c.args]
        a[0], a[n_in], a[n_in + 1] = "&p", self.arg(i, n_in), self.out(i, c)
        size = self.one_row_scratch(c)
        ws = f" p.scratch = {self.kernel_ws}; p.scratch_bytes = {size};" if size > 0 else ""
        return [f"    {{ MicoLinear p = {symbol}; p.rows = 1;{ws} {c.func}({', '.join(a)}); }}"]

    def emit_qlinear(self, i: int, c: _Call) -> list[str]:
        return self._linear(i, c, 1)

    def emit_qlinear_lanes(self, i: int, c: _Call) -> list[str]:
        return self._linear(i, c, 2)

    def emit_qrope(self, i: int, c: _Call) -> list[str]:
        self.check(c, c.args[5], self.t, "the position count")
        a = [*c.args]
        half = a[6]
        a[0], a[2], a[5] = self.arg(i, 0), self.out(i, c), "1"
        a[7], a[8] = f"{a[7]} + (size_t)pos * {half}", f"{a[8]} + (size_t)pos * {half}"
        return [f"    mico_qrope({', '.join(a)});"]

    def emit_qmatmul(self, i: int, c: _Call) -> list[str]:
        self.check(c, c.args[7], self.t, "m")
        a = [*c.args]
        a[0], a[2], a[7] = self.arg(i, 0), self.caches[self.producer[i][2]], "1"
        a[4] = self.out(i, c)
        return [f"    mico_qmatmul({', '.join(a)});"]

    def _counted(self, i: int, c: _Call, symbol: str, key: str) -> str:
        """A local copy of ``symbol`` with its element count ``key`` for one position."""
        f = struct_fields(self.structs, symbol)
        self.check(c, f.get(key, "-1"), c.numel, f".{key}")
        if int(f.get("channels", "1")) > 1:
            raise Refused(f"{c.node} rescales per channel; its channel index would move")
        return f"{symbol}; p.{key} = {c.numel // self.t};"

    def emit_requant(self, i: int, c: _Call) -> list[str]:
        symbol = c.args[0].lstrip("&")
        head = self._counted(i, c, symbol, "n")
        return [f"    {{ MicoRequant p = {head} mico_requant(&p, {self.arg(i, 1)}, "
                f"{self.out(i, c)}); }}"]  # fmt: skip

    def emit_add(self, i: int, c: _Call) -> list[str]:
        symbol = c.args[0].lstrip("&")
        head = self._counted(i, c, symbol, "n")
        return [f"    {{ MicoAdd p = {head} mico_add(&p, {self.arg(i, 1)}, {self.arg(i, 2)}, "
                f"{self.out(i, c)}); }}"]  # fmt: skip

    def emit_lut(self, i: int, c: _Call) -> list[str]:
        self.check(c, c.args[2], c.numel, "n")
        a = [*c.args]
        a[0], a[1], a[2] = self.arg(i, 0), self.out(i, c), str(c.numel // self.t)
        return [f"    mico_lut({', '.join(a)});"]

    def emit_qmul(self, i: int, c: _Call) -> list[str]:
        self.check(c, c.args[6], c.numel, "n")
        a = [*c.args]
        a[0], a[2], a[4] = self.arg(i, 0), self.arg(i, 2), self.out(i, c)
        a[6] = str(c.numel // self.t)
        return [f"    mico_qmul({', '.join(a)});"]

    def emit_qsoftmax_prefix(self, i: int, c: _Call) -> list[str]:
        a = [*c.args]
        rows, n = int(a[4]), int(a[5])
        self.check(c, n, self.t, "the row length")
        self.check(c, a[10], self.t, "the limit count")
        if rows % self.t:
            raise Refused(f"{c.node}: {rows} rows are not heads times the window")
        a[0], a[2], a[4] = self.arg(i, 0), self.out(i, c), str(rows // self.t)
        a[9], a[10] = f"{a[9]} + pos", "1"
        return [f"    mico_qsoftmax_prefix({', '.join(a)});"]

    def emit_copy(self, i: int, c: _Call) -> list[str]:
        """A layout copy on one position: the identity (same buffer), a permutation, or the
        write of the position's codes into a cache."""
        symbol = c.args[0].lstrip("&")
        f = struct_fields(self.structs, symbol)
        out = split_args(f["out"].strip()[1:-1]) if f["out"].startswith("{") else []
        out_f = {k.strip().lstrip("."): v.strip() for k, _, v in (p.partition("=") for p in out)}
        if (_ints(f["in_fmt"]) != _ints(out_f.get("fmt", "")) or out_f.get("n_mult") != "0"
                or out_f.get("relu") != "0" or int(f["offset"]) != 0):  # fmt: skip
            raise Refused(f"{c.node} requantizes or offsets as it copies; not a layout copy")
        rank = int(f["rank"])
        shape, stride = _ints(f["shape"])[:rank], _ints(f["stride"])[:rank]
        if not _permutation(shape, stride):
            raise Refused(f"{c.node} reads a strided view, not a permutation of its input")
        axes = [k for k, s in enumerate(shape) if s == self.t]
        if len(axes) != 1:
            raise Refused(f"{c.node}: cannot tell the positions among the dims {shape}")
        ax = axes[0]
        src = self.arg(i, 1)
        # the one-position input: the window's input with the position axis removed
        one = [s if s < stride[ax] else s // self.t for s in stride]
        keep = [k for k in range(rank) if k != ax]
        sizes = [shape[k] for k in keep]
        grid = np.indices(sizes).reshape(len(keep), -1) if keep else np.zeros((0, 1), int)
        index = sum(grid[j] * one[k] for j, k in enumerate(keep)) if keep else np.zeros(1, int)
        fmt = out_f["fmt"]
        if i in self.caches:
            dst = [int(np.prod(shape[k + 1 :])) for k in range(rank)]
            return [self.scatter(c, src, self.caches[i], fmt, sizes, [one[k] for k in keep],
                                 [dst[k] for k in keep], f"(size_t)pos * {dst[ax]}")]  # fmt: skip
        if np.array_equal(index, np.arange(index.size)):
            self.bufs[i] = src  # the identity on one position
            return ["    /* the identity on one position */"]
        dst = [int(np.prod(sizes[j + 1 :])) for j in range(len(keep))]
        return [self.scatter(c, src, self.out(i, c), fmt, sizes, [one[k] for k in keep], dst,
                             "0")]  # fmt: skip

    def scatter(self, c: _Call, src: str, dst: str, fmt: str, sizes: list[int],
                src_stride: list[int], dst_stride: list[int], base: str) -> str:  # fmt: skip
        """Nested loops storing codes of ``src`` at strided places of ``dst`` (+ ``base``)."""
        loops, s_idx, d_idx = [], [], []
        for j, n in enumerate(sizes):
            loops.append(f"for (int32_t i{j} = 0; i{j} < {n}; i{j}++)")
            s_idx.append(f"(size_t)i{j} * {src_stride[j]}")
            d_idx.append(f"(size_t)i{j} * {dst_stride[j]}")
        load = f"mico_load({src}, {' + '.join(s_idx) or '0'}, (MicoFmt){fmt})"
        return (f"    {' '.join(loops)}\n        mico_store({dst}, {base} + "
                f"{' + '.join(d_idx) or '0'}, {load}, (MicoFmt){fmt});")  # fmt: skip


def static_decode_plan(
    model, directory: Path, name: str, arena_bytes: int
) -> StaticDecodePlan | str:
    """The decode step of ``model``'s static project in ``directory``, or why there is none."""
    from mico.models.llama import LLaMa

    if not isinstance(model, LLaMa):
        return f"the KV cache is built for the zoo's LLaMA layout, not {type(model).__name__}"
    attention = model.layers[0].attention
    if attention.n_kv_heads != attention.n_heads:
        return "the KV cache does not take grouped-query attention (n_kv_heads < n_heads) yet"
    directory = Path(directory)
    source = (directory / f"{name}.c").read_text()
    structs = "\n".join(p.read_text() for p in sorted(directory.glob(f"{name}*.[ch]")))
    plan = StaticDecodePlan(name=name, seq_len=int(model.max_seq_len),
                            vocab=int(model.vocab_size), arena_bytes=arena_bytes)  # fmt: skip
    try:
        calls, out_at = parse_run(source, name)
        builder = _Builder(calls, structs, plan.seq_len, plan)
        builder.build()
        writers = [i for i, c in enumerate(calls) if c.args[c.out_arg] == f"MICO_ARENA({out_at})"]
        if not writers:
            raise Refused(f"no call of {name}_run writes its output")
        last = writers[-1]
        if calls[last].bits != 32 or calls[last].numel != plan.seq_len * plan.vocab:
            raise Refused(f"{name}_run's output is not int32 logits of every position")
    except Refused as why:
        return str(why)
    plan.body.append(f"    memcpy(kv->logits, {builder.bufs[last]}, sizeof kv->logits);")
    plan.scratch_bytes = builder.scratch
    return plan


def static_decode_source(plan: StaticDecodePlan) -> str:
    """C of ``gen_decode(token, pos, want_logits)`` (to follow ``#include "<name>.c"``)."""
    p = plan
    storage = (
        "#define KV ((gen_kv_t *)(void *)mico_arena.bytes) /* laid over the model's arena */"
        if p.in_arena
        else "static gen_kv_t gen_kv_storage; /* does not fit in the arena: its own RAM */\n"
        "#define KV (&gen_kv_storage)"
    )
    body = "\n".join(p.body)
    caches = "\n".join(f" *   {line}" for line in p.cache_layout)
    return f"""/* ---- the KV-cached decode step, static mode (mico.codegen.decode_static_c) ----
 * caches (codes in the window's packed formats, offsets in kv->cache):
{caches}
 */
typedef struct {{
    int32_t logits[{p.vocab}];
    uint8_t cache[{p.cache_bytes}] __attribute__((aligned({ALIGN})));
    uint8_t scratch[{p.scratch_bytes}] __attribute__((aligned({ALIGN})));
}} gen_kv_t;
{storage}
#define KV_CACHE(at) ((void *)(kv->cache + (at)))
#define KV_SCRATCH(at) ((void *)(kv->scratch + (at)))
typedef char gen_kv_size_check[sizeof(gen_kv_t) == {p.total_bytes} ? 1 : -1];

static void kv_reset(void) {{ memset(KV, 0, sizeof(gen_kv_t)); }}

/* Position pos (< {p.seq_len}) of token: every call of {p.name}_run on that position alone; the
 * keys and values go into the cache at pos; the calls past the last cache write only when
 * want_logits. */
static void gen_decode(int32_t token, int32_t pos, int want_logits) {{
    gen_kv_t *kv = KV;
    const float tok = (float)token;
{body}
}}
"""
