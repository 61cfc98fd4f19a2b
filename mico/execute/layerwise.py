"""Find the first layer where the C program and the Python reference part ways.

A project built with ``make DEBUG=1`` appends every intermediate tensor of every sample to
``intermediates.bin``: records ``[uint32 name length][name][uint32 byte count][bytes]``. Here
those bytes are decoded with the value's type (float32, int32, or codes -- packed LSB-first
below 8 bits) and compared, in schedule order, with the values the reference executor
computes for the same sample.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from mico.codegen.planner import storage_bytes
from mico.errors import MicoError
from mico.ir.dtypes import DataType
from mico.ir.graph import Graph, Value
from mico.quant.arithmetic import QFormat
from mico.quant.packing import unpack


class DumpError(MicoError, ValueError):
    """``intermediates.bin`` is truncated or does not match the graph."""


def read_intermediates(path: str | Path) -> list[tuple[str, bytes]]:
    """The ``(name, bytes)`` records of a debug build's ``intermediates.bin``, in order."""
    data = Path(path).read_bytes()
    records: list[tuple[str, bytes]] = []
    pos = 0
    while pos < len(data):
        try:
            (n,) = struct.unpack_from("<I", data, pos)
            name = data[pos + 4 : pos + 4 + n].decode()
            (size,) = struct.unpack_from("<I", data, pos + 4 + n)
        except (struct.error, UnicodeDecodeError) as exc:
            raise DumpError(f"{path}: record at byte {pos} is damaged ({exc})") from exc
        start = pos + 8 + n
        if start + size > len(data):
            raise DumpError(f"{path}: record '{name}' is truncated")
        records.append((name, data[start : start + size]))
        pos = start + size
    return records


def decode(value: Value, raw: bytes) -> np.ndarray:
    """The elements of ``value`` from its arena bytes."""
    dtype = value.type.dtype
    count = value.type.numel
    if dtype == DataType.FP32:
        return np.frombuffer(raw, dtype="<f4", count=count).astype(np.float64)
    if dtype == DataType.INT32:
        return np.frombuffer(raw, dtype="<i4", count=count).astype(np.int64)
    if dtype.is_int and dtype.bits <= 8:
        fmt = value.qformat or QFormat(dtype.bits, dtype.signed)
        if dtype.bits == 8 and not fmt.binary:
            return (
                np.frombuffer(raw, dtype=np.int8 if fmt.signed else np.uint8, count=count).astype(
                    np.int64
                )
                - fmt.zero
            )  # asymmetric: fields hold code + zero point
        if storage_bytes(value) < value.type.nbytes:  # packed below 8 bits, as the arena holds it
            return unpack(np.frombuffer(raw, dtype=np.uint8), count, fmt)
        codes = np.frombuffer(raw, dtype=np.int8 if fmt.signed else np.uint8, count=count)
        return codes.astype(np.int64) - fmt.zero
    raise DumpError(f"cannot decode '{value.name}' of type {value.type}")


@dataclass(frozen=True)
class LayerDifference:
    """The first intermediate tensor that differs, and by how much."""

    node: str
    op: str
    max_abs_diff: float
    max_rel_diff: float
    first_index: int  # flat index of the first differing element
    c_value: float
    reference_value: float

    def __str__(self) -> str:
        return (
            f"'{self.node}' ({self.op}) differs first: element {self.first_index} is "
            f"{self.c_value:g} in C and {self.reference_value:g} in Python (max abs diff "
            f"{self.max_abs_diff:g}, max rel diff {self.max_rel_diff:.3g})"
        )


def reference_intermediates(graph: Graph, sample: np.ndarray) -> dict[str, np.ndarray]:
    """Every node output of ``graph`` on one sample, by node name (the reference executor)."""
    from mico.execute.executor import run_ir

    values: dict[str, np.ndarray] = {}

    def hook(node, results) -> None:
        values[node.name] = results[0].detach().numpy().astype(np.float64).ravel()

    x = torch.as_tensor(np.asarray(sample, dtype=np.float32)[None])
    x = x.to(graph.inputs[0].type.dtype.to_torch())  # token models take int64 ids
    # no type check: the static mode's executors hold codes in int64 where the graph declares
    # their 8-bit containers; the values, not the containers, are compared below
    run_ir(graph, [x], on_node=hook, check_types=False)
    return values


def first_difference(
    graph: Graph, records: list[tuple[str, bytes]], sample: np.ndarray, rtol: float = 1e-5
) -> LayerDifference | None:
    """Compare one sample's dumped intermediates with the reference; None when all agree.

    Float tensors agree when every element is within ``rtol`` of the tensor's largest
    reference magnitude; integer tensors must be identical.
    """
    nodes = {node.name: node for node in graph.nodes}
    reference = reference_intermediates(graph, sample)
    for name, raw in records:
        node = nodes.get(name)
        if node is None:
            raise DumpError(f"the dump names '{name}', which is not a node of the graph")
        c = decode(node.output, raw)
        ref = reference[name]
        if c.shape != ref.shape:
            raise DumpError(f"'{name}': {c.size} values dumped, {ref.size} expected")
        diff = np.abs(c - ref)
        floating = node.output.type.dtype.is_float
        scale = max(float(np.abs(ref).max(initial=0)), np.finfo(np.float32).tiny)
        bad = diff > rtol * scale if floating else diff > 0
        bad |= np.isnan(c) != np.isnan(ref)
        if bad.any():
            i = int(np.argmax(bad))
            return LayerDifference(
                name,
                node.op,
                float(np.nanmax(diff)),
                float(np.nanmax(diff)) / scale,
                i,
                float(c[i]),
                float(ref[i]),
            )
    return None
