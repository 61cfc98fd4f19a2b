"""Lower an exported FP32 graph to quantized ``mico.*`` ops (static, integer-only).

The first, per-tensor version of the static lowering, kept for its API (``LayerQuant``,
``lower_quantized``); :func:`mico.passes.lower_static` supersedes it (the whole zoo, per-channel
weights, residual adds, concat, pooling) and is what :func:`mico.pipeline.lower_model` uses.

* The graph input is quantized once (``mico.quantize``) to the first layer's input codes.
* Each Conv2d / Linear becomes ``mico.qconv2d`` / ``mico.qlinear`` on integer codes with packed
  integer weights and an int32 bias; a ReLU that follows it is fused.
* Its int32 accumulator is requantized straight to the input codes of the next quantized layer
  (max-pooling and reshapes in between commute with that monotonic rescaling), or kept as int32
  when it reaches the graph output.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mico.errors import CompileError, UnsupportedOpError
from mico.ir.dtypes import DataType
from mico.ir.graph import Graph, Node, Value
from mico.ir.ops import mico_ops
from mico.ir.types import TensorType
from mico.quant.arithmetic import INT32_MAX, QFormat, quantize_bias, quantize_multiplier
from mico.quant.layers import BitLayer

CONV = "aten.conv2d.default"
LINEAR = "aten.linear.default"
RELU = "aten.relu.default"
MAXPOOL = "aten.max_pool2d.default"
RESHAPES = ("aten.flatten.using_ints", "aten.view.default", "aten.reshape.default")
PASS_THROUGH = (MAXPOOL, RELU, *RESHAPES)


@dataclass(frozen=True)
class LayerQuant:
    """The calibrated quantization of one layer, as the lowering needs it."""

    name: str
    w_fmt: QFormat
    a_fmt: QFormat
    weight_scale: float
    act_scale: float
    weight_codes: np.ndarray
    bias: np.ndarray | None

    @classmethod
    def from_layer(cls, name: str, layer: BitLayer) -> LayerQuant:
        if layer.qconfig.act_mode != "static":
            raise CompileError(
                f"layer '{name}' quantizes its inputs dynamically; the integer-only C backend "
                "needs static scales: quantize with QuantConfig(act_mode='static') and calibrate"
            )
        if not layer.calibrated:
            raise CompileError(f"layer '{name}' is not calibrated; run mico.quant.calibrate first")
        if layer.qconfig.per_channel:
            raise CompileError(
                f"layer '{name}' has per-channel weight scales, which the C backend does not "
                "lower yet; use QuantConfig(weight_granularity='tensor')"
            )
        bias = None if layer.bias is None else layer.bias.detach().numpy().astype(np.float64)
        return cls(
            name,
            layer.w_fmt,
            layer.a_fmt,
            float(layer.weight_scale),
            float(layer.act_scale),
            layer.weight_codes(),
            bias,
        )


def _codes_dtype(fmt: QFormat) -> DataType:
    return DataType.int(fmt.bits) if fmt.signed else DataType.uint(fmt.bits)


class _Lowering:
    def __init__(self, graph: Graph, layers: dict[str, LayerQuant]) -> None:
        self.src = graph
        self.layers = layers
        self.dst = Graph(graph.name)
        self.map: dict[int, Value] = {}
        self.fused_relu: set[int] = set()

    def layer_of(self, node: Node) -> LayerQuant:
        weight = node.inputs[1]
        name = weight.name.rsplit(".", 1)[0]
        if name not in self.layers:
            raise CompileError(
                f"{node.op} at '{node.name}' (layer '{name}') has no quantization parameters; "
                "every Conv2d/Linear must be in the plan and calibrated"
            )
        return self.layers[name]

    def destinations(self, value: Value) -> set[object]:
        """Where ``value`` flows through pass-through ops: quantized layers and/or the output."""
        found: set[object] = set()
        if any(value is out for out in self.src.outputs):
            found.add("output")
        for consumer in self.src.consumers(value):
            if consumer.op in (CONV, LINEAR) and consumer.inputs[0] is value:
                layer = self.layer_of(consumer)
                found.add((layer.a_fmt, layer.act_scale))
            elif consumer.op in PASS_THROUGH:
                found |= self.destinations(consumer.output)
            else:
                raise UnsupportedOpError(
                    f"{consumer.op} at '{consumer.name}' is not supported by the quantized C "
                    "backend yet (supported: conv2d, linear, relu, max_pool2d, flatten/view)"
                )
        if len(found) != 1:
            raise CompileError(
                f"the output of '{value.name}' feeds {len(found)} differently quantized uses; "
                "this version needs one activation format per tensor"
            )
        return found

    def run(self) -> Graph:
        for value in self.src.inputs:
            new = Value(value.name, value.type)
            self.dst.inputs.append(new)
            self.map[id(value)] = new
        for node in self.src.nodes:
            if id(node) in self.fused_relu:
                continue
            if node.op in (CONV, LINEAR):
                self.lower_layer(node)
            elif node.op == MAXPOOL:
                self.lower_maxpool(node)
            elif node.op in RESHAPES:
                x = self.map[id(node.inputs[0])]
                out = Value(
                    node.name,
                    TensorType(node.output.type.shape, x.type.dtype),
                    qformat=x.qformat,
                    scale=x.scale,
                    alias_of=x,
                )
                self.emit(node, mico_ops.RESHAPE, [x], out, {"shape": list(out.type.shape)})
            elif node.op == RELU:
                raise UnsupportedOpError(
                    f"ReLU at '{node.name}' does not directly follow a Conv2d/Linear; only fused "
                    "ReLU is supported in this version"
                )
            else:
                raise UnsupportedOpError(
                    f"{node.op} at '{node.name}' is not supported by the quantized C backend yet "
                    "(supported: conv2d, linear, relu, max_pool2d, flatten/view)"
                )
        self.dst.outputs = [self.map[id(v)] for v in self.src.outputs]
        return self.dst.validate()

    def emit(self, src: Node, op: str, inputs: list[Value], out: Value, attrs: dict) -> None:
        self.dst.add(Node(src.name, op, inputs, [out], attrs))
        self.map[id(src.output)] = out

    def quantized_input(self, node: Node, layer: LayerQuant) -> Value:
        x = self.map[id(node.inputs[0])]
        if x.qformat is None:
            if not x.type.dtype.is_float:
                raise CompileError(f"input of '{node.name}' is {x.type.dtype}, expected float32")
            codes = Value(
                f"{x.name}_q",
                TensorType(x.type.shape, _codes_dtype(layer.a_fmt)),
                qformat=layer.a_fmt,
                scale=layer.act_scale,
            )
            self.dst.add(
                Node(
                    f"{x.name}_quantize",
                    mico_ops.QUANTIZE,
                    [x],
                    [codes],
                    {"scale": layer.act_scale, "qformat": layer.a_fmt},
                )
            )
            self.map[id(node.inputs[0])] = codes
            return codes
        if x.qformat != layer.a_fmt or x.scale != layer.act_scale:
            raise CompileError(f"input codes of '{node.name}' do not match layer '{layer.name}'")
        return x

    def lower_layer(self, node: Node) -> None:
        layer = self.layer_of(node)
        x = self.quantized_input(node, layer)
        consumers = self.src.consumers(node.output)
        relu = (
            len(consumers) == 1
            and consumers[0].op == RELU
            and not any(node.output is o for o in self.src.outputs)
        )
        result = consumers[0].output if relu else node.output
        if relu:
            self.fused_relu.add(id(consumers[0]))
        acc_scale = layer.act_scale * layer.weight_scale
        weight = Value(
            f"{layer.name}.weight",
            TensorType(layer.weight_codes.shape, _codes_dtype(layer.w_fmt)),
            data=layer.weight_codes,
            qformat=layer.w_fmt,
            scale=layer.weight_scale,
        )
        out_features = layer.weight_codes.shape[0]
        bias_real = layer.bias if layer.bias is not None else np.zeros(out_features)
        bias = Value(
            f"{layer.name}.bias",
            TensorType((out_features,), DataType.INT32),
            data=quantize_bias(bias_real, acc_scale),
            scale=acc_scale,
        )
        self.check_accumulator(layer, bias.data)
        (dest,) = self.destinations(result)
        attrs: dict = {"layer": layer.name, "relu": relu, "requant": None}
        if dest == "output":
            out = Value(result.name, TensorType(result.type.shape, DataType.INT32), scale=acc_scale)
        else:
            fmt, scale = dest
            m, shift = quantize_multiplier(acc_scale / scale)
            attrs["requant"] = {"qformat": fmt, "scale": scale, "m": m, "shift": shift}
            out = Value(
                result.name,
                TensorType(result.type.shape, _codes_dtype(fmt)),
                qformat=fmt,
                scale=scale,
            )
        if node.op == CONV:
            attrs.update({k: list(node.attrs[k]) for k in ("stride", "padding", "dilation")})
            attrs["groups"] = int(node.attrs["groups"])
            op = mico_ops.QCONV2D
        else:
            op = mico_ops.QLINEAR
        self.dst.add(Node(node.name, op, [x, weight, bias], [out], attrs))
        self.map[id(result)] = out

    def check_accumulator(self, layer: LayerQuant, bias: np.ndarray) -> None:
        per_output = int(np.prod(layer.weight_codes.shape[1:]))
        bound = per_output * max(abs(layer.a_fmt.qmin), layer.a_fmt.qmax) * max(
            abs(layer.w_fmt.qmin), layer.w_fmt.qmax
        ) + int(np.max(np.abs(bias), initial=0))
        if bound > INT32_MAX:
            raise CompileError(
                f"layer '{layer.name}' could overflow its int32 accumulator (bound {bound}); "
                "lower its bit-widths"
            )

    def lower_maxpool(self, node: Node) -> None:
        x = self.map[id(node.inputs[0])]
        if x.qformat is None and x.type.dtype != DataType.INT32:
            raise UnsupportedOpError(f"max_pool2d at '{node.name}' on float input is not supported")
        if node.attrs.get("ceil_mode"):
            raise UnsupportedOpError(f"max_pool2d at '{node.name}' uses ceil_mode=True")
        kernel = _pair(node.attrs["kernel_size"])
        stride = _pair(node.attrs.get("stride") or kernel)
        attrs = {
            "kernel_size": kernel,
            "stride": stride,
            "padding": _pair(node.attrs.get("padding", 0)),
            "dilation": _pair(node.attrs.get("dilation", 1)),
        }
        out = Value(
            node.name,
            TensorType(node.output.type.shape, x.type.dtype),
            qformat=x.qformat,
            scale=x.scale,
        )
        self.emit(node, mico_ops.MAXPOOL2D, [x], out, attrs)


def _pair(value: object) -> list[int]:
    if isinstance(value, int):
        return [value, value]
    items = [int(v) for v in value]  # type: ignore[union-attr]
    return items * 2 if len(items) == 1 else items


def lower_quantized(graph: Graph, layers: dict[str, LayerQuant]) -> Graph:
    """The integer-only ``mico.*`` graph of an exported FP32 ``graph``."""
    return _Lowering(graph, layers).run()


def macs(node: Node) -> int:
    """Multiply-accumulates of a quantized conv / linear node (0 for other ops)."""
    if node.op in (mico_ops.QCONV2D, mico_ops.QLINEAR):
        weight = node.inputs[1].type.shape
        per_output = math.prod(weight[1:])
        batch = node.output.type.shape[0]
        return int(node.output.type.numel // batch * per_output)
    return 0
