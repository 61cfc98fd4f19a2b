"""What an ``emit`` rule writes into: buffer addresses, constant data and kernel sources."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from mico.codegen.planner import ArenaPlan, scratch_name
from mico.codegen.weights_file import Constant
from mico.errors import CompileError
from mico.ir.graph import Node, Value

_IDENT = re.compile(r"[^0-9A-Za-z_]")


def c_identifier(name: str) -> str:
    ident = _IDENT.sub("_", name)
    return f"v_{ident}" if not ident or ident[0].isdigit() else ident


def _rows(items: list[str], per_line: int) -> str:
    return ",\n".join(
        "    " + ", ".join(items[i : i + per_line]) for i in range(0, len(items), per_line)
    )


def _c_float(value: np.float32) -> str:
    """A float32 constant as exact C source (hex for finite values)."""
    v = float(value)
    if np.isnan(v):
        return "NAN"
    if np.isinf(v):
        return "INFINITY" if v > 0 else "(-INFINITY)"
    return f"{v.hex()}f"


def c_float(value: float) -> str:
    """``value`` rounded to float32, as exact C source."""
    return _c_float(np.float32(value))


#: the range of every integer C type a constant array is written as
C_INT_RANGES = {
    "uint8_t": (0, 255),
    "int32_t": (-(2**31), 2**31 - 1),
    "int64_t": (-(2**63), 2**63 - 1),
}


def checked_ints(symbol: str, data: np.ndarray, ctype: str) -> np.ndarray:
    """``data`` as int64 values, each an integer within ``ctype``'s range; anything else (NaN,
    a fraction, a value that would wrap) raises CompileError naming the constant."""
    values = np.asarray(data).ravel()
    lo, hi = C_INT_RANGES[ctype]
    if values.dtype.kind in "fc":
        bad = ~np.isfinite(values) | (np.round(values) != values)
        bad |= np.where(np.isfinite(values), (values < lo) | (values > hi), False)
    elif values.dtype.kind in "iub":
        bad = (values < lo) | (values > hi)
    else:
        raise CompileError(f"constant '{symbol}' holds {values.dtype} values, not integers")
    if bad.any():
        i = int(np.argmax(bad))
        raise CompileError(
            f"constant '{symbol}' element {i} is {values[i]}, not an integer within {ctype} "
            f"[{lo}, {hi}]; mico never writes a value its C type cannot hold (a non-finite or "
            "huge parameter or scale upstream: check the model's weights)"
        )
    return values.astype(np.int64)


def checked_f32(symbol: str, data: np.ndarray) -> np.ndarray:
    """``data`` as float32, refusing NaN, Inf and values that overflow float32."""
    values = np.asarray(data, dtype=np.float64).ravel()
    with np.errstate(over="ignore"):
        as_f32 = values.astype(np.float32)
    bad = ~np.isfinite(as_f32)
    if bad.any():
        i = int(np.argmax(bad))
        raise CompileError(
            f"constant '{symbol}' element {i} is {values[i]}, which float32 cannot hold as a "
            "finite number; mico never writes NaN or Inf constants (check the model's weights)"
        )
    return as_f32


#: Sources of ``mico/csrc`` that call into others: the integer kernels share one copy of the
#: run helpers (reading, writing and requantizing runs of packed codes).
KERNEL_DEPENDENCIES: dict[str, tuple[str, ...]] = {
    source: ("mico_nn_run.c",)
    for source in (
        "mico_conv2d.c",
        "mico_linear.c",
        "mico_pool.c",
        "mico_eltwise.c",
        "mico_quant.c",
    )
}
# the sign tables hand layers they do not take to the plain conv and linear kernels (a program
# on the tables for its convolutions only still links mico_qlinear_sign_lut's call)
KERNEL_DEPENDENCIES["mico_sign_lut.c"] = ("mico_nn_run.c", "mico_conv2d.c", "mico_linear.c")


class EmitContext:
    """Collects the generated C: constants (flash), kernels needed, buffer expressions."""

    def __init__(self, plan: ArenaPlan, inputs: list[Value]) -> None:
        self.plan = plan
        self.inputs = {
            id(v): f"input{i}" if len(inputs) > 1 else "input" for i, v in enumerate(inputs)
        }
        self.definitions: list[str] = []
        self.kernels: set[str] = set()
        self.extra_kernels: set[str] = set()
        self.declarations: dict[str, str] = {}  # prototypes of handler kernels, by name
        self.flash: dict[str, int] = {"weights": 0, "bias": 0, "scales": 0, "params": 0}
        self.weights: dict[str, np.ndarray] = {}
        self.blobs: list[tuple[str, bytes]] = []  # every constant's bytes, for <name>.bin
        self.constants: list[Constant] = []  # the same with their kind and codes' format
        self.structs: dict[str, tuple[str, str]] = {}  # const_struct symbol -> (C type, fields)
        self._symbols: set[str] = set()
        self.node: Node | None = None  # the node being emitted, named in errors
        #: the target's ISA extensions, for kernels with ISA-specific paths (zbb: cpop)
        self.isa_extensions: tuple[str, ...] = ()
        #: conv / linear nodes that take a fast path their program links anyway, whatever
        #: their size (mico.codegen.linked_paths); ungate_all: every node (a probe)
        self.ungated: dict[str, bool | str] = {}  # linked_paths.linked_layers
        self.ungate_all = False

    def _reuse(self, name: str, ctype: str, data: np.ndarray) -> str | None:
        """The symbol already holding exactly these values under this name, if any: a layer
        called twice (shared weights) emits its constants once."""
        cache = self.__dict__.setdefault("_constants", {})
        return cache.get((c_identifier(name), ctype, np.asarray(data).tobytes()))

    def _remember(self, name: str, ctype: str, data: np.ndarray, symbol: str) -> None:
        cache = self.__dict__.setdefault("_constants", {})
        cache[(c_identifier(name), ctype, np.asarray(data).tobytes())] = symbol

    def _symbol(self, name: str) -> str:
        symbol = c_identifier(name)
        if symbol in self._symbols:
            raise ValueError(f"C symbol '{symbol}' is defined twice")
        self._symbols.add(symbol)
        return symbol

    def buffer(self, value: Value) -> str:
        """The C expression of ``value``'s memory."""
        base = value.storage()
        if id(base) in self.inputs:
            return self.inputs[id(base)]
        if base.name not in self.plan.offsets and base.producer is None:
            constant = self._float_constant(base)
            if constant is not None:
                return constant
        if base.name not in self.plan.offsets:
            user = f"op '{self.node.op}' at '{self.node.name}'" if self.node else "an op"
            kind = "parameter" if base.producer is None else "tensor"
            raise CompileError(
                f"{user} reads the {kind} '{base.name}' as a tensor, and the C backend has no "
                "memory for it (it supports parameters only as the weights of layers it "
                "quantizes or emits); this model is not deployable yet: use the parameter "
                "through a supported layer or register an emit rule that reads it as a constant"
            )
        return f"MICO_ARENA({self.plan.offsets[base.name]})"

    def _float_constant(self, value: Value) -> str | None:
        """A float parameter read as a tensor (a class token, a position embedding) as a
        ``const float`` array in flash, written once however many ops read it."""
        cache = self.__dict__.setdefault("_float_constants", {})
        if value.name in cache:
            return cache[value.name]
        try:
            data = self.data(value)
        except KeyError:
            return None
        if value.qformat is not None and data.dtype.kind in "iu":  # constant codes (static)
            from mico.quant.packing import pack

            symbol = self.const_bytes(
                f"param_{value.name}",
                pack(data, value.qformat),
                kind="params",
                comment=f"{value.type} constant codes",
                codes=(value.qformat, int(data.size)),
            )
            cache[value.name] = f"((void *){symbol})"
            return cache[value.name]
        if data.dtype.kind != "f":
            return None
        symbol = self.const_f32(f"param_{value.name}", data.astype(np.float32), kind="params")
        cache[value.name] = f"((float *){symbol})"
        return cache[value.name]

    def data(self, value: Value) -> np.ndarray:
        """The constant data of ``value``: its own, or the graph weight of that name."""
        if value.data is not None:
            return np.asarray(value.data)
        if value.name in self.weights:
            return self.weights[value.name]
        raise KeyError(f"'{value.name}' is not a constant of the graph")

    def need_extra(self, file_name: str) -> None:
        """A kernel source the caller writes into the project itself (a handler's kernel)."""
        self.extra_kernels.add(file_name)

    def need(self, kernel_source: str) -> None:
        """Add a kernel source of ``mico/csrc`` to the project, with the sources it calls."""
        self.kernels.add(kernel_source)
        self.kernels.update(KERNEL_DEPENDENCIES.get(kernel_source, ()))

    def _record(
        self,
        symbol: str,
        kind: str,
        ctype: str,
        data: bytes,
        name: str,
        codes: tuple[Any, int] | None = None,
        layout: str = "packed",
    ) -> None:
        """Keep a constant for the weights file, with its codes' format when it packs codes
        (given, or the format of the emitted node's input of that name: a layer's weights)."""
        if codes is None and kind == "weights" and self.node is not None:
            codes = self._weight_codes(name)
        if codes is None:
            self.constants.append(Constant(symbol, kind, ctype, data))
            return
        fmt, count = codes
        self.constants.append(Constant(symbol, kind, ctype, data, fmt.bits, bool(fmt.signed),
                                       int(fmt.zero), count, layout))  # fmt: skip

    def _weight_codes(self, name: str) -> tuple[Any, int] | None:
        """The codes' format and count of the emitted node's weight input called ``name``."""
        from mico.quant.arithmetic import QFormat

        node = self.node
        matches = [v for v in node.inputs if isinstance(v, Value)  # type: ignore[union-attr]
                   and c_identifier(v.name) == c_identifier(name)]  # fmt: skip
        if not matches:
            return None
        value = matches[0]
        if value.qformat is not None and value.data is not None:
            return value.qformat, int(np.asarray(value.data).size)
        bits = node.attrs.get("w_bits")  # type: ignore[union-attr]
        if isinstance(bits, int | float) and not isinstance(bits, bool):  # quantized in C
            return QFormat.for_bits(bits, True), int(value.type.numel)
        return None

    def const_bytes(
        self,
        name: str,
        data: np.ndarray,
        kind: str = "weights",
        comment: str = "",
        codes: tuple[Any, int] | None = None,
        word_aligned: bool = False,
    ) -> str:
        shared = self._reuse(name, "uint8", data)
        if shared is not None:
            return shared
        symbol = self._symbol(name)
        self._remember(name, "uint8", data, symbol)
        values = checked_ints(symbol, data, "uint8_t").astype(np.uint8)
        items = [f"0x{b:02x}" for b in values] or ["0"]
        self.blobs.append((symbol, values.tobytes()))
        self._record(symbol, kind, "uint8_t", values.tobytes(), name, codes)
        note = f"/* {comment} */\n" if comment else ""
        self.definitions.append(
            f"{note}static const uint8_t {symbol}[{len(items)}]"
            + (" __attribute__((aligned(4)))" if word_aligned else "")  # words read (mico_qlinear)
            + f" = {{\n{_rows(items, 16)}\n}};"
        )
        self.flash[kind] += len(items)
        return symbol

    def const_int32(self, name: str, data: np.ndarray, kind: str = "bias") -> str:
        shared = self._reuse(name, "int32", data)
        if shared is not None:
            return shared
        symbol = self._symbol(name)
        self._remember(name, "int32", data, symbol)
        values = checked_ints(symbol, data, "int32_t")
        items = [str(int(v)) for v in values] or ["0"]
        self.blobs.append((symbol, values.astype("<i4").tobytes()))
        self._record(symbol, kind, "int32_t", values.astype("<i4").tobytes(), name,
                     layout="words")  # fmt: skip
        self.definitions.append(
            f"static const int32_t {symbol}[{len(items)}] = {{\n{_rows(items, 8)}\n}};"
        )
        self.flash[kind] += 4 * len(items)
        return symbol

    def const_int64(self, name: str, data: np.ndarray, kind: str = "params") -> str:
        """An int64 array in flash (fixed-point constants too wide for int32)."""
        shared = self._reuse(name, "int64", data)
        if shared is not None:
            return shared
        symbol = self._symbol(name)
        self._remember(name, "int64", data, symbol)
        values = checked_ints(symbol, data, "int64_t")
        items = [f"INT64_C({int(v)})" for v in values] or ["INT64_C(0)"]
        self.blobs.append((symbol, values.astype("<i8").tobytes()))
        self.constants.append(Constant(symbol, kind, "int64_t", values.astype("<i8").tobytes()))
        self.definitions.append(
            f"static const int64_t {symbol}[{len(items)}] = {{\n{_rows(items, 4)}\n}};"
        )
        self.flash[kind] = self.flash.get(kind, 0) + 8 * len(items)
        return symbol

    def const_f32(self, name: str, data: np.ndarray, kind: str = "scales") -> str:
        """A float32 array in flash; values are written exactly (C99 hex floats)."""
        shared = self._reuse(name, "f32", data)
        if shared is not None:
            return shared
        symbol = self._symbol(name)
        self._remember(name, "f32", data, symbol)
        values = checked_f32(symbol, data)
        items = [_c_float(v) for v in values] or ["0.0f"]
        self.blobs.append((symbol, values.astype("<f4").tobytes()))
        self.constants.append(Constant(symbol, kind, "float", values.astype("<f4").tobytes()))
        self.definitions.append(
            f"static const float {symbol}[{len(items)}] = {{\n{_rows(items, 6)}\n}};"
        )
        self.flash[kind] = self.flash.get(kind, 0) + 4 * len(items)
        return symbol

    def const_i32_array(self, name: str, data: np.ndarray) -> str:
        """An int32 array in flash that is not counted as bias (shapes, strides)."""
        symbol = self._symbol(name)
        items = [str(int(v)) for v in checked_ints(symbol, data, "int32_t")] or ["0"]
        self.definitions.append(
            f"static const int32_t {symbol}[{len(items)}] = {{ {', '.join(items)} }};"
        )
        self.flash["params"] = self.flash.get("params", 0) + 4 * len(items)
        return symbol

    def scratch(self, node: Node) -> str:
        """The arena memory planned as ``node``'s scratch (see planner.SCRATCH_ATTR)."""
        return f"MICO_ARENA({self.plan.offsets[scratch_name(node)]})"

    def const_struct(self, ctype: str, name: str, fields: str) -> str:
        symbol = self._symbol(name)
        self.structs[symbol] = (ctype, fields)
        self.definitions.append(f"static const {ctype} {symbol} = {{ {fields} }};")
        return symbol
