"""Does an IR graph compute what its PyTorch model computes? (seed 001's ``verify_ir``)

Every output is compared with the eager model's: shape, dtype, max and mean absolute error. When
they disagree, the model's ``ExportedProgram`` is run node by node (``torch.fx.Interpreter``) and
every IR intermediate is compared with the same-named FX value, in schedule order; the first
that differs is the node where the IR diverges.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind
from torch.utils import _pytree as pytree

from mico.execute.executor import run_ir
from mico.ir.graph import Graph, Node


@dataclass(frozen=True)
class Comparison:
    """One tensor of the IR against its reference."""

    name: str
    expected_shape: tuple[int, ...]
    actual_shape: tuple[int, ...]
    expected_dtype: str
    actual_dtype: str
    max_abs_error: float
    mean_abs_error: float
    within_tolerance: bool

    @property
    def shape_match(self) -> bool:
        return self.expected_shape == self.actual_shape

    @property
    def dtype_match(self) -> bool:
        return self.expected_dtype == self.actual_dtype

    @property
    def ok(self) -> bool:
        return self.shape_match and self.dtype_match and self.within_tolerance

    @property
    def problem(self) -> str:
        if not self.shape_match:
            return f"shape {self.actual_shape} != expected {self.expected_shape}"
        if not self.dtype_match:
            return f"dtype {self.actual_dtype} != expected {self.expected_dtype}"
        if not self.within_tolerance:
            return (
                f"max abs error {self.max_abs_error:.3g} (mean {self.mean_abs_error:.3g}) "
                "exceeds the tolerance"
            )
        return "ok"


@dataclass(frozen=True)
class Divergence:
    """The first IR node whose output differs from the model's intermediate of the same name."""

    node: str
    op: str
    output: int
    comparison: Comparison

    def __str__(self) -> str:
        return f"node '{self.node}' ({self.op}) output {self.output}: {self.comparison.problem}"


@dataclass
class VerifyReport:
    """Per-output agreement of an IR graph with its model, and where it first diverges."""

    outputs: list[Comparison]
    atol: float
    rtol: float
    errors: list[str] = field(default_factory=list)
    first_divergence: Divergence | None = None

    @property
    def ok(self) -> bool:
        return not self.errors and all(c.ok for c in self.outputs)

    @property
    def max_abs_error(self) -> float:
        return max((c.max_abs_error for c in self.outputs), default=0.0)

    def __bool__(self) -> bool:
        return self.ok

    def summary(self) -> str:
        lines = [f"verify: {'OK' if self.ok else 'FAILED'} (atol={self.atol}, rtol={self.rtol})"]
        lines += [f"  error: {e}" for e in self.errors]
        for i, c in enumerate(self.outputs):
            lines.append(
                f"  output {i} '{c.name}': {c.problem if not c.ok else 'ok'}; max abs "
                f"{c.max_abs_error:.3g}, mean abs {c.mean_abs_error:.3g}, shape "
                f"{c.actual_shape}, dtype {c.actual_dtype}"
            )
        if self.first_divergence is not None:
            lines.append(f"  first divergence: {self.first_divergence}")
        return "\n".join(lines)

    __str__ = summary


def compare(
    name: str, expected: Any, actual: Any, atol: float = 1e-5, rtol: float = 1e-5
) -> Comparison:
    """Compare ``actual`` with ``expected`` (tensors); errors are NaN where shapes differ."""
    expected = torch.as_tensor(expected)
    actual = torch.as_tensor(actual)
    e_shape, a_shape = tuple(expected.shape), tuple(actual.shape)
    if e_shape != a_shape or expected.numel() == 0:
        err = float("nan") if e_shape != a_shape else 0.0
        return Comparison(
            name,
            e_shape,
            a_shape,
            str(expected.dtype),
            str(actual.dtype),
            err,
            err,
            e_shape == a_shape,
        )
    e64 = expected.detach().to(torch.float64)
    a64 = actual.detach().to(torch.float64)
    diff = (a64 - e64).abs()
    both_nan = torch.isnan(a64) & torch.isnan(e64)
    same_inf = torch.isinf(e64) & (a64 == e64)
    diff = torch.where(both_nan | same_inf, torch.zeros_like(diff), diff)
    within = bool(torch.all(diff <= atol + rtol * e64.abs().nan_to_num(posinf=0, neginf=0)))
    return Comparison(
        name,
        e_shape,
        a_shape,
        str(expected.dtype),
        str(actual.dtype),
        float(diff.max()),
        float(diff.mean()),
        within,
    )


def _as_args(inputs: Any) -> tuple[Any, ...]:
    if isinstance(inputs, tuple):
        return inputs
    if isinstance(inputs, list):
        return tuple(inputs)
    return (inputs,)


def _eager_outputs(model: nn.Module | ExportedProgram, args: tuple[Any, ...]) -> list[Any]:
    with torch.no_grad():
        if isinstance(model, ExportedProgram):
            result = model.module()(*args)
        else:
            was_training = model.training
            model.eval()
            try:
                result = model(*args)
            finally:
                model.train(was_training)
    return pytree.tree_leaves(result)


class _Recorder(torch.fx.Interpreter):
    def __init__(self, module: torch.fx.GraphModule) -> None:
        super().__init__(module)
        self.values: dict[str, Any] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        result = super().run_node(n)
        if n.op == "call_function":
            self.values[n.name] = result
        return result


def program_intermediates(exported: ExportedProgram, inputs: Any) -> dict[str, Any]:
    """Run ``exported``'s graph node by node; return every call's result by FX node name."""
    user = iter(pytree.tree_leaves(_as_args(inputs)))
    args: list[Any] = []
    for spec in exported.graph_signature.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            args.append(next(user))
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            state = exported.state_dict
            args.append(
                state[spec.target] if spec.target in state else exported.constants[spec.target]
            )
        else:
            args.append(exported.constants.get(spec.target))
    recorder = _Recorder(exported.graph_module)
    with torch.no_grad():
        recorder.run(*args)
    return recorder.values


def first_divergence(
    ir: Graph,
    exported: ExportedProgram,
    inputs: Any,
    weights: Any = None,
    atol: float = 1e-5,
    rtol: float = 1e-5,
) -> Divergence | None:
    """The first IR node (in schedule order) whose outputs differ from the program's."""
    reference = program_intermediates(exported, inputs)
    found: list[Divergence] = []

    def check(node: Node, results: list[Any]) -> None:
        if found or node.name not in reference:
            return
        expected = [t for t in pytree.tree_leaves(reference[node.name]) if t is not None]
        if len(expected) != len(results):
            return
        for i, (e, a) in enumerate(zip(expected, results, strict=True)):
            if not isinstance(e, torch.Tensor):
                continue
            name = node.outputs[i].name if i < len(node.outputs) else node.name
            c = compare(name, e, a, atol, rtol)
            if not c.ok:
                found.append(Divergence(node.name, node.op, i, c))
                return

    try:
        run_ir(ir, inputs, weights, on_node=check, check_types=False)
    except Exception:
        if not found:
            raise
    return found[0] if found else None


def verify_ir(
    ir: Graph,
    original_model: nn.Module | ExportedProgram,
    inputs: Any,
    weights: Any = None,
    *,
    atol: float = 1e-5,
    rtol: float = 1e-5,
) -> VerifyReport:
    """Run ``ir`` and ``original_model`` on ``inputs`` and compare every output.

    An output passes when shapes and dtypes are equal and ``|ir - eager| <= atol + rtol *
    |eager|`` everywhere. On failure ``first_divergence`` names the first IR node whose result
    differs from the model's intermediate of the same name.
    """
    from mico.frontend.export import export_model

    args = _as_args(inputs)
    expected = _eager_outputs(original_model, args)
    errors: list[str] = []
    try:
        actual = run_ir(ir, list(pytree.tree_leaves(args)), weights, check_types=False)
    except Exception as exc:  # report, then look for the node
        actual = []
        errors.append(f"executing the IR failed: {type(exc).__name__}: {exc}")
    comparisons: list[Comparison] = []
    if actual and len(actual) != len(expected):
        errors.append(f"the IR has {len(actual)} output(s), the model {len(expected)}")
    for i, (e, a) in enumerate(zip(expected, actual, strict=False)):
        name = ir.outputs[i].name if i < len(ir.outputs) else f"output{i}"
        comparisons.append(compare(name, e, a, atol, rtol))
    report = VerifyReport(comparisons, atol, rtol, errors)
    if not report.ok:
        try:
            exported = export_model(original_model, args)
            report.first_divergence = first_divergence(ir, exported, args, weights, atol, rtol)
        except Exception as exc:
            report.errors.append(f"could not locate the divergence: {type(exc).__name__}: {exc}")
    return report
