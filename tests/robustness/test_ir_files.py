"""IR file corpus (issue 12, part B): hostile IR files end in a one-line IRFormatError.

Each case writes a damaged copy of a saved graph (``case.json`` + ``case.safetensors``) and
loads it with ``mico.ir.load_ir`` (then runs it with ``execute_ir``) in a child process under
the harness's time and address-space limits. It must exit 2 with one ``error:`` line naming the
field and what was expected, print no traceback, and change no file. No ``mico`` command loads
IR files, so the corpus goes through the API only.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from harness import assert_clean_error, assert_untouched, run_api, snapshot
from torch import nn

from mico.frontend import extract_ir
from mico.ir.serialize import save_ir

LOAD_AND_RUN = """
import torch
from mico.execute import execute_ir
from mico.ir import load_ir
graph = load_ir("case/case.json")
execute_ir(graph, torch.ones(1, 10))
print("loaded and ran")
"""


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(10, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc1(x)).flatten()


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], bytes]:
    path = save_ir(
        extract_ir(_Net().eval(), (torch.ones(1, 10),)), tmp_path_factory.mktemp("ir") / "case.json"
    )
    return json.loads(path.read_text()), path.with_suffix(".safetensors").read_bytes()


def _value(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(v for v in doc["values"] if v["name"] == name)


def _deep(doc: dict[str, Any]) -> str:
    doc["meta"] = "DEEP"
    return json.dumps(doc).replace('"DEEP"', "[" * 5000 + "]" * 5000)


def _cycle(doc: dict[str, Any]) -> None:
    _value(doc, "linear")["alias_of"] = doc["values"].index(_value(doc, "relu"))
    _value(doc, "relu")["alias_of"] = doc["values"].index(_value(doc, "linear"))


#: (id, change of the document -> None, or -> str (the file's text), or a str/bytes file text;
#: words the error line must contain)
Change = Callable[[dict[str, Any]], Any] | str | bytes
CASES: list[tuple[str, Change, list[str]]] = [
    (
        "weight-5-rows-declared-10",
        lambda d: _value(d, "fc1.weight")["type"].update(shape=[10, 10]),
        ["IRFormatError", "fc1.weight", "(5, 10)", "(10, 10)"],
    ),
    (
        "weight-other-dtype",
        lambda d: _value(d, "fc1.bias")["type"].update(dtype={"kind": "float", "bits": 16}),
        ["fc1.bias", "torch.float32", "fp16"],
    ),
    ("negative-output-index", lambda d: d["outputs"].__setitem__(0, -1), ["outputs[0]", "0.."]),
    (
        "input-index-out-of-range",
        lambda d: d["nodes"][0]["inputs"].__setitem__(0, 99),
        ["nodes[0].inputs[0]", "99"],
    ),
    ("attrs-a-list", lambda d: d["nodes"][0].__setitem__("attrs", [1, 2]), ["nodes[0].attrs"]),
    ("nesting-5000-deep", _deep, ["deeper than 64"]),
    ("alias-cycle", _cycle, ["alias_of", "cycle"]),
    (
        "value-name-not-a-string",
        lambda d: d["values"][0].__setitem__("name", 7),
        ["values[0].name"],
    ),
    (
        "negative-dimension",
        lambda d: d["values"][0]["type"]["shape"].__setitem__(0, -4),
        ["values[0].type.shape[0]", "non-negative"],
    ),
    (
        "unknown-dtype-kind",
        lambda d: d["values"][0]["type"].update(dtype={"kind": "complex", "bits": 64}),
        ["values[0].type.dtype", "complex"],
    ),
    (
        "two-producers",
        lambda d: d["nodes"].append(copy.deepcopy(d["nodes"][0])),
        ["nodes[3].outputs", "one producer"],
    ),
    ("empty-op-name", lambda d: d["nodes"][1].__setitem__("op", ""), ["nodes[1].op"]),
    (
        "unknown-attribute-tag",
        lambda d: d["nodes"][2]["attrs"].__setitem__("start_dim", {"$pickle": "x"}),
        ["unknown attribute tag", "$pickle"],
    ),
    (
        "tensor-attr-declaring-10^12-elements",
        lambda d: d["nodes"][2]["attrs"].__setitem__(
            "start_dim", {"$tensor": {"dtype": "float32", "shape": [10**6, 10**6], "data": ""}}
        ),
        ["$tensor", "declares elements"],
    ),
    ("newer-format-version", lambda d: d.__setitem__("format_version", 99), ["99", "upgrade mico"]),
    (
        "weights-file-outside",
        lambda d: d.__setitem__("weights_file", "../x.safetensors"),
        ["weights file"],
    ),
    ("truncated", lambda d: json.dumps(d)[:200], ["not valid JSON"]),
    ("not-an-object", "[1, 2, 3]", ["not a mico IR file"]),
    ("empty-file", "", ["not valid JSON"]),
    ("not-utf8", b'{"format": "mico.ir\xff\xfe"}', ["cannot read"]),
    (
        "declared-result-type-wrong",
        lambda d: _value(d, "linear")["type"].update(shape=[1, 6]),
        ["ExecutionError", "node 'linear'", "(1, 5)", "declares (1, 6)"],
    ),
]


@pytest.mark.parametrize(("change", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_ir_file_is_a_clean_error(
    tmp_path: Path, saved: tuple[dict[str, Any], bytes], change: Change, words: list[str]
) -> None:
    doc, weights = copy.deepcopy(saved[0]), saved[1]
    if isinstance(change, str | bytes):
        text: str | bytes = change
    else:
        returned = change(doc)
        text = returned if isinstance(returned, str) else json.dumps(doc)
    case = tmp_path / "case"
    case.mkdir()
    json_path = case / "case.json"
    json_path.write_bytes(text.encode() if isinstance(text, str) else text)
    (case / "case.safetensors").write_bytes(weights)
    before = snapshot(tmp_path)
    result = run_api(LOAD_AND_RUN, tmp_path)
    assert_clean_error(result, *words)
    assert_untouched(before, tmp_path)


def test_the_undamaged_file_loads_and_runs(
    tmp_path: Path, saved: tuple[dict[str, Any], bytes]
) -> None:
    (tmp_path / "case").mkdir()
    (tmp_path / "case" / "case.json").write_text(json.dumps(saved[0]))
    (tmp_path / "case" / "case.safetensors").write_bytes(saved[1])
    result = run_api(LOAD_AND_RUN, tmp_path)
    assert result.returncode == 0 and "loaded and ran" in result.stdout, result.output[-2000:]


def test_missing_and_foreign_weights_files_are_clean_errors(
    tmp_path: Path, saved: tuple[dict[str, Any], bytes]
) -> None:
    case = tmp_path / "case"
    case.mkdir()
    (case / "case.json").write_text(json.dumps(saved[0]))
    result = run_api(LOAD_AND_RUN, tmp_path)
    assert_clean_error(result, "case.safetensors", "missing", "copy them together")
    other = save_ir(extract_ir(_Net().eval(), (torch.ones(1, 10),)), tmp_path / "other.json")
    (case / "case.safetensors").write_bytes(other.with_suffix(".safetensors").read_bytes())
    before = snapshot(tmp_path)
    assert_clean_error(run_api(LOAD_AND_RUN, tmp_path), "does not belong", "save the IR again")
    assert_untouched(before, tmp_path)
