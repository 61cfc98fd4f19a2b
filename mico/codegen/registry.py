"""Seed 000's ``MiCoOpRegistry``: register C code generators for torch functions and modules.

These are doors onto the one op registry of :mod:`mico.ir`, not a second registry:

* ``@MiCoOpRegistry.register_function(torch.sigmoid)`` attaches an ``emit`` rule to the op the
  function exports as (``aten.sigmoid.default``);
* ``@MiCoOpRegistry.register_module(MyLayer)`` defines the op ``module.MyLayer`` -- every
  instance of the class is kept as one node of that op when the model is exported -- and
  attaches its ``emit`` rule (and an ``execute`` rule that runs the module, for reference).

Handlers keep the seed's signatures, ``handler(codegen, n, out, input_names, input_args)`` and
``handler(codegen, n, out, module, input_names)``, and build their C with the
:class:`~mico.codegen.micocodegen.MiCoCodeGen` helpers. A handler may ship its kernel's C
source (``kernel=``) so the generated project stays self-contained.

Registering over one of mico's built-in C rules replaces it (that is the point of the door);
registering a second user handler for the same op needs ``override=True``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from mico.errors import RegistryError, UnsupportedOpError
from mico.ir.ops.registry import OpRegistry

Handler = Callable[..., Any]
BUILTIN_MARK = "_mico_builtin_emit"
SEED_MARK = "_mico_seed_handler"

#: torch callables whose exported ATen op is not simply ``aten.<name>.default``
KNOWN_FUNCTIONS: dict[Any, str] = {
    operator.add: "aten.add.Tensor",
    operator.iadd: "aten.add.Tensor",
    torch.add: "aten.add.Tensor",
    operator.sub: "aten.sub.Tensor",
    torch.sub: "aten.sub.Tensor",
    operator.mul: "aten.mul.Tensor",
    torch.mul: "aten.mul.Tensor",
    operator.truediv: "aten.div.Tensor",
    torch.div: "aten.div.Tensor",
    F.relu: "aten.relu.default",
    torch.relu: "aten.relu.default",
    F.relu6: "aten.relu6.default",
    F.hardtanh: "aten.hardtanh.default",
    F.tanh: "aten.tanh.default",
    torch.tanh: "aten.tanh.default",
    F.sigmoid: "aten.sigmoid.default",
    torch.sigmoid: "aten.sigmoid.default",
    F.linear: "aten.linear.default",
    F.conv1d: "aten.conv1d.default",
    F.conv2d: "aten.conv2d.default",
    F.avg_pool2d: "aten.avg_pool2d.default",
    F.max_pool2d: "aten.max_pool2d.default",
    F.adaptive_avg_pool2d: "aten.adaptive_avg_pool2d.default",
    torch.flatten: "aten.flatten.using_ints",
    torch.cat: "aten.cat.default",
    F.softmax: "aten.softmax.int",
    torch.softmax: "aten.softmax.int",
    F.gelu: "aten.gelu.default",
    F.silu: "aten.silu.default",
    torch.matmul: "aten.matmul.default",
}


def function_name(fn: Any) -> str:
    """How the seed names a torch callable in messages: ``torch.sqrt``, ``operator.add``."""
    module = getattr(fn, "__module__", None) or "torch"
    name = getattr(fn, "__name__", repr(fn))
    if module.startswith("torch._C") or module == "torch.functional":
        module = "torch"
    return f"{module}.{name}"


def op_for_function(fn: Any) -> str:
    """The IR op a torch callable exports as (``torch.sigmoid`` -> ``aten.sigmoid.default``)."""
    if isinstance(fn, torch._ops.OpOverload):
        return f"aten.{fn._schema.name.split('::')[-1]}.{fn._overloadname}"
    try:
        known = KNOWN_FUNCTIONS.get(fn)
    except TypeError:  # unhashable
        known = None
    if known is not None:
        return known
    name = getattr(fn, "__name__", None)
    packet = getattr(torch.ops.aten, name, None) if name else None
    if packet is not None:
        for overload in ("default", "Tensor"):
            if overload in packet.overloads():
                return f"aten.{name}.{overload}"
    raise RegistryError(
        f"cannot tell which operator {function_name(fn)} exports as; register its ATen op "
        "instead, e.g. MiCoOpRegistry.register_function(torch.ops.aten.NAME.default)"
    )


def op_for_module(cls: type) -> str:
    """The IR op instances of module class ``cls`` are kept as (``module.MyLayer``)."""
    from mico.quant.layers import BitConv1d, BitConv2d, BitLinear

    quantized = {
        BitConv1d: "mico.bit_conv1d",
        BitConv2d: "mico.bit_conv2d",
        BitLinear: "mico.bit_linear",
    }
    if cls in quantized:
        return quantized[cls]
    return f"module.{cls.__module__}.{cls.__qualname__}"


def _load_kernel(kernel: str | Path | None) -> tuple[str, str] | None:
    """``(file name, C source)`` of a handler's kernel: C text, or a path to a .c file."""
    if kernel is None:
        return None
    if isinstance(kernel, Path) or (isinstance(kernel, str) and kernel.endswith(".c")):
        path = Path(kernel)
        if not path.exists():
            raise RegistryError(f"kernel source {path} does not exist")
        return path.name, path.read_text()
    return "", str(kernel)


class MiCoOpRegistry:
    """Seed 000's registry of C code generators (a view onto :class:`mico.ir.OpRegistry`)."""

    _modules: ClassVar[dict[type, str]] = {}

    @classmethod
    def register_function(
        cls, fn: Any, override: bool = False, kernel: str | Path | None = None
    ) -> Callable[[Handler], Handler]:
        """Decorator: ``handler(codegen, n, out, input_names, input_args)`` emits ``fn``."""
        op = op_for_function(fn)

        def decorator(handler: Handler) -> Handler:
            _attach(op, handler, "function", override, _load_kernel(kernel), function_name(fn))
            return handler

        return decorator

    @classmethod
    def register_module(
        cls, module_cls: type, override: bool = False, kernel: str | Path | None = None
    ) -> Callable[[Handler], Handler]:
        """Decorator: ``handler(codegen, n, out, module, input_names)`` emits ``module_cls``."""
        if not (isinstance(module_cls, type) and issubclass(module_cls, nn.Module)):
            raise RegistryError(f"register_module needs an nn.Module subclass, got {module_cls!r}")
        op = op_for_module(module_cls)

        def decorator(handler: Handler) -> Handler:
            if op.startswith("module."):
                OpRegistry.define(op, f"calls of {module_cls.__qualname__} modules")
                OpRegistry.attach(op, "execute", _execute_module, override=True)
            _attach(op, handler, "module", override, _load_kernel(kernel), module_cls.__qualname__)
            cls._modules[module_cls] = op
            return handler

        return decorator

    @classmethod
    def module_op(cls, module: nn.Module) -> str | None:
        """The op of ``module``'s class when a handler is registered for it (not Bit layers)."""
        op = cls._modules.get(type(module))
        return op if op is not None and op.startswith("module.") else None

    @classmethod
    def is_registered(cls, fn_or_cls: Any) -> bool:
        op = (
            op_for_module(fn_or_cls)
            if isinstance(fn_or_cls, type) and issubclass(fn_or_cls, nn.Module)
            else op_for_function(fn_or_cls)
        )
        from mico.ir.analyzer import find_rule

        return find_rule(op, "emit") is not None


def _attach(
    op: str,
    handler: Handler,
    kind: str,
    override: bool,
    kernel: tuple[str, str] | None,
    label: str,
) -> None:
    existing = OpRegistry.rule(op, "emit")
    if existing is not None and getattr(existing, SEED_MARK, None) is not None and not override:
        raise RegistryError(
            f"{label} already has a C handler ({getattr(existing, SEED_MARK).__qualname__}); "
            "pass override=True to replace it"
        )

    def emit(node: Any, ctx: Any) -> list[str]:
        from mico.codegen.micocodegen import active_codegen

        return active_codegen(node).run_handler(handler, kind, node, ctx, kernel)

    setattr(emit, SEED_MARK, handler)
    emit.__qualname__ = f"seed_handler[{handler.__qualname__}]"
    OpRegistry.attach(op, "emit", emit, override=True)


def _execute_module(inputs: list[torch.Tensor], attrs: dict) -> list[torch.Tensor]:
    """Reference execution of a ``module.*`` node: call the module it stands for."""
    from mico.codegen.micocodegen import call_original

    with torch.no_grad():
        return [call_original(attrs["key"], inputs)]


def unregistered_message(op: str) -> str:
    """The seed's message for an op without a C handler."""
    if op.startswith("module."):
        name = op.rsplit(".", 1)[-1]
        return (
            f"Module '{name}' is not registered. Use @MiCoOpRegistry.register_module() "
            "decorator to add support."
        )
    parts = op.split(".")
    name = f"torch.{parts[1]}" if parts[0] == "aten" and len(parts) >= 2 else op
    return (
        f"Function '{name}' is not registered. Use @MiCoOpRegistry.register_function() "
        "decorator to add support."
    )


class UnregisteredOpError(UnsupportedOpError, RuntimeError):
    """An op of the model has no C handler (seed 000's RuntimeError)."""
