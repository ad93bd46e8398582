"""Definitions, schedules and runs in one SQLite file, written before anyone is told.

Every change is one transaction, committed with ``synchronous=FULL`` under
write-ahead logging before the call returns: what the core then announces is
on disk, so a host killed at any point loses no definition and no run a client
heard of. Calls run in a worker thread, one at a time.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from ahpcore.api import private_sqlite, tighten_sqlite

T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS automations (
    resource TEXT PRIMARY KEY,
    definition TEXT NOT NULL,
    created_at TEXT NOT NULL,
    modified_at TEXT NOT NULL,
    -- scheduled runs admitted against the current afterRuns allowance; NULL without one
    run_count INTEGER,
    meta TEXT
);
CREATE TABLE IF NOT EXISTS schedules (
    automation TEXT NOT NULL,
    trigger_id TEXT NOT NULL,
    -- expression and time zone the next occurrence was worked out from
    signature TEXT NOT NULL,
    next_at TEXT NOT NULL,
    PRIMARY KEY (automation, trigger_id)
);
CREATE TABLE IF NOT EXISTS runs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    resource TEXT NOT NULL UNIQUE,
    automation TEXT NOT NULL,
    request_id TEXT,
    state TEXT NOT NULL,
    active INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS runs_by_request ON runs (automation, request_id)
    WHERE request_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS runs_by_automation ON runs (automation, active, seq);
"""

ACTIVE = ("pending", "running")


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class Database:
    """The automations file: a connection used from one worker thread at a time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = anyio.Lock()
        self._connection: sqlite3.Connection | None = None

    def _open(self) -> sqlite3.Connection:
        if self._connection is None:
            private_sqlite(self.path)
            connection = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            connection.execute("PRAGMA journal_mode=WAL")
            # Acknowledged means on disk: a commit waits for the fsync.
            connection.execute("PRAGMA synchronous=FULL")
            connection.executescript(SCHEMA)
            tighten_sqlite(self.path)
            self._connection = connection
        return self._connection

    async def run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """``work(connection)`` in one transaction, in a worker thread; committed on return."""

        def transaction() -> T:
            connection = self._open()
            connection.execute("BEGIN IMMEDIATE")
            try:
                result = work(connection)
            except BaseException:
                connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")
            return result

        async with self._lock:
            # Shielded: a write half done when the host stops is finished, not abandoned.
            with anyio.CancelScope(shield=True):
                result = await anyio.to_thread.run_sync(transaction)
        return result

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
