"""The ``scalar.*`` operators (seed 002's ScalarOp category): arithmetic on single values.

Arguments are :class:`~mico.ir.types.ScalarType` (a tensor or a tile is rejected centrally);
the result is a scalar of the promoted type, with the same promotion and C-style integer
division as the tensor ops.
"""

from __future__ import annotations

from typing import Any

from mico.ir.ops.registry import OpRegistry
from mico.ir.ops.tensor_ops import BINARY, describe_binary, execute_binary, no_bool, promote
from mico.ir.types import ScalarType

SCALAR = "ScalarOp"


def _deduce(op: str):
    def deduce(args: list[Any]) -> ScalarType:
        a, b = args[0].type, args[1].type
        no_bool(op, a, b)
        return ScalarType(promote(op, a.dtype, b.dtype))

    deduce.__qualname__ = f"deduce_{op.replace('.', '_')}"
    return deduce


for _short in BINARY:
    _name = f"scalar.{_short}"
    (
        OpRegistry.register(_name)
        .set_op_category(SCALAR)
        .set_description(describe_binary(_short, "scalars").replace(" with broadcasting", ""))
        .add_argument("lhs", "Left-hand side scalar (ScalarType)")
        .add_argument("rhs", "Right-hand side scalar (ScalarType)")
        .f_deduce_type(_deduce(_name))
    )
    OpRegistry.attach(_name, "execute", execute_binary(BINARY[_short][1], BINARY[_short][2]))
