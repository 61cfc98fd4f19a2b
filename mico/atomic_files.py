"""Writing mico's files *into* a directory of the user's, beside files mico did not write.

Seed 003's code generation writes ``output/lenet_mnist.*`` into the very folder that holds the
user's checkpoint (``output/ckpt/lenet_mnist.pth``). Replacing that folder wholesale would delete
the checkpoint; refusing it would break the seed's workflow. So :func:`files_into_directory`
stages the files in a hidden folder inside the target, then moves each one into place (Ctrl-C
held during the moves), and records their names in ``.mico-files`` — the only files a later run
may replace. A file of the same name that mico did not write is never replaced: the run is
refused, naming it, before any move.

:func:`write_file_atomically` is the single-file form: one file replaced whole, never seen
half-written, for the files mico writes one by one (reports, weights files).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from mico.atomic import (
    _absolute,
    _check_names,
    _interrupts_deferred,
    _os_error,
    _refuse_protected,
    _show,
    _target_lock,
)
from mico.errors import OutputError

MANIFEST = ".mico-files"


def mico_written(directory: str | Path) -> set[str]:
    """Names of the files mico wrote into ``directory`` (read from its manifest)."""
    path = Path(directory) / MANIFEST
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return set()
    files = data.get("files", []) if isinstance(data, dict) else []
    return {f for f in files if isinstance(f, str) and "/" not in f and f not in ("", ".", "..")}


@contextlib.contextmanager
def files_into_directory(target: str | Path, command: str) -> Iterator[Path]:
    """Yield a staging folder; on success move its files into ``target`` beside the user's.

    Refused (``OutputError``), with nothing moved: ``target`` is a file or a link, a staged
    name would replace a file mico did not write, or the stage holds a folder. Another writer
    of ``target`` is refused at once (the lock of :mod:`mico.atomic`).
    """
    final = _absolute(target)
    _check_names(final)
    _refuse_protected(final)
    if final.is_symlink() or (final.exists() and not final.is_dir()):
        raise OutputError(
            f"output path {_show(final)} is a file or a link, not a directory; give a directory"
        )
    try:
        final.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _os_error(exc, final, "creating") from None
    with _target_lock(final):
        try:
            stage = Path(tempfile.mkdtemp(prefix=f".{final.name[:40]}.stage-", dir=final))
        except OSError as exc:
            raise _os_error(exc, final, "writing into") from None
        try:
            yield stage
            names = sorted(os.listdir(stage))
            folders = [n for n in names if (stage / n).is_dir()]
            if folders:
                raise OutputError(f"{command} staged folder(s) {folders} inside {_show(final)}")
            owned = mico_written(final)
            clashes = [n for n in names if os.path.lexists(final / n) and n not in owned]
            if clashes:
                shown = ", ".join(repr(n) for n in clashes[:3])
                raise OutputError(
                    f"{command} would replace {shown} in {_show(final)}, which mico did not "
                    "write; move them away or choose another directory"
                )
            manifest = {"tool": "mico", "command": command, "files": sorted(owned | set(names))}
            (stage / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
            with _interrupts_deferred():
                for name in names:
                    os.replace(stage / name, final / name)
                os.replace(stage / MANIFEST, final / MANIFEST)
        finally:
            shutil.rmtree(stage, ignore_errors=True)


def write_file_atomically(path: str | Path, data: bytes | str) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename.

    A reader sees the old file or the new one, never half of one; on any failure (a full disk,
    Ctrl-C) the temporary file is removed and ``path`` is left as it was. The new file gets the
    mode an ordinary ``open()`` would give it (0o666 less the umask), not mkstemp's 0o600.
    """
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:200]}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_current_umask())
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _current_umask() -> int:
    """The process umask (read by setting it and putting it back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
