"""The C emitter never writes a value its C type cannot hold (issue 12, part D)."""

from __future__ import annotations

import numpy as np
import pytest

from mico.codegen.context import EmitContext, checked_f32, checked_ints
from mico.codegen.planner import ArenaPlan
from mico.errors import CompileError


def _ctx() -> EmitContext:
    return EmitContext(ArenaPlan(offsets={}, buffers=(), size=0, lower_bound=0, align=8), [])


@pytest.mark.parametrize(
    ("ctype", "data", "bad"),
    [
        ("int32_t", np.array([1.0, np.nan, 3.0]), "element 1 is nan"),
        ("int32_t", np.array([0, 2**31], dtype=np.int64), "element 1 is 2147483648"),
        ("int32_t", np.array([-(2**31) - 1]), "element 0 is -2147483649"),
        ("int32_t", np.array([np.iinfo(np.int64).min]), "element 0 is -9223372036854775808"),
        ("int32_t", np.array([0.5]), "element 0 is 0.5"),
        ("int32_t", np.array([-np.inf]), "element 0 is -inf"),
        ("uint8_t", np.array([0, 255, 256]), "element 2 is 256"),
        ("uint8_t", np.array([-1, 0]), "element 0 is -1"),
    ],
)
def test_integers_outside_their_c_type_are_refused(ctype, data, bad):
    with pytest.raises(CompileError, match=rf"constant 'sym' {bad}.*{ctype}"):
        checked_ints("sym", data, ctype)


def test_integers_at_the_edges_of_their_type_pass():
    edges = checked_ints("b", np.array([-(2**31), 2**31 - 1, 0.0]), "int32_t")
    assert edges.tolist() == [-(2**31), 2**31 - 1, 0]
    assert checked_ints("c", np.arange(256, dtype=np.uint8), "uint8_t").tolist() == list(range(256))


@pytest.mark.parametrize(
    ("value", "shown"), [(np.nan, "nan"), (np.inf, "inf"), (-np.inf, "-inf"), (1e39, r"1e\+39")]
)
def test_floats_that_float32_cannot_hold_are_refused(value, shown):
    with pytest.raises(CompileError, match=rf"constant 'w' element 1 is {shown}"):
        checked_f32("w", np.array([0.0, value]))


def test_the_const_writers_check_before_writing():
    ctx = _ctx()
    with pytest.raises(CompileError, match="fc_bias"):
        ctx.const_int32("fc.bias", np.array([1, np.iinfo(np.int64).min]))
    with pytest.raises(CompileError, match="fc_w"):
        ctx.const_bytes("fc.w", np.array([300]))
    with pytest.raises(CompileError, match="fc_s"):
        ctx.const_f32("fc.s", np.array([np.nan], dtype=np.float32))
    with pytest.raises(CompileError, match="shape"):
        ctx.const_i32_array("shape", np.array([2**40]))
    assert ctx.definitions == [] and ctx.blobs == []
    symbol = ctx.const_int32("ok", np.array([-(2**31), 7]))
    assert "-2147483648, 7" in ctx.definitions[0] and symbol == "ok"
