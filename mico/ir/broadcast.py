"""NumPy-style broadcasting of shapes with symbolic dimensions.

Shapes are aligned from the right; a missing leading dimension counts as 1. For each pair of
dimensions ``a`` and ``b``:

==========================  ==============  =====================================================
pair                        status          result dimension
==========================  ==============  =====================================================
``n`` and ``n``             compatible      ``n``
``1`` and ``x``             compatible      ``x`` (``x`` a size or a symbol)
``n`` and ``m`` (n≠m, ≠1)   incompatible    — (the message names both: ``dimension 8 vs 5``)
``s`` and ``s``             compatible      ``s`` (the same symbol object)
``s`` and ``n`` (n≠1)       unknown         ``n``: valid only if ``s`` is 1 or ``n`` at run time,
                                            and then the result is ``n`` either way
``s`` and ``t`` (distinct)  unknown         ``bcast(s, t)``, a symbol derived from both
==========================  ==============  =====================================================

An *unknown* result can be used (the checks move to run time: :attr:`BroadcastResult.conditions`
lists them); an *incompatible* one cannot. Seed 002 treats every ``-1`` as equal to every other,
so it calls ``[-1] + [-1]`` compatible; here two distinct symbols are *unknown*.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mico.ir.types import Dim, SymbolicDim, derived_dim, format_shape, normalize_shape

COMPATIBLE = "compatible"
INCOMPATIBLE = "incompatible"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class BroadcastResult:
    """The outcome of :func:`broadcast_shapes`.

    ``status`` is ``"compatible"``, ``"incompatible"`` or ``"unknown"``; ``shape`` the result
    shape (``None`` when incompatible); ``message`` says why it is not compatible;
    ``conditions`` the run-time checks an unknown result depends on.
    """

    status: str
    shape: tuple[Dim, ...] | None
    message: str = ""
    conditions: tuple[str, ...] = ()

    @property
    def compatible(self) -> bool:
        return self.status == COMPATIBLE

    @property
    def incompatible(self) -> bool:
        return self.status == INCOMPATIBLE

    @property
    def unknown(self) -> bool:
        return self.status == UNKNOWN

    @property
    def success(self) -> bool:
        """Seed 002's name: a result shape exists (compatible, or unknown until run time)."""
        return self.status != INCOMPATIBLE


def _pair(a: Dim, b: Dim, axis: int, conditions: list[str]) -> Dim | None:
    if a is b or (isinstance(a, int) and isinstance(b, int) and a == b):
        return a
    if isinstance(a, int) and a == 1:
        return b
    if isinstance(b, int) and b == 1:
        return a
    if isinstance(a, int) and isinstance(b, int):
        return None
    if isinstance(a, SymbolicDim) and isinstance(b, SymbolicDim):
        conditions.append(f"axis {axis}: {a} and {b} are equal or one of them is 1")
        return derived_dim("bcast", a, b)
    sym, size = (a, b) if isinstance(a, SymbolicDim) else (b, a)
    conditions.append(f"axis {axis}: {sym} is 1 or {size}")
    return size


def broadcast_shapes(a: Any, b: Any, *more: Any) -> BroadcastResult:
    """Broadcast two (or more) shapes; see the module docstring for the rules.

    Shapes are sequences of ints, ``ConstInt``, integer ``Var`` or :class:`SymbolicDim`
    (``-1`` is a fresh symbol); a :class:`~mico.ir.types.ShapedType` stands for its shape.
    """
    sa = normalize_shape(getattr(a, "shape", a))
    sb = normalize_shape(getattr(b, "shape", b))
    rank = max(len(sa), len(sb))
    pa = (1,) * (rank - len(sa)) + sa
    pb = (1,) * (rank - len(sb)) + sb
    out: list[Dim] = []
    conditions: list[str] = []
    for i in reversed(range(rank)):  # right to left: the message names the last clash
        axis = i - rank
        dim = _pair(pa[i], pb[i], axis, conditions)
        if dim is None:
            return BroadcastResult(
                INCOMPATIBLE,
                None,
                f"{format_shape(sa)} + {format_shape(sb)}: dimension {pa[i]} vs {pb[i]} "
                f"(axis {axis}); sizes must be equal or 1",
            )
        out.append(dim)
    out.reverse()
    conditions.reverse()
    result = BroadcastResult(
        UNKNOWN if conditions else COMPATIBLE, tuple(out), "", tuple(conditions)
    )
    if result.status == UNKNOWN:
        result = BroadcastResult(
            UNKNOWN,
            result.shape,
            f"{format_shape(sa)} + {format_shape(sb)} depends on run-time sizes: "
            + "; ".join(conditions),
            result.conditions,
        )
    for c in more:
        if result.incompatible:
            return result
        nxt = broadcast_shapes(result.shape, c)
        if nxt.incompatible:
            return nxt
        status = UNKNOWN if (result.unknown or nxt.unknown) else COMPATIBLE
        result = BroadcastResult(
            status,
            nxt.shape,
            "; ".join(m for m in (result.message, nxt.message) if m),
            result.conditions + nxt.conditions,
        )
    return result
