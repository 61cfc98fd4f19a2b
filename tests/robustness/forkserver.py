"""A warm parent for the corpus' child processes: torch imported once, each case a fork of it.

Every hostile case runs in a child process of its own (time and address-space bounds, a crash
cannot take the test run with it), and a fresh interpreter spends about two seconds of CPU
importing torch before the case starts. This server imports torch (and numpy, typer) once, then
forks one child per request, which behaves like ``python -c CODE ARGS``: its own working
directory and environment, the address-space limit, stdout and stderr captured at the file
descriptors (output of C code and of subprocesses included), the exit code of ``sys.exit`` or 1
with a traceback. mico itself is imported by each child, so nothing read from the environment at
import time is fixed by the server. Requests and replies are pickled, length-prefixed, over the
server's stdin and a duplicate of its stdout.

Run by harness.py; not a test module.
"""

from __future__ import annotations

import os
import pickle
import resource
import signal
import struct
import sys
import tempfile
import time
import traceback

import numpy  # noqa: F401  (imported once, for every child)
import torch
import typer  # noqa: F401

torch.set_num_threads(1)


def _read(stream) -> object | None:
    header = stream.read(8)
    if len(header) < 8:
        return None
    (size,) = struct.unpack("<Q", header)
    return pickle.loads(stream.read(size))


def _write(fd: int, message: object) -> None:
    data = pickle.dumps(message)
    view = memoryview(struct.pack("<Q", len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _child(request: dict, out_fd: int, err_fd: int, channels: tuple[int, ...]) -> None:
    """In the forked child: become ``python -c CODE ARGS`` and never return."""
    code = 1
    try:
        for fd in channels:
            os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        limit = request["address_space"]
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.argv = ["-c", *request["args"]]
        try:
            exec(compile(request["code"], "<string>", "exec"), {"__name__": "__main__"})
            code = 0
        except SystemExit as exc:
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code & 0xFF
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _serve_one(request: dict, channels: tuple[int, ...]) -> dict:
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request, out.fileno(), err.fileno(), channels)
        deadline = time.monotonic() + request["timeout"]
        timed_out, status = False, 0
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                _, status = os.waitpid(pid, 0)
                timed_out = True
                break
            time.sleep(0.005)
        out.seek(0)
        err.seek(0)
        return {
            "returncode": os.waitstatus_to_exitcode(status),
            "stdout": out.read().decode(errors="replace"),
            "stderr": err.read().decode(errors="replace"),
            "timed_out": timed_out,
        }


def main() -> None:
    requests = sys.stdin.buffer
    reply_fd = os.dup(1)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # nothing stray reaches the reply channel
    channels = (0, reply_fd)
    _write(reply_fd, "ready")
    while (request := _read(requests)) is not None:
        _write(reply_fd, _serve_one(request, channels))


if __name__ == "__main__":
    main()
