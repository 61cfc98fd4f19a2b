"""What one torch operator call means in the IR (seed 001's ``torch_ir.analyzer``).

* :class:`NodeInfo` — what a ``convert`` rule receives for one FX node.
* :class:`OpNode` — the seed's node constructor (``OpNode(name=, op_type=, inputs=, outputs=,
  attrs=)``); a :class:`~mico.ir.graph.Node` with an ``op_type`` alias.
* :class:`IRGraph` — an extracted program: a :class:`~mico.ir.graph.Graph` whose weights live
  outside it, in ``weights`` (state-dict name -> tensor), referenced by the values in ``params``.
* Schema binding in both directions: :func:`bind_schema` splits a call into tensor inputs and
  attributes by the op's schema argument *names*; :func:`call_with_schema` rebuilds the call.
* Rule lookup that respects overloads: :func:`find_rule`, and the ``register_op`` /
  ``register_executor`` doors with ``overloads=``.

How arguments are recorded (the whole contract between extraction, execution and serialization):

* a ``Tensor`` argument bound to a tensor becomes the next node input;
* a ``Tensor?`` argument that is ``None`` is recorded as the attribute ``name: None`` (absent), and
  a ``Tensor`` argument given a Python number (``x + 1`` exports as ``aten.add.Tensor(x, 1)``)
  as ``name: 1``;
* a ``Tensor[]`` / ``Tensor?[]`` argument puts its tensors in the node inputs and records a
  :class:`TensorListRef` — the positions of its elements in ``node.inputs`` (``None`` for an
  absent optional element) — under its name;
* every other argument becomes an attribute under its schema name, positional and keyword alike,
  defaults filled in (``int[]`` values as lists).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from mico.errors import MicoError, RegistryError, UnsupportedOpError
from mico.ir.dtypes import DataType
from mico.ir.graph import Graph, Node, Value
from mico.ir.ops.registry import OpRegistry
from mico.ir.types import TensorType

#: Seed 001 calls the per-value metadata ``TensorMeta``; in mico it is the IR :class:`Value`
#: itself (``name``, ``type.shape``, ``type.dtype``), so a converter can wire it directly.
TensorMeta = Value


class ConversionError(MicoError, RuntimeError):
    """A ``convert`` rule failed, or returned something that is not a valid node."""


class ExecutionError(MicoError, RuntimeError):
    """An IR node could not be executed (missing weight, failing executor, bad results)."""


# --------------------------------------------------------------------------- values and types
def symbolic_dim(name: str, symbols: dict[str, Any] | None = None) -> Any:
    """The IR's symbolic dimension called ``name`` (one object per name within ``symbols``).

    Uses :class:`mico.ir.types.SymbolicDim` when the IR has it, else the name itself.
    """
    if symbols is not None and name in symbols:
        return symbols[name]
    from mico.ir import types as ir_types

    factory = getattr(ir_types, "SymbolicDim", None)
    sym = factory(name) if factory is not None else name
    if symbols is not None:
        symbols[name] = sym
    return sym


def make_dim(dim: Any, symbols: dict[str, Any] | None = None) -> Any:
    """A tensor dimension for :class:`TensorType`: an ``int``, or a symbolic dimension.

    Concrete ``torch.SymInt`` values become ints; a dynamic one becomes the symbolic dimension
    named after it (the same object for the same name within ``symbols``).
    """
    if isinstance(dim, int):
        return dim
    try:
        return int(dim)
    except Exception:  # a dynamic symbol
        return symbolic_dim(str(dim), symbols)


def tensor_type(tensor: Any, where: str, symbols: dict[str, Any] | None = None) -> TensorType:
    """The IR type of a (real or fake) tensor; ``where`` names it in errors."""
    if not isinstance(tensor, torch.Tensor):
        raise UnsupportedOpError(
            f"{where} is a {type(tensor).__name__}, not a tensor; only tensor values can flow "
            "through the IR (data-dependent Python scalars are not supported)"
        )
    try:
        dtype = DataType.from_torch(tensor.dtype)
    except (TypeError, KeyError, ValueError) as exc:
        raise UnsupportedOpError(
            f"{where} has dtype {tensor.dtype}, which mico cannot represent: {exc}"
        ) from exc
    return TensorType(tuple(make_dim(d, symbols) for d in tensor.shape), dtype)


@dataclass(frozen=True)
class TensorListRef:
    """A ``Tensor[]`` argument: the positions of its elements in ``node.inputs``.

    ``None`` marks an absent element of a ``Tensor?[]`` (``x[:, idx]`` exports as
    ``aten.index.Tensor(x, [None, idx])``).
    """

    positions: tuple[int | None, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "positions", tuple(self.positions))

    def __len__(self) -> int:
        return len(self.positions)

    def __repr__(self) -> str:
        return f"TensorListRef({list(self.positions)})"


# --------------------------------------------------------------------------- nodes and graphs
class OpNode(Node):
    """Seed 001's node: ``OpNode(name=, op_type=, inputs=, outputs=, attrs=)``.

    It *is* a :class:`~mico.ir.graph.Node` (``op`` is ``op_type``); ``inputs`` and ``outputs``
    are the :class:`Value` metas a :class:`NodeInfo` carries.
    """

    def __init__(
        self,
        name: str,
        op_type: str | None = None,
        inputs: Iterable[Value] = (),
        outputs: Iterable[Value] = (),
        attrs: dict[str, Any] | None = None,
        *,
        op: str | None = None,
    ) -> None:
        kind = op_type if op_type is not None else op
        if not isinstance(kind, str) or not kind:
            raise ConversionError(f"OpNode '{name}' needs an op_type (a non-empty string)")
        super().__init__(name, kind, list(inputs), list(outputs), dict(attrs or {}))


@dataclass
class IRGraph(Graph):
    """An extracted program: the graph, plus its weights kept outside the nodes.

    ``params`` are the constant values the nodes read (named by their state-dict key, e.g.
    ``conv1.weight``, ``bn1.running_mean``); ``weights`` maps those names to tensors. ``meta``
    holds extraction notes (e.g. ``specialized_reads``).
    """

    params: list[Value] = field(default_factory=list)
    weights: dict[str, torch.Tensor] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> IRGraph:
        """Like :meth:`Graph.validate`, with the weight values defined from the start."""
        defined = {id(v) for v in self.inputs} | {id(v) for v in self.params}
        for node in self.nodes:
            for v in node.inputs:
                if not v.is_const and id(v) not in defined:
                    raise ValueError(f"node {node.name} uses %{v.name} before it is defined")
            defined.update(id(o) for o in node.outputs)
        for v in self.outputs:
            if id(v) not in defined and not v.is_const:
                raise ValueError(f"graph output %{v.name} is never defined")
        return self

    @property
    def weight_names(self) -> list[str]:
        return [v.name for v in self.params]

    def __str__(self) -> str:
        text = super().__str__()
        if not self.params:
            return text
        head, _, rest = text.partition("\n")
        params = ", ".join(repr(v) for v in self.params)
        return f"{head}\n  weights: {params}\n{rest}"


@dataclass
class NodeInfo:
    """What a ``convert`` rule gets for one FX node (seed 001's ``NodeInfo``).

    ``input_metas`` / ``output_metas`` are the IR values (``inputs`` / ``outputs`` are aliases);
    ``attrs`` holds every non-tensor argument by schema name, defaults filled in; ``op_type`` is
    the op's IR name (``aten.add.Tensor``).
    """

    name: str
    op: str
    target: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    input_metas: list[Value]
    output_metas: list[Value]
    attrs: dict[str, Any] = field(default_factory=dict)
    op_type: str = ""

    @property
    def inputs(self) -> list[Value]:
        return self.input_metas

    @property
    def outputs(self) -> list[Value]:
        return self.output_metas


# --------------------------------------------------------------------------- op names
def op_name(target: Any) -> str:
    """The IR name of an FX call target: ``aten.add.Tensor``, ``custom.fused_gate.default``."""
    if isinstance(target, torch._ops.OpOverload):
        return str(target)  # "namespace.op.overload"
    if isinstance(target, torch._ops.HigherOrderOperator):
        return f"higher_order.{target.name()}"
    if target is operator.getitem:
        return "getitem"
    module = getattr(target, "__module__", None) or ""
    qualname = getattr(target, "__qualname__", None) or getattr(target, "__name__", repr(target))
    return f"{module}.{qualname}" if module else str(qualname)


def split_op_name(name: str) -> tuple[str, str | None]:
    """``aten.add.Tensor`` -> (``aten.add``, ``Tensor``); a two-part name has no overload."""
    parts = name.split(".")
    if len(parts) == 3:
        return f"{parts[0]}.{parts[1]}", parts[2]
    return name, None


def resolve_torch_op(name: str) -> torch._ops.OpOverload | None:
    """The torch operator an IR op name denotes, or None.

    ``ns.op.overload`` names that overload; ``ns.op`` names ``ns.op.default`` (torch's own
    spelling: ``torch.ops.ns.op(...)`` calls the default overload when it is the only one).
    """
    parts = name.split(".")
    if len(parts) not in (2, 3) or not all(p.isidentifier() for p in parts):
        return None
    namespace, op, overload = parts[0], parts[1], parts[2] if len(parts) == 3 else "default"
    try:
        packet = getattr(getattr(torch.ops, namespace), op)
        found = getattr(packet, overload)
    except (AttributeError, RuntimeError):
        return None
    return found if isinstance(found, torch._ops.OpOverload) else None


# --------------------------------------------------------------------------- rules and overloads
_OVERLOAD_MARK = "_mico_overload_bases"


def find_rule(name: str, rule: str) -> Callable[..., Any] | None:
    """The ``rule`` for op ``name``, matching overloads explicitly.

    1. a rule registered for exactly ``name`` (``aten.add.Tensor``);
    2. for ``ns.op.default``, a rule registered for ``ns.op`` (torch's name of that overload);
    3. for any other overload, a rule registered for the base name ``ns.op`` only if it was
       registered with ``overloads=True``.

    So a rule for ``aten.add.Tensor`` never runs for ``aten.add.Scalar``.
    """
    fn = OpRegistry.rule(name, rule)
    if fn is not None:
        return fn
    base, overload = split_op_name(name)
    if overload is None:
        return None
    fn = OpRegistry.rule(base, rule)
    if fn is None:
        return None
    if overload == "default" or base in getattr(fn, _OVERLOAD_MARK, frozenset()):
        return fn
    return None


def _register(
    name: str, rule: str, override: bool, overloads: bool
) -> Callable[[Callable], Callable]:
    if overloads and split_op_name(name)[1] is not None:
        raise RegistryError(
            f"overloads=True applies a rule to every overload of a base name such as 'aten.add'; "
            f"'{name}' already names one overload — drop overloads=True or register "
            f"'{split_op_name(name)[0]}'"
        )

    def decorator(fn: Callable) -> Callable:
        OpRegistry.attach(name, rule, fn, override=override)
        if overloads:
            try:
                setattr(fn, _OVERLOAD_MARK, getattr(fn, _OVERLOAD_MARK, frozenset()) | {name})
            except AttributeError as exc:  # a builtin or a callable without __dict__
                raise RegistryError(
                    f"cannot mark {fn!r} as applying to every overload of '{name}'; wrap it in "
                    "a Python function"
                ) from exc
        return fn

    return decorator


def register_op(
    name: str, override: bool = False, overloads: bool = False
) -> Callable[[Callable], Callable]:
    """Decorator: the ``convert`` rule of op ``name`` (seed 001's ``register_op``).

    The rule receives a :class:`NodeInfo` and returns a node (:class:`OpNode`). With
    ``overloads=True`` a base name (``aten.add``) also covers every overload (``aten.add.Tensor``,
    ``aten.add.Scalar``…) that has no rule of its own.
    """
    return _register(name, "convert", override, overloads)


def register_executor(
    name: str, override: bool = False, overloads: bool = False
) -> Callable[[Callable], Callable]:
    """Decorator: the ``execute`` rule of op ``name`` (seed 001's ``register_executor``).

    The rule is called as ``fn(inputs: list[Tensor], attrs: dict) -> list[Tensor]``.
    ``overloads`` as for :func:`register_op`.
    """
    return _register(name, "execute", override, overloads)


# --------------------------------------------------------------------------- schema binding
def _is_tensor_type(t: Any) -> bool:
    if isinstance(t, torch.OptionalType):
        t = t.getElementType()
    return isinstance(t, torch.TensorType)


def _is_tensor_list_type(t: Any) -> bool:
    if isinstance(t, torch.OptionalType):
        t = t.getElementType()
    return isinstance(t, torch.ListType) and _is_tensor_type(t.getElementType())


def _is_list_type(t: Any) -> bool:
    if isinstance(t, torch.OptionalType):
        t = t.getElementType()
    return isinstance(t, torch.ListType)


def plain(value: Any) -> Any:
    """An attribute value as plain Python: FX immutable containers become lists and dicts,
    concrete symbolic numbers become numbers."""
    if isinstance(value, torch.SymBool):
        return bool(value)
    if isinstance(value, torch.SymInt):
        return int(value)
    if isinstance(value, torch.SymFloat):
        return float(value)
    if isinstance(value, list):  # includes torch.fx immutable_list
        return [plain(v) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(plain(v) for v in value)
    if isinstance(value, dict):  # includes immutable_dict
        return {k: plain(v) for k, v in value.items()}
    return value


def bind_schema(
    schema: torch.FunctionSchema,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    tensor_of: Callable[[Any], Value | None],
    where: str,
) -> tuple[list[Value], dict[str, Any]]:
    """Split one call into IR inputs and attributes by the schema's argument names.

    ``tensor_of(arg)`` returns the IR value an FX argument denotes, or None when it is not a
    tensor (a Python value is then kept as it is). See the module docstring for the rules.
    """
    inputs: list[Value] = []
    attrs: dict[str, Any] = {}
    known = {a.name for a in schema.arguments}
    unknown = set(kwargs) - known
    if unknown:
        raise UnsupportedOpError(f"{where}: keyword(s) {sorted(unknown)} are not in {schema}")
    for i, arg in enumerate(schema.arguments):
        if not arg.kwarg_only and i < len(args):
            value = args[i]
        elif arg.name in kwargs:
            value = kwargs[arg.name]
        elif arg.has_default_value():
            value = arg.default_value
        elif isinstance(arg.type, torch.OptionalType):
            value = None
        else:
            raise UnsupportedOpError(f"{where}: required argument '{arg.name}' is missing")
        if _is_tensor_list_type(arg.type) and value is not None:
            positions: list[int | None] = []
            for item in value:
                tensor = tensor_of(item)
                if tensor is None:
                    if item is not None:
                        raise UnsupportedOpError(
                            f"{where}: element {item!r} of tensor list '{arg.name}' is not a tensor"
                        )
                    positions.append(None)
                else:
                    inputs.append(tensor)
                    positions.append(len(inputs) - 1)
            attrs[arg.name] = TensorListRef(tuple(positions))
            continue
        tensor = tensor_of(value)
        if tensor is not None:
            if not _is_tensor_type(arg.type):
                raise UnsupportedOpError(
                    f"{where}: argument '{arg.name}' ({arg.type}) receives a tensor; only static "
                    "shapes and scalars are supported there (was the model exported with "
                    "dynamic shapes?)"
                )
            inputs.append(tensor)
            continue
        value = plain(value)
        if _is_list_type(arg.type) and isinstance(value, tuple):
            value = list(value)
        attrs[arg.name] = value
    return inputs, attrs


def call_with_schema(
    op: torch._ops.OpOverload, inputs: Sequence[Any], attrs: dict[str, Any], where: str
) -> Any:
    """Call ``op`` with the arguments :func:`bind_schema` recorded (inputs plus attributes).

    Attributes that are not schema arguments are metadata and are ignored; a schema argument
    with neither an attribute nor a default is an error naming ``where``.
    """
    positional: list[Any] = []
    keywords: dict[str, Any] = {}
    cursor = 0
    for arg in op._schema.arguments:
        if _is_tensor_list_type(arg.type) and isinstance(attrs.get(arg.name), TensorListRef):
            ref: TensorListRef = attrs[arg.name]
            try:
                value: Any = [None if p is None else inputs[p] for p in ref.positions]
            except IndexError as exc:
                raise ExecutionError(
                    f"{where}: tensor list '{arg.name}' refers to input positions "
                    f"{list(ref.positions)} but the node has {len(inputs)} input(s)"
                ) from exc
            used = [p for p in ref.positions if p is not None]
            cursor = max([cursor, *(p + 1 for p in used)])
        elif _is_tensor_type(arg.type) and arg.name not in attrs:
            if cursor >= len(inputs):
                if arg.has_default_value() or isinstance(arg.type, torch.OptionalType):
                    value = arg.default_value if arg.has_default_value() else None
                else:
                    raise ExecutionError(
                        f"{where}: tensor argument '{arg.name}' has no input (the node has "
                        f"{len(inputs)}) and no attribute"
                    )
            else:
                value = inputs[cursor]
                cursor += 1
        elif arg.name in attrs:
            value = attrs[arg.name]
        elif arg.has_default_value():
            value = arg.default_value
        elif isinstance(arg.type, torch.OptionalType):
            value = None
        else:
            raise ExecutionError(
                f"{where}: argument '{arg.name}' ({arg.type}) of {op} is neither an input nor an "
                "attribute"
            )
        if arg.kwarg_only:
            keywords[arg.name] = value
        else:
            positional.append(value)
    if cursor != len(inputs):
        raise ExecutionError(
            f"{where}: {op} consumed {cursor} of the node's {len(inputs)} inputs; the inputs do "
            f"not match its schema {op._schema}"
        )
    return op(*positional, **keywords)


def flatten_results(result: Any) -> list[Any]:
    """An operator's return value as the list of its tensor outputs (``None`` entries dropped)."""
    if result is None:
        return []
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, list | tuple):
        flat: list[Any] = []
        for item in result:
            flat.extend(flatten_results(item))
        return flat
    return [result]
