"""Config schemas read from a constructor's signature, and values checked against them.

The seed's schema kept the raw annotation and checked values with ``isinstance``, which fails on
``Optional[int]``, unions, ``Literal``, ``list[int]`` and string annotations, and it counted
``*args``/``**kwargs`` as required fields. Here annotations are resolved (``from __future__ import
annotations`` included) and checked structurally.
"""

from __future__ import annotations

import collections.abc as abc
import contextlib
import inspect
import types
import typing
from dataclasses import dataclass
from typing import Any

#: Parameters never part of a config: the instance and the device a framework passes itself.
SKIPPED_PARAMETERS = ("self", "device")

_MISSING = inspect.Parameter.empty


@dataclass(frozen=True)
class FieldSchema:
    """One constructor argument: its annotation, default and whether a config must give it."""

    name: str
    annotation: Any
    default: Any
    required: bool

    @property
    def has_default(self) -> bool:
        return not self.required

    def type_name(self) -> str:
        """The annotation as a reader writes it (``int | None``, ``Literal['a', 'b']``)."""
        return describe_type(self.annotation)

    def as_dict(self) -> dict[str, Any]:
        """The seed's form: ``{'type', 'default', 'required'}``."""
        return {"type": self.annotation, "default": self.default, "required": self.required}

    def __getitem__(self, key: str) -> Any:
        return self.as_dict()[key]


@dataclass(frozen=True)
class ConfigSchema:
    """The fields of a constructor and whether it takes extra keyword arguments."""

    fields: dict[str, FieldSchema]
    accepts_extra: bool = False

    def items(self) -> Any:
        return self.fields.items()

    def __iter__(self) -> Any:
        return iter(self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    def __contains__(self, name: object) -> bool:
        return name in self.fields

    def __getitem__(self, name: str) -> FieldSchema:
        return self.fields[name]


def _resolved_hints(target: Any) -> dict[str, Any]:
    """Annotations of ``target`` with strings evaluated; unresolved ones stay as strings."""
    try:
        return typing.get_type_hints(target)
    except Exception:  # a name the module cannot resolve: fall back one by one
        hints: dict[str, Any] = {}
        raw = getattr(target, "__annotations__", {}) or {}
        namespace = dict(vars(inspect.getmodule(target) or typing))
        for name, value in raw.items():
            if isinstance(value, str):
                with contextlib.suppress(Exception):  # the class's own annotation text
                    value = eval(value, namespace)
            hints[name] = value
        return hints


def extract_config_schema(module_class: Any) -> ConfigSchema:
    """The config schema of a class's ``__init__`` or of a factory function's own signature.

    ``self``, ``device``, ``*args`` and ``**kwargs`` are not fields; ``**kwargs`` makes the schema
    accept extra fields.
    """
    target = module_class.__init__ if isinstance(module_class, type) else module_class
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return ConfigSchema({}, accepts_extra=True)
    hints = _resolved_hints(target)
    fields: dict[str, FieldSchema] = {}
    accepts_extra = False
    for name, param in signature.parameters.items():
        if name in SKIPPED_PARAMETERS:
            continue
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            accepts_extra = True
            continue
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            continue
        annotation = hints.get(name, param.annotation)
        if annotation is _MISSING:
            annotation = Any
        required = param.default is _MISSING
        fields[name] = FieldSchema(name, annotation, None if required else param.default, required)
    return ConfigSchema(fields, accepts_extra)


def describe_type(annotation: Any) -> str:
    """A readable spelling of an annotation."""
    if annotation is Any:
        return "Any"
    if isinstance(annotation, str):
        return annotation
    if annotation is type(None):
        return "None"
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return "Literal[" + ", ".join(repr(a) for a in args) + "]"
    if origin in (typing.Union, types.UnionType):
        return " | ".join(describe_type(a) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(describe_type(a) for a in args)}]" if args else name
    return getattr(annotation, "__name__", str(annotation))


def matches(value: Any, annotation: Any) -> bool:
    """Whether ``value`` fits ``annotation`` (unions, Optional, Literal, containers, Any)."""
    if annotation is Any or annotation is _MISSING or isinstance(annotation, str):
        return True  # unknown or unresolvable: nothing to check against
    if annotation is None or annotation is type(None):
        return value is None
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return any(matches(value, a) for a in args)
    if origin is typing.Annotated:
        return matches(value, args[0])
    if origin in (list, set, frozenset, abc.Sequence, abc.Iterable, abc.Collection):
        if origin in (abc.Sequence, abc.Iterable, abc.Collection):
            ok = isinstance(value, list | tuple)  # a config gives sequences as lists
        else:
            ok = isinstance(value, origin)
        return ok and (not args or all(matches(v, args[0]) for v in value))
    if origin is tuple:
        if not isinstance(value, tuple | list):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(matches(v, args[0]) for v in value)
        return not args or (len(args) == len(value) and all(map(matches, value, args)))
    if origin in (dict, abc.Mapping, abc.MutableMapping):
        if not isinstance(value, dict):
            return False
        if len(args) == 2:
            return all(matches(k, args[0]) and matches(v, args[1]) for k, v in value.items())
        return True
    if origin is type:
        return isinstance(value, type) and (
            not args or args[0] is Any or issubclass(value, args[0])
        )
    if origin is not None:
        return not isinstance(origin, type) or isinstance(value, origin)
    if annotation is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(annotation, type):
        return isinstance(value, annotation)
    return True


def brief(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters (an error message never prints a huge value)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
