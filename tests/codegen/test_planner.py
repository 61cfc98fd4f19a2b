"""Static arena planning: no two live buffers share bytes, offsets aligned, honest lower bound."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mico.codegen.planner import ArenaPlan, Buffer, plan_buffers


@st.composite
def buffer_lists(draw: st.DrawFn) -> list[Buffer]:
    n = draw(st.integers(0, 14))
    out = []
    for i in range(n):
        start = draw(st.integers(0, 12))
        end = draw(st.integers(start, start + draw(st.integers(0, 6))))
        size = draw(st.integers(0, 300))
        out.append(Buffer(f"b{i}", size, start, end))
    return out


def _brute_force_peak(buffers: list[Buffer]) -> int:
    steps = {t for b in buffers for t in range(b.start, b.end + 1)}
    return max((sum(b.size for b in buffers if b.start <= t <= b.end) for t in steps), default=0)


def _check_plan(buffers: list[Buffer], plan: ArenaPlan, align: int) -> None:
    assert set(plan.offsets) == {b.name for b in buffers}
    assert plan.buffers == tuple(buffers)
    assert plan.align == align
    for b in buffers:
        off = plan.offsets[b.name]
        assert off >= 0
        assert off % align == 0
        assert off + b.size <= plan.size
    for i, a in enumerate(buffers):
        for b in buffers[i + 1 :]:
            if a.overlaps_in_time(b) and a.size and b.size:
                oa, ob = plan.offsets[a.name], plan.offsets[b.name]
                assert oa + a.size <= ob or ob + b.size <= oa, (a, oa, b, ob)
    assert plan.size % align == 0
    assert plan.lower_bound == _brute_force_peak(buffers)
    assert plan.size >= plan.lower_bound


@settings(max_examples=200, deadline=None)
@given(buffers=buffer_lists(), align=st.sampled_from([1, 2, 4, 8, 16, 64]))
def test_plan_buffers_properties(buffers: list[Buffer], align: int) -> None:
    plan = plan_buffers(buffers, align=align)
    _check_plan(buffers, plan, align)


@settings(max_examples=100, deadline=None)
@given(buffers=buffer_lists())
def test_plan_buffers_default_alignment_is_8(buffers: list[Buffer]) -> None:
    plan = plan_buffers(buffers)
    _check_plan(buffers, plan, 8)


@settings(max_examples=100, deadline=None)
@given(buffers=buffer_lists())
def test_disjoint_lifetimes_with_one_step_each_reach_the_bound(buffers: list[Buffer]) -> None:
    """Buffers that are never live together all sit at offset 0."""
    sequential = [Buffer(b.name, b.size, i, i) for i, b in enumerate(buffers)]
    plan = plan_buffers(sequential, align=1)
    assert all(off == 0 for off in plan.offsets.values())
    assert plan.size == plan.lower_bound == max((b.size for b in buffers), default=0)


def test_overlaps_in_time_is_inclusive() -> None:
    a = Buffer("a", 1, 0, 2)
    assert a.overlaps_in_time(Buffer("b", 1, 2, 3))
    assert Buffer("b", 1, 2, 3).overlaps_in_time(a)
    assert not a.overlaps_in_time(Buffer("c", 1, 3, 4))
    assert a.overlaps_in_time(Buffer("d", 1, 1, 1))


def test_hand_example_greedy_reuse_reaches_lower_bound() -> None:
    # a chain: x (0..1) -> y (1..2) -> z (2..3) -> w (3..4)
    # x and z never live together, nor y and w: two slots of 64 + 32 suffice.
    buffers = [
        Buffer("x", 64, 0, 1),
        Buffer("y", 32, 1, 2),
        Buffer("z", 64, 2, 3),
        Buffer("w", 32, 3, 4),
    ]
    plan = plan_buffers(buffers, align=8)
    assert plan.offsets == {"x": 0, "z": 0, "y": 64, "w": 64}
    assert plan.lower_bound == 96
    assert plan.size == 96
    assert plan.ratio == 1.0


def test_hand_example_alignment_padding() -> None:
    # a (10 bytes) and b (4 bytes) live together: b goes after a, rounded up to 16
    plan = plan_buffers([Buffer("a", 10, 0, 1), Buffer("b", 4, 1, 2)], align=16)
    assert plan.offsets == {"a": 0, "b": 16}
    assert plan.lower_bound == 14
    assert plan.size == 32  # 16 + 4 = 20, rounded up to the alignment
    assert plan.ratio == pytest.approx(32 / 14)


def test_hand_example_fills_gap_below_existing_buffer() -> None:
    # big (0..0) at 0; mid (1..2) also at 0 (big is dead); small (0..1) conflicts with both
    buffers = [Buffer("big", 100, 0, 0), Buffer("mid", 60, 1, 2), Buffer("small", 8, 0, 1)]
    plan = plan_buffers(buffers, align=4)
    assert plan.offsets["big"] == 0
    assert plan.offsets["mid"] == 0
    assert plan.offsets["small"] == 100
    assert plan.lower_bound == 108
    assert plan.size == 108


def test_empty_plan() -> None:
    plan = plan_buffers([])
    assert plan.offsets == {}
    assert plan.size == 0
    assert plan.lower_bound == 0
    assert plan.ratio == 1.0


@pytest.mark.parametrize("align", [3, 0, -8, 6, 12])
def test_invalid_alignment(align: int) -> None:
    with pytest.raises(ValueError, match=f"power of two, got {align}"):
        plan_buffers([Buffer("a", 8, 0, 1)], align=align)


def test_duplicate_names() -> None:
    with pytest.raises(ValueError, match="unique"):
        plan_buffers([Buffer("a", 8, 0, 1), Buffer("b", 8, 0, 1), Buffer("a", 4, 2, 3)])
