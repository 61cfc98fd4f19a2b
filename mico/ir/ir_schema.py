"""Check a parsed IR file against its own declared structure and types before building it.

:func:`mico.ir.serialize.load_ir` calls :func:`check_document` on the JSON document and the
tensors of the weights file. Every field is checked for its type (names are strings, indices
are non-negative ints in range, shapes are lists of non-negative ints or ``{"sym": name}``),
references must resolve, ``alias_of`` chains must end, nesting is bounded, and every tensor
(weights and constants' data) must have exactly the shape and dtype its value declares. A
violation is an :class:`IRFormatError` naming the field path (``nodes[3].attrs``) and what was
expected, so a damaged file never loads into a graph whose results contradict its types.
"""

from __future__ import annotations

from typing import Any

import torch

from mico.errors import MicoError, brief
from mico.ir.dtypes import DataType

#: Deepest nesting of lists/objects an IR file may hold (attributes of real graphs need < 10).
MAX_DEPTH = 64
#: Largest IR JSON file load_ir reads: parsed JSON takes several times its size in memory, and
#: the tensors live in the separate weights file (the largest zoo graph, shufflenetv2, takes 67 KB).
MAX_FILE_BYTES = 64 * 1024**2


class IRFormatError(MicoError, ValueError):
    """An IR file is missing, corrupt, from a newer mico, or holds a value mico cannot read."""


def _fail(where: str, expected: str, got: Any) -> IRFormatError:
    return IRFormatError(f"{where} must be {expected}, got {brief(got, 60)}")


def check_depth(doc: Any, limit: int = MAX_DEPTH) -> None:
    """Refuse nesting deeper than ``limit`` (walked iteratively: no recursion to exhaust)."""
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            raise IRFormatError(
                f"the document nests lists/objects deeper than {limit} levels; an IR file "
                "written by save_ir never does, save the graph again"
            )
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _str(doc: dict[str, Any], key: str, where: str) -> str:
    if key not in doc:
        raise IRFormatError(f"{where}.{key} is missing (expected a string)")
    if not isinstance(doc[key], str):
        raise _fail(f"{where}.{key}", "a string", doc[key])
    return doc[key]


def _list(doc: dict[str, Any], key: str, where: str) -> list[Any]:
    if key not in doc:
        raise IRFormatError(f"{where}{key} is missing (expected a list)")
    if not isinstance(doc[key], list):
        raise _fail(f"{where}{key}", "a list", doc[key])
    return doc[key]


def _indices(items: list[Any], where: str, count: int) -> list[int]:
    for i, x in enumerate(items):
        if not _is_int(x) or not 0 <= x < count:
            raise _fail(f"{where}[{i}]", f"a value index in 0..{count - 1}", x)
    return items


def _check_dtype(doc: Any, where: str) -> DataType:
    if not isinstance(doc, dict) or set(doc) != {"kind", "bits"}:
        raise _fail(where, "an object with 'kind' and 'bits'", doc)
    if not isinstance(doc["kind"], str) or not _is_int(doc["bits"]):
        raise _fail(where, "a kind string and an int bit-width", doc)
    try:
        return DataType(doc["kind"], doc["bits"])
    except ValueError as exc:
        raise IRFormatError(f"{where} is not a data type: {exc}") from exc


def _check_type(doc: Any, where: str) -> tuple[list[Any], DataType]:
    if not isinstance(doc, dict) or set(doc) != {"shape", "dtype"}:
        raise _fail(where, "an object with 'shape' and 'dtype'", doc)
    shape = doc["shape"]
    if not isinstance(shape, list):
        raise _fail(f"{where}.shape", "a list of dimensions", shape)
    for i, d in enumerate(shape):
        if _is_int(d):
            if not 0 <= d < 2**62:
                raise _fail(f"{where}.shape[{i}]", "a non-negative dimension", d)
        elif not (isinstance(d, dict) and set(d) == {"sym"} and isinstance(d["sym"], str)):
            raise _fail(f"{where}.shape[{i}]", "an int or {'sym': name}", d)
    return shape, _check_dtype(doc["dtype"], f"{where}.dtype")


def _check_tensor(tensor: torch.Tensor, shape: list[Any], dtype: DataType, where: str) -> None:
    """A tensor from the weights file must be exactly what its value declares."""
    same_rank = tensor.dim() == len(shape)
    if not same_rank or any(
        _is_int(d) and d != n for d, n in zip(shape, tensor.shape, strict=False)
    ):
        declared = tuple(d if _is_int(d) else d["sym"] for d in shape)
        raise IRFormatError(
            f"{where} holds a tensor of shape {tuple(tensor.shape)} but its type declares "
            f"{declared}; the weights file does not match the graph, save the IR again"
        )
    if tensor.dtype != dtype.to_torch():
        raise IRFormatError(
            f"{where} holds a {tensor.dtype} tensor but its type declares {dtype} "
            f"({dtype.to_torch()}); the weights file does not match the graph, save the IR again"
        )


def _check_alias_chains(values: list[dict[str, Any]]) -> None:
    """Every ``alias_of`` chain ends; linear time (chains already walked are not walked again)."""
    ends: set[int] = set()  # values whose chain is known to end
    for start in range(len(values)):
        path: list[int] = []
        on_path: set[int] = set()
        i = start
        while i not in ends and "alias_of" in values[i]:
            if i in on_path:
                raise IRFormatError(
                    f"values[{start}].alias_of forms a cycle (value {i} is reached twice); "
                    "an alias must end at a value that owns its memory"
                )
            path.append(i)
            on_path.add(i)
            i = values[i]["alias_of"]
        ends.update(path)
        ends.add(i)


def _check_values(values: list[Any], tensors: dict[str, torch.Tensor]) -> list[tuple]:
    types = []
    for i, vdoc in enumerate(values):
        where = f"values[{i}]"
        if not isinstance(vdoc, dict):
            raise _fail(where, "an object", vdoc)
        unknown = set(vdoc) - {"name", "type", "data", "qformat", "scale", "alias_of"}
        if unknown:
            raise IRFormatError(f"{where} has unknown fields {sorted(unknown)[:4]}")
        _str(vdoc, "name", where)
        if "type" not in vdoc:
            raise IRFormatError(f"{where}.type is missing (expected shape and dtype)")
        shape, dtype = _check_type(vdoc["type"], f"{where}.type")
        types.append((shape, dtype))
        if "alias_of" in vdoc:
            target = vdoc["alias_of"]
            if not _is_int(target) or not 0 <= target < len(values) or target == i:
                raise _fail(
                    f"{where}.alias_of", f"another value's index in 0..{len(values) - 1}", target
                )
        if "data" in vdoc:
            data = vdoc["data"]
            if not (
                isinstance(data, dict)
                and set(data) == {"key", "kind"}
                and isinstance(data["key"], str)
                and data["kind"] in ("torch", "numpy")
            ):
                raise _fail(f"{where}.data", "{'key': name, 'kind': 'torch'|'numpy'}", data)
            if data["key"] not in tensors:
                raise IRFormatError(
                    f"{where}.data names {brief(data['key'], 60)}, which is not in the weights file"
                )
            _check_tensor(tensors[data["key"]], shape, dtype, f"{where}.data")
    _check_alias_chains(values)
    return types


def _check_nodes(nodes: list[Any], count: int) -> set[int]:
    produced: dict[int, int] = {}
    for i, ndoc in enumerate(nodes):
        where = f"nodes[{i}]"
        if not isinstance(ndoc, dict):
            raise _fail(where, "an object", ndoc)
        _str(ndoc, "name", where)
        if not _str(ndoc, "op", where):
            raise _fail(f"{where}.op", "an op name", "")
        _indices(_list(ndoc, "inputs", f"{where}."), f"{where}.inputs", count)
        for out in _indices(_list(ndoc, "outputs", f"{where}."), f"{where}.outputs", count):
            if out in produced:
                raise IRFormatError(
                    f"{where}.outputs names value {out}, already produced by nodes[{produced[out]}]"
                    "; every value has one producer"
                )
            produced[out] = i
        if not isinstance(ndoc.get("attrs"), dict):
            raise _fail(f"{where}.attrs", "an object of attributes", ndoc.get("attrs"))
    return set(produced)


def check_document(doc: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
    """Check the IR document and its tensors; :class:`IRFormatError` names the first flaw."""
    check_depth(doc)
    _str(doc, "name", "the graph")
    values = _list(doc, "values", "")
    types = _check_values(values, tensors)
    count = len(values)
    for key in ("inputs", "params", "outputs"):
        _indices(_list(doc, key, ""), key, count)
    produced = _check_nodes(_list(doc, "nodes", ""), count)
    weights = _list(doc, "weights", "")
    for i, name in enumerate(weights):
        if not isinstance(name, str):
            raise _fail(f"weights[{i}]", "a weight name (string)", name)
        if name not in tensors:
            raise IRFormatError(f"weights[{i}] {brief(name, 60)} is not in the weights file")
    if len(set(weights)) != len(weights):
        raise IRFormatError("weights lists a name twice")
    listed = set(weights)
    for i, vdoc in enumerate(values):  # the executor reads these values from the weights
        name = vdoc["name"]
        if name in listed and i not in produced:
            shape, dtype = types[i]
            _check_tensor(tensors[name], shape, dtype, f"weight {brief(name, 60)} (values[{i}])")
