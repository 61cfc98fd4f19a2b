"""The corpus runner itself: it reports exit codes, catches tracebacks and bounds memory."""

import pytest
from harness import assert_clean_error, run_api, run_cli, snapshot


def test_unknown_model_is_a_clean_cli_error(tmp_path):
    result = run_cli(["compile", "no_such_model", "-o", str(tmp_path / "o")], tmp_path)
    assert_clean_error(result, "no_such_model")
    assert not (tmp_path / "o").exists()


def test_a_traceback_is_not_a_clean_error(tmp_path):
    result = run_api("raise KeyError('x')", tmp_path)
    assert result.returncode == 1
    with pytest.raises(AssertionError):
        assert_clean_error(result)


def test_memory_is_bounded(tmp_path):
    result = run_api("b = bytearray(16 * 1024**3)", tmp_path)
    assert result.returncode != 0 and "MemoryError" in result.stderr


def test_snapshot_sees_content_changes(tmp_path):
    (tmp_path / "a.txt").write_text("1")
    before = snapshot(tmp_path)
    (tmp_path / "a.txt").write_text("2")
    assert snapshot(tmp_path) != before


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["compile", "mlp", "--samples", "0"], "--samples"),
        (["demo", "--epochs", "-1"], "--epochs"),
        (["compile", "--frobnicate"], "--frobnicate"),
        (["train"], "'model'"),
        (["nosuchcommand"], "nosuchcommand"),
    ],
)
def test_usage_errors_are_one_line_at_the_command(tmp_path, args, flag):
    """Typer's usage errors (a flag out of range, an unknown option) read like mico's own."""
    result = run_cli([*args], cwd=tmp_path)
    assert_clean_error(result, flag)
    assert "(see `mico" in result.stderr
