"""Where on-disk data sets live, and the "not found" errors that tell the user what to put there.

Readers never download: the user places the files under a data root, given as ``root=`` or by
the ``MICO_DATA`` environment variable, else ``./data``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from mico.errors import DatasetError
from mico.userfiles import path_kind

DATA_ENV = "MICO_DATA"
DEFAULT_ROOT = "data"


def data_root(root: str | os.PathLike[str] | None = None) -> Path:
    """The data root: ``root`` if given, else ``$MICO_DATA``, else ``./data``."""
    if root is not None:
        return Path(root).expanduser()
    env = os.environ.get(DATA_ENV)
    return Path(env).expanduser() if env else Path(DEFAULT_ROOT)


def layout_text(lines: Sequence[str]) -> str:
    """An indented listing of the expected files, for error messages and docs."""
    return "\n".join(f"    {line}" for line in lines)


def not_found(
    dataset: str,
    missing: Path | str,
    searched: Sequence[Path],
    layout: Sequence[str],
) -> DatasetError:
    """A DatasetError naming what is missing, where mico looked and the layout it expects."""
    places = "\n".join(f"    {p}" for p in searched)
    message = (
        f"{dataset} data not found: missing {missing}\n"
        f"  searched:\n{places}\n"
        f"  expected layout:\n{layout_text(layout)}\n"
        f"  mico never downloads data: place the files there, pass root=..., "
        f"or set {DATA_ENV}."
    )
    return DatasetError(message)


def corrupt(path: Path | str, problem: str) -> DatasetError:
    """A DatasetError naming a file that exists but cannot be read, and why."""
    return DatasetError(f"corrupt or unreadable data file {path}: {problem}")


def find_dir(
    dataset: str,
    candidates: Sequence[Path],
    required: Sequence[str],
    layout: Sequence[str],
) -> Path:
    """The first candidate folder holding every ``required`` entry (alternatives as ``a|b``).

    When none does, the error names the entries missing from the most complete candidate.
    """
    found, folder, missing = most_complete(candidates, required)
    if not missing:
        return folder
    if found == 0:
        what = f"the {dataset} files ({', '.join(n.split('|')[0] for n in required)})"
    else:
        what = ", ".join(str(folder / name.split("|")[0]) for name in missing)
    raise not_found(dataset, what, candidates, layout)


def most_complete(
    candidates: Sequence[Path], required: Sequence[str]
) -> tuple[int, Path, list[str]]:
    """The first candidate holding every ``required`` entry, else the one holding the most:
    ``(entries found, folder, entries missing)``."""
    best: tuple[int, Path, list[str]] | None = None
    for folder in candidates:
        missing = [name for name in required if not _has_any(folder, name)]
        found = len(required) - len(missing)
        if not missing:
            return found, folder, missing
        if best is None or found > best[0]:
            best = (found, folder, missing)
    assert best is not None, "most_complete needs at least one candidate"
    return best


def pick(folder: Path, name: str) -> Path:
    """The existing path among the ``|``-separated alternatives of ``name`` inside ``folder``."""
    for option in name.split("|"):
        if _exists(folder / option):
            return folder / option
    return folder / name.split("|")[0]


def _has_any(folder: Path, name: str) -> bool:
    return any(_exists(folder / option) for option in name.split("|"))


def _exists(path: Path) -> bool:
    """Whether ``path`` names something; False (not an OSError) for an overlong name."""
    return path_kind(path) not in ("missing", "too-long", "unreadable")
