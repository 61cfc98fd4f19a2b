"""`mico latency` as a user runs it: BitFusion's per-layer cycles, the C program measured per
node on the host (callgrind) and rv32 (qemu, instret), a fitted proxy's predictions, the bar
chart and JSON, and clear errors for unknown targets, unsupported widths and modes."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil

import pytest
import torch
from typer.testing import CliRunner

from mico.cli import app
from mico.hw import fit_proxy, model_cycles, model_layer_shapes
from mico.hw.layers import LayerShape
from mico.hw.measure import backend
from mico.hw.profile import bit_pairs, read_profile, run_profile, sample_shapes
from mico.hw.programs import program_backend, single_layer
from mico.models import from_zoo
from mico.quant import QuantConfig, quantize_model
from mico.targets import rv32
from mico.targets.catalog import ENV_DIRS, get_target

runner = CliRunner()


@pytest.fixture(autouse=True)
def _no_user_targets(monkeypatch):
    monkeypatch.delenv(ENV_DIRS, raising=False)


def _rows(output: str) -> dict[str, int]:
    """``layer -> value`` of the table's rows (and ``total``)."""
    rows = {}
    for line in output.splitlines():
        match = re.match(r"^\s*(?:\d+\s+)?(\S+)\s.*?\s([\d,]+)\s+[\d.]+%$", line)
        if match:
            rows[match.group(1)] = int(match.group(2).replace(",", ""))
    return rows


def _small_cnn_layers(plan: str = "4/8"):
    model = from_zoo("small_cnn")
    names = model.quantize_layer_names()
    plan_text = ",".join(f"{n}={plan}" for n in names)
    quantize_model(model, plan_text, QuantConfig(act_mode="dynamic"))
    return model_layer_shapes(model, model.example_input())


def test_bitfusion_cycles_per_layer_chart_and_json(tmp_path):
    png, report = tmp_path / "bf.png", tmp_path / "bf.json"
    result = runner.invoke(
        app, ["latency", "small_cnn", "--plan", "4/8", "--target", "bitfusion",
              "--png", str(png), "--json", str(report)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    expected = model_cycles(_small_cnn_layers())
    rows = _rows(result.output)
    assert [rows[name] for name in ("conv1", "conv2", "fc")] == [c.cycles for c in expected.layers]
    assert rows["total"] == expected.cycles
    assert "total includes: the conv and linear layers" in result.output
    assert f"= {expected.seconds * 1e6:.2f} us at 500 MHz" in result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads(report.read_text())
    assert data["total"] == expected.cycles and data["unit"] == "cycles"
    assert abs(sum(layer["share"] for layer in data["layers"]) - 100) < 1e-6


def test_a_board_file_sets_the_clock(tmp_path):
    (tmp_path / "bf2.yaml").write_text(
        "name: bf_slow\ndescription: BitFusion at 100 MHz\nisa: none\n"
        "memory: {flash: null, ram: null}\nbits: {weight: [2, 4, 8], activation: [2, 4, 8]}\n"
        "runner: analytic-bitfusion\ncost: analytic\nfrequency_hz: 100000000\n"
    )
    result = runner.invoke(
        app, ["latency", "small_cnn", "--plan", "8/8", "--target", "bf_slow",
              "--targets-dir", str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "at 100 MHz" in result.output


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="apt-get install valgrind")
def test_host_program_measured_per_node():
    result = runner.invoke(
        app, ["latency", "small_cnn", "--plan", "4/8", "--target", "host", "--samples", "2",
              "--repeats", "1", "-q"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = _rows(result.output)
    for layer in ("conv1", "conv2", "fc", "x_quantize", "(output"):
        assert rows[layer] > 0
    assert rows["total"] == sum(v for k, v in rows.items() if k != "total")
    assert "4/8" in next(line for line in result.output.splitlines() if " conv2 " in line)
    first = int(re.search(r"on sample 0 ([\d,]+)", result.output).group(1).replace(",", ""))
    # the instrumented rows add only their markers to what the release build runs
    assert 0 <= rows["total"] - first < 50 * 7
    assert "wall time per inference" in result.output
    assert "no start-up, no I/O" in result.output


@pytest.mark.skipif(not rv32.available(), reason=rv32.missing_tools_hint())
def test_rv32_board_program_measured_per_node(tmp_path):
    boards = tmp_path / "boards"
    boards.mkdir()
    (boards / "tiny.yaml").write_text(
        "name: tiny\ndescription: an rv32 board with 256 bytes of RAM\nisa: rv32imac\n"
        "memory: {flash: 64 KiB, ram: 256}\nbits: {weight: [2, 4, 8], activation: [4, 8]}\n"
        "runner: qemu-rv32\ncost: instructions\n"
    )
    result = runner.invoke(
        app, ["latency", "small_cnn", "--plan", "conv1=8/8,conv2=4/4,fc=2/8", "--target",
              "tiny", "--targets-dir", str(boards), "--samples", "2", "-q",
              "--out", str(tmp_path / "project")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    found = re.search(
        r"flash [\d,]+ B of 65,536 B \([\d.]+%\), RAM ([\d,]+) B of 256 B \([\d.]+%: "
        r"data \+ bss ([\d,]+) B, stack bound ([\d,]+) B\)",
        result.output,
    )
    assert found, result.output
    ram, static, stack = (int(g.replace(",", "")) for g in found.groups())
    assert ram == static + stack and static > 0 and stack > 100  # the kernels' frames count
    assert "DOES NOT FIT the RAM" in result.output
    rows = _rows(result.output)
    assert rows["conv2"] > rows["fc"] > 0
    first = int(re.search(r"on sample 0 ([\d,]+)", result.output).group(1).replace(",", ""))
    assert 0 <= rows["total"] - first < 20 * 7  # instret read outside the markers' bodies
    assert (tmp_path / "project" / "model.elf").is_file()


def _vexriscv_available() -> bool:
    try:
        from mico.targets import vexriscv
    except ImportError:
        return False
    return vexriscv.available()


@pytest.mark.skipif(not _vexriscv_available(), reason="the vexriscv target is not available")
def test_vexriscv_cycles_per_node():
    result = runner.invoke(
        app, ["latency", "small_cnn", "--plan", "4/8", "--target", "vexriscv", "--samples", "1",
              "-q"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "on vexriscv: cycles, measured" in result.output
    rows = _rows(result.output)
    assert rows["conv2"] > rows["fc"] > 0
    first = int(re.search(r"on sample 0 ([\d,]+)", result.output).group(1).replace(",", ""))
    # the markers' calls cost cycles (pipeline refills, cache traffic): a few percent
    assert abs(rows["total"] - first) < 0.05 * first
    assert re.search(r"instructions per inference: [\d,]+ \([\d.]+ per cycle\)", result.output)


def test_proxy_mode_sums_the_proxy(tmp_path):
    measure = backend("bitfusion")
    path = tmp_path / "profile.csv"
    shapes = sample_shapes(["conv2d", "linear"], 30, seed=0, include_zoo=False)
    run_profile(measure.measure, shapes, bit_pairs(measure.bits), path, log=lambda _m: None)
    proxy = fit_proxy(read_profile(path), "bitfusion", "cycles")
    saved = proxy.save(tmp_path / "proxy.json")
    result = runner.invoke(
        app, ["latency", "small_cnn", "--plan", "4/8", "--target", "bitfusion", "--mode",
              "proxy", "--proxy", str(saved)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    predicted = proxy.predict_layers(_small_cnn_layers())
    assert "cycles (predicted), proxy" in result.output
    assert abs(_rows(result.output)["total"] - sum(predicted)) <= 2  # the table rounds
    missing = runner.invoke(
        app, ["latency", "small_cnn", "--target", "bitfusion", "--mode", "proxy", "--proxy",
              str(tmp_path / "none.json")],
    )  # fmt: skip
    assert missing.exit_code == 2 and "mico profile --target bitfusion" in missing.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--target", "tpu"], "unknown target 'tpu'; targets: bitfusion, host, rv32"),
        (["--plan", "3/8"], "layer 'conv1': target 'bitfusion' runs weight bit-widths 2, 4, 8"),
        (["--target", "rv64"], "cannot measure on target 'rv64' (runner qemu-rv64)"),
        (["--mode", "guess"], "unknown --mode 'guess'; use --mode measured or --mode proxy"),
    ],
)
def test_mistakes_are_clear(args, message):
    result = runner.invoke(app, ["latency", "small_cnn", *args])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


def test_single_layer_programs_have_the_shapes_geometry():
    shapes = sample_shapes(["conv2d", "dwconv2d", "conv1d", "linear"], 40, seed=2,
                           include_zoo=False)  # fmt: skip
    for shape in shapes:
        model, sample = single_layer(shape)
        (measured,) = model_layer_shapes(model, torch.zeros((1, *sample)))
        assert measured == dataclasses.replace(shape, name="layer", w_bits=8, a_bits=8), shape


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="apt-get install valgrind")
def test_profile_measures_single_layer_programs(tmp_path):
    backend_ = program_backend(get_target("host"))
    assert backend_.unit == "instructions" and backend_.bits == (2, 4, 8)
    narrow = LayerShape("fc", "linear", 64, 16, (1, 1), (1, 1), 1, (1, 1), (1, 1))
    wide = LayerShape("fc", "linear", 64, 64, (1, 1), (1, 1), 1, (1, 1), (1, 1))
    assert 0 < backend_.measure(narrow) < backend_.measure(wide)
    out = tmp_path / "host.csv"
    args = ["profile", "--target", "host", "--ops", "linear", "--samples", "2", "--no-zoo",
            "--bits", "8", "--no-fit", "-o", str(out), "-q"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = read_profile(out)
    assert len(rows) == 2 and all(latency > 0 for _, latency in rows)
    again = runner.invoke(app, args)
    assert "0 measured, 2 already there" in again.output
    bad = runner.invoke(app, [*args[:-4], "--bits", "3"])
    assert bad.exit_code == 2 and "target 'host' is profiled at 2, 4, 8" in bad.output
