"""What a latency proxy sees of one node of a lowered graph: op, sizes, widths, kernel path.

A C program's cost is the sum of its nodes' (quantize, conv, pooling, add, ...), and a conv or
linear node's cost per MAC depends on which kernel the generator picks for it: the plain
kernels (``mico_qconv2d_tiled``, ``..._depthwise3x3``, ``mico_qlinear``), the channel-lanes
kernels, whose choice depends on the weight width, the activation width and signedness, the
output channels per group and the layer's MACs (:func:`mico.codegen.emitters.lanes_plan`), or
for depthwise 3x3 layers the pixel lanes (:mod:`mico.codegen.dwconv_plan`), chosen from the
layer's actual weights.
:class:`OpShape` records all of that for one node, so a proxy trained on measured nodes knows
the path it is predicting. :func:`graph_op_shapes` reads them from a lowered graph (exact);
:func:`op_from_layer` builds one from a :class:`~mico.hw.layers.LayerShape` alone, assuming
the activation signedness, as a layer-only caller must.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from mico.errors import MicoError
from mico.hw.layers import LayerShape, storage_bits
from mico.quant.arithmetic import QFormat

#: op kinds of the MAC layers (as :data:`mico.hw.layers.KINDS`)
MAC_KINDS = ("conv2d", "dwconv2d", "conv1d", "linear")
#: kernel paths, as a feature code (the order is arbitrary but fixed)
PATHS = ("tiled", "depthwise3x3", "elementwise", "linear", "lanes", "none", "dwlanes",
         "tiled_s8", "linear_s8")  # fmt: skip


@dataclass(frozen=True)
class OpShape:
    """One node of a program as a latency model sees it (widths 32 = int32 or float)."""

    name: str
    kind: str  # a MAC kind, or the op's name without "mico." (quantize, maxpool2d, add, ...)
    layer: str = ""  # the plan layer of a conv / linear node
    in_elements: int = 0  # activation inputs' elements (weights excluded)
    out_elements: int = 0
    n_inputs: int = 1
    in_bits: int = 32
    in_signed: bool = True
    out_bits: int = 32
    w_bits: int = 0
    macs: int = 0  # conv / linear, and matmul (its MACs are its cost, as a layer's)
    in_channels: int = 0
    out_channels: int = 0
    kh: int = 1
    kw: int = 1
    sh: int = 1
    sw: int = 1
    groups: int = 1
    out_pixels: int = 1
    path: str = "none"
    lane_s: int = 0  # lanes: the lane width in bits (0: the plain kernels)
    lane_n: int = 0  # channel lanes: products a lane holds before a flush; pixel lanes: q

    @property
    def is_mac(self) -> bool:
        return self.kind in MAC_KINDS

    @property
    def scale(self) -> float:
        """What the cost grows with: MACs for conv / linear, elements for the other ops."""
        if self.is_mac or self.macs:
            return float(max(1, self.macs))
        return float(max(1, self.in_elements, self.out_elements))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OpShape:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def _lanes(
    w_bits: int, a_bits: int, a_signed: bool, out_per_group: int, pixels: int, macs: int
) -> tuple[str, int, int] | None:
    """The generator's lanes choice for these widths, as (path, s, n), or None."""
    from mico.codegen.emitters import lanes_plan
    from mico.quant.arithmetic import QFormat

    try:
        plan = lanes_plan(
            QFormat(w_bits, True), QFormat(a_bits, a_signed), out_per_group, pixels, macs=macs
        )
    except (MicoError, ValueError):  # a width the lanes cannot take: the plain kernels
        return None
    if plan is None:
        return None
    return "lanes", int(plan["s"]), int(plan["n"])


def _plain_conv_path(
    in_bits: int, groups: int, in_c: int, out_c: int, kh: int, kw: int, w_bits: int, macs: int
) -> str:
    from mico.codegen.emitters import conv2d_kernel

    name = conv2d_kernel(in_bits, groups, in_c, out_c, (kh, kw), 1, w_bits=w_bits, macs=macs)
    return name.removeprefix("mico_qconv2d_")


def _plain_linear_path(w_bits: int, in_fmt: QFormat | None, macs: int) -> str:
    from mico.codegen.emitters import linear_kernel

    return linear_kernel(w_bits, in_fmt, macs).removeprefix("mico_q")


def op_from_layer(
    layer: LayerShape, in_signed: bool = False, out_bits: int | None = None
) -> OpShape:
    """The :class:`OpShape` of a conv / linear layer known only by its geometry and widths.

    ``in_signed``: whether its input codes are signed (a model's first layer on signed data; a
    layer after a ReLU reads unsigned codes); ``out_bits``: the width its output is requantized
    to (None: left as int32 / float, as a model's last layer).
    """
    w = storage_bits(layer.w_bits)
    a = storage_bits(layer.a_bits)
    kh, kw = layer.kernel
    out_pixels = layer.out_size[0] * layer.out_size[1]
    if layer.kind == "linear":
        lanes = _lanes(w, a, in_signed, layer.out_channels, 1, layer.macs)
        path = _plain_linear_path(w, QFormat(a, in_signed) if a <= 8 else None, layer.macs)
    else:
        lanes = _lanes(w, a, in_signed, layer.out_channels // layer.groups, 4, layer.macs)
        path = _plain_conv_path(a, layer.groups, layer.in_channels, layer.out_channels, kh, kw,
                                w, layer.macs)  # fmt: skip
    lane_s = lane_n = 0
    if lanes is not None:
        path, lane_s, lane_n = lanes
    return OpShape(
        name=layer.name, kind=layer.kind, layer=layer.name,
        in_elements=layer.input_elements, out_elements=layer.output_elements, n_inputs=1,
        in_bits=a, in_signed=in_signed, out_bits=32 if out_bits is None else out_bits,
        w_bits=w, macs=layer.macs, in_channels=layer.in_channels,
        out_channels=layer.out_channels, kh=kh, kw=kw, sh=layer.stride[0], sw=layer.stride[1],
        groups=layer.groups, out_pixels=out_pixels, path=path, lane_s=lane_s, lane_n=lane_n,
    )  # fmt: skip


def layers_as_ops(layers: list[LayerShape]) -> list[OpShape]:
    """Conv / linear layers of a model in execution order as :class:`OpShape` s, guessing what
    a graph would say: the first layer reads signed codes, the others unsigned (after a ReLU);
    every layer but the last is requantized to the next one's activation width."""
    ops = []
    for i, layer in enumerate(layers):
        nxt = layers[i + 1] if i + 1 < len(layers) else None
        out_bits = storage_bits(nxt.a_bits) if nxt is not None else None
        ops.append(op_from_layer(layer, in_signed=(i == 0), out_bits=out_bits))
    return ops


def _bits(value: Any) -> tuple[int, bool]:
    qf = getattr(value, "qformat", None)
    if qf is not None:
        return int(qf.bits), bool(qf.signed)
    dtype = value.type.dtype
    bits = getattr(dtype, "bits", 32) or 32
    return (int(bits) if getattr(dtype, "is_int", False) else 32), bool(
        getattr(dtype, "signed", True)
    )


def _numel(value: Any) -> int:
    return int(math.prod(value.type.shape)) if value.type.shape else 1


def _dw_plan(node: Any) -> dict[str, int] | None:
    """The depthwise pixel-lanes plan the emitter gives ``node``, if this mico has them (the
    choice reads the layer's weights, so only a graph knows it)."""
    try:
        from mico.codegen import dwconv_plan
    except ImportError:
        return None
    try:
        return dwconv_plan.node_plan(node)
    except (MicoError, KeyError, ValueError, TypeError):
        return None


def graph_op_shapes(graph: Any) -> list[OpShape]:
    """Every node of a lowered graph (``mico.codegen.compile.lower``) as an :class:`OpShape`,
    with the conv / linear nodes' kernel path as the generator picks it."""
    from mico.codegen.emitters import lanes_plan

    shapes = []
    for node in graph.nodes:
        op = node.op.removeprefix("mico.")
        acts = [v for v in node.inputs if not v.is_const]
        out = node.output
        in_bits, in_signed = _bits(acts[0]) if acts else (32, True)
        out_bits, _ = _bits(out)
        common = dict(
            name=node.name, layer=str(node.attrs.get("layer") or ""),
            in_elements=sum(_numel(v) for v in acts), out_elements=_numel(out),
            n_inputs=len(acts), in_bits=in_bits, in_signed=in_signed, out_bits=out_bits,
        )  # fmt: skip
        if op == "qconv2d" and len(node.inputs) >= 2:
            x, weight = node.inputs[0], node.inputs[1]
            _, in_c, in_h, _ = x.type.shape
            _, out_c, out_h, out_w = out.type.shape
            kh, kw = weight.type.shape[2:]
            groups = int(node.attrs.get("groups", 1))
            stride = node.attrs.get("stride", (1, 1))
            macs = out_c * out_h * out_w * (in_c // groups) * kh * kw
            if groups > 1 and groups == in_c:
                kind = "dwconv2d"
            elif in_h == 1 and kh == 1:
                kind = "conv1d"
            else:
                kind = "conv2d"
            plan = lanes_plan(weight.qformat, x.qformat, out_c // groups, macs=macs)
            w_bits = weight.qformat.bits if weight.qformat is not None else 32
            dw = _dw_plan(node)
            if dw is not None:  # depthwise 3x3 in pixel lanes (the emitter's first choice)
                path, lane_s, lane_n = "dwlanes", int(dw["s"]), int(dw["q"])
            elif plan is not None:
                path, lane_s, lane_n = "lanes", int(plan["s"]), int(plan["n"])
            else:
                dil = node.attrs.get("dilation", (1, 1))[1]
                from mico.codegen.emitters import conv2d_kernel

                path = conv2d_kernel(in_bits, groups, in_c, out_c, (kh, kw), dil,
                                     w_bits=w_bits, macs=macs)  # fmt: skip
                path, lane_s, lane_n = path.removeprefix("mico_qconv2d_"), 0, 0
            shapes.append(OpShape(
                kind=kind, w_bits=w_bits, macs=macs, in_channels=in_c, out_channels=out_c,
                kh=kh, kw=kw, sh=int(stride[0]), sw=int(stride[1]), groups=groups,
                out_pixels=out_h * out_w, path=path, lane_s=lane_s, lane_n=lane_n, **common,
            ))  # fmt: skip
            continue
        if op == "qlinear" and len(node.inputs) >= 2:
            x, weight = node.inputs[0], node.inputs[1]
            out_f, in_f = weight.type.shape
            rows = _numel(x) // (in_f * x.type.shape[0])
            macs = rows * in_f * out_f
            plan = lanes_plan(weight.qformat, x.qformat, out_f, pixels=1, macs=macs)
            w_bits = weight.qformat.bits if weight.qformat is not None else 32
            plain = _plain_linear_path(w_bits, x.qformat, macs)
            path, lane_s, lane_n = (plain, 0, 0) if plan is None else (
                "lanes", int(plan["s"]), int(plan["n"]))  # fmt: skip
            shapes.append(OpShape(
                kind="linear", w_bits=w_bits, macs=macs, in_channels=in_f, out_channels=out_f,
                out_pixels=rows, path=path, lane_s=lane_s, lane_n=lane_n, **common,
            ))  # fmt: skip
            continue
        attrs = node.attrs
        kernel = attrs.get("kernel_size")
        stride = attrs.get("stride")
        extra: dict[str, Any] = {}
        if isinstance(kernel, list | tuple) and len(kernel) == 2:
            extra.update(kh=int(kernel[0]), kw=int(kernel[1]))
        if isinstance(stride, list | tuple) and len(stride) == 2:
            extra.update(sh=int(stride[0]), sw=int(stride[1]))
        if out.alias_of is not None:
            extra["path"] = "alias"
        if op == "qmatmul" and len(acts) == 2 and acts[0].type.shape:
            extra["macs"] = _numel(out) * int(acts[0].type.shape[-1])  # rows x cols x inner
        shapes.append(OpShape(kind=op, **extra, **common))
    return shapes
