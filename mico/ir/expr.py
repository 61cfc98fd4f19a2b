"""Expressions of the typed IR (seed 002): ``Span``, ``ConstInt``, ``Var``, ``Call``.

Every expression has a ``type`` and a ``span`` (where it came from). A :class:`Call` is what
:func:`mico.ir.create_op_call` returns: an operator applied to argument expressions, with its
result type already deduced by the operator's ``infer`` rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mico.ir.dtypes import DataType
from mico.ir.types import DYNAMIC_DIM, InvalidTypeError, ScalarType, SymbolicDim, Type


@dataclass(frozen=True)
class Span:
    """A source location: ``filename``, 1-based ``line`` and ``column`` (``-1`` when unknown)."""

    filename: str = ""
    line: int = -1
    column: int = -1

    @staticmethod
    def unknown() -> Span:
        return _UNKNOWN

    @property
    def file(self) -> str:
        return self.filename

    @property
    def is_known(self) -> bool:
        return bool(self.filename) or self.line >= 0

    def __str__(self) -> str:
        if not self.is_known:
            return "<unknown>"
        where = self.filename or "<input>"
        if self.line >= 0:
            where += f":{self.line}"
            if self.column >= 0:
                where += f":{self.column}"
        return where


_UNKNOWN = Span()


class Expr:
    """Base class of IR expressions: each has a ``type`` and a ``span``."""

    type: Type
    span: Span


def _int_range(dtype: DataType) -> tuple[int, int]:
    if dtype.kind == "uint":
        return 0, 2**dtype.bits - 1
    if dtype.bits == 1:  # mico's binary codes {-1, +1}
        return -1, 1
    return -(2 ** (dtype.bits - 1)), 2 ** (dtype.bits - 1) - 1


class ConstInt(Expr):
    """An integer constant of an integer ``dtype``; as a dimension, ``-1`` is ``DYNAMIC_DIM``."""

    __slots__ = ("dtype", "span", "type", "value")

    def __init__(self, value: int, dtype: DataType = DataType.INT64, span: Span | None = None):
        if isinstance(value, bool) or not hasattr(value, "__index__"):
            raise InvalidTypeError(f"ConstInt needs an int value, got {value!r}")
        if not isinstance(dtype, DataType) or not dtype.is_int:
            raise InvalidTypeError(f"ConstInt needs an integer DataType, got {dtype!r}")
        value = int(value.__index__())
        lo, hi = _int_range(dtype)
        if not lo <= value <= hi:
            raise InvalidTypeError(f"ConstInt {value} does not fit {dtype} (range {lo}..{hi})")
        self.value = value
        self.dtype = dtype
        self.type = ScalarType(dtype)
        self.span = span if span is not None else _UNKNOWN

    def as_dim(self) -> int:
        """The dimension this constant denotes (``DYNAMIC_DIM`` becomes a fresh symbol)."""
        return self.value

    def __index__(self) -> int:
        return self.value

    def __int__(self) -> int:
        return self.value

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ConstInt):
            return self.value == other.value and self.dtype == other.dtype
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.value, self.dtype))

    def __repr__(self) -> str:
        return f"ConstInt({self.value}, {self.dtype!r})"

    def __str__(self) -> str:
        return str(self.value)


class ConstFloat(Expr):
    """A floating-point constant."""

    __slots__ = ("dtype", "span", "type", "value")

    def __init__(self, value: float, dtype: DataType = DataType.FP32, span: Span | None = None):
        if not isinstance(dtype, DataType) or not dtype.is_float:
            raise InvalidTypeError(f"ConstFloat needs a floating-point DataType, got {dtype!r}")
        self.value = float(value)
        self.dtype = dtype
        self.type = ScalarType(dtype)
        self.span = span if span is not None else _UNKNOWN

    def __repr__(self) -> str:
        return f"ConstFloat({self.value}, {self.dtype!r})"


class Var(Expr):
    """A named value of a given type. Identity matters: two Vars are equal only if the same.

    An integer scalar Var can be a dimension of a shape: every use of the same Var is the same
    :class:`SymbolicDim` (named after the Var).
    """

    __slots__ = ("_dim", "name", "span", "type")

    def __init__(self, name: str, type: Type, span: Span | None = None):
        if not isinstance(name, str) or not name:
            raise InvalidTypeError(f"a Var needs a non-empty name, got {name!r}")
        if not isinstance(type, Type):
            raise InvalidTypeError(
                f"Var '{name}' needs an IR type (TensorType, TileType, ScalarType), got {type!r}"
            )
        self.name = name
        self.type = type
        self.span = span if span is not None else _UNKNOWN
        self._dim: SymbolicDim | None = None

    def as_dim(self) -> SymbolicDim:
        if not (isinstance(self.type, ScalarType) and self.type.dtype.is_int):
            raise InvalidTypeError(
                f"Var '{self.name}' of type {self.type} cannot be a dimension; "
                "only integer scalar Vars can"
            )
        if self._dim is None:
            self._dim = SymbolicDim(self.name)
        return self._dim

    def __repr__(self) -> str:
        return f"Var({self.name!r}, {self.type!r})"

    def __str__(self) -> str:
        return f"%{self.name}: {self.type}"


@dataclass(eq=False)
class Call(Expr):
    """An operator applied to ``args``; ``type`` is the deduced result type."""

    op: Any  # mico.ir.ops.registry.OpDef
    args: list[Any]
    type: Type
    span: Span = field(default_factory=Span.unknown)
    attrs: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        args = ", ".join(f"%{a.name}" if getattr(a, "name", None) else str(a) for a in self.args)
        attrs = ", ".join(f"{k}={v}" for k, v in self.attrs.items())
        return f"{self.op.name}({args}{'; ' + attrs if attrs else ''}) -> {self.type}"


__all__ = ["DYNAMIC_DIM", "Call", "ConstFloat", "ConstInt", "Expr", "Span", "Var"]
