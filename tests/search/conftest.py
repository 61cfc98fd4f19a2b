"""Search fixtures: a private evaluation cache per test, and a throwaway PostgreSQL server.

The server is a fresh cluster (``initdb``) in a temporary folder, listening only on a Unix
socket there, started with ``pg_ctl`` and stopped (and deleted) after the session. PostgreSQL
refuses to run as root, so under root it runs as the ``postgres`` user (``runuser``).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

MISSING = "PostgreSQL server binaries not found: apt-get install postgresql"


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``mico tune``'s default evaluation cache goes to the test's folder, never ~/.cache."""
    monkeypatch.setenv("MICO_CACHE", str(tmp_path / "mico-cache"))


def _bindir() -> Path | None:
    candidates = []
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True)
        if out.returncode == 0:
            candidates.append(out.stdout.strip())
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for folder in candidates:
        if (Path(folder) / "initdb").is_file() and (Path(folder) / "pg_ctl").is_file():
            return Path(folder)
    return None


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A SQLAlchemy URL (psycopg 3) of a database on a throwaway PostgreSQL server."""
    pytest.importorskip("psycopg", reason="psycopg is missing: pip install 'psycopg[binary]'")
    bindir = _bindir()
    if bindir is None:
        pytest.skip(MISSING)
    prefix: list[str] = []
    user = None
    if os.geteuid() == 0:  # the server refuses root: run it as postgres
        import pwd

        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no 'postgres' user to run the server")
        runuser = shutil.which("runuser")
        if runuser is None:
            pytest.skip("running as root without runuser to start PostgreSQL as 'postgres'")
        prefix = [runuser, "-u", "postgres", "--"]
    root = Path(tempfile.mkdtemp(prefix="mico-pg-"))  # /tmp: reachable by the postgres user
    data, sockets = root / "data", root / "sock"
    sockets.mkdir()
    if user is not None:
        for path in (root, sockets):
            os.chown(path, user.pw_uid, user.pw_gid)
    log = root / "server.log"

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*prefix, *args], capture_output=True, text=True, timeout=120)

    try:
        init = run(str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                   "--no-sync", "-E", "UTF8")  # fmt: skip
        assert init.returncode == 0, init.stderr
        start = run(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-o",
                    f"-c listen_addresses='' -k {sockets} -c fsync=off", "start")  # fmt: skip
        if start.returncode != 0:
            detail = log.read_text() if log.exists() else start.stderr
            pytest.fail(f"PostgreSQL did not start: {start.stderr}\n{detail}")
        yield f"postgresql+psycopg://postgres@/postgres?host={sockets}"
    finally:
        run(str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(root, ignore_errors=True)
