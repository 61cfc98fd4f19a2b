"""Broadcasting and type promotion: agreement with torch except the documented differences."""

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mico.errors import TypeDeductionError
from mico.ir import DataType, SymbolicDim, broadcast_shapes, promote_types
from mico.ir.promotion import TORCH_DIFFERENCES, promote_all

D = DataType
# Where mico's promotion differs from torch.promote_types, (a, b) -> (mico, torch);
# mico None = mico raises TypeDeductionError. Documented in mico/ir/promotion.py and docs/ir.md.
DIFFERENCES = {
    (D.BOOL, D.UINT8): (None, D.UINT8),
    (D.BOOL, D.INT8): (None, D.INT8),
    (D.BOOL, D.INT16): (None, D.INT16),
    (D.BOOL, D.INT32): (None, D.INT32),
    (D.BOOL, D.INT64): (None, D.INT64),
    (D.BOOL, D.FP16): (None, D.FP16),
    (D.BOOL, D.BF16): (None, D.BF16),
    (D.BOOL, D.FP32): (None, D.FP32),
    (D.BOOL, D.FP64): (None, D.FP64),
    (D.UINT8, D.INT8): (D.INT8, D.INT16),
}
WIDE_UNSIGNED = {D.UINT16, D.UINT32, D.UINT64}
TORCH_TYPES = [d for d in DataType.all() if not d.is_sub_byte]


def _mico(a, b):
    try:
        return promote_types(a, b)
    except TypeDeductionError:
        return None


def _torch(a, b):
    try:
        return DataType.from_torch(torch.promote_types(a.to_torch(), b.to_torch()))
    except RuntimeError:
        return "unsupported"


def test_the_documented_differences_are_the_modules():
    assert TORCH_DIFFERENCES == DIFFERENCES


def test_promotion_agrees_with_torch_except_documented_differences():
    unsupported = []
    for a, b in itertools.product(TORCH_TYPES, repeat=2):
        mico, ref = _mico(a, b), _torch(a, b)
        key = (a, b) if (a, b) in DIFFERENCES else (b, a)
        if key in DIFFERENCES:
            assert (mico, ref) == DIFFERENCES[key], (a, b)
        elif ref == "unsupported":
            unsupported.append((a, b))
        else:
            assert mico == ref, (a, b, mico, ref)
    # torch refuses exactly: a wide unsigned type with a different integer or bool
    for a, b in unsupported:
        assert a != b and (a in WIDE_UNSIGNED or b in WIDE_UNSIGNED)
        assert not a.is_float and not b.is_float
    # 3 wide unsigned types x (bool + 5 other integers), and the 3 pairs among themselves
    assert len(unsupported) == 2 * (3 * 6 + 3)


def test_promotion_where_torch_refuses_and_sub_byte_types():
    assert promote_types(D.UINT32, D.INT32) == D.INT32  # seed 002; NumPy gives int64
    assert promote_types(D.UINT64, D.INT64) == D.INT64
    assert promote_types(D.UINT16, D.INT8) == D.INT16
    assert promote_types(D.UINT16, D.UINT32) == D.UINT32
    assert promote_types(D.UINT16, D.FP16) == D.FP16
    assert promote_types(D.INT4, D.INT4) == D.INT4
    assert promote_types(D.INT4, D.INT2) == D.INT8
    assert promote_types(D.UINT4, D.UINT1) == D.UINT8
    assert promote_types(D.UINT4, D.INT4) == D.INT8
    assert promote_types(D.INT4, D.UINT8) == D.INT8
    assert promote_types(D.UINT3, D.INT16) == D.INT16
    assert promote_types(D.INT7, D.BF16) == D.BF16
    assert promote_types(D.BF16, D.FP16) == D.FP32
    assert promote_types(D.INT64, D.FP16) == D.FP16
    with pytest.raises(TypeDeductionError, match=r"cannot promote bool with int4.*cast"):
        promote_types(D.BOOL, D.INT4)
    assert promote_types(D.BOOL, D.BOOL) == D.BOOL
    assert promote_all([D.INT8, D.UINT8, D.INT16]) == D.INT16


def test_promotion_is_commutative_over_all_pairs():
    for a, b in itertools.product(DataType.all(), repeat=2):
        assert _mico(a, b) == _mico(b, a), (a, b)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(DataType.all()),
    st.sampled_from(DataType.all()),
    st.sampled_from(DataType.all()),
)
def test_promotion_is_order_independent(a, b, c):
    assert _mico(a, b) == _mico(b, a)
    assert _mico(a, a) == a
    ab, bc = _mico(a, b), _mico(b, c)
    if ab is not None and bc is not None:
        # associative, so the result of promoting a list does not depend on its order
        assert _mico(ab, c) == _mico(a, bc)
        result = _mico(ab, c)
        if result is not None:
            for perm in itertools.permutations((a, b, c)):
                assert promote_all(list(perm)) == result


@st.composite
def shape_pairs(draw):
    """Mostly broadcastable pairs: a base and a copy with dims set to 1 or changed, leading
    dims dropped or added."""
    base = draw(st.lists(st.integers(0, 5), min_size=0, max_size=4))
    other = list(base)
    for i in range(len(other)):
        choice = draw(st.integers(0, 4))
        if choice == 0:
            other[i] = 1
        elif choice == 1:
            other[i] = draw(st.integers(0, 5))
    if draw(st.booleans()):
        other = other[draw(st.integers(0, len(other))) :]
    else:
        other = draw(st.lists(st.integers(0, 3), max_size=2)) + other
    return (base, other) if draw(st.booleans()) else (other, base)


@settings(max_examples=100, deadline=None)
@given(shape_pairs())
def test_broadcasting_agrees_with_torch(pair):
    a, b = pair
    ours = broadcast_shapes(a, b)
    try:
        ref = tuple(torch.broadcast_shapes(a, b))
    except RuntimeError:
        ref = None
    if ref is None:
        assert ours.incompatible and not ours.success and ours.shape is None
        assert "dimension" in ours.message and " vs " in ours.message
    else:
        assert ours.compatible and ours.shape == ref
    assert broadcast_shapes(b, a).status == ours.status


def test_incompatible_message_names_both_dims():
    r = broadcast_shapes([4, 8], [5])
    assert r.status == "incompatible"
    assert r.message.startswith("[4, 8] + [5]: dimension 8 vs 5")
    assert "dimension 8 vs 5" in broadcast_shapes([4, 8], [3, 5]).message
    assert broadcast_shapes([2, 1], [1, 3], [4, 1, 1]).shape == (4, 2, 3)
    assert broadcast_shapes([2, 1], [3], [4]).incompatible


def test_symbols_in_broadcasting():
    s, t = SymbolicDim("s"), SymbolicDim("t")
    same = broadcast_shapes([s, 8], [s, 1])
    assert same.compatible and same.shape == (s, 8)
    assert broadcast_shapes([s, 8], [8]).compatible  # missing dims count as 1
    assert broadcast_shapes([s], [1]).shape == (s,)
    unknown = broadcast_shapes([s, 8], [4, 8])
    assert unknown.status == "unknown" and unknown.success and unknown.shape == (4, 8)
    assert unknown.conditions == ("axis -2: s is 1 or 4",)
    two = broadcast_shapes([s], [t])
    assert two.status == "unknown" and isinstance(two.shape[0], SymbolicDim)
    assert two.shape[0] not in (s, t) and broadcast_shapes([s], [t]).shape == two.shape
    # the seed's flaw: two DYNAMIC_DIMs are not the same size
    dyn = broadcast_shapes([-1, 3], [-1, 3])
    assert dyn.status == "unknown"
    assert broadcast_shapes([s, 3], [5, 4]).incompatible  # a static clash still fails
