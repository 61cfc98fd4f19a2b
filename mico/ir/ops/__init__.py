"""Operator registration doors (seed 001): ``register_op``, ``register_executor``.

Both match overloads explicitly (see :func:`mico.ir.analyzer.find_rule`): a rule for
``aten.add.Tensor`` never runs for ``aten.add.Scalar``; a base name covers its overloads only
when registered with ``overloads=True``. (They live in :mod:`mico.ir.analyzer`, which imports
the registry, hence the lazy re-export.)
"""

from mico.ir.ops.registry import OpDef, OpRegistry, get_conversion_fn, get_execution_fn

_FROM_ANALYZER = ("find_rule", "register_executor", "register_op")


def __getattr__(name: str) -> object:
    if name in _FROM_ANALYZER:
        from mico.ir import analyzer

        return getattr(analyzer, name)
    raise AttributeError(f"module 'mico.ir.ops' has no attribute {name!r}")


__all__ = [
    "OpDef",
    "OpRegistry",
    "find_rule",
    "get_conversion_fn",
    "get_execution_fn",
    "register_executor",
    "register_op",
]
