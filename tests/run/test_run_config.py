"""`mico run CONFIG.yaml`: config validation (every problem named by section and field) and a
small run end to end (files written, C equal to the Python reference)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from mico.cli import app
from mico.errors import ConfigError
from mico.runconfig import load_run_config, parse_run_config
from mico.targets.rv32 import available as rv32_available

runner = CliRunner()

SMALL = """
name: tiny
model: small_cnn
data: {dataset: digits, batch_size: 128}
train: {epochs: 1}
quantize: {plan: 4/4}
compile: {mode: static}
verify: {samples: 8}
"""


def write(tmp_path, text, name="run.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_defaults_are_filled_in():
    cfg = parse_run_config({"model": "mlp"})
    assert (cfg.model, cfg.mode, cfg.targets, cfg.epochs, cfg.method) == (
        "mlp",
        "static",
        ("host",),
        5,
        "ptq",
    )
    assert cfg.prefer == "speed"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"train": {"epochs": -1}}, "'train.epochs': expected an integer in 0..100000, got -1"),
        ({"train": {"lr": float("nan")}}, "'train.lr': expected a number in (0.0, 10.0], got nan"),
        ({"train": {"epoch": 3}}, "'train.epoch': unknown field; fields: epochs, lr"),
        ({"compile": {"mode": "fast"}}, "'compile.mode': expected one of static, dynamic"),
        ({"compile": {"prefer": "fast"}}, "'compile.prefer': expected one of speed, size"),
        ({"target": ["host", "arm"]}, "'target': expected one of host, rv32, rv64, got 'arm'"),
        ({"quantize": {"plan": 4}}, "'quantize.plan': expected 'W/A'"),
        ({"quantize": {"method": "awq"}}, "'quantize.method': expected one of ptq, qat"),
        ({"verify": {"samples": 0}}, "'verify.samples': expected an integer in 1..100000"),
        ({"modle": "mlp"}, "'modle': unknown field"),
        ({"data": [1]}, "'data': expected a mapping"),
        ({"seed": True}, "'seed': expected an integer"),
        ({"quantize": {"plan": "4/4"}, "search": {"trials": 3}}, "not both"),
        ({"search": {"trials": 3}}, "'search.budget': expected budgets such as 'bops=50%'"),
        ({"search": {"budget": "bops=50%", "strategy": "annealing"}}, "'search.strategy'"),
        ({"search": {"budget": "speed=3"}}, "'search.budget': "),
        ({"search": {"budget": "bops=1%", "bits": [2, 9]}}, "'search.bits': expected a list"),
        ({"search": {"budget": "bops=1%", "trials": 0}}, "'search.trials': expected an integer"),
        ([1, 2], "a run config must be a mapping of sections"),
    ],
)
def test_invalid_configs_name_section_and_field(raw, message):
    with pytest.raises(ConfigError) as info:
        parse_run_config(raw)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_every_problem_is_reported_at_once():
    with pytest.raises(ConfigError, match=r"train.epochs.*compile.mode.*verify.samples"):
        parse_run_config(
            {"train": {"epochs": -1}, "compile": {"mode": "x"}, "verify": {"samples": 0}}
        )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            "train: {epochs: 1}\ntrain: {epochs: 2}\n",
            r"duplicate key .train. at line 2 \(first at line 1\)",
        ),
        (
            "a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n"
            + "".join(
                f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
                for p, c in zip("abcdef", "bcdefg", strict=True)
            )  # 10**7 values from 7 lines
            + "train: *g\n",
            "expands to more than",
        ),
        (b"name: \xff\xfe\n", "is not UTF-8 text"),
        ("train: {epochs: [1\n", "at line"),
    ],
)
def test_bad_files_are_clean_errors(tmp_path, content, message):
    path = tmp_path / "run.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        load_run_config(path)


def test_size_cap_and_missing_file(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * (1 << 20) + "\n")
    with pytest.raises(ConfigError, match="larger than the 1048576-byte limit"):
        load_run_config(big)
    with pytest.raises(ConfigError, match="does not exist"):
        load_run_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="is a directory"):
        load_run_config(tmp_path)


def test_cli_refuses_before_any_work(tmp_path):
    path = write(tmp_path, "model: small_cnn\nquantize: {plan: 'conv1=9/9'}\n")
    out = tmp_path / "out"
    result = runner.invoke(app, ["run", str(path), "-o", str(out)])
    assert result.exit_code == 2
    assert result.output.startswith("error: ") and "Traceback" not in result.output
    assert not out.exists()


def test_cli_unknown_zoo_model(tmp_path):
    path = write(tmp_path, "model: resnet9\n")
    result = runner.invoke(app, ["run", str(path), "-o", str(tmp_path / "o")])
    assert result.exit_code == 2 and "unknown model 'resnet9'" in result.output


def test_dataset_that_does_not_fit_is_named(tmp_path):
    path = write(tmp_path, "model: small_cnn\ndata: {dataset: mnist1d}\ntrain: {epochs: 0}\n")
    result = runner.invoke(app, ["run", str(path), "-o", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "takes samples of shape (1, 8, 8) but dataset 'mnist1d' gives (1, 40)" in result.output


@pytest.mark.slow
def test_small_run_end_to_end(tmp_path):
    path = write(tmp_path, SMALL)
    out = tmp_path / "out"
    result = runner.invoke(app, ["run", str(path), "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    for name in (
        "fp32.pt",
        "quantized.pt",
        "plan.yaml",
        "metrics.json",
        "report.md",
        "run.yaml",
        "c/main.c",
        "c/memory.json",
    ):
        assert (out / name).exists(), name
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["targets"]["host"] == {
        "ok": True,
        "exact": 8,
        "samples": 8,
        "instructions_per_inference": None,
    }
    assert metrics["plan"] == "conv1=4/4,conv2=4/4,fc=4/4"
    assert "| host | 8/8 |" in (out / "report.md").read_text()


@pytest.mark.slow
def test_layers_config_with_a_residual_runs(tmp_path):
    from pathlib import Path

    example = Path(__file__).parents[2] / "examples" / "residual.yaml"
    cfg = load_run_config(example)
    cfg.epochs, cfg.samples = 1, 6
    from mico.runner import run_config

    result = run_config(cfg, tmp_path / "out", log=lambda _m: None)
    assert result.ok
    assert result.metrics["targets"]["host"]["exact"] == 6
    assert (tmp_path / "out" / "fp32_state_dict.pt").exists()


SEARCHED = """
name: searched
model: small_cnn
data: {dataset: digits, batch_size: 128}
train: {epochs: 1}
search: {strategy: random, trials: 3, budget: "bops=50%", bits: [2, 4, 8]}
compile: {mode: static}
verify: {samples: 8}
"""


def test_a_search_section_picks_the_plan_within_its_budget(tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", str(write(tmp_path, SEARCHED)), "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    search = metrics["search"]
    assert search["strategy"] == "random" and search["plan"] == metrics["plan"]
    assert search["costs"]["bops"] <= search["budgets"]["bops"]
    assert metrics["bops"] == search["costs"]["bops"]  # the compiled plan is the searched one
    assert metrics["targets"]["host"]["exact"] == 8
    assert "Plan searched with `random` over 3 trial(s)" in (out / "report.md").read_text()


def test_an_impossible_search_budget_is_refused_before_training(tmp_path):
    config = SEARCHED.replace("bops=50%", "bops=1")
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", str(write(tmp_path, config)), "-o", str(out)])
    assert result.exit_code == 2 and "raise the budget to at least" in result.output
    assert "training" not in result.output and not out.exists()


@pytest.mark.skipif(not rv32_available(), reason="rv32 toolchain missing (flash budget)")
def test_a_flash_search_of_a_size_preferring_program(tmp_path):
    """compile.prefer: size makes the search count the plain kernels' program, whose flash
    falls with the widths (the fast kernels' does not on small_cnn: refused), and compiles
    that program."""
    # small_cnn's plain-kernel program: 24,322 B at W2A2 (was 24,080 before MicoLinear's
    # scratch and x_off fields), about 500 B more at W4A4 and 1,100 at W8A8
    config = SEARCHED.replace('"bops=50%"', '"flash=24600"').replace(
        "compile: {mode: static}", "compile: {mode: static, prefer: size}"
    )
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", str(write(tmp_path, config)), "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["prefer"] == "size"
    assert metrics["search"]["costs"]["flash"] <= 24600
    assert json.loads((out / "c" / "mico.json").read_text())["prefer"] == "size"
    fast = config.replace("prefer: size", "prefer: speed")
    refused = runner.invoke(app, ["run", str(write(tmp_path, fast, "fast.yaml")), "-o",
                                  str(tmp_path / "fast")])  # fmt: skip
    assert refused.exit_code == 2 and "Search with --prefer size" in refused.output
