"""`mico verify --per-layer`: every node of one inference counted on the targets that count
(rv32 instructions, VexRiscv cycles, host callgrind instructions), written to verify.md and
verify.json with each row's share and a check that the rows sum to the release build's count
plus the markers' glue; rv64 and a host without valgrind say why they have no rows."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mico.cli import app
from mico.deploy import DeployOptions, compile_from_options, per_layer_hook
from mico.hw.latency import (
    GLUE_INSTRUCTIONS_PER_NODE,
    LatencyReport,
    LatencyRow,
    PerLayer,
)
from mico.targets import rv32
from mico.targets.catalog import get_target

runner = CliRunner()


def _vexriscv_available() -> bool:
    try:
        from mico.targets import vexriscv
    except ImportError:
        return False
    return vexriscv.available()


def _verify(tmp_path: Path, *targets: str, per_layer: bool = True) -> dict:
    args = ["verify", "small_cnn", "--plan", "4/8", "--mode", "static", "--samples", "2",
            "-o", str(tmp_path / "v"), "--force"]  # fmt: skip
    for target in targets:
        args += ["--target", target]
    if per_layer:
        args.append("--per-layer")
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads((tmp_path / "v" / "verify.json").read_text())


def _node_names(tmp_path: Path) -> list[str]:
    """The schedule's node names, in the order the generated model_run marks them."""
    source = (tmp_path / "v" / "model.c").read_text()
    return [line.split('"')[1] for line in source.splitlines() if 'MICO_DUMP("' in line]


def _check_rows(per_layer: dict, nodes: list[str]) -> None:
    rows = per_layer["layers"]
    assert [r["node"] for r in rows] == [*nodes, "(output copy)"]
    assert all(r["value"] > 0 for r in rows[:-1])
    assert sum(r["value"] for r in rows) == per_layer["total"]
    assert sum(r["share"] for r in rows) == pytest.approx(100.0)
    layers = {r["layer"]: r for r in rows if r["layer"]}
    assert set(layers) == {"conv1", "conv2", "fc"}
    assert layers["conv2"]["op"] == "qconv2d"
    # each convolution is a large part of small_cnn's inference (on the host, pooling over
    # sub-byte codes costs about as much), and both cost more than the small classifier
    assert layers["conv1"]["share"] > 10 and layers["conv2"]["share"] > 10
    assert layers["fc"]["share"] < min(layers["conv1"]["share"], layers["conv2"]["share"])
    assert per_layer["glue"] == per_layer["total"] - per_layer["release"]


@pytest.mark.skipif(not rv32.available(), reason=rv32.missing_tools_hint())
def test_rv32_per_layer_instructions_sum_to_the_release_count(tmp_path):
    data = _verify(tmp_path, "rv32")
    (row,) = data["targets"]
    per_layer = row["per_layer"]
    assert per_layer["unit"] == "instructions" and per_layer["ok"]
    nodes = _node_names(tmp_path)
    _check_rows(per_layer, nodes)
    # the release count of sample 0 is the one the release build reports for that sample
    compiled_dir = tmp_path / "v"
    assert per_layer["release"] <= row["instructions_per_inference"]
    # instruction counts are exact: the glue is a few instructions per node marker
    assert 0 < per_layer["glue"] <= GLUE_INSTRUCTIONS_PER_NODE * len(nodes)
    assert per_layer["glue_bounds"] == [0, GLUE_INSTRUCTIONS_PER_NODE * len(nodes)]
    md = (compiled_dir / "verify.md").read_text()
    assert "## rv32: per layer (instructions, sample 0)" in md
    assert "| 2 | bit_conv2d | qconv2d | conv1 |" in md
    assert f"**{per_layer['total']:,.0f}**" in md
    assert "Check: the rows sum to" in md and "**ok**" in md
    assert "markers' call sequences" in md


@pytest.mark.skipif(not rv32.available(), reason=rv32.missing_tools_hint())
def test_without_the_flag_verify_counts_no_layers(tmp_path):
    data = _verify(tmp_path, "rv32", per_layer=False)
    assert "per_layer" not in data["targets"][0]
    assert "per layer" not in (tmp_path / "v" / "verify.md").read_text()
    assert DeployOptions().per_layer is False


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="apt-get install valgrind")
def test_host_per_layer_under_callgrind(tmp_path):
    data = _verify(tmp_path, "host")
    per_layer = data["targets"][0]["per_layer"]
    assert per_layer["unit"] == "instructions" and per_layer["ok"]
    _check_rows(per_layer, _node_names(tmp_path))


@pytest.mark.skipif(not _vexriscv_available(), reason="the vexriscv target is not available")
def test_vexriscv_per_layer_cycles(tmp_path):
    data = _verify(tmp_path, "vexriscv")
    row = data["targets"][0]
    per_layer = row["per_layer"]
    assert per_layer["unit"] == "cycles" and per_layer["ok"], per_layer
    _check_rows(per_layer, _node_names(tmp_path))
    low, high = per_layer["glue_bounds"]
    assert low == -high and high == int(0.05 * per_layer["release"])
    # cycles, not instructions: more than the program retires
    assert per_layer["release"] > row["instructions_per_inference"]
    assert "## vexriscv: per layer (cycles, sample 0)" in (tmp_path / "v" / "verify.md").read_text()


def test_targets_that_count_nothing_say_why(tmp_path, monkeypatch):
    options = DeployOptions(model="small_cnn", plan="8/8", out_dir=tmp_path / "p", samples=2)
    compiled, samples = compile_from_options(options, log=lambda _m: None)
    said: list[str] = []
    assert per_layer_hook(compiled, samples, "rv64", said.append) == {
        "skipped": "qemu-user counts no instructions"
    }
    monkeypatch.setattr(shutil, "which", lambda _tool: None)
    skipped = per_layer_hook(compiled, samples, "host", said.append)
    assert "valgrind is not installed" in skipped["skipped"]
    assert said[0] == "rv64: no per-layer figures (qemu-user counts no instructions)"
    from mico.deploy import DeployResult, TargetResult, write_verify_report
    from mico.execute.verify import compare_outputs

    reference = compiled.reference(samples)
    entry = TargetResult("host", compare_outputs(reference, reference), per_layer=skipped)
    md, js = write_verify_report(DeployResult(compiled, [entry]), options)
    assert "## host: per layer" in md.read_text() and "Not measured: valgrind" in md.read_text()
    assert json.loads(js.read_text())["targets"][0]["per_layer"] == skipped


def _measured(unit: str, rows: list[float], release: int) -> PerLayer:
    spec = get_target("vexriscv" if unit == "cycles" else "rv32")
    report = LatencyReport(
        spec, "measured", unit,
        tuple(LatencyRow(f"n{i}", "op", "", v) for i, v in enumerate(rows)), "test",
    )  # fmt: skip
    return PerLayer(report, release, len(rows) - 1)


def test_the_check_accepts_only_the_glue_it_names():
    # instructions: the markers only add, a few instructions each
    assert _measured("instructions", [100, 200, 5], 290).ok  # +15 over 2 markers
    assert not _measured("instructions", [100, 200, 5], 310).ok  # fewer than the release build
    assert not _measured("instructions", [100, 200, 5], 305 - 2 * 33).ok  # 33 per marker
    # cycles move with the caches and code layout either way, within 5 % of the release count
    assert _measured("cycles", [1000, 2000, 50], 3100).ok  # -1.6 %
    assert _measured("cycles", [1000, 2000, 50], 2950).ok  # +3.4 %
    assert not _measured("cycles", [1000, 2000, 50], 2800).ok  # +8.9 %
    text = _measured("cycles", [1000, 2000, 50], 2800).check_text()
    assert "glue +250" in text and text.endswith("FAILED")
