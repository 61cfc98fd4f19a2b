"""Hostile plan files and texts: each is refused with one short PlanError, quickly."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mico.errors import PlanError, brief
from mico.quant.plan import QuantPlan
from mico.safe_yaml import MAX_YAML_BYTES, MAX_YAML_NODES

ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)


def _load(tmp_path: Path, text: str | bytes, name: str = "plan.yaml") -> PlanError:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(PlanError) as info:
        QuantPlan.load(path)
    message = str(info.value)
    assert "\n" not in message and len(message) < 400, message
    return info.value


def test_duplicate_key_names_key_and_lines(tmp_path: Path) -> None:
    error = _load(tmp_path, "fc1: {w: 8, a: 8}\nfc2: {w: 4, a: 4}\nfc1: {w: 2, a: 2}\n")
    assert "duplicate key 'fc1' at line 3 (first at line 1)" in str(error)


def test_duplicate_inner_key(tmp_path: Path) -> None:
    error = _load(tmp_path, "fc1: {w: 8, w: 4, a: 8}\n")
    assert "duplicate key 'w'" in str(error)


def test_alias_bomb_is_refused_fast(tmp_path: Path) -> None:
    start = time.monotonic()
    error = _load(tmp_path, ALIAS_BOMB + "fc1: {w: *i, a: 8}\n")
    assert time.monotonic() - start < 5
    assert f"more than {MAX_YAML_NODES} values" in str(error)


def test_small_aliases_still_work(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text("fc1: &b {w: 4, a: 8}\nfc2: *b\n")
    assert QuantPlan.load(path).to_string() == "fc1=4/8,fc2=4/8"


def test_recursive_alias(tmp_path: Path) -> None:
    assert "recursive alias" in str(_load(tmp_path, "fc1: &x [1, *x]\n"))


def test_oversized_file_names_the_limit(tmp_path: Path) -> None:
    start = time.monotonic()
    error = _load(tmp_path, "fc1: {w: 8, a: 8}\n" + "#" * (13 * 2**20) + "\n")
    assert time.monotonic() - start < 5
    assert f"{MAX_YAML_BYTES}-byte limit" in str(error)


def test_non_utf8(tmp_path: Path) -> None:
    error = _load(tmp_path, b"fc1: {w: 8, a: 8}\n# caf\xe9\n")
    assert "not UTF-8 text (bad byte at offset 23)" in str(error)


def test_deep_nesting(tmp_path: Path) -> None:
    error = _load(tmp_path, "fc1: " + "[" * 50_000 + "]" * 50_000 + "\n")
    assert "plan.yaml" in str(error)


def test_huge_bit_width_is_shortened(tmp_path: Path) -> None:
    error = _load(tmp_path, "fc1: {w: " + "9" * 5000 + ", a: 8}\n")
    assert "holds a value that cannot be read" in str(error)
    error = _load(tmp_path, "fc1: {w: " + "9" * 4000 + ", a: 8}\n")
    assert "outside the allowed range 1..8" in str(error)
    assert "<integer of" in str(error)


def test_huge_entry_is_shortened(tmp_path: Path) -> None:
    error = _load(tmp_path, "fc1: " + "x" * 500_000 + "\n")
    assert "expected {w: W, a: A}" in str(error)


def test_directory_is_named_as_such(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="is a directory, not a file"):
        QuantPlan.load(tmp_path)


def test_overlong_name_is_a_plan_error() -> None:
    with pytest.raises(PlanError, match="neither a file nor layer=W/A text"):
        QuantPlan.load("a" * 300)
    with pytest.raises(PlanError, match="not of the form layer=W/A"):
        QuantPlan.load("fc1=" + "a" * 300)


def test_brief_bounds_every_value() -> None:
    nested: object = [1] * 9
    for _ in range(9):
        nested = [nested] * 9
    assert len(brief(nested)) <= 80
    assert brief("x" * 10**7).endswith("'")
    assert brief(10**5000) == "<integer of 16610 bits>"
    assert brief("conv1") == "'conv1'"
    assert len(brief(b"\xff" * 1000, limit=20)) == 20


def test_many_unknown_layers_are_summarised(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text("".join(f"layer{i}_{'x' * 60}: {{w: 8, a: 8}}\n" for i in range(5000)))
    with pytest.raises(PlanError) as info:
        QuantPlan.load(path).validate_for(["conv1", "fc"])
    message = str(info.value)
    assert len(message) < 1000
    assert "and 4992 more" in message
    assert "no bit-widths for conv1, fc" in message


def test_overlong_uniform_plan_through_quantize_model() -> None:
    from mico.models import from_zoo
    from mico.quant import quantize_model

    with pytest.raises(PlanError, match="is not a whole number"):
        quantize_model(from_zoo("mlp"), "a" * 300 + "/8")
