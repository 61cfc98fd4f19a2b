"""Seed 000's ``MiCoCodeGen``: ``MiCoCodeGen(model).forward(example)`` then ``.convert(dir, name)``.

``forward`` exports the model (modules with a registered handler stay one node each), prepares
the graph for the chosen execution mode and runs the Python reference on the example;
``convert`` writes the C project (``<name>.h``, ``<name>.c``, ``<name>.bin``, kernels,
``main.c``, ``Makefile``) atomically. Nodes whose op has a handler registered through
:class:`~mico.codegen.registry.MiCoOpRegistry` are emitted by that handler, through the
helpers below; every other node by mico's built-in rules.
"""

from __future__ import annotations

import contextvars
import copy
import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from mico.atomic import atomic_directory, check_output_dir
from mico.codegen.context import EmitContext, c_float
from mico.codegen.project import CProject, check_model_name, emit_c_project
from mico.codegen.registry import MiCoOpRegistry, UnregisteredOpError, unregistered_message
from mico.errors import CompileError
from mico.ir.analyzer import find_rule
from mico.ir.graph import Graph, Node, Value
from mico.quant.arithmetic import QFormat, quantize
from mico.quant.packing import pack

_ACTIVE: contextvars.ContextVar[MiCoCodeGen | None] = contextvars.ContextVar(
    "mico_codegen", default=None
)
_MODULES: dict[str, nn.Module] = {}
_KEYS = itertools.count()


def active_codegen(node: Node) -> MiCoCodeGen:
    """The MiCoCodeGen converting right now (handlers only run inside ``convert``)."""
    codegen = _ACTIVE.get()
    if codegen is None:
        raise CompileError(
            f"'{node.name}' ({node.op}) is emitted by a MiCoOpRegistry handler, which needs a "
            "MiCoCodeGen: compile this model with MiCoCodeGen(model).forward(x) / .convert()"
        )
    return codegen


def module_for_key(key: str) -> nn.Module:
    try:
        return _MODULES[key]
    except KeyError:
        raise CompileError(f"module call '{key}' refers to a module that is gone") from None


@torch.library.custom_op("mico::module_call", mutates_args=())
def module_call(inputs: list[torch.Tensor], key: str) -> torch.Tensor:
    """One call of a module with a registered handler, kept whole through export."""
    with torch.no_grad():
        return call_original(key, inputs).clone()


@module_call.register_fake
def _(inputs: list[torch.Tensor], key: str) -> torch.Tensor:
    return call_original(key, inputs).clone()


def call_original(key: str, inputs: Sequence[torch.Tensor]) -> torch.Tensor:
    """The module's own ``forward`` (its class's), not the export wrapper."""
    module = module_for_key(key)
    return type(module).forward(module, *inputs)


@dataclass
class HandlerNode:
    """What a seed handler receives as ``n`` (seed 000 passed a torch.fx node)."""

    name: str
    op: str
    target: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    node: Node


@dataclass
class _Tensor:
    expr: str  # C expression of the data
    shape: tuple[int, ...]


def _holds_user_files(output_dir: str | Path) -> bool:
    """Whether ``output_dir`` is an existing, non-empty folder that mico did not write."""
    import os

    from mico.atomic import is_mico_output

    path = Path(output_dir)
    if path.is_symlink() or not path.is_dir() or is_mico_output(path):
        return False
    try:
        return bool(os.listdir(path))
    except OSError:
        return False


class MiCoCodeGen:
    """Generate a C project for ``model`` (seed 000's code generator)."""

    def __init__(self, model: nn.Module, align_to: int = 32, mode: str = "dynamic") -> None:
        if align_to < 1 or align_to & (align_to - 1) or align_to > 64:
            raise CompileError(f"align_to must be a power of two up to 64, got {align_to}")
        self.model = model
        self.align_to = align_to
        self.mode = mode
        self.graph: Graph | None = None
        self.reference_model: nn.Module | None = None
        self.outputs: dict[str, torch.Tensor] = {}
        self.project: CProject | None = None
        self._example: torch.Tensor | None = None
        self._calibration: Sequence[torch.Tensor] | None = None
        self._tensors: dict[str, _Tensor] = {}
        self._statements: list[str] = []
        self._ctx: EmitContext | None = None
        self._node: Node | None = None
        self._kernel_sources: dict[str, str] = {}  # file -> C source shipped by handlers

    # ------------------------------------------------------------------ the two steps
    def forward(
        self, example: torch.Tensor, calibration: Sequence[torch.Tensor] | None = None
    ) -> torch.Tensor:
        """Export and prepare the graph; return the model's output on ``example``.

        The C program computes one sample at a time, so the graph is traced on the first
        sample; every sample of ``example`` is run through it, and the output has the batch of
        ``example`` (a batch of 2 gives 2 outputs)."""
        from mico.codegen.compile import lower
        from mico.execute.executor import run_ir

        model = copy.deepcopy(self.model).eval()
        self._wrap_modules(model)
        graph, folded = lower(model, example[:1], self.mode, calibration)
        for node in graph.nodes:
            if node.op == "mico.module_call.default":
                node.op = MiCoOpRegistry.module_op(_MODULES[node.attrs["key"]]) or node.op
        self.graph, self.reference_model = graph, folded
        self._example, self._calibration = example, calibration
        self.outputs = {}

        def keep(node: Node, results: list[torch.Tensor]) -> None:
            self.outputs[node.name] = results[0]

        (out,) = run_ir(graph, [example[:1].float()], on_node=keep)
        rest = [run_ir(graph, [example[i : i + 1].float()])[0] for i in range(1, len(example))]
        return torch.cat([out, *rest]) if rest else out

    def convert(
        self, output_dir: str | Path, model_name: str = "model", *, force: bool = False
    ) -> CProject:
        """Write the C project for the graph ``forward`` prepared; return it.

        A new or mico-written ``output_dir`` is written whole (atomically). A folder of the
        user's (the seed writes ``output/`` beside ``output/ckpt/``) receives the project's
        files beside its own, and a file mico did not write is never replaced; ``force``
        replaces the folder wholesale instead.
        """
        if self.graph is None:
            raise CompileError("call MiCoCodeGen.forward(example) before convert()")
        check_model_name(model_name)
        beside_user_files = not force and _holds_user_files(output_dir)
        final = None if beside_user_files else check_output_dir(output_dir, force=force)
        for node in self.graph.nodes:
            if find_rule(node.op, "emit") is None:
                raise UnregisteredOpError(unregistered_message(node.op))
        token = _ACTIVE.set(self)
        if beside_user_files:
            from mico.atomic_files import files_into_directory

            try:
                with files_into_directory(output_dir, "MiCoCodeGen.convert") as stage:
                    project = emit_c_project(
                        self.graph,
                        stage,
                        model_name,
                        align=self.align_to,
                        sample_inputs=self._example,
                    )
                    for file, source in self._kernel_sources.items():
                        (stage / file).write_text(source)
            finally:
                _ACTIVE.reset(token)
            self.project = dataclasses.replace(project, directory=Path(output_dir).absolute())
            return self.project
        try:
            with atomic_directory(final, force=force, command="MiCoCodeGen.convert") as tmp:
                project = emit_c_project(
                    self.graph, tmp, model_name, align=self.align_to, sample_inputs=self._example
                )
                for file, source in self._kernel_sources.items():
                    (tmp / file).write_text(source)
        finally:
            _ACTIVE.reset(token)
        self.project = dataclasses.replace(project, directory=final)
        return self.project

    # ------------------------------------------------------------------ handlers
    def _wrap_modules(self, model: nn.Module) -> None:
        """Keep every module with a registered handler as one ``mico.module_call`` node."""
        for module in model.modules():
            if MiCoOpRegistry.module_op(module) is None:
                continue
            key = f"{type(module).__qualname__}#{next(_KEYS)}"
            _MODULES[key] = module

            def call(*xs: torch.Tensor, _key: str = key) -> torch.Tensor:
                return module_call(list(xs), _key)

            module.forward = call  # type: ignore[method-assign]

    def run_handler(
        self,
        handler: Any,
        kind: str,
        node: Node,
        ctx: EmitContext,
        kernel: tuple[str, str] | None,
    ) -> list[str]:
        """Run a seed handler for ``node``; return the C statements it produced."""
        self._ctx, self._node, self._statements = ctx, node, []
        self._tensors = {
            v.name: _Tensor(ctx.buffer(v), _shape(v)) for v in node.inputs if not v.is_const
        }
        if kernel is not None:
            file, source = kernel
            self._kernel_sources[file or f"{_c_name(node.op)}.c"] = source
            ctx.need_extra(file or f"{_c_name(node.op)}.c")
        out = self.outputs.get(node.name)
        if out is None:
            out = torch.zeros(_shape(node.output))
        names = [v.name for v in node.inputs]
        view = HandlerNode(node.name, node.op, node.op, tuple(names), dict(node.attrs), node)
        if kind == "module":
            module = self._module_of(node)
            handler(self, view, out, module, names)
        else:
            handler(self, view, out, names, self._input_args(node))
        return self._statements

    def _module_of(self, node: Node) -> nn.Module | None:
        key = node.attrs.get("key")
        if key is not None:
            return _MODULES.get(key)
        if self.reference_model is not None and len(node.inputs) > 1:  # a Bit* layer
            path = node.inputs[1].name.rsplit(".", 1)[0]
            return self.reference_model.get_submodule(path)
        return None

    def _input_args(self, node: Node) -> tuple[Any, ...]:
        """The call's arguments: reference tensors for tensor inputs, then attribute values."""
        values = []
        for v in node.inputs:
            producer = v.producer
            if producer is not None and producer.name in self.outputs:
                values.append(self.outputs[producer.name])
            elif v.data is not None:
                values.append(torch.as_tensor(np.asarray(v.data)))
            elif self._example is not None and self.graph is not None and v in self.graph.inputs:
                values.append(self._example[:1])
            else:
                values.append(None)
        return (*values, *(a for k, a in node.attrs.items() if k != "key"))

    # ------------------------------------------------------------------ seed helpers
    def add_uninitialized_tensor(self, name: str, tensor: torch.Tensor) -> None:
        """``name`` is this node's output (its memory is planned in the arena)."""
        node, ctx = self._require()
        self._tensors[name] = _Tensor(ctx.buffer(node.output), tuple(tensor.shape))

    def add_initialized_tensor(
        self, name: str, tensor: torch.Tensor, quant: int = 0, scale: float = 0.0
    ) -> None:
        """A constant tensor in flash: float32, or codes packed at ``quant`` bits (scale > 0)."""
        _, ctx = self._require()
        data = tensor.detach().cpu().float().numpy()
        if quant:
            if not scale > 0:
                raise CompileError(
                    f"initialized tensor '{name}' with quant={quant} needs scale > 0"
                )
            fmt = QFormat.for_bits(quant, True)
            codes = quantize(data, scale, fmt).astype(np.int64)
            symbol = ctx.const_bytes(f"{name}_q{quant}", pack(codes, fmt), kind="weights")
            self._tensors[name] = _Tensor(f"(float *)(void *){symbol}", tuple(tensor.shape))
            return
        symbol = ctx.const_f32(f"{name}", data, kind="weights")
        self._tensors[name] = _Tensor(f"(float *){symbol}", tuple(tensor.shape))

    def add_connect_tensor(self, name: str, tensor: torch.Tensor) -> None:
        """``name`` is this node's output holding its input's values (copied over)."""
        node, ctx = self._require()
        source = next((v for v in node.inputs if not v.is_const), None)
        if source is None:
            raise CompileError(f"'{node.name}' has no tensor input to connect '{name}' to")
        self._tensors[name] = _Tensor(ctx.buffer(node.output), tuple(tensor.shape))
        if ctx.buffer(source) != ctx.buffer(node.output):
            self._statements.append(
                f"memcpy({ctx.buffer(node.output)}, {ctx.buffer(source)}, "
                f"{node.output.type.nbytes});"
            )

    def add_forward_call(
        self,
        function_name: str,
        out: torch.Tensor,
        layer_name: str,
        input_names: Sequence[str],
        parameters: Sequence[Any] | None = None,
    ) -> None:
        """Call ``function_name`` (``{dim}``/``{dtype}`` filled in) on the named tensors:
        ``fn(&out, &in0, ..., params...)`` with ``MicoTensor`` arguments (mico_f32.h)."""
        self._require()
        fn = function_name.format(dim=out.dim(), dtype=_dtype_tag(out))
        if not fn.isidentifier():
            raise CompileError(f"'{fn}' is not a C function name")
        lines = ["{"]
        args = []
        for i, name in enumerate([layer_name, *input_names]):
            tensor = self._tensors.get(name)
            if tensor is None:
                raise CompileError(
                    f"add_forward_call: no tensor called '{name}' at '{self._node.name}'; known: "
                    f"{', '.join(self._tensors) or 'none'} (add it with add_*_tensor first)"
                )
            if len(tensor.shape) > 6:
                raise CompileError(f"tensor '{name}' has more than 6 dimensions")
            var = "mico_out" if i == 0 else f"mico_in{i - 1}"
            dims = ", ".join(str(d) for d in tensor.shape) or "1"
            numel = int(np.prod(tensor.shape)) if tensor.shape else 1
            lines.append(
                f"    MicoTensor {var} = {{ (float *){tensor.expr}, {len(tensor.shape)}, "
                f"{{ {dims} }}, {numel} }};"
            )
            args.append(f"&{var}")
        params = list(parameters or ())
        args += [_c_literal(p) for p in params]
        types = ["MicoTensor *", *["const MicoTensor *"] * len(input_names)]
        types += ["int32_t" if isinstance(p, bool | int) else "float" for p in params]
        self._ctx.declarations[fn] = f"void {fn}({', '.join(types)});"  # type: ignore[union-attr]
        lines.append(f"    {fn}({', '.join(args)});")
        lines.append("}")
        self._statements.extend(lines)

    def add_kernel_source(self, file_name: str, source: str) -> None:
        """Ship a kernel's C source with the project (compiled with the model)."""
        if not file_name.endswith(".c") or "/" in file_name:
            raise CompileError(f"kernel file name '{file_name}' must be a plain NAME.c")
        _, ctx = self._require()
        self._kernel_sources[file_name] = source
        ctx.need_extra(file_name)

    def _require(self) -> tuple[Node, EmitContext]:
        if self._node is None or self._ctx is None:
            raise CompileError("MiCoCodeGen helpers can only be called from a handler")
        return self._node, self._ctx


def _shape(value: Value) -> tuple[int, ...]:
    return tuple(int(d) for d in value.type.shape)


def _c_name(op: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in op)


def _dtype_tag(tensor: torch.Tensor) -> str:
    return {torch.float32: "f32", torch.int8: "i8", torch.uint8: "u8", torch.int32: "i32"}.get(
        tensor.dtype, "f32"
    )


def _c_literal(value: Any) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return c_float(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return _c_literal(value.item())
    raise CompileError(f"parameter {value!r} is not a number; pass ints or floats")
