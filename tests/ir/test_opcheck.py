"""opcheck: for every op with an ``infer`` rule, on random valid inputs, the deduced dtype and
shape equal what the op's ``execute`` rule really produces.

Each op needs a case generator below; a newly registered op without one fails
``test_every_op_with_infer_has_an_execute_rule_and_a_case``. The ``mico.*`` executors hold
integer codes and accumulators in int64 tensors (their documented convention; views such as
``mico.reshape`` keep their input's container): for them the check is int64 or the container,
plus every value inside the deduced type's range.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mico import ir
from mico.ir import DataType, OpRegistry, TensorType, TileType, Var
from mico.quant.arithmetic import QFormat, quantize_multiplier

D = DataType
FLOATS = [D.FP16, D.BF16, D.FP32, D.FP64]
NUMERIC = [d for d in DataType.all() if not d.is_bool]
ALL = list(DataType.all())


@dataclass
class Case:
    types: list[Any]
    attrs: dict[str, Any] = field(default_factory=dict)
    # value ranges per argument, (lo, hi) inclusive, for integer tensors; default (1, 3)
    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)


def value_range(dtype: DataType) -> tuple[int, int]:
    if dtype.kind == "uint":
        return 0, 2**dtype.bits - 1
    if dtype.kind == "bool":
        return 0, 1
    if dtype.bits == 1:
        return -1, 1
    return -(2 ** (dtype.bits - 1)), 2 ** (dtype.bits - 1) - 1


def make_tensor(t: Any, rng: torch.Generator, bounds: tuple[int, int] | None) -> torch.Tensor:
    shape = list(getattr(t, "shape", ()))  # a ScalarType is a 0-d tensor
    if t.dtype.is_float:
        return torch.randn(shape, generator=rng, dtype=torch.float64).to(t.dtype.to_torch())
    if t.dtype.is_bool:
        return torch.randint(0, 2, shape, generator=rng).bool()
    lo, hi = bounds or (1, 3)  # positive and nonzero: safe for division, no overflow
    codes = torch.randint(lo, hi + 1, shape, generator=rng, dtype=torch.int64)
    if t.dtype.bits == 1 and t.dtype.kind == "int":
        codes = torch.where(codes >= 0, 1, -1)
    return codes.to(t.dtype.to_torch())


# -- strategies --------------------------------------------------------------------------------

dims = st.integers(1, 4)


def shape(min_rank=0, max_rank=4, min_size=1, max_size=4):
    return st.lists(st.integers(min_size, max_size), min_size=min_rank, max_size=max_rank)


@st.composite
def broadcast_pair(draw, max_rank=4):
    """Two shapes that broadcast: a base, and a copy with some dims 1 and leading dims dropped
    (or extra leading dims added)."""
    base = draw(shape(0, max_rank, 0, 4))
    other = [1 if draw(st.booleans()) else d for d in base]
    if draw(st.booleans()):
        other = other[draw(st.integers(0, len(other))) :]
    else:
        other = draw(st.lists(st.integers(0, 3), max_size=max_rank - len(base))) + other
    return (base, other) if draw(st.booleans()) else (other, base)


@st.composite
def binary(draw, cls=TensorType):
    a, b = draw(broadcast_pair(2 if cls is TileType else 4))
    da, db = draw(st.sampled_from(NUMERIC)), draw(st.sampled_from(NUMERIC))
    return Case([cls(da, a), cls(db, b)])


@st.composite
def scalar_binary(draw):
    da, db = draw(st.sampled_from(NUMERIC)), draw(st.sampled_from(NUMERIC))
    return Case([ir.ScalarType(da), ir.ScalarType(db)])


@st.composite
def unary(draw, dtypes, attrs: Callable[[Any, list[int]], dict] | None = None):
    s = draw(shape(0, 4))
    return Case([TensorType(draw(st.sampled_from(dtypes)), s)], attrs(draw, s) if attrs else {})


def _dim_attr(draw, s):
    return {"dim": draw(st.integers(-max(len(s), 1), max(len(s), 1) - 1))}


@st.composite
def reduction(draw, dtypes):
    s = draw(shape(0, 4))
    rank = len(s)
    choice = draw(st.integers(0, 2))
    if choice == 0 or rank == 0:
        reduce = None
    elif choice == 1:
        reduce = draw(st.integers(-rank, rank - 1))
    else:
        picked = draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True))
        reduce = [p - rank if draw(st.booleans()) else p for p in picked]
    attrs = {"dims": reduce, "keepdim": draw(st.booleans())}
    return Case([TensorType(draw(st.sampled_from(dtypes)), s)], attrs)


@st.composite
def matmul(draw):
    ra, rb = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    m, k, n = draw(dims), draw(dims), draw(dims)
    batch_a, batch_b = draw(broadcast_pair(2))
    # trailing batch dims of one broadcast pair still broadcast (leading ones need not)
    a = [k] if ra == 1 else [*batch_a[max(0, len(batch_a) - (ra - 2)) :][: ra - 2], m, k]
    b = [k] if rb == 1 else [*batch_b[max(0, len(batch_b) - (rb - 2)) :][: rb - 2], k, n]
    da, db = draw(st.sampled_from(NUMERIC)), draw(st.sampled_from(NUMERIC))
    return Case([TensorType(da, a), TensorType(db, b)])


@st.composite
def conv(draw, n):
    dtype = draw(st.sampled_from(FLOATS))
    groups = draw(st.integers(1, 2))
    cin, cout = groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
    kernel = [draw(st.integers(1, 3)) for _ in range(n)]
    stride = [draw(st.integers(1, 2)) for _ in range(n)]
    dilation = [draw(st.integers(1, 2)) for _ in range(n)]
    padding: Any = [draw(st.integers(0, 2)) for _ in range(n)]
    mode = draw(st.integers(0, 3))
    if mode == 0 and all(s == 1 for s in stride):
        padding = "same"
    elif mode == 1:
        padding = "valid"
    elif mode == 2:
        padding = padding[0]
    spatial = [dilation[i] * (kernel[i] - 1) + 1 + draw(st.integers(0, 3)) for i in range(n)]
    batch = [draw(st.integers(1, 2))] if draw(st.booleans()) else []
    types = [
        TensorType(dtype, [*batch, cin, *spatial]),
        TensorType(dtype, [cout, cin // groups, *kernel]),
    ]
    if draw(st.booleans()):
        types.append(TensorType(dtype, [cout]))
    attrs = {
        "stride": stride if draw(st.booleans()) else tuple(stride),
        "padding": padding,
        "dilation": dilation,
        "groups": groups,
    }
    return Case(types, attrs)


@st.composite
def pool(draw, kind):
    k = [draw(st.integers(1, 3)) for _ in range(2)]
    d = [draw(st.integers(1, 2)) for _ in range(2)] if kind == "max" else [1, 1]
    p = [draw(st.integers(0, k[i] // 2)) for i in range(2)]
    hw = [d[i] * (k[i] - 1) + 1 + draw(st.integers(0, 4)) for i in range(2)]
    s = draw(
        st.one_of(st.none(), st.integers(1, 3), st.lists(st.integers(1, 3), min_size=2, max_size=2))
    )
    batch = [draw(st.integers(1, 2))] if draw(st.booleans()) else []
    dtype = draw(st.sampled_from(NUMERIC if kind == "max" else FLOATS))
    attrs = {"kernel_size": k, "stride": s, "padding": p, "ceil_mode": draw(st.booleans())}
    if kind == "max":
        attrs["dilation"] = d
    else:
        attrs["count_include_pad"] = draw(st.booleans())
    return Case([TensorType(dtype, [*batch, 2, *hw])], attrs)


@st.composite
def adaptive(draw):
    s = [*([1] if draw(st.booleans()) else []), 2, draw(dims), draw(dims)]
    size = draw(st.one_of(dims, st.lists(st.one_of(st.none(), dims), min_size=2, max_size=2)))
    return Case([TensorType(draw(st.sampled_from(FLOATS)), s)], {"output_size": size})


@st.composite
def reshape(draw):
    s = draw(shape(0, 4))
    factors = [f for d in s for f in _factors(d)]
    factors = draw(st.permutations(factors))
    target: list[int] = []
    for f in factors:
        if target and draw(st.booleans()):
            target[-1] *= f
        else:
            target.append(f)
    if target and draw(st.booleans()):
        target[draw(st.integers(0, len(target) - 1))] = -1
    return Case([TensorType(draw(st.sampled_from(ALL)), s)], {"shape": target})


def _factors(n: int) -> list[int]:
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out or [1]


@st.composite
def flatten(draw):
    s = draw(shape(0, 4))
    r = max(len(s), 1)
    a, b = sorted(draw(st.lists(st.integers(0, r - 1), min_size=2, max_size=2)))
    start = a - r if draw(st.booleans()) else a
    end = b - r if draw(st.booleans()) else b
    return Case([TensorType(draw(st.sampled_from(ALL)), s)], {"start_dim": start, "end_dim": end})


@st.composite
def transpose(draw):
    s = draw(shape(0, 4))
    r = max(len(s), 1)
    d0, d1 = draw(st.integers(-r, r - 1)), draw(st.integers(-r, r - 1))
    return Case([TensorType(draw(st.sampled_from(ALL)), s)], {"dim0": d0, "dim1": d1})


@st.composite
def concat(draw):
    s = draw(shape(1, 4, 0, 3))
    dim = draw(st.integers(-len(s), len(s) - 1))
    count = draw(st.integers(1, 3))
    types = []
    dtype_pool = [D.BOOL] if draw(st.integers(0, 5)) == 0 else NUMERIC
    for _ in range(count):
        ts = list(s)
        ts[dim] = draw(st.integers(0, 3))
        types.append(TensorType(draw(st.sampled_from(dtype_pool)), ts))
    return Case(types, {"dim": dim})


@st.composite
def cast(draw):
    s = draw(shape(0, 3))
    return Case([TensorType(draw(st.sampled_from(ALL)), s)], {"dtype": draw(st.sampled_from(ALL))})


qformats = st.builds(QFormat, st.integers(1, 8), st.booleans())


def codes(fmt: QFormat) -> DataType:
    return DataType.int(fmt.bits) if fmt.signed else DataType.uint(fmt.bits)


@st.composite
def requant(draw):
    if draw(st.booleans()):
        return None
    fmt = draw(qformats)
    scale = draw(st.floats(0.01, 10))
    m, shift = quantize_multiplier(draw(st.floats(1e-4, 0.5)))
    return {"qformat": fmt, "scale": scale, "m": m, "shift": shift}


@st.composite
def mico_quantize(draw):
    s = draw(shape(1, 4))
    dtype = draw(st.sampled_from([D.FP32, D.FP64, D.FP16]))
    return Case(
        [TensorType(dtype, s)], {"scale": draw(st.floats(0.01, 2)), "qformat": draw(qformats)}
    )


@st.composite
def mico_layer(draw, kind):
    xf, wf = draw(qformats), QFormat(draw(st.integers(1, 8)), True)
    ranges = {0: (xf.qmin, xf.qmax), 1: (wf.qmin, wf.qmax), 2: (-100, 100)}
    attrs: dict[str, Any] = {
        "relu": draw(st.booleans()),
        "requant": draw(requant()),
        "layer": "layer",
    }
    if kind == "linear":
        cin, cout = draw(dims), draw(dims)
        types = [TensorType(codes(xf), [draw(dims), cin]), TensorType(codes(wf), [cout, cin])]
    else:
        groups = draw(st.integers(1, 2))
        cin, cout = groups * draw(dims), groups * draw(st.integers(1, 2))
        k = [draw(st.integers(1, 3)) for _ in range(2)]
        dil = [draw(st.integers(1, 2)) for _ in range(2)]
        hw = [dil[i] * (k[i] - 1) + 1 + draw(st.integers(0, 3)) for i in range(2)]
        types = [
            TensorType(codes(xf), [draw(st.integers(1, 2)), cin, *hw]),
            TensorType(codes(wf), [cout, cin // groups, *k]),
        ]
        attrs.update(
            stride=[draw(st.integers(1, 2)) for _ in range(2)],
            padding=[draw(st.integers(0, 1)) for _ in range(2)],
            dilation=dil,
            groups=groups,
        )
    types.append(TensorType(D.INT32, [cout]))
    return Case(types, attrs, ranges)


@st.composite
def mico_maxpool(draw):
    fmt = draw(qformats)
    k = [draw(st.integers(1, 3)) for _ in range(2)]
    hw = [k[i] + draw(st.integers(0, 3)) for i in range(2)]
    attrs = {
        "kernel_size": k,
        "stride": [draw(st.integers(1, 3)) for _ in range(2)],
        "padding": [draw(st.integers(0, k[i] // 2)) for i in range(2)],
    }
    dtype = D.INT32 if draw(st.booleans()) else codes(fmt)
    return Case([TensorType(dtype, [1, 2, *hw])], attrs, {0: (fmt.qmin, fmt.qmax)})


@st.composite
def mico_reshape(draw):
    n, rest = draw(st.integers(1, 2)), draw(shape(1, 3))
    return Case([TensorType(D.UINT4, [n, *rest])], {"shape": [1, math.prod(rest)]}, {0: (0, 15)})


BITS = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 1.58]


@st.composite
def quant_attrs(draw, out_channels):
    per_channel = draw(st.booleans())
    count = out_channels if per_channel else 1
    return {
        "w_bits": draw(st.sampled_from(BITS)),
        "a_bits": draw(st.sampled_from(BITS)),
        "weight_scale": [draw(st.floats(0.01, 1.0)) for _ in range(count)],
        "act_scale": draw(st.floats(0.01, 1.0)),
        "act_signed": draw(st.booleans()),
        "dynamic": draw(st.booleans()),
    }


@st.composite
def bit_linear(draw):
    lead = draw(shape(1, 2))
    k, out = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    types = [TensorType(D.FP32, [*lead, k]), TensorType(D.FP32, [out, k])]
    if draw(st.booleans()):
        types.append(TensorType(D.FP32, [out]))
    return Case(types, draw(quant_attrs(out)))


@st.composite
def bit_conv(draw, n):
    groups = draw(st.integers(1, 2))
    cin, cout = groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
    kernel = [draw(st.integers(1, 3)) for _ in range(n)]
    stride = [draw(st.integers(1, 2)) for _ in range(n)]
    dilation = [draw(st.integers(1, 2)) for _ in range(n)]
    padding = [draw(st.integers(0, 2)) for _ in range(n)]
    spatial = [dilation[i] * (kernel[i] - 1) + 1 + draw(st.integers(0, 3)) for i in range(n)]
    types = [
        TensorType(D.FP32, [draw(st.integers(1, 2)), cin, *spatial]),
        TensorType(D.FP32, [cout, cin // groups, *kernel]),
    ]
    if draw(st.booleans()):
        types.append(TensorType(D.FP32, [cout]))
    attrs = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    return Case(types, {**attrs, **draw(quant_attrs(cout))})


CASES: dict[str, st.SearchStrategy[Case]] = {
    "mico.bit_linear": bit_linear(),
    "mico.bit_conv1d": bit_conv(1),
    "mico.bit_conv2d": bit_conv(2),
    **{f"tensor.{op}": binary() for op in ("add", "sub", "mul", "div")},
    **{f"tile.{op}": binary(TileType) for op in ("add", "sub", "mul", "div")},
    **{f"scalar.{op}": scalar_binary() for op in ("add", "sub", "mul", "div")},
    "tensor.matmul": matmul(),
    "tensor.conv1d": conv(1),
    "tensor.conv2d": conv(2),
    "tensor.max_pool2d": pool("max"),
    "tensor.avg_pool2d": pool("avg"),
    "tensor.adaptive_avg_pool2d": adaptive(),
    "tensor.sum": reduction(ALL),
    "tensor.mean": reduction(FLOATS),
    "tensor.max": reduction(NUMERIC),
    "tensor.relu": unary(NUMERIC),
    "tensor.relu6": unary(NUMERIC),
    "tensor.sigmoid": unary(FLOATS),
    "tensor.tanh": unary(FLOATS),
    "tensor.silu": unary(FLOATS),
    "tensor.gelu": unary(
        FLOATS, lambda draw, s: {"approximate": draw(st.sampled_from(["none", "tanh"]))}
    ),
    "tensor.softmax": unary(FLOATS, _dim_attr),
    "tensor.cast": cast(),
    "tensor.reshape": reshape(),
    "tensor.flatten": flatten(),
    "tensor.transpose": transpose(),
    "tensor.concat": concat(),
    "mico.quantize": mico_quantize(),
    "mico.qconv2d": mico_layer("conv"),
    "mico.qlinear": mico_layer("linear"),
    "mico.maxpool2d": mico_maxpool(),
    "mico.reshape": mico_reshape(),
}


def ops_with_infer() -> list[str]:
    return [n for n in OpRegistry.names() if OpRegistry.rule(n, "infer") is not None]


def test_every_op_with_infer_has_an_execute_rule_and_a_case():
    names = ops_with_infer()
    assert len(names) >= 34
    for name in names:
        assert OpRegistry.rule(name, "execute") is not None, f"{name} has no execute rule"
        assert name in CASES, f"add a case generator for {name} in tests/ir/test_opcheck.py"


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("name", sorted(CASES))
def test_opcheck(name):
    execute = OpRegistry.require(name, "execute")
    mico_op = ir.get_op(name).category == "MicoOp"

    @settings(
        max_examples=25,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(CASES[name], st.integers(0, 2**31 - 1))
    def check(case: Case, seed: int) -> None:
        args = [Var(f"a{i}", t) for i, t in enumerate(case.types)]
        call = ir.create_op_call(name, args, attrs=case.attrs)
        rng = torch.Generator().manual_seed(seed)
        inputs = [make_tensor(t, rng, case.ranges.get(i)) for i, t in enumerate(case.types)]
        (out,) = execute(inputs, call.attrs)
        assert tuple(out.shape) == getattr(call.type, "shape", ()), (case, call.type)
        dtype = call.type.dtype
        if mico_op and dtype.is_int:
            assert out.dtype in (torch.int64, dtype.to_torch())
            lo, hi = value_range(dtype)
            assert out.numel() == 0 or (lo <= int(out.min()) and int(out.max()) <= hi)
        else:
            assert out.dtype == dtype.to_torch(), (case, call.type, out.dtype)
        assert isinstance(call.type, TileType) == name.startswith("tile.")

    check()
