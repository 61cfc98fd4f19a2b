"""The rv32 flash a program carries, predicted from its objects' section graph
(:mod:`mico.hw.codesize`), equals what the linker keeps: on a hand-written source set (shared
helpers counted once, a function reached only through a table of pointers counted, an
unreferenced function not), on a real model's program, and as the search's ``flash`` cost,
which refuses a scheme whose code does not fit although its constants do."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from mico.errors import BuildError, CompileError, ConfigError, PlanError
from mico.hw import codesize
from mico.pipeline import lower_model, quantize_ptq
from mico.quant import QuantPlan
from mico.search import MiCoEval
from mico.search.tune import parse_budgets, tune
from mico.targets import rv32

pytestmark = pytest.mark.skipif(
    not rv32.available(), reason="rv32 toolchain missing: apt-get " + rv32.missing_tools_hint()
)

SOURCE = r"""
__attribute__((noinline)) int shared_helper(int x) { return x * 7 + (x >> 3) - 11; }

static __attribute__((noinline)) int hidden_a(int x) { return x ^ 0x5a5a5; }
static __attribute__((noinline)) int hidden_b(int x) { return (x << 5) - x; }
static int (*const table[])(int) = {hidden_a, hidden_b};

int entry_a(int x) { return shared_helper(x) + 1; }
int entry_b(int x, int i) { return shared_helper(x) * table[i & 1](x); }
int unreferenced(int x) { return x * x * x - 3; }
"""


def _object(tmp_path: Path) -> codesize.ObjectFile:
    cc, flags = codesize.build_command()
    (tmp_path / "set.c").write_text(SOURCE)
    subprocess.run([cc, *flags, "-c", "set.c", "-o", "set.o"], cwd=tmp_path, check=True)
    return codesize.read_object(tmp_path / "set.o")


def _linked(tmp_path: Path, entries: list[str]) -> int:
    """Flash of set.o linked alone from ``entries`` with --gc-sections (no libc), its code
    at the rv32 flash address (low addresses would let the linker relax lui to c.lui)."""
    cc, _ = codesize.build_command()
    keep = [f"-Wl,--undefined={e}" for e in entries[1:]]
    subprocess.run([cc, "-march=rv32imac", "-mabi=ilp32", "-nostdlib", "-nostartfiles",
                    "-Wl,--gc-sections", "-Wl,-Ttext=0x80000000", f"-Wl,-e,{entries[0]}",
                    *keep, "-o", "set.elf", "set.o"], cwd=tmp_path, check=True)  # fmt: skip
    listing = subprocess.run([rv32.SIZE_TOOL, "-A", "-d", "set.elf"], cwd=tmp_path,
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
    return rv32._section_totals(listing)["flash"]


def test_closure_counts_what_the_entry_points_reach_once(tmp_path):
    obj = _object(tmp_path)
    graph = codesize.SectionGraph([obj])
    a = graph.closure(["entry_a"])
    both = graph.closure(["entry_a", "entry_b"])
    names_a = {s.name for s in a.sections}
    names = [s.name for s in both.sections]
    assert names_a == {".text.entry_a", ".text.shared_helper"}
    # the helper both call is one section, counted once
    assert names.count(".text.shared_helper") == 1
    # the static functions reached only through the pointer table (in .rodata / .srodata)
    # are linked, and so is the table
    assert {".text.hidden_a", ".text.hidden_b"} <= set(names)
    assert any(n.endswith("table") and codesize.section_kind(n) == "rodata" for n in names)
    assert not any("unreferenced" in n for n in names)
    assert both.unresolved == set()
    # the bytes are the linker's, relaxed calls and alignment included
    assert a.flash == _linked(tmp_path, ["entry_a"])
    assert both.flash == _linked(tmp_path, ["entry_a", "entry_b"])
    sizes = {s.name: s.size for s in both.sections}
    assert both.flash < sum(sizes.values()) + sizes[".text.shared_helper"]  # not twice
    with pytest.raises(CompileError, match="entry point 'nowhere'"):
        graph.closure(["nowhere"])


def test_kernel_entry_points_link_their_own_code():
    check = codesize.kernel_bytes(["mico_first_nonfinite"], ["mico_check.c"])
    assert ".text.mico_first_nonfinite" in {s.name for s in check.sections}
    assert check.by_object == {"mico_check.o": check.flash} and check.flash > 0


def test_linear_word_kernels_link_one_width_each():
    """mico_qlinear_sub4 links the 4-bit word kernel and none of the 2-bit ones, and the other
    way round: a program of one width's linear layers does not carry the other's."""
    names = {}
    for entry in ("mico_qlinear_sub4", "mico_qlinear_sub2"):
        closure = codesize.kernel_bytes([entry], ["mico_linear.c", "mico_quant.c"])
        names[entry] = {s.name.removeprefix(".text.") for s in closure.sections}
    assert "mico_dot2_mp4" in names["mico_qlinear_sub4"]
    assert not {"mico_dot2_mp2", "mico_dot2_mp2s", "mico_dot2_mp2w"} & names["mico_qlinear_sub4"]
    assert {"mico_dot2_mp2", "mico_dot2_mp2s", "mico_dot2_mp2w"} <= names["mico_qlinear_sub2"]
    assert "mico_dot2_mp4" not in names["mico_qlinear_sub2"]


def test_linear_offset_code_kernels_link_only_with_their_entry_points():
    """mico_qlinear_sub4t / _sub2t link the offset-code kernels (mico_lin_t4 / _t2, about 2 KB
    of rv32 code) besides their width's word kernels; mico_qlinear_sub4 / _sub2, which the
    generator calls for layers under SUB_OFFSET_MIN_MACS, link neither."""
    closures = {
        entry: codesize.kernel_bytes([entry], ["mico_linear.c", "mico_quant.c"])
        for entry in ("mico_qlinear_sub4", "mico_qlinear_sub2", "mico_qlinear_sub4t",
                      "mico_qlinear_sub2t")
    }  # fmt: skip
    names = {e: {s.name.removeprefix(".text.") for s in c.sections} for e, c in closures.items()}
    for bits, t in (("4", "mico_lin_t4"), ("2", "mico_lin_t2")):
        assert t in names[f"mico_qlinear_sub{bits}t"]
        assert not {"mico_lin_t4", "mico_lin_t2"} & names[f"mico_qlinear_sub{bits}"]
        words, offset = names[f"mico_qlinear_sub{bits}"], names[f"mico_qlinear_sub{bits}t"]
        own = {f"mico_qlinear_sub{bits}", f".rodata.mico_lin_words{bits}"}
        assert words - own < offset  # the same word kernels, its own entry and table aside
        extra = (
            closures[f"mico_qlinear_sub{bits}t"].flash - closures[f"mico_qlinear_sub{bits}"].flash
        )
        assert 500 < extra < 4096


def test_conv_word_kernels_link_one_width_each():
    """mico_qconv2d_tiled_sub4 links the 4-bit word kernel (mico_mk_mp4) and not the 2-bit one,
    and the other way round; both link the pixel lanes, which serve either width."""
    names = {}
    for entry in ("mico_qconv2d_tiled_sub4", "mico_qconv2d_tiled_sub2"):
        closure = codesize.kernel_bytes([entry], ["mico_conv2d.c", "mico_quant.c"])
        names[entry] = {s.name.removeprefix(".text.") for s in closure.sections}
    assert {"mico_mk_mp4", "mico_mk_px"} <= names["mico_qconv2d_tiled_sub4"]
    assert "mico_mk_mp2" not in names["mico_qconv2d_tiled_sub4"]
    assert {"mico_mk_mp2", "mico_mk_px"} <= names["mico_qconv2d_tiled_sub2"]
    assert "mico_mk_mp4" not in names["mico_qconv2d_tiled_sub2"]


def _graph(model, batches, plan):
    quantized = quantize_ptq(model, QuantPlan.parse(plan), batches)
    return lower_model(quantized, torch.zeros(1, 1, 8, 8), "cnn")


def test_prediction_matches_the_linked_program(trained_cnn, calibration_batches):
    graph = _graph(trained_cnn, calibration_batches, "conv1=4/4,conv2=2/2,fc=8/8")
    predicted = codesize.program_flash(graph, "cnn")
    linked = codesize.linked_flash(graph, "cnn")
    assert predicted.constants > 0 and predicted.kernels > 5 * predicted.constants
    assert predicted.model >= predicted.constants  # the constants, the run function, params
    # the model object and the kernels within 0.5 % of what the linker kept; the runtime is
    # measured, so the whole program's flash is within the same tolerance
    assert abs(predicted.model - linked.model) <= 0.005 * linked.model + 32
    assert abs(predicted.kernels - linked.kernels) <= 0.005 * linked.kernels
    assert predicted.libraries == linked.libraries
    assert abs(predicted.total - linked.total) <= 0.005 * linked.total
    assert predicted.code == predicted.total - predicted.constants


def test_missing_toolchain_names_the_packages(monkeypatch):
    real = shutil.which
    monkeypatch.setattr(codesize.shutil, "which",
                        lambda t: None if t == codesize.READELF else real(t))  # fmt: skip
    with pytest.raises(BuildError, match=r"apt-get install binutils-riscv64-unknown-elf"):
        codesize.require_tools()


def test_flash_budget_refuses_code_that_does_not_fit(
    trained_cnn, calibration_batches, digits_split, tmp_path
):
    train_loader, test_loader = digits_split.loaders(batch_size=64, seed=0)
    ev = MiCoEval(trained_cnn, 1, train_loader, test_loader, None, constraint="flash",
                  data_name="digits")  # fmt: skip
    w8, w2 = [8] * 6, [2] * 6
    # fewer constants at 2 bits, but the 2-bit kernel paths link more code than they save
    assert ev.eval_size(w2) < ev.eval_size(w8)
    assert ev.eval_flash(w2) > ev.eval_flash(w8)
    split = ev.program_flash(w2)
    assert ev.eval_flash(w2) == split.total and split.constants == ev.eval_size(w2)
    limit = (ev.eval_flash(w2) + ev.eval_flash(w8)) / 2
    assert ev.eval_size(w2) < limit < ev.eval_flash(w2)  # its constants fit, its program not
    assert ev.eval_constraint(w2) == ev.eval_flash(w2)
    with pytest.raises(PlanError, match=r"flash on rv32 does not fall with fewer bits.*--bits 8"):
        ev.check_cost_falls_with_bits("flash", [2, 8])
    with pytest.raises(PlanError, match=r"flash does not fall with fewer bits.*--bits 8"):
        tune(ev, parse_budgets(f"flash={limit:.0f}"), "random", 2, [2, 8], 0, lambda _m: None)
    with pytest.raises(PlanError, match=r"COST one of bops, size, flash"):
        parse_budgets("code=1KB")
    with pytest.raises(PlanError, match=r"bops, size, flash, macs"):
        MiCoEval(trained_cnn, 1, train_loader, test_loader, None, constraint="code")


def test_size_preferring_program_is_predicted_and_searchable(
    trained_cnn, calibration_batches, digits_split
):
    """``prefer="size"`` (plain kernels only) is a program the flash cost predicts as well as
    the fast one, whose code does not grow at fewer bits: the flash search that the fast
    kernels make impossible on this model runs, and its plan fits the budget."""
    graph = _graph(trained_cnn, calibration_batches, "conv1=2/2,conv2=2/2,fc=2/2")
    small = codesize.program_flash(graph, "cnn", prefer="size")
    linked = codesize.linked_flash(graph, "cnn", prefer="size")
    assert abs(small.total - linked.total) <= 0.005 * linked.total
    fast_program = codesize.program_flash(graph, "cnn")
    assert small.kernels < 0.8 * fast_program.kernels  # 12.4 KB against 17.8 KB at W2A2
    assert small.constants == fast_program.constants  # the same packed weights
    train_loader, test_loader = digits_split.loaders(batch_size=64, seed=0)
    ev = MiCoEval(trained_cnn, 1, train_loader, test_loader, None, constraint="flash",
                  data_name="digits", prefer="size")  # fmt: skip
    fast = MiCoEval(trained_cnn, 1, train_loader, test_loader, None, constraint="flash",
                    data_name="digits")  # fmt: skip
    w8, w4, w2 = [8] * 6, [4] * 6, [2] * 6
    assert ev.eval_flash(w2) < ev.eval_flash(w4) < ev.eval_flash(w8)
    assert ev.eval_flash(w2) < fast.eval_flash(w2)
    ev.check_cost_falls_with_bits("flash", [2, 4, 8])  # no refusal
    with pytest.raises(PlanError, match=r"Search with --prefer size"):
        fast.check_cost_falls_with_bits("flash", [2, 8])
    limit = (ev.eval_flash(w2) + ev.eval_flash(w8)) / 2
    result = tune(ev, parse_budgets(f"flash={limit:.0f}"), "random", 3, [2, 4, 8], 0,
                  lambda _m: None)  # fmt: skip
    assert result.costs["flash"] <= limit
    assert ev.eval_flash(list(result.best_scheme)) == result.costs["flash"]


def test_unknown_preference_and_proxy_with_size_are_refused(digits_split, trained_cnn):
    train_loader, test_loader = digits_split.loaders(batch_size=64, seed=0)
    with pytest.raises(ConfigError, match=r"unknown kernel preference 'fast'"):
        MiCoEval(trained_cnn, 1, train_loader, test_loader, None, prefer="fast")
    with pytest.raises(PlanError, match=r"--prefer size measure latency instead"):
        MiCoEval(trained_cnn, 1, train_loader, test_loader, None, prefer="size",
                 latency_target="rv32", latency_mode="proxy")  # fmt: skip
