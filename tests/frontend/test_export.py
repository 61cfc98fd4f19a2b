import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mico.errors import UnsupportedOpError
from mico.frontend import NodeInfo, export_graph
from mico.ir import DataType, Node, OpRegistry
from mico.ir.ops import register_op
from mico.models import SmallCNN


def test_small_cnn_exports_to_aten_nodes_with_named_weights():
    graph = export_graph(SmallCNN(channels=(4, 8)), torch.zeros(1, 1, 8, 8), "cnn")
    assert [n.op for n in graph.nodes] == [
        "aten.conv2d.default",
        "aten.relu.default",
        "aten.max_pool2d.default",
        "aten.conv2d.default",
        "aten.relu.default",
        "aten.max_pool2d.default",
        "aten.flatten.using_ints",
        "aten.linear.default",
    ]
    conv = graph.nodes[0]
    assert [v.name for v in conv.inputs] == ["x", "conv1.weight", "conv1.bias"]
    assert conv.inputs[1].is_const and conv.inputs[1].data.shape == (4, 1, 3, 3)
    # schema defaults are filled in as attributes
    assert conv.attrs == {"stride": [1, 1], "padding": [1, 1], "dilation": [1, 1], "groups": 1}
    assert graph.nodes[2].attrs["ceil_mode"] is False
    assert graph.nodes[-1].output.type.shape == (1, 10)
    assert graph.nodes[-1].output.type.dtype == DataType.FP32
    assert [v.name for v in graph.inputs] == ["x"]
    assert graph.outputs == [graph.nodes[-1].output]


def test_custom_convert_rule_is_used():
    class Tiny(nn.Module):
        def forward(self, x):
            return F.relu(x)

    with OpRegistry.scoped():
        seen: list[NodeInfo] = []

        @register_op("aten.relu.default")
        def convert_relu(info: NodeInfo) -> Node:
            seen.append(info)
            return Node(info.name, "custom.relu", info.inputs, info.outputs, {"tag": 1})

        graph = export_graph(Tiny(), torch.zeros(1, 3))
    assert seen and seen[0].op_type == "aten.relu.default"
    assert graph.nodes[0].op == "custom.relu" and graph.nodes[0].attrs == {"tag": 1}


def test_untraceable_model_is_a_clear_error():
    class DataDependent(nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x * 2
            return x

    with pytest.raises(UnsupportedOpError, match=r"torch\.export could not trace DataDependent"):
        export_graph(DataDependent(), torch.ones(1, 3))
