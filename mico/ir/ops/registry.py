"""The one operator registry: an entry per op, capabilities as optional named rules.

Rules (each optional, looked up by name): ``convert`` (torch node -> IR node), ``execute``
(reference semantics), ``emit`` (C code), ``infer`` (types), ``cost`` (MACs, bytes…).

Doors into it:

* seed 001: ``@register_op(name)`` attaches a ``convert`` rule, ``@register_executor(name)`` an
  ``execute`` rule;
* seed 002: the fluent builder defines an op's signature and its ``infer`` rule::

      OpRegistry.register("tensor.add") \\
          .set_op_category("TensorOp") \\
          .set_description("Element-wise addition of two tensors with broadcasting") \\
          .add_argument("lhs", "Left-hand side tensor (TensorType)") \\
          .add_argument("rhs", "Right-hand side tensor (TensorType)") \\
          .f_deduce_type(deduce)

  ``f_deduce_type`` completes the registration: it checks that the category and description
  were given and attaches the ``infer`` rule. An op whose chain never reached it stays flagged
  incomplete, and :func:`create_op_call` on it says so. Argument counts, argument kinds and
  typed attributes are checked here, centrally, before the op's deduce function runs.
"""

from __future__ import annotations

import copy
import difflib
import inspect
import re
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

from mico.errors import RegistryError, TypeDeductionError, UnsupportedOpError
from mico.ir.expr import Call, Span
from mico.ir.types import ScalarType, TensorType, TileType, Type

RULES = ("convert", "execute", "emit", "infer", "cost")

KINDS: dict[str, type[Type]] = {
    "TensorType": TensorType,
    "TileType": TileType,
    "ScalarType": ScalarType,
}

_ORDINALS = (
    "first",
    "second",
    "third",
    "fourth",
    "fifth",
    "sixth",
    "seventh",
    "eighth",
    "ninth",
    "tenth",
)


def ordinal(index: int) -> str:
    """``0 -> "first"``, ``1 -> "second"``…, ``10 -> "11th"``."""
    if index < len(_ORDINALS):
        return _ORDINALS[index]
    n = index + 1
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def display_name(name: str) -> str:
    """The op's class-like name used in messages: ``tensor.max_pool2d -> TensorMaxPool2d``."""
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[._]", name) if part)


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"

    def __deepcopy__(self, memo: dict[int, Any]) -> _Required:
        return self


REQUIRED: Any = _Required()
"""The default of an attribute that must be given."""


def _kind_name(kind: tuple[type, ...] | None) -> str:
    if not kind:
        return "any"
    return " or ".join(k.__name__ for k in kind)


def type_repr(tp: Any) -> str:
    """A readable name of an attribute type: ``int``, ``list[int]``, ``int | None``."""
    if tp is Any:
        return "any"
    if tp is type(None) or tp is None:
        return "None"
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__name__
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        return " | ".join(type_repr(a) for a in args)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin is not None:
        inner = ", ".join("..." if a is Ellipsis else type_repr(a) for a in args)
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]"
    return str(tp).replace("typing.", "")


def _conforms(value: Any, tp: Any) -> bool:
    """Does ``value`` have attribute type ``tp`` (a class or a typing alias)?"""
    if tp is Any or tp is object:
        return True
    if tp is None or tp is type(None):
        return value is None
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        return any(_conforms(value, a) for a in args)
    if origin is typing.Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if origin in (list, tuple, Sequence):
        if not isinstance(value, list | tuple):
            return False
        if not args:
            return True
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            return len(value) == len(args) and all(map(_conforms, value, args))
        return all(_conforms(v, args[0]) for v in value)
    if origin is dict:
        if not isinstance(value, dict):
            return False
        if not args:
            return True
        return all(_conforms(k, args[0]) and _conforms(v, args[1]) for k, v in value.items())
    if tp is bool:
        return isinstance(value, bool) or type(value).__name__ == "bool_"
    if tp is int:
        return (
            hasattr(value, "__index__")
            and not isinstance(value, bool)
            and type(value).__name__ != "bool_"
        )
    if tp is float:
        return (
            (isinstance(value, int | float) or type(value).__module__ == "numpy")
            and not isinstance(value, bool)
            and _is_real(value)
        )
    if isinstance(tp, type):
        return isinstance(value, tp)
    raise RegistryError(f"unsupported attribute type {tp!r}")


def _is_real(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def _valid_attr_type(tp: Any) -> bool:
    if tp is Any or tp is None or isinstance(tp, type):
        return True
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return True
    if origin is None:
        return False
    return all(a is Ellipsis or _valid_attr_type(a) for a in typing.get_args(tp))


@dataclass(frozen=True)
class ArgumentSpec:
    """One positional argument of an op: its ``kind`` is the expected type class(es)."""

    name: str
    description: str = ""
    kind: tuple[type[Type], ...] | None = None
    variadic: bool = False
    optional: bool = False

    @property
    def kind_name(self) -> str:
        return _kind_name(self.kind)

    def __deepcopy__(self, memo: dict[int, Any]) -> ArgumentSpec:
        return self


@dataclass(frozen=True)
class AttributeSpec:
    """One typed attribute of an op; ``default`` is :data:`REQUIRED` when it must be given."""

    name: str
    type: Any
    default: Any = REQUIRED
    description: str = ""

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    @property
    def type_name(self) -> str:
        return type_repr(self.type)

    def check(self, value: Any, owner: str) -> Any:
        if not _conforms(value, self.type):
            shown = repr(value)
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            raise TypeDeductionError(
                f"{owner}: attribute '{self.name}' must be {self.type_name}, "
                f"got {type(value).__name__} {shown}"
            )
        return value

    def __deepcopy__(self, memo: dict[int, Any]) -> AttributeSpec:
        return self


@dataclass
class OpDef:
    """One operator: its name, a description, its rule table and (when declared) signature."""

    name: str
    description: str = ""
    rules: dict[str, Callable[..., Any]] = field(default_factory=dict)
    category: str = ""
    arguments: list[ArgumentSpec] = field(default_factory=list)
    attributes: list[AttributeSpec] = field(default_factory=list)
    declared: bool = False  # the signature was given through OpRegistry.register(...)
    pending: str = ""  # why a started registration is incomplete ("" when not pending)

    @property
    def display_name(self) -> str:
        return display_name(self.name)

    @property
    def deduce(self) -> Callable[..., Any] | None:
        """The op's own type deduction function (``f_deduce_type``), if any."""
        infer = self.rules.get("infer")
        return getattr(infer, "deduce", infer)

    @property
    def is_complete(self) -> bool:
        return not self.pending and "infer" in self.rules

    def attribute(self, name: str) -> AttributeSpec:
        for spec in self.attributes:
            if spec.name == name:
                return spec
        raise KeyError(name)

    def arity(self) -> tuple[int, int | None]:
        """``(minimum, maximum)`` argument count; maximum ``None`` for a variadic op."""
        required = sum(1 for a in self.arguments if not a.optional)
        if self.arguments and self.arguments[-1].variadic:
            return required, None
        return required, len(self.arguments)

    def check_arguments(self, args: Sequence[Any]) -> None:
        """Raise :class:`TypeDeductionError` unless ``args`` match the declared signature."""
        lo, hi = self.arity()
        n = len(args)
        if n < lo or (hi is not None and n > hi):
            if hi == lo:
                expected = f"{lo} argument{'s' if lo != 1 else ''}"
            elif hi is None:
                expected = f"at least {lo} argument{'s' if lo != 1 else ''}"
            else:
                expected = f"{lo} to {hi} arguments"
            raise TypeDeductionError(f"Operator '{self.name}' expects {expected}, got {n}")
        for i, arg in enumerate(args):
            spec = self.arguments[min(i, len(self.arguments) - 1)]
            t = getattr(arg, "type", None)
            if not isinstance(t, Type):
                raise TypeDeductionError(
                    f"{self.display_name}: {ordinal(i)} argument must be a {spec.kind_name}, "
                    f"got {type(arg).__name__} (not an IR expression)"
                )
            if spec.kind and not isinstance(t, spec.kind):
                raise TypeDeductionError(
                    f"{self.display_name}: {ordinal(i)} argument must be a {spec.kind_name}, "
                    f"got {type(t).__name__}"
                )

    def check_attributes(self, attrs: dict[str, Any] | None) -> dict[str, Any]:
        """The attributes with defaults filled in; raise on unknown, missing or mistyped ones."""
        attrs = dict(attrs or {})
        known = {a.name for a in self.attributes}
        unknown = [k for k in attrs if k not in known]
        if unknown:
            names = ", ".join(a.name for a in self.attributes) or "none"
            raise TypeDeductionError(
                f"{self.display_name}: unknown attribute '{unknown[0]}'; "
                f"attributes of '{self.name}' are: {names}"
            )
        out: dict[str, Any] = {}
        for spec in self.attributes:
            if spec.name in attrs:
                out[spec.name] = spec.check(attrs[spec.name], self.display_name)
            elif spec.required:
                raise TypeDeductionError(
                    f"{self.display_name}: missing required attribute '{spec.name}' "
                    f"({spec.type_name})"
                )
            else:
                out[spec.name] = copy.deepcopy(spec.default)
        return out

    def describe(self) -> str:
        """A multi-line human description of the op."""
        head = self.name + (f"  [{self.category}]" if self.category else "")
        lines = [head, f"  {self.description or '(no description)'}"]
        if self.pending:
            lines.append(f"  INCOMPLETE: {self.pending}")
        if self.declared:
            lo, hi = self.arity()
            count = f"{lo}" if hi == lo else (f"{lo}+" if hi is None else f"{lo}-{hi}")
            lines.append(f"  arguments ({count}):")
            for a in self.arguments:
                flags = " (variadic)" if a.variadic else (" (optional)" if a.optional else "")
                desc = f" — {a.description}" if a.description else ""
                lines.append(f"    {a.name}: {a.kind_name}{flags}{desc}")
            if not self.arguments:
                lines.append("    (none)")
            if self.attributes:
                lines.append("  attributes:")
                for spec in self.attributes:
                    default = "" if spec.required else f" = {spec.default!r}"
                    desc = f" — {spec.description}" if spec.description else ""
                    lines.append(f"    {spec.name}: {spec.type_name}{default}{desc}")
        else:
            lines.append("  signature: not declared (no OpRegistry.register(...) entry)")
        rules = ", ".join(r for r in RULES if r in self.rules) or "none"
        lines.append(f"  rules: {rules}")
        return "\n".join(lines)


class _Typed:
    """A bare :class:`Type` passed where an argument expression is expected."""

    __slots__ = ("type",)

    def __init__(self, t: Type) -> None:
        self.type = t

    def __repr__(self) -> str:
        return f"<{self.type}>"


def _as_args(args: Sequence[Any]) -> list[Any]:
    if isinstance(args, str | bytes) or not isinstance(args, Sequence):
        raise TypeDeductionError(f"op arguments must be a list, got {type(args).__name__}")
    return [_Typed(a) if isinstance(a, Type) else a for a in args]


def _takes_attrs(fn: Callable[..., Any]) -> bool:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return True
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= 2:
        return True
    if len(positional) == 1:
        return False
    raise RegistryError(
        f"a type deduction function takes (args) or (args, attrs); {fn!r} takes no arguments"
    )


def _make_infer(name: str, fn: Callable[..., Any]) -> Callable[..., Type]:
    """The ``infer`` rule: central checks of the declared signature, then ``fn``."""
    with_attrs = _takes_attrs(fn)

    def infer(args: Sequence[Any], attrs: dict[str, Any] | None = None) -> Type:
        op = OpRegistry.get(name)
        args = _as_args(args)
        op.check_arguments(args)
        checked = op.check_attributes(attrs)
        result = fn(args, checked) if with_attrs else fn(args)
        if not isinstance(result, Type):
            raise TypeDeductionError(
                f"the type deduction of '{name}' returned {result!r}, not an IR type "
                "(TensorType, TileType or ScalarType)"
            )
        return result

    infer.deduce = fn  # type: ignore[attr-defined]
    infer.__qualname__ = getattr(fn, "__qualname__", infer.__qualname__)
    infer.__name__ = f"infer_{name.replace('.', '_')}"
    infer.__doc__ = f"Checked type deduction of '{name}'."
    return infer


class OpBuilder:
    """Seed 002's fluent registration chain; :meth:`f_deduce_type` completes it."""

    def __init__(self, name: str, override: bool) -> None:
        self.name = name
        self.override = override
        self._category: str | None = None
        self._description: str | None = None
        self._arguments: list[ArgumentSpec] = []
        self._attributes: list[AttributeSpec] = []
        self._done = False

    @property
    def op(self) -> OpDef:
        return OpRegistry.get(self.name)

    def _open(self, method: str) -> None:
        if self._done:
            raise RegistryError(
                f"the registration of '{self.name}' is complete; call {method}() before "
                "f_deduce_type()"
            )

    def _text(self, value: Any, what: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise RegistryError(
                f"op '{self.name}': {what} must be a non-empty string, got {value!r}"
            )
        return value.strip()

    def set_op_category(self, category: str) -> OpBuilder:
        self._open("set_op_category")
        self._category = self._text(category, "the op category")
        return self

    def set_description(self, description: str) -> OpBuilder:
        self._open("set_description")
        self._description = self._text(description, "the description")
        return self

    def _taken(self, name: str) -> bool:
        return any(s.name == name for s in (*self._arguments, *self._attributes))

    def add_argument(
        self,
        name: str,
        description: str = "",
        kind: Any = None,
        *,
        variadic: bool = False,
        optional: bool = False,
    ) -> OpBuilder:
        """A positional argument. ``kind``: ``TensorType``, ``TileType``, ``ScalarType``, a tuple
        of them, their names, or None — then it is read from ``"(TensorType)"`` in the
        description, else any type is accepted. ``variadic``: the last argument takes one or
        more values; ``optional``: trailing arguments that may be left out."""
        self._open("add_argument")
        name = self._text(name, "an argument name")
        if self._taken(name):
            raise RegistryError(f"op '{self.name}' already has an argument or attribute '{name}'")
        if self._arguments and self._arguments[-1].variadic:
            raise RegistryError(
                f"op '{self.name}': argument '{name}' follows the variadic argument "
                f"'{self._arguments[-1].name}'; a variadic argument must be the last"
            )
        if self._arguments and self._arguments[-1].optional and not optional:
            raise RegistryError(
                f"op '{self.name}': required argument '{name}' follows an optional one"
            )
        if not isinstance(description, str):
            raise RegistryError(f"op '{self.name}': the description of '{name}' must be a string")
        self._arguments.append(
            ArgumentSpec(name, description, self._kind(kind, description, name), variadic, optional)
        )
        return self

    def _kind(self, kind: Any, description: str, arg: str) -> tuple[type[Type], ...] | None:
        if kind is None:
            for group in re.findall(r"\(([^()]*)\)", description):
                found = re.findall(r"\b(TensorType|TileType|ScalarType)\b", group)
                if found:
                    return tuple(KINDS[k] for k in dict.fromkeys(found))
            return None
        items = kind if isinstance(kind, tuple | list) else (kind,)
        out: list[type[Type]] = []
        for k in items:
            k = KINDS.get(k, k) if isinstance(k, str) else k
            if not (isinstance(k, type) and issubclass(k, Type)):
                raise RegistryError(
                    f"op '{self.name}': argument '{arg}' has kind {k!r}; a kind is TensorType, "
                    "TileType, ScalarType (or a tuple of them), or None for any"
                )
            out.append(k)
        return tuple(out)

    def add_attribute(
        self,
        name: str,
        type: Any,
        default: Any = REQUIRED,
        description: str = "",
    ) -> OpBuilder:
        """A typed attribute (``int``, ``float``, ``bool``, ``str``, ``list[int]``, ``int |
        tuple[int, int]``, ``Literal["same", "valid"]``, a class, ``Any``); checked in
        :func:`create_op_call`. Without a ``default`` it is required."""
        self._open("add_attribute")
        name = self._text(name, "an attribute name")
        if self._taken(name):
            raise RegistryError(f"op '{self.name}' already has an argument or attribute '{name}'")
        if not _valid_attr_type(type):
            raise RegistryError(
                f"op '{self.name}': attribute '{name}' has type {type!r}; use a class or a "
                "typing form such as list[int] or int | None"
            )
        spec = AttributeSpec(name, type, default, description)
        if not spec.required and not _conforms(default, type):
            raise RegistryError(
                f"op '{self.name}': the default {default!r} of attribute '{name}' is not "
                f"{spec.type_name}"
            )
        self._attributes.append(spec)
        return self

    def f_deduce_type(self, fn: Callable[..., Type]) -> OpBuilder:
        """Complete the registration: ``fn(args)`` or ``fn(args, attrs)`` returns the type."""
        self._open("f_deduce_type")
        if not callable(fn):
            raise RegistryError(f"op '{self.name}': f_deduce_type needs a callable, got {fn!r}")
        missing = [
            call
            for call, value in (
                ("set_op_category(...)", self._category),
                ("set_description(...)", self._description),
            )
            if not value
        ]
        if missing:
            reason = f"registration has no {' or '.join(missing)}"
            OpRegistry._ops[self.name].pending = reason
            raise RegistryError(
                f"op '{self.name}' is incomplete: its {reason}; add "
                f"{' and '.join(missing)} before f_deduce_type"
            )
        infer = _make_infer(self.name, fn)
        op = OpRegistry.define(self.name)
        op.category = self._category or ""
        op.description = self._description or ""
        op.arguments = list(self._arguments)
        op.attributes = list(self._attributes)
        op.declared = True
        OpRegistry.attach(self.name, "infer", infer, override=True)
        op.pending = ""
        self._done = True
        return self


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
    def register(cls, name: str, override: bool = False) -> OpBuilder:
        """Start seed 002's fluent registration of op ``name`` (its signature and ``infer``).

        Registering an op that already has an ``infer`` rule raises unless ``override=True``.
        The op is flagged incomplete until the chain reaches :meth:`OpBuilder.f_deduce_type`.
        """
        op = cls.define(name)
        existing = op.rules.get("infer")
        if existing is not None and not override:
            raise RegistryError(
                f"op '{name}' is already registered with a type deduction "
                f"({getattr(existing, '__qualname__', existing)!s}); pass override=True to "
                "OpRegistry.register to replace it"
            )
        op.pending = (
            "its OpRegistry.register(...) chain never reached f_deduce_type(...); "
            "complete the registration"
        )
        return OpBuilder(name, override)

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
    def get(cls, name: str) -> OpDef:
        """The op called ``name``; a :class:`RegistryError` suggests near names otherwise."""
        op = cls._ops.get(name)
        if op is None:
            close = difflib.get_close_matches(str(name), list(cls._ops), n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            raise RegistryError(
                f"op '{name}' is not registered{hint} (mico.ir.list_ops() lists every op)"
            )
        return op

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
    def list_ops(cls, category: str | None = None) -> list[str]:
        """Names of all ops, or of those in ``category`` (case-insensitive), sorted."""
        if category is None:
            return cls.names()
        key = category.lower()
        return sorted(n for n, op in cls._ops.items() if op.category.lower() == key)

    @classmethod
    def categories(cls) -> list[str]:
        return sorted({op.category for op in cls._ops.values() if op.category})

    @classmethod
    def search(cls, text: str) -> list[str]:
        """Op names matching every word of ``text`` (name, category or description), best first.

        Ranking: an exact name, then a name part (``add`` in ``tensor.add``), the start of a
        name part (``pool`` in ``tensor.max_pool2d``), a substring of the name, the category,
        and last a word of the description.
        """
        words = [w for w in str(text).lower().split() if w]
        if not words:
            return []
        scored: list[tuple[int, str]] = []
        for name, op in cls._ops.items():
            lname = name.lower()
            parts = re.split(r"[._]", lname)
            desc = op.description.lower()
            total = 0
            for w in words:
                if w == lname:
                    score = 100
                elif w in parts or lname.endswith("." + w):
                    score = 80
                elif any(part.startswith(w) for part in parts):
                    score = 70
                elif lname.startswith(w):
                    score = 60
                elif w in lname:
                    score = 50
                elif w == op.category.lower():
                    score = 30
                elif re.search(rf"\b{re.escape(w)}", desc):
                    score = 20
                elif w in desc:
                    score = 10
                else:
                    score = 0
                if score == 0:
                    break
                total += score
            else:
                scored.append((-total, name))
        return [name for _, name in sorted(scored)]

    @classmethod
    def describe(cls, name: str) -> str:
        return cls.get(name).describe()

    @classmethod
    def infer(cls, name: str, args: Sequence[Any], attrs: dict[str, Any] | None = None) -> Type:
        """The result type of op ``name`` on ``args`` (expressions, graph values or types)."""
        return cls._infer_rule(name)(_as_args(args), attrs or {})

    @classmethod
    def _infer_rule(cls, name: str) -> Callable[..., Type]:
        op = cls.get(name)
        if op.pending:
            raise RegistryError(f"op '{name}' is registered but incomplete: {op.pending}")
        infer = op.rules.get("infer")
        if infer is None:
            raise RegistryError(
                f"op '{name}' has no type deduction (infer rule); define it with "
                f"OpRegistry.register('{name}')...f_deduce_type(fn)"
            )
        return infer

    @classmethod
    def create_call(
        cls,
        name: str,
        args: Sequence[Any],
        span: Span | None = None,
        attrs: dict[str, Any] | None = None,
    ) -> Call:
        """Apply op ``name`` to ``args``: checks arity, kinds and attributes, deduces the type."""
        infer = cls._infer_rule(name)
        op = cls.get(name)
        args = list(args) if isinstance(args, list | tuple) else args
        checked = op.check_attributes(attrs) if op.declared else dict(attrs or {})
        result = infer(_as_args(args), checked)
        return Call(op, list(args), result, span if span is not None else Span.unknown(), checked)

    @classmethod
    @contextmanager
    def scoped(cls) -> Iterator[type[OpRegistry]]:
        """Registrations made inside the block are undone when it exits (for tests).

        mico's own op libraries (IR ops, quantized ops, C emit rules) are loaded first, so a
        library first imported inside the block does not lose its registrations at the exit.
        """
        import importlib

        for library in ("mico.ir.ops.library", "mico.quant.export_ops", "mico.codegen"):
            importlib.import_module(library)
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
    """The conversion rule that applies to op ``name`` (overloads matched explicitly)."""
    from mico.ir.analyzer import find_rule

    return find_rule(name, "convert")


def get_execution_fn(name: str) -> Callable | None:
    """The execution rule that applies to op ``name`` (overloads matched explicitly)."""
    from mico.ir.analyzer import find_rule

    return find_rule(name, "execute")


# -- seed 002's module-level API (re-exported by mico.ir) ------------------------------------


def create_op_call(
    name: str,
    args: Sequence[Any],
    span: Span | None = None,
    attrs: dict[str, Any] | None = None,
    **kwattrs: Any,
) -> Call:
    """A :class:`~mico.ir.expr.Call` of op ``name`` with its deduced result type.

    Attributes come as ``attrs`` and/or keywords: ``create_op_call("tensor.softmax", [x],
    dim=1)``.
    """
    merged = {**(attrs or {}), **kwattrs}
    return OpRegistry.create_call(name, args, span, merged)


def is_op_registered(name: str) -> bool:
    return OpRegistry.is_registered(name)


def get_op(name: str) -> OpDef:
    return OpRegistry.get(name)


def list_ops(category: str | None = None) -> list[str]:
    return OpRegistry.list_ops(category)


def search(text: str) -> list[str]:
    return OpRegistry.search(text)


def describe(name: str) -> str:
    return OpRegistry.describe(name)
