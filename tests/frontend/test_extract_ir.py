"""Schema-driven extraction: attributes by name, tensor lists, optional tensors, multi-output ops,
weights by state-dict name, overload matching and converter errors."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mico.errors import RegistryError, UnsupportedOpError
from mico.execute import execute_ir
from mico.frontend import export_model, extract_ir
from mico.ir.analyzer import (
    ConversionError,
    IRGraph,
    NodeInfo,
    OpNode,
    TensorListRef,
    find_rule,
    register_executor,
    register_op,
)
from mico.ir.dtypes import DataType
from mico.ir.graph import Value
from mico.ir.ops.registry import OpRegistry
from mico.ir.types import TensorType


class Fn(nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def _run_both(model: nn.Module, *xs: torch.Tensor) -> tuple[IRGraph, list[torch.Tensor]]:
    graph = extract_ir(model, xs)
    got = execute_ir(graph, list(xs))
    with torch.no_grad():
        expected = model(*xs)
    expected = list(expected) if isinstance(expected, tuple | list) else [expected]
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape
        assert torch.equal(g, e)
    return graph, got


@pytest.fixture
def registry():
    with OpRegistry.scoped() as reg:
        yield reg


# --------------------------------------------------------------------------- attributes
def test_attributes_are_bound_by_schema_name_for_positional_and_keyword_args() -> None:
    x = torch.randn(2, 3, 4)
    positional = extract_ir(Fn(lambda t: torch.sum(t, 1, True)), (x,))
    keyword = extract_ir(Fn(lambda t: torch.sum(t, dim=1, keepdim=True)), (x,))
    assert positional.nodes[0].op == keyword.nodes[0].op == "aten.sum.dim_IntList"
    assert positional.nodes[0].attrs == keyword.nodes[0].attrs
    assert keyword.nodes[0].attrs == {"dim": [1], "keepdim": True, "dtype": None}


def test_defaults_and_keyword_only_arguments_are_filled_in() -> None:
    x = torch.randn(2, 3)
    plain = extract_ir(Fn(F.gelu), (x,)).nodes[0]
    tanh = extract_ir(Fn(lambda t: F.gelu(t, approximate="tanh")), (x,)).nodes[0]
    assert plain.attrs == {"approximate": "none"}
    assert tanh.attrs == {"approximate": "tanh"}
    _run_both(Fn(lambda t: F.gelu(t, approximate="tanh")), x)


def test_python_numbers_given_to_tensor_arguments_are_attributes() -> None:
    graph, _ = _run_both(Fn(lambda t: t + 1), torch.randn(3))
    node = graph.nodes[0]
    assert node.op == "aten.add.Tensor"
    assert node.attrs == {"other": 1, "alpha": 1} and isinstance(node.attrs["other"], int)
    assert [v.name for v in node.inputs] == ["xs_0"]  # the *xs placeholder


def test_absent_optional_tensor_is_recorded_not_dropped() -> None:
    conv = nn.Conv2d(2, 3, 3, bias=False)
    graph, _ = _run_both(conv, torch.randn(1, 2, 5, 5))
    node = graph.nodes[0]
    assert [v.name for v in node.inputs] == ["input", "weight"]
    assert "bias" in node.attrs and node.attrs["bias"] is None


def test_torch_dtypes_and_devices_are_attribute_values() -> None:
    graph, _ = _run_both(Fn(lambda t: t.to(torch.float16) * 2), torch.randn(3))
    to_node = next(n for n in graph.nodes if n.op == "aten.to.dtype")
    assert to_node.attrs["dtype"] is torch.float16
    assert graph.outputs[0].type.dtype == DataType.FP16


# --------------------------------------------------------------------------- tensor lists
def test_tensor_lists_become_inputs_with_their_positions_recorded() -> None:
    class Cat(nn.Module):
        def forward(self, x, y):
            a = torch.relu(x)
            return torch.cat([a, y, a], dim=1), torch.stack([x, y])

    graph, _ = _run_both(Cat(), torch.randn(2, 3), torch.randn(2, 3))
    cat = next(n for n in graph.nodes if n.op == "aten.cat.default")
    assert [v.name for v in cat.inputs] == ["relu", "y", "relu"]
    assert cat.attrs == {"tensors": TensorListRef((0, 1, 2)), "dim": 1}
    stack = next(n for n in graph.nodes if n.op == "aten.stack.default")
    assert [v.name for v in stack.inputs] == ["x", "y"]
    assert stack.attrs == {"tensors": TensorListRef((0, 1)), "dim": 0}


def test_optional_tensor_list_elements_keep_their_positions() -> None:
    class Index(nn.Module):
        def forward(self, x, idx):
            return x[:, idx]

    graph, _ = _run_both(Index(), torch.randn(3, 5), torch.tensor([4, 0, 2]))
    node = next(n for n in graph.nodes if n.op == "aten.index.Tensor")
    assert node.attrs["indices"] == TensorListRef((None, 1))
    assert [v.name for v in node.inputs] == ["x", "idx"]


# --------------------------------------------------------------------------- multiple outputs
def test_multi_output_ops_and_multiple_graph_outputs() -> None:
    class Multi(nn.Module):
        def forward(self, x):
            values, indices = x.max(dim=1)
            top = torch.topk(x, 2)
            first, second = torch.split(x, [1, 3], dim=1)
            return values, indices, top.indices, second * 2, first

    graph, got = _run_both(Multi(), torch.randn(2, 4))
    ops = [n.op for n in graph.nodes]
    assert "getitem" not in " ".join(ops), "getitem nodes select outputs, they are not ops"
    max_node = graph.nodes[ops.index("aten.max.dim")]
    assert [v.type.dtype for v in max_node.outputs] == [DataType.FP32, DataType.INT64]
    assert graph.outputs[0] is max_node.outputs[0] and graph.outputs[1] is max_node.outputs[1]
    topk = graph.nodes[ops.index("aten.topk.default")]
    assert len(topk.outputs) == 2 and graph.outputs[2] is topk.outputs[1]
    split = graph.nodes[ops.index("aten.split_with_sizes.default")]
    assert [v.type.shape for v in split.outputs] == [(2, 1), (2, 3)]
    assert graph.outputs[4] is split.outputs[0]
    assert got[1].dtype == torch.int64


# --------------------------------------------------------------------------- weights
class WithState(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.bn = nn.BatchNorm1d(3)
        self.register_buffer("offset", torch.arange(3.0), persistent=False)

    def forward(self, x):
        return self.bn(self.fc(x)) + self.offset + torch.tensor([1.0, 2.0, 3.0])


def test_weights_are_named_by_state_dict_keys_parameters_and_buffers() -> None:
    torch.manual_seed(0)
    model = WithState().eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-1, 1)
        model.bn.running_var.uniform_(0.5, 2)
    graph, _ = _run_both(model, torch.randn(4, 3))
    state = model.state_dict()
    for name in (
        "fc.weight",
        "fc.bias",
        "bn.weight",
        "bn.bias",
        "bn.running_mean",
        "bn.running_var",
    ):
        assert torch.equal(graph.weights[name], state[name]), name
    assert torch.equal(graph.weights["offset"], model.offset)  # non-persistent buffer
    lifted = [k for k in graph.weights if k not in state and k != "offset"]
    assert len(lifted) == 1 and torch.equal(graph.weights[lifted[0]], torch.tensor([1.0, 2.0, 3.0]))
    assert "bn.num_batches_tracked" not in graph.weights  # unused by the computation
    assert graph.weight_names == [v.name for v in graph.params]
    assert set(graph.weight_names) == set(graph.weights)
    bn = next(n for n in graph.nodes if n.op == "aten.batch_norm.default")
    assert [v.name for v in bn.inputs[1:]] == [
        "bn.weight",
        "bn.bias",
        "bn.running_mean",
        "bn.running_var",
    ]
    assert all(not v.is_const for v in graph.params), "weights stay out of the values"


def test_weights_are_a_snapshot_of_the_model() -> None:
    model = nn.Linear(2, 2)
    graph = extract_ir(model, (torch.randn(1, 2),))
    before = graph.weights["weight"].clone()
    with torch.no_grad():
        model.weight.add_(1.0)
    assert torch.equal(graph.weights["weight"], before)


def test_export_model_uses_eval_mode_and_leaves_no_trace() -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5), nn.BatchNorm1d(3))
    model.train()
    x = torch.randn(4, 3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    exported = export_model(model, (x,))
    assert model.training and all(m.training for m in model.modules())
    assert all(p.grad is None and p.requires_grad for p in model.parameters())
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), f"{k} changed: the export ran in train mode"
    ops = [str(n.target) for n in exported.graph.nodes if n.op == "call_function"]
    assert "aten.batch_norm.default" in ops
    graph = extract_ir(exported)
    model.eval()
    with torch.no_grad():
        assert torch.allclose(execute_ir(graph, x)[0], model(x), atol=1e-6)


# --------------------------------------------------------------------------- overloads
def _add_graph(op: str, attrs: dict[str, Any]) -> IRGraph:
    x = Value("x", TensorType((3,), DataType.FP32))
    y = Value("y", TensorType((3,), DataType.FP32))
    graph = IRGraph("g", inputs=[x], outputs=[y])
    graph.add(OpNode("add", op, [x], [y], attrs))
    return graph


def _tagged(tag: float):
    def execute(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
        return [torch.full_like(inputs[0], tag)]

    return execute


def test_a_rule_for_one_overload_does_not_apply_to_another(registry) -> None:
    register_executor("aten.add.Tensor")(_tagged(-1.0))
    scalar = _add_graph("aten.add.Scalar", {"other": 2, "alpha": 1})
    x = torch.ones(3)
    assert find_rule("aten.add.Scalar", "execute") is None
    assert torch.equal(execute_ir(scalar, x)[0], x + 2)  # the ATen fallback, not the rule
    tensor = _add_graph("aten.add.Tensor", {"other": 2, "alpha": 1})
    assert torch.equal(execute_ir(tensor, x)[0], torch.full((3,), -1.0))


def test_a_base_name_rule_applies_to_overloads_only_when_asked(registry) -> None:
    plain = _tagged(5.0)
    register_executor("aten.add")(plain)
    assert find_rule("aten.add.Tensor", "execute") is None
    assert find_rule("aten.add.Scalar", "execute") is None
    with OpRegistry.scoped():
        every = _tagged(7.0)
        register_executor("aten.add", override=True, overloads=True)(every)
        assert find_rule("aten.add.Tensor", "execute") is every
        assert find_rule("aten.add.Scalar", "execute") is every
        exact = _tagged(9.0)
        register_executor("aten.add.Tensor")(exact)
        assert find_rule("aten.add.Tensor", "execute") is exact  # the exact overload wins
        assert torch.equal(
            execute_ir(_add_graph("aten.add.Scalar", {"other": 2}), torch.ones(3))[0],
            torch.full((3,), 7.0),
        )
    assert find_rule("aten.add.Tensor", "execute") is None  # scoped registrations are undone


def test_a_base_name_names_the_default_overload(registry) -> None:
    rule = _tagged(1.0)
    register_executor("aten.relu")(rule)
    assert find_rule("aten.relu.default", "execute") is rule


def test_overloads_flag_needs_a_base_name() -> None:
    with pytest.raises(RegistryError, match=r"'aten\.add\.Tensor' already names one overload"):
        register_op("aten.add.Tensor", overloads=True)


def test_convert_rules_match_overloads_during_extraction(registry) -> None:
    seen: list[str] = []

    @register_op("aten.add", overloads=True)
    def convert_add(info: NodeInfo) -> OpNode:
        seen.append(info.op_type)
        return OpNode(info.name, info.op_type, info.input_metas, info.output_metas, info.attrs)

    extract_ir(Fn(lambda t: t + t), (torch.randn(2),))
    extract_ir(Fn(lambda t: t * 2), (torch.randn(2),))
    assert seen == ["aten.add.Tensor"]


# --------------------------------------------------------------------------- converter errors
def test_a_failing_converter_is_reported_with_op_and_node(registry) -> None:
    @register_op("aten.relu.default")
    def broken(info: NodeInfo) -> OpNode:
        raise KeyError("no_such_attr")

    model = Fn(lambda t: torch.relu(t + 1))
    with pytest.raises(ConversionError, match=r"aten\.relu\.default at node 'relu'") as err:
        extract_ir(model, (torch.randn(2),))
    assert "KeyError" in str(err.value) and "no_such_attr" in str(err.value)
    assert isinstance(err.value.__cause__, KeyError)


def test_a_converter_must_return_a_node_with_the_right_outputs(registry) -> None:
    @register_op("aten.relu.default")
    def returns_dict(info: NodeInfo) -> Any:
        return {"name": info.name}

    with pytest.raises(ConversionError, match=r"returned dict, not a node"):
        extract_ir(Fn(torch.relu), (torch.randn(2),))

    @register_op("aten.relu.default", override=True)
    def no_outputs(info: NodeInfo) -> OpNode:
        return OpNode(info.name, "x.relu", info.input_metas, [], {})

    with pytest.raises(ConversionError, match=r"0 output\(s\); the operator produces 1"):
        extract_ir(Fn(torch.relu), (torch.randn(2),))


def test_opnode_accepts_the_seed_keywords_and_needs_an_op_type() -> None:
    x = Value("x", TensorType((1,), DataType.FP32))
    node = OpNode(name="n", op_type="custom.op", inputs=[x], outputs=[], attrs={"a": 1})
    assert node.op == node.op_type == "custom.op" and node.inputs == [x]
    with pytest.raises(ConversionError, match="needs an op_type"):
        OpNode(name="n", inputs=[x])


# --------------------------------------------------------------------------- specialization
def test_specialized_export_records_input_dependent_reads() -> None:
    class DataDependent(nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x * 2
            return x

    model = DataDependent()
    with pytest.raises(UnsupportedOpError, match="could not trace DataDependent"):
        extract_ir(model, (torch.ones(3),))
    # an explicit specialization follows the branch taken, and says so
    graph = extract_ir(model, (torch.ones(3),), specialize=True)
    assert graph.meta["specialized_reads"], "the data-dependent branch is recorded"
    assert torch.equal(execute_ir(graph, -torch.ones(3))[0], -2 * torch.ones(3))


def test_quantized_layers_extract_as_single_mico_ops() -> None:
    from mico.models import SmallCNN

    torch.manual_seed(0)
    model = SmallCNN(channels=(4, 8)).eval()
    model.set_qscheme([[4, 1.58, 2], [8, 4, 3]])
    x = torch.randn(1, 1, 8, 8)
    graph = extract_ir(model, (x,))
    with torch.no_grad():
        assert torch.equal(execute_ir(graph, x)[0], model(x))
    ops = [n.op for n in graph.nodes]
    assert ops.count("mico.bit_conv2d.default") == 2 and ops.count("mico.bit_linear.default") == 1
    assert not any(op.split(".")[1] in ("round", "clamp", "where", "floor") for op in ops)
    conv = next(n for n in graph.nodes if n.op == "mico.bit_conv2d.default")
    assert conv.inputs[1].name == "conv1.weight"  # the float weight, by state-dict name
    assert (conv.attrs["w_bits"], conv.attrs["a_bits"]) == (4.0, 8.0)
    assert conv.attrs["dynamic"] is True
    assert torch.equal(graph.weights["conv1.weight"], model.conv1.weight)


def test_quantized_models_export_by_specialization() -> None:
    from mico.models import SmallCNN

    torch.manual_seed(0)
    model = SmallCNN(channels=(4, 8)).eval()
    model.set_qscheme([[4] * model.n_layers, [8] * model.n_layers])
    x = torch.randn(1, 1, 8, 8)
    graph = extract_ir(model, (x,), specialize=True)
    with torch.no_grad():
        assert torch.equal(execute_ir(graph, x)[0], model(x))
    conv_weights = [n.inputs[1].name for n in graph.nodes if n.op == "aten.conv2d.default"]
    assert conv_weights == ["conv1.weight_codes", "conv2.weight_codes"]
    for name in conv_weights:  # eval mode convolves the integer codes, as the C does
        layer = dict(model.named_modules())[name.rsplit(".", 1)[0]]
        assert torch.equal(graph.weights[name], layer.weight_codes_f32()[0])
    assert torch.equal(graph.weights["conv1.bias"], model.conv1.bias)
