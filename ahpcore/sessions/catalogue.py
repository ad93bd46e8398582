"""The catalogue: every session a client can list, kept as an index in SQLite.

``listSessions`` answers from the index with one indexed query per page, so a
page costs the same at ten sessions as at ten thousand. The index holds two
halves per session: what its backend lists (title, times, folders), refreshed
from ``Backend.catalogue`` off the event loop, and what this host adds (its
URI, a renamed title, read and archived bits), written whenever the session's
record is saved. Cursors are keyset positions signed with a key of this
host's run, so a cursor this host did not issue is refused rather than misread.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from ahpcore.protocol import uris
from ahpcore.protocol.errors import INVALID_PARAMS, ProtocolError
from ahpcore.sessions import calls
from ahpcore.sessions import state as states
from ahpcore.sessions.contract import Backend, CataloguePage, CatalogueRow

log = logging.getLogger(__name__)

#: Rows asked of a backend per catalogue call while refreshing.
REFRESH_PAGE = 500
#: A listing older than this is refreshed behind the answer.
REFRESH_SECONDS = 2.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS catalogue (
    id TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    modified_at TEXT NOT NULL,
    listed INTEGER NOT NULL DEFAULT 0,
    backend_row TEXT,
    host_row TEXT
);
CREATE INDEX IF NOT EXISTS catalogue_newest ON catalogue (modified_at DESC, id DESC);
CREATE TABLE IF NOT EXISTS catalogue_chats (
    chat TEXT PRIMARY KEY,
    session TEXT NOT NULL
);
"""


class Cursors:
    def __init__(self) -> None:
        self._key = secrets.token_bytes(16)

    def _sign(self, text: str) -> str:
        return hmac.new(self._key, text.encode(), hashlib.sha256).hexdigest()[:16]

    def issue(self, modified_at: str, session_id: str) -> str:
        text = json.dumps([modified_at, session_id], separators=(",", ":"))
        return f"{text}.{self._sign(text)}"

    def read(self, cursor: str) -> tuple[str, str]:
        text, _, signature = cursor.rpartition(".")
        if not text or not hmac.compare_digest(signature, self._sign(text)):
            raise ProtocolError(INVALID_PARAMS, f"cursor {cursor!r} was not issued by this host")
        modified_at, session_id = json.loads(text)
        return str(modified_at), str(session_id)


def row_json(row: CatalogueRow) -> dict[str, Any]:
    return {
        "title": row.title,
        "createdAt": row.created_at,
        "modifiedAt": row.modified_at,
        "workingDirectories": list(row.working_directories),
    }


def summary_of(
    provider: str, session_id: str, listed: Mapping[str, Any], host: Mapping[str, Any]
) -> dict[str, Any]:
    """A ``SessionSummary`` from what the backend lists and what this host keeps."""
    uri = host.get("uri") or uris.session_uri(provider, session_id)
    status = states.flags(
        states.STATUS_IDLE,
        is_read=host.get("isRead", True),
        is_archived=host.get("isArchived", False),
    )
    created = listed.get("createdAt") or host.get("createdAt") or ""
    summary: dict[str, Any] = {
        "resource": uri,
        "provider": provider,
        "title": host.get("title") or listed.get("title") or "",
        "status": status,
        "createdAt": created,
        "modifiedAt": max(str(listed.get("modifiedAt", "")), str(host.get("modifiedAt", ""))),
    }
    directories = listed.get("workingDirectories") or host.get("workingDirectories")
    if directories:
        summary["workingDirectories"] = list(directories)
    return summary


class CatalogueIndex:
    """The SQLite index ``listSessions`` pages through (beside the session store's table)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self.cursors = Cursors()
        self._refreshed: dict[str, float] = {}
        self._refreshing: dict[str, anyio.Event] = {}

    # -- SQLite, in a worker thread --------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            target = ":memory:"
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                target = str(self.path)
            db = sqlite3.connect(target, check_same_thread=False, isolation_level=None, timeout=30)
            if self.path is not None:
                db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)
            self._db = db
        return self._db

    def _run(self, work: Any) -> Any:
        with self._lock:
            db = self._connect()
            db.execute("BEGIN IMMEDIATE")
            try:
                result = work(db)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return result

    async def _do(self, work: Any) -> Any:
        return await anyio.to_thread.run_sync(self._run, work)

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    # -- what this host keeps ------------------------------------------------------
    async def saved(self, session_id: str, provider: str, record: Mapping[str, Any]) -> None:
        """A session's record was saved: its host half and its chats follow."""
        host = {
            key: record.get(key)
            for key in ("uri", "title", "isRead", "isArchived", "createdAt", "modifiedAt")
            if record.get(key) is not None
        }
        host["workingDirectories"] = list(record.get("workingDirectories") or [])
        chats = [c["uri"] for c in record.get("chats", []) if isinstance(c.get("uri"), str)]
        modified = str(record.get("modifiedAt", ""))

        def work(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT INTO catalogue (id, provider, modified_at, host_row) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(id) DO UPDATE SET host_row = excluded.host_row, "
                "modified_at = max(catalogue.modified_at, excluded.modified_at)",
                (session_id, provider, modified, json.dumps(host)),
            )
            db.execute("DELETE FROM catalogue_chats WHERE session = ?", (session_id,))
            db.executemany(
                "INSERT OR REPLACE INTO catalogue_chats (chat, session) VALUES (?, ?)",
                [(chat, session_id) for chat in chats],
            )

        await self._do(work)

    async def forget(self, session_id: str) -> None:
        def work(db: sqlite3.Connection) -> None:
            db.execute("DELETE FROM catalogue WHERE id = ?", (session_id,))
            db.execute("DELETE FROM catalogue_chats WHERE session = ?", (session_id,))

        await self._do(work)

    # -- what backends list ----------------------------------------------------------
    async def _put_listed(self, provider: str, rows: Iterable[CatalogueRow], stamp: int) -> None:
        batch = [
            (row.session_id, provider, row.modified_at, stamp, json.dumps(row_json(row)))
            for row in rows
        ]

        def work(db: sqlite3.Connection) -> None:
            db.executemany(
                "INSERT INTO catalogue (id, provider, modified_at, listed, backend_row) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
                "backend_row = excluded.backend_row, listed = excluded.listed, "
                "modified_at = max(catalogue.modified_at, excluded.modified_at)",
                batch,
            )

        await self._do(work)

    async def refresh(self, backend: Backend) -> None:
        """Read the backend's whole catalogue into the index (one refresh at a time)."""
        provider = backend.provider
        running = self._refreshing.get(provider)
        if running is not None:
            await running.wait()
            return
        done = self._refreshing[provider] = anyio.Event()
        stamp = time.monotonic_ns()
        try:
            cursor: str | None = None
            for _ in range(100_000):  # bounded: a backend repeating a cursor stops here
                answer = await calls.call(backend.catalogue, limit=REFRESH_PAGE, cursor=cursor)
                if isinstance(answer, CataloguePage):
                    await self._put_listed(provider, answer.rows, stamp)
                    cursor = answer.next_cursor
                else:
                    await self._put_listed(provider, answer, stamp)
                    cursor = None
                if cursor is None:
                    break

            def drop_unlisted(db: sqlite3.Connection) -> None:
                # Gone from the backend and never kept by this host: gone from the list.
                db.execute(
                    "DELETE FROM catalogue WHERE provider = ? AND listed != ? AND host_row IS NULL",
                    (provider, stamp),
                )
                db.execute(
                    "UPDATE catalogue SET backend_row = NULL WHERE provider = ? AND listed != ?",
                    (provider, stamp),
                )

            await self._do(drop_unlisted)
            self._refreshed[provider] = time.monotonic()
        except Exception:
            log.exception("the %s backend could not list its sessions", provider)
        finally:
            del self._refreshing[provider]
            done.set()

    def stale(self, provider: str) -> bool:
        seen = self._refreshed.get(provider)
        return seen is None or time.monotonic() - seen > REFRESH_SECONDS

    def known(self, provider: str) -> bool:
        return provider in self._refreshed

    # -- answering -------------------------------------------------------------------
    async def page(
        self, providers: Iterable[str], limit: int | None, cursor: str | None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of summaries, newest first, and the cursor of the next."""
        offered = list(providers)
        after = self.cursors.read(cursor) if cursor is not None else None
        marks = ",".join("?" for _ in offered) or "NULL"
        sql = (
            "SELECT id, provider, modified_at, backend_row, host_row FROM catalogue "
            f"WHERE provider IN ({marks}) AND (backend_row IS NOT NULL OR host_row IS NOT NULL)"
        )
        args: list[Any] = list(offered)
        if after is not None:
            sql += " AND (modified_at < ? OR (modified_at = ? AND id < ?))"
            args += [after[0], after[0], after[1]]
        sql += " ORDER BY modified_at DESC, id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit + 1)

        def work(db: sqlite3.Connection) -> tuple[list[Any], list[dict[str, Any]]]:
            # The summaries are built in the worker too: at 10,000 rows, decoding
            # and merging them would hold the event loop, and every client with it.
            found = db.execute(sql, args).fetchall()
            kept = found[:limit] if limit is not None else found
            items = [
                summary_of(
                    provider,
                    session_id,
                    json.loads(listed) if listed else {},
                    json.loads(host) if host else {},
                )
                for session_id, provider, _, listed, host in kept
            ]
            return found, items

        rows, items = await self._do(work)
        more = limit is not None and len(rows) > limit
        rows = rows[:limit] if limit is not None else rows
        next_cursor = self.cursors.issue(rows[-1][2], rows[-1][0]) if more and rows else None
        return items, next_cursor

    async def get(self, session_id: str) -> tuple[str, dict[str, Any], dict[str, Any]] | None:
        """(provider, what its backend listed, what this host keeps) for one session."""
        rows = await self._do(
            lambda db: db.execute(
                "SELECT provider, backend_row, host_row FROM catalogue WHERE id = ?", (session_id,)
            ).fetchall()
        )
        if not rows or rows[0][1] is None:
            return None
        provider, listed, host = rows[0]
        return provider, json.loads(listed), json.loads(host) if host else {}

    async def put_one(self, provider: str, row: CatalogueRow) -> None:
        """A row a backend's ``lookup`` answered, kept so the next reopen finds it at once."""
        await self._put_listed(provider, [row], 0)

    async def session_holding(self, chat_uri: str) -> str | None:
        rows = await self._do(
            lambda db: db.execute(
                "SELECT session FROM catalogue_chats WHERE chat = ?", (chat_uri,)
            ).fetchall()
        )
        return rows[0][0] if rows else None


def page_limit(limit: Any) -> int | None:
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int | float) or limit < 1:
        raise ProtocolError(INVALID_PARAMS, "params.limit must be a positive integer")
    return int(limit)


async def decorate_rows(host: Any, rows: list[dict[str, Any]]) -> None:
    """Let every ``ahp_session_rows`` implementation add to a page's rows.

    One plugin's fault costs only its own additions: the page is answered.
    """
    offered = {"host": host, "rows": rows}
    for impl in host.plugins.hook.ahp_session_rows.get_hookimpls():
        try:
            done = impl.function(**{name: offered[name] for name in impl.argnames})
            if hasattr(done, "__await__"):
                await done
        except Exception:
            log.exception("the %s plugin could not add to the session list", impl.plugin_name)
