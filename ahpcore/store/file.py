"""A session store in one SQLite file: WAL, one writer per session, durable when acknowledged.

Records are JSON documents keyed by session id, so every URI spelling of a
session finds the same record. Calls run in a worker thread so a slow disk
never stalls the event loop.

Writes of one session coalesce: while one transaction for it is in flight,
newer records replace each other in a single dirty slot, and the next
transaction writes only the newest. Every ``put`` returns once a transaction
holding its record (or a newer one) has committed, so acknowledged means on
disk. A failed write is retried a few times; if it still fails, the record
stays dirty (the next write of that session, or ``flush``, tries again) and
the caller gets a ``StoreError`` that says why.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from ahpcore.store.private import private_sqlite, tighten_sqlite

log = logging.getLogger(__name__)

#: How long one transaction waits for another process's write lock.
DEFAULT_BUSY_TIMEOUT = 5.0
#: Pauses before each retry of a failed write (so len + 1 attempts in all).
DEFAULT_RETRY_DELAYS: tuple[float, ...] = (0.05, 0.25, 1.0)


class StoreError(Exception):
    """The session store could not read or write; the message says what and why."""


@dataclass(eq=False)
class _Slot:
    """One session's writer: the newest record not yet on disk, and who waits for it."""

    #: The newest record (JSON text), or None for "delete it"; only meaningful when dirty.
    text: str | None = None
    #: Generations: every put takes the next one; ``done`` is the newest committed.
    wanted: int = 0
    done: int = 0
    #: The newest generation whose write failed, and why.
    failed: int = 0
    error: StoreError | None = None
    writing: bool = False
    changed: anyio.Event = field(default_factory=anyio.Event)

    @property
    def dirty(self) -> bool:
        return self.wanted > self.done

    def wake(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()


class FileSessionStore:
    def __init__(
        self,
        path: Path,
        *,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        retry_delays: Sequence[float] = DEFAULT_RETRY_DELAYS,
        factory: type[sqlite3.Connection] = sqlite3.Connection,
    ) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self.retry_delays = tuple(retry_delays)
        self._factory = factory
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._slots: dict[str, _Slot] = {}
        #: Write attempts that failed since the store opened (retries included).
        self.failed_attempts = 0

    # -- the file ------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            # SQLite gives the -wal and -shm files the mode of the database file.
            private_sqlite(self.path, tighten_folder=False)
            db = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout,
                check_same_thread=False,
                isolation_level=None,
                factory=self._factory,
            )
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                db.execute(
                    "CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, record TEXT NOT NULL)"
                )
            except BaseException:
                db.close()
                raise
            self._db = db
            tighten_sqlite(self.path)
        return self._db

    def _transaction(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            db = self._connect()
            db.execute("BEGIN IMMEDIATE")
            try:
                rows = db.execute(sql, args).fetchall()
                db.execute("COMMIT")
            except BaseException:
                # A failed COMMIT leaves the transaction open; without this the
                # next BEGIN fails too, and every later write with it.
                if db.in_transaction:
                    try:
                        db.execute("ROLLBACK")
                    except sqlite3.Error:
                        log.exception("could not roll back a failed write to %s", self.path)
                raise
            return rows

    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        try:
            return self._transaction(sql, args)
        except sqlite3.Error as exc:
            raise StoreError(f"the session store could not read {self.path}: {exc}") from exc

    def _write(self, session_id: str, text: str | None) -> None:
        if text is None:
            self._transaction("DELETE FROM sessions WHERE id = ?", (session_id,))
        else:
            self._transaction(
                "INSERT INTO sessions (id, record) VALUES (?, ?) "
                "ON CONFLICT(id) DO UPDATE SET record = excluded.record",
                (session_id, text),
            )

    # -- writing, one writer per session -------------------------------------------
    async def _commit(self, session_id: str, text: str | None) -> None:
        slot = self._slots.setdefault(session_id, _Slot())
        slot.wanted += 1
        mine = slot.wanted
        slot.text = text
        while True:
            if slot.done >= mine:
                return
            if slot.failed >= mine and slot.error is not None:
                raise slot.error
            if not slot.writing:
                # Shielded: a caller that gives up must not strand the others waiting.
                with anyio.CancelScope(shield=True):
                    await self._drain(session_id, slot)
                continue
            await slot.changed.wait()

    async def _drain(self, session_id: str, slot: _Slot) -> None:
        """Write the slot's newest record until nothing newer waits or a write fails."""
        slot.writing = True
        try:
            while slot.dirty:
                generation, text = slot.wanted, slot.text
                try:
                    await self._write_with_retries(session_id, text)
                except StoreError as error:
                    slot.failed, slot.error = generation, error
                    return
                slot.done = generation
                if slot.failed <= generation:
                    slot.error = None
                slot.wake()
        finally:
            slot.writing = False
            slot.wake()
            if not slot.dirty and slot.error is None:
                self._slots.pop(session_id, None)

    async def _write_with_retries(self, session_id: str, text: str | None) -> None:
        delays = iter(self.retry_delays)
        while True:
            try:
                await anyio.to_thread.run_sync(self._write, session_id, text)
                return
            except sqlite3.Error as exc:
                self.failed_attempts += 1
                delay = next(delays, None)
                if delay is None:
                    log.error("could not save session %s to %s: %s", session_id, self.path, exc)
                    raise StoreError(
                        f"the session store could not write {self.path}: {exc}"
                    ) from exc
                log.warning(
                    "saving session %s to %s failed (%s); retrying in %.2fs",
                    session_id,
                    self.path,
                    exc,
                    delay,
                )
                await anyio.sleep(delay)

    # -- the SessionStore port -----------------------------------------------------
    async def get(self, session_id: str) -> dict[str, Any] | None:
        slot = self._slots.get(session_id)
        if slot is not None and slot.dirty:
            # Not on disk yet, but the newest word on the session.
            return json.loads(slot.text) if slot.text is not None else None
        rows = await anyio.to_thread.run_sync(
            self._read, "SELECT record FROM sessions WHERE id = ?", (session_id,)
        )
        return json.loads(rows[0][0]) if rows else None

    async def put(self, session_id: str, record: Mapping[str, Any]) -> None:
        """Returns once the record (or a newer one of the session) is committed."""
        await self._commit(session_id, json.dumps(dict(record), separators=(",", ":")))

    async def delete(self, session_id: str) -> None:
        await self._commit(session_id, None)

    async def ids(self) -> list[str]:
        rows = await anyio.to_thread.run_sync(self._read, "SELECT id FROM sessions ORDER BY id")
        found = {row[0] for row in rows}
        for session_id, slot in self._slots.items():
            if slot.dirty:
                if slot.text is None:
                    found.discard(session_id)
                else:
                    found.add(session_id)
        return sorted(found)

    @property
    def dirty(self) -> list[str]:
        """Sessions whose newest record is not on disk yet (in flight or failed)."""
        return [session_id for session_id, slot in self._slots.items() if slot.dirty]

    async def flush(self) -> None:
        """Try again every record a failed write left dirty; raises StoreError if one fails."""
        errors: list[StoreError] = []
        for session_id in self.dirty:
            slot = self._slots[session_id]
            if slot.writing:
                continue
            try:
                await self._commit(session_id, slot.text)
            except StoreError as error:
                errors.append(error)
        if errors:
            raise errors[0]

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
