"""torch model -> mico IR, through ``torch.export`` (seed 001's ``export_model`` / ``extract_ir``).

Every operator call becomes an IR node named after its overload (``aten.conv2d.default``). The
op's schema says which arguments are tensors (node inputs) and names every other one (node
attributes, defaults filled in) — see :mod:`mico.ir.analyzer` — so no op needs its own converter.
An op that does registers a ``convert`` rule (``@register_op``), which receives a
:class:`~mico.ir.analyzer.NodeInfo` and returns an :class:`~mico.ir.analyzer.OpNode`.

Weights stay out of the nodes: :func:`extract_ir` returns an :class:`~mico.ir.analyzer.IRGraph`
whose ``params`` are named by their state-dict keys and whose ``weights`` map those names to
tensors. :func:`export_graph` (used by the quantized C pipeline) binds them into the values.

Models with active mico fake-quantization layers read their own state in Python (scales, code
signedness, cached quantized weights), which ``torch.export`` cannot trace. They are exported by
*specialization*: a real-tensor ATen trace in which those reads become constants, re-exported
with ``torch.export`` so the result is an ordinary ``ExportedProgram``.
"""

from __future__ import annotations

import contextlib
import io
import logging
import operator
import re
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import nn
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind

from mico.errors import MicoError, UnsupportedOpError
from mico.ir.analyzer import (
    ConversionError,
    IRGraph,
    NodeInfo,
    bind_schema,
    find_rule,
    op_name,
    plain,
    tensor_type,
)
from mico.ir.graph import Graph, Node, Value

_WEIGHT_KINDS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)


# --------------------------------------------------------------------------- export
#: ops torch.export inserts to check what it traced (``x.float()`` on a float tensor becomes
#: ``_assert_tensor_metadata``); they compute nothing and produce no value, so the IR drops them
NO_OP_CHECKS = frozenset(
    {
        "aten._assert_tensor_metadata.default",
        "aten._assert_scalar.default",
        "aten._assert_async.msg",
        "aten.sym_constrain_range_for_size.default",
        "aten.sym_constrain_range.default",
    }
)


#: casts that keep the dtype are views of their input (``relu(x).float()``, ``.to(torch.float32)``)
CASTS = frozenset({"aten.to.dtype", "aten._to_copy.default", "aten.to.dtype_layout"})


def _same_dtype(node: torch.fx.Node) -> bool:
    """Whether a cast node's result has its input's dtype (and so copies nothing)."""
    source = node.args[0] if node.args else None
    if not isinstance(source, torch.fx.Node):
        return False
    before, after = source.meta.get("val"), node.meta.get("val")
    return (
        isinstance(before, torch.Tensor)
        and isinstance(after, torch.Tensor)
        and before.dtype == after.dtype
        and before.device == after.device
    )


def _as_args(inputs: Any) -> tuple[Any, ...]:
    if isinstance(inputs, tuple):
        return inputs
    if isinstance(inputs, list):
        return tuple(inputs)
    return (inputs,)


def _active_quant_layers(model: nn.Module) -> bool:
    from mico.quant.layers import BitLayer  # late: mico.quant is heavier than the IR

    return any(isinstance(m, BitLayer) and m.mode == "quant" for m in model.modules())


def export_model(
    model: nn.Module | ExportedProgram,
    inputs: Any,
    strict: bool = False,
    *,
    specialize: bool | None = None,
) -> ExportedProgram:
    """``torch.export`` ``model`` on example ``inputs`` (a tensor or a tuple), in eval mode.

    The model's training flag is restored afterwards and no autograd state is recorded.
    Quantized (Bit*) layers export as single ``mico.bit_*`` operators, their scales
    snapshotted from the current weights. ``specialize=True`` instead traces with real tensors
    first, so Python reads of tensor values become constants (see the module docstring); the
    reads that depended on the inputs are listed in
    ``exported.graph_module.meta["mico_specialized_reads"]``.
    """
    if isinstance(model, ExportedProgram):
        return model
    if not isinstance(model, nn.Module):
        raise UnsupportedOpError(
            f"export_model expects an nn.Module or an ExportedProgram, got {type(model).__name__}"
        )
    args = _as_args(inputs)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), _quiet_torch():
            if specialize:
                return _export_specialized(model, args, strict)
            if _active_quant_layers(model):
                # each quantized layer exports as one mico.bit_* operator (mico.quant.export_ops)
                from mico.quant import prepare_export

                prepare_export(model)
            return torch.export.export(model, args, strict=strict)
    except MicoError:
        raise
    except Exception as exc:  # torch raises many types here; name the model and the cause
        raise UnsupportedOpError(_trace_failure(model, exc)) from exc
    finally:
        model.train(was_training)


_WRAPPERS = ("mico.models.wrap.TorchModel", "mico.models.resolve.ExportedModel")


def _origin(node: torch.fx.Node) -> str:
    """The user's module an FX node was traced in: "layer 'block.conv' (Conv2d)"."""
    stack = list((node.meta.get("nn_module_stack") or {}).values())
    if not stack:
        return ""
    path, kind = stack[-1][0], str(stack[-1][1]).rsplit(".", 1)[-1]
    if str(stack[0][1]) in _WRAPPERS:  # mico's wrapper around a plain module: hide it
        if len(stack) == 1:
            return ""
        path = path.removeprefix("model").removeprefix(".")
        if len(stack) == 2:
            return f"forward() of {kind}"
    return f"layer '{path}' ({kind})" if path else f"forward() of {kind}"


@contextlib.contextmanager
def _quiet_torch() -> Iterator[None]:
    """Keep torch's tracing chatter (graph dumps, guard logs, export warnings) off stderr.

    A failed trace becomes one mico error naming the cause; torch's own multi-page log of it
    would bury that line.
    """
    loggers = [logging.getLogger(name) for name in ("torch", "torch._dynamo", "torch.export")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        # torch.export prints the partial graph of a failed trace straight to stderr
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


_USER_CALL = re.compile(r'File "([^"]+)", line (\d+), in (\w+)\n\s*(.+)')


def _trace_failure(model: nn.Module, exc: Exception) -> str:
    """One readable line for a failed ``torch.export``: the user's line that caused it, and why."""
    inner = getattr(model, "model", None)  # mico's TorchModel wrapper: name the user's class
    name = type(inner if isinstance(inner, nn.Module) else model).__name__
    raw = str(exc)
    text = " ".join(raw.split())
    data_dependent = "data-dependent" in text or "guard on" in text
    where = _USER_CALL.search(raw)
    if data_dependent:
        cause = "forward() reads the value of a tensor to decide shapes or control flow"
    else:
        cause = text.split(". ")[0][:300]
    line = f" at {where.group(1)}:{where.group(2)} (`{where.group(4).strip()}`)" if where else ""
    fix = (
        "make forward() a straight-line tensor computation (torch.where instead of `if` on "
        "values, fixed sizes instead of sizes read from data)"
        if data_dependent
        else "make forward() a straight-line tensor computation that torch.export can trace"
    )
    return f"torch.export could not trace {name}{line}: {cause}; {fix}"


def _export_specialized(model: nn.Module, args: tuple[Any, ...], strict: bool) -> ExportedProgram:
    """Real-tensor ATen trace (state reads become constants), then ``torch.export`` of it."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from mico.quant.layers import BitLayer

    model(*args)  # fill the layers' caches, so the trace is the same whatever ran before
    state_names: dict[int, str] = {}
    for fqn, tensor in [*model.named_parameters(), *model.named_buffers()]:
        state_names.setdefault(id(tensor), fqn)
    for fqn, layer in model.named_modules():
        if isinstance(layer, BitLayer) and layer.mode == "quant":
            # the cached fake-quantized weights the trace reads become "<layer>.quant_weight"
            state_names.setdefault(id(layer.quant_weight()), f"{fqn}.quant_weight")
            state_names.setdefault(id(layer.weight_codes_f32()[0]), f"{fqn}.weight_codes")
    traced = make_fx(
        lambda *xs: model(*xs),
        tracing_mode="real",
        pre_dispatch=True,
        _error_on_data_dependent_ops=False,
    )(*args)
    graph = traced.graph
    reads = _input_dependent_reads(graph)
    graph.eliminate_dead_code()
    root: dict[str, Any] = {}
    for node in graph.nodes:
        if node.op != "get_attr":
            continue
        tensor = getattr(traced, node.target)
        fqn = state_names.get(id(tensor))
        if fqn is not None and root.get(fqn, tensor) is tensor:
            node.target = fqn
        root[node.target] = tensor
    module = torch.fx.GraphModule(root, graph)
    exported = torch.export.export(module, args, strict=strict)
    exported.graph_module.meta["mico_specialized_reads"] = reads
    return exported


def _input_dependent_reads(graph: torch.fx.Graph) -> list[str]:
    """Data-dependent scalar reads (``.item()``, ``bool(t)``) of values computed from inputs."""
    depends: set[torch.fx.Node] = set()
    reads: list[str] = []
    for node in graph.nodes:
        if node.op == "placeholder" or any(a in depends for a in node.all_input_nodes):
            depends.add(node)
            target = node.target
            if (
                node.op == "call_function"
                and isinstance(target, torch._ops.OpOverload)
                and torch.Tag.data_dependent_output in target.tags
            ):
                reads.append(f"{node.name} ({target})")
    return reads


# --------------------------------------------------------------------------- extraction
def extract_ir(
    model: nn.Module | ExportedProgram,
    example_inputs: Any = None,
    name: str | None = None,
    *,
    strict: bool = False,
    specialize: bool | None = None,
) -> IRGraph:
    """Export ``model`` on ``example_inputs`` and convert it to an :class:`IRGraph`.

    ``model`` may also be an ``ExportedProgram`` (then ``example_inputs`` is not needed). The
    graph's ``weights`` map state-dict names (parameters, buffers, lifted constants) to tensors
    (copies, so later training does not change the IR).
    """
    if name is None:
        name = type(model).__name__ if isinstance(model, nn.Module) else "model"
    if not isinstance(model, ExportedProgram) and example_inputs is None:
        raise UnsupportedOpError(f"extract_ir({name}) needs example inputs to trace the model")
    exported = export_model(model, example_inputs, strict=strict, specialize=specialize)
    return program_to_ir(exported, name)


def export_graph(model: nn.Module, example_input: torch.Tensor, name: str = "model") -> Graph:
    """Export ``model`` (in eval mode) on ``example_input`` to an IR :class:`Graph`.

    Parameters and buffers become constant values (their ``data`` set) named by their module
    path (``conv1.weight``), so later passes can find the layer each weight belongs to.
    """
    return program_to_ir(export_model(model, example_input), name, bind_weights=True)


class _Converter:
    """One pass over an ``ExportedProgram``'s graph."""

    def __init__(self, exported: ExportedProgram, name: str, bind_weights: bool) -> None:
        self.exported = exported
        self.bind_weights = bind_weights
        self.graph = IRGraph(name)
        meta = exported.graph_module.meta.get("mico_specialized_reads")
        if meta:
            self.graph.meta["specialized_reads"] = list(meta)
        # FX node name -> Value, nested tuple of Values (multi-output), or a Python constant
        self.env: dict[str, Any] = {}
        self.known: dict[int, Value] = {}
        self.symbols: dict[str, Any] = {}  # dynamic dimension name -> its symbolic dimension
        self.specs = {s.arg.name: s for s in exported.graph_signature.input_specs if s.arg}

    # ----------------------------------------------------------------- values
    def define(self, key: str, value: Any) -> None:
        self.env[key] = value
        for leaf in _leaves(value):
            if isinstance(leaf, Value):
                self.known[id(leaf)] = leaf

    def tensor_of(self, item: Any) -> Value | None:
        if not isinstance(item, torch.fx.Node):
            return None
        value = self.env[item.name]
        if isinstance(value, Value):
            return value
        if isinstance(value, tuple):
            raise UnsupportedOpError(
                f"'{item.name}' has several outputs; it must be indexed (getitem) before use"
            )
        return None

    def substitute(self, item: Any) -> Any:
        """Replace FX nodes that stand for Python constants by their values."""
        if isinstance(item, torch.fx.Node):
            value = self.env[item.name]
            return item if isinstance(value, Value | tuple) else value
        if isinstance(item, list | tuple):
            return type(item)(self.substitute(v) for v in item)
        if isinstance(item, dict):
            return {k: self.substitute(v) for k, v in item.items()}
        return item

    # ----------------------------------------------------------------- nodes
    def placeholder(self, node: torch.fx.Node) -> None:
        spec = self.specs.get(node.name)
        if spec is not None and spec.kind in _WEIGHT_KINDS:
            if not node.users:
                return  # unused state (e.g. bn.num_batches_tracked) stays out of the IR
            fqn = spec.target
            state = self.exported.state_dict
            tensor = state[fqn] if fqn in state else self.exported.constants[fqn]
            tensor = tensor.detach()
            value = Value(fqn, tensor_type(tensor, f"weight '{fqn}'", self.symbols))
            if self.bind_weights:
                value.data = tensor.cpu().numpy().copy()
            else:
                self.graph.params.append(value)
                self.graph.weights[fqn] = tensor.clone()
            self.define(node.name, value)
            return
        if spec is not None and spec.kind != InputKind.USER_INPUT:
            raise UnsupportedOpError(
                f"placeholder '{node.name}' is a {spec.kind.name} input, which mico does not "
                "support"
            )
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            value = Value(node.name, tensor_type(val, f"input '{node.name}'", self.symbols))
            self.graph.inputs.append(value)
            self.define(node.name, value)
        else:  # a non-tensor user input is specialized by torch.export: keep its value
            self.define(node.name, plain(val))

    def outputs_for(self, node: torch.fx.Node, op: str) -> tuple[Any, list[Value]]:
        """The node's output structure (Value, nested tuple or None) and its flat values."""
        flat: list[Value] = []

        def build(val: Any, path: str) -> Any:
            if val is None:
                return None
            if isinstance(val, list | tuple):
                return tuple(build(v, f"{path}.{i}") for i, v in enumerate(val))
            value = Value(
                path, tensor_type(val, f"output '{path}' of {op} ('{node.name}')", self.symbols)
            )
            flat.append(value)
            return value

        return build(node.meta.get("val"), node.name), flat

    def call(self, node: torch.fx.Node) -> None:
        target = node.target
        if op_name(target) in NO_OP_CHECKS:
            return  # a check torch.export inserts (a no-op cast's metadata assert): no computation
        if op_name(target) in CASTS and _same_dtype(node):
            self.define(node.name, self.env[node.args[0].name])  # x.float() of a float: x itself
            return
        if target is operator.getitem:
            source, index = node.args
            self.define(node.name, self.env[source.name][index])
            return
        op = op_name(target)
        where = f"{op} at node '{node.name}'"
        structure, outputs = self.outputs_for(node, op)
        args = self.substitute(tuple(node.args))
        kwargs = self.substitute(dict(node.kwargs))
        schema = getattr(target, "_schema", None)
        if isinstance(target, torch._ops.OpOverload) and schema is not None:
            inputs, attrs = bind_schema(schema, args, kwargs, self.tensor_of, where)
        else:
            inputs, attrs = self.bind_generic(args, kwargs)
        convert = find_rule(op, "convert")
        if convert is not None:
            info = NodeInfo(
                node.name, node.op, target, args, kwargs, inputs, outputs, attrs, op_type=op
            )
            ir_node = self.run_converter(convert, info, where)
            produced = self.check_converted(ir_node, outputs, where)
            structure = _replace_leaves(structure, produced)
        elif isinstance(target, torch._ops.OpOverload):
            ir_node = Node(node.name, op, inputs, outputs, attrs)
        else:
            raise UnsupportedOpError(
                f"node '{node.name}' calls {target}, which is not a torch operator with a "
                f"schema; register a convert rule with @register_op('{op}')"
            )
        ir_node.origin = ir_node.origin or _origin(node)
        self.graph.add(ir_node)
        self.define(node.name, structure)

    def bind_generic(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[list[Value], dict[str, Any]]:
        """Inputs and attributes of a call without a schema (for a convert rule to refine)."""
        inputs: list[Value] = []
        attrs: dict[str, Any] = {}
        for key, item in [*((f"arg{i}", a) for i, a in enumerate(args)), *kwargs.items()]:
            tensor = self.tensor_of(item)
            if tensor is not None:
                inputs.append(tensor)
            elif isinstance(item, torch.fx.Node):
                attrs[key] = None
            else:
                attrs[key] = plain(item)
        return inputs, attrs

    @staticmethod
    def run_converter(convert: Any, info: NodeInfo, where: str) -> Node:
        rule_name = getattr(convert, "__qualname__", repr(convert))
        try:
            ir_node = convert(info)
        except Exception as exc:
            raise ConversionError(
                f"the convert rule {rule_name} of {where} failed: {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(ir_node, Node):
            raise ConversionError(
                f"the convert rule {rule_name} of {where} returned "
                f"{type(ir_node).__name__}, not a node; return OpNode(name=, op_type=, inputs=, "
                "outputs=, attrs=)"
            )
        return ir_node

    def check_converted(self, ir_node: Node, outputs: list[Value], where: str) -> list[Value]:
        if len(ir_node.outputs) != len(outputs):
            raise ConversionError(
                f"the convert rule of {where} returned a node with {len(ir_node.outputs)} "
                f"output(s); the operator produces {len(outputs)}"
            )
        resolved: list[Value] = []
        for value in ir_node.inputs:
            if not isinstance(value, Value):
                raise ConversionError(
                    f"the convert rule of {where} gave an input {value!r} that is not an IR value; "
                    "use the values in node_info.input_metas"
                )
            if id(value) in self.known:
                resolved.append(value)
                continue
            same_name = [v for v in self.known.values() if v.name == value.name]
            if len(same_name) != 1:
                raise ConversionError(
                    f"the convert rule of {where} uses input '{value.name}', which is not a value "
                    "of the graph; use the values in node_info.input_metas"
                )
            resolved.append(same_name[0])
        ir_node.inputs = resolved
        return list(ir_node.outputs)

    def output(self, node: torch.fx.Node) -> None:
        results = node.args[0]
        specs = self.exported.graph_signature.output_specs
        for spec, item in zip(specs, results, strict=True):
            if spec.kind != OutputKind.USER_OUTPUT:
                raise UnsupportedOpError(
                    f"the model mutates '{spec.target}' ({spec.kind.name}) during forward; the IR "
                    "is a pure function — call model.eval() or keep state updates out of forward"
                )
            value = self.tensor_of(item)
            if value is None:
                raise UnsupportedOpError(
                    f"model output {item!r} is not a tensor; only tensor outputs are supported"
                )
            self.graph.outputs.append(value)

    def run(self) -> IRGraph:
        for node in self.exported.graph.nodes:
            if node.op == "placeholder":
                self.placeholder(node)
            elif node.op == "call_function":
                self.call(node)
            elif node.op == "output":
                self.output(node)
            else:
                raise UnsupportedOpError(
                    f"unexpected FX node kind '{node.op}' at '{node.name}' (control-flow "
                    "operators with subgraphs are not supported)"
                )
        return self.graph.validate()


def program_to_ir(exported: ExportedProgram, name: str, bind_weights: bool = False) -> IRGraph:
    """Convert an ``ExportedProgram`` to an :class:`IRGraph` (``bind_weights``: store the
    weights in the constant values' ``data`` instead of ``weights``)."""
    return _Converter(exported, name, bind_weights).run()


def _leaves(structure: Any) -> list[Any]:
    if isinstance(structure, tuple):
        return [leaf for item in structure for leaf in _leaves(item)]
    return [structure]


def _replace_leaves(structure: Any, values: Sequence[Value]) -> Any:
    it = iter(values)

    def walk(item: Any) -> Any:
        if isinstance(item, tuple):
            return tuple(walk(v) for v in item)
        if isinstance(item, Value):
            return next(it)
        return item

    return walk(structure)
