"""mico's weights file: every constant of a C project in one documented binary file.

A project compiled with ``--weights-file`` keeps no weights in its code: ``<name>.bin`` holds
them, and ``<name>_load_weights`` points the model at a copy of this file (a buffer in RAM, or
a flash region), so another file of the same layout replaces the weights without recompiling.
The layout (docs/codegen.md, "The weights file"), little-endian throughout:

* a 128-byte header: magic ``MICOWTS\\0``, format version, sizes, the CRC-32 of the data, and
  the *fingerprint*, a SHA-256 of everything the compiled program assumes about the file (each
  constant's name, kind, C type, code format, count, bytes and offset, and the program's own
  code: shapes, formats, kernels). The C loader refuses a file of another fingerprint;
* a table of 48-byte entries, one per constant (name, kind, C type, bit-width, signedness and
  zero point of packed codes, counts, offset, bytes): per-layer bit-widths are read from it;
* the entries' names, then the data, each constant at an aligned offset.

:func:`read_weights_file` reads and checks a file (clear :class:`WeightsFileError` otherwise);
:func:`write_weights_file` writes one atomically (a temporary file, then a rename).
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mico.atomic_files import write_file_atomically
from mico.errors import WeightsFileError

MAGIC = b"MICOWTS\0"
VERSION = 1
HEADER_BYTES = 128
ENTRY_BYTES = 48
NAME_FIELD = 48  # the model name, NUL-padded
#: the data section and every constant start at a multiple of this (int64 arrays need 8)
MIN_ALIGN = 8
_HEADER = struct.Struct("<8sIIIIII QQ 32s 48s")  # see the module docstring / docs/codegen.md
_ENTRY = struct.Struct("<II BBBBBB H QQQQ")
assert _HEADER.size == HEADER_BYTES and _ENTRY.size == ENTRY_BYTES

KINDS = ("weights", "bias", "scales", "params")
#: dtype code -> (C type, numpy little-endian dtype)
DTYPES = {1: ("uint8_t", "<u1"), 2: ("int32_t", "<i4"), 3: ("int64_t", "<i8"), 4: ("float", "<f4")}
CTYPE_CODES = {ctype: code for code, (ctype, _) in DTYPES.items()}
#: how an entry's bytes hold codes: none, mico.quant.packing.pack, or int32 words a kernel
#: reads (channel lanes, pack_lanes; binary rows, pack_binary_rows: the same codes reordered)
LAYOUTS = ("raw", "packed", "words")
HOW_TO_FIX = (
    "write the file for this project with `mico export-weights` (or recompile it with "
    "`mico compile --weights-file`)"
)


@dataclass(frozen=True)
class Constant:
    """One constant as emission records it: its bytes and what they hold."""

    name: str  # the C symbol
    kind: str  # weights, bias, scales or params
    ctype: str  # uint8_t, int32_t, int64_t or float
    data: bytes
    bits: int = 0  # packed codes: their bit-width (0: not codes)
    signed: bool = False
    zero: int = 0
    codes: int = 0  # how many codes the bytes pack
    layout: str = "raw"


@dataclass(frozen=True)
class Entry:
    """One row of the table: where a constant is and what it holds."""

    name: str
    kind: str
    ctype: str
    bits: int
    signed: bool
    zero: int
    layout: str
    count: int  # elements of ctype
    codes: int
    offset: int  # from the start of the file
    bytes: int

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name, "kind": self.kind, "ctype": self.ctype, "bits": self.bits,
            "signed": self.signed, "zero": self.zero, "layout": self.layout,
            "count": self.count, "codes": self.codes, "offset": self.offset, "bytes": self.bytes,
        }  # fmt: skip


class _Table:
    """What a planned layout and a file read back both answer: the fingerprint, an entry."""

    fingerprint: bytes
    entries: Sequence[Entry]

    @property
    def fingerprint_hex(self) -> str:
        return self.fingerprint.hex()

    def entry(self, name: str) -> Entry:
        for e in self.entries:
            if e.name == name:
                return e
        raise KeyError(f"'{name}' is not a constant of the weights file")


@dataclass(frozen=True)
class Layout(_Table):
    """Where everything goes in a file, and the fingerprint the program checks."""

    model: str
    entries: tuple[Entry, ...]
    data_offset: int
    file_bytes: int
    align: int
    fingerprint: bytes  # 32 bytes


def _aligned(offset: int, align: int) -> int:
    return offset + (-offset % align)


def fingerprint(model: str, entries: list[Entry] | tuple[Entry, ...], identity: dict) -> bytes:
    """SHA-256 of the layout and of what the program assumes besides it (``identity``)."""
    text = json.dumps(
        {"format": VERSION, "model": model, "identity": identity,
         "entries": [e.describe() for e in entries]},
        sort_keys=True, separators=(",", ":"),
    )  # fmt: skip
    return hashlib.sha256(text.encode()).digest()


def plan_layout(
    constants: list[Constant], model: str, identity: dict, align: int = MIN_ALIGN
) -> Layout:
    """Offsets of every constant (each aligned to ``align``, at least 8) and the fingerprint."""
    align = max(int(align), MIN_ALIGN)
    names = [c.name.encode() for c in constants]
    if len(model.encode()) > NAME_FIELD:
        raise WeightsFileError(f"model name '{model}' is longer than {NAME_FIELD} bytes")
    offset = _aligned(HEADER_BYTES + ENTRY_BYTES * len(constants) + sum(map(len, names)), align)
    data_offset, entries = offset, []
    for c in constants:
        if c.kind not in KINDS or c.ctype not in CTYPE_CODES or c.layout not in LAYOUTS:
            raise WeightsFileError(f"constant '{c.name}': unknown kind/type {c.kind}/{c.ctype}")
        offset = _aligned(offset, align)
        size = np.dtype(DTYPES[CTYPE_CODES[c.ctype]][1]).itemsize
        entries.append(Entry(c.name, c.kind, c.ctype, c.bits, c.signed, c.zero, c.layout,
                             len(c.data) // size, c.codes, offset, len(c.data)))  # fmt: skip
        offset += len(c.data)
    return Layout(model, tuple(entries), data_offset, offset, align,
                  fingerprint(model, entries, identity))  # fmt: skip


def encode(layout: Layout, constants: list[Constant]) -> bytes:
    """The file's bytes for ``constants`` laid out as ``layout`` says."""
    if [c.name for c in constants] != [e.name for e in layout.entries]:
        raise WeightsFileError("the constants are not the ones the layout was planned for")
    out = bytearray(layout.file_bytes)
    name_at = HEADER_BYTES + ENTRY_BYTES * len(constants)
    for i, (c, e) in enumerate(zip(constants, layout.entries, strict=True)):
        raw = c.name.encode()
        out[name_at : name_at + len(raw)] = raw
        row = _ENTRY.pack(
            name_at, len(raw), KINDS.index(e.kind), CTYPE_CODES[e.ctype], e.bits, int(e.signed),
            LAYOUTS.index(e.layout), 0, e.zero, e.count, e.codes, e.offset, e.bytes,
        )  # fmt: skip
        out[HEADER_BYTES + ENTRY_BYTES * i : HEADER_BYTES + ENTRY_BYTES * (i + 1)] = row
        name_at += len(raw)
        out[e.offset : e.offset + e.bytes] = c.data
    crc = zlib.crc32(bytes(out[layout.data_offset :]))
    out[:HEADER_BYTES] = _HEADER.pack(
        MAGIC, VERSION, HEADER_BYTES, len(constants), ENTRY_BYTES, layout.align, crc,
        layout.data_offset, layout.file_bytes, layout.fingerprint,
        layout.model.encode().ljust(NAME_FIELD, b"\0"),
    )  # fmt: skip
    return bytes(out)


def write_weights_file(path: str | Path, layout: Layout, constants: list[Constant]) -> Path:
    """Write the file atomically: a temporary file beside ``path``, then a rename (a reader
    never sees half a file, and a failure leaves ``path`` as it was)."""
    return write_file_atomically(path, encode(layout, constants))


@dataclass
class WeightsFile(_Table):
    """A weights file read back: header fields, the table, and every constant's values."""

    path: Path
    version: int
    model: str
    fingerprint: bytes
    align: int
    data_offset: int
    entries: list[Entry]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)  # native values, by name

    def codes(self, name: str) -> np.ndarray:
        """The integer codes of a packed entry, unpacked (mico.quant.packing.unpack)."""
        from mico.quant.arithmetic import QFormat
        from mico.quant.packing import unpack

        e = self.entry(name)
        if e.layout != "packed":
            raise WeightsFileError(
                f"'{name}' in {self.path} holds {e.layout} data, not packed codes "
                "(words are the same codes reordered for a kernel: lanes or binary rows)"
            )
        fmt = QFormat(e.bits, e.signed, e.zero)
        return unpack(self.arrays[name].view(np.uint8), e.codes, fmt)

    def layer_bits(self) -> dict[str, int]:
        """Weight bit-width of every quantized layer, by weight symbol without ``_weight``."""
        out = {}
        for e in self.entries:
            if e.kind == "weights" and e.bits:
                out[e.name.removesuffix("_weight")] = e.bits
        return out


def _fail(path: Path, what: str) -> WeightsFileError:
    return WeightsFileError(f"weights file {path}: {what}; {HOW_TO_FIX}")


def read_weights_file(
    path: str | Path, fingerprint_hex: str | None = None, project: str | Path | None = None
) -> WeightsFile:
    """Read and check a weights file: header, table, data checksum, every offset in range.

    ``fingerprint_hex`` (or ``project``: a project directory whose ``mico.json`` has one) is the
    fingerprint the file must have; any problem raises WeightsFileError naming the file."""
    path = Path(path)
    if project is not None and fingerprint_hex is None:
        fingerprint_hex = project_fingerprint(project)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise WeightsFileError(
            f"weights file {path} cannot be read ({exc.strerror or exc}); {HOW_TO_FIX}"
        ) from None
    if len(data) < HEADER_BYTES:
        if not data.startswith(MAGIC[: len(data)]) or not data:
            raise _fail(path, f"is not a mico weights file (no '{MAGIC[:7].decode()}' header)")
        raise _fail(path, f"is truncated: {len(data)} bytes, shorter than the header")
    (magic, version, header_bytes, count, entry_bytes, align, crc, data_offset, file_bytes,
     fp, model) = _HEADER.unpack_from(data)  # fmt: skip
    if magic != MAGIC:
        raise _fail(path, f"is not a mico weights file (magic {magic!r}, expected {MAGIC!r})")
    if version != VERSION:
        raise _fail(path, f"has format version {version}; this mico reads version {VERSION} "
                    "(a file from another mico release)")  # fmt: skip
    if header_bytes != HEADER_BYTES or entry_bytes != ENTRY_BYTES:
        raise _fail(path, f"has a {header_bytes}-byte header / {entry_bytes}-byte entries, "
                    f"not {HEADER_BYTES} / {ENTRY_BYTES}")  # fmt: skip
    if len(data) < file_bytes:
        raise _fail(path, f"is truncated: {len(data)} bytes of {file_bytes}")
    if len(data) > file_bytes:
        raise _fail(path, f"has {len(data) - file_bytes} bytes after its end ({file_bytes})")
    table_end = HEADER_BYTES + ENTRY_BYTES * count
    if table_end > data_offset or data_offset > file_bytes:
        raise _fail(path, f"its table of {count} entries does not end before the data "
                    f"(offset {data_offset} of {file_bytes} bytes)")  # fmt: skip
    if zlib.crc32(data[data_offset:]) != crc:
        raise _fail(path, "is corrupt: the data's CRC-32 does not match the header's")
    entries, arrays = [], {}
    for i in range(count):
        (name_at, name_len, kind, dtype, bits, signed, layout, _, zero, n, codes, offset,
         size) = _ENTRY.unpack_from(data, HEADER_BYTES + ENTRY_BYTES * i)  # fmt: skip
        if not table_end <= name_at <= name_at + name_len <= data_offset:
            raise _fail(path, f"entry {i}'s name lies outside the names section")
        name = data[name_at : name_at + name_len].decode("utf-8", "replace")
        if kind >= len(KINDS) or dtype not in DTYPES or layout >= len(LAYOUTS):
            raise _fail(path, f"entry {i} ('{name}') has unknown kind/type/layout codes "
                        f"{kind}/{dtype}/{layout}")  # fmt: skip
        ctype, np_type = DTYPES[dtype]
        if not data_offset <= offset <= offset + size <= file_bytes:
            raise _fail(path, f"entry '{name}' (bytes {offset}..{offset + size}) lies outside "
                        f"the data section ({data_offset}..{file_bytes})")  # fmt: skip
        if offset % MIN_ALIGN or n * np.dtype(np_type).itemsize != size:
            raise _fail(path, f"entry '{name}' is misaligned (offset {offset}) or its count "
                        f"{n} does not fill its {size} bytes")  # fmt: skip
        entry = Entry(name, KINDS[kind], ctype, bits, bool(signed), zero, LAYOUTS[layout], n,
                      codes, offset, size)  # fmt: skip
        entries.append(entry)
        arrays[name] = np.frombuffer(data, np_type, n, offset).astype(np_type[1:])
    result = WeightsFile(path, version, model.rstrip(b"\0").decode("utf-8", "replace"), fp,
                         align, data_offset, entries, arrays)  # fmt: skip
    if fingerprint_hex is not None and fp.hex() != fingerprint_hex:
        raise WeightsFileError(
            f"weights file {path} has fingerprint {fp.hex()[:16]}…, the project expects "
            f"{fingerprint_hex[:16]}…: it belongs to another model, plan or mico build; "
            f"{HOW_TO_FIX}"
        )
    return result


def project_fingerprint(project: str | Path) -> str:
    """The fingerprint a project compiled with ``--weights-file`` expects (its mico.json)."""
    manifest = Path(project) / "mico.json"
    try:
        info = json.loads(manifest.read_text()).get("weights_file", {})
    except (OSError, ValueError) as exc:
        raise WeightsFileError(
            f"{manifest} cannot be read ({exc}); is {project} a mico project?"
        ) from None
    if info.get("format") != "mico-weights" or "fingerprint" not in info:
        raise WeightsFileError(
            f"project {project} keeps its weights in its code (compiled without "
            "--weights-file); recompile it with `mico compile --weights-file` to load weights "
            "from a file"
        )
    return str(info["fingerprint"])
