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


# --------------------------------------------------------------------------- search and ties
def test_search_reaches_the_bound_where_largest_first_does_not() -> None:
    """The static mlp's buffers: largest-first puts the last accumulator at 0 and strands the
    32-byte activation above both 64-byte ones (160 B); another order fits 128 B."""
    buffers = [
        Buffer("flatten_q", 64, 1, 2),
        Buffer("relu", 64, 2, 3),
        Buffer("relu_1", 32, 3, 4),
        Buffer("acc", 40, 4, 4),
    ]
    plan = plan_buffers(buffers, align=8)
    _check_plan(buffers, plan, 8)
    assert plan.size == plan.lower_bound == 128


def test_search_reaches_the_bound_on_an_alternating_chain() -> None:
    """dscnn's mixed plan: 8000 B activations alternate with a 4000 B one; 16,000 B suffice."""
    sizes = [490, 4000, 8000, 4000, 8000, 8000, 8000, 8000, 4000, 8000]
    buffers = [Buffer(f"t{i}", size, i, i + 1) for i, size in enumerate(sizes)]
    plan = plan_buffers(buffers, align=8)
    _check_plan(buffers, plan, 8)
    assert plan.size == plan.lower_bound == 16000


def test_plans_are_deterministic() -> None:
    buffers = [Buffer(f"b{i}", (i * 37) % 200 + 8, i % 5, i % 5 + i % 3) for i in range(30)]
    first = plan_buffers(buffers)
    assert all(plan_buffers(buffers).offsets == first.offsets for _ in range(3))


def test_tie_lets_an_output_overwrite_its_input() -> None:
    """x (100 B) dies where y (100 B) is written over it: 100 B instead of the 200 B bound."""
    buffers = [Buffer("x", 100, 0, 1), Buffer("y", 100, 1, 2)]
    plan = plan_buffers(buffers, align=4, ties={"y": ("x", 0)})
    assert plan.ties == {"y": ("x", 0)}
    assert plan.offsets["x"] == plan.offsets["y"]
    assert plan.size == 100
    assert plan.lower_bound == 200
    assert plan.ratio == 0.5


def test_tie_with_a_displacement_keeps_it() -> None:
    buffers = [Buffer("a", 40, 0, 0), Buffer("x", 100, 0, 1), Buffer("y", 100, 1, 2)]
    plan = plan_buffers(buffers, align=8, ties={"y": ("x", -16)})
    assert plan.offsets["y"] == plan.offsets["x"] - 16
    assert plan.offsets == {"a": 0, "x": 40, "y": 24}  # y reuses a's bytes once a is dead
    assert plan.size == 144
    assert plan.lower_bound == 200


def test_ties_that_do_not_help_are_dropped() -> None:
    """A chain of 8000 B tensors where every other op runs in place 16 B early (dscnn's
    depthwise layers): the peak is at the other ops, and the ties would only push the
    alternating buffers apart."""
    buffers = [Buffer(f"t{i}", 8000, i, i + 1) for i in range(6)]
    ties = {"t1": ("t0", -16), "t3": ("t2", -16), "t5": ("t4", -16)}
    forced = plan_buffers(buffers, align=8, ties=ties, choose_ties=False)
    assert forced.ties == ties
    assert forced.size > 16000
    plan = plan_buffers(buffers, align=8, ties=ties)
    assert plan.size == plan.lower_bound == 16000


def test_tie_chains_place_three_buffers_together() -> None:
    buffers = [Buffer("x", 32, 0, 1), Buffer("y", 32, 1, 2), Buffer("z", 48, 2, 3)]
    plan = plan_buffers(buffers, align=8, ties={"y": ("x", -8), "z": ("y", 0)})
    assert plan.offsets["y"] == plan.offsets["x"] - 8
    assert plan.offsets["z"] == plan.offsets["y"]
    assert plan.size == 48


@pytest.mark.parametrize(
    "ties, message",
    [
        ({"y": ("nope", 0)}, "unknown buffer 'nope'"),
        ({"y": ("x", 4)}, "not a multiple of the alignment 8"),
        ({"y": ("x", 0), "x": ("y", 0)}, "cycle"),
    ],
)
def test_invalid_ties(ties, message) -> None:
    with pytest.raises(ValueError, match=message):
        plan_buffers([Buffer("x", 8, 0, 1), Buffer("y", 8, 1, 2)], align=8, ties=ties)


@st.composite
def tied_buffer_lists(draw: st.DrawFn) -> tuple[list[Buffer], dict[str, tuple[str, int]]]:
    """Buffers with random in-place ties: a buffer may overwrite one that dies where it starts."""
    buffers = draw(buffer_lists())
    ties: dict[str, tuple[str, int]] = {}
    anchored = set()
    for b in buffers:
        dying = [a for a in buffers if a.start < a.end == b.start and a.name not in anchored]
        if dying and b.name not in ties and draw(st.booleans()):
            anchor = draw(st.sampled_from(dying))
            if _tie_root(ties, anchor.name) != b.name:
                ties[b.name] = (anchor.name, -8 * draw(st.integers(0, 4)))
                anchored.add(anchor.name)
    return buffers, ties


def _tie_root(ties: dict[str, tuple[str, int]], name: str) -> str:
    while name in ties:
        name = ties[name][0]
    return name


@settings(max_examples=150, deadline=None)
@given(case=tied_buffer_lists(), choose=st.booleans())
def test_tied_plans_properties(case, choose: bool) -> None:
    """Tied buffers sit at their displacement; every other pair of buffers live together is
    disjoint; the arena holds every buffer."""
    buffers, ties = case
    plan = plan_buffers(buffers, align=8, ties=ties, choose_ties=choose)
    if not choose:
        assert plan.ties == ties
    assert set(plan.ties) <= set(ties)
    for name, (anchor, offset) in plan.ties.items():
        assert plan.offsets[name] == plan.offsets[anchor] + offset
    tied = {frozenset((k, v[0])) for k, v in plan.ties.items()}
    for i, a in enumerate(buffers):
        assert plan.offsets[a.name] >= 0 and plan.offsets[a.name] + a.size <= plan.size
        for b in buffers[i + 1 :]:
            if frozenset((a.name, b.name)) in tied or not (a.size and b.size):
                continue
            if a.overlaps_in_time(b):
                oa, ob = plan.offsets[a.name], plan.offsets[b.name]
                assert oa + a.size <= ob or ob + b.size <= oa, (a, oa, b, ob)
    assert plan.lower_bound == _brute_force_peak(buffers)
    untied = plan_buffers(buffers, align=8)
    if choose:
        assert plan.size <= untied.size  # ties are only kept where they help
