"""In-place execution in the static mode: which nodes may overwrite an input, at what
displacement, and what it does to the arena of real models (bit-exact C under ASan/UBSan)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from mico.codegen import compile_model
from mico.codegen.planner import plan_graph
from mico.ir import DataType
from mico.ir.graph import Graph, Node, Value
from mico.ir.ops import mico_ops
from mico.ir.types import TensorType
from mico.passes.inplace import INPLACE_ATTR, displacement_bits, mark_inplace, value_bits
from mico.quant import QuantConfig, calibrate, quantize_model
from mico.targets import host


def codes(name: str, shape, bits: int) -> Value:
    dtype = DataType.INT32 if bits == 32 else DataType.int(bits)
    return Value(name, TensorType(tuple(shape), dtype))


def graph_of(*nodes: Node, outputs: list[Value]) -> Graph:
    x = Value("x", TensorType((1, 4), DataType.FP32))
    graph = Graph("g", inputs=[x])
    for n in nodes:
        graph.add(n)
    graph.outputs = outputs
    return graph


def requant(name: str, x: Value, out: Value) -> Node:
    return Node(name, mico_ops.REQUANT, [x], [out], {"out": {}})


def window_attrs(kernel: int, stride: int, pad: int, **extra) -> dict:
    return {
        "kernel_size": [kernel, kernel],
        "stride": [stride, stride],
        "padding": [pad, pad],
        "dilation": [1, 1],
        **extra,
    }


@pytest.mark.parametrize("bits, expected", [(8, 8), (4, 4), (1, 1), (32, 32)])
def test_value_bits(bits, expected):
    assert value_bits(codes("v", (1, 3), bits)) == expected


@pytest.mark.parametrize(
    "in_bits, out_bits, expected",
    [(8, 8, 0), (8, 3, 0), (4, 8, 60 * 4), (2, 32, 60 * 30)],
)
def test_elementwise_displacement(in_bits, out_bits, expected):
    """Output i is written after input i is read: a narrower or equal output needs no
    displacement; a wider one starts n * (out - in) bits early."""
    x, out = codes("a", (1, 3, 4, 5), in_bits), codes("b", (1, 3, 4, 5), out_bits)
    assert displacement_bits(requant("r", x, out), 0) == expected


def test_add_overwrites_the_input_with_the_smaller_displacement():
    a, b = codes("a", (1, 10), 4), codes("b", (1, 10), 8)
    producers = [requant("pa", codes("s", (1, 10), 8), a), requant("pb", codes("t", (1, 10), 8), b)]
    out = codes("o", (1, 10), 8)
    add = Node("add", mico_ops.ADD, [a, b], [out], {})
    final = codes("f", (1, 10), 32)
    graph = graph_of(*producers, add, requant("w", out, final), outputs=[final])
    mark_inplace(graph)
    assert displacement_bits(add, 0) == 10 * 4
    assert displacement_bits(add, 1) == 0
    assert add.plan[INPLACE_ATTR] == {"input": 1, "displacement_bits": 0}


def test_depthwise_3x3_needs_two_rows():
    """Writing output row y destroys input row y; row y + 1 still needs row y: the output
    starts two input rows early (channel-major, rows in order)."""
    x, out = codes("x", (1, 4, 6, 5), 8), codes("y", (1, 4, 6, 5), 8)
    weight = Value("w", TensorType((4, 1, 3, 3), DataType.int(4)), data=np.ones((4, 1, 3, 3)))
    attrs = {"stride": [1, 1], "padding": [1, 1], "dilation": [1, 1], "groups": 4}
    conv = Node("dw", mico_ops.QCONV2D, [x, weight, weight], [out], attrs)
    assert displacement_bits(conv, 0) == 2 * 5 * 8
    attrs_full = dict(attrs, groups=1)
    dense = Node("conv", mico_ops.QCONV2D, [x, weight, weight], [out], attrs_full)
    assert displacement_bits(dense, 0) is None  # every output channel reads every input channel


def test_maxpool_2x2_stride_2():
    x, out = codes("x", (1, 2, 8, 8), 4), codes("y", (1, 2, 4, 4), 4)
    pool = Node("pool", mico_ops.MAXPOOL2D, [x], [out], window_attrs(2, 2, 0))
    # the first output row (4 codes) is written while input row 0 is still being read
    assert displacement_bits(pool, 0) == 4 * 4


def test_ops_that_cannot_run_in_place():
    x, out = codes("x", (1, 8), 8), codes("y", (1, 4), 32)
    weight = Value("w", TensorType((4, 8), DataType.int(8)), data=np.ones((4, 8)))
    linear = Node("fc", mico_ops.QLINEAR, [x, weight, weight], [out], {})
    assert displacement_bits(linear, 0) is None


def test_marking_rules():
    """Only an input that dies at the node, is not the graph's input or output, and is not
    also the node's other operand, may be overwritten."""
    src = codes("src", (1, 6), 8)
    a = codes("a", (1, 6), 8)
    b = codes("b", (1, 6), 8)
    c = codes("c", (1, 6), 8)
    d = codes("d", (1, 6), 8)
    out = codes("out", (1, 6), 32)
    x = Value("x", TensorType((1, 6), DataType.FP32))
    quant = Node("q", mico_ops.QUANTIZE, [x], [src], {})
    n1 = requant("n1", src, a)  # src dies here: in place
    n2 = requant("n2", a, b)  # a is read again by n4: not in place
    n3 = Node("n3", mico_ops.ADD, [b, b], [c], {})  # the same tensor twice: not in place
    n4 = Node("n4", mico_ops.ADD, [a, c], [d], {})  # both die here
    n5 = requant("n5", d, out)
    graph = Graph("g", inputs=[x])
    for n in (quant, n1, n2, n3, n4, n5):
        graph.add(n)
    graph.outputs = [out]
    assert mark_inplace(graph) == 3
    assert INPLACE_ATTR in n1.plan
    assert INPLACE_ATTR not in n2.plan
    assert INPLACE_ATTR not in n3.plan
    assert n4.plan[INPLACE_ATTR]["input"] in (0, 1)
    assert INPLACE_ATTR in n5.plan
    assert INPLACE_ATTR not in quant.plan  # the graph input lives in the caller's memory


class Block(nn.Module):
    """MobileNet-like: expand, depthwise, project, residual add."""

    def __init__(self) -> None:
        super().__init__()
        self.expand = nn.Conv2d(8, 24, 1)
        self.depthwise = nn.Conv2d(24, 24, 3, padding=1, groups=24)
        self.project = nn.Conv2d(24, 8, 1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(8 * 4 * 4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.depthwise(torch.relu(self.expand(x))))
        x = self.pool(x + self.project(y))
        return self.fc(torch.flatten(x, 1))


@pytest.mark.parametrize("widths", ["8/8,8/8,8/8,8/8", "4/4,2/8,8/2,4/4", "3/5,5/3,1/7,7/1"])
def test_block_runs_in_place_below_the_unfused_bound(widths, tmp_path):
    layers = ("expand", "depthwise", "project", "fc")
    plan = ",".join(f"{n}={w}" for n, w in zip(layers, widths.split(","), strict=True))
    torch.manual_seed(0)
    model = Block().eval()
    example = torch.zeros(1, 8, 8, 8)
    batches = [torch.randn(8, 8, 8, 8) for _ in range(2)]
    quantize_model(model, plan, QuantConfig(act_mode="static"), example)
    calibrate(model, batches)
    compiled = compile_model(model, example, tmp_path / "c", mode="static", calibration=batches)
    arena = compiled.project.arena
    marked = [n for n in compiled.graph.nodes if INPLACE_ATTR in n.plan]
    assert {n.op for n in marked} >= {mico_ops.QCONV2D}  # the depthwise layer
    assert arena.ties  # some in-place tie is used ...
    assert arena.size < arena.lower_bound  # ... and takes the arena below the unfused bound
    assert arena.size == plan_graph(compiled.graph).size
    host.build(compiled.project, sanitize=True)
    samples = np.random.default_rng(1).standard_normal((4, 8, 8, 8)).astype(np.float32)
    assert np.array_equal(host.run(compiled.project, samples), compiled.reference(samples))
