"""ISA capability as data: a target file's `extensions` reach the code generator, so the same
model compiled for an rv32 core with Zbb takes the binary layers' `cpop` kernels and for plain
rv32imac the portable bit count; a board added as a file is verified like the built-in ones."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from mico.cli import app
from mico.deploy import device_extensions, runner_kind
from mico.errors import BuildError
from mico.targets import rv32

runner = CliRunner()


def test_targets_run_by_their_runner_and_give_their_extensions():
    assert runner_kind("rv32") == "rv32" and runner_kind("rv32zbb") == "rv32"
    assert runner_kind("host") == "host"
    assert device_extensions(["host", "rv32zbb"]) == ("zbb", "zicsr")
    assert device_extensions(["rv32", "rv32zbb"]) == ("zicsr",)  # what every target runs
    assert device_extensions(["host"]) == ()
    with pytest.raises(BuildError, match=r"unknown target 'bitfusion'.*runner is host, qemu-rv32"):
        runner_kind("bitfusion")  # an analytic model: nothing to build and run


@pytest.mark.slow
@pytest.mark.skipif(not rv32.available(), reason=rv32.missing_tools_hint())
def test_zbb_target_compiles_the_cpop_path_and_agrees(tmp_path):
    """cnn at W1A1 (its binary layers have enough MACs for the popcount kernels): Zbb gives
    the cpop kernels, plain rv32 the SWAR ones; both bit-exact on the emulated core."""
    for target, kernel, other in (("rv32zbb", "_bin_cpop", "_bin_swar"),
                                  ("rv32", "_bin_swar", "_bin_cpop")):  # fmt: skip
        out = tmp_path / target
        args = ["verify", "cnn", "--plan", "1/1", "--mode", "static", "--target", target,
                "--samples", "2", "-o", str(out)]  # fmt: skip
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert f"{target}: 2/2 bit-exact" in result.output
        source = (out / "model.c").read_text()
        assert kernel in source and other not in source
