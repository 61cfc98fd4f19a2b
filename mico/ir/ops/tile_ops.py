"""The ``tile.*`` operators (seed 002): element-wise arithmetic on tiles (at most 2 dims).

Arguments must be :class:`~mico.ir.types.TileType` (a tensor is rejected centrally, before the
deduce function runs); the result is a tile of the promoted type and the broadcast shape.
"""

from __future__ import annotations

from mico.ir.ops.registry import OpRegistry
from mico.ir.ops.tensor_ops import BINARY, deduce_binary, describe_binary, execute_binary
from mico.ir.types import TileType

TILE = "TileOp"

for _short, (_what, _ffn, _ifn) in BINARY.items():
    _name = f"tile.{_short}"
    (
        OpRegistry.register(_name)
        .set_op_category(TILE)
        .set_description(describe_binary(_short, "tiles"))
        .add_argument("lhs", "Left-hand side tile (TileType)")
        .add_argument("rhs", "Right-hand side tile (TileType)")
        .f_deduce_type(deduce_binary(_name, TileType))
    )
    OpRegistry.attach(_name, "execute", execute_binary(_ffn, _ifn))
