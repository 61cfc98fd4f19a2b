"""Data type promotion: the common type of two operands, independent of their order.

Rules (``promote_types(a, b)``), applied in this order:

1. ``a == b`` gives ``a`` (``int4 + int4 -> int4``, ``bool + bool -> bool``).
2. ``bool`` with any other type is an error (:class:`~mico.errors.TypeDeductionError`):
   mico does no arithmetic on truth values implicitly; cast first (``tensor.cast``).
3. A float beats every integer: ``int64 + fp16 -> fp16``.
4. Two floats: the wider wins; ``fp16 + bf16 -> fp32`` (neither holds the other).
5. A sub-byte integer combined with a *different* type first widens to the 8-bit type of its
   signedness (``int4 -> int8``, ``uint3 -> uint8``): sub-byte types are code formats
   (signed 1-bit is the binary code {-1, +1}), and mixing two formats gives a plain integer.
6. Two integers: the result is as wide as the wider, and signed if either is signed (signed
   wins over unsigned of the same size): ``uint32 + int32 -> int32``, ``uint16 + int8 ->
   int16``, ``uint8 + int16 -> int16``.

The integer rule is a join in the product order (width, signedness), floats dominate integers
and the float rule is a join too, so promotion is commutative and associative.

Where mico differs from torch (``torch.promote_types``), listed in :data:`TORCH_DIFFERENCES`:

* ``bool`` with a number: torch gives the number's type, mico raises (rule 2).
* ``uint8 + int8``: torch gives ``int16`` (a type that holds both ranges), mico ``int8``
  (seed 002's rule, rule 6).

Pairs torch refuses ("Promotion for uint16, uint32, uint64 types is not supported"): an
unsigned 16/32/64-bit type with any integer or bool of another type. mico defines them by rule
6 — ``uint32 + int32 -> int32`` (NumPy gives ``int64``), ``uint64 + int64 -> int64`` (NumPy
gives ``float64``), ``uint16 + uint32 -> uint32`` — and rule 2 for bool. Sub-byte types have no
torch promotion at all.
"""

from __future__ import annotations

from mico.errors import TypeDeductionError
from mico.ir.dtypes import DataType

# (a, b) -> (mico's result, torch's result): both orders are covered by promote_types' symmetry.
TORCH_DIFFERENCES: dict[tuple[DataType, DataType], tuple[DataType | None, DataType]] = {
    **{
        (DataType.BOOL, t): (None, t)
        for t in (
            DataType.UINT8,
            DataType.INT8,
            DataType.INT16,
            DataType.INT32,
            DataType.INT64,
            DataType.FP16,
            DataType.BF16,
            DataType.FP32,
            DataType.FP64,
        )
    },
    (DataType.UINT8, DataType.INT8): (DataType.INT8, DataType.INT16),
}
"""Pairs torch promotes differently: ``(a, b) -> (mico, torch)``; ``None`` means mico raises."""


def _float_join(a: DataType, b: DataType) -> DataType:
    if a.bits != b.bits:
        return a if a.bits > b.bits else b
    # same width, different kind: fp16 and bf16 -> fp32 (the narrowest type holding both)
    return DataType.FP32


def promote_types(a: DataType, b: DataType) -> DataType:
    """The common type of ``a`` and ``b`` (commutative and associative; see module docs).

    Raises :class:`~mico.errors.TypeDeductionError` for ``bool`` with a number.
    """
    for d in (a, b):
        if not isinstance(d, DataType):
            raise TypeDeductionError(f"promote_types needs DataTypes, got {d!r}")
    if a == b:
        return a
    if a.is_bool or b.is_bool:
        other = b if a.is_bool else a
        raise TypeDeductionError(
            f"cannot promote bool with {other}: mico does no implicit arithmetic on truth "
            f"values; cast the bool operand to {other} first (tensor.cast)"
        )
    if a.is_float or b.is_float:
        if a.is_float and b.is_float:
            return _float_join(a, b)
        return a if a.is_float else b
    a, b = a.container, b.container  # rule 5: sub-byte codes widen to 8 bits
    if a == b:
        return a
    bits = max(a.bits, b.bits)
    return DataType("int" if a.signed or b.signed else "uint", bits)


def promote_all(dtypes: list[DataType]) -> DataType:
    """The common type of one or more data types."""
    if not dtypes:
        raise TypeDeductionError("promote_all needs at least one data type")
    result = dtypes[0]
    for d in dtypes[1:]:
        result = promote_types(result, d)
    return result


def can_promote(a: DataType, b: DataType) -> bool:
    try:
        promote_types(a, b)
    except TypeDeductionError:
        return False
    return True
