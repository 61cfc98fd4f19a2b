"""mico tune: budgets parsed strictly, impossible budgets refused before training, the best
plan within every budget, and the run directory's files; its size equals what compile reports."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from mico.cli import app
from mico.errors import PlanError
from mico.search.tune import parse_budgets

runner = CliRunner()


def test_budget_parsing():
    b = parse_budgets("bops=50%, size=4KB,macs=1.5M,latency=2k,ram=1KiB")
    assert [(x.cost, x.value, x.share) for x in b] == [
        ("bops", None, 0.5), ("size", 4000.0, None), ("macs", 1.5e6, None),
        ("latency", 2000.0, None), ("ram", 1024.0, None)]  # fmt: skip
    assert parse_budgets("size=2KiB")[0].value == 2048


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("flops=3", "must be COST=VALUE with COST one of bops, size, flash, macs, latency, ram"),
        ("bops=lots", "is not a number with an optional unit"),
        ("size=4XB", "(b, k, m, g, kb, mb, kib, mib or %)"),
        ("bops=-5", "is not a number"),
        ("bops=0", "must be positive"),
        ("bops=1,bops=2", "given twice"),
        ("", "give at least one budget"),
    ],
)
def test_bad_budgets(text, message):
    with pytest.raises(PlanError, match=message):
        parse_budgets(text)


@pytest.mark.slow
def test_tune_writes_a_plan_that_fits_and_compiles(tmp_path):
    out = tmp_path / "tune"
    result = runner.invoke(app, ["tune", "small_cnn", "--budget", "bops=50%,size=70%",
                                 "--epochs", "2", "-o", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    for name in ("best_plan.yaml", "trials.csv", "report.md", "report.json", "fp32.pt",
                 "study.db", "trajectory.png", "pareto.png", "bits.png"):  # fmt: skip
        assert (out / name).is_file(), name
    for name in ("trajectory.png", "pareto.png", "bits.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = json.loads((out / "report.json").read_text())
    for cost, value in report["costs"].items():
        assert value <= report["budgets"][cost]
    progress = [line for line in result.output.splitlines() if line.startswith("trial ")]
    assert len(progress) == report["evaluations"] and "best feasible" in progress[-1]
    best = f"best feasible {report['best_accuracy']:.4f} (trial {report['best_trial']})"
    assert best in progress[-1]
    # the best plan's C project, compiled and run on the host: bit-exact in static mode
    verification = report["verification"]
    assert verification["ok"] and verification["exact"] == verification["samples"] == 360
    assert verification["flash_bytes"] == report["costs"]["size"]
    assert (out / "c" / "model.c").is_file() and (out / "c" / "verify.json").is_file()
    text = (out / "report.md").read_text()
    assert "identical to the Python reference on all 360 samples" in text
    assert "identical to the Python reference on the host" in result.output
    # the plan's accuracy measured again from the C program's outputs on the whole test set:
    # static mode, so exactly the integer Python reference's
    assert verification["c_accuracy"] == verification["reference_accuracy"]
    assert 0.1 < verification["c_accuracy"] <= 1.0  # 10 classes: better than chance
    assert f"C accuracy {verification['c_accuracy']:.4f}" in result.output
    assert (
        f"Accuracy of the C program on 360 test samples: {verification['c_accuracy']:.4f}" in text
    )
    plan = str(out / "best_plan.yaml")
    compiled = runner.invoke(app, ["compile", "small_cnn", "--plan", plan, "--mode", "static",
                                   "-o", str(tmp_path / "c"), "-q"])  # fmt: skip
    assert compiled.exit_code == 0, compiled.output
    assert f"flash {int(report['costs']['size'])} B" in compiled.output
    # resumed, quiet: nothing is evaluated again and only the summary is printed
    again = runner.invoke(app, ["tune", "small_cnn", "--budget", "bops=50%,size=70%",
                                "--epochs", "2", "-o", str(out), "--resume", "-q"])  # fmt: skip
    assert again.exit_code == 0, again.output
    assert [line.split(":")[0] for line in again.output.splitlines()] == [
        "best plan",
        "C project " + str(out / "c") + " (static)",
    ]
    assert json.loads((out / "report.json").read_text())["evaluations"] == report["evaluations"]


@pytest.mark.slow
def test_ram_budget_is_the_compiled_arena(tmp_path):
    out = tmp_path / "ram"
    result = runner.invoke(app, ["tune", "small_cnn", "--budget", "ram=400B", "--epochs", "0",
                                 "--strategy", "random", "--trials", "3", "-o", str(out),
                                 "-q"])  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    assert report["costs"]["ram"] <= 400
    assert report["verification"]["arena_bytes"] == report["costs"]["ram"]
    assert report["cached"] == 0
    # the same model, weights and data again (a new study): every value comes from the cache
    again = runner.invoke(app, ["tune", "small_cnn", "--budget", "ram=400B", "--epochs", "0",
                                "--strategy", "random", "--trials", "3", "-o", str(out),
                                "--force", "--no-compile", "-q"])  # fmt: skip
    assert again.exit_code == 0, again.output
    second = json.loads((out / "report.json").read_text())
    assert second["cached"] == second["evaluations"] == report["evaluations"]
    assert second["best_accuracy"] == report["best_accuracy"]
    assert "not compiled" in (out / "report.md").read_text()


def test_impossible_budget_is_refused_before_training(tmp_path):
    out = tmp_path / "t"
    result = runner.invoke(app, ["tune", "small_cnn", "--budget", "bops=1", "-o", str(out)])
    assert result.exit_code == 2
    assert "raise the budget to at least" in result.output and not out.exists()


def test_unknown_kernel_preference_is_refused_before_training(tmp_path):
    out = tmp_path / "t"
    result = runner.invoke(app, ["tune", "small_cnn", "--prefer", "fast", "-o", str(out)])
    assert result.exit_code == 2 and "unknown kernel preference 'fast'" in result.output
    assert "training" not in result.output and not out.exists()


def test_unknown_strategy_names_the_available_ones(tmp_path):
    result = runner.invoke(app, ["tune", "small_cnn", "--strategy", "annealing", "--epochs", "0",
                                 "-o", str(tmp_path / "t")])  # fmt: skip
    assert result.exit_code == 2 and "choose one of: " in result.output and "nlp" in result.output


def test_write_run_plots_and_reports_without_training(tmp_path):
    """The run files from a result alone: plots (infeasible and failed trials included, a
    ternary layer in the heat-map) and the report saying the plan was not compiled."""
    import math

    from mico.search.tune import TuneResult, write_run

    rows = [
        {"trial": 0, "state": "COMPLETE", "scheme": "a=8/8,b=8/8", "objective": 0.9,
         "bops": 200.0, "feasible": False},
        {"trial": 1, "state": "FAIL", "scheme": "a=2/8,b=8/8", "objective": math.nan,
         "bops": math.nan, "feasible": False},
        {"trial": 2, "state": "COMPLETE", "scheme": "a=1.58/8,b=4/4", "objective": 0.7,
         "bops": 90.0, "feasible": True},
        {"trial": 3, "state": "COMPLETE", "scheme": "a=4/4,b=4/4", "objective": 0.8,
         "bops": 80.0, "feasible": True},
    ]  # fmt: skip
    result = TuneResult([4, 4, 4, 4], 0.8, {"bops": 80.0}, {"bops": 100.0}, rows, 3, "s", "x")
    write_run(result, ["a", "b"], tmp_path)
    for name in ("trajectory.png", "pareto.png", "bits.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG", name
    report = json.loads((tmp_path / "report.json").read_text())
    assert (report["evaluations"], report["failed_trials"], report["best_trial"]) == (3, 1, 3)
    assert report["best_plan"] == "a=4/4,b=4/4" and report["verification"] is None
    assert "not compiled" in (tmp_path / "report.md").read_text()
    assert len((tmp_path / "trials.csv").read_text().splitlines()) == 5
    from mico.search.plots import plot_bits

    plot_bits(["a", "b"], [[1.58, 8], [8, 2]], tmp_path / "ternary.png")
    assert (tmp_path / "ternary.png").stat().st_size > 1000


def test_a_fresh_run_never_deletes_an_earlier_study(tmp_path):
    out = tmp_path / "t"
    out.mkdir()
    (out / ".mico-output").write_text('{"tool": "mico"}')
    (out / "study.db").write_bytes(b"")
    result = runner.invoke(app, ["tune", "small_cnn", "--epochs", "0", "-o", str(out)])
    assert result.exit_code == 2 and "--resume" in result.output and "--force" in result.output
    assert (out / "study.db").exists()
    result = runner.invoke(app, ["tune", "small_cnn", "--epochs", "0", "--resume",
                                 "-o", str(tmp_path / "new")])  # fmt: skip
    assert result.exit_code == 2 and "not a mico tune run directory" in result.output


def test_fixed_layers_parsing():
    from mico.search.tune import parse_fixed_layers

    names = ["conv1", "conv2", "fc"]
    assert parse_fixed_layers("first=8,last=4/8", names) == {0: (8, 8), 2: (4, 8)}
    assert parse_fixed_layers("conv2=ternary/4, -1=2", names) == {1: (1.58, 4), 2: (2, 2)}
    assert parse_fixed_layers("0=8,first=8", names) == {0: (8, 8)}  # the same layer twice, agreeing


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("first", "is not KEY=W or KEY=W/A"),
        ("conv9=8", "'conv9' is not a layer of this model; use first, last, an index from -3 to 2"),
        ("3=8", "layer index 3 is out of range for 3 layers"),
        ("fc=9", "bit-width"),
        ("0=8,first=4", "given twice, with different widths"),
    ],
)
def test_bad_fixed_layers(text, message):
    from mico.search.tune import parse_fixed_layers

    with pytest.raises(PlanError, match=re.escape(message)):
        parse_fixed_layers(text, ["conv1", "conv2", "fc"])


def test_space_and_fixed_layers_from_the_command_line(tmp_path):
    """--space w-only:8 searches weights only (activations held at 8 bits) and --fixed-layers
    holds the first and last layers at W8A8; both are settings of the study (resume agrees)."""
    out = tmp_path / "t"
    args = ["tune", "small_cnn", "--budget", "bops=60%", "--epochs", "0", "--strategy", "random",
            "--trials", "3", "--space", "w-only:8", "--fixed-layers", "first=8,last=8",
            "--no-compile", "--no-cache", "-o", str(out), "-q"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    import csv

    from mico.quant.plan import QuantPlan

    with (out / "trials.csv").open() as handle:
        schemes = [QuantPlan.parse(row["scheme"]) for row in csv.DictReader(handle)]
    assert 1 <= len(schemes) <= 3  # one weight width searched: 3 schemes at most
    for plan in schemes:  # every evaluated scheme holds the fixed layers and activations
        assert (plan["conv1"].w, plan["fc"].w) == (8, 8)
        assert all(b.a == 8 for b in plan.values())
    bits = list(QuantPlan.load(out / "best_plan.yaml").values())
    assert (bits[0].w, bits[0].a) == (8, 8) and (bits[-1].w, bits[-1].a) == (8, 8)
    assert all(b.a == 8 for b in bits)
    again = runner.invoke(app, [*args[:-3], "--trials", "4", "-o", str(out), "--resume", "-q"])
    assert again.exit_code == 0, again.output
    other = runner.invoke(app, [*args[:-3], "--fixed-layers", "first=4", "-o", str(out),
                                "--resume", "-q"])  # fmt: skip
    assert other.exit_code != 0 and "fixed_layers" in other.output
    bad = runner.invoke(app, [*args[:10], "--space", "diagonal", "-o", str(tmp_path / "b")])
    assert bad.exit_code == 2 and "search space 'diagonal' is not one of" in bad.output
    assert not (tmp_path / "b").exists()


def test_search_widths_come_from_the_target(tmp_path):
    """Under a latency budget the widths are the latency target's (its target file); a width
    it does not run is refused before any training."""
    from mico.cli_run import _search_widths

    assert _search_widths("target", "bitfusion") == [2, 4, 8]
    assert _search_widths("target", "host") == [1, 2, 3, 4, 5, 6, 7, 8]
    assert _search_widths("8,2,4,2", "bitfusion") == [2, 4, 8]
    out = tmp_path / "t"
    result = runner.invoke(app, ["tune", "small_cnn", "--budget", "latency=50%", "--bits",
                                 "3,8", "--target", "bitfusion", "--epochs", "0", "-o",
                                 str(out)])  # fmt: skip
    assert result.exit_code == 2
    assert "target 'bitfusion' does not run 3-bit weights and activations" in result.output
    assert "it runs 2, 4, 8" in result.output and not out.exists()


def test_qat_objective_from_the_command_line(tmp_path):
    """--objective qat_acc fine-tunes each trial (--qat-epochs); the objective is a setting of
    the study and of the cached values, and a wrong one is refused before training."""
    out = tmp_path / "qat"
    result = runner.invoke(app, ["tune", "small_cnn", "--budget", "bops=50%", "--epochs", "1",
                                 "--strategy", "random", "--trials", "2", "--objective",
                                 "qat_acc", "--qat-epochs", "1", "--qat-lr", "0.003",
                                 "--no-compile", "--no-cache", "-o", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    assert report["objective"] == "qat_acc" and report["evaluations"] == 2
    assert "qat_acc" in result.output
    bad = runner.invoke(app, ["tune", "small_cnn", "--objective", "top5", "-o",
                              str(tmp_path / "b")])  # fmt: skip
    assert bad.exit_code == 2 and "--objective 'top5': choose one of ptq_acc, qat_acc" in bad.output
    assert not (tmp_path / "b").exists()
