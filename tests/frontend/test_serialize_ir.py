"""save_ir / load_ir: typed attribute round trips, tensors in safetensors, clear errors on bad
files, atomic writes."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from torch import nn

from mico.execute import execute_ir
from mico.frontend import export_graph, extract_ir
from mico.ir.analyzer import IRGraph, OpNode, TensorListRef
from mico.ir.dtypes import DataType
from mico.ir.graph import Value
from mico.ir.serialize import (
    FORMAT,
    FORMAT_VERSION,
    IRFormatError,
    decode_attr,
    encode_attr,
    encode_dim,
    load_ir,
    save_ir,
    weights_path,
)
from mico.ir.types import TensorType
from mico.quant.arithmetic import QFormat


def same(a: Any, b: Any) -> bool:
    """Equal values of identical types, recursively (NaN equals NaN, -0.0 differs from 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (
            a == b and math.copysign(1, a) == math.copysign(1, b)
        )
    if isinstance(a, complex):
        return same(a.real, b.real) and same(a.imag, b.imag)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, np.generic):
        return a.dtype == b.dtype and a.tobytes() == b.tobytes()
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    return a == b


def roundtrip(value: Any) -> Any:
    return decode_attr(json.loads(json.dumps(encode_attr(value), allow_nan=False)))


# --------------------------------------------------------------------------- attribute values
LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
    | st.complex_numbers(allow_nan=False, max_magnitude=1e6)
    | st.sampled_from([torch.float32, torch.float64, torch.bfloat16, torch.int8, torch.bool])
    | st.sampled_from([torch.device("cpu"), torch.device("cuda", 1), torch.device("meta")])
    | st.sampled_from([torch.contiguous_format, torch.channels_last, torch.preserve_format])
    | st.sampled_from([torch.strided, torch.sparse_coo])
    | st.builds(QFormat, st.integers(1, 8), st.booleans())
    | st.sampled_from(
        [DataType.FP32, DataType.FP16, DataType.INT8, DataType.int(4), DataType.uint(2)]
    )
    | st.lists(st.none() | st.integers(0, 9), max_size=4).map(lambda p: TensorListRef(tuple(p)))
    | hnp.arrays(
        st.sampled_from([np.float32, np.float64, np.int8, np.int64, np.uint8, np.bool_]),
        hnp.array_shapes(min_dims=0, max_dims=3, max_side=3),
    )
    | hnp.from_dtype(np.dtype(np.float32))
)
VALUES = st.recursive(
    LEAVES,
    lambda children: (
        st.lists(children, max_size=4)
        | st.lists(children, max_size=4).map(tuple)
        | st.dictionaries(st.text(max_size=4) | st.integers(-3, 3), children, max_size=3)
    ),
    max_leaves=16,
)


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_attribute_values_round_trip_with_their_types(value: Any) -> None:
    assert same(roundtrip(value), value)


def test_the_tagged_forms_are_explicit() -> None:
    assert encode_attr((1, [2.0, True, None])) == {"$tuple": [1, [2.0, True, None]]}
    assert encode_attr(float("-inf")) == {"$float": "-inf"}
    assert encode_attr(torch.int64) == {"$dtype": "int64"}
    assert encode_attr(torch.channels_last) == {"$memory_format": "channels_last"}
    assert encode_attr(QFormat(4, False)) == {"$qformat": {"bits": 4, "signed": False}}
    assert encode_attr(TensorListRef((0, None))) == {"$tensor_list": [0, None]}
    assert encode_dim(3) == 3 and encode_dim("s0") == {"sym": "s0"}
    t = torch.tensor([[1.5, -2.0]], dtype=torch.bfloat16)
    assert same(roundtrip(t), t)


def test_unsaveable_and_unknown_values_are_clear_errors() -> None:
    with pytest.raises(IRFormatError, match=r"cannot save an attribute of type builtins\.object"):
        encode_attr(object())
    with pytest.raises(IRFormatError, match=r"unknown attribute tag '\$quaternion'"):
        decode_attr({"$quaternion": [1, 0, 0, 0]})
    with pytest.raises(IRFormatError, match=r"unknown torch dtype 'float33'"):
        decode_attr({"$dtype": "float33"})


# --------------------------------------------------------------------------- graphs
class Kitchen(nn.Module):
    """Attributes of many kinds: dtypes, devices (metadata asserts), tensor lists, None."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x, idx):
        y = torch.relu(self.bn(self.conv(x)))
        z = torch.cat([y, y.to(torch.float16).to(torch.float32)], dim=1)
        values, indices = z.flatten(1).max(dim=1)
        return z[:, idx], values, indices


def _kitchen_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(2, 2, 5, 5), torch.tensor([0, 5, 7])


def test_extracted_graph_round_trips_through_files(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Kitchen().eval()
    x, idx = _kitchen_inputs()
    graph = extract_ir(model, (x, idx))
    path = save_ir(graph, tmp_path / "kitchen.json")
    assert path.is_file() and weights_path(path) == tmp_path / "kitchen.safetensors"
    assert weights_path(path).is_file()
    doc = json.loads(path.read_text())
    assert doc["format"] == FORMAT and doc["format_version"] == FORMAT_VERSION
    loaded = load_ir(path)
    assert isinstance(loaded, IRGraph)
    assert [n.op for n in loaded.nodes] == [n.op for n in graph.nodes]
    assert [n.name for n in loaded.nodes] == [n.name for n in graph.nodes]
    for a, b in zip(graph.nodes, loaded.nodes, strict=True):
        assert same(a.attrs, b.attrs), a.name
        assert [v.name for v in a.inputs] == [v.name for v in b.inputs]
        assert [v.type for v in a.outputs] == [v.type for v in b.outputs]
    assert sorted(loaded.weights) == sorted(graph.weights)
    for name, tensor in graph.weights.items():
        assert torch.equal(loaded.weights[name], tensor)
    assert [v.name for v in loaded.params] == [v.name for v in graph.params]
    for got, expected in zip(
        execute_ir(loaded, [x, idx]), execute_ir(graph, [x, idx]), strict=True
    ):
        assert got.dtype == expected.dtype and torch.equal(got, expected)
    assert not list(tmp_path.glob(".*tmp*")), "no temporary files are left behind"


def test_constant_data_quant_formats_and_aliases_round_trip(tmp_path: Path) -> None:
    graph = export_graph(nn.Sequential(nn.Linear(3, 2)), torch.randn(1, 3))
    weight = graph.nodes[0].inputs[1]
    assert weight.is_const
    codes = Value("codes", TensorType((1, 2), DataType.INT8), qformat=QFormat(4, True), scale=0.25)
    view = Value("view", TensorType((2,), DataType.INT8), alias_of=codes)
    graph.nodes[0].outputs[0].scale = np.float32(0.5)
    extra = IRGraph("q", inputs=[codes], outputs=[view])
    extra.add(
        OpNode(
            "v",
            "mico.reshape",
            [codes],
            [view],
            {"shape": [2], "requant": {"m": 3, "qformat": QFormat(8, False)}},
        )
    )
    loaded = load_ir(save_ir(graph, tmp_path / "lin.json"))
    new_weight = loaded.nodes[0].inputs[1]
    assert isinstance(new_weight.data, np.ndarray) and np.array_equal(new_weight.data, weight.data)
    assert new_weight.data.dtype == weight.data.dtype
    assert same(loaded.nodes[0].outputs[0].scale, np.float32(0.5))
    q = load_ir(save_ir(extra, tmp_path / "q.json"))
    assert q.inputs[0].qformat == QFormat(4, True) and q.inputs[0].scale == 0.25
    assert q.outputs[0].alias_of is q.inputs[0]
    assert same(q.nodes[0].attrs, extra.nodes[0].attrs)


def test_weights_passed_to_save_are_stored(tmp_path: Path) -> None:
    graph = extract_ir(nn.Linear(2, 2), (torch.randn(1, 2),))
    replacement = {"weight": torch.eye(2), "bias": torch.zeros(2)}
    loaded = load_ir(save_ir(graph, tmp_path / "m.json", weights=replacement))
    x = torch.randn(1, 2)
    assert torch.equal(execute_ir(loaded, x)[0], x)


# --------------------------------------------------------------------------- bad files
@pytest.fixture
def saved(tmp_path: Path) -> Path:
    return save_ir(extract_ir(nn.Linear(2, 2), (torch.randn(1, 2),)), tmp_path / "m.json")


def test_corrupt_json_names_the_file(saved: Path) -> None:
    saved.write_text(saved.read_text()[:-40])
    with pytest.raises(IRFormatError, match=r"m\.json is corrupt: not valid JSON"):
        load_ir(saved)


def test_not_an_ir_file(saved: Path) -> None:
    saved.write_text(json.dumps({"format": "onnx"}))
    with pytest.raises(IRFormatError, match="is not a mico IR file"):
        load_ir(saved)


def test_newer_format_version_asks_for_an_upgrade(saved: Path) -> None:
    doc = json.loads(saved.read_text())
    doc["format_version"] = FORMAT_VERSION + 1
    saved.write_text(json.dumps(doc))
    with pytest.raises(IRFormatError, match=r"format_version 2, newer than this mico reads \(1\)"):
        load_ir(saved)


def test_missing_weights_file_is_named(saved: Path) -> None:
    weights_path(saved).unlink()
    with pytest.raises(
        IRFormatError, match=r"weights file .*m\.safetensors of the IR file .* missing"
    ):
        load_ir(saved)


def test_weights_of_another_save_are_refused(saved: Path, tmp_path: Path) -> None:
    other = save_ir(extract_ir(nn.Linear(2, 2), (torch.randn(1, 2),)), tmp_path / "o.json")
    weights_path(other).replace(weights_path(saved))
    with pytest.raises(IRFormatError, match="does not belong to"):
        load_ir(saved)


def test_corrupt_weights_file_is_named(saved: Path) -> None:
    weights_path(saved).write_bytes(b"\x00garbage")
    with pytest.raises(IRFormatError, match=r"m\.safetensors of .* is corrupt"):
        load_ir(saved)


def test_unknown_attribute_tag_in_a_file_names_file_node_and_tag(tmp_path: Path) -> None:
    path = save_ir(extract_ir(nn.Flatten(), (torch.randn(1, 2, 2),)), tmp_path / "f.json")
    doc = json.loads(path.read_text())
    doc["nodes"][0]["attrs"]["start_dim"] = {"$bignum": "1"}
    path.write_text(json.dumps(doc))
    with pytest.raises(
        IRFormatError, match=r"f\.json: node 'flatten' attribute 'start_dim'.*'\$bignum'"
    ):
        load_ir(path)


def test_missing_file() -> None:
    with pytest.raises(IRFormatError, match="no IR file at"):
        load_ir("/nonexistent/dir/model.json")


def test_a_failed_save_leaves_the_previous_files_intact(saved: Path, monkeypatch) -> None:
    before = saved.read_bytes(), weights_path(saved).read_bytes()
    bad = extract_ir(nn.Linear(2, 2), (torch.randn(1, 2),))
    bad.nodes[0].attrs["callback"] = print
    with pytest.raises(IRFormatError, match=r"cannot save node 'linear'"):
        save_ir(bad, saved)
    import safetensors.torch

    def failing_save(*args: Any, **kwargs: Any) -> None:
        Path(args[1]).write_bytes(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(safetensors.torch, "save_file", failing_save)
    with pytest.raises(OSError, match="disk full"):
        save_ir(extract_ir(nn.Linear(2, 2), (torch.randn(1, 2),)), saved)
    assert (saved.read_bytes(), weights_path(saved).read_bytes()) == before
    assert sorted(p.name for p in saved.parent.iterdir()) == ["m.json", "m.safetensors"]
    load_ir(saved)


def test_symbolic_dimensions_round_trip_as_shared_symbols(tmp_path: Path) -> None:
    from mico.ir import types as ir_types

    symbolic = getattr(ir_types, "SymbolicDim", None)
    if symbolic is None:
        pytest.skip("this IR has no symbolic dimensions yet")
    batch = symbolic("batch")
    a = Value("a", TensorType((batch, 3), DataType.FP32))
    b = Value("b", TensorType((batch, 3), DataType.FP32))
    graph = IRGraph("dyn", inputs=[a], outputs=[b])
    graph.add(OpNode("r", "aten.relu.default", [a], [b]))
    path = save_ir(graph, tmp_path / "dyn.json")
    assert json.loads(path.read_text())["values"][0]["type"]["shape"] == [{"sym": "batch"}, 3]
    loaded = load_ir(path)
    dim_a, dim_b = loaded.inputs[0].type.shape[0], loaded.outputs[0].type.shape[0]
    assert isinstance(dim_a, symbolic) and dim_a.name == "batch" and dim_a is dim_b
    x = torch.tensor([[-1.0, 2.0, -3.0]] * 5)  # any batch size runs
    assert torch.equal(execute_ir(loaded, x)[0], torch.relu(x))
