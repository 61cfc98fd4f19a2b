"""The run report: a per-layer table and a summary, as Markdown and JSON."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mico.codegen.planner import storage_bytes
from mico.codegen.project import CProject
from mico.ir.graph import Graph
from mico.ir.ops import mico_ops
from mico.passes.lower_quant import macs
from mico.quant.packing import packed_size


def layer_rows(
    graph: Graph, project: CProject, latency: dict[str, dict[str, float]] | None = None
) -> list[dict[str, Any]]:
    """One row per scheduled op: shape, bits, MACs, BOPs, weight and activation bytes, offset.

    ``latency``: per-node latency columns, by column name (``rv32_instructions``: counted on
    the target for sample 0; ``rv32_estimated``: a fitted proxy's estimate), each a mapping
    from node name to its value; a node a column has no value for (a view) gets None."""
    offsets = {row["node"]: row["offset"] for row in project.schedule}
    rows = []
    for node in graph.nodes:
        weight = node.inputs[1] if node.op in (mico_ops.QCONV2D, mico_ops.QLINEAR) else None
        x = node.inputs[0]
        w_bits = weight.qformat.bits if weight is not None and weight.qformat else None
        a_bits = x.qformat.bits if weight is not None and x.qformat else None
        n_macs = macs(node)
        rows.append(
            {
                "node": node.name,
                "op": node.op,
                "layer": node.attrs.get("layer", ""),
                "output": str(node.output.type),
                "w_bits": w_bits,
                "a_bits": a_bits,
                "macs": n_macs,
                "bops": n_macs * w_bits * a_bits if w_bits and a_bits else 0,
                "weight_bytes": packed_size(weight.type.numel, w_bits) if weight and w_bits else 0,
                "activation_bytes": 0 if node.output.alias_of else storage_bytes(node.output),
                "arena_offset": offsets.get(node.name),
                **{column: values.get(node.name) for column, values in (latency or {}).items()},
            }
        )
    return rows


def _md_table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [[str("" if c is None else c) for c in row] for row in rows]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in cells]
    return "\n".join(lines)


@dataclass
class Report:
    """Everything a run measured; ``summary`` is the headline table."""

    title: str
    summary: list[tuple[str, str]]
    layers: list[dict[str, Any]]
    data: dict[str, Any] = field(default_factory=dict)

    def summary_text(self) -> str:
        width = max(len(k) for k, _ in self.summary)
        return "\n".join(f"  {k.ljust(width)}  {v}" for k, v in self.summary)

    def markdown(self) -> str:
        headers = [
            "node",
            "op",
            "layer",
            "output",
            "W",
            "A",
            "MACs",
            "BOPs",
            "weight B",
            "act B",
            "arena offset",
        ]
        keys = [
            "node",
            "op",
            "layer",
            "output",
            "w_bits",
            "a_bits",
            "macs",
            "bops",
            "weight_bytes",
            "activation_bytes",
            "arena_offset",
        ]
        base = set(keys)
        for row in self.layers:  # latency columns (measured or estimated), when present
            for key in row:
                if key not in base and (
                    key.endswith("_instructions") or key.endswith(("_cycles", "_estimated"))
                ):
                    base.add(key)
                    keys.append(key)
                    headers.append(key.replace("_", " "))
        return (
            "\n\n".join(
                [
                    f"# {self.title}",
                    "## Summary",
                    _md_table(["metric", "value"], [list(item) for item in self.summary]),
                    "## Layers",
                    _md_table(headers, [[row.get(k) for k in keys] for row in self.layers]),
                ]
            )
            + "\n"
        )

    def write(self, directory: Path) -> tuple[Path, Path]:
        md, js = directory / "report.md", directory / "report.json"
        md.write_text(self.markdown())
        payload = {"title": self.title, **self.data, "layers": self.layers}
        js.write_text(json.dumps(payload, indent=2, default=str) + "\n")
        return md, js
