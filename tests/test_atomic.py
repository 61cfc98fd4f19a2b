"""Output directories (mico.atomic): the marker, what is refused, --force, the lock, interrupts,
and the temporary directories a killed run leaves behind."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mico.atomic as atomic
from mico.atomic import MARKER, atomic_directory, check_output_dir, is_mico_output
from mico.codegen.makefile import executable
from mico.codegen.project import RESERVED_NAMES, check_model_name
from mico.errors import CompileError, MicoError, OutputError


def write(target: Path, files: dict[str, str], **kwargs: object) -> None:
    with atomic_directory(target, **kwargs) as tmp:  # type: ignore[arg-type]
        for name, text in files.items():
            (tmp / name).write_text(text)


def listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# --------------------------------------------------------------------------- marker, replace


def test_every_output_carries_the_marker_and_replaces_only_its_own(tmp_path):
    target = tmp_path / "out"
    write(target, {"a.txt": "1"}, command="mico test")
    marker = json.loads((target / MARKER).read_text())
    assert marker["tool"] == "mico" and marker["command"] == "mico test"
    assert marker["version"] and marker["time"].endswith("Z")
    assert is_mico_output(target)
    write(target, {"b.txt": "2"})  # its own output: replaced whole
    assert listing(target) == [MARKER, "b.txt"]
    assert listing(tmp_path) == ["out"]  # no temporary, old or lock file left


def test_an_empty_directory_is_used(tmp_path):
    (tmp_path / "empty").mkdir()
    write(tmp_path / "empty", {"a.txt": "1"})
    assert listing(tmp_path / "empty") == [MARKER, "a.txt"]


def test_a_directory_of_user_files_is_refused_unless_forced(tmp_path):
    target = tmp_path / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("precious")
    with pytest.raises(OutputError) as info:
        write(target, {"a.txt": "1"})
    message = str(info.value)
    assert str(target) in message and "notes.txt" in message and "--force" in message
    assert "\n" not in message
    assert listing(target) == ["notes.txt"] and listing(tmp_path) == ["mine"]
    write(target, {"a.txt": "1"}, force=True)
    assert listing(target) == [MARKER, "a.txt"]


def test_a_marker_that_is_not_mico_json_does_not_count(tmp_path):
    target = tmp_path / "fake"
    target.mkdir()
    (target / MARKER).write_text("not json")
    (target / "data.csv").write_text("1,2")
    assert not is_mico_output(target)
    with pytest.raises(OutputError, match="did not write"):
        write(target, {"a.txt": "1"})
    assert (target / "data.csv").read_text() == "1,2"


def test_a_file_at_the_path_is_refused(tmp_path):
    target = tmp_path / "report"
    target.write_text("keep me")
    with pytest.raises(OutputError, match="is a file, not a directory"):
        write(target, {"a.txt": "1"}, force=True)
    assert target.read_text() == "keep me" and listing(tmp_path) == ["report"]


def test_a_parent_that_is_a_file_is_refused_before_anything_is_created(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(OutputError, match=r"'.*/f' is a file, not a directory"):
        write(tmp_path / "f" / "sub" / "out", {"a.txt": "1"})
    assert listing(tmp_path) == ["f"]


def test_a_symbolic_link_is_refused(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(OutputError, match="symbolic link"):
        write(tmp_path / "link", {"a.txt": "1"}, force=True)
    assert (tmp_path / "link").is_symlink() and listing(tmp_path / "real") == []


@pytest.mark.parametrize("where", [".", "..", "../..", "~", "/"])
def test_cwd_its_parents_home_and_root_are_refused_even_with_force(tmp_path, monkeypatch, where):
    cwd = tmp_path / "a" / "b"
    cwd.mkdir(parents=True)
    (cwd / "work.txt").write_text("x")
    monkeypatch.chdir(cwd)
    target = os.path.expanduser(where)
    with pytest.raises(OutputError) as info:
        check_output_dir(target, force=True)
    assert "mico never replaces it" in str(info.value) or "current directory" in str(info.value)
    assert (cwd / "work.txt").read_text() == "x"


def test_the_current_directory_is_allowed_when_it_is_a_mico_output(tmp_path, monkeypatch):
    write(tmp_path / "out", {"a.txt": "1"})
    monkeypatch.chdir(tmp_path / "out")
    assert check_output_dir(".") == tmp_path / "out"


def test_new_parent_folders_are_made_and_removed_again_on_failure(tmp_path):
    with pytest.raises(RuntimeError), atomic_directory(tmp_path / "x" / "y" / "out") as tmp:
        (tmp / "half.txt").write_text("half")
        raise RuntimeError("stage failed")
    assert listing(tmp_path) == []
    write(tmp_path / "x" / "y" / "out", {"a.txt": "1"})
    assert listing(tmp_path / "x" / "y") == ["out"]


@pytest.mark.parametrize(
    ("name", "needle"),
    [("n" * 250, "use names of at most"), ("x\0y", "NUL"), ("d/" * 2100 + "o", "bytes long")],
)
def test_names_and_paths_that_are_too_long_or_invalid(tmp_path, name, needle):
    with pytest.raises(OutputError, match=needle) as info:
        write(tmp_path / name, {"a.txt": "1"})
    assert len(str(info.value)) < 400  # the path is shown cut, the message stays one line
    assert listing(tmp_path) == []


def test_a_control_character_in_the_path_is_escaped_in_the_message(tmp_path):
    target = tmp_path / "bad\nname"
    target.mkdir()
    (target / "f").write_text("x")
    with pytest.raises(OutputError) as info:
        write(target, {})
    assert "\n" not in str(info.value) and "bad\\nname" in str(info.value)


# --------------------------------------------------------------------------- OS errors


@pytest.mark.parametrize(
    ("code", "needle"),
    [
        (errno.EACCES, "permission denied"),
        (errno.EROFS, "read-only"),
        (errno.ENOSPC, "no space left"),
        (errno.ENAMETOOLONG, "too long"),
    ],
)
def test_os_errors_while_creating_become_one_line_output_errors(
    tmp_path, monkeypatch, code, needle
):
    real_mkdir = Path.mkdir

    def failing_mkdir(self: Path, *args: object, **kwargs: object) -> None:
        if self.name.startswith(".out.tmp-"):
            raise OSError(code, os.strerror(code), str(self))
        real_mkdir(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "mkdir", failing_mkdir)
    with pytest.raises(OutputError, match=needle) as info:
        write(tmp_path / "sub" / "out", {"a.txt": "1"})
    assert str(tmp_path / "sub" / "out") in str(info.value) and "\n" not in str(info.value)
    assert listing(tmp_path) == []  # the parent it made and the lock file are gone


def test_a_full_disk_while_writing_the_files_is_an_output_error(tmp_path):
    write(tmp_path / "out", {"old.txt": "old"})
    with (
        pytest.raises(OutputError, match="no space left"),
        atomic_directory(tmp_path / "out") as tmp,
    ):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp / "model.bin"))
    assert (tmp_path / "out" / "old.txt").read_text() == "old" and listing(tmp_path) == ["out"]


def test_other_errors_in_the_block_pass_through_unchanged(tmp_path):
    with pytest.raises(FileNotFoundError), atomic_directory(tmp_path / "out"):
        raise FileNotFoundError(errno.ENOENT, "No such file", "/elsewhere/x")
    assert listing(tmp_path) == []


def test_without_an_atomic_exchange_the_two_rename_swap_is_used(tmp_path, monkeypatch):
    monkeypatch.setattr(atomic, "_exchange", lambda a, b: False)
    write(tmp_path / "out", {"a.txt": "1"})
    write(tmp_path / "out", {"b.txt": "2"})
    assert listing(tmp_path / "out") == [MARKER, "b.txt"] and listing(tmp_path) == ["out"]


def test_a_failed_two_rename_swap_puts_the_old_output_back(tmp_path, monkeypatch):
    write(tmp_path / "out", {"a.txt": "old"})
    monkeypatch.setattr(atomic, "_exchange", lambda a, b: False)
    real_rename = os.rename

    def rename(src: object, dst: object) -> None:
        if ".tmp-" in str(src):
            raise OSError(errno.EXDEV, "Invalid cross-device link", str(src))
        real_rename(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(OutputError, match="different file systems"):
        write(tmp_path / "out", {"a.txt": "new"})
    assert (tmp_path / "out" / "a.txt").read_text() == "old" and listing(tmp_path) == ["out"]


# --------------------------------------------------------------------------- interrupts


def test_an_interrupt_in_the_block_keeps_the_old_output(tmp_path):
    write(tmp_path / "out", {"a.txt": "old"})
    with pytest.raises(KeyboardInterrupt), atomic_directory(tmp_path / "out") as tmp:
        (tmp / "a.txt").write_text("half")
        raise KeyboardInterrupt
    assert (tmp_path / "out" / "a.txt").read_text() == "old" and listing(tmp_path) == ["out"]


@pytest.mark.parametrize("exchange", [True, False])
def test_ctrl_c_during_the_swap_is_held_until_the_new_output_is_in_place(
    tmp_path, monkeypatch, exchange
):
    write(tmp_path / "out", {"a.txt": "old"})
    real_swap = atomic._swap_in
    if not exchange:
        monkeypatch.setattr(atomic, "_exchange", lambda a, b: False)

    def interrupted_swap(tmp: Path, final: Path) -> None:
        signal.raise_signal(signal.SIGINT)  # Ctrl-C arrives just as the swap starts
        real_swap(tmp, final)

    monkeypatch.setattr(atomic, "_swap_in", interrupted_swap)
    with pytest.raises(KeyboardInterrupt):
        write(tmp_path / "out", {"a.txt": "new", "b.txt": "new"})
    assert listing(tmp_path / "out") == [MARKER, "a.txt", "b.txt"]  # complete, not half
    assert listing(tmp_path) == ["out"]


_WRITER = """
import sys, time
from pathlib import Path
from mico.atomic import atomic_directory
target, generation = Path(sys.argv[1]), sys.argv[2]
with atomic_directory(target) as tmp:
    for i in range(150):
        (tmp / f"f{i:03d}.txt").write_text(generation)
    time.sleep(0.01)
    (tmp / "complete").write_text(generation)
print("done", flush=True)
"""


def _check_complete(target: Path) -> str:
    """``target`` is one whole output: every file from the same generation."""
    names = set(listing(target))
    assert names == {MARKER, "complete", *(f"f{i:03d}.txt" for i in range(150))}, names
    generations = {(target / n).read_text() for n in names if n != MARKER}
    assert len(generations) == 1, generations
    return generations.pop()


@pytest.mark.slow
def test_sigint_at_varied_times_leaves_the_old_or_the_new_output(tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    target = tmp_path / "work" / "out"
    import time

    started = time.monotonic()
    subprocess.run([sys.executable, str(script), str(target), "g0"], check=True)
    whole = time.monotonic() - started  # this machine's time for one uninterrupted run
    # From just after the start (interrupted for sure) to twice a whole run (finished for sure),
    # so both outcomes occur however fast or slow the machine is.
    delays = [0.0] + [whole * (0.2 + 1.1 * k / 20) for k in range(21)] + [2 * whole + 1]
    seen = set()
    for trial, delay in enumerate(delays):
        proc = subprocess.Popen([sys.executable, str(script), str(target), f"g{trial + 1}"])
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        seen.add(proc.returncode == 0)
        _check_complete(target)
        assert listing(target.parent) == ["out"], listing(target.parent)
    assert seen == {True, False}  # some runs were interrupted, some finished


# --------------------------------------------------------------------------- leftovers


def test_temporary_directories_of_a_killed_run_are_cleaned_by_the_next(tmp_path):
    write(tmp_path / "out", {"a.txt": "1"})
    for stray in (".out.tmp-0123abcd", ".out.old-89abcdef"):
        (tmp_path / stray).mkdir()
        (tmp_path / stray / "half.c").write_text("x")
    (tmp_path / ".out.tmp-users").mkdir()  # not mico's naming: kept
    (tmp_path / ".other.tmp-0123abcd").mkdir()  # another target's: kept
    (tmp_path / ".out.tmp-deadbeef").write_text("a file, not a directory: kept")
    (tmp_path / ".out.lock").write_text("")  # a lock file of a killed run: not held
    write(tmp_path / "out", {"b.txt": "2"})
    assert listing(tmp_path) == [
        ".other.tmp-0123abcd",
        ".out.tmp-deadbeef",
        ".out.tmp-users",
        "out",
    ]


def test_an_output_left_only_under_its_old_name_is_put_back(tmp_path, monkeypatch):
    write(tmp_path / "out", {"a.txt": "old"})
    (tmp_path / "out").rename(tmp_path / ".out.old-0123abcd")  # killed between two renames
    with pytest.raises(RuntimeError), atomic_directory(tmp_path / "out"):
        raise RuntimeError("this run fails too")
    assert (tmp_path / "out" / "a.txt").read_text() == "old" and listing(tmp_path) == ["out"]


# --------------------------------------------------------------------------- one writer


def test_a_second_writer_fails_at_once_while_the_first_holds_the_target(tmp_path):
    inside, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def first() -> None:
        try:
            with atomic_directory(tmp_path / "out") as tmp:
                (tmp / "first.txt").write_text("1")
                inside.set()
                release.wait(10)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=first)
    thread.start()
    assert inside.wait(10)
    with pytest.raises(OutputError, match="being written by another mico run"):
        write(tmp_path / "out", {"second.txt": "2"})
    with pytest.raises(OutputError, match="another mico run"):
        check_output_dir(tmp_path / "out")  # the check before any work sees it too
    release.set()
    thread.join(10)
    assert not errors
    assert listing(tmp_path / "out") == [MARKER, "first.txt"] and listing(tmp_path) == ["out"]


_RACER = """
import random, sys, time
from pathlib import Path
from mico.atomic import atomic_directory
from mico.errors import OutputError
target, who, trials = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
start = float(sys.argv[4])
time.sleep(max(0.0, start - time.time()))
ok = busy = 0
for trial in range(trials):
    try:
        with atomic_directory(target) as tmp:
            for i in range(150):
                (tmp / f"f{i:03d}.txt").write_text(who)
            time.sleep(0.005)
            (tmp / "complete").write_text(who)
        ok += 1
    except OutputError as exc:
        assert "another mico run" in str(exc), exc
        busy += 1
    time.sleep(random.uniform(0, 0.02))  # a varied gap: either may find the target free
print(ok, busy)
"""


@pytest.mark.slow
def test_two_processes_racing_for_one_target(tmp_path):
    import time

    script = tmp_path / "racer.py"
    script.write_text(_RACER)
    target = tmp_path / "work" / "out"
    start = str(time.time() + 1.5)  # both begin together, after their imports
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(target), who, "40", start],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for who in ("A", "B")
    ]
    counts = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        counts.append(tuple(map(int, out.split())))
    ok, busy = sum(c[0] for c in counts), sum(c[1] for c in counts)
    assert ok + busy == 80 and busy > 0, counts  # they did collide
    assert all(c[0] > 0 for c in counts), counts  # and each won some
    _check_complete(target)
    assert listing(target.parent) == ["out"]  # no temporary, old or lock file


# --------------------------------------------------------------------------- model names

#: the files every project holds whatever its name, and the run files the targets write
FIXED_FILES = {"main.c", "makefile", "mico.json", "memory.json", "memory_map.png", MARKER}
FIXED_FILES |= {"inputs.bin", "outputs.bin", "intermediates.bin", "run", "clean", "force"}


@pytest.mark.parametrize(
    "name",
    ["main", "Main", "Makefile", "mico", "mico_nn", "MICO_conv2d", "run", "inputs", "_model",
     "bad-name", "1st", "", "a b", "x" * 49],
)  # fmt: skip
def test_reserved_and_invalid_model_names_are_refused(name):
    with pytest.raises(CompileError) as info:
        check_model_name(name)
    assert "\n" not in str(info.value) and "model name" in str(info.value)


@settings(max_examples=300, deadline=None)
@given(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,55}", fullmatch=True) | st.text(max_size=12))
def test_an_accepted_name_never_collides_with_a_project_file(name):
    try:
        check_model_name(name)
    except CompileError:
        return
    ours = {f"{name}.h", f"{name}.c", f"{name}_weights.h", f"{name}.bin"}
    ours |= {executable(name, t) for t in ("host", "rv32", "rv64")}
    ours = {f.lower() for f in ours}
    assert not ours & FIXED_FILES, name
    assert not any(f.startswith("mico_") for f in ours), name
    assert name.isidentifier() and name.isascii() and len(name) <= 48
    assert name.lower() not in RESERVED_NAMES


def test_output_error_is_a_mico_error_and_an_os_error():
    assert issubclass(OutputError, MicoError) and issubclass(OutputError, OSError)


def test_a_relative_path_after_the_working_directory_was_removed(tmp_path, monkeypatch):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    with pytest.raises(OutputError, match="working directory no longer exists"):
        check_output_dir("out")
    assert check_output_dir(tmp_path / "out") == tmp_path / "out"  # absolute paths still work
