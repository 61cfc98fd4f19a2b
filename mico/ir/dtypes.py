"""Element data types of the IR, including sub-byte integer codes (int1..int8, uint1..uint8)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch


@dataclass(frozen=True)
class DataType:
    """An element type: ``kind`` is ``float``, ``int`` or ``uint``; ``bits`` its width.

    Sub-byte integer codes are stored one per byte in activations (their *container*), and
    bit-packed in weights.
    """

    kind: str
    bits: int

    FP32: ClassVar[DataType]
    FP16: ClassVar[DataType]
    INT64: ClassVar[DataType]
    INT32: ClassVar[DataType]
    INT8: ClassVar[DataType]
    UINT8: ClassVar[DataType]
    BOOL: ClassVar[DataType]

    def __post_init__(self) -> None:
        if self.kind not in ("float", "int", "uint", "bool"):
            raise ValueError(f"unknown data type kind {self.kind!r}")

    @staticmethod
    def int(bits: int) -> DataType:
        return DataType("int", bits)

    @staticmethod
    def uint(bits: int) -> DataType:
        return DataType("uint", bits)

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def signed(self) -> bool:
        return self.kind in ("float", "int")

    @property
    def container_bytes(self) -> int:
        """Bytes one element occupies in memory (sub-byte codes take a whole byte)."""
        return max(1, (self.bits + 7) // 8) if self.bits <= 8 else self.bits // 8

    @property
    def ctype(self) -> str:
        if self.kind == "float":
            return {32: "float", 64: "double"}.get(self.bits, "float")
        width = 8 if self.bits <= 8 else self.bits
        return f"{'u' if self.kind in ('uint', 'bool') else ''}int{width}_t"

    def __str__(self) -> str:
        return {"float": "fp", "int": "int", "uint": "uint", "bool": "bool"}[self.kind] + (
            "" if self.kind == "bool" else str(self.bits)
        )

    @staticmethod
    def from_torch(dtype: torch.dtype) -> DataType:
        table = {
            torch.float32: DataType.FP32,
            torch.float16: DataType.FP16,
            torch.int64: DataType.INT64,
            torch.int32: DataType.INT32,
            torch.int8: DataType.INT8,
            torch.uint8: DataType.UINT8,
            torch.bool: DataType.BOOL,
        }
        if dtype not in table:
            raise TypeError(f"torch dtype {dtype} has no mico DataType")
        return table[dtype]

    def numpy(self) -> np.dtype:
        if self.kind == "float":
            return np.dtype(f"float{self.bits}")
        if self.kind == "bool":
            return np.dtype(bool)
        width = 8 if self.bits <= 8 else self.bits
        return np.dtype(f"{'u' if self.kind == 'uint' else ''}int{width}")


DataType.FP32 = DataType("float", 32)
DataType.FP16 = DataType("float", 16)
DataType.INT64 = DataType("int", 64)
DataType.INT32 = DataType("int", 32)
DataType.INT8 = DataType("int", 8)
DataType.UINT8 = DataType("uint", 8)
DataType.BOOL = DataType("bool", 8)
