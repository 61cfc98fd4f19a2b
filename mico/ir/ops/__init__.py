"""Operator registration doors (seed 001): ``register_op``, ``register_executor``."""

from mico.ir.ops.registry import (
    OpDef,
    OpRegistry,
    get_conversion_fn,
    get_execution_fn,
    register_executor,
    register_op,
)

__all__ = [
    "OpDef",
    "OpRegistry",
    "get_conversion_fn",
    "get_execution_fn",
    "register_executor",
    "register_op",
]
