"""Reader for the IDX format of MNIST-style files (raw or gzip-compressed).

An IDX file is a 4-byte magic number ``00 00 TT DD`` (``TT`` the element type, ``DD`` the
number of dimensions), ``DD`` big-endian uint32 sizes, then the elements in C order, big-endian.
MNIST images are ``0x00000803`` (uint8, 3 dims) and labels ``0x00000801`` (uint8, 1 dim).
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

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
    truncated file or trailing bytes raise a DatasetError naming the file.
    """
    path = Path(path)
    data = _read_bytes(path)
    if len(data) < 4:
        raise corrupt(path, f"only {len(data)} bytes, too short for an IDX header")
    magic = int.from_bytes(data[:4], "big")
    zero, type_code, dims = data[0:2], data[2], data[3]
    if zero != b"\x00\x00" or type_code not in IDX_TYPES:
        raise corrupt(path, f"bad IDX magic number 0x{magic:08X} (expected 0x000008NN)")
    if ndim is not None and dims != ndim:
        raise corrupt(
            path,
            f"magic number 0x{magic:08X} says {dims} dimensions, expected "
            f"0x{0x800 | ndim:08X} ({ndim} dimensions)",
        )
    header = 4 + 4 * dims
    if len(data) < header:
        raise corrupt(path, f"truncated IDX header: {len(data)} bytes, need {header}")
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims))
    dtype = IDX_TYPES[type_code]
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    actual = len(data) - header
    if actual != expected:
        problem = "truncated" if actual < expected else "has trailing bytes"
        raise corrupt(
            path,
            f"{problem}: header declares shape {shape} ({expected} data bytes) "
            f"but the file holds {actual}",
        )
    array = np.frombuffer(data, dtype=dtype, offset=header).reshape(shape)
    return array.astype(np.dtype(dtype.str[1:]))  # same type in native byte order, writable


def _read_bytes(path: Path) -> bytes:
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as handle:
                return handle.read()
        return path.read_bytes()
    except (OSError, EOFError, zlib.error) as error:
        raise corrupt(path, f"cannot read ({type(error).__name__}: {error})") from error
