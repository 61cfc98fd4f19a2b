"""Structure-aware mutations of a saved IR graph, and the judge of what loading one did.

Shared by the hypothesis fuzz test (tests/ir/test_ir_fuzz.py) and the long run
(benchmarks/ir_fuzz.py). A case is a saved graph (JSON document + safetensors bytes) changed by
one to three mutations drawn from a ``random.Random``: fields dropped, duplicated or retyped,
shapes and dtypes changed, names swapped, indices made negative or out of range, deep nesting,
bad attributes, alias cycles, tampered weights, truncation and byte flips. :func:`judge` loads
the case and, when it loads, runs it: the outcome must be a valid load whose results match
their declared types, or an ``IRFormatError`` (a mico error at execution is also clean).
"""

from __future__ import annotations

import contextlib
import copy
import json
import random
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from mico.errors import MicoError
from mico.execute import execute_ir
from mico.frontend import extract_ir
from mico.ir.dtypes import DataType
from mico.ir.graph import Value
from mico.ir.serialize import IRFormatError, load_ir, save_ir
from mico.ir.types import TensorType

#: the outcomes :func:`judge` reports; only "bug" and "lie" are failures
CLEAN = ("valid", "format_error", "exec_error")


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(10, 5)
        self.fc2 = nn.Linear(5, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.relu(self.fc1(x))
        return self.fc2(y.reshape(1, 5) + y), y.flatten()


def base_case(folder: Path) -> tuple[dict[str, Any], bytes]:
    """A small saved graph (weights, a constant, an alias, attributes): (document, weights)."""
    torch.manual_seed(0)
    graph = extract_ir(_Net().eval(), (torch.randn(1, 10),))
    by_name = {v.name: v for n in graph.nodes for v in n.outputs}
    by_name["reshape"].alias_of = by_name["relu"]
    const = Value("k", TensorType((1, 5), DataType.FP32), data=torch.full((1, 5), 0.25))
    add = next(n for n in graph.nodes if n.name == "add")
    add.inputs[1] = const
    path = save_ir(graph, folder / "case.json")  # judge() writes cases under this name
    return json.loads(path.read_text()), path.with_suffix(".safetensors").read_bytes()


# --------------------------------------------------------------------------- mutations
HOSTILE = [-1, -(2**31), 2**63, 2**70, 0, 1.5, float("nan"), "x", "", None, True, [], {}, [1, 2]]
HOSTILE += [{"$tuple": 5}, {"$dict": [[1]]}, {"sym": 3}, {"$tensor": {"dtype": "float32"}}]
HOSTILE += [{"$ndarray": {"dtype": "<f4", "shape": [10**9], "data": ""}}, {"kind": "int"}]
HOSTILE += [{"$tensor": {"dtype": "float32", "shape": [10**6, 10**6], "data": ""}}]


def _containers(doc: Any) -> list[tuple[Any, Any]]:
    """Every (container, key) slot in ``doc``, walked iteratively."""
    slots: list[tuple[Any, Any]] = []
    stack = [doc]
    while stack:
        item = stack.pop()
        keys = list(item) if isinstance(item, dict) else range(len(item))
        for k in keys:
            slots.append((item, k))
            if isinstance(item[k], dict | list):
                stack.append(item[k])
    return slots


def _deep(depth: int) -> str:
    """A placeholder that :func:`mutate` replaces by ``depth`` nested lists in the JSON text
    (json.dumps itself would overflow the stack)."""
    return f"__DEEP_{depth}__"


def drop_field(doc: dict[str, Any], rng: random.Random) -> None:
    item, key = rng.choice(_containers(doc))
    del item[key]


def duplicate_item(doc: dict[str, Any], rng: random.Random) -> None:
    lists = [(c, k) for c, k in _containers(doc) if isinstance(c[k], list) and c[k]]
    item, key = rng.choice(lists)
    item[key].append(copy.deepcopy(rng.choice(item[key])))


def retype_field(doc: dict[str, Any], rng: random.Random) -> None:
    item, key = rng.choice(_containers(doc))
    item[key] = copy.deepcopy(rng.choice(HOSTILE))


def change_shape(doc: dict[str, Any], rng: random.Random) -> None:
    shape = rng.choice(doc["values"])["type"]["shape"]
    action = rng.randrange(4)
    if action == 0 and shape:
        shape[rng.randrange(len(shape))] = rng.choice([0, 1, 2, 3, 5, 10, 11, -1, -5, 2**40])
    elif action == 1:
        shape.insert(rng.randrange(len(shape) + 1), rng.choice([1, 2, 5]))
    elif action == 2 and shape:
        shape.pop(rng.randrange(len(shape)))
    else:
        shape[:] = [{"sym": "s0"}, *shape[1:]]


def change_dtype(doc: dict[str, Any], rng: random.Random) -> None:
    dtype = rng.choice(doc["values"])["type"]["dtype"]
    dtype.update(
        rng.choice([{"kind": "int", "bits": 8}, {"kind": "float", "bits": 64}, {"kind": "int"}])
    )
    if rng.random() < 0.2:
        dtype["bits"] = rng.choice([3, 0, -8, "32", 1000])


def swap_names(doc: dict[str, Any], rng: random.Random) -> None:
    a, b = rng.sample(doc["values"], 2)
    a["name"], b["name"] = b["name"], a["name"]
    if rng.random() < 0.5:
        x, y = rng.sample(doc["nodes"], 2)
        x["inputs"], y["inputs"] = y["inputs"], x["inputs"]


def bad_index(doc: dict[str, Any], rng: random.Random) -> None:
    lists = [doc["inputs"], doc["outputs"], doc["params"]]
    lists += [n[k] for n in doc["nodes"] for k in ("inputs", "outputs")]
    target = rng.choice([x for x in lists if x] or [doc["outputs"]])
    bad = rng.choice([-1, -2, -len(doc["values"]), len(doc["values"]), 10**20, True, 1.0, "0"])
    if target:
        target[rng.randrange(len(target))] = bad
    else:
        target.append(bad)


def deep_nesting(doc: dict[str, Any], rng: random.Random) -> None:
    depth = rng.choice([70, 500, 5000])
    where = rng.choice(["attrs", "meta", "shape"])
    if where == "attrs":
        rng.choice(doc["nodes"])["attrs"]["deep"] = _deep(depth)
    elif where == "meta":
        doc["meta"] = {"$dict": [["deep", _deep(depth)]]}
    else:
        doc["values"][0]["type"]["shape"] = _deep(depth)


def bad_attrs(doc: dict[str, Any], rng: random.Random) -> None:
    node = rng.choice(doc["nodes"])
    node["attrs"] = copy.deepcopy(
        rng.choice([[1, 2], "attrs", None, 5, {"alpha": {"$nope": 1}}, {"alpha": [{}]}])
    )


def alias_cycle(doc: dict[str, Any], rng: random.Random) -> None:
    n = len(doc["values"])
    a, b = rng.sample(range(n), 2)
    doc["values"][a]["alias_of"] = b
    doc["values"][b]["alias_of"] = rng.choice([a, b, -1])


def change_op(doc: dict[str, Any], rng: random.Random) -> None:
    rng.choice(doc["nodes"])["op"] = rng.choice(
        ["aten.relu.default", "aten.neg.default", "no.such.op", "aten.linear.default", ""]
    )


def reorder_nodes(doc: dict[str, Any], rng: random.Random) -> None:
    if rng.random() < 0.5:
        rng.shuffle(doc["nodes"])
    else:
        doc["nodes"].pop(rng.randrange(len(doc["nodes"])))


def wrong_version(doc: dict[str, Any], rng: random.Random) -> None:
    key = rng.choice(["format", "format_version", "save_id", "weights_file"])
    doc[key] = rng.choice([2, 0, "1", None, "other", "../x.safetensors", "/etc/passwd"])


MUTATIONS: list[Callable[[dict[str, Any], random.Random], None]] = [
    drop_field,
    duplicate_item,
    retype_field,
    change_shape,
    change_dtype,
    swap_names,
    bad_index,
    deep_nesting,
    bad_attrs,
    alias_cycle,
    change_op,
    reorder_nodes,
    wrong_version,
]


def tamper_weights(weights: bytes, save_id: str, rng: random.Random) -> bytes:
    """Rewrite the weights file with one tensor of another shape or dtype (same save_id)."""
    from safetensors.torch import load, save

    tensors = load(weights)
    key = rng.choice(sorted(tensors))
    t = tensors[key]
    tensors[key] = rng.choice(
        [t[: max(t.shape[0] // 2, 1)] if t.dim() else t.reshape(1), t.double(), t.reshape(-1)]
    ).contiguous()
    if rng.random() < 0.2:
        del tensors[key]
    return save(tensors, metadata={"format": "mico.ir", "save_id": save_id})


def mutate(doc: dict[str, Any], weights: bytes, rng: random.Random) -> tuple[bytes, bytes]:
    """A hostile case derived from the saved graph: (JSON bytes, weights bytes)."""
    doc = copy.deepcopy(doc)
    for _ in range(rng.randint(1, 3)):
        # an earlier mutation may have removed what this one changes
        with contextlib.suppress(KeyError, IndexError, TypeError, ValueError, AttributeError):
            rng.choice(MUTATIONS)(doc, rng)
    if rng.random() < 0.15:
        weights = tamper_weights(weights, str(doc.get("save_id")), rng)
    text = json.dumps(doc, indent=rng.choice([None, 1])).encode()
    for depth in (70, 500, 5000):
        text = text.replace(f'"__DEEP_{depth}__"'.encode(), b"[" * depth + b"1" + b"]" * depth)
    roll = rng.random()
    if roll < 0.1:
        text = text[: rng.randrange(len(text))]
    elif roll < 0.2:
        flipped = bytearray(text)
        for _ in range(rng.randint(1, 4)):
            flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
        text = bytes(flipped)
    elif roll < 0.25:
        blob = bytearray(weights)
        blob[rng.randrange(len(blob))] ^= 0xFF
        weights = bytes(blob[: rng.choice([len(blob), len(blob) // 2, 8])])
    return text, weights


# --------------------------------------------------------------------------- judging
def _inputs_for(graph: Any) -> list[torch.Tensor] | None:
    tensors = []
    for value in graph.inputs:
        shape = value.type.shape
        if not all(isinstance(d, int) for d in shape) or int(np.prod(shape)) > 10**6:
            return None  # symbolic or huge declared input: loading was the test
        tensors.append(torch.ones(tuple(shape), dtype=value.type.dtype.to_torch()))
    return tensors


def judge(text: bytes, weights: bytes, folder: Path | None = None) -> tuple[str, str]:
    """Load (and run) one case: (outcome, detail). Outcomes: valid, format_error, exec_error
    (a mico error while running a graph that loaded), lie (a result contradicts its declared
    type) and bug (any other exception)."""
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        path = Path(tmp) / "case.json"
        path.write_bytes(text)
        path.with_suffix(".safetensors").write_bytes(weights)
        try:
            graph = load_ir(path)
        except IRFormatError as exc:
            return "format_error", str(exc).replace(str(path), "case.json")
        except Exception as exc:  # the point is to catch what leaks
            return "bug", f"load_ir: {type(exc).__name__}: {exc}"[:500]
    inputs = _inputs_for(graph)
    if inputs is None:
        return "valid", "not executed (symbolic or huge input)"
    try:
        results = execute_ir(graph, inputs)
    except MicoError as exc:
        return "exec_error", f"{type(exc).__name__}: {exc}"[:500]
    except Exception as exc:
        return "bug", f"execute_ir: {type(exc).__name__}: {exc}"[:500]
    for value, result in zip(graph.outputs, results, strict=False):
        declared = value.type.shape
        shape_ok = len(declared) == result.dim() and all(
            not isinstance(d, int) or d == n for d, n in zip(declared, result.shape, strict=True)
        )
        if not shape_ok or result.dtype != value.type.dtype.to_torch():
            return "lie", (
                f"output '{value.name}' declared {tuple(declared)} {value.type.dtype}, "
                f"got {tuple(result.shape)} {result.dtype}"
            )
    return "valid", "executed"
