"""The search's ``ram_total`` cost: the rv32 program's whole RAM (arena + other static data and
bss + the runtime's + the stack bound of its run function), not only the arena ``ram`` counts.

It agrees with what ``mico compile`` writes (``arena_bytes``, ``scratch_placement``), with the
data + bss of the program linked for rv32 and with the stack measured under qemu (static and
dynamic mode); a budget on it bounds the search, and a model whose RAM rises at fewer bits is
refused; without the rv32 toolchain it is a BuildError naming what to install."""

from __future__ import annotations

import copy
import json
import subprocess

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from mico.codegen import compile_model
from mico.errors import BuildError, PlanError
from mico.hw import codesize
from mico.models import LeNet
from mico.quant import QuantConfig, calibrate, quantize_model
from mico.search import MiCoEval
from mico.search.tune import parse_budgets, tune
from mico.targets import rv32

needs_rv32 = pytest.mark.skipif(
    not rv32.available(), reason="rv32 toolchain missing: apt-get " + rv32.missing_tools_hint()
)
W8, MIXED, W2 = [8] * 6, [2, 4, 8, 4, 8, 2], [2] * 6


@pytest.fixture
def evaluator(trained_cnn, digits_split) -> MiCoEval:
    """The digits CNN: no kernel family with scratch, so the placement compares nothing."""
    train_loader, test_loader = digits_split.loaders(batch_size=64, seed=0)
    return MiCoEval(trained_cnn, 1, train_loader, test_loader, None, constraint="ram_total",
                    data_name="digits")  # fmt: skip


@pytest.fixture
def dynamic_evaluator(trained_cnn, digits_split) -> MiCoEval:
    """The digits CNN in dynamic mode: float between layers, libgcc's soft-float calls."""
    train_loader, test_loader = digits_split.loaders(batch_size=64, seed=0)
    return MiCoEval(trained_cnn, 1, train_loader, test_loader, None,
                    config=QuantConfig(act_mode="dynamic"))  # fmt: skip


@pytest.fixture
def lenet_evaluator() -> MiCoEval:
    """LeNet, untrained, on random data: its sub-byte convs' channel lanes have scratch the
    code generator places in the arena or on the stack."""
    torch.manual_seed(0)
    model = LeNet()
    data = TensorDataset(torch.rand(64, *model.default_input_shape), torch.randint(0, 10, (64,)))
    loader = DataLoader(data, batch_size=32)
    return MiCoEval(model, 1, loader, loader, None)


@needs_rv32
@pytest.mark.parametrize(("which", "scheme"), [("evaluator", MIXED),
                                               ("dynamic_evaluator", W8),
                                               ("lenet_evaluator", [4] * 10)])  # fmt: skip
def test_total_is_the_arena_static_data_and_stack_bound_of_the_compiled_program(
    which, scheme, request, tmp_path
):
    evaluator = request.getfixturevalue(which)
    parts = evaluator.program_ram(scheme)
    total = evaluator.eval_ram_total(scheme)
    assert total == parts.total == parts.arena + parts.static + parts.runtime + parts.stack.bytes
    assert parts.arena == evaluator.eval_ram(scheme)  # ``ram`` stays the arena
    assert total >= evaluator.eval_ram(scheme) + parts.stack.bytes > evaluator.eval_ram(scheme)
    assert parts.runtime > 0 and parts.static >= 0
    assert parts.stack.chain[0][0] == "model_run"

    # the program `mico compile` writes for the scheme: the same arena and placement
    model = quantize_model(copy.deepcopy(evaluator.model), scheme, evaluator.config,
                           evaluator.example)  # fmt: skip
    calibrate(model, evaluator._calibration)
    compiled = compile_model(model, evaluator.example[:1], tmp_path / "c", "model",
                             evaluator.mode, calibration=evaluator._calibration)  # fmt: skip
    manifest = json.loads((tmp_path / "c" / "mico.json").read_text())
    assert manifest["arena_bytes"] == parts.arena == compiled.project.arena.size
    placed = manifest["scratch_placement"]
    assert bool(placed["candidates"]) == (which == "lenet_evaluator")
    if placed["candidates"]:  # the chosen candidate's kernels' bound, under the run's frame
        arena, bound = placed["candidates"][",".join(placed["stack"]) or "-"]
        assert placed["chosen"] == [arena, bound]
        assert arena == parts.arena
        assert parts.stack.bytes == parts.stack.chain[0][1] + bound
    # linked with a main that runs it once on static buffers, the program holds the static
    # RAM counted and those buffers; the stack an inference takes under qemu is within the bound
    project = compiled.project
    buffers = 4 * (int(np.prod(project.input_shape)) + int(np.prod(project.output_shape)))
    extra = _linked_ram(project, tmp_path / "linked") - buffers
    # (within the padding between sections: the parts are summed without their alignment)
    assert abs(extra - (parts.arena + parts.static + parts.runtime)) <= 16
    rv32.build(project)
    sample = np.asarray(evaluator.example[:1], dtype=np.float32)
    measured = rv32.run(compiled.project, sample).stack_bytes
    assert measured is not None and measured <= parts.stack.bytes


def _linked_ram(project, folder) -> int:
    """data + bss of ``project``'s model and kernels linked for rv32 as the flash estimate
    links them, with a ``main`` that runs the model once on static input and output arrays."""
    cc, flags = codesize.build_command()
    folder.mkdir()
    (folder / "main.c").write_text(codesize._caller_main(project.name))
    sources = [str(project.directory / f) for f in project.files
               if f.endswith(".c") and f != "main.c"]  # fmt: skip
    subprocess.run([cc, *flags, f"-I{project.directory}", "-o", "prog.elf", "main.c", *sources,
                    "-lm"], cwd=folder, check=True, capture_output=True)  # fmt: skip
    listing = subprocess.run([rv32.SIZE_TOOL, "-A", "-d", "prog.elf"], cwd=folder, check=True,
                             capture_output=True, text=True).stdout  # fmt: skip
    return rv32._section_totals(listing)["ram"]


@needs_rv32
def test_a_ram_total_budget_bounds_the_search(lenet_evaluator):
    """LeNet's RAM falls with the widths (W8A8 10.7 KB, W2A2 7.2 KB: the 8-bit conv's 3.4 KB
    frame goes), so a budget between them is searched; the W8A8 scheme is over it."""
    evaluator = lenet_evaluator
    n = evaluator.n_layers
    w8, w2 = evaluator.eval_ram_total([8] * 2 * n), evaluator.eval_ram_total([2] * 2 * n)
    assert w2 < w8
    limit = (w2 + w8) / 2
    budgets = parse_budgets(f"ram_total={limit:.0f}")
    result = tune(evaluator, budgets, "random", 2, [2, 8], 0, lambda _m: None)
    assert result.costs["ram_total"] <= limit
    assert evaluator.eval_ram_total(list(result.best_scheme)) == result.costs["ram_total"]
    assert list(result.best_scheme) != [8] * 2 * n  # W8A8 is over the budget
    with pytest.raises(PlanError, match=r"ram_total budget 100 is below the cheapest scheme"):
        tune(evaluator, parse_budgets("ram_total=100"), "random", 2, [2, 8], 0, lambda _m: None)


@needs_rv32
def test_a_ram_total_that_rises_at_fewer_bits_is_refused(evaluator):
    """The digits CNN's sub-byte convs take 600 B more stack than their arena saves (W8A8
    3,680 B, W2A2 4,048 B): the searchers, which assume fewer bits cost less, are refused."""
    assert evaluator.eval_ram_total(W2) > evaluator.eval_ram_total(W8)
    assert evaluator.eval_ram(W2) < evaluator.eval_ram(W8)  # the arena alone falls
    assert evaluator.eval_constraint(W2) == evaluator.eval_ram_total(W2)
    with pytest.raises(PlanError, match=r"ram_total on rv32 does not fall.*--bits 8"):
        evaluator.check_cost_falls_with_bits("ram_total", [2, 8])


def test_budgets_run_configs_and_the_evaluator_take_ram_total(trained_cnn, digits_split):
    from mico.errors import ConfigError
    from mico.runconfig import parse_run_config

    assert parse_budgets("ram=2KB,ram_total=32KiB")[1].value == 32 * 1024
    config = parse_run_config({"search": {"budget": "ram_total=20KiB"}})
    assert config.search["budget"] == "ram_total=20KiB"
    with pytest.raises(ConfigError, match="ram_total"):  # the known costs are listed
        parse_run_config({"search": {"budget": "stack=2KB"}})
    train_loader, test_loader = digits_split.loaders(batch_size=64, seed=0)
    ev = MiCoEval(trained_cnn, 1, train_loader, test_loader, None, constraint="ram_total")
    assert ev.constraint == "ram_total"


def test_missing_toolchain_is_a_build_error_naming_the_packages(evaluator, monkeypatch):
    real = codesize.shutil.which
    gcc = "riscv64-unknown-elf-gcc"
    monkeypatch.setattr(codesize.shutil, "which", lambda t: None if t == gcc else real(t))
    with pytest.raises(BuildError) as caught:
        evaluator.eval_ram_total(W8)
    message = str(caught.value)
    assert "ram_total" in message and gcc in message
    assert "apt-get install gcc-riscv64-unknown-elf picolibc-riscv64-unknown-elf" in message
    assert evaluator.eval_ram(W8) > 0  # the arena needs no toolchain
