"""Each static-mode ``mico.*`` op: its C kernel (packed storage) equals its execute rule.

Every case is a small graph ``float input -> mico.quantize -> op(s) -> int32 output``, emitted,
built (with AddressSanitizer and UBSan) and run on the host, and compared bit for bit with
``run_graph``. Formats cover 1..8
bits, signed and unsigned, binary and ternary, with sizes that leave partial bytes.

The ops that can run in place (elementwise, depthwise and pooling) are checked twice: with
separate buffers, and writing over their input at the displacement mico.passes.inplace computes
(4-byte alignment, the tightest the int32 outputs allow), which must give the same bits.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from mico.codegen import emit_c_project
from mico.codegen import project as project_module
from mico.codegen.planner import (
    ArenaPlan,
    graph_buffers,
    graph_ties,
    plan_buffers,
    storage_bytes,
)
from mico.execute import run_graph
from mico.ir import DataType
from mico.ir.graph import Graph, Node, Value
from mico.ir.ops import mico_ops
from mico.ir.ops.mico_ops import out_spec
from mico.ir.types import TensorType
from mico.passes.inplace import INPLACE_ATTR, displacement_bits, mark_inplace
from mico.passes.lower_static import codes_dtype
from mico.quant import QFormat, quantize_multiplier
from mico.targets import host


class Builder:
    """A graph with one float input, built op by op."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.x = Value("x", TensorType((1, *shape), DataType.FP32))
        self.graph = Graph("case", inputs=[self.x])
        self.rng = np.random.default_rng(0)

    def add(self, op: str, inputs: list[Value], out: Value, attrs: dict) -> Value:
        self.graph.add(Node(f"n{len(self.graph.nodes)}", op, inputs, [out], attrs))
        return out

    def value(self, shape, fmt: QFormat | None, scale: float = 1.0) -> Value:
        name = f"v{len(self.graph.nodes)}"
        if fmt is None:
            return Value(name, TensorType(tuple(shape), DataType.INT32), scale=scale)
        return Value(name, TensorType(tuple(shape), codes_dtype(fmt)), qformat=fmt, scale=scale)

    def quantize(self, fmt: QFormat, scale: float) -> Value:
        out = self.value(self.x.type.shape, fmt, scale)
        return self.add(mico_ops.QUANTIZE, [self.x], out, {"scale": scale, "qformat": fmt})

    def const(self, data: np.ndarray, fmt: QFormat | None) -> Value:
        name = f"c{len(self.graph.nodes)}_{self.rng.integers(1 << 30)}"
        dtype = DataType.INT32 if fmt is None else codes_dtype(fmt)
        return Value(name, TensorType(data.shape, dtype), data=data, qformat=fmt, scale=1.0)

    def codes(self, fmt: QFormat, shape) -> np.ndarray:
        codes = self.rng.integers(fmt.qmin, fmt.qmax + 1, shape)
        return np.where(codes == 0, 1, codes) if fmt.binary else codes

    def widen(self, v: Value) -> Value:
        if v.qformat is None:
            return v
        out = self.value(v.type.shape, None, v.scale or 1.0)
        return self.add(mico_ops.REQUANT, [v], out, {"out": out_spec(None, 1.0)})

    def check(
        self, tmp_path, result: Value, samples: int = 3, inplace: bool = False, monkeypatch=None
    ) -> None:
        self.graph.outputs = [self.widen(result)]
        self.graph.validate()
        align = 8
        if inplace:
            producer = next(n for n in self.graph.nodes if n.output is result)
            can = any(
                displacement_bits(producer, i) is not None for i in range(len(producer.inputs))
            )
            mark_inplace(self.graph)
            assert (INPLACE_ATTR in producer.plan) == can
            for node in self.graph.nodes:  # only the op under test, and always in place
                if node is not producer:
                    node.plan.pop(INPLACE_ATTR, None)
            monkeypatch.setattr(project_module, "plan_graph", _plan_every_tie)
            align = 4
        project = emit_c_project(self.graph, tmp_path / "c", "case", align=align)
        if inplace and can:  # the planner overlaps the op's output with the input it overwrites
            assert result.name in project.arena.ties
        host.build(project, sanitize=True)  # AddressSanitizer + UndefinedBehaviorSanitizer
        shape = self.x.type.shape[1:]
        x = (self.rng.normal(0, 1.5, (samples, *shape))).astype(np.float32)
        c = host.run(project, x)
        ref = run_graph(self.graph, x)[0].numpy()
        assert len(np.unique(ref)) > 1  # not a degenerate (all clamped) case
        assert np.array_equal(c.reshape(ref.shape), ref)


def _plan_every_tie(graph: Graph, align: int) -> ArenaPlan:
    """The arena plan with every in-place tie, helpful or not."""
    ties = graph_ties(graph, align)
    return plan_buffers(graph_buffers(graph), align, ties, choose_ties=False)


INPLACE = pytest.mark.parametrize("inplace", [False, True], ids=["separate", "inplace"])


def requant_to(fmt: QFormat | None, real: float | list[float], clamp=None) -> dict:
    reals = real if isinstance(real, list) else [real]
    pairs = [quantize_multiplier(r) for r in reals]
    return out_spec(fmt, 1.0, [p[0] for p in pairs], [p[1] for p in pairs], clamp)


F = QFormat
CONV_CASES = [
    # in fmt, w bits, out fmt, groups, kernel, stride, padding, dilation, per_channel, relu
    (F(8, False), 8, F(8, True), 1, (3, 3), (1, 1), (1, 1), (1, 1), False, False),
    (F(4, True), 3, F(5, False), 2, (3, 2), (2, 1), (1, 0), (1, 2), True, True),
    (F(3, False), 2, F(2, True), 6, (3, 3), (1, 2), (1, 1), (1, 1), True, False),  # depthwise
    (F(1, True), 1, F(1, True), 1, (1, 1), (1, 1), (0, 0), (1, 1), False, False),  # binary
    (F(2, True), 2, F(7, False), 3, (2, 5), (1, 3), (0, 2), (2, 1), False, True),  # ternary
    (F(6, True), 5, None, 1, (3, 3), (2, 2), (1, 1), (1, 1), False, True),  # int32 out
    (F(7, False), 4, F(3, False), 2, (1, 3), (1, 1), (0, 1), (1, 3), True, True),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{c[0]}-w{c[1]}-{c[2]}-g{c[3]}")
@INPLACE
def test_qconv2d(case, tmp_path, inplace, monkeypatch):
    in_fmt, w_bits, out_fmt, groups, k, stride, pad, dil, per_channel, relu = case
    c_in, c_out, h, w = 6, 6, 7, 9
    b = Builder((c_in, h, w))
    x = b.quantize(in_fmt, 0.3)
    w_fmt = F(w_bits, True)
    weight = b.const(b.codes(w_fmt, (c_out, c_in // groups, *k)), w_fmt)
    bias = b.const(b.rng.integers(-300, 300, c_out), None)
    out_h = (h + 2 * pad[0] - dil[0] * (k[0] - 1) - 1) // stride[0] + 1
    out_w = (w + 2 * pad[1] - dil[1] * (k[1] - 1) - 1) // stride[1] + 1
    reals = list(b.rng.uniform(0.002, 0.3, c_out)) if per_channel else 0.05
    requant = None if out_fmt is None else requant_to(out_fmt, reals)
    if requant is not None and not per_channel:
        requant["m"], requant["shift"] = requant["m"][0], requant["shift"][0]
    attrs = {"stride": list(stride), "padding": list(pad), "dilation": list(dil),
             "groups": groups, "relu": relu, "requant": requant, "layer": "conv"}  # fmt: skip
    out = b.add(mico_ops.QCONV2D, [x, weight, bias], b.value((1, c_out, out_h, out_w), out_fmt),
                attrs)  # fmt: skip
    b.check(tmp_path, out, inplace=inplace, monkeypatch=monkeypatch)


@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinear_rows_and_clamp(per_channel, tmp_path):
    b = Builder((3, 11))  # 3 rows of 11 features
    x = b.quantize(F(5, True), 0.2)
    weight = b.const(b.codes(F(3, True), (7, 11)), F(3, True))
    bias = b.const(b.rng.integers(-50, 50, 7), None)
    reals = list(b.rng.uniform(0.01, 0.2, 7)) if per_channel else 0.07
    requant = requant_to(F(6, False), reals, clamp=[0, 40])  # a ReLU6-like upper bound
    if not per_channel:
        requant["m"], requant["shift"] = requant["m"][0], requant["shift"][0]
    attrs = {"relu": True, "requant": requant, "layer": "fc"}
    out = b.add(mico_ops.QLINEAR, [x, weight, bias], b.value((1, 3, 7), F(6, False)), attrs)
    b.check(tmp_path, out)


@pytest.mark.parametrize(
    "fmt, kernel, stride, padding, dilation",
    [
        (F(8, True), [2, 2], [2, 2], [0, 0], [1, 1]),
        (F(3, True), [3, 2], [2, 1], [1, 1], [1, 2]),
        (F(1, True), [1, 4], [1, 4], [0, 0], [1, 1]),
        (F(5, False), [3, 3], [1, 1], [1, 1], [1, 1]),
    ],
)
@INPLACE
def test_maxpool2d(fmt, kernel, stride, padding, dilation, tmp_path, inplace, monkeypatch):
    b = Builder((3, 7, 9))
    x = b.quantize(fmt, 0.25)
    h, w = 7, 9
    out_h = (h + 2 * padding[0] - dilation[0] * (kernel[0] - 1) - 1) // stride[0] + 1
    out_w = (w + 2 * padding[1] - dilation[1] * (kernel[1] - 1) - 1) // stride[1] + 1
    attrs = {"kernel_size": kernel, "stride": stride, "padding": padding, "dilation": dilation}
    out = b.add(mico_ops.MAXPOOL2D, [x], b.value((1, 3, out_h, out_w), fmt, 0.25), attrs)
    b.check(tmp_path, out, inplace=inplace, monkeypatch=monkeypatch)


@pytest.mark.parametrize("in_fmt, out_fmt", [(F(4, False), F(6, False)), (F(7, True), None),
                                             (F(2, True), F(3, True))])  # fmt: skip
@INPLACE
def test_mean(in_fmt, out_fmt, tmp_path, inplace, monkeypatch):
    b = Builder((5, 3, 7))
    x = b.quantize(in_fmt, 0.2)
    spec = requant_to(out_fmt, 0.2 / 21 / 0.05) if out_fmt else out_spec(None, 0.2 / 21)
    attrs = {"dims": [2, 3], "count": 21, "keepdim": False, "out": spec}
    out = b.add(mico_ops.MEAN, [x], b.value((1, 5), out_fmt), attrs)
    b.check(tmp_path, out, inplace=inplace, monkeypatch=monkeypatch)


@pytest.mark.parametrize(
    "in_fmt, out_fmt, per_channel, clamp",
    [
        (F(8, False), F(3, False), False, None),
        (F(3, True), F(8, True), True, None),
        (F(5, True), F(5, True), False, [-3, 7]),  # a clamp only (standalone ReLU6-like)
        (F(6, True), F(1, True), False, None),  # to binary
        (F(4, True), None, True, [-1000, 2000]),  # per-channel int32 rescale with clamp
    ],
)
@INPLACE
def test_requant(in_fmt, out_fmt, per_channel, clamp, tmp_path, inplace, monkeypatch):
    b = Builder((4, 3, 5))
    x = b.quantize(in_fmt, 0.1)
    if out_fmt == in_fmt and not per_channel:
        spec = out_spec(out_fmt, 0.1, clamp=clamp)
    else:
        reals = list(b.rng.uniform(0.3, 3.0, 4)) if per_channel else 0.7
        spec = requant_to(out_fmt, reals, clamp)
    out = b.add(mico_ops.REQUANT, [x], b.value((1, 4, 3, 5), out_fmt), {"out": spec})
    b.check(tmp_path, out, inplace=inplace, monkeypatch=monkeypatch)


@pytest.mark.parametrize(
    "a_fmt, b_fmt, out_fmt, clamp",
    [
        (F(8, True), F(8, False), F(8, False), [0, 255]),  # fused ReLU
        (F(3, True), F(6, False), F(4, True), [-7, 7]),
        (F(1, True), F(2, True), None, [0, 2**31 - 1]),
        (F(5, False), F(7, True), F(1, True), [-1, 1]),
    ],
)
@INPLACE
def test_add(a_fmt, b_fmt, out_fmt, clamp, tmp_path, inplace, monkeypatch):
    from mico.passes.lower_static import shared_multipliers

    b = Builder((3, 5, 5))
    qa, qb = b.quantize(a_fmt, 0.2), b.quantize(b_fmt, 0.05)
    ms, shift = shared_multipliers([0.2 / 0.1, 0.05 / 0.1], "add")
    attrs = {"m": ms, "shift": shift, "qformat": out_fmt, "scale": 0.1, "clamp": clamp}
    out = b.add(mico_ops.ADD, [qa, qb], b.value((1, 3, 5, 5), out_fmt, 0.1), attrs)
    b.check(tmp_path, out, inplace=inplace, monkeypatch=monkeypatch)


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_concat_rescales_each_part(dim, tmp_path):
    b = Builder((2, 3, 5))
    out_fmt = F(5, True)
    parts = [b.quantize(out_fmt, 0.1), b.quantize(F(3, False), 0.3), b.quantize(F(8, True), 0.02)]
    specs = [None, dict(zip(("m", "shift"), quantize_multiplier(3.0), strict=True)),
             dict(zip(("m", "shift"), quantize_multiplier(0.2), strict=True))]  # fmt: skip
    shape = [1, 2, 3, 5]
    shape[dim] *= 3
    attrs = {"dim": dim, "parts": specs, "qformat": out_fmt, "scale": 0.1}
    out = b.add(mico_ops.CONCAT, parts, b.value(shape, out_fmt, 0.1), attrs)
    b.check(tmp_path, out)


@pytest.mark.parametrize("kind", ["transpose", "shuffle", "slice_step", "slice_requant"])
def test_copy(kind, tmp_path):
    b = Builder((6, 3, 5))
    fmt = F(3, True)
    x = b.quantize(fmt, 0.3)
    strides = [15, 5, 1]
    spec = None
    out_fmt = fmt
    if kind == "transpose":  # (6, 3, 5) -> (5, 3, 6)
        shape, st, offset = [5, 3, 6], [1, 5, 15], 0
    elif kind == "shuffle":  # channel shuffle of 2 groups: view (2, 3, 15) -> (3, 2, 15)
        shape, st, offset = [3, 2, 15], [15, 45, 1], 0
    elif kind == "slice_step":  # x[:, 1::2, :, 1:4]
        shape, st, offset = [3, 3, 3], [2 * strides[0], strides[1], 1], strides[0] + 1
    else:  # x[:, 3:] requantized to 8-bit unsigned
        shape, st, offset = [3, 3, 5], strides, 3 * strides[0]
        out_fmt = F(8, False)
        spec = requant_to(out_fmt, 0.3 / 0.01)
    attrs = {"shape": shape, "strides": st, "offset": offset, "out": spec}
    out = b.add(mico_ops.COPY, [x], b.value((1, *shape), out_fmt), attrs)
    b.check(tmp_path, out)


@pytest.mark.parametrize("bits", range(1, 9))
def test_storage_bytes_packs_sub_byte_codes(bits):
    value = Value("v", TensorType((1, 3, 7), DataType.int(bits)))
    assert storage_bytes(value) == math.ceil(21 * bits / 8)
    assert storage_bytes(Value("a", TensorType((1, 5), DataType.INT32))) == 20


@pytest.mark.parametrize(
    "fmt, out_fmt, kernel, stride, padding, include_pad",
    [
        (F(8, False), F(8, False), [2, 2], [2, 2], [0, 0], True),
        (F(3, True), F(4, True), [3, 3], [2, 1], [1, 1], False),  # border windows average less
        (F(5, False), None, [3, 2], [1, 2], [1, 0], True),  # int32 out
    ],
)
@INPLACE
def test_avgpool2d(
    fmt, out_fmt, kernel, stride, padding, include_pad, tmp_path, inplace, monkeypatch
):
    b = Builder((3, 7, 9))
    x = b.quantize(fmt, 0.25)
    h, w = 7, 9
    out_h = (h + 2 * padding[0] - kernel[0]) // stride[0] + 1
    out_w = (w + 2 * padding[1] - kernel[1]) // stride[1] + 1
    window = kernel[0] * kernel[1]
    divisors = [window if include_pad else c for c in range(1, window + 1)]
    s_out = 0.25 / window if out_fmt is None else 0.2
    spec = requant_to(out_fmt, [0.25 / (d * s_out) for d in divisors])
    attrs = {"kernel_size": kernel, "stride": stride, "padding": padding,
             "count_include_pad": include_pad, "out": spec}  # fmt: skip
    out = b.add(mico_ops.AVGPOOL2D, [x], b.value((1, 3, out_h, out_w), out_fmt, s_out), attrs)
    b.check(tmp_path, out, inplace=inplace, monkeypatch=monkeypatch)
