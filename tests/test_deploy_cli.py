"""``mico compile`` and ``mico verify`` as a user runs them."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from mico.cli import app
from mico.targets import rv32, rv64

runner = CliRunner()


def test_compile_writes_a_project_with_its_memory_report(tmp_path):
    out = tmp_path / "proj"
    result = runner.invoke(
        app, ["compile", "small_cnn", "--plan", "4/8", "-o", str(out), "--name", "cnn"]
    )
    assert result.exit_code == 0, result.output
    assert f"to {out}" in result.output and "arena" in result.output
    for file in ("cnn.c", "cnn.h", "cnn.bin", "main.c", "Makefile", "memory.json"):
        assert (out / file).exists(), file
    memory = json.loads((out / "memory.json").read_text())
    assert memory["mode"] == "dynamic"
    assert memory["arena_bytes"] > 0 and memory["arena_lower_bound"] > 0  # in place: may be below
    assert {b["name"] for b in memory["buffers"]} >= {"bit_conv2d"}
    assert (out / "memory_map.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_verify_reports_agreement_on_host_and_riscv(tmp_path):
    targets = ["--target", "host"]
    if rv32.available():
        targets += ["--target", "rv32"]
    if rv64.available():
        targets += ["--target", "rv64"]
    result = runner.invoke(
        app,
        ["verify", "mlp", "--plan", "2/4", "--samples", "3", "-o", str(tmp_path / "v"), *targets],
    )
    assert result.exit_code == 0, result.output
    assert "host: " in result.output and "within rtol 1e-05" in result.output
    if rv32.available():
        assert "rv32: " in result.output and "instructions/inference" in result.output
        rows = {r["target"]: r for r in json.loads((tmp_path / "v" / "verify.json").read_text())
                ["targets"]}  # fmt: skip
        assert int(rows["rv32"]["stack_bytes"]) > 0 and rows["host"]["stack_bytes"] is None
        assert f"stack {rows['rv32']['stack_bytes']} B" in result.output
        assert "| stack (B) |" in (tmp_path / "v" / "verify.md").read_text()


def test_verify_static_mode_is_bit_exact(tmp_path):
    result = runner.invoke(
        app,
        ["verify", "small_cnn", "--mode", "static", "--plan", "4/4", "--samples", "8",
         "-o", str(tmp_path / "s")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "host: 8/8 bit-exact" in result.output
    memory = json.loads((tmp_path / "s" / "memory.json").read_text())
    assert memory["mode"] == "static"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["compile", "small_cnn", "--mode", "fast"], "unknown mode 'fast'"),
        (["compile", "nosuchmodel"], "unknown model 'nosuchmodel'"),
        (["compile", "small_cnn", "--prefer", "fast"], "unknown kernel preference 'fast'"),
        (["compile", "small_cnn", "--plan", "9/8"], "outside the allowed range"),
        (["verify", "small_cnn", "--target", "arm"], "unknown target 'arm'"),
        (["compile"], "give a zoo model name or --checkpoint"),
    ],
)
def test_bad_input_is_one_clear_line(args, message, tmp_path):
    result = runner.invoke(app, [*args, "-o", str(tmp_path / "x")])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output
