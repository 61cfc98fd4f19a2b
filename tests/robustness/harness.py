"""Run one hostile case through the ``mico`` CLI in a child process, bounded in time and memory.

Every case of the robustness corpus goes through :func:`run_cli` (or :func:`run_api` for the
Python entry points) and is judged by :func:`assert_clean_error`: exit code 2, a one-line
``error: …`` message that names the thing, no traceback, and bounded time and address space.
:func:`snapshot` / :func:`assert_untouched` prove that no file outside mico's own output changed.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import pickle
import struct
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

#: Every case runs under these limits; a case that needs more is a hang or a memory blow-up.
TIME_LIMIT_S = 120
ADDRESS_SPACE_BYTES = 6 * 1024**3  # torch alone maps ~1.5 GB of address space


@dataclass(frozen=True)
class CaseResult:
    """What a child process did: its exit code and its two output streams."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


class _ForkServer:
    """forkserver.py in a child of this process: each case a fork of an interpreter that has
    imported torch already (about 2 s of CPU saved per case), started on first use."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        if self.proc is None or self.proc.poll() is not None:
            server = Path(__file__).with_name("forkserver.py")
            self.proc = subprocess.Popen(
                [sys.executable, str(server)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env={**os.environ, "OMP_NUM_THREADS": "1"},
            )
            assert self._read() == "ready"
        return self.proc

    def _read(self) -> object:
        assert self.proc is not None and self.proc.stdout is not None
        header = self.proc.stdout.read(8)
        if len(header) < 8:
            raise RuntimeError("the robustness fork server stopped")
        return pickle.loads(self.proc.stdout.read(struct.unpack("<Q", header)[0]))

    def run(self, code: str, args: list[str], cwd: Path, timeout: float, env: dict[str, str]):
        proc = self._start()
        assert proc.stdin is not None
        request = {"code": code, "args": args, "cwd": str(cwd), "env": env,
                   "timeout": timeout, "address_space": ADDRESS_SPACE_BYTES}  # fmt: skip
        data = pickle.dumps(request)
        proc.stdin.write(struct.pack("<Q", len(data)) + data)
        proc.stdin.flush()
        reply = self._read()
        assert isinstance(reply, dict)
        if reply["timed_out"]:  # the test fails, naming the hang
            raise subprocess.TimeoutExpired(["python", "-c", code, *args], timeout)
        return CaseResult(reply["returncode"], reply["stdout"], reply["stderr"])

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


_SERVER = _ForkServer()
atexit.register(_SERVER.stop)


def _run(
    code: str, args: list[str], cwd: Path, timeout: float, env: dict[str, str] | None
) -> CaseResult:
    """``python -c code args`` in ``cwd`` with the bounds; a fork of the warm server."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", **(env or {})}
    return _SERVER.run(code, args, cwd, timeout, full_env)


def run_cli(
    args: list[str],
    cwd: Path,
    *,
    timeout: float = TIME_LIMIT_S,
    env: dict[str, str] | None = None,
) -> CaseResult:
    """``mico ARGS`` in ``cwd`` as a child process under the time and address-space limits."""
    code = "import sys; from mico.cli import main; sys.argv[0] = 'mico'; main()"
    return _run(code, args, cwd, timeout, env)


def run_api(
    source: str,
    cwd: Path,
    *,
    timeout: float = TIME_LIMIT_S,
    env: dict[str, str] | None = None,
) -> CaseResult:
    """Run Python ``source`` in a child; a ``MicoError`` is printed as ``error: TYPE: message``
    and exits 2, anything else escapes as a traceback (exit 1)."""
    wrapped = (
        "import sys\nfrom mico.errors import MicoError\ntry:\n"
        + textwrap.indent(textwrap.dedent(source), "    ")
        + "\nexcept MicoError as exc:\n"
        "    print(f'error: {type(exc).__name__}: {exc}', file=sys.stderr)\n"
        "    sys.exit(2)\n"
    )
    return _run(wrapped, [], cwd, timeout, env)


def assert_clean_error(result: CaseResult, *must_mention: str) -> str:
    """The case ended as a mico error should: exit 2, one ``error:`` line, no traceback.

    Returns the error line. Each of ``must_mention`` (case-insensitive) must appear in it.
    """
    assert result.returncode == 2, f"exit {result.returncode}, expected 2:\n{result.output[-3000:]}"
    assert "Traceback" not in result.output, result.output[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, f"expected one 'error:' line on stderr:\n{result.stderr[-3000:]}"
    line = lines[0]
    assert len(line) < 1000, f"error message is {len(line)} characters long"
    for needle in must_mention:
        assert needle.lower() in line.lower(), f"{needle!r} not in {line!r}"
    return line


def snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` with a hash of its content (directories as ``dir``)."""
    files: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            files[rel] = "link:" + os.readlink(path)
        elif path.is_dir():
            files[rel] = "dir"
        else:
            files[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return files


def assert_untouched(before: dict[str, str], root: Path, *, allowed: tuple[str, ...] = ()) -> None:
    """No file under ``root`` changed, appeared or vanished, except under ``allowed`` prefixes."""
    after = snapshot(root)

    def keep(files: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in files.items() if not any(k.startswith(p) for p in allowed)}

    assert keep(after) == keep(before), _diff(keep(before), keep(after))


def _diff(before: dict[str, str], after: dict[str, str]) -> str:
    gone = sorted(set(before) - set(after))
    new = sorted(set(after) - set(before))
    changed = sorted(k for k in set(before) & set(after) if before[k] != after[k])
    return f"removed {gone}, added {new}, changed {changed}"
