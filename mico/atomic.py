"""Output directories: a run's files appear all at once or not at all, and mico never replaces a
directory it did not write.

A run writes into a temporary directory beside the target (``.NAME.tmp-XXXXXXXX``) and swaps it in
only once every file is finished (an atomic exchange on Linux; two renames elsewhere). Each output
carries a marker file, ``.mico-output`` (JSON: tool, version, command, time). Refused, with an
:class:`~mico.errors.OutputError`:

* an existing directory with files but no marker, unless ``force``;
* a path that is a file or a symbolic link, or whose parent is a file;
* ``/``, the home directory, and the working directory or any of its parents (unless it is a mico
  output), even with ``force``;
* a target another writer holds: a lock file beside it (``.NAME.lock``, ``flock``) admits one
  writer at a time and a second one fails at once.

An interrupt (Ctrl-C) during the swap is held until the swap is done, so the target is the old
complete directory or the new complete one. Temporary directories a killed run left behind are
removed by the next run on the same target.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import re
import secrets
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mico.errors import OutputError

MARKER = ".mico-output"
NAME_MAX = 255
PATH_MAX = 4096
_SUFFIX = 16  # the longest name mico adds beside the target: ".NAME.tmp-XXXXXXXX"
_FIX_FORCE = "choose a new or empty directory, or pass --force (force=True) to replace it"


def _show(path: Path | str) -> str:
    """``path`` quoted for a one-line message: control characters escaped, long paths cut."""
    text = str(path)
    if len(text) > 160:
        text = f"{text[:70]}...{text[-70:]}"
    return repr(text) if not text.isprintable() else f"'{text}'"


def _absolute(target: str | Path) -> Path:
    """``target`` as an absolute path with ``..`` and the parent's symbolic links resolved."""
    try:
        path = Path(os.path.abspath(os.fspath(target)))
    except (TypeError, ValueError) as exc:
        raise OutputError(
            f"output path {target!r:.100} is not a valid path ({exc}); give a directory path"
        ) from None
    except OSError:  # os.getcwd() fails once the working directory is removed
        raise OutputError(
            f"output path {_show(os.fspath(target))} is relative but the working directory no "
            "longer exists; cd to an existing directory or give an absolute --out path"
        ) from None
    if "\0" in str(path):
        raise OutputError(
            f"output path {_show(path)} contains a NUL character; give a directory path without it"
        )
    if path.parent == path:  # "/"
        return path
    with contextlib.suppress(OSError, RuntimeError):
        return path.parent.resolve() / path.name
    return path


def is_mico_output(path: str | Path) -> bool:
    """True when ``path`` is a directory mico wrote (it holds mico's marker file)."""
    marker = Path(path) / MARKER
    try:
        if not marker.is_file() or marker.is_symlink():
            return False
        with marker.open("rb") as f:
            data = json.loads(f.read(65536))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("tool") == "mico"


def _refuse_protected(final: Path) -> None:
    """``/`` and home are never replaced; the working directory and its parents only when they
    are mico outputs (replacing them would delete the directory the user is standing in)."""
    try:
        home: Path | None = _absolute(Path.home())
    except (RuntimeError, KeyError):  # no home directory known
        home = None
    if final.parent == final or final == home:
        kind = "root" if final.parent == final else "home"
        raise OutputError(
            f"output directory {_show(final)} is the {kind} directory; mico never replaces it, "
            "give a subdirectory such as --out out/run"
        )
    try:
        cwd = _absolute(Path.cwd())
    except OSError:  # the working directory was removed: nothing to protect there
        return
    if (final == cwd or final in cwd.parents) and not is_mico_output(final):
        where = "the current directory" if final == cwd else "a parent of the current directory"
        raise OutputError(
            f"output directory {_show(final)} is {where}; mico replaces its output directory "
            "whole, so give a subdirectory such as --out out/run (--force does not apply here)"
        )


def _check_names(final: Path) -> None:
    """Every name in ``final``, and the whole path, leave room for mico's temporary names."""
    for part in final.parts[1:]:
        if len(os.fsencode(part)) > NAME_MAX - _SUFFIX:
            raise OutputError(
                f"output path {_show(final)} has a name of {len(os.fsencode(part))} bytes; "
                f"use names of at most {NAME_MAX - _SUFFIX} bytes"
            )
    if len(os.fsencode(str(final))) > PATH_MAX - 2 * _SUFFIX:
        raise OutputError(
            f"output path {_show(final)} is {len(os.fsencode(str(final)))} bytes long; "
            f"use a path shorter than {PATH_MAX - 2 * _SUFFIX} bytes"
        )


def _check_parent(final: Path) -> None:
    """The nearest existing ancestor of ``final`` is a writable directory."""
    ancestor = final.parent
    while not os.path.lexists(ancestor) and ancestor.parent != ancestor:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise OutputError(
            f"cannot create output directory {_show(final)}: {_show(ancestor)} is a file, not a "
            "directory; choose an --out path whose parent folders are directories"
        )
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise OutputError(
            f"cannot create output directory {_show(final)}: {_show(ancestor)} is not writable; "
            "choose a directory you can write to"
        )


def check_output_dir(target: str | Path, *, force: bool = False) -> Path:
    """Check that mico may write its output directory ``target``; return its absolute path.

    Writes nothing: callers run it before any work, so a run that would be refused at the end
    is refused at the start. Raises :class:`OutputError` naming the path and the fix.
    """
    final = _absolute(target)
    _check_target(final, force)
    if _lock_path(final).exists():
        with _target_lock(final):  # fails at once while another writer holds it
            pass
    return final


def _check_target(final: Path, force: bool) -> None:
    _check_names(final)
    _refuse_protected(final)
    if final.is_symlink():
        raise OutputError(
            f"output path {_show(final)} is a symbolic link; give the directory itself "
            "(mico does not replace links)"
        )
    if final.exists() and not final.is_dir():
        raise OutputError(
            f"output path {_show(final)} is a file, not a directory; give a directory path "
            "(mico never replaces a file with its output)"
        )
    if final.is_dir() and not is_mico_output(final):
        try:
            entries = sorted(os.listdir(final))
        except OSError as exc:
            raise _os_error(exc, final, "reading") from None
        if entries and not force:
            shown = ", ".join(repr(e)[:40] for e in entries[:3])
            raise OutputError(
                f"output directory {_show(final)} holds {len(entries)} file(s) mico did not "
                f"write ({shown}{', ...' if len(entries) > 3 else ''}); {_FIX_FORCE}"
            )
    if final.is_dir() and not os.access(final, os.W_OK | os.X_OK):
        raise OutputError(
            f"output directory {_show(final)} is not writable; choose a directory you can write to"
        )
    _check_parent(final)


# --------------------------------------------------------------------------- OS errors


_REASONS = {
    errno.EACCES: "permission denied; choose a directory you can write to",
    errno.EPERM: "operation not permitted; choose a directory you can write to",
    errno.EROFS: "the file system is read-only; choose --out on a writable disk",
    errno.ENOTDIR: "a parent folder is a file, not a directory; choose another --out path",
    errno.EEXIST: "a file is in the way; choose another --out path",
    errno.ENAMETOOLONG: "the path or a name in it is too long; choose a shorter --out path",
    errno.ENOSPC: "no space left on the device; free space or choose another --out disk",
    errno.EDQUOT: "disk quota exceeded; free space or choose another --out disk",
    errno.EXDEV: "the output and its temporary copy are on different file systems; choose "
    "another --out path",
    errno.EBUSY: "the directory is in use (a mount point?); choose another --out path",
}

#: errors a file write into the temporary directory may hit that are about the disk, not mico
_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG}


def _os_error(exc: OSError, final: Path, doing: str) -> OutputError:
    """An ``OSError`` met while writing ``final`` as a one-line :class:`OutputError`."""
    reason = _REASONS.get(exc.errno or 0, f"{exc.strerror or exc}; choose another --out path")
    where = f" {_show(exc.filename)}" if exc.filename and str(exc.filename) != str(final) else ""
    return OutputError(f"cannot write output directory {_show(final)} ({doing}{where}): {reason}")


# --------------------------------------------------------------------------- the lock


def _lock_path(final: Path) -> Path:
    return final.parent / f".{final.name}.lock"


@contextlib.contextmanager
def _target_lock(final: Path) -> Iterator[None]:
    """Hold the lock of ``final`` or raise :class:`OutputError` at once (no waiting).

    The lock file is removed on release; a writer that opened it just before the removal sees
    that the file it locked is no longer the one on disk and tries again.
    """
    path = _lock_path(final)
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise _os_error(exc, final, "creating the lock") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutputError(
                f"output directory {_show(final)} is being written by another mico run (lock "
                f"{_show(path.name)}); wait for it to finish or choose another --out"
            ) from None
        except OSError as exc:
            os.close(fd)
            raise _os_error(exc, final, "locking") from None
        mine = os.fstat(fd)
        try:
            now = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            now = None
        if now is not None and (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino):
            break
        os.close(fd)  # the previous holder removed it after we opened it: start over
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)


# --------------------------------------------------------------------------- signals


@contextlib.contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """Hold SIGINT (Ctrl-C) until the block is done, then deliver it.

    Only the main thread receives KeyboardInterrupt, and only it may change handlers; in other
    threads this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = signal.getsignal(signal.SIGINT)
    if previous is None:  # a handler installed outside Python: leave it alone
        yield
        return
    signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received:
            if callable(previous):
                previous(signal.SIGINT, None)
            elif previous == signal.SIG_DFL:
                signal.raise_signal(signal.SIGINT)


# --------------------------------------------------------------------------- the swap


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap the directories ``a`` and ``b`` (Linux ``renameat2``); False where the
    system or file system cannot."""
    libc_rename = getattr(_LIBC, "renameat2", None) if _LIBC is not None else None
    if libc_rename is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    result = libc_rename(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(b))


try:
    _LIBC: Any = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - no C library to load
    _LIBC = None


def _stray_pattern(final: Path) -> re.Pattern[str]:
    return re.compile(rf"\.{re.escape(final.name)}\.(tmp|old)-[0-9a-f]{{8}}")


def _clean_strays(final: Path) -> None:
    """Remove the temporary directories a killed run on ``final`` left behind (called with the
    lock held, so none belongs to a live writer). A killed two-rename swap can leave the old
    output only under its ``.old-`` name: it is put back first."""
    pattern = _stray_pattern(final)
    try:
        names = [n for n in os.listdir(final.parent) if pattern.fullmatch(n)]
    except OSError:
        return
    for name in sorted(names):
        path = final.parent / name
        if path.is_symlink() or not path.is_dir():
            continue
        if ".old-" in name and not os.path.lexists(final) and is_mico_output(path):
            with contextlib.suppress(OSError):  # if it cannot go back, it stays as it is
                path.rename(final)
            continue
        shutil.rmtree(path, ignore_errors=True)


def _write_marker(directory: Path, command: str) -> None:
    from mico import __version__

    data = {
        "tool": "mico",
        "version": __version__,
        "command": command,
        "argv": [a[:200] for a in sys.argv[:40]],
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (directory / MARKER).write_text(json.dumps(data, indent=2) + "\n")


def _make_parents(parent: Path) -> list[Path]:
    """Create ``parent`` and its missing ancestors; return the ones created (innermost first)."""
    missing = []
    path = parent
    while not os.path.lexists(path) and path.parent != path:
        missing.append(path)
        path = path.parent
    for path in reversed(missing):
        path.mkdir(exist_ok=True)
    return missing


def _remove_empty(created: list[Path]) -> None:
    for path in created:
        with contextlib.suppress(OSError):
            path.rmdir()


def _swap_in(tmp: Path, final: Path) -> None:
    """Make ``tmp`` the directory at ``final``; remove what was there."""
    if not os.path.lexists(final):
        os.rename(tmp, final)
        return
    if _exchange(tmp, final):
        shutil.rmtree(tmp, ignore_errors=True)  # tmp now holds the old output
        return
    old = final.parent / f".{final.name}.old-{secrets.token_hex(4)}"
    os.rename(final, old)
    try:
        os.rename(tmp, final)
    except OSError:
        os.rename(old, final)  # put the old output back before reporting
        raise
    shutil.rmtree(old, ignore_errors=True)


def _in_tmp(exc: BaseException, tmp: Path) -> bool:
    """An ``OSError`` about the disk, met writing a file inside ``tmp``."""
    return (
        isinstance(exc, OSError)
        and exc.errno in _WRITE_ERRNOS
        and str(exc.filename or "").startswith(str(tmp))
    )


@contextlib.contextmanager
def atomic_directory(
    target: str | Path, *, force: bool = False, command: str = "mico"
) -> Iterator[Path]:
    """Yield a fresh temporary directory beside ``target``; on success it replaces ``target``.

    ``target`` must pass :func:`check_output_dir` (``force`` lets a non-empty directory mico
    did not write be replaced). If the block raises, the temporary directory is removed and
    ``target`` is left exactly as it was. ``command`` is recorded in the marker file.
    """
    final = check_output_dir(target, force=force)
    # what to undo (the temporary directory, the lock, new parents), closed in the outer
    # ``finally``: an interrupt deferred during the set-up is delivered inside the ``try``, so
    # it still cleans up
    cleanup = contextlib.ExitStack()
    created: list[Path] = []
    try:
        with _interrupts_deferred():
            try:
                created = _make_parents(final.parent)
            except OSError as exc:
                raise _os_error(exc, final, "creating the parent folder") from None
            cleanup.callback(_remove_empty, created)
            cleanup.enter_context(_target_lock(final))
            _clean_strays(final)
            _check_target(final, force)  # again, now that the lock is held
            tmp = final.parent / f".{final.name}.tmp-{secrets.token_hex(4)}"
            try:
                tmp.mkdir()
                cleanup.callback(shutil.rmtree, tmp, ignore_errors=True)
                _write_marker(tmp, command)
            except OSError as exc:
                raise _os_error(exc, final, "creating the temporary directory") from None
        try:
            yield tmp
        except OSError as exc:
            if _in_tmp(exc, tmp):
                raise _os_error(exc, final, "writing") from None
            raise
        with _interrupts_deferred():
            try:
                _swap_in(tmp, final)
            except OSError as exc:
                raise _os_error(exc, final, "moving the finished output into place") from None
            created.clear()  # the parents now hold the output: keep them
    finally:
        with _interrupts_deferred():
            cleanup.close()  # the temporary directory (if still there), the lock, new parents
