"""A session store in one SQLite file: WAL, one transaction per change.

Records are JSON documents keyed by session id, so every URI spelling of a
session finds the same record. Calls run in a worker thread so a slow disk
never stalls the event loop.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio.to_thread


class FileSessionStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute(
                "CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, record TEXT NOT NULL)"
            )
            self._db = db
        return self._db

    def _run(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            db = self._connect()
            db.execute("BEGIN IMMEDIATE")
            try:
                rows = db.execute(sql, args).fetchall()
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return rows

    async def get(self, session_id: str) -> dict[str, Any] | None:
        rows = await anyio.to_thread.run_sync(
            self._run, "SELECT record FROM sessions WHERE id = ?", (session_id,)
        )
        return json.loads(rows[0][0]) if rows else None

    async def put(self, session_id: str, record: Mapping[str, Any]) -> None:
        text = json.dumps(dict(record), separators=(",", ":"))
        await anyio.to_thread.run_sync(
            self._run,
            "INSERT INTO sessions (id, record) VALUES (?, ?) "
            "ON CONFLICT(id) DO UPDATE SET record = excluded.record",
            (session_id, text),
        )

    async def delete(self, session_id: str) -> None:
        await anyio.to_thread.run_sync(
            self._run, "DELETE FROM sessions WHERE id = ?", (session_id,)
        )

    async def ids(self) -> list[str]:
        rows = await anyio.to_thread.run_sync(self._run, "SELECT id FROM sessions ORDER BY id")
        return [row[0] for row in rows]

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
