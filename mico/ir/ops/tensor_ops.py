"""The ``tensor.*`` operators: signatures, type deduction (``infer``) and reference ``execute``.

Every op is declared through seed 002's fluent :meth:`OpRegistry.register` chain, and gets an
``execute`` rule ``(inputs: list[Tensor], attrs) -> list[Tensor]`` whose output dtype and shape
are exactly what the ``infer`` rule deduces (``tests/ir/test_opcheck.py`` holds them to it).

Semantics worth knowing (where mico is not torch):

* Element-wise arithmetic promotes with :func:`mico.ir.promotion.promote_types` and computes in
  the promoted type; integers compute in int64 and wrap to it (C's unsigned wrap-around).
  ``tensor.div`` on integers truncates toward zero (C division), torch would return floats.
  Arithmetic on ``bool`` is rejected: cast first (``tensor.cast``).
* ``tensor.sum`` of integers or bools is int64 (as in torch); ``tensor.mean``, the smooth
  activations, ``softmax``, ``avg_pool2d``, ``adaptive_avg_pool2d`` and the float
  convolutions need a floating-point input (torch would silently promote some of them).
* Sub-byte codes are held in their 8-bit containers by executors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch
import torch.nn.functional as F

from mico.errors import TypeDeductionError
from mico.ir.broadcast import broadcast_shapes
from mico.ir.dtypes import DataType
from mico.ir.ops.registry import REQUIRED, OpRegistry, display_name
from mico.ir.promotion import promote_all, promote_types
from mico.ir.types import (
    Dim,
    ShapedType,
    SymbolicDim,
    TensorType,
    derived_dim,
    format_shape,
)

TENSOR = "TensorOp"
IntOrInts = int | list[int] | tuple[int, ...]


# -- helpers shared by the op libraries ------------------------------------------------------


def fail(op: str, message: str) -> TypeDeductionError:
    """A :class:`TypeDeductionError` prefixed with the op's display name (raise it)."""
    return TypeDeductionError(f"{display_name(op)}: {message}")


def no_bool(op: str, *types: ShapedType) -> None:
    for t in types:
        if t.dtype.is_bool:
            raise fail(op, f"bool operands are not supported ({t}); cast them first (tensor.cast)")


def need_float(op: str, t: ShapedType, what: str = "input") -> None:
    if not t.dtype.is_float:
        raise fail(op, f"the {what} must be a floating-point tensor, got {t}")


def need_int(op: str, t: ShapedType, what: str) -> None:
    if not t.dtype.is_int:
        raise fail(op, f"the {what} must be an integer tensor, got {t}")


def promote(op: str, *dtypes: DataType) -> DataType:
    try:
        return promote_all(list(dtypes))
    except TypeDeductionError as exc:
        raise fail(op, str(exc)) from None


def norm_dim(op: str, dim: int, rank: int, what: str = "dim") -> int:
    """``dim`` in ``[-rank, rank)`` (a 0-d tensor accepts -1 and 0, as in torch)."""
    size = max(rank, 1)
    if not -size <= dim < size:
        raise fail(op, f"{what} {dim} is out of range for a tensor of rank {rank}")
    return dim % size


def ntuple(op: str, value: Any, n: int, name: str) -> tuple[int, ...]:
    """An int, or a sequence of 1 or ``n`` ints, as ``n`` ints."""
    items = [value] if isinstance(value, int) else list(value)
    if len(items) == 1:
        items = items * n
    if len(items) != n:
        raise fail(op, f"attribute '{name}' needs 1 or {n} values, got {len(items)}")
    return tuple(int(v) for v in items)


def dim_product(label: str, dims: Sequence[Dim]) -> Dim:
    """The product of ``dims``: an int when all are static, else a (memoized) derived symbol."""
    if all(isinstance(d, int) for d in dims):
        return math.prod(dims)  # type: ignore[arg-type]
    if len(dims) == 1:
        return dims[0]
    return derived_dim(label, *dims)


def window_out(
    op: str, size: Dim, k: int, s: int, p: int, d: int, ceil_mode: bool, axis: str
) -> Dim:
    """Output size of a convolution or pooling window along one axis (torch's formula)."""
    if isinstance(size, SymbolicDim):
        return derived_dim(display_name(op), size, k, s, p, d, ceil_mode)
    effective = d * (k - 1) + 1
    if size + 2 * p < effective:
        raise fail(
            op,
            f"the window ({effective} with dilation) is larger than the padded input along "
            f"{axis} ({size} + 2*{p})",
        )
    num = size + 2 * p - effective + (s - 1 if ceil_mode else 0)
    out = num // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    if out < 1:
        raise fail(op, f"the output size along {axis} would be {out}")
    return out


def positive(op: str, values: Sequence[int], name: str, minimum: int = 1) -> None:
    if any(v < minimum for v in values):
        raise fail(op, f"attribute '{name}' must be >= {minimum}, got {list(values)}")


def as_float(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t if t.dtype == dtype else t.to(dtype)


def compute(dtype: DataType, fn: Callable[..., torch.Tensor], *xs: torch.Tensor) -> torch.Tensor:
    """Run ``fn`` on ``xs`` in ``dtype``: floats natively, integers in int64 then cast."""
    target = dtype.to_torch()
    if dtype.is_float or dtype.is_bool:
        return fn(*(as_float(x, target) for x in xs)).to(target)
    return fn(*(x.to(torch.int64) for x in xs)).to(target)


# -- element-wise binary ---------------------------------------------------------------------

BINARY: dict[str, tuple[str, Callable[..., torch.Tensor], Callable[..., torch.Tensor]]] = {
    "add": ("addition", torch.add, torch.add),
    "sub": ("subtraction", torch.sub, torch.sub),
    "mul": ("multiplication", torch.mul, torch.mul),
    "div": (
        "division",
        torch.div,
        lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    ),
}


def describe_binary(short: str, noun: str) -> str:
    text = f"Element-wise {BINARY[short][0]} of two {noun} with broadcasting"
    return text + (" (integers truncate toward zero, as in C)" if short == "div" else "")


def deduce_binary(op: str, result: type[ShapedType]) -> Callable[[list[Any]], ShapedType]:
    def deduce(args: list[Any]) -> ShapedType:
        a, b = args[0].type, args[1].type
        no_bool(op, a, b)
        dtype = promote(op, a.dtype, b.dtype)
        shape = broadcast_shapes(a.shape, b.shape)
        if shape.incompatible:
            raise fail(op, f"incompatible shapes for broadcasting: {shape.message}")
        return result(dtype, list(shape.shape))  # type: ignore[arg-type]

    deduce.__qualname__ = f"deduce_{op.replace('.', '_')}"
    return deduce


def execute_binary(float_fn: Callable, int_fn: Callable) -> Callable:
    def execute(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
        a, b = inputs
        dtype = promote_types(DataType.from_torch(a.dtype), DataType.from_torch(b.dtype))
        return [compute(dtype, float_fn if dtype.is_float else int_fn, a, b)]

    return execute


for _short, (_what, _ffn, _ifn) in BINARY.items():
    _name = f"tensor.{_short}"
    (
        OpRegistry.register(_name)
        .set_op_category(TENSOR)
        .set_description(describe_binary(_short, "tensors"))
        .add_argument("lhs", "Left-hand side tensor (TensorType)")
        .add_argument("rhs", "Right-hand side tensor (TensorType)")
        .f_deduce_type(deduce_binary(_name, TensorType))
    )
    OpRegistry.attach(_name, "execute", execute_binary(_ffn, _ifn))


# -- unary: activations and cast -------------------------------------------------------------


def _unary(
    name: str,
    description: str,
    deduce: Callable[..., ShapedType],
    execute: Callable[..., list[torch.Tensor]],
    attributes: Sequence[tuple[str, Any, Any, str]] = (),
) -> None:
    builder = (
        OpRegistry.register(name)
        .set_op_category(TENSOR)
        .set_description(description)
        .add_argument("input", "Input tensor (TensorType)")
    )
    for attr, tp, default, doc in attributes:
        builder.add_attribute(attr, tp, default=default, description=doc)
    builder.f_deduce_type(deduce)
    OpRegistry.attach(name, "execute", execute)


def _same_numeric(op: str) -> Callable[[list[Any]], ShapedType]:
    def deduce(args: list[Any]) -> ShapedType:
        t = args[0].type
        no_bool(op, t)
        return t

    return deduce


def _same_float(op: str) -> Callable[..., ShapedType]:
    def deduce(args: list[Any], attrs: dict[str, Any]) -> ShapedType:
        t = args[0].type
        need_float(op, t)
        if "dim" in attrs:
            norm_dim(op, attrs["dim"], t.rank)
        return t

    return deduce


def _exec_same(fn: Callable[..., torch.Tensor]) -> Callable[..., list[torch.Tensor]]:
    def execute(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
        x = inputs[0]
        return [compute(DataType.from_torch(x.dtype), fn, x)]

    return execute


_unary(
    "tensor.relu",
    "Rectified linear unit: max(x, 0), element-wise",
    _same_numeric("tensor.relu"),
    _exec_same(lambda x: x.clamp_min(0)),
)
_unary(
    "tensor.relu6",
    "ReLU6: min(max(x, 0), 6), element-wise",
    _same_numeric("tensor.relu6"),
    _exec_same(lambda x: x.clamp(0, 6)),
)
_unary(
    "tensor.sigmoid",
    "Logistic sigmoid 1 / (1 + exp(-x)), element-wise (floating point)",
    _same_float("tensor.sigmoid"),
    _exec_same(torch.sigmoid),
)
_unary(
    "tensor.tanh",
    "Hyperbolic tangent, element-wise (floating point)",
    _same_float("tensor.tanh"),
    _exec_same(torch.tanh),
)
_unary(
    "tensor.silu",
    "SiLU (swish) x * sigmoid(x), element-wise (floating point)",
    _same_float("tensor.silu"),
    _exec_same(F.silu),
)
_unary(
    "tensor.gelu",
    "GELU activation, exact (erf) or tanh approximation (floating point)",
    _same_float("tensor.gelu"),
    lambda inputs, attrs: [F.gelu(inputs[0], approximate=attrs["approximate"])],
    [("approximate", Literal["none", "tanh"], "none", "'none' (erf) or 'tanh'")],
)
_unary(
    "tensor.softmax",
    "Softmax along one dimension (floating point)",
    _same_float("tensor.softmax"),
    lambda inputs, attrs: [torch.softmax(inputs[0], attrs["dim"])],
    [("dim", int, -1, "the dimension that sums to 1")],
)


def _deduce_cast(args: list[Any], attrs: dict[str, Any]) -> ShapedType:
    return args[0].type.with_dtype(attrs["dtype"])


_unary(
    "tensor.cast",
    "Convert every element to another data type (sub-byte targets keep their 8-bit container)",
    _deduce_cast,
    lambda inputs, attrs: [inputs[0].to(attrs["dtype"].to_torch())],
    [("dtype", DataType, REQUIRED, "the target data type")],
)


# -- reductions ------------------------------------------------------------------------------


def _reduced_axes(op: str, t: ShapedType, dims: Any) -> set[int]:
    if dims is None:
        return set(range(t.rank))
    items = [dims] if isinstance(dims, int) else list(dims)
    if not items:
        raise fail(op, "attribute 'dims' is empty; pass None to reduce every dimension")
    axes = [norm_dim(op, d, t.rank, "reduction dim") for d in items]
    if len(set(axes)) != len(axes):
        raise fail(op, f"attribute 'dims' repeats a dimension: {items}")
    return set(axes) if t.rank else set()


def _reduction(
    name: str,
    description: str,
    dtype_rule: Callable[[str, ShapedType], DataType],
    fn: Callable[..., torch.Tensor],
) -> None:
    def deduce(args: list[Any], attrs: dict[str, Any]) -> ShapedType:
        t = args[0].type
        dtype = dtype_rule(name, t)
        axes = _reduced_axes(name, t, attrs["dims"])
        if name == "tensor.max" and any(t.shape[i] == 0 for i in axes):
            raise fail(name, f"cannot take the max over a dimension of size 0 of {t}")
        keep = attrs["keepdim"]
        shape = [1 if i in axes else d for i, d in enumerate(t.shape) if keep or i not in axes]
        return t.with_dtype(dtype).with_shape(shape)

    def execute(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
        x = inputs[0]
        t = TensorType(DataType.from_torch(x.dtype), list(x.shape))
        out = dtype_rule(name, t)
        axes = tuple(sorted(_reduced_axes(name, t, attrs["dims"])))
        return [compute(out, lambda v: fn(v, dim=axes, keepdim=attrs["keepdim"]), x)]

    (
        OpRegistry.register(name)
        .set_op_category(TENSOR)
        .set_description(description)
        .add_argument("input", "Input tensor (TensorType)")
        .add_attribute("dims", int | list[int] | None, None, "dimensions to reduce (None: all)")
        .add_attribute("keepdim", bool, False, "keep reduced dimensions with size 1")
        .f_deduce_type(deduce)
    )
    OpRegistry.attach(name, "execute", execute)


def _sum_dtype(op: str, t: ShapedType) -> DataType:
    return t.dtype if t.dtype.is_float else DataType.INT64


def _mean_dtype(op: str, t: ShapedType) -> DataType:
    need_float(op, t)
    return t.dtype


def _max_dtype(op: str, t: ShapedType) -> DataType:
    no_bool(op, t)
    return t.dtype


_reduction(
    "tensor.sum", "Sum over dimensions (integers and bools sum to int64)", _sum_dtype, torch.sum
)
_reduction("tensor.mean", "Mean over dimensions (floating point)", _mean_dtype, torch.mean)
_reduction("tensor.max", "Maximum over dimensions", _max_dtype, torch.amax)


# -- matmul ----------------------------------------------------------------------------------


def _deduce_matmul(args: list[Any]) -> ShapedType:
    op = "tensor.matmul"
    a, b = args[0].type, args[1].type
    no_bool(op, a, b)
    if a.rank == 0 or b.rank == 0:
        raise fail(op, f"both operands need at least 1 dimension, got {a} and {b}")
    dtype = promote(op, a.dtype, b.dtype)
    sa = (1, *a.shape) if a.rank == 1 else a.shape
    sb = (*b.shape, 1) if b.rank == 1 else b.shape
    k1, k2 = sa[-1], sb[-2]
    if isinstance(k1, int) and isinstance(k2, int) and k1 != k2:
        raise fail(
            op,
            f"inner dimensions differ: {format_shape(a.shape)} @ {format_shape(b.shape)}: "
            f"{k1} vs {k2}",
        )
    batch = broadcast_shapes(sa[:-2], sb[:-2])
    if batch.incompatible:
        raise fail(op, f"batch dimensions do not broadcast: {batch.message}")
    out = list(batch.shape or ())
    if a.rank > 1:
        out.append(sa[-2])
    if b.rank > 1:
        out.append(sb[-1])
    return TensorType(dtype, out)


(
    OpRegistry.register("tensor.matmul")
    .set_op_category(TENSOR)
    .set_description(
        "Matrix product with broadcast batch dimensions (1-D operands as in torch.matmul)"
    )
    .add_argument("lhs", "Left-hand side tensor [..., m, k] (TensorType)")
    .add_argument("rhs", "Right-hand side tensor [..., k, n] (TensorType)")
    .f_deduce_type(_deduce_matmul)
)
OpRegistry.attach("tensor.matmul", "execute", execute_binary(torch.matmul, torch.matmul))


# -- convolution -----------------------------------------------------------------------------


def conv_shape(
    op: str,
    x: ShapedType,
    w: ShapedType,
    bias: ShapedType | None,
    n: int,
    stride: Any,
    padding: Any,
    dilation: Any,
    groups: int,
) -> list[Dim]:
    """Output shape of an ``n``-d convolution (input batched or not), with every check."""
    if x.rank not in (n + 1, n + 2):
        raise fail(op, f"the input must have {n + 1} or {n + 2} dimensions, got {x}")
    if w.rank != n + 2:
        raise fail(op, f"the weight must have {n + 2} dimensions [out, in/groups, k...], got {w}")
    s = ntuple(op, stride, n, "stride")
    d = ntuple(op, dilation, n, "dilation")
    positive(op, s, "stride")
    positive(op, d, "dilation")
    if groups < 1:
        raise fail(op, f"attribute 'groups' must be >= 1, got {groups}")
    out_ch, in_per_group, kernel = w.shape[0], w.shape[1], w.shape[2:]
    channels = x.shape[-n - 1]
    if isinstance(out_ch, int) and out_ch % groups:
        raise fail(op, f"{out_ch} output channels are not divisible by groups={groups}")
    if (
        isinstance(channels, int)
        and isinstance(in_per_group, int)
        and channels != in_per_group * groups
    ):
        raise fail(
            op,
            f"the input has {channels} channels but the weight expects "
            f"{in_per_group} x groups={groups} = {in_per_group * groups}",
        )
    if bias is not None and (
        bias.rank != 1
        or (isinstance(out_ch, int) and isinstance(bias.shape[0], int) and bias.shape[0] != out_ch)
    ):
        raise fail(op, f"the bias must be [{out_ch}], got {bias}")
    if any(not isinstance(k, int) for k in kernel):
        raise fail(op, f"the kernel size must be static, got {w}")
    if isinstance(padding, str):
        if padding == "same" and any(v != 1 for v in s):
            raise fail(op, "padding='same' is not supported for strided convolutions")
        same = padding == "same"
        p = (0,) * n
    else:
        same = False
        p = ntuple(op, padding, n, "padding")
        positive(op, p, "padding", 0)
    spatial = x.shape[-n:]
    out: list[Dim] = []
    for i in range(n):
        if same:
            out.append(spatial[i])
        else:
            out.append(
                window_out(op, spatial[i], kernel[i], s[i], p[i], d[i], False, f"axis {i}")  # type: ignore[arg-type]
            )
    return [*x.shape[: x.rank - n - 1], out_ch, *out]


def _conv(n: int) -> None:
    name = f"tensor.conv{n}d"

    def deduce(args: list[Any], attrs: dict[str, Any]) -> ShapedType:
        x, w = args[0].type, args[1].type
        bias = args[2].type if len(args) > 2 else None
        for what, t in (("input", x), ("weight", w), ("bias", bias)):
            if t is not None:
                need_float(name, t, what)
        for what, t in (("weight", w), ("bias", bias)):
            if t is not None and t.dtype != x.dtype:
                raise fail(name, f"the input is {x.dtype} but the {what} is {t.dtype}; cast one")
        shape = conv_shape(
            name,
            x,
            w,
            bias,
            n,
            attrs["stride"],
            attrs["padding"],
            attrs["dilation"],
            attrs["groups"],
        )
        return TensorType(x.dtype, shape)

    fn = F.conv1d if n == 1 else F.conv2d

    def execute(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
        x, w = inputs[0], inputs[1]
        b = inputs[2] if len(inputs) > 2 else None
        padding = attrs["padding"]
        padding = padding if isinstance(padding, str) else ntuple(name, padding, n, "padding")
        return [
            fn(
                x,
                w,
                b,
                ntuple(name, attrs["stride"], n, "stride"),
                padding,
                ntuple(name, attrs["dilation"], n, "dilation"),
                attrs["groups"],
            )
        ]

    (
        OpRegistry.register(name)
        .set_op_category(TENSOR)
        .set_description(f"{n}-D convolution (cross-correlation), optional bias (floating point)")
        .add_argument(
            "input", f"Input [N, C, {'L' if n == 1 else 'H, W'}] or unbatched (TensorType)"
        )
        .add_argument("weight", "Weight [out, in/groups, kernel...] (TensorType)")
        .add_argument("bias", "Bias [out] (TensorType)", optional=True)
        .add_attribute("stride", IntOrInts, 1, "step of the window")
        .add_attribute("padding", IntOrInts | Literal["same", "valid"], 0, "zero padding per side")
        .add_attribute("dilation", IntOrInts, 1, "spacing of kernel taps")
        .add_attribute("groups", int, 1, "channel groups")
        .f_deduce_type(deduce)
    )
    OpRegistry.attach(name, "execute", execute)


_conv(1)
_conv(2)


# -- pooling ---------------------------------------------------------------------------------


def pool_shape(
    op: str, x: ShapedType, kernel: Any, stride: Any, padding: Any, dilation: Any, ceil: bool
) -> list[Dim]:
    if x.rank not in (3, 4):
        raise fail(op, f"the input must be [N, C, H, W] or [C, H, W], got {x}")
    k = ntuple(op, kernel, 2, "kernel_size")
    s = k if stride is None or stride == [] else ntuple(op, stride, 2, "stride")
    p = ntuple(op, padding, 2, "padding")
    d = ntuple(op, dilation, 2, "dilation")
    positive(op, k, "kernel_size")
    positive(op, s, "stride")
    positive(op, d, "dilation")
    positive(op, p, "padding", 0)
    for i in range(2):
        if 2 * p[i] > k[i]:  # torch's rule (on the kernel size, whatever the dilation)
            raise fail(op, f"padding {p[i]} is more than half the kernel size {k[i]}")
    h, w = x.shape[-2:]
    return [
        *x.shape[:-2],
        window_out(op, h, k[0], s[0], p[0], d[0], ceil, "height"),
        window_out(op, w, k[1], s[1], p[1], d[1], ceil, "width"),
    ]


def _pool_builder(name: str, description: str) -> Any:
    return (
        OpRegistry.register(name)
        .set_op_category(TENSOR)
        .set_description(description)
        .add_argument("input", "Input [N, C, H, W] or [C, H, W] (TensorType)")
    )


def _deduce_max_pool2d(args: list[Any], attrs: dict[str, Any]) -> ShapedType:
    op = "tensor.max_pool2d"
    x = args[0].type
    no_bool(op, x)
    return x.with_shape(
        pool_shape(
            op,
            x,
            attrs["kernel_size"],
            attrs["stride"],
            attrs["padding"],
            attrs["dilation"],
            attrs["ceil_mode"],
        )
    )


def _exec_max_pool2d(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
    x = inputs[0]
    stride = attrs["stride"] if attrs["stride"] not in (None, []) else attrs["kernel_size"]
    out = F.max_pool2d(
        x.to(torch.float64),
        attrs["kernel_size"],
        stride,
        attrs["padding"],
        attrs["dilation"],
        ceil_mode=attrs["ceil_mode"],
    )
    return [out.to(x.dtype)]


(
    _pool_builder("tensor.max_pool2d", "2-D max pooling")
    .add_attribute("kernel_size", IntOrInts, description="window size")
    .add_attribute("stride", IntOrInts | None, None, "step (None: the kernel size)")
    .add_attribute("padding", IntOrInts, 0, "implicit -inf padding per side")
    .add_attribute("dilation", IntOrInts, 1, "spacing of window taps")
    .add_attribute("ceil_mode", bool, False, "round the output size up")
    .f_deduce_type(_deduce_max_pool2d)
)
OpRegistry.attach("tensor.max_pool2d", "execute", _exec_max_pool2d)


def _deduce_avg_pool2d(args: list[Any], attrs: dict[str, Any]) -> ShapedType:
    op = "tensor.avg_pool2d"
    x = args[0].type
    need_float(op, x)
    return x.with_shape(
        pool_shape(
            op, x, attrs["kernel_size"], attrs["stride"], attrs["padding"], 1, attrs["ceil_mode"]
        )
    )


def _exec_avg_pool2d(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
    stride = attrs["stride"] if attrs["stride"] not in (None, []) else attrs["kernel_size"]
    return [
        F.avg_pool2d(
            inputs[0],
            attrs["kernel_size"],
            stride,
            attrs["padding"],
            attrs["ceil_mode"],
            attrs["count_include_pad"],
        )
    ]


(
    _pool_builder("tensor.avg_pool2d", "2-D average pooling (floating point)")
    .add_attribute("kernel_size", IntOrInts, description="window size")
    .add_attribute("stride", IntOrInts | None, None, "step (None: the kernel size)")
    .add_attribute("padding", IntOrInts, 0, "implicit zero padding per side")
    .add_attribute("ceil_mode", bool, False, "round the output size up")
    .add_attribute("count_include_pad", bool, True, "count padding in the divisor")
    .f_deduce_type(_deduce_avg_pool2d)
)
OpRegistry.attach("tensor.avg_pool2d", "execute", _exec_avg_pool2d)


def _deduce_adaptive(args: list[Any], attrs: dict[str, Any]) -> ShapedType:
    op = "tensor.adaptive_avg_pool2d"
    x = args[0].type
    need_float(op, x)
    if x.rank not in (3, 4):
        raise fail(op, f"the input must be [N, C, H, W] or [C, H, W], got {x}")
    size = attrs["output_size"]
    items = [size, size] if isinstance(size, int) else list(size)
    if len(items) == 1:
        items *= 2
    if len(items) != 2:
        raise fail(op, f"attribute 'output_size' needs 1 or 2 values, got {len(items)}")
    out = [x.shape[-2 + i] if v is None else v for i, v in enumerate(items)]
    if any(isinstance(v, int) and v < 1 for v in out):
        raise fail(op, f"attribute 'output_size' must be >= 1, got {size}")
    return x.with_shape([*x.shape[:-2], *out])


(
    _pool_builder("tensor.adaptive_avg_pool2d", "2-D adaptive average pooling to a fixed size")
    .add_attribute(
        "output_size",
        int | list[int | None] | tuple[int | None, ...],
        description="output height and width (None keeps the input size)",
    )
    .f_deduce_type(_deduce_adaptive)
)
OpRegistry.attach(
    "tensor.adaptive_avg_pool2d",
    "execute",
    lambda inputs, attrs: [F.adaptive_avg_pool2d(inputs[0], attrs["output_size"])],
)


# -- shape ops -------------------------------------------------------------------------------


def reshape_shape(op: str, x: ShapedType, target: Sequence[Any]) -> list[Dim]:
    """The shape ``x`` reshaped to ``target`` (one ``-1`` inferred), with the numel check."""
    target = list(target)
    if sum(1 for d in target if isinstance(d, int) and d == -1) > 1:
        raise fail(op, f"only one dimension can be -1, got {target}")
    for d in target:
        if isinstance(d, int) and d < -1:
            raise fail(op, f"invalid size {d} in shape {target}")
    in_static = math.prod(d for d in x.shape if isinstance(d, int))
    in_syms = [d for d in x.shape if isinstance(d, SymbolicDim)]
    known = [d for d in target if not (isinstance(d, int) and d == -1)]
    out_static = math.prod(d for d in known if isinstance(d, int))
    out_syms = [d for d in known if isinstance(d, SymbolicDim)]
    rest = list(in_syms)
    matched = True
    for s in out_syms:
        if s in rest:
            rest.remove(s)
        else:
            matched = False
    shown = f"{x} ({'?' if in_syms else in_static} elements)"
    if -1 in target:
        i = target.index(-1)
        if not matched or rest:
            target[i] = derived_dim("reshape", *x.shape, *target)
        elif out_static == 0:
            raise fail(
                op, f"cannot infer the -1 in {target} for {shown}: other sizes multiply to 0"
            )
        elif in_static % out_static:
            raise fail(
                op,
                f"cannot reshape {shown} to {target}: {in_static} is not divisible by {out_static}",
            )
        else:
            target[i] = in_static // out_static
    elif matched and not rest and in_static != out_static:
        raise fail(op, f"cannot reshape {shown} to {format_shape(target)} ({out_static} elements)")
    return target


def _deduce_reshape(args: list[Any], attrs: dict[str, Any]) -> ShapedType:
    x = args[0].type
    return x.with_shape(reshape_shape("tensor.reshape", x, attrs["shape"]))


(
    OpRegistry.register("tensor.reshape")
    .set_op_category(TENSOR)
    .set_description("View with a new shape (one -1 is inferred); same elements, same order")
    .add_argument("input", "Input tensor (TensorType)")
    .add_attribute(
        "shape",
        list[int | SymbolicDim] | tuple[int | SymbolicDim, ...],
        description="the new shape",
    )
    .f_deduce_type(_deduce_reshape)
)
OpRegistry.attach(
    "tensor.reshape", "execute", lambda inputs, attrs: [inputs[0].reshape(list(attrs["shape"]))]
)


def _deduce_flatten(args: list[Any], attrs: dict[str, Any]) -> ShapedType:
    op = "tensor.flatten"
    x = args[0].type
    if x.rank == 0:
        norm_dim(op, attrs["start_dim"], 0, "start_dim")
        norm_dim(op, attrs["end_dim"], 0, "end_dim")
        return x.with_shape([1])
    start = norm_dim(op, attrs["start_dim"], x.rank, "start_dim")
    end = norm_dim(op, attrs["end_dim"], x.rank, "end_dim")
    if start > end:
        raise fail(op, f"start_dim {attrs['start_dim']} comes after end_dim {attrs['end_dim']}")
    merged = dim_product("flatten", x.shape[start : end + 1])
    return x.with_shape([*x.shape[:start], merged, *x.shape[end + 1 :]])


(
    OpRegistry.register("tensor.flatten")
    .set_op_category(TENSOR)
    .set_description("Merge dimensions start_dim..end_dim into one")
    .add_argument("input", "Input tensor (TensorType)")
    .add_attribute("start_dim", int, 0, "first dimension to merge")
    .add_attribute("end_dim", int, -1, "last dimension to merge")
    .f_deduce_type(_deduce_flatten)
)
OpRegistry.attach(
    "tensor.flatten",
    "execute",
    lambda inputs, attrs: [torch.flatten(inputs[0], attrs["start_dim"], attrs["end_dim"])],
)


def _deduce_transpose(args: list[Any], attrs: dict[str, Any]) -> ShapedType:
    op = "tensor.transpose"
    x = args[0].type
    d0 = norm_dim(op, attrs["dim0"], x.rank, "dim0")
    d1 = norm_dim(op, attrs["dim1"], x.rank, "dim1")
    if x.rank == 0:
        return x
    shape = list(x.shape)
    shape[d0], shape[d1] = shape[d1], shape[d0]
    return x.with_shape(shape)


(
    OpRegistry.register("tensor.transpose")
    .set_op_category(TENSOR)
    .set_description("Swap two dimensions")
    .add_argument("input", "Input tensor (TensorType)")
    .add_attribute("dim0", int, description="first dimension")
    .add_attribute("dim1", int, description="second dimension")
    .f_deduce_type(_deduce_transpose)
)
OpRegistry.attach(
    "tensor.transpose",
    "execute",
    lambda inputs, attrs: [torch.transpose(inputs[0], attrs["dim0"], attrs["dim1"])],
)


def _deduce_concat(args: list[Any], attrs: dict[str, Any]) -> ShapedType:
    op = "tensor.concat"
    ts = [a.type for a in args]
    first = ts[0]
    if first.rank == 0:
        raise fail(op, "0-d tensors cannot be concatenated")
    for i, t in enumerate(ts[1:], 1):
        if t.rank != first.rank:
            raise fail(op, f"tensor {i} has rank {t.rank}, tensor 0 has rank {first.rank}")
    dim = norm_dim(op, attrs["dim"], first.rank)
    dtype = promote(op, *(t.dtype for t in ts))
    out: list[Dim] = []
    for axis in range(first.rank):
        dims = [t.shape[axis] for t in ts]
        if axis == dim:
            if all(isinstance(d, int) for d in dims):
                out.append(sum(dims))  # type: ignore[arg-type]
            else:
                out.append(derived_dim("concat", *dims))
            continue
        static = [(i, d) for i, d in enumerate(dims) if isinstance(d, int)]
        for i, d in static[1:]:
            if d != static[0][1]:
                raise fail(
                    op,
                    f"sizes must match except along dim {dim}: tensor {static[0][0]} has "
                    f"{static[0][1]} and tensor {i} has {d} at axis {axis}",
                )
        out.append(static[0][1] if static else dims[0])
    return TensorType(dtype, out)


def _exec_concat(inputs: list[torch.Tensor], attrs: dict[str, Any]) -> list[torch.Tensor]:
    dtype = promote_all([DataType.from_torch(t.dtype) for t in inputs]).to_torch()
    return [torch.cat([t.to(dtype) for t in inputs], dim=attrs["dim"])]


(
    OpRegistry.register("tensor.concat")
    .set_op_category(TENSOR)
    .set_description("Join one or more tensors along an existing dimension")
    .add_argument("tensors", "Tensors to join, one or more (TensorType)", variadic=True)
    .add_attribute("dim", int, 0, "the dimension to join along")
    .f_deduce_type(_deduce_concat)
)
OpRegistry.attach("tensor.concat", "execute", _exec_concat)
