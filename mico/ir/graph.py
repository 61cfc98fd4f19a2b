"""The IR graph: values, nodes in schedule order, and constants.

A :class:`Graph` is a straight-line program: ``nodes`` is a valid schedule (every input is
defined before it is used). Constant values (weights) carry their data; quantized values carry
their code format and scale.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mico.ir.types import TensorType
from mico.quant.arithmetic import QFormat


@dataclass(eq=False)
class Value:
    """A tensor flowing through the graph."""

    name: str
    type: TensorType
    data: np.ndarray | None = None  # set for constants
    qformat: QFormat | None = None  # set for quantized codes
    scale: float | None = None  # real value = code * scale (codes and int32 accumulators)
    alias_of: Value | None = None  # a view sharing another value's memory (reshape)
    producer: Node | None = field(default=None, repr=False)

    @property
    def is_const(self) -> bool:
        return self.data is not None

    def storage(self) -> Value:
        """The value whose memory this one lives in."""
        value = self
        while value.alias_of is not None:
            value = value.alias_of
        return value

    def __repr__(self) -> str:
        return f"%{self.name}: {self.type}"


@dataclass(eq=False)
class Node:
    """One operator application."""

    name: str
    op: str
    inputs: list[Value]
    outputs: list[Value]
    attrs: dict[str, Any] = field(default_factory=dict)
    #: memory-planning annotations set by the C backend's passes (scratch bytes, in-place
    #: execution): read by the arena planner, never part of the op's semantics or attributes
    plan: dict[str, Any] = field(default_factory=dict)
    #: where the op came from in the user's model, for error messages ("layer 'encoder.0'
    #: (Conv2d)"); not part of the op, not serialized, not compared
    origin: str = field(default="", compare=False, repr=False)

    def __post_init__(self) -> None:
        for out in self.outputs:
            out.producer = self

    @property
    def op_type(self) -> str:
        """Seed 001's name for :attr:`op` (``node.op_type`` on ``extract_ir(...).nodes``)."""
        return self.op

    @property
    def output(self) -> Value:
        if len(self.outputs) != 1:
            raise ValueError(f"node {self.name} has {len(self.outputs)} outputs, not one")
        return self.outputs[0]

    def __str__(self) -> str:
        outs = ", ".join(repr(o) for o in self.outputs)
        ins = ", ".join(f"%{v.name}" for v in self.inputs)
        attrs = ", ".join(f"{k}={_short(v)}" for k, v in self.attrs.items())
        return f"{outs} = {self.op}({ins}{'; ' + attrs if attrs else ''})"


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


@dataclass
class Graph:
    """A named straight-line program over :class:`Value` objects."""

    name: str
    inputs: list[Value] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)

    def add(self, node: Node) -> Node:
        self.nodes.append(node)
        return node

    def consumers(self, value: Value) -> list[Node]:
        return [n for n in self.nodes if any(v is value for v in n.inputs)]

    def constants(self) -> list[Value]:
        seen: dict[int, Value] = {}
        for node in self.nodes:
            for v in node.inputs:
                if v.is_const:
                    seen.setdefault(id(v), v)
        return list(seen.values())

    def validate(self) -> Graph:
        """Check that the schedule defines every value before use; return the graph."""
        defined = {id(v) for v in self.inputs}
        for node in self.nodes:
            for v in node.inputs:
                if not v.is_const and id(v) not in defined:
                    raise ValueError(f"node {node.name} uses %{v.name} before it is defined")
            defined.update(id(o) for o in node.outputs)
        for v in self.outputs:
            if id(v) not in defined:
                raise ValueError(f"graph output %{v.name} is never defined")
        return self

    def __str__(self) -> str:
        lines = [f"graph {self.name}({', '.join(repr(v) for v in self.inputs)}):"]
        lines += [f"  {node}" for node in self.nodes]
        lines.append(f"  return {', '.join('%' + v.name for v in self.outputs)}")
        return "\n".join(lines)
