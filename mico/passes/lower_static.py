"""Lower a calibrated static-mode model (``extract_ir`` output) to integer-only ``mico.*`` ops.

Input: the :class:`~mico.ir.analyzer.IRGraph` of a model whose Bit* layers are quantized with
static activation scales (``act_mode="static"``, calibrated, BN folded): each layer is one
``mico.bit_conv1d`` / ``mico.bit_conv2d`` / ``mico.bit_linear`` node carrying its bit-widths and
scales; everything else is ATen. Output: a :class:`~mico.ir.graph.Graph` of ``mico.*`` ops on
integer codes whose ``execute`` rules are the Python reference of the C program.

Formats
-------
Every tensor between ops is stored as codes ``(QFormat, scale)``:

* a tensor whose uses reach quantized layers (directly or through format-preserving ops:
  max-pooling, views, transposes, dropout, and an activation that is its only use) is stored
  in the input format of those layers -- the producing layer requantizes its int32 accumulator
  straight to it. When those layers disagree, the tensor is stored in the widest of their
  formats and ``mico.requant`` nodes convert it for the others. When an add, a mean, a concat
  or the output also reads the tensor as it is (a residual shortcut) and the layers' formats
  are narrower than ``free_bits``, the tensor is stored like a free tensor (below) and every
  layer gets a requantized copy: the device then computes what the PyTorch model computes,
  whose shortcuts are not quantized;
* a tensor that only feeds a concat takes the concat's format (the concat is then a copy);
* any other tensor (residual-add inputs, pooled outputs, ...) gets a format from its range
  observed by running the float graph on the calibration samples: ``free_bits`` bits (by
  default the widest activation width of the plan, so a uniform W4A4 plan stores every
  activation in 4 bits), signed when negative values were seen, scale ``max|x| / qmax``;
* the graph output is int32: the last layer's accumulator (scale ``s_in * s_w``), a mean's
  integer sum (scale ``s_in / count``), a residual add at the finer input scale, or codes
  widened to int32.

Ops
---
Conv1d (as a conv2d of height 1, through views) and Conv2d with any kernel, stride, padding,
dilation and groups, Linear; ReLU, ReLU6, hardtanh and clamp fused into the producing op as
integer clamps (``relu`` on the accumulator and a code-range clamp); max_pool1d/2d on codes;
global average pooling (``mean`` over trailing dims, ``adaptive_avg_pool`` to 1) as an integer
sum and one requantization; avg_pool1d/2d (and adaptive pooling to sizes that divide the
input) as window sums with one multiplier per window size; residual add with two fixed-point
multipliers sharing one shift; concat (each input rescaled to the output format unless it
already has it); views as aliases; transpose / permute / slice as strided integer copies;
dropout as identity. Per-channel weight scales give per-output-channel multipliers. Token
models (a LLaMa): the embedding of the token-id input, RMSNorm, rotary embeddings and a causal
mask added before a softmax are recognised as patterns and lowered to one integer op each
(:mod:`mico.passes.lower_llama`).

Not supported (errors name the op and the fix): unfolded BatchNorm (CompileError: fold it with
``mico.quant.fuse_model``), Conv/Linear left out of the plan or with dynamic activations
(CompileError), broadcasting adds or adds of constants, ops on the batch dimension, pooling
with ``ceil_mode=True``, adaptive pooling to sizes that do not divide the input, and any other
ATen op (UnsupportedOpError); an int32 accumulator that could overflow (CompileError).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from mico.errors import CompileError, UnsupportedOpError
from mico.ir.analyzer import find_rule
from mico.ir.dtypes import DataType
from mico.ir.graph import Graph, Node, Value
from mico.ir.ops import mico_ops
from mico.ir.ops.mico_ops import code_range, out_spec
from mico.ir.types import TensorType
from mico.passes.inplace import mark_inplace
from mico.passes.lower_llama import match_llama, token_input
from mico.passes.observe import observe_ranges
from mico.quant.arithmetic import (
    INT32_MAX,
    QFormat,
    quantize,
    quantize_bias,
    quantize_multiplier,
)

# op kinds
LAYER, ACT, IDENTITY, VIEW, PERMUTE, SLICE, MAXPOOL, AVGPOOL, MEAN, ADD, CAT = (
    "layer", "act", "identity", "view", "permute", "slice", "maxpool", "avgpool", "mean", "add",
    "cat",
)  # fmt: skip
BATCHNORM, FLOAT_LAYER = "batchnorm", "float_layer"
LUT = "lut"
MUL, MATMUL = "mul", "matmul"
SOFTMAX = "softmax"
LAYERNORM = "layernorm"
EXPAND, SELECT = "expand", "select"
PAD = "pad"
#: elementwise functions the static mode runs as a table of output codes per input code
LUT_FUNCTIONS = {
    "aten.sigmoid.default": lambda x, a: torch.sigmoid(x),
    "aten.tanh.default": lambda x, a: torch.tanh(x),
    "aten.hardswish.default": lambda x, a: F.hardswish(x),
    "aten.hardsigmoid.default": lambda x, a: F.hardsigmoid(x),
    "aten.silu.default": lambda x, a: F.silu(x),
    "aten.gelu.default": lambda x, a: F.gelu(x, approximate=a.get("approximate", "none")),
    "aten.leaky_relu.default": lambda x, a: F.leaky_relu(x, float(a.get("negative_slope", 0.01))),
    "aten.elu.default": lambda x, a: F.elu(x, float(a.get("alpha", 1.0))),
}

KINDS: dict[str, str] = {
    "mico.bit_conv1d.default": LAYER,
    "mico.bit_conv2d.default": LAYER,
    "mico.bit_linear.default": LAYER,
    "aten.relu.default": ACT,
    "aten.relu_.default": ACT,
    "aten.relu6.default": ACT,
    "aten.hardtanh.default": ACT,
    "aten.hardtanh_.default": ACT,
    "aten.clamp.default": ACT,
    "aten.clamp_min.default": ACT,
    "aten.dropout.default": IDENTITY,
    "aten.feature_dropout.default": IDENTITY,
    "aten.clone.default": IDENTITY,
    "aten.alias.default": IDENTITY,
    "aten.detach.default": IDENTITY,
    "aten.contiguous.default": IDENTITY,
    "aten.flatten.using_ints": VIEW,
    "aten.view.default": VIEW,
    "aten.reshape.default": VIEW,
    "aten._unsafe_view.default": VIEW,
    "aten.unflatten.int": VIEW,
    "aten.squeeze.dim": VIEW,
    "aten.squeeze.dims": VIEW,
    "aten.squeeze.default": VIEW,
    "aten.unsqueeze.default": VIEW,
    "aten.transpose.int": PERMUTE,
    "aten.permute.default": PERMUTE,
    "aten.t.default": PERMUTE,
    "aten.slice.Tensor": SLICE,
    "aten.max_pool1d.default": MAXPOOL,
    "aten.max_pool2d.default": MAXPOOL,
    "aten.avg_pool1d.default": AVGPOOL,
    "aten.avg_pool2d.default": AVGPOOL,
    "aten.mean.dim": MEAN,
    "aten.adaptive_avg_pool1d.default": MEAN,
    "aten.adaptive_avg_pool2d.default": MEAN,
    "aten.add.Tensor": ADD,
    "aten.add_.Tensor": ADD,
    "aten.cat.default": CAT,
    "aten.concat.default": CAT,
    "aten.batch_norm.default": BATCHNORM,
    "aten._native_batch_norm_legit_no_training.default": BATCHNORM,
    **dict.fromkeys(LUT_FUNCTIONS, LUT),
    "aten.mul.Tensor": MUL,
    "aten.softmax.int": SOFTMAX,
    "aten.layer_norm.default": LAYERNORM,
    "aten.expand.default": EXPAND,
    "aten.select.int": SELECT,
    "aten.pad.default": PAD,
    "aten._softmax.default": SOFTMAX,
    "aten.matmul.default": MATMUL,
    "aten.bmm.default": MATMUL,
    "aten.mm.default": MATMUL,
    "aten.conv1d.default": FLOAT_LAYER,
    "aten.conv2d.default": FLOAT_LAYER,
    "aten.convolution.default": FLOAT_LAYER,
    "aten.linear.default": FLOAT_LAYER,
}
# ops whose output holds (a subset of) their input's values in the input's format
PRESERVING = (IDENTITY, VIEW, PERMUTE, MAXPOOL)
SUPPORTED = (
    "Bit* conv1d/conv2d/linear, relu/relu6/hardtanh/clamp, sigmoid/tanh/hardswish/hardsigmoid/"
    "silu/gelu/leaky_relu/elu (lookup tables), mul and matmul of two activations (or by a "
    "positive constant), softmax and LayerNorm over the last dim (integer), F.pad (constant, "
    "reflect, replicate, circular), max_pool1d/2d, "
    "avg_pool1d/2d, "
    "mean / adaptive average pooling, add, cat, flatten/view/reshape/unflatten/squeeze/"
    "unsqueeze, transpose/permute/slice, dropout"
)

Format = tuple[QFormat, float]


def codes_dtype(fmt: QFormat) -> DataType:
    """``int<b>`` for signed codes, ``uint<b>`` for unsigned ones."""
    return DataType.int(fmt.bits) if fmt.signed else DataType.uint(fmt.bits)


def shared_multipliers(reals: Sequence[float], where: str) -> tuple[list[int], int]:
    """Fixed-point multipliers ``m_i * 2**-shift`` for several reals with one common shift.

    The largest real gets :func:`quantize_multiplier`'s 31-bit ``m``; the others are rounded at
    the same shift (so they fit 31 bits too).
    """
    big = max(reals)
    m_big, shift = multiplier(big, where)
    ms = [m_big if r == big else math.floor(r * 2.0**shift + 0.5) for r in reals]
    return ms, shift


def multiplier(real: float, where: str) -> tuple[int, int]:
    """:func:`quantize_multiplier` with a :class:`CompileError` naming the op."""
    try:
        return quantize_multiplier(float(real))
    except ValueError as exc:
        raise CompileError(
            f"{where}: cannot represent the rescaling factor {real:g} as a fixed-point "
            f"multiplier ({exc}); the scales around it are inconsistent"
        ) from None


def _norm_dim(dim: int, rank: int) -> int:
    return dim + rank if dim < 0 else dim


def _contiguous_strides(shape: Sequence[int]) -> list[int]:
    strides, step = [], 1
    for size in reversed(list(shape)):
        strides.append(step)
        step *= int(size)
    return strides[::-1]


def _pair(value: Any, n: int, default: int) -> list[int]:
    if value is None or (isinstance(value, list | tuple) and not value):
        return [default] * n
    if isinstance(value, int):
        return [value] * n
    items = [int(v) for v in value]
    return items * n if len(items) == 1 else items


class _StaticLowering:
    def __init__(self, ir: Graph, calibration: Sequence[Any], free_bits: int | None) -> None:
        if free_bits is None:
            widths = [self.layer_input_format(n)[0].bits for n in ir.nodes if self.kind(n) == LAYER]
            free_bits = max(widths, default=8)
            if any(self.kind(n) in (LAYERNORM, SOFTMAX, MATMUL) for n in ir.nodes):
                free_bits = 8  # attention's residual stream and probabilities keep 8 bits
        if not 1 <= free_bits <= 8:
            raise CompileError(f"free_bits must be from 1 to 8, got {free_bits}")
        if len(ir.inputs) != 1 or not (ir.inputs[0].type.dtype.is_float or token_input(ir)):
            raise CompileError(
                f"graph '{ir.name}' must have one floating-point input (or integer token ids "
                f"read only by nn.Embedding layers) for the static lowering, got "
                f"{', '.join(str(v.type) for v in ir.inputs) or 'none'}"
            )
        self.src = ir
        self.free_bits = free_bits
        self.weights: dict[str, Any] = dict(getattr(ir, "weights", {}) or {})
        self.users: dict[int, list[tuple[Node, int]]] = {}
        for node in ir.nodes:
            for i, v in enumerate(node.inputs):
                self.users.setdefault(id(v), []).append((node, i))
        self.outputs = {id(v) for v in ir.outputs}
        self.calibration = calibration
        self._ranges: dict[int, tuple[float, float]] | None = None
        self.dst = Graph(ir.name)
        self.env: dict[int, Value] = {}
        self.variants: dict[tuple[Any, ...], Value] = {}
        self.fused: set[int] = set()
        self.names: set[str] = set()
        self._demands: dict[tuple[int, bool], tuple[list[Format], list[Node]]] = {}
        self._prefs: dict[int, Format] = {}

    # ----------------------------------------------------------------- classification
    @staticmethod
    def kind(node: Node) -> str | None:
        return KINDS.get(node.op)

    def users_of(self, value: Value) -> list[tuple[Node, int]]:
        return self.users.get(id(value), [])

    def ranges(self) -> dict[int, tuple[float, float]]:
        if self._ranges is None:
            self._ranges = observe_ranges(self.src, self.calibration)
        return self._ranges

    # ----------------------------------------------------------------- formats
    def layer_input_format(self, node: Node) -> Format:
        a = node.attrs
        zero = int(a.get("act_zero", 0) or 0)  # asymmetric inputs: shifted codes
        return QFormat.for_bits(a["a_bits"], bool(a["act_signed"]), zero), float(a["act_scale"])

    def demands(self, value: Value, exclusive: bool = True) -> tuple[list[Format], list[Node]]:
        """Formats the uses of ``value`` ask for: layer inputs (hard) and concats (soft).

        Demands flow back through format-preserving ops; through an activation only when it is
        the sole use along the way (``exclusive``), since it clips what other uses would see.
        """
        key = (id(value), exclusive)
        if key in self._demands:
            return self._demands[key]
        hard: list[Format] = []
        soft: list[Node] = []
        users = self.users_of(value)
        sole = exclusive and len(users) == 1 and id(value) not in self.outputs
        for node, index in users:
            kind = self.kind(node)
            if kind == LAYER and index == 0:
                hard.append(self.layer_input_format(node))
            elif kind in PRESERVING and index == 0:
                h, s = self.demands(node.output, sole)
                hard += h
                soft += s
            elif kind == ACT and sole:
                h, s = self.demands(node.output, True)
                hard += h
                soft += s
            elif kind == CAT:
                soft.append(node)
        self._demands[key] = (hard, soft)
        return hard, soft

    def pref(self, value: Value) -> Format:
        """The format ``value`` is stored in when an op materializes it."""
        if id(value) in self._prefs:
            return self._prefs[id(value)]
        hard, soft = self.demands(value)
        if hard and self.seen_whole(value) and max(f[0].bits for f in hard) < self.free_bits:
            # an add / pool / concat / the output reads these values as they are: keep them
            # at free_bits, the layers get requantized copies
            fmt = self.range_format(value)
        elif hard:
            unique = list(dict.fromkeys(hard))
            fmt = max(unique, key=lambda f: (f[0].bits, f[1]))
        elif soft:
            fmt = self.pref(soft[0].output)
        else:
            fmt = self.range_format(value)
        self._prefs[id(value)] = fmt
        return fmt

    def seen_whole(self, value: Value) -> bool:
        """True when an op other than a quantized layer reads ``value`` without first
        requantizing it to a layer's format: an add, a mean, a concat, a slice, the output."""
        for node, _ in self.users_of(value):
            kind = self.kind(node)
            if kind in (ADD, MEAN, AVGPOOL, CAT, SLICE) or (
                kind in (*PRESERVING, ACT) and self.seen_whole(node.output)
            ):
                return True
        return id(value) in self.outputs

    def range_format(self, value: Value) -> Format:
        ranges = self.ranges()
        if id(value) not in ranges:
            raise CompileError(
                f"no range was observed for '{value.name}' on the calibration samples; the "
                "static lowering needs it to choose that tensor's scale"
            )
        lo, hi = ranges[id(value)]
        signed = lo < 0
        fmt = QFormat(self.free_bits, signed)
        amax = max(-lo, hi) if signed else max(hi, 0.0)
        if amax <= 0:
            warnings.warn(
                f"'{value.name}' was 0 on every calibration sample, so its scale defaults to 1.0; "
                "lower with representative calibration inputs (not just a zero example)",
                stacklevel=2,
            )
            return fmt, 1.0
        return fmt, amax / fmt.qmax

    def feeds_output_only(self, value: Value) -> bool:
        """True when ``value`` is only used as the graph output (maybe through views)."""
        users = self.users_of(value)
        if id(value) in self.outputs:
            return not users
        return (
            len(users) == 1
            and self.kind(users[0][0]) in (VIEW, IDENTITY)
            and self.feeds_output_only(users[0][0].output)
        )

    # ----------------------------------------------------------------- values and nodes
    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.names:
            name = f"{base}_{k}"
            k += 1
        self.names.add(name)
        return name

    def codes_value(self, name: str, shape: Sequence[Any], fmt: Format) -> Value:
        return Value(
            self.fresh(name), TensorType(tuple(shape), codes_dtype(fmt[0])), qformat=fmt[0],
            scale=fmt[1],
        )  # fmt: skip

    def int32_value(self, name: str, shape: Sequence[Any], scale: float) -> Value:
        return Value(self.fresh(name), TensorType(tuple(shape), DataType.INT32), scale=scale)

    def emit(self, name: str, op: str, inputs: list[Value], out: Value, attrs: dict) -> Value:
        self.dst.add(Node(self.fresh(name), op, inputs, [out], attrs))
        return out

    def view(self, x: Value, shape: Sequence[Any], name: str) -> Value:
        out = Value(
            self.fresh(name), TensorType(tuple(shape), x.type.dtype), qformat=x.qformat,
            scale=x.scale, alias_of=x,
        )  # fmt: skip
        return self.emit(f"{name}_view", mico_ops.RESHAPE, [x], out, {"shape": list(shape)})

    def quantized(self, x: Value, fmt: Format) -> Value:
        """Float ``x`` quantized to ``fmt`` (one ``mico.quantize`` per format)."""
        key = ("quantize", id(x), fmt)
        if key not in self.variants:
            out = self.codes_value(f"{x.name}_q", x.type.shape, fmt)
            attrs = {"scale": fmt[1], "qformat": fmt[0]}
            self.variants[key] = self.emit(f"{x.name}_quantize", mico_ops.QUANTIZE, [x], out, attrs)
        return self.variants[key]

    def requantized(self, x: Value, fmt: Format, where: str) -> Value:
        """Codes ``x`` converted to ``fmt`` (one ``mico.requant`` per format)."""
        key = ("requant", id(x), fmt)
        if key not in self.variants:
            assert x.scale is not None
            m, shift = multiplier(x.scale / fmt[1], where)
            out = self.codes_value(f"{x.name}_as_{fmt[0]}", x.type.shape, fmt)
            attrs = {"out": out_spec(fmt[0], fmt[1], [m], [shift])}
            self.variants[key] = self.emit(f"{x.name}_requant", mico_ops.REQUANT, [x], out, attrs)
        return self.variants[key]

    def constant_codes(self, value: Value) -> Value:
        """A float parameter read as a tensor (a class token, a position embedding) as
        constant codes at ``free_bits``, scaled to its own largest magnitude."""
        key = ("constant", id(value))
        if key not in self.variants:
            data = self.tensor(value).to(torch.float32).numpy()
            signed = bool((data < 0).any())
            fmt = QFormat(self.free_bits, signed)
            amax = float(np.abs(data).max()) if data.size else 0.0
            scale = amax / fmt.qmax if amax > 0 else 1.0
            codes = quantize(data, scale, fmt).astype(np.int64)
            self.variants[key] = Value(
                self.fresh(f"{value.name}_q"), TensorType(tuple(data.shape), codes_dtype(fmt)),
                data=codes, qformat=fmt, scale=scale,
            )  # fmt: skip
        return self.variants[key]

    def codes(self, value: Value, where: str) -> Value:
        """The codes of source ``value`` (a float graph input is quantized to its format)."""
        if id(value) not in self.env and value.producer is None:
            return self.constant_codes(value)
        x = self.env[id(value)]
        if x.qformat is not None:
            return x
        if x.type.dtype.is_float:
            return self.quantized(x, self.pref(value))
        raise CompileError(f"{where} reads '{value.name}', an int32 result; expected codes")

    def layer_input(self, value: Value, fmt: Format, where: str) -> Value:
        x = self.env[id(value)]
        if x.qformat is None and x.type.dtype.is_float:
            return self.quantized(x, fmt)
        if x.qformat is None:
            raise CompileError(f"{where} reads '{value.name}', an int32 result; expected codes")
        if (x.qformat, x.scale) == fmt:
            return x
        return self.requantized(x, fmt, where)

    def fuse_activation(self, value: Value) -> tuple[Value, float, float]:
        """Follow activations that are the only use of ``value``: the result and its bounds."""
        lo, hi, result = -math.inf, math.inf, value
        while id(result) not in self.outputs:
            users = self.users_of(result)
            if len(users) != 1 or self.kind(users[0][0]) != ACT:
                break
            node = users[0][0]
            a, b = self.act_bounds(node)
            if max(lo, a) > min(hi, b):
                break
            lo, hi = max(lo, a), min(hi, b)
            self.fused.add(id(node))
            result = node.output
        return result, lo, hi

    @staticmethod
    def act_bounds(node: Node) -> tuple[float, float]:
        a = node.attrs
        if node.op.startswith("aten.relu6"):
            return 0.0, 6.0
        if node.op.startswith("aten.relu"):
            return 0.0, math.inf
        if node.op.startswith("aten.hardtanh"):
            return float(a.get("min_val", -1.0)), float(a.get("max_val", 1.0))
        if node.op == "aten.clamp_min.default":
            return float(a["min"]), math.inf
        lo, hi = a.get("min"), a.get("max")
        return (
            -math.inf if lo is None else float(lo),
            math.inf if hi is None else float(hi),
        )

    @staticmethod
    def clamp_codes(fmt: QFormat | None, scale: float, lo: float, hi: float) -> list[int]:
        """Real bounds ``[lo, hi]`` as bounds on codes of ``fmt`` (int32 units when None)."""
        qmin, qmax = code_range(fmt)

        def bound(x: float, default: int) -> int:
            if math.isinf(x):
                return default
            if fmt is None:
                return int(quantize_bias(np.asarray([x]), scale)[0])
            return int(quantize(np.asarray([x], dtype=np.float32), scale, fmt)[0])

        return [bound(lo, qmin), bound(hi, qmax)]

    def tensor(self, value: Value) -> torch.Tensor:
        if value.name in self.weights:
            return torch.as_tensor(self.weights[value.name]).detach()
        if value.data is not None:
            return torch.as_tensor(np.asarray(value.data))
        raise CompileError(f"weight '{value.name}' has no data; extract the IR with its weights")

    # ----------------------------------------------------------------- driver
    def run(self) -> Graph:
        for value in self.src.inputs:
            new = Value(self.fresh(value.name), value.type)
            self.dst.inputs.append(new)
            self.env[id(value)] = new
        handlers = {
            LAYER: self.lower_layer,
            ACT: self.lower_act,
            IDENTITY: self.lower_identity,
            VIEW: self.lower_view,
            PERMUTE: self.lower_permute,
            SLICE: self.lower_slice,
            MAXPOOL: self.lower_maxpool,
            AVGPOOL: self.lower_avgpool,
            MEAN: self.lower_mean,
            ADD: self.lower_add,
            CAT: self.lower_cat,
            LUT: self.lower_lut,
            MUL: self.lower_mul,
            SOFTMAX: self.lower_softmax,
            LAYERNORM: self.lower_layernorm,
            EXPAND: self.lower_expand,
            SELECT: self.lower_select,
            PAD: self.lower_pad,
            MATMUL: self.lower_matmul,
            BATCHNORM: self.reject_batchnorm,
            FLOAT_LAYER: self.reject_float_layer,
        }
        patterns = match_llama(self)  # embedding, RMSNorm, RoPE, causal softmax (LLaMa)
        for node in self.src.nodes:
            if id(node) in self.fused:
                continue
            if id(node) in patterns:
                patterns[id(node)](node)
                continue
            kind = self.kind(node)
            if kind is None:
                where = f", in {node.origin}," if node.origin else ""
                hint = (
                    "compile in dynamic mode (float C: --mode dynamic, mode='dynamic') or "
                    "replace it"
                    if find_rule(node.op, "emit") is not None
                    else "replace it"
                )
                raise UnsupportedOpError(
                    f"{node.op} at '{node.name}'{where} is not supported by the static "
                    f"(integer-only) C backend; {hint} (supported: {SUPPORTED})"
                )
            handlers[kind](node)
        self.dst.outputs = [self.output(v) for v in self.src.outputs]
        return self.dst.validate()

    def output(self, value: Value) -> Value:
        x = self.env[id(value)]
        if x.type.dtype == DataType.INT32:
            return x
        if x.qformat is None:
            raise CompileError(
                f"the graph output '{value.name}' is the float input itself; nothing to compile"
            )
        out = self.int32_value(f"{value.name}_int32", x.type.shape, x.scale or 1.0)
        spec = out_spec(None, x.scale or 1.0)
        return self.emit(f"{value.name}_widen", mico_ops.REQUANT, [x], out, {"out": spec})

    # ----------------------------------------------------------------- rejections
    @staticmethod
    def reject_batchnorm(node: Node) -> None:
        raise CompileError(
            f"{node.op} at '{node.name}' was not folded into the layer before it; fold BatchNorm "
            "with mico.quant.fuse_model(model, example) before calibrating and exporting"
        )

    @staticmethod
    def reject_float_layer(node: Node) -> None:
        weight = node.inputs[1].name if len(node.inputs) > 1 else node.name
        raise CompileError(
            f"{node.op} at '{node.name}' (weight '{weight}') is not quantized; the static C "
            "backend needs every Conv/Linear in the plan (quantize the model with a Bit* layer "
            "for it, act_mode='static', and calibrate)"
        )

    # ----------------------------------------------------------------- layers
    def lower_layer(self, node: Node) -> None:
        a = node.attrs
        layer = node.inputs[1].name.rsplit(".", 1)[0]
        where = f"layer '{layer}' ({node.op} at '{node.name}')"
        if a.get("dynamic"):
            raise CompileError(
                f"{where} quantizes its inputs dynamically; the integer-only backend needs static "
                "scales: quantize with act_mode='static' and calibrate"
            )
        in_fmt = self.layer_input_format(node)
        w_fmt = QFormat.for_bits(a["w_bits"], True)
        weight = self.tensor(node.inputs[1]).to(torch.float32)
        out_c = int(weight.shape[0])
        scales = np.asarray(a["weight_scale"], dtype=np.float64).ravel()
        if scales.size not in (1, out_c):
            raise CompileError(
                f"{where} has {scales.size} weight scales for {out_c} output channels"
            )
        per_channel = scales.size > 1
        s_b = scales.reshape(-1, *([1] * (weight.dim() - 1))) if per_channel else scales[0]
        w_codes = quantize(weight, s_b, w_fmt).to(torch.int64).numpy()
        s_acc = in_fmt[1] * scales
        bias_real = (
            self.tensor(node.inputs[2]).to(torch.float64).numpy()
            if len(node.inputs) > 2
            else np.zeros(out_c)
        )
        if per_channel:
            bias = np.concatenate(
                [quantize_bias(bias_real[c : c + 1], s_acc[c]) for c in range(out_c)]
            )
        else:
            bias = quantize_bias(bias_real, s_acc[0])
        bias = self.check_accumulator(where, w_codes, in_fmt[0], w_fmt, bias)
        x = self.layer_input(node.inputs[0], in_fmt, where)

        conv1d = node.op == "mico.bit_conv1d.default"
        linear = node.op == "mico.bit_linear.default"
        attrs: dict[str, Any] = {"layer": layer}
        if conv1d:
            n, c, length = x.type.shape
            x = self.view(x, (n, c, 1, length), f"{x.name}_2d")
            w_codes = w_codes.reshape(w_codes.shape[0], w_codes.shape[1], 1, w_codes.shape[2])
            attrs.update(
                stride=[1, *_pair(a["stride"], 1, 1)],
                padding=[0, *_pair(a["padding"], 1, 0)],
                dilation=[1, *_pair(a["dilation"], 1, 1)],
                groups=int(a["groups"]),
            )
        elif not linear:
            attrs.update(
                stride=_pair(a["stride"], 2, 1),
                padding=_pair(a["padding"], 2, 0),
                dilation=_pair(a["dilation"], 2, 1),
                groups=int(a["groups"]),
            )
        w_value = Value(
            self.fresh(f"{layer}.weight"), TensorType(w_codes.shape, codes_dtype(w_fmt)),
            data=w_codes, qformat=w_fmt, scale=float(scales.max()),
        )  # fmt: skip
        b_value = Value(
            self.fresh(f"{layer}.bias"), TensorType((out_c,), DataType.INT32), data=bias,
            scale=float(s_acc.max()),
        )  # fmt: skip

        result, lo, hi = self.fuse_activation(node.output)
        src_shape = tuple(result.type.shape)
        shape = (src_shape[0], src_shape[1], 1, src_shape[2]) if conv1d else src_shape
        op = mico_ops.QLINEAR if linear else mico_ops.QCONV2D
        attrs["relu"] = lo >= 0
        if self.feeds_output_only(result):
            # int32 result: the accumulator itself (scale s_in * s_w), rescaled to one common
            # scale when the weights have one scale per channel, clamped by a bounded activation
            attrs["requant"] = None
            acc_scale = float(s_acc[0]) if not per_channel else None
            out = self.int32_value(f"{result.name}_acc", shape, acc_scale or 1.0)
            out.scale = acc_scale
            out = self.emit(node.name, op, [x, w_value, b_value], out, attrs)
            bounded = not (lo in (-math.inf, 0.0) and math.isinf(hi))
            if per_channel or bounded:
                scale = float(s_acc.max())
                ms = shifts = None
                if per_channel:
                    pairs = [multiplier(s / scale, where) for s in s_acc]
                    ms, shifts = [p[0] for p in pairs], [p[1] for p in pairs]
                spec = out_spec(None, scale, ms, shifts, self.clamp_codes(None, scale, lo, hi))
                rescaled = self.int32_value(f"{result.name}_int32", shape, scale)
                axis = len(shape) - 1 if linear else 1
                out = self.emit(
                    f"{node.name}_rescale", mico_ops.REQUANT, [out], rescaled,
                    {"out": spec, "axis": axis},
                )  # fmt: skip
        else:
            fmt = self.pref(result)
            pairs = [multiplier(s / fmt[1], where) for s in s_acc]
            ms, shifts = [p[0] for p in pairs], [p[1] for p in pairs]
            requant = out_spec(fmt[0], fmt[1], ms, shifts, self.clamp_codes(*fmt, lo, hi))
            if not per_channel:
                requant["m"], requant["shift"] = ms[0], shifts[0]
            attrs["requant"] = requant
            out = self.emit(
                node.name, op, [x, w_value, b_value], self.codes_value(result.name, shape, fmt),
                attrs,
            )  # fmt: skip
        if conv1d:
            out = self.view(out, src_shape, f"{out.name}_1d")
        self.env[id(result)] = out

    @staticmethod
    def check_accumulator(
        where: str, w_codes: np.ndarray, a_fmt: QFormat, w_fmt: QFormat, bias: np.ndarray
    ) -> np.ndarray:
        """The bias the int32 accumulator can hold next to its worst-case sum of products.

        Products that alone could overflow are a CompileError. A bias too large for the
        headroom they leave (an input scale so small that ``bias / (s_in * s_w)`` leaves int32:
        the calibration saw the signal vanish) is saturated, with a warning: the C and its
        Python reference then agree, but the layer loses part of its bias.
        """
        per_output = int(np.prod(w_codes.shape[1:]))
        a_max = max(abs(a_fmt.qmin), a_fmt.qmax)
        w_max = max(abs(w_fmt.qmin), w_fmt.qmax)
        products = per_output * a_max * w_max
        if products > INT32_MAX:
            raise CompileError(
                f"{where} could overflow its int32 accumulator: |acc| can reach {products} > "
                f"2**31-1 ({per_output} products of {a_fmt} inputs and {w_fmt} weights); lower "
                "its bit-widths or its fan-in"
            )
        limit = INT32_MAX - products
        b_max = int(np.max(np.abs(bias), initial=0))
        if b_max > limit:
            warnings.warn(
                f"{where}: its bias needs up to {b_max} units of the accumulator scale, more than "
                f"the {limit} the int32 accumulator has left beside {per_output} products of "
                f"{a_fmt} inputs and {w_fmt} weights; the bias is saturated to +-{limit}. The "
                "input scale is tiny (the calibration saw nearly no signal reach this layer): "
                "calibrate on representative data or widen the layers before it",
                stacklevel=2,
            )
            return np.clip(bias, -limit, limit)
        return bias

    # ----------------------------------------------------------------- elementwise, views
    def lower_act(self, node: Node) -> None:
        """An activation that could not be fused: a clamp on codes (often a no-op)."""
        where = f"{node.op} at '{node.name}'"
        x = self.env[id(node.inputs[0])]
        if x.qformat is None and x.type.dtype.is_float:
            x = self.codes(node.inputs[0], where)
        fmt = x.qformat
        lo, hi = self.act_bounds(node)
        clamp = self.clamp_codes(fmt, x.scale or 1.0, lo, hi)
        full = code_range(fmt)
        if clamp[0] <= full[0] and clamp[1] >= full[1]:
            self.env[id(node.output)] = x  # the codes cannot leave the bounds anyway
            return
        clamp = [max(clamp[0], full[0]), min(clamp[1], full[1])]
        out = Value(
            self.fresh(node.output.name), TensorType(x.type.shape, x.type.dtype), qformat=fmt,
            scale=x.scale,
        )  # fmt: skip
        spec = out_spec(fmt, x.scale or 1.0, clamp=clamp)
        self.env[id(node.output)] = self.emit(node.name, mico_ops.REQUANT, [x], out, {"out": spec})

    def lower_lut(self, node: Node) -> None:
        """An elementwise function as a table: the output code of every possible input code,
        computed here in float32 and quantized with mico's arithmetic, so the C kernel (a
        lookup) and the reference (the same lookup) agree by construction."""
        where = f"{node.op} at '{node.name}'"
        x = self.codes(node.inputs[0], where)
        fmt_in, s_in = x.qformat, x.scale or 1.0
        assert fmt_in is not None
        lo, hi = code_range(fmt_in)
        inputs = torch.arange(lo, hi + 1, dtype=torch.float32) * torch.tensor(
            s_in, dtype=torch.float32
        )
        with torch.no_grad():
            reals = LUT_FUNCTIONS[node.op](inputs, node.attrs).to(torch.float32)
        fmt_out, s_out = self.pref(node.output)
        table = quantize(reals.numpy(), s_out, fmt_out).astype(np.int64)
        out = self.codes_value(node.output.name, node.output.type.shape, (fmt_out, s_out))
        attrs = {"table": [int(v) for v in table], "in_min": int(lo),
                 "out": out_spec(fmt_out, s_out)}  # fmt: skip
        self.env[id(node.output)] = self.emit(node.name, mico_ops.LUT, [x], out, attrs)

    def _product_out(self, node: Node, real: float, shape: Sequence[Any]) -> tuple[Value, dict]:
        """The result of a product whose unit is ``real``: codes in the output's format (int32
        when it only feeds the graph output), with the multiplier that rescales it."""
        where = f"{node.op} at '{node.name}'"
        if self.feeds_output_only(node.output):
            out = self.int32_value(node.output.name, shape, real)
            return out, {"out": out_spec(None, real)}
        fmt, scale = self.pref(node.output)
        m, shift = multiplier(real / scale, where)
        out = self.codes_value(node.output.name, shape, (fmt, scale))
        return out, {"out": out_spec(fmt, scale, [m], [shift])}

    #: fixed-point fractional bits of LayerNorm's normalised value and of gamma
    LN_FRAC, LN_GAMMA_FRAC = 16, 12

    def lower_layernorm(self, node: Node) -> None:
        """Integer LayerNorm over the last dimension (see mico_ops.layernorm_codes)."""
        where = f"{node.op} at '{node.name}'"
        shape = tuple(node.output.type.shape)
        n = int(shape[-1])
        normalized = [int(d) for d in node.attrs.get("normalized_shape", [n])]
        if normalized != [n]:
            raise UnsupportedOpError(
                f"{where} normalises over {normalized}; the static mode takes the last dim only"
            )
        x = self.codes(node.inputs[0], where)
        s = x.scale or 1.0
        gamma = (self.tensor(node.inputs[1]).double().numpy() if len(node.inputs) > 1
                 and node.inputs[1] is not None else np.ones(n))  # fmt: skip
        beta = (self.tensor(node.inputs[2]).double().numpy() if len(node.inputs) > 2
                and node.inputs[2] is not None else np.zeros(n))  # fmt: skip
        fmt, s_out = self.pref(node.output)
        frac, gfrac = self.LN_FRAC, self.LN_GAMMA_FRAC
        eps = float(node.attrs.get("eps", 1e-5))
        eps_q = min(round(eps * n**3 / (s * s)), 2**62)
        attrs = {
            "eps_q": int(eps_q),
            "k": round(math.sqrt(n) * 2**frac),
            "g": [round(v) for v in gamma / s_out * 2**gfrac],
            "b": [round(v) for v in beta / s_out * 2 ** (frac + gfrac)],
            "shift": frac + gfrac,
            "clamp": list(code_range(fmt)),
        }
        if fmt.binary:  # the sign, not a clamp to [-1, 1]: 0 is no binary code
            attrs["binary"] = True
        out = self.codes_value(node.output.name, shape, (fmt, s_out))
        self.env[id(node.output)] = self.emit(node.name, mico_ops.QLAYERNORM, [x], out, attrs)

    def lower_softmax(self, node: Node) -> None:
        """Integer softmax over the last dimension (see mico_ops.softmax_codes): probabilities
        as unsigned codes of scale 1 / qmax."""
        where = f"{node.op} at '{node.name}'"
        rank = len(node.output.type.shape)
        dim = _norm_dim(int(node.attrs.get("dim", -1)), rank)
        if dim != rank - 1:
            raise UnsupportedOpError(f"{where} is over dim {dim}; the static mode takes the last")
        if node.attrs.get("half_to_float"):
            raise UnsupportedOpError(f"{where} converts half to float; not supported")
        x = self.codes(node.inputs[0], where)
        fmt_in, s_in = x.qformat, x.scale or 1.0
        assert fmt_in is not None
        distances = np.arange(fmt_in.qmax - fmt_in.qmin + 1, dtype=np.float64)
        exp_q15 = np.floor(np.exp(-distances * s_in) * 2**15 + 0.5).astype(np.int64)
        exp_q15 = np.maximum(exp_q15, 0)
        hard, _ = self.demands(node.output)
        bits = max((f[0].bits for f in hard), default=self.free_bits)
        fmt_out = QFormat(bits, False)
        out = self.codes_value(node.output.name, node.output.type.shape,
                               (fmt_out, 1.0 / fmt_out.qmax))  # fmt: skip
        attrs = {"exp_q15": [int(v) for v in exp_q15], "qmax": int(fmt_out.qmax)}
        self.env[id(node.output)] = self.emit(node.name, mico_ops.QSOFTMAX, [x], out, attrs)

    def lower_mul(self, node: Node) -> None:
        """Product of two same-shape activations (a gate), or of one by a positive constant
        (a scale, folded into a requantization)."""
        where = f"{node.op} at '{node.name}'"
        shape = tuple(node.output.type.shape)
        if len(node.inputs) == 1:  # x * constant
            factor = node.attrs.get("other")
            if not isinstance(factor, int | float) or not factor > 0:
                raise UnsupportedOpError(
                    f"{where} multiplies by {factor!r}; the static mode takes a positive "
                    "constant or a second activation of the same shape"
                )
            x = self.codes(node.inputs[0], where)
            fmt, scale = self.pref(node.output)
            m, shift = multiplier((x.scale or 1.0) * float(factor) / scale, where)
            out = self.codes_value(node.output.name, shape, (fmt, scale))
            attrs = {"out": out_spec(fmt, scale, [m], [shift])}
            self.env[id(node.output)] = self.emit(node.name, mico_ops.REQUANT, [x], out, attrs)
            return
        a_src, b_src = node.inputs
        if tuple(a_src.type.shape) != shape or tuple(b_src.type.shape) != shape:
            raise UnsupportedOpError(
                f"{where} broadcasts {a_src.type.shape} and {b_src.type.shape}; the static mode "
                "multiplies same-shape activations"
            )
        qa, qb = self.codes(a_src, where), self.codes(b_src, where)
        out, attrs = self._product_out(node, (qa.scale or 1.0) * (qb.scale or 1.0), shape)
        self.env[id(node.output)] = self.emit(node.name, mico_ops.QMUL, [qa, qb], out, attrs)

    def lower_matmul(self, node: Node) -> None:
        """``a @ b`` of two activations with the same leading (batch) dimensions."""
        where = f"{node.op} at '{node.name}'"
        if len(node.inputs) != 2:
            raise UnsupportedOpError(f"{where} multiplies by a constant matrix; use nn.Linear")
        a_src, b_src = node.inputs
        sa, sb = tuple(a_src.type.shape), tuple(b_src.type.shape)
        if len(sa) < 2 or len(sa) != len(sb) or sa[:-2] != sb[:-2] or sa[-1] != sb[-2]:
            raise UnsupportedOpError(
                f"{where} multiplies {sa} by {sb}; the static mode needs matrices with equal "
                "leading dimensions (no broadcasting)"
            )
        qa, qb = self.codes(a_src, where), self.codes(b_src, where)
        shape = tuple(node.output.type.shape)
        out, attrs = self._product_out(node, (qa.scale or 1.0) * (qb.scale or 1.0), shape)
        self.env[id(node.output)] = self.emit(node.name, mico_ops.QMATMUL, [qa, qb], out, attrs)

    def lower_identity(self, node: Node) -> None:
        self.env[id(node.output)] = self.env[id(node.inputs[0])]

    def lower_view(self, node: Node) -> None:
        x = self.env[id(node.inputs[0])]
        self.env[id(node.output)] = self.view(x, node.output.type.shape, node.output.name)

    def permuted(self, x: Value, perm: list[int], name: str) -> Value:
        """``x`` (codes) with its dims reordered by ``perm`` (batch first): one strided copy."""
        strides = _contiguous_strides(x.type.shape[1:])
        shape = [int(x.type.shape[p]) for p in perm[1:]]
        attrs = {"shape": shape, "strides": [strides[p - 1] for p in perm[1:]], "offset": 0,
                 "out": None}  # fmt: skip
        fmt = (x.qformat, x.scale)
        out = self.codes_value(name, (int(x.type.shape[0]), *shape), fmt)  # type: ignore[arg-type]
        return self.emit(name, mico_ops.COPY, [x], out, attrs)

    def lower_permute(self, node: Node) -> None:
        where = f"{node.op} at '{node.name}'"
        x = self.codes(node.inputs[0], where)
        rank = len(x.type.shape)
        if node.op == "aten.transpose.int":
            d0 = _norm_dim(int(node.attrs["dim0"]), rank)
            d1 = _norm_dim(int(node.attrs["dim1"]), rank)
            perm = list(range(rank))
            perm[d0], perm[d1] = perm[d1], perm[d0]
        elif node.op == "aten.t.default":
            perm = list(range(rank))[::-1]
        else:
            perm = [_norm_dim(int(d), rank) for d in node.attrs["dims"]]
        if perm[0] != 0:
            raise UnsupportedOpError(f"{where} moves the batch dimension; only per-sample "
                                     "permutations are supported")  # fmt: skip
        strides = _contiguous_strides(x.type.shape[1:])
        shape = [int(x.type.shape[p]) for p in perm[1:]]
        attrs = {"shape": shape, "strides": [strides[p - 1] for p in perm[1:]], "offset": 0,
                 "out": None}  # fmt: skip
        fmt = (x.qformat, x.scale)
        out = self.codes_value(node.output.name, node.output.type.shape, fmt)  # type: ignore[arg-type]
        self.env[id(node.output)] = self.emit(node.name, mico_ops.COPY, [x], out, attrs)

    def lower_expand(self, node: Node) -> None:
        """``expand`` to the batch size: per sample a no-op (the C program runs one sample)."""
        where = f"{node.op} at '{node.name}'"
        src, out = node.inputs[0], node.output
        if tuple(src.type.shape[1:]) != tuple(out.type.shape[1:]) or src.type.shape[0] != 1:
            raise UnsupportedOpError(
                f"{where} expands {src.type.shape} to {out.type.shape}; the static mode expands "
                "only the batch dimension"
            )
        self.env[id(out)] = self.codes(src, where)

    def lower_pad(self, node: Node) -> None:
        """``F.pad`` (constant, reflect, replicate, circular) as a gather of codes: the output
        keeps the input's format, the fill value becomes its code."""
        from mico.codegen.padding import pad_index

        where = f"{node.op} at '{node.name}'"
        x = self.codes(node.inputs[0], where)
        mode = node.attrs.get("mode") or "constant"
        index = pad_index(x.type.shape[1:], node.attrs["pad"], mode, where)
        fmt, scale = x.qformat, x.scale or 1.0
        assert fmt is not None
        value = float(node.attrs.get("value") or 0.0)
        fill = int(quantize(np.array([value]), scale, fmt)[0])
        shape = [int(d) for d in node.output.type.shape[1:]]
        attrs = {"index": [int(i) for i in index], "fill": fill, "shape": shape}
        out = self.codes_value(node.output.name, node.output.type.shape, (fmt, scale))
        self.env[id(node.output)] = self.emit(node.name, mico_ops.GATHER, [x], out, attrs)

    def lower_select(self, node: Node) -> None:
        """``x[:, i]``: one index of a dimension (a strided copy of codes)."""
        where = f"{node.op} at '{node.name}'"
        x = self.codes(node.inputs[0], where)
        rank = len(x.type.shape)
        dim = _norm_dim(int(node.attrs.get("dim", 0)), rank)
        if dim == 0:
            raise UnsupportedOpError(f"{where} selects along the batch dimension")
        size = int(x.type.shape[dim])
        index = int(node.attrs.get("index", 0))
        index = index + size if index < 0 else index
        strides = _contiguous_strides(x.type.shape[1:])
        offset = index * strides[dim - 1]
        del strides[dim - 1]
        shape = [int(d) for d in node.output.type.shape[1:]]
        fmt = self.pref(node.output)
        spec = None
        if fmt != (x.qformat, x.scale):
            m, shift = multiplier((x.scale or 1.0) / fmt[1], where)
            spec = out_spec(fmt[0], fmt[1], [m], [shift])
        attrs = {"shape": shape, "strides": strides, "offset": offset, "out": spec}
        out = self.codes_value(node.output.name, node.output.type.shape, fmt)
        self.env[id(node.output)] = self.emit(node.name, mico_ops.COPY, [x], out, attrs)

    def lower_slice(self, node: Node) -> None:
        where = f"{node.op} at '{node.name}'"
        x = self.codes(node.inputs[0], where)
        rank = len(x.type.shape)
        dim = _norm_dim(int(node.attrs.get("dim", 0)), rank)
        if dim == 0:
            raise UnsupportedOpError(f"{where} slices the batch dimension")
        size = int(x.type.shape[dim])
        start, end = node.attrs.get("start"), node.attrs.get("end")
        step = int(node.attrs.get("step", 1) or 1)
        start = 0 if start is None else int(start)
        end = size if end is None else int(end)
        start = min(max(start + size if start < 0 else start, 0), size)
        end = min(max(end + size if end < 0 else end, 0), size)
        strides = _contiguous_strides(x.type.shape[1:])
        offset = start * strides[dim - 1]
        strides[dim - 1] *= step
        shape = [int(d) for d in node.output.type.shape[1:]]
        fmt = self.pref(node.output)
        spec = None
        if fmt != (x.qformat, x.scale):
            m, shift = multiplier((x.scale or 1.0) / fmt[1], where)
            spec = out_spec(fmt[0], fmt[1], [m], [shift])
        else:
            fmt = (x.qformat, x.scale)  # type: ignore[assignment]
        attrs = {"shape": shape, "strides": strides, "offset": offset, "out": spec}
        out = self.codes_value(node.output.name, node.output.type.shape, fmt)
        self.env[id(node.output)] = self.emit(node.name, mico_ops.COPY, [x], out, attrs)

    # ----------------------------------------------------------------- pooling
    def lower_maxpool(self, node: Node) -> None:
        where = f"{node.op} at '{node.name}'"
        a = node.attrs
        if a.get("ceil_mode"):
            raise UnsupportedOpError(f"{where} uses ceil_mode=True; use ceil_mode=False")
        x = self.codes(node.inputs[0], where)
        one_d = node.op == "aten.max_pool1d.default"
        n = 1 if one_d else 2
        kernel = _pair(a["kernel_size"], n, 1)
        stride = _pair(a.get("stride"), n, 0)
        stride = kernel if not any(stride) else stride
        padding = _pair(a.get("padding"), n, 0)
        dilation = _pair(a.get("dilation"), n, 1)
        shape = tuple(node.output.type.shape)
        if one_d:
            batch, c, length = x.type.shape
            x = self.view(x, (batch, c, 1, length), f"{x.name}_2d")
            kernel, stride = [1, *kernel], [1, *stride]
            padding, dilation = [0, *padding], [1, *dilation]
            shape = (shape[0], shape[1], 1, shape[2])
        attrs = {"kernel_size": kernel, "stride": stride, "padding": padding,
                 "dilation": dilation}  # fmt: skip
        out = Value(
            self.fresh(node.output.name if not one_d else f"{node.output.name}_2d"),
            TensorType(shape, x.type.dtype), qformat=x.qformat, scale=x.scale,
        )  # fmt: skip
        out = self.emit(node.name, mico_ops.MAXPOOL2D, [x], out, attrs)
        if one_d:
            out = self.view(out, node.output.type.shape, node.output.name)
        self.env[id(node.output)] = out

    def lower_avgpool(self, node: Node, kernel: list[int] | None = None) -> None:
        """Average pooling: window sums, then one multiplier per window size (padded windows
        of ``count_include_pad=False`` average fewer inputs)."""
        where = f"{node.op} at '{node.name}'"
        a = node.attrs
        src = node.inputs[0]
        one_d = len(src.type.shape) == 3
        n = 1 if one_d else 2
        if a.get("ceil_mode"):
            raise UnsupportedOpError(f"{where} uses ceil_mode=True; use ceil_mode=False")
        if kernel is None:
            kernel = _pair(a["kernel_size"], n, 1)
            stride = _pair(a.get("stride"), n, 0)
            stride = kernel if not any(stride) else stride
            padding = _pair(a.get("padding"), n, 0)
        else:  # adaptive pooling with output sizes that divide the input
            stride, padding = list(kernel), [0] * n
        include_pad = bool(a.get("count_include_pad", True))
        divisor = a.get("divisor_override")
        x = self.codes(src, where)
        shape = tuple(node.output.type.shape)
        if one_d:
            batch, c, length = x.type.shape
            x = self.view(x, (batch, c, 1, length), f"{x.name}_2d")
            kernel, stride, padding = [1, *kernel], [1, *stride], [0, *padding]
            shape = (shape[0], shape[1], 1, shape[2])
        window = kernel[0] * kernel[1]
        # the divisor of a window that covers `count` inputs (index count - 1)
        divisors = [
            int(divisor) if divisor else (window if include_pad else count)
            for count in range(1, window + 1)
        ]
        result, lo, hi = self.fuse_activation(node.output)
        s_in = x.scale or 1.0
        if self.feeds_output_only(result):
            fmt: QFormat | None = None
            scale = s_in / max(divisors)
        else:
            fmt, scale = self.pref(result)
        pairs = [multiplier(s_in / (d * scale), where) for d in divisors]
        spec = out_spec(fmt, scale, [p[0] for p in pairs], [p[1] for p in pairs],
                        self.clamp_codes(fmt, scale, lo, hi))  # fmt: skip
        attrs = {"kernel_size": kernel, "stride": stride, "padding": padding,
                 "count_include_pad": include_pad, "out": spec}  # fmt: skip
        name = result.name if not one_d else f"{result.name}_2d"
        out = (
            self.int32_value(name, shape, scale)
            if fmt is None
            else self.codes_value(name, shape, (fmt, scale))
        )
        out = self.emit(node.name, mico_ops.AVGPOOL2D, [x], out, attrs)
        if one_d:
            out = self.view(out, result.type.shape, result.name)
        self.env[id(result)] = out

    def lower_adaptive_uneven(self, node: Node, spatial: list[int], size: list[int]) -> None:
        """Adaptive average pooling whose windows differ in size (torch's floor/ceil bounds)."""
        where = f"{node.op} at '{node.name}'"
        src = node.inputs[0]
        x = self.codes(src, where)
        one_d = len(spatial) == 1
        if one_d:
            batch, c, length = x.type.shape
            x = self.view(x, (batch, c, 1, length), f"{x.name}_2d")
            spatial, size = [1, *spatial], [1, *size]
        rows = mico_ops.adaptive_bounds(spatial[0], size[0])
        cols = mico_ops.adaptive_bounds(spatial[1], size[1])
        biggest = max(e - s for s, e in zip(*rows, strict=True)) * max(
            e - s for s, e in zip(*cols, strict=True)
        )
        result, lo, hi = self.fuse_activation(node.output)
        s_in = x.scale or 1.0
        if self.feeds_output_only(result):
            fmt: QFormat | None = None
            scale = s_in / biggest
        else:
            fmt, scale = self.pref(result)
        pairs = [multiplier(s_in / (count * scale), where) for count in range(1, biggest + 1)]
        spec = out_spec(fmt, scale, [p[0] for p in pairs], [p[1] for p in pairs],
                        self.clamp_codes(fmt, scale, lo, hi))  # fmt: skip
        shape = (x.type.shape[0], x.type.shape[1], size[0], size[1])
        name = result.name if not one_d else f"{result.name}_2d"
        out = (
            self.int32_value(name, shape, scale)
            if fmt is None
            else self.codes_value(name, shape, (fmt, scale))
        )
        attrs = {"rows": [list(rows[0]), list(rows[1])], "cols": [list(cols[0]), list(cols[1])],
                 "out": spec}  # fmt: skip
        out = self.emit(node.name, mico_ops.ADAPTAVG, [x], out, attrs)
        if one_d:
            out = self.view(out, result.type.shape, result.name)
        self.env[id(result)] = out

    def lower_mean(self, node: Node) -> None:
        where = f"{node.op} at '{node.name}'"
        src = node.inputs[0]
        rank = len(src.type.shape)
        if node.op == "aten.mean.dim":
            dims = sorted({_norm_dim(int(d), rank) for d in (node.attrs.get("dim") or [])})
            if not dims:
                dims = list(range(1, rank))
        else:
            size = _pair(node.attrs.get("output_size"), rank - 2, 1)
            if any(s != 1 for s in size):
                spatial = [int(d) for d in src.type.shape[2:]]
                if any(d % o for d, o in zip(spatial, size, strict=True)):
                    self.lower_adaptive_uneven(node, spatial, size)
                    return
                kernel = [d // o for d, o in zip(spatial, size, strict=True)]
                self.lower_avgpool(node, kernel=kernel)
                return
            dims = list(range(2, rank))
        if not dims or dims[0] == 0:
            raise UnsupportedOpError(
                f"{where} averages over dims {dims}, the batch dimension included; only "
                "per-sample means are supported"
            )
        x = self.codes(src, where)
        count = int(np.prod([int(src.type.shape[d]) for d in dims]))
        result, lo, hi = self.fuse_activation(node.output)
        s_in = x.scale or 1.0
        shape = tuple(result.type.shape)
        final_shape = None
        if dims != list(range(dims[0], rank)):  # e.g. mean over tokens of (B, T, D)
            kept = [d for d in range(1, rank) if d not in dims]
            x = self.permuted(x, [0, *kept, *dims], f"{node.name}_to_last")
            dims = list(range(1 + len(kept), rank))
            final_shape = shape
            shape = (int(src.type.shape[0]), *(int(src.type.shape[d]) for d in kept))
        if self.feeds_output_only(result):
            scale = s_in / count
            spec = out_spec(None, scale, clamp=self.clamp_codes(None, scale, lo, hi))
            out = self.int32_value(result.name, shape, scale)
        else:
            fmt = self.pref(result)
            m, shift = multiplier(s_in / (count * fmt[1]), where)
            spec = out_spec(fmt[0], fmt[1], [m], [shift], self.clamp_codes(*fmt, lo, hi))
            out = self.codes_value(result.name, shape, fmt)
        attrs = {"dims": dims, "count": count, "keepdim": len(shape) == rank, "out": spec}
        mean = self.emit(node.name, mico_ops.MEAN, [x], out, attrs)
        if final_shape is not None and tuple(final_shape) != tuple(shape):
            mean = self.view(mean, final_shape, result.name)  # the kept dims, in their order
        self.env[id(result)] = mean

    # ----------------------------------------------------------------- add, cat
    def lower_add(self, node: Node) -> None:
        where = f"{node.op} at '{node.name}'"
        if len(node.inputs) != 2:
            raise UnsupportedOpError(f"{where} adds a constant; only tensor + tensor is supported")
        if node.attrs.get("alpha", 1) != 1:
            raise UnsupportedOpError(f"{where} has alpha={node.attrs['alpha']}; only 1")
        a_src, b_src = node.inputs
        shape = tuple(node.output.type.shape)
        if tuple(a_src.type.shape) != shape or tuple(b_src.type.shape) != shape:
            raise UnsupportedOpError(
                f"{where} broadcasts {a_src.type.shape} and {b_src.type.shape}; only adds of "
                "same-shape tensors (residual connections) are supported"
            )
        qa, qb = self.codes(a_src, where), self.codes(b_src, where)
        result, lo, hi = self.fuse_activation(node.output)
        s_a, s_b = qa.scale or 1.0, qb.scale or 1.0
        if self.feeds_output_only(result):
            fmt: QFormat | None = None
            scale = min(s_a, s_b)
            out = self.int32_value(result.name, shape, scale)
        else:
            fmt, scale = self.pref(result)
            out = self.codes_value(result.name, shape, (fmt, scale))
        ms, shift = shared_multipliers([s_a / scale, s_b / scale], where)
        attrs = {"m": ms, "shift": shift, "qformat": fmt, "scale": scale,
                 "clamp": self.clamp_codes(fmt, scale, lo, hi)}  # fmt: skip
        self.env[id(result)] = self.emit(node.name, mico_ops.ADD, [qa, qb], out, attrs)

    def lower_cat(self, node: Node) -> None:
        where = f"{node.op} at '{node.name}'"
        rank = len(node.output.type.shape)
        dim = _norm_dim(int(node.attrs.get("dim", 0)), rank)
        if dim == 0:
            raise UnsupportedOpError(f"{where} concatenates along the batch dimension")
        parts = [self.codes(v, where) for v in node.inputs]
        fmt = self.pref(node.output)
        specs: list[dict[str, int] | None] = []
        for p in parts:
            if (p.qformat, p.scale) == fmt:
                specs.append(None)
            else:
                m, shift = multiplier((p.scale or 1.0) / fmt[1], where)
                specs.append({"m": m, "shift": shift})
        attrs = {"dim": dim, "parts": specs, "qformat": fmt[0], "scale": fmt[1]}
        out = self.codes_value(node.output.name, node.output.type.shape, fmt)
        self.env[id(node.output)] = self.emit(node.name, mico_ops.CONCAT, parts, out, attrs)


def lower_static(
    ir: Graph,
    calibration: Sequence[Any],
    *,
    free_bits: int | None = None,
    inplace: bool = True,
) -> Graph:
    """The integer-only ``mico.*`` graph of a calibrated static-mode model's IR.

    ``ir`` comes from :func:`mico.ir.extract_ir` on a model whose Bit* layers use static,
    calibrated activation scales (BN folded). ``calibration`` are input batches (or samples)
    on which the float graph is run to choose the scales of tensors no layer dictates;
    ``free_bits`` is their bit-width (default: the widest activation width of the plan). See
    the module docstring for the formats and ops. With ``inplace``, kernels that can write
    their output over an input that dies there are marked to (:mod:`mico.passes.inplace`).
    """
    graph = _StaticLowering(ir, calibration, free_bits).run()
    if inplace:
        mark_inplace(graph)
    return graph
