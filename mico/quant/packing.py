"""Sub-byte packing of integer codes, the layout the C kernels read (``mico_unpack``).

Codes are laid out as one little-endian bit stream: code ``i`` occupies bits ``[i*b, (i+1)*b)``,
least significant bit first, and may straddle a byte boundary. A field holds the code in b-bit
two's complement (signed) or plain binary (unsigned); binary {-1, +1} codes are stored as 0 / 1.
"""

from __future__ import annotations

import numpy as np

from mico.quant.arithmetic import QFormat


def packed_size(count: int, bits: int) -> int:
    """Bytes needed for ``count`` codes of ``bits`` bits."""
    return (count * bits + 7) // 8


def pack(codes: np.ndarray, fmt: QFormat) -> np.ndarray:
    """Pack integer codes into a uint8 array of :func:`packed_size` bytes."""
    q = np.asarray(codes).astype(np.int64).ravel()
    if q.size and (q.min() < fmt.qmin or q.max() > fmt.qmax):
        raise ValueError(
            f"codes span [{q.min()}, {q.max()}], outside {fmt} range [{fmt.qmin}, {fmt.qmax}]"
        )
    fields = (
        (q > 0).astype(np.uint8) if fmt.binary else (q & ((1 << fmt.bits) - 1)).astype(np.uint8)
    )
    # bit j of code i goes to stream position i*b + j
    bits = ((fields[:, None] >> np.arange(fmt.bits, dtype=np.uint8)) & 1).astype(np.uint8).ravel()
    return np.packbits(bits, bitorder="little")[: packed_size(q.size, fmt.bits)]


def unpack(data: np.ndarray, count: int, fmt: QFormat) -> np.ndarray:
    """Inverse of :func:`pack`: the first ``count`` codes of a packed stream, as int64."""
    raw = np.asarray(data, dtype=np.uint8)
    if raw.size < packed_size(count, fmt.bits):
        raise ValueError(
            f"{raw.size} bytes hold fewer than {count} codes of {fmt.bits} bits "
            f"({packed_size(count, fmt.bits)} bytes needed)"
        )
    bits = np.unpackbits(raw, bitorder="little")[: count * fmt.bits].reshape(count, fmt.bits)
    fields = (bits.astype(np.int64) << np.arange(fmt.bits, dtype=np.int64)).sum(axis=1)
    if fmt.binary:
        return np.where(fields == 1, 1, -1).astype(np.int64)
    if fmt.signed:
        sign_bit = 1 << (fmt.bits - 1)
        return np.where(fields & sign_bit, fields - (1 << fmt.bits), fields)
    return fields
