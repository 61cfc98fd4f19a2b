"""What a latency proxy sees of one node of a lowered graph: op, sizes, widths, kernel path.

A C program's cost is the sum of its nodes' (quantize, conv, pooling, add, ...), and a conv or
linear node's cost per MAC depends on which kernel the generator picks for it (plain, byte
paths, channel lanes, depthwise pixel lanes, binary popcount with SWAR or Zbb's ``cpop``, ...,
chosen from the widths, the shape, the weights and the target's ISA extensions).
:class:`OpShape` records that path for one node, so a proxy trained on measured nodes knows
the path it is predicting. The path is never re-derived here: :func:`emitted_kernel` runs the
node's own ``emit`` rule in a scratch context and reads the entry point it calls, so a path the
generator gains is labelled without a change here. :func:`graph_op_shapes` reads the nodes of
a lowered graph (exact); :func:`op_from_layer` builds a node from a
:class:`~mico.hw.layers.LayerShape` alone (seeded weights, assumed activation signedness).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from typing import Any

import numpy as np

from mico.errors import MicoError
from mico.hw.layers import LayerShape, storage_bits
from mico.ir.dtypes import DataType
from mico.ir.graph import Node, Value
from mico.ir.ops.mico_ops import out_spec
from mico.ir.types import TensorType
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
    # a conv node's planes and padding (0: not recorded, as in records of mico before they
    # were: :func:`mico.hw.proxy.valid_share` then guesses square planes)
    in_h: int = 0
    in_w: int = 0
    out_h: int = 0
    out_w: int = 0
    pad_h: int = 0  # zero padding per side, as the node's ``padding`` attribute
    pad_w: int = 0
    dil_h: int = 1
    dil_w: int = 1

    @property
    def planes(self) -> bool:
        """Whether the node records its planes' sides (a conv node of this mico does)."""
        return self.in_h > 0 and self.in_w > 0 and self.out_h > 0 and self.out_w > 0

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


@lru_cache(maxsize=1)
def _probe_class() -> type:
    """An emit context that places nothing: every buffer is named ``buf``, so a node's emit
    rule can run outside a program just to say which kernel it calls (made on first use: the
    code generator imports late)."""
    from mico.codegen.context import EmitContext
    from mico.codegen.planner import ArenaPlan

    class ProbeContext(EmitContext):
        def __init__(self, extensions: Sequence[str]) -> None:
            super().__init__(ArenaPlan({}, (), 0, 0, 8), [])
            self.isa_extensions = tuple(str(e).lower() for e in extensions)

        def buffer(self, value: Any) -> str:
            return "buf"

    return ProbeContext


_CALL = re.compile(r"^\s*([A-Za-z_]\w*)\s*\(", re.M)
_FIELD = re.compile(r"\.(\w+)\s*=\s*(-?\d+)")


def emitted_kernel(
    node: Any, extensions: Sequence[str] = (), ungated: bool | str = False
) -> tuple[str, int, int]:
    """``(entry point, lane_s, lane_n)`` of a conv / linear node as the code generator emits it
    for a target of these ISA extensions: the node's own ``emit`` rule is run in a scratch
    context and its call read back, so every kernel path the generator has (or gains) is
    named exactly as the program calls it. ``lane_s`` / ``lane_n`` come from the lanes struct
    it passes (channel lanes: ``s``, ``n``; pixel lanes: ``s``, ``q``), else 0. ``ungated``:
    as emitted in a program that links the node's fast path anyway, whatever the node's size
    (:mod:`mico.codegen.linked_paths`; ``"offset"``: the offset-code gate alone lifted)."""
    from mico.codegen.project import emit_rule

    ctx = _probe_class()(extensions)
    ctx.node = node
    ctx.ungate_all = ungated
    statements = emit_rule(node)(node, ctx)
    calls = _CALL.findall("\n".join(statements))
    if not calls:
        raise MicoError(f"the emit rule of '{node.name}' ({node.op}) calls no kernel")
    lane_s = lane_n = 0
    for ctype, body in ctx.structs.values():
        if ctype in ("MicoConv2d", "MicoLinear"):
            continue
        values = {k: int(v) for k, v in _FIELD.findall(body)}
        if "s" in values:
            lane_s, lane_n = values["s"], values.get("n", values.get("q", 0))
    return calls[-1], lane_s, lane_n


#: kernel entry points whose names carry their parameters, and the path they belong to (the
#: bit-sliced path's strides: one path; the depthwise pair path: :func:`dwp_path`)
_FAMILIES = (
    (re.compile(r"(^|_)lanes_w\d+g\d+"), "lanes"),
    (re.compile(r"^dwl_s\d+$"), "dwlanes"),
    (re.compile(r"^dwbs(_s\d)?$"), "dwbs"),
    (re.compile(r"^dw4s?$"), "dw4"),  # rows of 5 codes of 4 bits: unsigned or signed codes
    (re.compile(r"^sub\d$"), "sub"),  # mico_qlinear_sub4 / _sub2: one path, by width
    (re.compile(r"^sub\dt$"), "sub_t"),  # mico_qlinear_sub4t / _sub2t: offset-code kernels
    (re.compile(r"^tiled_sub\d$"), "tiled_sub"),  # mico_qconv2d_tiled_sub4 / _sub2
    (re.compile(r"^addsub\d$"), "addsub"),  # sign weights: mico_qconv2d_addsub2 / _addsub1
)
#: the depthwise pair path's entry points, ``dwp_f<sf>`` and the suffix of their form
#: (:func:`mico.codegen.dwconv_plan.dwp_form`, ``MICO_DWP_FORMS`` in ``mico_nn.h``): the
#: pairs' read, words of K lanes (``_k``, ``_k5``), the outputs (``q`` requantized, ``t`` by
#: thresholds, ``l`` / ``n`` by table), rows of 5 outputs, the requantizing words left out
_DWP = re.compile(r"^dwp_f(\d)(?:_([gsr]))?(_k5|_k)?(?:_([qtln]))?(_r5)?(_x)?$")
#: the depthwise pair path's outputs as a path label says them
_DWP_OUT = {"q": "", "t": "_thr", "l": "_tab", "n": "_tab"}


def dwp_path(kernel: str) -> str | None:
    """The path label of a depthwise pair-path entry point (None for any other name), by the
    families whose costs differ most: words of K lanes or of 5 lanes against pairs
    (``dwp_k``, ``dwp_k5``, ``dwp``), then outputs by thresholds or by table against
    requantized ones (``_thr``, ``_tab``): ``mico_qconv2d_dwp_f1_s_k5_l_r5_x`` ->
    ``dwp_k5_tab``, ``mico_qconv2d_dwp_f2_r_t`` -> ``dwp_thr``; an entry point of any form
    (``mico_qconv2d_dwp_f1``) is ``dwp``."""
    match = _DWP.match(kernel.removeprefix("mico_qconv2d_"))
    if match is None:
        return None
    lanes, out = match.group(3) or "", match.group(4) or "q"
    return "dwp" + lanes + _DWP_OUT[out]


def kernel_path(kernel: str) -> str:
    """The path label of an entry point: ``mico_qconv2d_tiled_s8`` -> ``tiled_s8``,
    ``mico_qlinear`` -> ``linear``, ``mico_qconv2d_lanes_w4g2`` -> ``lanes``,
    ``mico_qconv2d_dwl_s8`` -> ``dwlanes``, ``mico_qconv2d_dwp_f1_s_k5_l_r5_x`` -> ``dwp_k5_tab``
    (:func:`dwp_path`), ``mico_qconv2d_dwbs_s1`` -> ``dwbs``, ``mico_qconv2d_dw4`` / ``_dw4s``
    -> ``dw4``, ``mico_qlinear_bin_cpop`` ->
    ``bin_cpop``, ``mico_qconv2d_addsub2`` / ``_addsub1`` (ternary / binary sign weights) ->
    ``addsub``; a name it does not know is its own label (without the ``mico_qconv2d_`` /
    ``mico_q`` prefix)."""
    pair = dwp_path(kernel)
    if pair is not None:
        return pair
    name = kernel.removeprefix("mico_qconv2d_")
    if name == kernel:
        name = kernel.removeprefix("mico_q")
        if name.startswith("linear_") and name != "linear_s8":
            name = name.removeprefix("linear_")  # lanes, bin_*: the conv paths' names
    for pattern, family in _FAMILIES:
        if pattern.search(name):
            return family
    return name


def layer_node(layer: LayerShape, in_signed: bool = False, out_bits: int | None = None) -> Node:
    """A ``mico.qconv2d`` / ``mico.qlinear`` node of ``layer``'s geometry and widths, with
    seeded weight codes (the depthwise pixel lanes, chosen from the weights, see full-range
    ones), its output requantized to ``out_bits`` unsigned codes after a ReLU (None: int32)."""
    w_fmt = QFormat(storage_bits(layer.w_bits), True)
    a_fmt = QFormat(storage_bits(layer.a_bits), in_signed)
    rng = np.random.default_rng(0)
    kh, kw = layer.kernel
    if layer.kind == "linear":
        rows = layer.in_size[0] * layer.in_size[1]
        x_shape = [1, layer.in_channels] if rows == 1 else [1, rows, layer.in_channels]
        w_shape = [layer.out_channels, layer.in_channels]
        o_shape = [*x_shape[:-1], layer.out_channels]
        op, attrs = "mico.qlinear", {}
    else:
        x_shape = [1, layer.in_channels, *layer.in_size]
        w_shape = [layer.out_channels, layer.in_channels // layer.groups, kh, kw]
        o_shape = [1, layer.out_channels, *layer.out_size]
        geometry = zip(layer.out_size, layer.stride, layer.kernel, layer.in_size, strict=True)
        pad = [max(0, ((o - 1) * s + k - i + 1) // 2) for o, s, k, i in geometry]
        op = "mico.qconv2d"
        attrs = {"stride": list(layer.stride), "padding": pad, "dilation": [1, 1],
                 "groups": layer.groups}  # fmt: skip
    if w_fmt.binary:
        codes = rng.choice(np.array([-1, 1]), size=w_shape)
    else:
        codes = rng.integers(w_fmt.qmin, w_fmt.qmax + 1, size=w_shape)
    out_fmt = None if out_bits is None or out_bits >= 32 else QFormat(int(out_bits), False)
    relu = out_fmt is not None
    requant = None if out_fmt is None else out_spec(out_fmt, 1.0, [1 << 30], [31])
    x = Value("x", TensorType(x_shape, _codes_dtype(a_fmt)), qformat=a_fmt)
    weight = Value(f"{layer.name}.weight", TensorType(w_shape, _codes_dtype(w_fmt)),
                   data=codes.astype(np.int64), qformat=w_fmt)  # fmt: skip
    bias = Value(f"{layer.name}.bias", TensorType([w_shape[0]], DataType.INT32),
                 data=np.zeros(w_shape[0], dtype=np.int64))  # fmt: skip
    out_dtype = DataType.INT32 if out_fmt is None else _codes_dtype(out_fmt)
    out = Value("y", TensorType(o_shape, out_dtype), qformat=out_fmt)
    attrs.update(layer=layer.name, relu=relu, requant=requant)
    return Node(layer.name or "layer", op, [x, weight, bias], [out], attrs)


def _codes_dtype(fmt: QFormat) -> DataType:
    return DataType.int(fmt.bits) if fmt.signed else DataType.uint(fmt.bits)


@lru_cache(maxsize=4096)
def op_from_layer(
    layer: LayerShape,
    in_signed: bool = False,
    out_bits: int | None = None,
    extensions: tuple[str, ...] = (),
    ungated: bool | str = False,
) -> OpShape:
    """The :class:`OpShape` of a conv / linear layer known only by its geometry and widths.

    ``in_signed``: whether its input codes are signed (a model's first layer on signed data; a
    layer after a ReLU reads unsigned codes); ``out_bits``: the width its output is requantized
    to (None: left as int32 / float, as a model's last layer); ``extensions``: the target's
    ISA extensions, which some paths depend on (binary layers: Zbb's ``cpop``). The kernel
    path is the one the generator emits for a node of this layer (:func:`emitted_kernel`;
    ``ungated``: in a program that links its fast path anyway).
    """
    w = storage_bits(layer.w_bits)
    a = storage_bits(layer.a_bits)
    kh, kw = layer.kernel
    out_pixels = layer.out_size[0] * layer.out_size[1]
    node = layer_node(layer, in_signed, out_bits)
    kernel, lane_s, lane_n = emitted_kernel(node, extensions, ungated)
    sides = conv_sides(node) if layer.kind != "linear" else {}
    return OpShape(
        name=layer.name, kind=layer.kind, layer=layer.name,
        in_elements=layer.input_elements, out_elements=layer.output_elements, n_inputs=1,
        in_bits=a, in_signed=in_signed,
        out_bits=32 if out_bits is None else out_bits, w_bits=w, macs=layer.macs,
        in_channels=layer.in_channels, out_channels=layer.out_channels, kh=kh, kw=kw,
        sh=layer.stride[0], sw=layer.stride[1], groups=layer.groups, out_pixels=out_pixels,
        path=kernel_path(kernel), lane_s=lane_s, lane_n=lane_n, **sides,
    )  # fmt: skip


def conv_sides(node: Any) -> dict[str, int]:
    """The planes' sides, padding and dilation of a ``mico.qconv2d`` node (NCHW input and
    output), as :class:`OpShape` fields: what :func:`mico.hw.proxy.valid_share` needs to count
    the taps inside the input of a plane that is not square."""
    _, _, in_h, in_w = node.inputs[0].type.shape
    _, _, out_h, out_w = node.output.type.shape
    pad = list(node.attrs.get("padding") or (0, 0))
    dil = list(node.attrs.get("dilation") or (1, 1))
    return dict(in_h=int(in_h), in_w=int(in_w), out_h=int(out_h), out_w=int(out_w),
                pad_h=int(pad[0]), pad_w=int(pad[-1]), dil_h=int(dil[0]),
                dil_w=int(dil[-1]))  # fmt: skip


def layers_as_ops(layers: list[LayerShape], extensions: Sequence[str] = ()) -> list[OpShape]:
    """Conv / linear layers of a model in execution order as :class:`OpShape` s, guessing what
    a graph would say: the first layer reads signed codes, the others unsigned (after a ReLU);
    every layer but the last is requantized to the next one's activation width; small layers
    take the paths the others link (:mod:`mico.codegen.linked_paths`), as in a program."""
    from mico.codegen.linked_paths import linked_layers

    exts = tuple(extensions)
    args = []
    for i, layer in enumerate(layers):
        nxt = layers[i + 1] if i + 1 < len(layers) else None
        args.append((layer, i == 0, storage_bits(nxt.a_bits) if nxt is not None else None))
    nodes = {f"layer{i}": layer_node(*a) for i, a in enumerate(args)}
    for name, node in nodes.items():
        node.name = name
    lifted = linked_layers(nodes.values(), exts)
    return [
        op_from_layer(layer, in_signed=signed, out_bits=out_bits, extensions=exts,
                      ungated=lifted.get(f"layer{i}", False))
        for i, (layer, signed, out_bits) in enumerate(args)
    ]  # fmt: skip


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


def _node_kernel(
    node: Any, extensions: Sequence[str], ungated: bool | str = False
) -> tuple[str, int, int]:
    """:func:`emitted_kernel` of a graph node (a node the probe cannot emit, such as one whose
    weights live outside the graph, is labelled ``unknown``)."""
    try:
        kernel, lane_s, lane_n = emitted_kernel(node, extensions, ungated)
    except (MicoError, KeyError, ValueError, TypeError, AssertionError):
        return "unknown", 0, 0
    return kernel_path(kernel), lane_s, lane_n


def graph_op_shapes(graph: Any, extensions: Sequence[str] = ()) -> list[OpShape]:
    """Every node of a lowered graph (``mico.codegen.compile.lower``) as an :class:`OpShape`,
    with the conv / linear nodes' kernel path as the generator emits it for a target of these
    ISA ``extensions`` (:func:`emitted_kernel`, small layers on the paths the graph's others
    link: :mod:`mico.codegen.linked_paths`)."""
    from mico.codegen.linked_paths import linked_layers

    lifted = linked_layers(graph.nodes, extensions)
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
            w_bits = weight.qformat.bits if weight.qformat is not None else 32
            path, lane_s, lane_n = _node_kernel(node, extensions, lifted.get(node.name, False))
            shapes.append(OpShape(
                kind=kind, w_bits=w_bits, macs=macs, in_channels=in_c, out_channels=out_c,
                kh=kh, kw=kw, sh=int(stride[0]), sw=int(stride[1]), groups=groups,
                out_pixels=out_h * out_w, path=path, lane_s=lane_s, lane_n=lane_n,
                **conv_sides(node), **common,
            ))  # fmt: skip
            continue
        if op == "qlinear" and len(node.inputs) >= 2:
            x, weight = node.inputs[0], node.inputs[1]
            out_f, in_f = weight.type.shape
            rows = _numel(x) // (in_f * x.type.shape[0])
            macs = rows * in_f * out_f
            w_bits = weight.qformat.bits if weight.qformat is not None else 32
            path, lane_s, lane_n = _node_kernel(node, extensions, lifted.get(node.name, False))
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
