"""Save and load IR graphs: a JSON file for the graph, a ``.safetensors`` file for the tensors.

``save_ir(graph, "model.json")`` writes ``model.json`` and ``model.safetensors`` beside it, each
atomically (temporary file, then rename; the JSON is renamed last, so a reader never sees a
graph whose weights are not in place). The JSON names its ``format`` and ``format_version``;
attribute values keep their Python types through tagged objects::

    1, 1.0, true, null, "s", [..]           ints, floats, bools, None, strings, lists
    {"$tuple": [..]}                          tuples
    {"$dict": [[key, value], ..]}             dicts (any encodable keys)
    {"$float": "inf" | "-inf" | "nan"}        non-finite floats (the file stays strict JSON)
    {"$dtype": "float32"}, {"$device": "cpu"}, {"$layout": "strided"},
    {"$memory_format": "contiguous_format"}   torch enums
    {"$qformat": {"bits": 4, "signed": true}} mico.quant.arithmetic.QFormat ("zero": z when
                                              asymmetric)
    {"$datatype": {...}}                      mico.ir.DataType
    {"$tensor_list": [0, null, 1]}            TensorListRef (positions in node.inputs)
    {"$ndarray": {...}}, {"$npscalar": {...}}, {"$tensor": {...}}, {"$complex": [re, im]}

A tensor dimension that is not an int (a symbolic dimension) is saved as ``{"sym": "s0"}`` and
restored through :data:`decode_dim` (a hook, for the IR's symbolic dimensions).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import os
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mico.errors import MicoError, brief
from mico.ir.analyzer import IRGraph, OpNode, TensorListRef, symbolic_dim
from mico.ir.dtypes import DataType
from mico.ir.graph import Graph, Value
from mico.ir.ir_schema import MAX_DEPTH, MAX_FILE_BYTES, IRFormatError, check_document
from mico.ir.types import TensorType
from mico.quant.arithmetic import QFormat

FORMAT = "mico.ir"
FORMAT_VERSION = 1
_DATA_PREFIX = "__value_data__/"


# --------------------------------------------------------------------------- dims and types
def encode_dim(dim: Any) -> Any:
    """A dimension as JSON: an int, or ``{"sym": name}`` for a symbolic dimension."""
    if isinstance(dim, int) and not isinstance(dim, bool):
        return dim
    return {"sym": str(getattr(dim, "name", dim))}


def _decode_symbol(name: str, symbols: dict[str, Any]) -> Any:
    """Hook: a saved symbolic dimension back to the IR's (one object per name and file)."""
    return symbolic_dim(name, symbols)


#: Replaceable hook turning a saved ``{"sym": name}`` dimension into an IR dimension.
decode_dim: Callable[[str, dict[str, Any]], Any] = _decode_symbol


def _encode_datatype(dtype: Any) -> Any:
    if dataclasses.is_dataclass(dtype):
        return {f.name: encode_attr(getattr(dtype, f.name)) for f in dataclasses.fields(dtype)}
    raise IRFormatError(f"cannot save data type {dtype!r}: it is not a DataType")


def _decode_datatype(fields: Any) -> DataType:
    if not isinstance(fields, dict):
        raise IRFormatError(f"a data type must be an object of fields, got {brief(fields)}")
    return DataType(**{k: decode_attr(v) for k, v in fields.items()})


def _encode_type(t: TensorType) -> dict[str, Any]:
    return {"shape": [encode_dim(d) for d in t.shape], "dtype": _encode_datatype(t.dtype)}


def _decode_type(doc: dict[str, Any], symbols: dict[str, Any]) -> TensorType:
    shape = tuple(
        decode_dim(d["sym"], symbols) if isinstance(d, dict) else int(d) for d in doc["shape"]
    )
    return TensorType(shape, _decode_datatype(doc["dtype"]))


# --------------------------------------------------------------------------- attributes
def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _torch_dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise IRFormatError(f"unknown torch dtype '{name}'")
    return dtype


def encode_attr(value: Any) -> Any:
    """An attribute value as JSON data that :func:`decode_attr` turns back into it, types kept."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int) and type(value) is int:
        return value
    if type(value) is float:
        if math.isfinite(value):
            return value
        return {"$float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if isinstance(value, list):  # torch.fx's immutable_list included
        return [encode_attr(v) for v in value]
    if type(value) is tuple:
        return {"$tuple": [encode_attr(v) for v in value]}
    if isinstance(value, dict):  # immutable_dict included
        return {"$dict": [[encode_attr(k), encode_attr(v)] for k, v in value.items()]}
    if type(value) is complex:
        return {"$complex": [encode_attr(value.real), encode_attr(value.imag)]}
    if isinstance(value, torch.dtype):
        return {"$dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"$device": str(value)}
    if isinstance(value, torch.memory_format):
        return {"$memory_format": str(value).removeprefix("torch.")}
    if isinstance(value, torch.layout):
        return {"$layout": str(value).removeprefix("torch.")}
    if isinstance(value, QFormat):
        body: dict[str, Any] = {"bits": value.bits, "signed": value.signed}
        if value.zero:
            body["zero"] = value.zero
        return {"$qformat": body}
    if isinstance(value, DataType):
        return {"$datatype": _encode_datatype(value)}
    if isinstance(value, TensorListRef):
        return {"$tensor_list": list(value.positions)}
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise IRFormatError("cannot save a numpy array of Python objects as an attribute")
        return {
            "$ndarray": {
                "dtype": value.dtype.str,
                "shape": list(value.shape),
                "data": _b64(np.ascontiguousarray(value).tobytes()),
            }
        }
    if isinstance(value, np.generic):
        return {"$npscalar": {"dtype": value.dtype.str, "data": _b64(value.tobytes())}}
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        return {
            "$tensor": {
                "dtype": str(t.dtype).removeprefix("torch."),
                "shape": list(t.shape),
                "data": _b64(raw),
            }
        }
    raise IRFormatError(
        f"cannot save an attribute of type {type(value).__module__}.{type(value).__qualname__} "
        f"({value!r}); attributes may be numbers, strings, None, lists, tuples, dicts, torch "
        "dtypes/devices/layouts/memory formats, QFormat, DataType, numpy arrays or tensors"
    )


def decode_attr(data: Any) -> Any:
    """Inverse of :func:`encode_attr`; an unknown tag is an :class:`IRFormatError`."""
    if data is None or isinstance(data, bool | int | float | str):
        return data
    if isinstance(data, list):
        return [decode_attr(v) for v in data]
    if not isinstance(data, dict) or len(data) != 1:
        raise IRFormatError(f"malformed attribute value {brief(data)} (expected one '$tag' key)")
    ((tag, body),) = data.items()
    decoder = _DECODERS.get(tag)
    if decoder is None:
        raise IRFormatError(
            f"unknown attribute tag {brief(tag)} (known: {', '.join(sorted(_DECODERS))}); the file "
            "was written by another program or a newer mico"
        )
    try:
        return decoder(body)
    except IRFormatError:
        raise
    except Exception as exc:
        raise IRFormatError(
            f"malformed '{brief(tag)}' attribute {brief(body)}: {brief(str(exc), 200)}"
        ) from exc


def _decode_float(body: str) -> float:
    if body not in ("inf", "-inf", "nan"):
        raise ValueError(f"not a non-finite float: {body!r}")
    return float(body)


def _decode_ndarray(body: dict[str, Any]) -> np.ndarray:
    raw = base64.b64decode(body["data"])
    array = np.frombuffer(raw, dtype=np.dtype(body["dtype"])).reshape(body["shape"])
    return array.copy()


def _decode_npscalar(body: dict[str, Any]) -> np.generic:
    return np.frombuffer(base64.b64decode(body["data"]), dtype=np.dtype(body["dtype"]))[0]


def _decode_tensor(body: dict[str, Any]) -> torch.Tensor:
    dtype = _torch_dtype(body["dtype"])
    raw = bytearray(base64.b64decode(body["data"]))
    shape = list(body["shape"])
    if not raw:
        if math.prod(shape) != 0:
            raise ValueError(f"shape {brief(shape)} declares elements but the data is empty")
        return torch.empty(shape, dtype=dtype)
    flat = torch.frombuffer(raw, dtype=torch.uint8).view(dtype)
    return flat.reshape(shape).clone()


def _decode_memory_format(body: str) -> torch.memory_format:
    found = getattr(torch, body, None)
    if not isinstance(found, torch.memory_format):
        raise ValueError(f"unknown memory format '{body}'")
    return found


def _decode_layout(body: str) -> torch.layout:
    found = getattr(torch, body, None)
    if not isinstance(found, torch.layout):
        raise ValueError(f"unknown layout '{body}'")
    return found


_DECODERS: dict[str, Callable[[Any], Any]] = {
    "$tuple": lambda body: tuple(decode_attr(v) for v in body),
    "$dict": lambda body: {decode_attr(k): decode_attr(v) for k, v in body},
    "$float": _decode_float,
    "$complex": lambda body: complex(decode_attr(body[0]), decode_attr(body[1])),
    "$dtype": _torch_dtype,
    "$device": torch.device,
    "$memory_format": _decode_memory_format,
    "$layout": _decode_layout,
    "$qformat": lambda body: QFormat(
        int(body["bits"]), bool(body["signed"]), int(body.get("zero", 0))
    ),
    "$datatype": _decode_datatype,
    "$tensor_list": lambda body: TensorListRef(tuple(body)),
    "$ndarray": _decode_ndarray,
    "$npscalar": _decode_npscalar,
    "$tensor": _decode_tensor,
}


# --------------------------------------------------------------------------- files
def weights_path(path: str | Path) -> Path:
    """The ``.safetensors`` file that holds the tensors of the IR saved at ``path``."""
    path = Path(path)
    return path.with_suffix(".safetensors")


def _all_values(graph: Graph) -> list[Value]:
    ordered: dict[int, Value] = {}

    def add(value: Value) -> None:
        if id(value) in ordered:
            return
        if value.alias_of is not None:
            add(value.alias_of)
        ordered[id(value)] = value

    for v in [*graph.inputs, *getattr(graph, "params", [])]:
        add(v)
    for node in graph.nodes:
        for v in [*node.inputs, *node.outputs]:
            add(v)
    for v in graph.outputs:
        add(v)
    return list(ordered.values())


def save_ir(
    graph: Graph, path: str | Path, weights: Mapping[str, torch.Tensor] | None = None
) -> Path:
    """Write ``graph`` to ``path`` (JSON) and its tensors to :func:`weights_path` (safetensors).

    The tensors are the graph's ``weights`` (an :class:`IRGraph`), updated by ``weights``, and
    the ``data`` of constant values. Returns ``path``.
    """
    path = Path(path)
    wpath = weights_path(path)
    if wpath == path:
        raise IRFormatError(f"save the IR graph to a .json path, not {path}")
    table: dict[str, torch.Tensor] = dict(getattr(graph, "weights", None) or {})
    table.update(weights or {})
    values = _all_values(graph)
    ids = {id(v): i for i, v in enumerate(values)}
    tensors: dict[str, torch.Tensor] = {}
    for name, tensor in table.items():
        if not isinstance(tensor, torch.Tensor):
            tensor = torch.as_tensor(np.asarray(tensor))
        tensors[name] = tensor.detach().cpu().contiguous().clone()
    value_docs = []
    for i, v in enumerate(values):
        doc: dict[str, Any] = {"name": v.name, "type": _encode_type(v.type)}
        if v.data is not None:
            key = f"{_DATA_PREFIX}{i}"
            if isinstance(v.data, torch.Tensor):
                tensors[key] = v.data.detach().cpu().contiguous().clone()
                doc["data"] = {"key": key, "kind": "torch"}
            else:
                array = np.ascontiguousarray(np.asarray(v.data))
                tensors[key] = torch.from_numpy(array.copy())
                doc["data"] = {"key": key, "kind": "numpy"}
        if v.qformat is not None:
            doc["qformat"] = encode_attr(v.qformat)
        if v.scale is not None:
            doc["scale"] = encode_attr(v.scale)
        if v.alias_of is not None:
            doc["alias_of"] = ids[id(v.alias_of)]
        value_docs.append(doc)
    nodes = []
    for node in graph.nodes:
        for key in node.attrs:
            if not isinstance(key, str):
                raise IRFormatError(f"node '{node.name}' has a non-string attribute name {key!r}")
        try:
            attrs = {k: encode_attr(v) for k, v in node.attrs.items()}
        except IRFormatError as exc:
            raise IRFormatError(f"cannot save node '{node.name}' ({node.op}): {exc}") from exc
        nodes.append(
            {
                "name": node.name,
                "op": node.op,
                "inputs": [ids[id(v)] for v in node.inputs],
                "outputs": [ids[id(v)] for v in node.outputs],
                "attrs": attrs,
            }
        )
    save_id = uuid.uuid4().hex
    document = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "name": graph.name,
        "weights_file": wpath.name,
        "save_id": save_id,
        "values": value_docs,
        "inputs": [ids[id(v)] for v in graph.inputs],
        "params": [ids[id(v)] for v in getattr(graph, "params", [])],
        "outputs": [ids[id(v)] for v in graph.outputs],
        "weights": sorted(table),
        "nodes": nodes,
        "meta": encode_attr(dict(getattr(graph, "meta", None) or {})),
    }
    text = json.dumps(document, indent=1, allow_nan=False)
    _write_atomically(path, wpath, text, tensors, save_id)
    return path


def _write_atomically(
    path: Path, wpath: Path, text: str, tensors: dict[str, torch.Tensor], save_id: str
) -> None:
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    tmp_json = path.with_name(f".{path.name}.tmp-{tag}")
    tmp_weights = wpath.with_name(f".{wpath.name}.tmp-{tag}")
    try:
        save_file(tensors, str(tmp_weights), metadata={"format": FORMAT, "save_id": save_id})
        tmp_json.write_text(text, encoding="utf-8")
        os.replace(tmp_weights, wpath)
        os.replace(tmp_json, path)
    except BaseException:
        for tmp in (tmp_json, tmp_weights):
            tmp.unlink(missing_ok=True)
        raise


def _read_document(path: Path) -> dict[str, Any]:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise IRFormatError(
                f"the IR file {path} is {size} bytes, more than the {MAX_FILE_BYTES} an IR graph "
                "file may hold (tensors belong in its weights file)"
            )
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise IRFormatError(f"no IR file at {path}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise IRFormatError(f"cannot read the IR file {path}: {exc}") from exc
    try:
        doc = json.loads(text)
    except RecursionError as exc:
        raise IRFormatError(
            f"the IR file {path} nests lists/objects deeper than {MAX_DEPTH} levels; an IR file "
            "written by save_ir never does, save the graph again"
        ) from exc
    except json.JSONDecodeError as exc:
        raise IRFormatError(
            f"the IR file {path} is corrupt: not valid JSON ({exc.msg} at line {exc.lineno}, "
            f"column {exc.colno}); save it again with save_ir"
        ) from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise IRFormatError(f"{path} is not a mico IR file (format {found!r}, expected {FORMAT!r})")
    version = doc.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise IRFormatError(f"the IR file {path} has no valid format_version ({version!r})")
    if version > FORMAT_VERSION:
        raise IRFormatError(
            f"the IR file {path} has format_version {version}, newer than this mico reads "
            f"({FORMAT_VERSION}); upgrade mico to load it"
        )
    return doc


def _read_tensors(path: Path, doc: dict[str, Any]) -> dict[str, torch.Tensor]:
    from safetensors import safe_open

    wname = doc.get("weights_file")
    if not isinstance(wname, str) or Path(wname).name != wname:
        raise IRFormatError(f"the IR file {path} names no valid weights file ({wname!r})")
    wpath = path.parent / wname
    if not wpath.is_file():
        raise IRFormatError(
            f"the weights file {wpath} of the IR file {path} is missing; save_ir writes both "
            "files, copy them together"
        )
    try:
        tensors: dict[str, torch.Tensor] = {}
        with safe_open(str(wpath), framework="pt") as f:
            metadata = f.metadata() or {}
            for key in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                # a fresh (aligned) copy: kernels pick their code path by alignment, and the
                # IR must compute exactly what the model computes with its own tensors
                tensors[key] = f.get_tensor(key).clone()
    except Exception as exc:
        raise IRFormatError(f"the weights file {wpath} of {path} is corrupt: {exc}") from exc
    if metadata.get("save_id") != doc.get("save_id"):
        raise IRFormatError(
            f"the weights file {wpath} does not belong to {path} (it was written by another "
            "save_ir call); save the IR again"
        )
    return tensors


def load_ir(path: str | Path) -> IRGraph:
    """Read an IR saved by :func:`save_ir`: the graph, with ``weights`` loaded.

    Raises :class:`IRFormatError` naming the file for a missing or corrupt file, a missing or
    mismatched weights file, a newer ``format_version`` or an unknown attribute tag.
    """
    path = Path(path)
    doc = _read_document(path)
    tensors = _read_tensors(path, doc)
    try:
        check_document(doc, tensors)
        return _build(doc, tensors)
    except MicoError as exc:  # IRFormatError, or a graph object refusing what the file holds
        raise IRFormatError(f"the IR file {path}: {exc}") from exc
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, RecursionError) as exc:
        raise IRFormatError(
            f"the IR file {path} is malformed ({type(exc).__name__}: {brief(str(exc), 200)})"
        ) from exc


def _build(doc: dict[str, Any], tensors: dict[str, torch.Tensor]) -> IRGraph:
    values: list[Value] = []
    aliases: list[tuple[Value, int]] = []
    symbols: dict[str, Any] = {}
    for vdoc in doc["values"]:
        value = Value(vdoc["name"], _decode_type(vdoc["type"], symbols))
        data = vdoc.get("data")
        if data is not None:
            tensor = tensors.get(data["key"])
            if tensor is None:
                raise IRFormatError(f"constant '{value.name}' has no data in the weights file")
            value.data = tensor if data.get("kind") == "torch" else tensor.numpy()
        if "qformat" in vdoc:
            value.qformat = decode_attr(vdoc["qformat"])
        if "scale" in vdoc:
            value.scale = decode_attr(vdoc["scale"])
        if "alias_of" in vdoc:
            aliases.append((value, int(vdoc["alias_of"])))
        values.append(value)
    for value, target in aliases:
        value.alias_of = values[target]
    nodes = []
    for ndoc in doc["nodes"]:
        attrs = {}
        for key, data in ndoc["attrs"].items():
            try:
                attrs[key] = decode_attr(data)
            except IRFormatError as exc:
                raise IRFormatError(f"node '{ndoc['name']}' attribute '{key}': {exc}") from exc
        nodes.append(
            OpNode(
                ndoc["name"],
                ndoc["op"],
                [values[i] for i in ndoc["inputs"]],
                [values[i] for i in ndoc["outputs"]],
                attrs,
            )
        )
    weights = {}
    for name in doc["weights"]:
        if name not in tensors:
            raise IRFormatError(f"weight '{name}' is listed but not in the weights file")
        weights[name] = tensors[name]
    meta = decode_attr(doc.get("meta", {"$dict": []}))
    return IRGraph(
        doc["name"],
        inputs=[values[i] for i in doc["inputs"]],
        outputs=[values[i] for i in doc["outputs"]],
        nodes=nodes,
        params=[values[i] for i in doc["params"]],
        weights=weights,
        meta=meta if isinstance(meta, dict) else {},
    ).validate()
