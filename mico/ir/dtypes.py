"""Element data types of the IR, including sub-byte integer codes (int1..int8, uint1..uint8).

Every type is a class attribute of :class:`DataType`, named as in seed 002: ``BOOL``,
``INT1``..``INT8``, ``INT16``, ``INT32``, ``INT64``, ``UINT1``..``UINT8``, ``UINT16``,
``UINT32``, ``UINT64``, ``FP16``, ``BF16``, ``FP32``, ``FP64``. ``DataType.int(b)`` and
``DataType.uint(b)`` build the integer types by width; :meth:`DataType.parse` reads any of the
spellings ``fp32``, ``FP32``, ``float32``, ``int4``, ``bf16``, ``bfloat16``, ``bool``.

Sub-byte integer codes are stored one per byte in activations (their *container*: int8 or
uint8), and bit-packed in weights. Signed 1-bit codes are mico's binary codes ``{-1, +1}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch

_KINDS = ("float", "bfloat", "int", "uint", "bool")
_INT_BITS = (1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64)
_VALID_BITS = {
    "float": (16, 32, 64),
    "bfloat": (16,),
    "int": _INT_BITS,
    "uint": _INT_BITS,
    "bool": (8,),
}


@dataclass(frozen=True)
class DataType:
    """An element type: ``kind`` is ``float``, ``bfloat``, ``int``, ``uint`` or ``bool``.

    ``bits`` is the width of one value (a bool is stored in 8 bits). Instances are immutable,
    hashable and compare by value: ``DataType.int(4) == DataType("int", 4) == DataType.INT4``.
    """

    kind: str
    bits: int

    # The named types are set below the class. They are declared for type checkers only: as
    # ClassVar annotations they would show up in __dataclass_fields__, and tools that walk
    # those (hypothesis' pretty-printer) would recurse DataType.FP32.FP32... forever.
    if TYPE_CHECKING:
        BOOL: ClassVar[DataType]
        INT1: ClassVar[DataType]
        INT2: ClassVar[DataType]
        INT3: ClassVar[DataType]
        INT4: ClassVar[DataType]
        INT5: ClassVar[DataType]
        INT6: ClassVar[DataType]
        INT7: ClassVar[DataType]
        INT8: ClassVar[DataType]
        INT16: ClassVar[DataType]
        INT32: ClassVar[DataType]
        INT64: ClassVar[DataType]
        UINT1: ClassVar[DataType]
        UINT2: ClassVar[DataType]
        UINT3: ClassVar[DataType]
        UINT4: ClassVar[DataType]
        UINT5: ClassVar[DataType]
        UINT6: ClassVar[DataType]
        UINT7: ClassVar[DataType]
        UINT8: ClassVar[DataType]
        UINT16: ClassVar[DataType]
        UINT32: ClassVar[DataType]
        UINT64: ClassVar[DataType]
        FP16: ClassVar[DataType]
        BF16: ClassVar[DataType]
        FP32: ClassVar[DataType]
        FP64: ClassVar[DataType]

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"unknown data type kind {self.kind!r}; kinds are {', '.join(_KINDS)}")
        if not isinstance(self.bits, int) or isinstance(self.bits, bool):
            raise ValueError(f"data type bits must be an int, got {self.bits!r}")
        if self.bits not in _VALID_BITS[self.kind]:
            allowed = ", ".join(map(str, _VALID_BITS[self.kind]))
            raise ValueError(
                f"a {self.kind} data type cannot be {self.bits} bits wide; allowed: {allowed}"
            )

    # -- constructors -------------------------------------------------------------------------

    @staticmethod
    def int(bits: int) -> DataType:
        return DataType("int", bits)

    @staticmethod
    def uint(bits: int) -> DataType:
        return DataType("uint", bits)

    @staticmethod
    def all() -> tuple[DataType, ...]:
        """Every data type, in a fixed order (bool, signed, unsigned, floats)."""
        return _ALL

    @staticmethod
    def parse(text: str) -> DataType:
        """The data type spelled ``text`` (``fp32``, ``FP32``, ``float32``, ``int4``, ``bool``…)."""
        key = str(text).strip().lower()
        key = {"float": "fp32", "double": "fp64", "half": "fp16", "bfloat16": "bf16"}.get(key, key)
        if key.startswith("float"):
            key = "fp" + key[5:]
        for dtype in _ALL:
            if str(dtype) == key:
                return dtype
        names = ", ".join(str(d) for d in _ALL)
        raise ValueError(f"unknown data type {text!r}; data types are {names}")

    # -- properties ---------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The seed's upper-case name: ``FP32``, ``BF16``, ``INT4``, ``UINT8``, ``BOOL``."""
        return str(self).upper()

    @property
    def is_float(self) -> bool:
        """True for every floating-point type, bf16 included."""
        return self.kind in ("float", "bfloat")

    @property
    def is_int(self) -> bool:
        """True for signed and unsigned integers (not bool)."""
        return self.kind in ("int", "uint")

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    @property
    def signed(self) -> bool:
        return self.kind in ("float", "bfloat", "int")

    @property
    def is_sub_byte(self) -> bool:
        """An integer code narrower than 8 bits (stored in an 8-bit container)."""
        return self.is_int and self.bits < 8

    @property
    def container_bytes(self) -> int:
        """Bytes one element occupies in memory (sub-byte codes take a whole byte)."""
        return max(1, (self.bits + 7) // 8) if self.bits <= 8 else self.bits // 8

    @property
    def container(self) -> DataType:
        """The 8-bit type that holds a sub-byte code in memory; ``self`` for other types."""
        return DataType(self.kind, 8) if self.is_sub_byte else self

    @property
    def ctype(self) -> str:
        if self.kind == "float":
            return {32: "float", 64: "double"}.get(self.bits, "float")
        if self.kind == "bfloat":
            return "uint16_t"  # C99 has no bfloat16: the raw bits
        width = 8 if self.bits <= 8 else self.bits
        return f"{'u' if self.kind in ('uint', 'bool') else ''}int{width}_t"

    def __str__(self) -> str:
        if self.kind == "bool":
            return "bool"
        prefix = {"float": "fp", "bfloat": "bf", "int": "int", "uint": "uint"}[self.kind]
        return f"{prefix}{self.bits}"

    def __repr__(self) -> str:
        return f"DataType.{self.name}"

    def _repr_pretty_(self, printer: object, cycle: bool) -> None:  # IPython / hypothesis
        printer.text(repr(self))  # type: ignore[attr-defined]

    # -- conversions --------------------------------------------------------------------------

    @staticmethod
    def from_torch(dtype: torch.dtype) -> DataType:
        """The data type of a torch dtype (torch's sub-byte ``int1``..``uint7`` included)."""
        table = _from_torch_table()
        if dtype not in table:
            raise TypeError(f"torch dtype {dtype} has no mico DataType")
        return table[dtype]

    def to_torch(self) -> torch.dtype:
        """The torch dtype that holds values of this type.

        Sub-byte codes map to their 8-bit container (``torch.int8`` / ``torch.uint8``): torch's
        own ``torch.int4``… have almost no kernels, and mico computes on codes in containers.
        """
        if self.kind == "bool":
            return torch.bool
        if self.kind == "bfloat":
            return torch.bfloat16
        if self.kind == "float":
            return {16: torch.float16, 32: torch.float32, 64: torch.float64}[self.bits]
        width = 8 if self.bits <= 8 else self.bits
        return getattr(torch, f"{'u' if self.kind == 'uint' else ''}int{width}")

    def numpy(self) -> np.dtype:
        if self.kind == "bfloat":
            raise TypeError("numpy has no bfloat16 dtype; use DataType.BF16.to_torch() instead")
        if self.kind == "float":
            return np.dtype(f"float{self.bits}")
        if self.kind == "bool":
            return np.dtype(bool)
        width = 8 if self.bits <= 8 else self.bits
        return np.dtype(f"{'u' if self.kind == 'uint' else ''}int{width}")


_ALL: tuple[DataType, ...] = (
    DataType("bool", 8),
    *(DataType("int", b) for b in _INT_BITS),
    *(DataType("uint", b) for b in _INT_BITS),
    DataType("float", 16),
    DataType("bfloat", 16),
    DataType("float", 32),
    DataType("float", 64),
)
for _dtype in _ALL:
    setattr(DataType, _dtype.name, _dtype)
del _dtype

_TORCH_TABLE: dict[torch.dtype, DataType] = {}


def _from_torch_table() -> dict[torch.dtype, DataType]:
    if not _TORCH_TABLE:
        for dtype in _ALL:
            if not dtype.is_sub_byte:
                _TORCH_TABLE[dtype.to_torch()] = dtype
        for kind in ("int", "uint"):
            for bits in range(1, 8):
                torch_dtype = getattr(torch, f"{'u' if kind == 'uint' else ''}int{bits}", None)
                if torch_dtype is not None:
                    _TORCH_TABLE[torch_dtype] = DataType(kind, bits)
    return _TORCH_TABLE
