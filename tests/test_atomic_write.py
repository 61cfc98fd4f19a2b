"""write_file_atomically: whole files or nothing, ordinary permissions, no temporary left."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mico.atomic_files import write_file_atomically


def test_writes_text_and_bytes_and_replaces_whole(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    write_file_atomically(target, "first\n")
    assert target.read_text() == "first\n"
    write_file_atomically(target, b"\x00\x01second")
    assert target.read_bytes() == b"\x00\x01second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_mode_follows_the_umask_not_mkstemp(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        path = write_file_atomically(tmp_path / "w.bin", b"x")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o640


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "best_plan.yaml"
    target.write_text("saved before\n")
    with pytest.raises(TypeError):
        write_file_atomically(target, 12345)  # type: ignore[arg-type]
    assert target.read_text() == "saved before\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best_plan.yaml"]


def test_a_missing_folder_is_an_os_error_naming_nothing_written(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_file_atomically(tmp_path / "absent" / "x.txt", "x")
    assert not (tmp_path / "absent").exists()
