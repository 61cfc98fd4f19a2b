"""The demo pipeline on a smaller model, and what it leaves on disk when it fails."""

import json

import numpy as np
import pytest

from mico.atomic import atomic_directory
from mico.errors import PlanError
from mico.pipeline import DemoOptions, run_demo


def test_small_demo_agrees_exactly(tmp_path):
    logs: list[str] = []
    result = run_demo(
        DemoOptions(
            out_dir=tmp_path / "run",
            epochs=2,
            channels=(2, 4),
            plan="conv1=5/7,conv2=2/3,fc=6/2",
            name="tiny",
        ),
        log=logs.append,
    )
    assert result.ok
    assert result.agreement.samples == 360 and result.agreement.max_abs_diff == 0
    assert any(line.startswith("[4/5]") for line in logs)
    files = {p.name for p in (tmp_path / "run").iterdir()}
    assert {
        "tiny.c",
        "tiny.h",
        "tiny_weights.h",
        "main.c",
        "Makefile",
        "report.md",
        "report.json",
        "plan.yaml",
        "graph.txt",
    } <= files
    rows = json.loads((tmp_path / "run" / "report.json").read_text())["layers"]
    conv2 = next(r for r in rows if r["layer"] == "conv2")
    assert conv2["w_bits"] == 2 and conv2["a_bits"] == 3
    assert conv2["macs"] == 4 * 4 * 4 * 2 * 9  # out_c * H * W * in_c * k*k
    assert conv2["bops"] == conv2["macs"] * 2 * 3


@pytest.mark.slow
def test_demo_qat_recovers_low_bit_accuracy_and_stays_bit_exact(tmp_path):
    """QAT after calibration: the C program still equals the Python reference exactly."""
    options = dict(epochs=6, channels=(4, 8), plan="conv1=8/8,conv2=4/4,fc=2/8", name="q")
    ptq = run_demo(DemoOptions(out_dir=tmp_path / "ptq", qat_epochs=0, **options), log=print)
    qat = run_demo(DemoOptions(out_dir=tmp_path / "qat", qat_epochs=4, **options), log=print)
    assert ptq.ok and qat.ok
    assert qat.metrics["ptq_accuracy"] == ptq.metrics["ptq_accuracy"]  # same seed, same PTQ
    assert qat.metrics["quantized_python_accuracy"] > ptq.metrics["quantized_python_accuracy"]
    assert qat.metrics["c_accuracy"] == qat.metrics["quantized_python_accuracy"]


def test_failed_run_keeps_the_previous_output(tmp_path):
    out = tmp_path / "run"
    with atomic_directory(out) as earlier:  # an earlier mico output
        (earlier / "keep.txt").write_text("earlier results")
    with pytest.raises(PlanError):
        run_demo(DemoOptions(out_dir=out, plan="conv1=8/8"), log=lambda m: None)
    assert (out / "keep.txt").read_text() == "earlier results"


def test_atomic_directory_all_or_nothing(tmp_path):
    target = tmp_path / "out"
    with atomic_directory(target) as tmp:
        (tmp / "a.txt").write_text("1")
    assert (target / "a.txt").read_text() == "1"
    with pytest.raises(RuntimeError), atomic_directory(target) as tmp:
        (tmp / "b.txt").write_text("half")
        raise RuntimeError("stage failed")
    assert sorted(p.name for p in target.iterdir()) == [".mico-output", "a.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_compare_outputs_counts_disagreements():
    from mico.execute import compare_outputs

    ref = np.array([[1, 5, 2], [7, 0, 0], [3, 3, 9]])
    c = ref.copy()
    c[1, 2] = 1  # same top-1, different integers
    c[2, 0] = 10  # different top-1
    agreement = compare_outputs(c, ref)
    assert (agreement.exact, agreement.top1, agreement.max_abs_diff) == (1, 2, 7)
    assert not agreement.all_exact
    with pytest.raises(ValueError, match="shape"):
        compare_outputs(c[:2], ref)


def test_demo_on_rv32_reports_device_figures(tmp_path):
    from mico.targets import rv32

    if not rv32.available():
        pytest.skip("rv32 toolchain missing")
    result = run_demo(
        DemoOptions(out_dir=tmp_path / "rv", epochs=2, qat_epochs=0, channels=(2, 4),
                    target="rv32", name="tiny"),
        log=lambda m: None,
    )  # fmt: skip
    assert result.ok
    m = result.metrics
    assert m["rv32_exact_agreement"] == 360
    assert m["rv32_instructions_per_inference"] > 0
    assert m["rv32_model_ram_bytes"] >= m["arena_bytes"]
    assert 0 < m["rv32_stack_bytes"] < 65536  # measured below main, inside the probe
    report = (tmp_path / "rv" / "report.md").read_text()
    assert "rv32: instructions per inference" in report
    assert f"rv32: stack per inference (measured) | {m['rv32_stack_bytes']} B" in report
    assert (tmp_path / "rv" / "tiny.elf").is_file()


def test_demo_rejects_an_unknown_target_before_training(tmp_path):
    from mico.errors import BuildError

    with pytest.raises(BuildError, match="unknown target 'arm'; use host, rv32 or auto"):
        run_demo(DemoOptions(out_dir=tmp_path / "x", target="arm"), log=lambda m: None)
    assert not (tmp_path / "x").exists()
