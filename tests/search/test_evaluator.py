"""MiCoEval: seed 003's evaluator lines (Example 1) on the digits stand-in."""

from __future__ import annotations

import copy
import json
import shutil

import pytest
import torch

from mico.data import digits_loaders
from mico.errors import MicoError, PlanError, UnsupportedOpError
from mico.models import LeNet, SmallCNN
from mico.search import MiCoEval


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    torch.manual_seed(0)
    model = SmallCNN(channels=(4, 8))
    model.set_qscheme([[8] * model.n_layers, [8] * model.n_layers])
    train_loader, test_loader = digits_loaders(batch_size=64)
    model.train_loop(4, train_loader, test_loader, lr=1e-2, verbose=False)
    path = tmp_path_factory.mktemp("ckpt") / "small.pth"
    torch.save(model.state_dict(), path)
    return model, train_loader, test_loader, path


def test_seed_example_1_evaluator_lines(trained, tmp_path) -> None:
    model, train_loader, test_loader, ckpt = trained
    trace = tmp_path / "trace.json"
    evaluator = MiCoEval(model, 1, train_loader, test_loader, ckpt, output_json=trace)
    n = model.n_layers
    max_bops = evaluator.eval_bops([8] * n * 2)
    assert max_bops == (2304 + 4608 + 320) * 64  # Σ MACs · 8 · 8 for SmallCNN(4, 8)
    assert evaluator.eval_bops([4] * n * 2) == max_bops / 4
    acc8 = evaluator.eval_f([8] * n * 2)
    acc2 = evaluator.eval_f([[2] * n, [2] * n])
    assert 0.7 < acc8 <= 1.0
    assert acc2 < acc8
    assert evaluator.eval_f([8] * n * 2) == acc8  # fresh weights each time: repeatable
    history = json.loads(trace.read_text())
    assert [h["ptq_acc"] for h in history] == [acc8, acc2, acc8]
    assert history[1]["qscheme"] == [[2] * n, [2] * n]
    # flash of the C project: packed weights, an int32 bias per output channel (4 + 8 + 10),
    # the requantization scales (an int32 multiplier and shift for the two requantized outputs;
    # the last layer returns its accumulator) and other tables (the input quantization's)
    w8, w4 = evaluator.flash_bytes([8] * n * 2), evaluator.flash_bytes([4] * n + [8] * n)
    assert (w8["weights"], w4["weights"]) == (36 + 288 + 320, (36 + 288 + 320) // 2)
    assert w8["bias"] == w4["bias"] == 4 * (4 + 8 + 10)
    assert w8["scales"] == w4["scales"] == 16
    assert w8["params"] == w4["params"]  # the same 8-bit input quantization
    assert evaluator.eval_size([8] * n * 2) == sum(w8.values())


def test_qat_objective_fine_tunes(trained) -> None:
    model, train_loader, test_loader, ckpt = trained
    n = model.n_layers
    ptq = MiCoEval(model, 1, train_loader, test_loader, ckpt).eval_f([2] * n * 2)
    qat = MiCoEval(model, 2, train_loader, test_loader, ckpt, lr=3e-3, objective="qat_acc")
    assert qat.eval_f([2] * n * 2) > ptq


def test_bad_arguments(trained) -> None:
    model, train_loader, test_loader, ckpt = trained
    with pytest.raises(PlanError, match="objective must be one of ptq_acc, qat_acc"):
        MiCoEval(model, 1, train_loader, test_loader, ckpt, objective="acc")
    with pytest.raises(PlanError, match="constraint must be one of bops, size, flash, macs"):
        MiCoEval(model, 1, train_loader, test_loader, ckpt, constraint="latency_mico")
    evaluator = MiCoEval(model, 1, train_loader, test_loader, ckpt)
    with pytest.raises(PlanError, match="flat qscheme needs 6 bit-widths"):
        evaluator.eval_f([8] * 5)
    with pytest.raises(UnsupportedOpError, match="latency target 'mico'"):
        evaluator.eval_latency([8] * 6, target="mico")


def test_checkpoint_of_another_model_is_refused(trained, tmp_path) -> None:
    _, train_loader, test_loader, _ = trained
    other = LeNet(1)
    path = tmp_path / "lenet.pt"
    other.save(path)
    model = SmallCNN(channels=(4, 8))
    evaluator = MiCoEval(model, 1, train_loader, test_loader, path)
    from mico.errors import CheckpointError

    with pytest.raises(CheckpointError, match=r"LeNet.*SmallCNN"):
        evaluator.eval_f([8] * 6)


@pytest.mark.parametrize(
    ("mode", "scheme"),
    [
        ("static", [8, 8, 8, 8, 8, 8]),
        ("static", [2, 4, 8, 4, 8, 2]),
        ("static", [1.58, 8, 4, 8, 2, 8]),
        ("dynamic", [4, 2, 8, 8, 8, 8]),
    ],
)
def test_ram_and_size_equal_what_compile_reports(mode, scheme, digits_split, tmp_path) -> None:
    """eval_ram is the arena and eval_size the flash bytes `mico compile` reports for the
    same plan and mode (weights, biases, scales and tables)."""
    from mico.deploy import DeployOptions, compile_from_options
    from mico.models import from_zoo
    from mico.quant import QuantConfig

    train_loader, test_loader = digits_split.loaders(batch_size=64, seed=0)
    torch.manual_seed(0)
    evaluator = MiCoEval(from_zoo("small_cnn"), 1, train_loader, test_loader, None,
                         config=QuantConfig(act_mode=mode))  # fmt: skip
    plan = evaluator.scheme_key(scheme)
    options = DeployOptions(model="small_cnn", plan=plan, mode=mode, out_dir=tmp_path / "c")
    compiled, _ = compile_from_options(options, log=lambda _m: None)
    project = compiled.project
    assert evaluator.eval_ram(scheme) == project.arena.size
    assert evaluator.eval_size(scheme) == sum(project.flash.values())
    assert evaluator.flash_bytes(scheme) == project.flash
    assert evaluator.mode == mode


def test_measured_latency_is_the_schemes_own_c_program_on_rv32(trained, tmp_path) -> None:
    from mico.targets import rv32

    if not rv32.available():
        pytest.skip("rv32 toolchain missing: " + rv32.missing_tools_hint())
    from mico.codegen import compile_model
    from mico.quant import calibrate, quantize_model

    model, train_loader, test_loader, ckpt = trained
    evaluator = MiCoEval(model, 1, train_loader, test_loader, ckpt, constraint="latency",
                         latency_target="rv32")  # fmt: skip
    scheme = [8, 4, 2, 8, 8, 4]
    measured = evaluator.eval_latency(scheme)
    assert evaluator.eval_latency(scheme) == measured  # remembered, not re-run
    # the same program compiled by hand retires the same instructions
    q = quantize_model(copy.deepcopy(model), scheme, evaluator.config, evaluator.example)
    batches = evaluator._calibration[:1]
    if evaluator.mode == "static":
        calibrate(q, batches)
    compiled = compile_model(q, evaluator.example[:1], tmp_path / "c", "model", evaluator.mode,
                             calibration=batches)  # fmt: skip
    rv32.build(compiled.project)
    run = rv32.run(compiled.project, evaluator.example[:1].numpy())
    assert measured == run.instructions_per_inference
    assert evaluator.eval_constraint(scheme) == measured


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="apt-get install valgrind")
def test_measured_host_latency_is_the_steady_state(trained, tmp_path) -> None:
    """On the host the scheme's program runs on the host kernels, which lay out each layer's
    weights on its first call: the search sees an inference after that one-time work."""
    from mico.codegen import compile_model
    from mico.deploy import generation_extensions
    from mico.quant import calibrate, quantize_model
    from mico.targets import host

    model, train_loader, test_loader, ckpt = trained
    evaluator = MiCoEval(model, 1, train_loader, test_loader, ckpt, constraint="latency",
                         latency_target="host")  # fmt: skip
    scheme = [8, 4, 2, 8, 8, 4]
    measured = evaluator.eval_latency(scheme)
    q = quantize_model(copy.deepcopy(model), scheme, evaluator.config, evaluator.example)
    batches = evaluator._calibration[:1]
    if evaluator.mode == "static":
        calibrate(q, batches)
    compiled = compile_model(q, evaluator.example[:1], tmp_path / "c", "model", evaluator.mode,
                             calibration=batches,
                             isa_extensions=generation_extensions(["host"]))  # fmt: skip
    host.build(compiled.project)
    x = evaluator.example[:1].numpy()
    steady, first = host.steady_callgrind_counts(compiled.project, x, tmp_path)
    assert measured == int(steady[0]) and first > measured


def test_latency_modes_and_targets_are_checked(trained, tmp_path, monkeypatch) -> None:
    model, train_loader, test_loader, ckpt = trained
    with pytest.raises(PlanError, match="latency mode must be one of measured, proxy"):
        MiCoEval(model, 1, train_loader, test_loader, ckpt, latency_mode="guess")
    monkeypatch.setenv("HOME", str(tmp_path))  # no fitted proxy in this home
    monkeypatch.setenv("MICO_CACHE", str(tmp_path / "cache"))
    evaluator = MiCoEval(model, 1, train_loader, test_loader, ckpt, latency_target="rv32",
                         latency_mode="proxy")  # fmt: skip
    with pytest.raises(MicoError, match=r"no latency proxy for target 'rv32'.*mico profile"):
        evaluator.eval_latency([8] * 6)


def test_a_latency_that_grows_at_fewer_bits_is_refused_with_the_figures(trained, monkeypatch):
    model, train_loader, test_loader, ckpt = trained
    evaluator = MiCoEval(model, 1, train_loader, test_loader, ckpt, latency_target="rv32")
    per_width = {2: 300.0, 4: 250.0, 8: 200.0}
    monkeypatch.setattr(evaluator, "eval_latency", lambda scheme, *a: per_width[scheme[0]])
    with pytest.raises(PlanError) as info:
        evaluator.check_latency_falls_with_bits([2, 4, 8])
    message = str(info.value)
    assert "W2A2 300, W4A4 250, W8A8 200" in message and "--bits 8" in message
    per_width.update({2: 100.0, 4: 150.0})
    evaluator.check_latency_falls_with_bits([2, 4, 8])  # falls with the widths: accepted


def test_ram_cost_is_the_compiled_arena_with_kernel_scratch(tmp_path) -> None:
    """The search's ``ram`` cost is the compiled project's arena, the kernels' working memory
    planned in it included (LeNet at W4A4: its convs' channel lanes carve a few KB there)."""
    from torch.utils.data import DataLoader, TensorDataset

    from mico.codegen import compile_model
    from mico.quant import calibrate, quantize_model

    torch.manual_seed(0)
    model = LeNet()
    shape = tuple(model.default_input_shape)
    data = TensorDataset(torch.rand(64, *shape), torch.randint(0, 10, (64,)))
    loader = DataLoader(data, batch_size=32)
    evaluator = MiCoEval(model, 1, loader, loader, None)
    scheme = [4] * (2 * evaluator.n_layers)
    q = quantize_model(copy.deepcopy(model), scheme, evaluator.config, evaluator.example)
    batches = evaluator._calibration
    calibrate(q, batches)
    compiled = compile_model(q, evaluator.example[:1], tmp_path / "c", "model", "static",
                             calibration=batches)  # fmt: skip
    scratch = json.loads((tmp_path / "c" / "mico.json").read_text())["kernel_scratch"]
    assert scratch  # the case this test is about: some layer's working memory is planned
    assert evaluator.eval_ram(scheme) == compiled.project.arena.size
