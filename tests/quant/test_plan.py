"""Quantization plans: parsing, validation against a model, YAML and qscheme forms."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from mico.errors import PlanError
from mico.quant.plan import LayerBits, QuantPlan

MODEL_LAYERS = ["conv1", "conv2", "fc"]


# --------------------------------------------------------------------------- parse


def test_parse_basic() -> None:
    plan = QuantPlan.parse("conv1=8/8,conv2=3/5,fc=1/8")
    assert list(plan) == ["conv1", "conv2", "fc"]
    assert plan["conv1"] == LayerBits(8, 8)
    assert plan["conv2"] == LayerBits(w=3, a=5)
    assert plan["fc"] == LayerBits(1, 8)
    assert len(plan) == 3
    assert str(plan["conv2"]) == "W3A5"
    assert plan.to_string() == "conv1=8/8,conv2=3/5,fc=1/8"
    assert repr(plan) == "QuantPlan('conv1=8/8,conv2=3/5,fc=1/8')"


def test_parse_tolerates_whitespace_colons_dotted_names_and_trailing_commas() -> None:
    plan = QuantPlan.parse(" features.0 : 4 / 2 , fc=8/8 ,")
    assert dict(plan) == {"features.0": LayerBits(4, 2), "fc": LayerBits(8, 8)}


def test_parse_preserves_order() -> None:
    assert list(QuantPlan.parse("fc=2/2,conv1=8/8")) == ["fc", "conv1"]


@pytest.mark.parametrize(
    ("text", "layer", "kind", "value"),
    [
        ("conv1=8/8,conv2=0/4", "conv2", "weight", "0"),
        ("conv1=9/8", "conv1", "weight", "9"),
        ("fc=4/0", "fc", "activation", "0"),
        ("fc=4/9", "fc", "activation", "9"),
        ("fc=4/-1", "fc", "activation", "-1"),
    ],
)
def test_parse_out_of_range_bits(text: str, layer: str, kind: str, value: str) -> None:
    with pytest.raises(PlanError) as info:
        QuantPlan.parse(text)
    msg = str(info.value)
    assert f"layer '{layer}'" in msg
    assert f"{kind} bit-width is {value}" in msg
    assert "1..8" in msg


@pytest.mark.parametrize(
    ("text", "layer", "kind", "value"),
    [
        ("conv1=x/8", "conv1", "weight", "'x'"),
        ("conv1=8/four", "conv1", "activation", "'four'"),
        ("conv1=4.5/8", "conv1", "weight", "4.5"),
        ("conv1=8/8/8", "conv1", "activation", "'8/8'"),
    ],
)
def test_parse_non_numbers(text: str, layer: str, kind: str, value: str) -> None:
    with pytest.raises(PlanError) as info:
        QuantPlan.parse(text)
    msg = str(info.value)
    assert f"layer '{layer}'" in msg
    assert f"{kind} bit-width {value} is not a whole number" in msg
    assert "1.58 (ternary)" in msg
    assert "1..8" in msg


@pytest.mark.parametrize(
    "entry", ["conv1", "conv1=8", "conv1 8/8", "=8/8", "conv1=/8", "conv-1=8/8"]
)
def test_parse_malformed_entry(entry: str) -> None:
    with pytest.raises(PlanError) as info:
        QuantPlan.parse(f"fc=8/8,{entry}")
    msg = str(info.value)
    assert repr(entry) in msg
    assert "layer=W/A" in msg


def test_parse_duplicate_layer() -> None:
    with pytest.raises(PlanError, match="layer 'conv1' appears twice"):
        QuantPlan.parse("conv1=8/8,fc=4/4,conv1=2/2")


@pytest.mark.parametrize("text", ["", " ", ",", " , ,"])
def test_parse_empty_plan(text: str) -> None:
    with pytest.raises(PlanError, match="at least one layer"):
        QuantPlan.parse(text)


def test_plan_error_is_value_error() -> None:
    with pytest.raises(ValueError):
        QuantPlan.parse("conv1=0/8")


def test_constructor_checks_bits() -> None:
    with pytest.raises(PlanError, match=r"layer 'fc': activation bit-width is 12.*1\.\.8"):
        QuantPlan({"conv1": LayerBits(8, 8), "fc": LayerBits(8, 12)})
    with pytest.raises(PlanError, match="at least one layer"):
        QuantPlan({})


def test_uniform() -> None:
    plan = QuantPlan.uniform(MODEL_LAYERS, 4, 8)
    assert plan.to_string() == "conv1=4/8,conv2=4/8,fc=4/8"


def test_plan_is_an_immutable_mapping_copy() -> None:
    layers = {"conv1": LayerBits(8, 8)}
    plan = QuantPlan(layers)
    layers["fc"] = LayerBits(2, 2)
    assert list(plan) == ["conv1"]
    assert plan == QuantPlan.parse("conv1=8/8")
    assert plan != QuantPlan.parse("conv1=8/4")


# --------------------------------------------------------------------------- validate_for


def test_validate_for_returns_plan_in_model_order() -> None:
    plan = QuantPlan.parse("fc=1/8,conv2=3/5,conv1=8/8")
    valid = plan.validate_for(MODEL_LAYERS)
    assert isinstance(valid, QuantPlan)
    assert list(valid) == MODEL_LAYERS
    assert valid.to_string() == "conv1=8/8,conv2=3/5,fc=1/8"
    assert list(plan) == ["fc", "conv2", "conv1"]  # the original is unchanged


def test_validate_for_missing_layer() -> None:
    with pytest.raises(PlanError) as info:
        QuantPlan.parse("conv1=8/8,fc=8/8").validate_for(MODEL_LAYERS)
    msg = str(info.value)
    assert "the plan has 2 layer(s) but the model has 3" in msg
    assert "(conv1, conv2, fc)" in msg
    assert "no bit-widths for conv2" in msg
    assert "unknown" not in msg
    assert "conv1=8/8,conv2=8/8,fc=8/8" in msg  # a usable example


def test_validate_for_unknown_layer() -> None:
    with pytest.raises(PlanError) as info:
        QuantPlan.parse("conv1=8/8,conv2=8/8,fc=8/8,head=4/4").validate_for(MODEL_LAYERS)
    msg = str(info.value)
    assert "the plan has 4 layer(s) but the model has 3" in msg
    assert "unknown layer(s) head" in msg
    assert "(conv1, conv2, fc)" in msg
    assert "no bit-widths" not in msg


def test_validate_for_same_count_wrong_names() -> None:
    with pytest.raises(PlanError) as info:
        QuantPlan.parse("conv1=8/8,conv3=8/8,linear=8/8").validate_for(MODEL_LAYERS)
    msg = str(info.value)
    assert "unknown layer(s) conv3, linear" in msg
    assert "no bit-widths for conv2, fc" in msg
    assert "(conv1, conv2, fc)" in msg


# --------------------------------------------------------------------------- YAML and load


def test_yaml_round_trip_through_file(tmp_path: Path) -> None:
    plan = QuantPlan.parse("conv1=8/8,conv2=3/5,fc=1/8")
    text = plan.to_yaml()
    assert text == "conv1: {w: 8, a: 8}\nconv2: {w: 3, a: 5}\nfc: {w: 1, a: 8}\n"
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    for spec in (path, str(path)):
        loaded = QuantPlan.load(spec)
        assert loaded == plan
        assert loaded.to_string() == plan.to_string()


def test_load_yaml_block_style_and_yml_suffix(tmp_path: Path) -> None:
    path = tmp_path / "p.yml"
    path.write_text("fc:\n  a: 8\n  w: 2\nconv1:\n  w: 4\n  a: 4\n")
    assert QuantPlan.load(path).to_string() == "fc=2/8,conv1=4/4"


def test_load_existing_file_without_yaml_suffix(tmp_path: Path) -> None:
    path = tmp_path / "plan.txt"
    path.write_text("conv1: {w: 2, a: 3}\n")
    assert QuantPlan.load(path).to_string() == "conv1=2/3"


def test_load_text() -> None:
    plan = QuantPlan.load("conv1=8/8,conv2=3/5,fc=1/8")
    assert plan.to_string() == "conv1=8/8,conv2=3/5,fc=1/8"


def test_load_text_errors_are_plan_errors() -> None:
    with pytest.raises(PlanError, match=r"layer 'conv2'.*1\.\.8"):
        QuantPlan.load("conv1=8/8,conv2=0/4")


@pytest.mark.parametrize("name", ["missing.yaml", "missing.yml"])
def test_load_missing_yaml_path(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    with pytest.raises(PlanError, match="does not exist") as info:
        QuantPlan.load(path)
    assert str(path) in str(info.value)


def test_load_invalid_yaml(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("conv1: {w: 8, a: 8\nfc: [\n")
    with pytest.raises(PlanError, match="is not valid YAML") as info:
        QuantPlan.load(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("content", "pattern"),
    [
        ("- conv1\n- fc\n", "must be a mapping"),
        ("", "must be a mapping"),
        ("conv1: 8\n", r"layer 'conv1': expected \{w: W, a: A\}"),
        ("conv1: {w: 8}\n", r"layer 'conv1': expected \{w: W, a: A\}"),
        ("conv1: {w: 8, a: 8, b: 1}\n", r"layer 'conv1': expected \{w: W, a: A\}"),
        ("conv1: {w: 8, a: 10}\n", r"layer 'conv1': activation bit-width is 10.*1\.\.8"),
        ("conv1: {w: x, a: 8}\n", r"layer 'conv1': weight bit-width 'x' is not a whole number"),
        ("{}\n", "at least one layer"),
    ],
)
def test_load_yaml_content_errors(tmp_path: Path, content: str, pattern: str) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(content)
    with pytest.raises(PlanError, match=pattern):
        QuantPlan.load(path)


def test_yaml_round_trip_of_yaml_keyword_layer_names() -> None:
    plan = QuantPlan.parse("on=8/8,null=4/4")
    assert QuantPlan.from_dict(yaml.safe_load(plan.to_yaml())) == plan


names = st.from_regex(r"[a-z_][a-z0-9_]{0,6}(\.[a-z0-9_]{1,3})?", fullmatch=True).filter(
    lambda n: n not in {"on", "off", "yes", "no", "true", "false", "null"}
)
layer_bits = st.builds(LayerBits, st.integers(1, 8), st.integers(1, 8))


@settings(max_examples=100, deadline=None)
@given(layers=st.dictionaries(names, layer_bits, min_size=1, max_size=6))
def test_string_yaml_and_qscheme_round_trips(layers: dict[str, LayerBits]) -> None:
    plan = QuantPlan(layers)
    assert QuantPlan.parse(plan.to_string()).to_string() == plan.to_string()
    assert QuantPlan.from_dict(yaml.safe_load(plan.to_yaml())).to_string() == plan.to_string()
    again = QuantPlan.from_qscheme(plan.qscheme(), list(plan))
    assert again.to_string() == plan.to_string()


# --------------------------------------------------------------------------- qscheme


def test_qscheme_form() -> None:
    plan = QuantPlan.parse("conv1=8/8,conv2=3/5,fc=1/8")
    assert plan.qscheme() == [[8, 3, 1], [8, 5, 8]]
    back = QuantPlan.from_qscheme(plan.qscheme(), MODEL_LAYERS)
    assert back == plan
    assert back.to_string() == "conv1=8/8,conv2=3/5,fc=1/8"


@pytest.mark.parametrize(
    ("qscheme", "kind", "count"),
    [
        ([[8, 8], [8, 8, 8]], "weight", 2),
        ([[8, 8, 8], [8, 8, 8, 8]], "activation", 4),
        ([[], []], "weight", 0),
    ],
)
def test_from_qscheme_wrong_lengths(qscheme: list[list[int]], kind: str, count: int) -> None:
    with pytest.raises(PlanError) as info:
        QuantPlan.from_qscheme(qscheme, MODEL_LAYERS)
    msg = str(info.value)
    assert f"the qscheme has {count} {kind} bit-widths but the model has 3" in msg
    assert "(conv1, conv2, fc)" in msg


@pytest.mark.parametrize("qscheme", [[[8, 8, 8]], [[8, 8, 8], [8, 8, 8], [8, 8, 8]]])
def test_from_qscheme_wrong_number_of_lists(qscheme: list[list[int]]) -> None:
    with pytest.raises(PlanError, match=f"got {len(qscheme)} lists"):
        QuantPlan.from_qscheme(qscheme, MODEL_LAYERS)


def test_from_qscheme_bad_bits() -> None:
    with pytest.raises(PlanError, match=r"layer 'conv2': weight bit-width is 0.*1\.\.8"):
        QuantPlan.from_qscheme([[8, 0, 8], [8, 8, 8]], MODEL_LAYERS)
