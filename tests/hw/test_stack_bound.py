"""The static rv32 stack bound (mico.hw.stack) and the placement of the kernels' scratch by
total RAM (mico.codegen.project.place_scratch): the bound holds the measured stack (main.c's
paint under qemu) within a stated tolerance; recursion and unbounded dynamic frames are
refused with a mico error; indirect calls are counted under the function taking the pointer;
the placement takes the stack when the arena grows more than the stack bound falls, the arena
otherwise; the program stays bit-exact either way and the search's cost is its arena."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from mico.codegen import emit_c_project
from mico.codegen import project as proj
from mico.codegen import scratch as scr
from mico.codegen.project import project_costs
from mico.errors import CompileError
from mico.execute import run_graph
from mico.hw import codesize
from mico.hw.stack import (
    Frame,
    StackGraph,
    _base_name,
    compile_frames,
    indirect_callers,
    kernel_frames,
    parse_su,
    program_ram,
    program_stack,
    project_stack,
    prologue_frames,
)
from mico.ir import extract_ir
from mico.passes import lower_static
from mico.targets import host, rv32
from tests.codegen.test_static_zoo import static_model

needs_rv32 = pytest.mark.skipif(
    not rv32.available(), reason="rv32 toolchain missing: apt-get " + rv32.missing_tools_hint()
)
#: the bound over the measured stack, at most (paths the data does not take, frames' padding)
TOLERANCE = 1.30


def _graph(tmp: Path, source: str) -> StackGraph:
    """A :class:`StackGraph` of one C file (``source``) compiled for rv32."""
    path = tmp / "t.c"
    path.write_text(source)
    obj, frames = compile_frames(path, tmp, keep=True)
    graph = codesize.SectionGraph([obj], [Path(p) for p in codesize.runtime().libraries])
    return StackGraph(graph, {obj.name: frames}, {obj.name: tmp / "t.o"})


def test_su_lines_and_bounded_dynamic_frames():
    frames = parse_su(
        "a.c:3:6:f\t48\tstatic\na.c:9:6:g.constprop\t32\tstatic\na.c:9:6:g.constprop\t64\t"
        "static\na.c:12:6:h\t80\tdynamic,bounded\na.c:20:6:v\t16\tdynamic\n"
    )
    assert frames["f"].bytes() == 48
    assert frames["g.constprop"].bytes() == 64  # clones: the largest
    assert frames["h"].bytes() == 80  # bounded: GCC's number
    with pytest.raises(CompileError, match="dynamic and unbounded"):
        frames["v"].bytes()
    assert Frame("x", 8, "static").bytes() == 8


@needs_rv32
def test_recursion_is_refused(tmp_path):
    graph = _graph(
        tmp_path,
        "__attribute__((noinline)) int a(int n);\n"
        "__attribute__((noinline)) int b(int n) { volatile int x = n; "
        "return x > 0 ? a(x - 1) + 1 : 0; }\n"
        "__attribute__((noinline)) int a(int n) { volatile int y = n; return b(y) * 3; }\n"
        "int g(int n) { return a(n) + 1; }\n",
    )
    with pytest.raises(CompileError, match=r"recursion in the call graph \(a -> b -> a\)"):
        graph.bound("g")


@needs_rv32
def test_unbounded_dynamic_frame_is_refused(tmp_path):
    graph = _graph(tmp_path, "void use(volatile char *p);\n"
                             "void v(int n) { volatile char buf[n]; use(buf); }\n")  # fmt: skip
    with pytest.raises(CompileError, match=r"v .*dynamic and unbounded.*constant size"):
        graph.bound("v")


@needs_rv32
def test_calls_and_function_pointers(tmp_path):
    """A chain of frames adds up; a function whose address ``top`` passes down counts below
    the functions under ``top`` that call through a register (``mid``)."""
    graph = _graph(
        tmp_path,
        "typedef void (*fn_t)(volatile char *);\n"
        "__attribute__((noinline)) void leaf(volatile char *p) { volatile char b[200]; "
        "b[0] = p[0]; p[1] = b[0]; }\n"
        "__attribute__((noinline)) void mid(fn_t f, volatile char *p) { volatile char b[100]; "
        "b[0] = 1; f(b); p[0] = b[1]; }\n"
        "void top(volatile char *p) { mid(leaf, p); }\n",
    )
    frames = graph.frames["t.o"]
    assert indirect_callers(tmp_path / "t.o") == {"mid"}
    bound = graph.bound("top")
    expected = frames["top"].size + frames["mid"].size + frames["leaf"].size
    assert bound.bytes == expected
    assert [name for name, _ in bound.chain] == ["top", "mid", "leaf"]
    # a function never entered counts nothing; a call ruled out is not followed
    assert graph.bound("top", ["mid"]).bytes == frames["top"].size  # top calls no pointer
    assert graph.bound("mid", ["mid>leaf"]).bytes == frames["mid"].size


@needs_rv32
def test_libgcc_aliases_and_save_routines(tmp_path):
    """A libgcc function reached by an alias (``__gtsf2`` of ``__gesf2``: no label of its own
    in the disassembly) takes its section's frame; ``__riscv_save_N`` (the prologue of code
    built with ``-msave-restore``, as libgcc's is) counts 64 B in its caller's frame, not as a
    callee whose ``sp`` moves by a register (an unbounded frame)."""
    graph = _graph(tmp_path, "int gt(float a, float b) { return a > b; }\n")
    assert [name for name, _ in graph.bound("gt").chain] == ["gt", "__gesf2"]
    folder = tmp_path / "saves"
    folder.mkdir()
    (folder / "s.c").write_text(
        "__attribute__((noinline)) void g(volatile int *p) { volatile int b[8]; b[0] = *p; "
        "*p = b[0]; }\nint f(int a, int b, int c) { volatile int x = a; g(&x); g(&x); "
        "return x + a * b + c; }\n"
    )
    _, base = codesize.build_command()
    obj, frames = compile_frames(Path("s.c"), folder, [*base, "-Os", "-msave-restore"], keep=True)
    section = obj.sections[next(i for i, names in obj.functions.items() if "f" in names)]
    assert any(s.startswith("__riscv_save_") for s in section.globals)  # the case at hand
    libraries = [Path(p) for p in codesize.runtime().libraries]
    saves = StackGraph(codesize.SectionGraph([obj], libraries), {obj.name: frames},
                       {obj.name: folder / "s.o"})  # fmt: skip
    bound = saves.bound("f")
    assert bound.chain == (("f", frames["f"].size + 64), ("g", frames["g"].size))


@needs_rv32
def test_frames_from_code_agree_with_su():
    """The frames read from code (libraries, assembly) are GCC's where both exist: the
    compressed ``add sp,sp,-N`` counts, local labels stay in their function."""
    checked = 0
    for source in ("mico_linear.c", "mico_nn_run.c", "mico_dwconv.c"):
        su = kernel_frames(source)
        for name, frame in prologue_frames(codesize.kernel_object(source)).items():
            known = su.get(_base_name(name))
            if known is not None and frame.qualifier == "static":
                assert frame.size == known.size, (source, name, frame.size, known.size)
                checked += 1
    assert checked > 100


def _lowered(name: str, bits: int):
    model, batches, example = static_model(name, bits=bits, batch=2)
    graph = lower_static(extract_ir(model, example), batches)
    samples = torch.randn((2, *example.shape[1:]), generator=torch.Generator().manual_seed(3))
    return graph, samples, run_graph(graph, samples)[0].numpy()


@needs_rv32
@pytest.mark.parametrize(("name", "bits"), [("lenet", 2), ("kws_conv1d", 8)])
def test_bound_holds_the_measured_stack(name, bits, tmp_path):
    graph, samples, reference = _lowered(name, bits)
    project = emit_c_project(graph, tmp_path / name, "m")
    rv32.build(project)
    run = rv32.run(project, samples.numpy())
    assert np.array_equal(run.outputs.reshape(reference.shape), reference)
    bound = program_stack(graph, "m")
    measured = run.stack_bytes
    assert measured is not None and not run.stack_beyond_probe
    assert measured <= bound.bytes <= measured * TOLERANCE, (measured, bound.describe())
    # the project as written (its mico.json's placement) gives the same bound as the graph
    assert project_stack(project) == bound


def _speed():
    from types import SimpleNamespace

    return SimpleNamespace(isa_extensions=(), prefer="speed", ungated=frozenset())


def test_placement_takes_the_least_ram(monkeypatch):
    """The decision: stack when its bound rises less than the arena falls, else arena; a tie
    keeps the arena (stack bounds given, so no toolchain is needed)."""
    import mico.hw.stack as stack_mod

    graph, _, _ = _lowered("dscnn", 8)
    monkeypatch.setattr(codesize, "require_tools", lambda: None)
    scr.annotate(graph.nodes, _speed())
    with_scratch = proj.plan_graph(graph).size
    scr.clear(graph.nodes)
    without = proj._arena_with_stack(graph, 8, _speed(), ["narrow"])
    grows = with_scratch - without
    assert grows > 0, "DS-CNN W8A8's byte tiles: their scratch is at the arena's peak"
    for rise, family in ((grows - 8, ["narrow"]), (grows, []), (grows + 8, [])):

        def bound(entries, kernels, exclude=(), rise=rise):
            return 1000 + (0 if "mico_nw_stack" in exclude else rise)

        monkeypatch.setattr(stack_mod, "kernel_bound", bound)
        arena, ctx = proj._emit_nodes(graph, 8)[:2]
        placed = ctx.scratch_placement
        assert placed["stack"] == family, (rise, grows, placed)
        assert placed["candidates"] == {"-": [with_scratch, 1000],
                                        "narrow": [without, 1000 + rise]}  # fmt: skip
        assert placed["chosen"] == placed["candidates"][",".join(family) or "-"]
        assert arena.size == (without if family else with_scratch)
        assert project_costs(graph)[0] == arena.size  # the search's ram cost is the arena
        assert ("mico_nw_stack" in placed["excluded"]) == (not family)


@needs_rv32
def test_program_ram_counts_the_stack_the_placement_takes():
    """DS-CNN W8A8 leaves its byte tiles' scratch on the stack (arena 16,000 B instead of
    22,656 B): the arena alone misses the 9.5 KB fallback frame the whole RAM counts."""
    graph, _, _ = _lowered("dscnn", 8)
    ram = program_ram(graph, "m")
    chosen = proj._emit_nodes(graph, 8)[1].scratch_placement["chosen"]
    assert ram.arena == project_costs(graph)[0] == chosen[0]
    assert ram.stack == program_stack(graph, "m")
    assert ram.stack.bytes == ram.stack.chain[0][1] + chosen[1]  # the run's frame on top
    assert ram.total == ram.arena + ram.static + ram.runtime + ram.stack.bytes
    assert "mico_nw_stack" in ram.stack.describe()
    assert ram.total > ram.arena + 9000


@pytest.mark.parametrize("placement", ["arena", "stack"])
def test_bit_exact_in_both_placements(placement, monkeypatch, tmp_path):
    monkeypatch.setattr(scr, "PLACEMENT", placement)
    graph, samples, reference = _lowered("dscnn", 8)
    project = emit_c_project(graph, tmp_path / placement, "m")
    planned = [b.name for b in project.arena.buffers if b.name.endswith(".scratch")]
    assert bool(planned) == (placement == "arena")
    host.build(project)
    assert np.array_equal(host.run(project, samples.numpy()).reshape(reference.shape), reference)
    if rv32.available():
        rv32.build(project)
        run = rv32.run(project, samples.numpy())
        assert np.array_equal(run.outputs.reshape(reference.shape), reference)
        bound = program_stack(graph, "m")
        assert run.stack_bytes <= bound.bytes <= run.stack_bytes * TOLERANCE
        # on the stack, the byte tiles' fallback is the deepest frame
        assert ("mico_nw_stack" in bound.describe()) == (placement == "stack")


def test_unknown_placement_is_refused(monkeypatch):
    from mico.errors import PlanError

    monkeypatch.setattr(scr, "PLACEMENT", "heap")
    graph, _, _ = _lowered("dscnn", 8)
    with pytest.raises(PlanError, match="scratch placement must be one of auto, arena, stack"):
        project_costs(graph)


@needs_rv32
@pytest.mark.parametrize(
    ("model", "w_bits", "kernel", "fallback", "deep"),
    [("cnn", [8, 1, 1, 8], "mico_qconv2d_sign_lut", "mico_sl_conv_stack",
      "mico_sl_conv_quads_stack"),
     ("cnn", [8, "ternary", "ternary", 8], "mico_qconv2d_addsub2", "mico_as_stack", ""),
     ("lenet", [4, 4, 1, 1, 8], "mico_qlinear_sign_lut", "mico_sl_linear_stack", "")],
)  # fmt: skip
def test_sign_kernels_fallbacks_leave_the_bound_with_their_scratch_planned(
    model, w_bits, kernel, fallback, deep, monkeypatch, tmp_path
):
    """The zoo's CNN with binary (the sign tables) or ternary weights (the sign-weight sums) on
    8-bit codes, LeNet with binary FC layers (the sign tables' linear layer): with the scratch
    in the arena the kernels' stack fallback (and the sign tables' quads that hold their
    tables on the stack, reached only through it) is excluded from the bound, which the stack
    measured under qemu stays at or below, bit-exact; with it on the stack the bound counts
    it."""
    from tests.codegen.dscnn_graph import zoo_graph

    graph, example, gen = zoo_graph(model, w_bits, [8] * len(w_bits), seed=3)
    samples = torch.randn((2, *example.shape[1:]), generator=gen)
    reference = run_graph(graph, samples)[0].numpy()
    frames = {**kernel_frames("mico_sign_lut.c"), **kernel_frames("mico_conv_addsub.c")}
    for placement in ("arena", "stack"):
        monkeypatch.setattr(scr, "PLACEMENT", placement)
        placed = proj._emit_nodes(graph, 8)[1].scratch_placement
        bound = program_stack(graph, "m")
        chain = [name for name, _ in bound.chain]
        assert (fallback in placed["excluded"]) == (placement == "arena"), placed
        if placement == "stack":  # (the byte tiles' fallback of the W8A8 layers is deeper)
            assert bound.bytes > frames[fallback].size, bound.describe()
            continue
        assert fallback not in chain, bound.describe()
        assert deep not in chain and bound.bytes < frames[fallback].size, bound.describe()
        project = emit_c_project(graph, tmp_path / placement, "m")
        source = (project.directory / "m.c").read_text()
        assert kernel in source and "p_.scratch = MICO_ARENA(" in source
        assert ("MicoLinear p_ = " in source) == (kernel == "mico_qlinear_sign_lut")
        rv32.build(project)
        run = rv32.run(project, samples.numpy())
        assert np.array_equal(run.outputs.reshape(reference.shape), reference)
        assert run.stack_bytes is not None and run.stack_bytes <= bound.bytes
