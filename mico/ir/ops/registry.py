"""The one operator registry: an entry per op, capabilities as optional named rules.

Rules (each optional, looked up by name): ``convert`` (torch node -> IR node), ``execute``
(reference semantics), ``emit`` (C code), ``infer`` (types), ``cost`` (MACs, bytes…).
``register_op`` / ``register_executor`` are seed 001's doors into it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

from mico.errors import RegistryError, UnsupportedOpError

RULES = ("convert", "execute", "emit", "infer", "cost")


@dataclass
class OpDef:
    """One operator: its name, a description, and its rule table."""

    name: str
    description: str = ""
    rules: dict[str, Callable[..., Any]] = field(default_factory=dict)


class OpRegistry:
    """Process-wide table of :class:`OpDef`; the only global state of the IR."""

    _ops: ClassVar[dict[str, OpDef]] = {}

    @classmethod
    def define(cls, name: str, description: str = "") -> OpDef:
        """Return the op called ``name``, creating it when new."""
        if not isinstance(name, str) or not name.strip():
            raise RegistryError(f"an op name must be a non-empty string, got {name!r}")
        op = cls._ops.get(name)
        if op is None:
            op = cls._ops[name] = OpDef(name, description)
        elif description and not op.description:
            op.description = description
        return op

    @classmethod
    def attach(cls, name: str, rule: str, fn: Callable[..., Any], override: bool = False) -> None:
        """Attach rule ``rule`` of op ``name``; an existing rule needs ``override=True``."""
        if rule not in RULES:
            raise RegistryError(
                f"unknown rule '{rule}' for op '{name}'; rules are {', '.join(RULES)}"
            )
        if not callable(fn):
            raise RegistryError(f"the {rule} rule of op '{name}' must be callable, got {fn!r}")
        op = cls.define(name)
        if rule in op.rules and not override and op.rules[rule] is not fn:
            raise RegistryError(
                f"op '{name}' already has a '{rule}' rule ({op.rules[rule].__qualname__}); "
                "pass override=True to replace it"
            )
        op.rules[rule] = fn

    @classmethod
    def is_registered(cls, name: str) -> bool:
        return name in cls._ops

    @classmethod
    def rule(cls, name: str, rule: str) -> Callable[..., Any] | None:
        """The ``rule`` of op ``name``, or None when the op or the rule is absent."""
        op = cls._ops.get(name)
        return op.rules.get(rule) if op else None

    @classmethod
    def require(cls, name: str, rule: str, hint: str = "") -> Callable[..., Any]:
        """Like :meth:`rule` but raise :class:`UnsupportedOpError` naming the fix."""
        fn = cls.rule(name, rule)
        if fn is None:
            raise UnsupportedOpError(
                f"op '{name}' has no {rule} rule" + (f"; {hint}" if hint else "")
            )
        return fn

    @classmethod
    def names(cls) -> list[str]:
        return sorted(cls._ops)

    @classmethod
    @contextmanager
    def scoped(cls) -> Iterator[type[OpRegistry]]:
        """Registrations made inside the block are undone when it exits (for tests)."""
        saved = copy.deepcopy(cls._ops)
        try:
            yield cls
        finally:
            cls._ops = saved


def register_op(name: str, override: bool = False) -> Callable[[Callable], Callable]:
    """Decorator: the IR conversion function of op ``name`` (seed 001's ``register_op``)."""

    def decorator(fn: Callable) -> Callable:
        OpRegistry.attach(name, "convert", fn, override=override)
        return fn

    return decorator


def register_executor(name: str, override: bool = False) -> Callable[[Callable], Callable]:
    """Decorator: the reference execution function of op ``name`` (seed 001)."""

    def decorator(fn: Callable) -> Callable:
        OpRegistry.attach(name, "execute", fn, override=override)
        return fn

    return decorator


def get_conversion_fn(name: str) -> Callable | None:
    return OpRegistry.rule(name, "convert")


def get_execution_fn(name: str) -> Callable | None:
    return OpRegistry.rule(name, "execute")
