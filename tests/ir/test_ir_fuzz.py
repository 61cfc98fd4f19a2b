"""The IR loader under hostile files (issue 12, part B).

A property test mutates a saved graph structurally (see ir_mutations.py) and holds every outcome
to: a valid load whose execution matches its declared types, or an ``IRFormatError`` (a mico
error while running a graph that loaded is clean too). Targeted tests pin the cases the issue
found, with the field path each message must name.
"""

from __future__ import annotations

import copy
import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mico.execute import execute_ir
from mico.ir import ir_schema
from mico.ir.analyzer import ExecutionError
from mico.ir.serialize import IRFormatError, load_ir

sys.path.insert(0, str(Path(__file__).parent))  # pytest runs with --import-mode=importlib
from ir_mutations import CLEAN, base_case, judge, mutate


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], bytes]:
    return base_case(tmp_path_factory.mktemp("ir_base"))


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(rng=st.randoms(use_true_random=False))
def test_every_mutated_file_loads_truthfully_or_is_an_ir_format_error(
    base: tuple[dict[str, Any], bytes], rng: random.Random
) -> None:
    doc, weights = base
    text, tampered = mutate(doc, weights, rng)
    outcome, detail = judge(text, tampered)
    assert outcome in CLEAN, detail


def _write(folder: Path, doc: dict[str, Any], weights: bytes, text: str | None = None) -> Path:
    path = folder / "case.json"
    path.write_text(json.dumps(doc) if text is None else text)
    path.with_suffix(".safetensors").write_bytes(weights)
    return path


def _load_error(tmp_path: Path, base: tuple[dict[str, Any], bytes], change: Any) -> str:
    doc = copy.deepcopy(base[0])
    change(doc)
    with pytest.raises(IRFormatError) as info:
        load_ir(_write(tmp_path, doc, base[1]))
    message = str(info.value)
    assert "\n" not in message and len(message) < 600
    return message


def test_the_unmutated_graph_loads_and_runs_to_its_declared_types(
    tmp_path: Path, base: tuple[dict[str, Any], bytes]
) -> None:
    graph = load_ir(_write(tmp_path, *base))
    out, flat = execute_ir(graph, torch.ones(1, 10))
    assert tuple(out.shape) == (1, 3) and tuple(flat.shape) == (5,)
    assert judge(json.dumps(base[0]).encode(), base[1]) == ("valid", "executed")


def test_a_weight_of_another_shape_than_declared_is_refused(
    tmp_path: Path, base: tuple[dict[str, Any], bytes]
) -> None:
    def declare_ten_rows(doc: dict[str, Any]) -> None:  # the file holds 5 rows
        value = next(v for v in doc["values"] if v["name"] == "fc1.weight")
        value["type"]["shape"] = [10, 10]

    message = _load_error(tmp_path, base, declare_ten_rows)
    assert "weight 'fc1.weight'" in message and "(5, 10)" in message and "(10, 10)" in message


def test_a_weight_of_another_dtype_is_refused(
    tmp_path: Path, base: tuple[dict[str, Any], bytes]
) -> None:
    def declare_int8(doc: dict[str, Any]) -> None:
        value = next(v for v in doc["values"] if v["name"] == "fc2.bias")
        value["type"]["dtype"] = {"kind": "int", "bits": 8}

    message = _load_error(tmp_path, base, declare_int8)
    assert "fc2.bias" in message and "torch.float32" in message and "int8" in message


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d["outputs"].__setitem__(0, -1), "outputs[0]"),
        (lambda d: d["nodes"][0]["inputs"].__setitem__(1, 99), "nodes[0].inputs[1]"),
        (lambda d: d["nodes"][1]["outputs"].__setitem__(0, True), "nodes[1].outputs[0]"),
        (lambda d: d["nodes"][1].__setitem__("attrs", [1, 2]), "nodes[1].attrs"),
        (lambda d: d["values"][0].__setitem__("name", 7), "values[0].name"),
        (lambda d: d["values"][2]["type"]["shape"].__setitem__(0, -5), "values[2].type.shape[0]"),
        (lambda d: d["values"][2]["type"]["shape"].__setitem__(0, "5"), "values[2].type.shape[0]"),
        (lambda d: d["values"][3]["type"].__setitem__("dtype", {"kind": "int"}), "dtype"),
        (lambda d: d["values"][3].__setitem__("alias_of", 3), "values[3].alias_of"),
        (lambda d: d["nodes"].append(copy.deepcopy(d["nodes"][0])), "already produced"),
        (lambda d: d["nodes"][2].__setitem__("op", ""), "nodes[2].op"),
        (lambda d: d["weights"].append(3), "weights[4]"),
        (lambda d: d.pop("values"), "values is missing"),
        (lambda d: d.__setitem__("format_version", 0), "no valid format_version (0)"),
        (lambda d: d.__setitem__("format_version", "1"), "no valid format_version ('1')"),
    ],
)
def test_structural_damage_names_the_field(
    tmp_path: Path, base: tuple[dict[str, Any], bytes], change: Any, field: str
) -> None:
    assert field in _load_error(tmp_path, base, change)


def test_an_alias_cycle_is_refused(tmp_path: Path, base: tuple[dict[str, Any], bytes]) -> None:
    def cycle(doc: dict[str, Any]) -> None:
        doc["values"][5]["alias_of"] = 6
        doc["values"][6]["alias_of"] = 5

    assert "cycle" in _load_error(tmp_path, base, cycle)


@pytest.mark.parametrize("depth", [65, 5000])
def test_deep_nesting_is_refused_without_recursion_errors(
    tmp_path: Path, base: tuple[dict[str, Any], bytes], depth: int
) -> None:
    doc = copy.deepcopy(base[0])
    doc["meta"] = "DEEP"
    text = json.dumps(doc).replace('"DEEP"', "[" * depth + "]" * depth)
    with pytest.raises(IRFormatError, match="deep"):
        load_ir(_write(tmp_path, doc, base[1], text))


def test_truncated_and_oversized_files_are_refused(
    tmp_path: Path, base: tuple[dict[str, Any], bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    text = json.dumps(base[0])
    with pytest.raises(IRFormatError, match="not valid JSON"):
        load_ir(_write(tmp_path, base[0], base[1], text[: len(text) // 2]))
    monkeypatch.setattr(ir_schema, "MAX_FILE_BYTES", 100)
    monkeypatch.setattr("mico.ir.serialize.MAX_FILE_BYTES", 100)
    with pytest.raises(IRFormatError, match="more than the 100"):
        load_ir(_write(tmp_path, base[0], base[1]))


def test_execute_ir_refuses_a_result_that_contradicts_its_declared_type(
    tmp_path: Path, base: tuple[dict[str, Any], bytes]
) -> None:
    graph = load_ir(_write(tmp_path, *base))
    relu = next(n for n in graph.nodes if n.name == "relu").outputs[0]
    relu.type = type(relu.type)((1, 6), relu.type.dtype)
    with pytest.raises(ExecutionError, match=r"node 'relu' .* shape \(1, 5\).* declares \(1, 6\)"):
        execute_ir(graph, torch.ones(1, 10))
    relu.type = type(relu.type)((1, 5), type(relu.type.dtype).FP64)
    with pytest.raises(ExecutionError, match=r"node 'relu' .* torch.float32.* declares fp64"):
        execute_ir(graph, torch.ones(1, 10))


def test_alias_chains_are_checked_in_linear_time() -> None:
    import time

    values: list[dict[str, Any]] = [{"alias_of": i + 1} for i in range(199_999)] + [{}]
    start = time.perf_counter()
    ir_schema._check_alias_chains(values)  # a 200,000-long chain that ends: accepted
    values[-1]["alias_of"] = 0
    with pytest.raises(IRFormatError, match=r"values\[0\].alias_of forms a cycle"):
        ir_schema._check_alias_chains(values)
    assert time.perf_counter() - start < 5  # quadratic would be 2*10^10 steps
