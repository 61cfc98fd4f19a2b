"""Check a path the user gave as an input file, before opening it.

``Path.is_file`` raises on a 300-character name and says nothing useful about a directory; this
classifies the path once and turns each problem into a one-line mico error naming the path.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from mico.errors import MicoError

SHOWN_PATH_CHARS = 120


def shown(path: str | os.PathLike[str]) -> str:
    """The path quoted for a message, shortened when very long."""
    text = os.fspath(path)
    if len(text) > SHOWN_PATH_CHARS:
        text = text[: SHOWN_PATH_CHARS - 3] + "..."
    return repr(text)


def path_kind(path: str | os.PathLike[str]) -> str:
    """``'file'``, ``'dir'``, ``'missing'``, ``'too-long'``, ``'other'`` (a device, a FIFO…)
    or ``'unreadable'`` — never raises for a strange string."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            return "too-long"
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            return "missing"
        return "unreadable"
    except ValueError:  # an embedded NUL byte
        return "missing"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    return "other"


def check_input_file(
    path: str | os.PathLike[str], what: str, error: type[MicoError], fix: str = ""
) -> Path:
    """``path`` as a Path if it names a regular file, else ``error`` saying what it is instead.

    ``what`` names the file's role ("plan file", "checkpoint"); ``fix`` is appended.
    """
    kind = path_kind(path)
    name = shown(path)
    hint = f"; {fix}" if fix else ""
    if kind == "file":
        return Path(path)
    if kind == "dir":
        raise error(f"{what} {name} is a directory, not a file{hint or '; give a file inside it'}")
    if kind == "too-long":
        raise error(f"{what} {name} is not a usable path: the name is too long{hint}")
    if kind == "other":
        raise error(f"{what} {name} is not a regular file (a device or a pipe?){hint}")
    if kind == "unreadable":
        raise error(f"{what} {name} cannot be examined (permission denied?){hint}")
    raise error(f"{what} {name} does not exist{hint}")
