"""The evaluation cache of ``mico tune``: objective values in a SQLite file, reused across runs.

A value is stored under its whole key: model name, checkpoint (weights) hash, data, mode,
target, objective (with its epochs and learning rate) and scheme (canonical plan text, so a
ternary layer, ``1.58``, never meets a 2-bit one). Several processes may read and write one
file at once: each write is one transaction, the database runs in WAL mode and waits for a
busy writer instead of failing.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mico.errors import ConfigError

KEY_FIELDS = ("model", "checkpoint", "data", "mode", "target", "objective", "scheme")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS evaluations (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL, checkpoint TEXT NOT NULL, data TEXT NOT NULL, mode TEXT NOT NULL,
    target TEXT NOT NULL, objective TEXT NOT NULL, scheme TEXT NOT NULL,
    value REAL NOT NULL, created REAL NOT NULL
)
"""


def default_cache_path() -> Path:
    """``$MICO_CACHE/evaluations.sqlite`` (``$MICO_CACHE`` is mico's cache folder, as for the
    profiles and simulators), else ``$XDG_CACHE_HOME/mico/evaluations.sqlite`` (``~/.cache``)."""
    if os.environ.get("MICO_CACHE"):
        return Path(os.environ["MICO_CACHE"]) / "evaluations.sqlite"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mico" / "evaluations.sqlite"


class EvalCache:
    """Objective values by key, in the SQLite file ``path`` (created with its folder)."""

    def __init__(self, path: str | Path, timeout: float = 60.0) -> None:
        self.path = Path(path)
        self.timeout = timeout
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self.hits = 0
        self.misses = 0
        self._connect()

    def _connect(self) -> sqlite3.Connection:
        """One connection per process (a forked child opens its own)."""
        if self._conn is None or self._pid != os.getpid():
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute(_SCHEMA)
            except (OSError, sqlite3.Error) as exc:
                raise ConfigError(
                    f"cannot use the evaluation cache {self.path}: {exc}; give another file "
                    "with --cache or turn it off with --no-cache"
                ) from None
            self._conn, self._pid = conn, os.getpid()
        return self._conn

    @staticmethod
    def key_text(key: Mapping[str, str]) -> str:
        missing = [f for f in KEY_FIELDS if f not in key]
        if missing:
            raise ConfigError(f"an evaluation cache key needs {', '.join(missing)}")
        return json.dumps({f: str(key[f]) for f in KEY_FIELDS}, sort_keys=True)

    def get(self, key: Mapping[str, str]) -> float | None:
        row = self._retry(
            lambda c: c.execute(
                "SELECT value FROM evaluations WHERE key = ?", (self.key_text(key),)
            ).fetchone()
        )
        if row is None:
            self.misses += 1
            return None
        self.hits += 1
        return float(row[0])

    def put(self, key: Mapping[str, str], value: float) -> None:
        text = self.key_text(key)
        fields = tuple(str(key[f]) for f in KEY_FIELDS)
        self._retry(
            lambda c: c.execute(
                "INSERT OR REPLACE INTO evaluations VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (text, *fields, float(value), time.time()),
            )
        )

    def __len__(self) -> int:
        row = self._retry(lambda c: c.execute("SELECT COUNT(*) FROM evaluations").fetchone())
        return int(row[0])

    def _retry(self, op: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run ``op`` on the connection; a lock held past the timeout is retried, then named."""
        for attempt in range(5):
            try:
                return op(self._connect())
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise ConfigError(f"evaluation cache {self.path}: {exc}") from None
                time.sleep(0.05 * (attempt + 1))
        raise ConfigError(
            f"evaluation cache {self.path} stayed locked for {5 * self.timeout:g} s; is a "
            "process hung on it? use another --cache file"
        )

    def close(self) -> None:
        if self._conn is not None and self._pid == os.getpid():
            self._conn.close()
        self._conn = None

    def __getstate__(self) -> dict:
        return {"path": self.path, "timeout": self.timeout}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"], state["timeout"])
