"""Reader for the IDX format of MNIST-style files (raw or gzip-compressed).

An IDX file is a 4-byte magic number ``00 00 TT DD`` (``TT`` the element type, ``DD`` the
number of dimensions), ``DD`` big-endian uint32 sizes, then the elements in C order, big-endian.
MNIST images are ``0x00000803`` (uint8, 3 dims) and labels ``0x00000801`` (uint8, 1 dim).
"""

from __future__ import annotations

import gzip
import math
import zlib
from pathlib import Path
from typing import BinaryIO

import numpy as np

from mico.data.paths import corrupt

IDX_TYPES: dict[int, np.dtype] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def read_idx(path: str | Path, ndim: int | None = None) -> np.ndarray:
    """Parse an IDX file (``.gz`` decompressed on the fly) into a native-endian array.

    ``ndim`` is the number of dimensions the caller expects; a different magic number, a
    truncated file or trailing bytes raise a DatasetError naming the file. The declared size is
    checked against the file before the data is read, so a forged header allocates nothing.
    """
    path = Path(path)
    try:
        compressed = path.suffix == ".gz"
        with gzip.open(path, "rb") if compressed else open(path, "rb") as handle:
            file_bytes = path.stat().st_size
            shape, dtype, header = _read_header(path, handle, ndim)
            expected = math.prod(shape) * dtype.itemsize  # Python ints: no int64 wrap-around
            # deflate expands at most ~1032:1, so a .gz file cannot hold more than that
            available = file_bytes * _MAX_DEFLATE_RATIO if compressed else file_bytes - header
            if expected > available:
                raise corrupt(
                    path,
                    f"truncated: header declares shape {shape} ({expected} data bytes) but the "
                    f"file holds {'at most ' if compressed else ''}{available}",
                )
            data = handle.read(expected + 1)
    except (OSError, EOFError, zlib.error) as error:
        raise corrupt(path, f"cannot read ({type(error).__name__}: {error})") from error
    actual = len(data)
    if actual != expected:
        problem = "truncated" if actual < expected else "has trailing bytes"
        raise corrupt(
            path,
            f"{problem}: header declares shape {shape} ({expected} data bytes) "
            f"but the file holds {actual if actual <= expected else 'more'}",
        )
    array = np.frombuffer(data, dtype=dtype).reshape(shape)
    return array.astype(np.dtype(dtype.str[1:]))  # same type in native byte order, writable


_MAX_DEFLATE_RATIO = 1032


def _read_header(
    path: Path, handle: BinaryIO, ndim: int | None
) -> tuple[tuple[int, ...], np.dtype, int]:
    """The shape, element type and header length from the start of an IDX stream."""
    head = handle.read(4)
    if len(head) < 4:
        raise corrupt(path, f"only {len(head)} bytes, too short for an IDX header")
    magic = int.from_bytes(head, "big")
    zero, type_code, dims = head[0:2], head[2], head[3]
    if zero != b"\x00\x00" or type_code not in IDX_TYPES:
        raise corrupt(path, f"bad IDX magic number 0x{magic:08X} (expected 0x000008NN)")
    if ndim is not None and dims != ndim:
        raise corrupt(
            path,
            f"magic number 0x{magic:08X} says {dims} dimensions, expected "
            f"0x{0x800 | ndim:08X} ({ndim} dimensions)",
        )
    sizes = handle.read(4 * dims)
    header = 4 + 4 * dims
    if len(sizes) < 4 * dims:
        raise corrupt(path, f"truncated IDX header: {4 + len(sizes)} bytes, need {header}")
    shape = tuple(int.from_bytes(sizes[4 * i : 4 * i + 4], "big") for i in range(dims))
    return shape, IDX_TYPES[type_code], header
