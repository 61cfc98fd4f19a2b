"""Value types of the IR: :class:`ScalarType`, :class:`TensorType`, :class:`TileType`.

Shapes hold ``int`` sizes for static dimensions and :class:`SymbolicDim` objects for dynamic
ones. Seed 002 marks a dynamic dimension with ``DYNAMIC_DIM == -1``; here each ``-1`` becomes a
*fresh* symbol, so two unknown dimensions are equal only when they are the same symbol object
(in seed 002 every ``-1`` equals every other ``-1``, so ``[-1] + [-1]`` "broadcasts" even when
the two sizes differ at run time). Reuse a :class:`SymbolicDim` (or an integer
:class:`~mico.ir.expr.Var`) to say that two dimensions are the same size.

Two constructor forms are accepted, so existing code and seed 002 both work::

    TensorType((1, 8, 4, 4), DataType.FP32)                 # shape first: mico's static form
    TensorType(DataType.FP32, [ConstInt(4, ...), 8, -1])    # dtype first: seed 002's form

In the shape-first form a negative size is an error (it is how torch spells "infer this
size", which is a reshape argument, not a type); in the dtype-first form ``-1`` is
``DYNAMIC_DIM``. Types are immutable and hashable.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mico.errors import MicoError
from mico.ir.dtypes import DataType

DYNAMIC_DIM = -1
"""Seed 002's ``kDynamicDim``: a dimension whose size is only known at run time."""


class InvalidTypeError(MicoError, ValueError):
    """A type was constructed from invalid parts (bad dtype, negative size, too many dims)."""


class SymbolicShapeError(MicoError, ValueError):
    """A static quantity (``numel``, ``nbytes``) was asked of a shape with symbolic dims."""


_counter = itertools.count(1)


class SymbolicDim:
    """A dimension whose size is unknown until run time.

    Equality is identity: two symbols are the same size only if they are the same object.
    ``SymbolicDim()`` is a fresh symbol named ``?<n>``; ``SymbolicDim("batch")`` names it.
    """

    __slots__ = ("__weakref__", "name")

    def __init__(self, name: str | None = None) -> None:
        self.name = name if name is not None else f"?{next(_counter)}"

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"SymbolicDim({self.name!r})"

    def __deepcopy__(self, memo: dict[int, Any]) -> SymbolicDim:
        # A symbol is an identity, not data: copies of a type keep referring to the same size.
        return self

    def __copy__(self) -> SymbolicDim:
        return self


Dim = int | SymbolicDim

_DERIVED: dict[tuple[Any, ...], SymbolicDim] = {}


def derived_dim(label: str, *parts: Any) -> SymbolicDim:
    """The symbol for a size computed from other dims (``label`` and ``parts`` identify it).

    Memoized, so deducing the same type twice gives equal types: ``derived_dim("flatten", s,
    4)`` is the same object each time it is asked for with the same symbol ``s``.
    """
    key = (label, *parts)
    sym = _DERIVED.get(key)
    if sym is None:
        shown = ", ".join(str(p) for p in parts)
        sym = _DERIVED[key] = SymbolicDim(f"{label}({shown})")
    return sym


def is_static(dim: Dim) -> bool:
    return isinstance(dim, int)


def _dim(value: Any, *, allow_dynamic: bool, where: str) -> Dim:
    """One dimension from an int, a ConstInt, an integer Var or a SymbolicDim."""
    if isinstance(value, SymbolicDim):
        return value
    as_dim = getattr(value, "as_dim", None)  # mico.ir.expr.Var / ConstInt
    if as_dim is not None:
        return _dim(as_dim(), allow_dynamic=True, where=where)
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise InvalidTypeError(
            f"{where}: a dimension must be an int, ConstInt, integer Var or SymbolicDim, "
            f"got {type(value).__name__} {value!r}"
        )
    size = int(value.__index__())
    if size == DYNAMIC_DIM and allow_dynamic:
        return SymbolicDim()
    if size < 0:
        hint = (
            "; a dynamic dimension is written TensorType(dtype, [DYNAMIC_DIM, ...]) or with a "
            "SymbolicDim"
            if size == DYNAMIC_DIM
            else ""
        )
        raise InvalidTypeError(f"tensor dimensions must be >= 0, got {size} in {where}{hint}")
    return size


def normalize_shape(dims: Iterable[Any], *, allow_dynamic: bool = True, where: str = "shape"):
    """A shape tuple (ints and symbols) from ints, ConstInts, Vars, SymbolicDims or -1."""
    if isinstance(dims, str | bytes) or not isinstance(dims, Iterable):
        raise InvalidTypeError(f"{where}: a shape must be a sequence of dimensions, got {dims!r}")
    return tuple(_dim(d, allow_dynamic=allow_dynamic, where=where) for d in dims)


def format_shape(shape: Iterable[Dim]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


class Type:
    """Base class of IR value types."""

    __slots__ = ()


@dataclass(frozen=True)
class ScalarType(Type):
    """A single value of element type ``dtype``."""

    dtype: DataType

    def __post_init__(self) -> None:
        if not isinstance(self.dtype, DataType):
            raise InvalidTypeError(f"ScalarType needs a DataType, got {self.dtype!r}")

    def __str__(self) -> str:
        return str(self.dtype)

    def __repr__(self) -> str:
        return f"ScalarType({self.dtype!r})"


@dataclass(frozen=True, init=False)
class ShapedType(Type):
    """A tensor-like type: a shape (ints and :class:`SymbolicDim`) and an element ``dtype``."""

    shape: tuple[Dim, ...]
    dtype: DataType

    def __init__(self, a: Any = None, b: Any = None, *, shape: Any = None, dtype: Any = None):
        if isinstance(a, DataType):  # seed 002: (dtype, dims)
            dtype, shape, allow = a, (b if b is not None else shape), True
        else:  # mico: (shape, dtype)
            shape = a if a is not None else shape
            dtype = b if b is not None else dtype
            allow = False
        name = type(self).__name__
        if not isinstance(dtype, DataType):
            raise InvalidTypeError(f"{name} needs a DataType, got {dtype!r}")
        if shape is None:
            raise InvalidTypeError(f"{name} needs a shape")
        dims = normalize_shape(shape, allow_dynamic=allow, where=f"{name} shape")
        object.__setattr__(self, "shape", dims)
        object.__setattr__(self, "dtype", dtype)
        self._validate()

    def _validate(self) -> None:
        pass

    @property
    def rank(self) -> int:
        return len(self.shape)

    ndim = rank

    @property
    def is_static(self) -> bool:
        """True when every dimension is a known integer."""
        return all(isinstance(d, int) for d in self.shape)

    @property
    def symbols(self) -> tuple[SymbolicDim, ...]:
        return tuple(d for d in self.shape if isinstance(d, SymbolicDim))

    @property
    def numel(self) -> int:
        if not self.is_static:
            raise SymbolicShapeError(
                f"numel of {self} is not known before run time: its dimensions "
                f"{', '.join(map(str, self.symbols))} are symbolic; bind them to sizes first"
            )
        return math.prod(self.shape)  # type: ignore[arg-type]

    @property
    def nbytes(self) -> int:
        """Bytes in memory, one container per element."""
        return self.numel * self.dtype.container_bytes

    def with_shape(self, shape: Iterable[Any]) -> ShapedType:
        return type(self)(self.dtype, list(shape))

    def with_dtype(self, dtype: DataType) -> ShapedType:
        return type(self)(dtype, list(self.shape))

    def __str__(self) -> str:
        return f"{self.dtype}{format_shape(self.shape)}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.dtype!r}, {format_shape(self.shape)})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # IPython / hypothesis
        printer.text(repr(self))


@dataclass(frozen=True, init=False, repr=False)
class TensorType(ShapedType):
    """An N-dimensional tensor: ``TensorType(shape, dtype)`` or ``TensorType(dtype, dims)``."""

    __str__ = ShapedType.__str__
    __repr__ = ShapedType.__repr__


@dataclass(frozen=True, init=False, repr=False)
class TileType(ShapedType):
    """A tile: a tensor of at most 2 dimensions (the unit of on-chip hardware operations)."""

    MAX_DIMS = 2

    def _validate(self) -> None:
        if len(self.shape) > self.MAX_DIMS:
            raise InvalidTypeError(
                f"TileType can have at most {self.MAX_DIMS} dimensions, got {len(self.shape)}"
            )

    def __str__(self) -> str:
        return f"tile {self.dtype}{format_shape(self.shape)}"

    __repr__ = ShapedType.__repr__


def type_name(value: Any) -> str:
    """The class name of an IR argument's type (``TensorType``), or of the value itself."""
    t = getattr(value, "type", value)
    return type(t).__name__
