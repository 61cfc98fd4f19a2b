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


def test_each_case_is_its_own_process_with_its_cwd_env_and_output(tmp_path):
    """The fork server's children behave like ``python -c``: their own directory and
    environment, output of subprocesses captured, nothing left over from an earlier case."""
    source = (
        "import os, subprocess, sys\n"
        "print('cwd', os.getcwd(), 'env', os.environ.get('MICO_PROBE'), 'argv', sys.argv)\n"
        "subprocess.run(['sh', '-c', 'echo from-a-subprocess >&2'], check=True)\n"
        "assert 'leftover' not in globals() and not hasattr(sys, 'leftover')\n"
        "sys.leftover = 1\n"
        "sys.exit(3)\n"
    )
    for _ in range(2):
        result = run_api(source, tmp_path, env={"MICO_PROBE": "yes"})
        assert result.returncode == 3, result.output
        assert f"cwd {tmp_path} env yes argv ['-c']" in result.stdout
        assert "from-a-subprocess" in result.stderr


def test_a_hang_is_stopped_at_the_time_limit(tmp_path):
    import subprocess

    with pytest.raises(subprocess.TimeoutExpired):
        run_api("while True:\n    pass", tmp_path, timeout=1)
    assert run_api("print('next')", tmp_path).stdout == "next\n"  # the server carries on
