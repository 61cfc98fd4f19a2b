"""Output safety corpus (issue 12, part A): mico never loses a user's files.

Every case runs ``mico …`` (or the Python API) in a child process inside a scratch tree of user
files, and asserts exit code 2 (or a mico error type), one ``error:`` line naming the path or
name and the fix, no traceback, and not one file of the tree changed, added or removed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import assert_clean_error, assert_untouched, run_api, run_cli, snapshot

from mico.atomic import MARKER

#: a cheap model for every command that compiles: refusals come before any work anyway
COMPILE = ["compile", "mlp", "--samples", "2"]
TRAIN = ["train", "mlp", "--epochs", "0", "--no-progress"]
DEMO = ["demo", "--epochs", "0", "--qat-epochs", "0", "--target", "host", "-q"]
VERIFY = ["verify", "mlp", "--samples", "2"]


def user_tree(root: Path) -> Path:
    """A user's files around the working directory ``root/work``; returns the latter."""
    work = root / "work"
    work.mkdir()
    (work / "notes.txt").write_text("my notes")
    (root / "mine").mkdir()
    (root / "mine" / "thesis.tex").write_text("\\documentclass{article}")
    (root / "mine" / "data").mkdir()
    (root / "mine" / "data" / "x.csv").write_text("1,2,3")
    (root / "file.txt").write_text("a file, not a directory")
    (root / "link").symlink_to(root / "mine")
    (root / "home").mkdir()
    (root / "home" / ".bashrc").write_text("alias x=y")
    (root / "bad\nname").mkdir()
    (root / "bad\nname" / "keep").write_text("k")
    return work


#: (command, -o value relative to work/, extra args, words the error line must contain)
CASES = [
    ("compile-user-dir", COMPILE, "../mine", [], ["mine", "did not write", "--force"]),
    ("compile-dot", COMPILE, ".", [], ["current directory", "subdirectory"]),
    ("compile-dot-force", COMPILE, ".", ["--force"], ["current directory", "--force does not"]),
    ("compile-parent", COMPILE, "..", ["--force"], ["parent of the current directory"]),
    ("compile-home", COMPILE, "../home", ["--force"], ["home directory", "subdirectory"]),
    ("compile-root", COMPILE, "/", ["--force"], ["root directory"]),
    ("compile-file", COMPILE, "../file.txt", ["--force"], ["file.txt", "is a file"]),
    ("compile-under-file", COMPILE, "../file.txt/out", [], ["file.txt", "not a directory"]),
    ("compile-symlink", COMPILE, "../link", ["--force"], ["link", "symbolic link"]),
    ("compile-long-name", COMPILE, "o" * 250, [], ["at most 239 bytes"]),
    ("compile-long-path", COMPILE, "d/" * 2100 + "o", [], ["bytes long", "shorter"]),
    ("compile-newline", COMPILE, "../bad\nname", [], ["bad\\nname", "--force"]),
    ("compile-name-main", COMPILE, "out", ["--name", "main"], ["'main'", "reserved", "--name"]),
    ("compile-name-make", COMPILE, "out", ["--name", "Makefile"], ["'Makefile'", "reserved"]),
    ("compile-name-kernel", COMPILE, "out", ["--name", "mico_nn"], ["'mico_nn'", "reserved"]),
    ("compile-name-run", COMPILE, "out", ["--name", "run"], ["'run'", "reserved"]),
    ("compile-name-dash", COMPILE, "out", ["--name", "my-net"], ["my-net", "C identifier"]),
    ("compile-name-long", COMPILE, "out", ["--name", "n" * 60], ["at most 48"]),
    ("train-user-dir", TRAIN, "../mine", [], ["mine", "did not write", "--force"]),
    ("train-dot", TRAIN, ".", [], ["current directory"]),
    ("train-file", TRAIN, "../file.txt", [], ["is a file"]),
    ("demo-user-dir", DEMO, "../mine", [], ["mine", "did not write", "--force"]),
    ("demo-dot", DEMO, ".", ["--force"], ["current directory"]),
    ("demo-under-file", DEMO, "../file.txt/demo", [], ["not a directory"]),
    ("verify-user-dir", VERIFY, "../mine", [], ["mine", "did not write"]),
    ("verify-name-main", VERIFY, "out", ["--name", "MAIN"], ["reserved"]),
]


@pytest.mark.parametrize(
    ("command", "out", "extra", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_cli_refuses_and_touches_nothing(tmp_path, command, out, extra, words):
    work = user_tree(tmp_path)
    before = snapshot(tmp_path)
    result = run_cli([*command, "-o", out, *extra], work, env={"HOME": str(tmp_path / "home")})
    assert_clean_error(result, *words)
    assert_untouched(before, tmp_path)


API_CASES = [
    (
        "compile_model-user-dir",
        """
        import torch
        from mico.codegen import compile_model
        from mico.models import from_zoo
        model = from_zoo("mlp")
        compile_model(model, model.example_input(), "../mine")
        """,
        ["OutputError", "mine", "force"],
    ),
    (
        "compile_model-name-main",
        """
        from mico.codegen import compile_model
        from mico.models import from_zoo
        model = from_zoo("mlp")
        compile_model(model, model.example_input(), "out", name="main")
        """,
        ["CompileError", "reserved"],
    ),
    (
        "MiCoCodeGen.convert-dot",
        """
        from mico.codegen import MiCoCodeGen
        from mico.models import from_zoo
        model = from_zoo("mlp")
        codegen = MiCoCodeGen(model)
        codegen.forward(model.example_input())
        codegen.convert(".", "model", force=True)
        """,
        ["OutputError", "current directory"],
    ),
    (
        "run_train-file",
        """
        from pathlib import Path
        from mico.train.run import TrainOptions, run_train
        run_train(TrainOptions(model="mlp", out_dir=Path("../file.txt"), epochs=0))
        """,
        ["OutputError", "is a file"],
    ),
    (
        "run_demo-user-dir",
        """
        from pathlib import Path
        from mico.pipeline import DemoOptions, run_demo
        run_demo(DemoOptions(out_dir=Path("../mine"), epochs=0, qat_epochs=0))
        """,
        ["OutputError", "did not write"],
    ),
    (
        "atomic_directory-parent-file",
        """
        from mico.atomic import atomic_directory
        with atomic_directory("../file.txt/sub/out") as tmp:
            (tmp / "x").write_text("never")
        """,
        ["OutputError", "not a directory"],
    ),
]


@pytest.mark.parametrize(
    ("source", "words"), [c[1:] for c in API_CASES], ids=[c[0] for c in API_CASES]
)
def test_api_refuses_with_a_mico_error_and_touches_nothing(tmp_path, source, words):
    work = user_tree(tmp_path)
    before = snapshot(tmp_path)
    result = run_api(source, work)
    assert_clean_error(result, *words)
    assert_untouched(before, tmp_path)


def test_a_target_held_by_another_run_is_refused_at_once(tmp_path):
    work = user_tree(tmp_path)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom mico.atomic import atomic_directory\n"
            "with atomic_directory('out') as tmp:\n"
            "    print('holding', flush=True)\n    time.sleep(60)\n",
        ],
        cwd=work,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        started = time.monotonic()
        result = run_cli([*COMPILE, "-o", "out"], work)
        assert_clean_error(result, "out", "another mico run", "wait")
        assert time.monotonic() - started < 60  # no waiting for the holder
    finally:
        holder.send_signal(signal.SIGINT)
        holder.wait(timeout=30)
    assert sorted(os.listdir(work)) == ["notes.txt"]  # the interrupted holder left nothing


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories anyway")
def test_a_read_only_parent_is_a_clean_error(tmp_path):
    work = user_tree(tmp_path)
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o555)
    try:
        before = snapshot(tmp_path)
        result = run_cli([*COMPILE, "-o", "../ro/out"], work)
        assert_clean_error(result, "ro", "not writable")
        assert_untouched(before, tmp_path)
    finally:
        (tmp_path / "ro").chmod(0o755)


# --------------------------------------------------------------------------- what does run


@pytest.mark.slow
def test_force_replaces_a_user_directory_and_nothing_else(tmp_path):
    work = user_tree(tmp_path)
    before = snapshot(tmp_path)
    result = run_cli([*COMPILE, "-o", "../mine", "--force"], work)
    assert result.returncode == 0, result.output
    files = set(os.listdir(tmp_path / "mine"))
    assert {MARKER, "model.c", "main.c", "memory_map.png"} <= files and "thesis.tex" not in files
    after = snapshot(tmp_path)
    assert {k: v for k, v in after.items() if not k.startswith(("mine", "link"))} == {
        k: v for k, v in before.items() if not k.startswith(("mine", "link"))
    }


@pytest.mark.slow
def test_a_rerun_replaces_its_own_output_and_cleans_a_killed_runs_leftovers(tmp_path):
    work = user_tree(tmp_path)
    assert run_cli([*COMPILE, "-o", "out"], work).returncode == 0
    (work / ".out.tmp-0badf00d").mkdir()  # what a run killed with SIGKILL leaves behind
    (work / ".out.tmp-0badf00d" / "model.c").write_text("half")
    result = run_cli([*COMPILE, "-o", "out", "--name", "net"], work)
    assert result.returncode == 0, result.output
    assert sorted(os.listdir(work)) == ["notes.txt", "out"]
    files = set(os.listdir(work / "out"))
    assert {"net.c", "memory_map.png", MARKER} <= files and "model.c" not in files


@pytest.mark.slow
def test_ctrl_c_at_any_time_leaves_the_old_or_the_new_complete_project(tmp_path):
    work = user_tree(tmp_path)
    assert run_cli([*COMPILE, "-o", "out", "--name", "old"], work).returncode == 0
    old = sorted(os.listdir(work / "out"))
    code = "import sys; from mico.cli import main; sys.argv[0] = 'mico'; main()"
    outcomes = set()
    for delay in (1.0, 2.5, 3.5, 4.5, 6.0):
        proc = subprocess.Popen(
            [sys.executable, "-c", code, *COMPILE, "-o", "out", "--name", "new"],
            cwd=work,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        files = sorted(os.listdir(work / "out"))
        assert files == old or files == sorted(f.replace("old", "new") for f in old), files
        assert "memory_map.png" in files and "memory.json" in files
        assert sorted(os.listdir(work)) == ["notes.txt", "out"]
        outcomes.add(files == old)
        if files != old:  # the new project stays: interrupt the next run from the old one
            assert run_cli([*COMPILE, "-o", "out", "--name", "old"], work).returncode == 0
        assert proc.returncode in (0, 1, 130, -signal.SIGINT), err
    assert True in outcomes  # at least one run was interrupted before its swap


@pytest.mark.parametrize("step", ["memory.json", "memory_map.png"])
def test_an_interrupt_while_the_reports_are_written_keeps_the_old_project(
    tmp_path, monkeypatch, step
):
    """The reports are finished inside the temporary directory, before the swap: an interrupt
    while they are written leaves the previous project whole (issue 12: no memory_map.png)."""
    import mico.deploy as deploy
    from mico.deploy import DeployOptions, compile_from_options

    options = DeployOptions(model="mlp", samples=2, out_dir=tmp_path / "out", name="old")
    compile_from_options(options, log=lambda _: None)
    old = snapshot(tmp_path)

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    if step == "memory.json":
        monkeypatch.setattr(deploy, "memory_map_rows", interrupted)
    else:
        monkeypatch.setattr(deploy, "plot_memory_map", interrupted)
    options.name = "new"
    with pytest.raises(KeyboardInterrupt):
        compile_from_options(options, log=lambda _: None)
    assert_untouched(old, tmp_path)


# --------------------------------------------------------------------------- the CLI boundary


def _boundary_app(exc: BaseException):  # a command that fails the way a stage might
    import typer

    from mico.cli import _friendly_errors

    app = typer.Typer()

    @app.command()
    @_friendly_errors
    def run() -> None:
        raise exc

    @app.command()
    def other() -> None:  # a second command, so typer keeps the subcommand form
        pass

    return app


@pytest.mark.parametrize(
    "exc",
    [
        PermissionError(13, "Permission denied", "/data/plan.yaml"),
        IsADirectoryError(21, "Is a directory", "plans"),
        NotADirectoryError(20, "Not a directory", "notes.txt/x"),
        FileExistsError(17, "File exists", "out"),
        OSError(36, "File name too long", "p" * 5000),
    ],
    ids=lambda e: type(e).__name__,
)
def test_os_errors_on_user_paths_are_one_line_errors(exc):
    from typer.testing import CliRunner

    result = CliRunner().invoke(_boundary_app(exc), ["run"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot use "), result.output
    assert str(exc.filename)[:20] in lines[0] and exc.strerror in lines[0]
    assert len(lines[0]) < 400 and "check the path" in lines[0]


@pytest.mark.parametrize(
    "exc", [OSError("no file named"), RuntimeError("a bug"), KeyError("k")], ids=repr
)
def test_other_exceptions_keep_their_traceback(exc):
    from typer.testing import CliRunner

    result = CliRunner().invoke(_boundary_app(exc), ["run"])
    assert result.exception is exc  # not turned into a tidy line that hides a bug


def test_a_multi_line_mico_error_is_printed_on_one_line():
    from typer.testing import CliRunner

    from mico.errors import DatasetError

    result = CliRunner().invoke(
        _boundary_app(DatasetError("missing files\n  searched: x")), ["run"]
    )
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == ["error: missing files   searched: x"]
