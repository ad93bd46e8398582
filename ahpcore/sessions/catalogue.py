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

import asyncio
import contextlib
import gc
import hashlib
import hmac
import json
import logging
import secrets
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import orjson

from ahpcore.awaitables import resolve
from ahpcore.ports.backend import Backend, CataloguePage, CatalogueRow
from ahpcore.protocol import uris
from ahpcore.protocol.errors import INVALID_PARAMS, ProtocolError
from ahpcore.reducers._helpers import STATUS_ERROR
from ahpcore.sessions import calls
from ahpcore.sessions import state as states
from ahpcore.store.private import private_sqlite, tighten_sqlite

log = logging.getLogger(__name__)

#: Rows asked of a backend per catalogue call while refreshing.
REFRESH_PAGE = 500
#: A listing older than this is refreshed behind the answer...
REFRESH_SECONDS = 2.0
#: ...but refreshing takes at most this share of the time: a backend whose catalogue
#: takes 0.3 s to read is refreshed at most every 3 s, whoever keeps listing.
REFRESH_SHARE = 0.1
#: A refresh behind an answer starts this long after it, so that the answer is encoded
#: and written before the refresh competes with it for the interpreter.
REFRESH_AFTER = 0.5

_SCHEMA = """
CREATE TABLE IF NOT EXISTS catalogue (
    id TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    modified_at TEXT NOT NULL,
    listed INTEGER NOT NULL DEFAULT 0,
    backend_row TEXT,
    host_row TEXT,
    summary TEXT
);
CREATE INDEX IF NOT EXISTS catalogue_newest ON catalogue (modified_at DESC, id DESC);
CREATE TABLE IF NOT EXISTS catalogue_chats (
    chat TEXT PRIMARY KEY,
    session TEXT NOT NULL
);
-- Every save replaces its session's chats: without this, each save scanned every chat.
CREATE INDEX IF NOT EXISTS catalogue_chats_session ON catalogue_chats (session);
-- Sessions no backend lists (failed ones among them): read once per start, among
-- 100,000 listed ones a scan of every row.
CREATE INDEX IF NOT EXISTS catalogue_unlisted ON catalogue (id) WHERE backend_row IS NULL;
CREATE TABLE IF NOT EXISTS catalogue_listed (
    provider TEXT PRIMARY KEY
);
CREATE TABLE IF NOT EXISTS catalogue_unsettled (
    id TEXT PRIMARY KEY
);
CREATE TABLE IF NOT EXISTS catalogue_format (
    version INTEGER NOT NULL
);
"""
#: How the index writes its kept summaries (see ``summary_text``). An index an older
#: host wrote has them cleared, to be made again in this format as they are listed.
SUMMARY_FORMAT = 2
#: Summaries kept decoded between listings, at most (a cache: cleared when past it).
SUMMARY_CACHE = 50_000
#: A backend's row, new or changed.
_UPSERT_LISTED = (
    "INSERT INTO catalogue (id, provider, modified_at, backend_row) VALUES (?, ?, ?, ?) "
    "ON CONFLICT(id) DO UPDATE SET backend_row = excluded.backend_row, summary = NULL, "
    "modified_at = max(catalogue.modified_at, excluded.modified_at)"
)

#: Builds running now that keep what they make out of the collector (see ``_long_lived``).
_building = 0
#: The collector is back on after this long, whatever the build is doing.
LONG_LIVED_SECONDS = 30.0
#: Whether the collector was on when the first of them began.
_collecting = True


@contextlib.contextmanager
def _long_lived() -> Iterator[None]:
    """No collection while a large listing that lives on is built; what it built is frozen.

    A backend's first catalogue of a run, and the index's rows from it, are
    hundreds of thousands of objects at 100,000 sessions that live as long as the
    host. Built with the collector on, each pass on the way walked all that was
    built so far (full ones of 80-500 ms here), holding the interpreter and every
    client with it; left in its generations, every later full pass walked it
    again. Like the start-up heap (``ahp serve`` freezes it), it is moved out of
    the collector's passes once built. Whatever cyclic garbage the rest of the
    host made meanwhile is frozen with it: once per backend and run.
    """
    global _building, _collecting
    if _building == 0:
        _collecting = gc.isenabled()
    _building += 1
    gc.disable()
    # A backend that hangs must not keep the collector off for good.
    resume = asyncio.get_running_loop().call_later(LONG_LIVED_SECONDS, _collect_again)
    try:
        yield
    finally:
        resume.cancel()
        _building -= 1
        if _building == 0:
            gc.freeze()
            _collect_again()


def _collect_again() -> None:
    if _collecting:
        gc.enable()


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


def _row_texts(rows: Iterable[CatalogueRow]) -> dict[str, str]:
    return {row.session_id: json.dumps(row_json(row)) for row in rows}


def summary_of(
    provider: str, session_id: str, listed: Mapping[str, Any], host: Mapping[str, Any]
) -> dict[str, Any]:
    """A ``SessionSummary`` from what the backend lists and what this host keeps."""
    uri = host.get("uri") or uris.session_uri(provider, session_id)
    status = states.flags(
        STATUS_ERROR if host.get("lifecycle") == "failed" else states.STATUS_IDLE,
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
    summary["annotations"] = annotations_of(uri, host)
    if isinstance(host.get("origin"), Mapping):
        # An automation's run made it: the list says so, open or not.
        summary["origin"] = dict(host["origin"])
    if kept := states.kept_meta(host):
        summary["_meta"] = kept
    return summary


def summary_text(summary: Mapping[str, Any]) -> str:
    """A summary as the index keeps it: orjson's encoding, which ``read_summary`` reads
    four times faster than the standard decoder (100,000 of them in a whole listing).

    What orjson would not write as the standard encoder does (an integer past 64
    bits, NaN, which it makes null) is written by the standard encoder after a
    space, and read back by the standard decoder, exactly.
    """
    try:
        data = orjson.dumps(summary)
    except TypeError:
        data = None
    if data is None or b":null" in data or b"[null" in data or b",null" in data:
        return " " + json.dumps(summary, separators=(",", ":"), ensure_ascii=False)
    return data.decode("utf-8")


def read_summary(text: str) -> Any:
    """The summary ``summary_text`` wrote."""
    return json.loads(text) if text.startswith(" ") else orjson.loads(text)


def host_half(record: Mapping[str, Any]) -> dict[str, Any]:
    """What the index keeps of a session's store record (its host half)."""
    host = {
        key: record.get(key)
        for key in ("uri", "title", "isRead", "isArchived", "createdAt", "modifiedAt")
        if record.get(key) is not None
    }
    host["workingDirectories"] = list(record.get("workingDirectories") or [])
    if isinstance(record.get("origin"), Mapping):
        host["origin"] = dict(record["origin"])
    if record.get("lifecycle") == "failed":
        host["lifecycle"] = "failed"  # a session that could not be made (see FailedSessions)
    if kept := states.kept_meta(record):
        host["_meta"] = kept
    if record.get("annotations"):
        counts = states.annotations_summary("", record["annotations"])
        host["annotations"] = {k: v for k, v in counts.items() if k != "resource"}
    return host


def annotations_of(uri: str, host: Mapping[str, Any]) -> dict[str, Any]:
    """The row's ``AnnotationsSummary``: every session has the channel, empty until written."""
    counts = host.get("annotations")
    return {
        **states.annotations_summary(uri, ()),
        **(counts if isinstance(counts, Mapping) else {}),
        "resource": uris.annotations_uri(uri),
    }


class CatalogueIndex:
    """The SQLite index ``listSessions`` pages through (beside the session store's table)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self.cursors = Cursors()
        self._refreshed: dict[str, float] = {}
        #: Provider -> seconds its last refresh took.
        self._refresh_cost: dict[str, float] = {}
        #: Providers with a refresh waiting for REFRESH_AFTER.
        self._due: set[str] = set()
        self._refreshing: dict[str, anyio.Event] = {}
        #: Providers whose listing an earlier run of this host left in the index.
        self._kept: set[str] | None = None
        #: A row's encoded summary -> the summary, so an unchanged row is not decoded
        #: again on every listing.
        self._summaries: dict[str, dict[str, Any]] = {}
        #: Rows the current worker call changed without changing what they list.
        self._quiet_changes = 0
        #: Provider -> the rows of its last refresh, as the index holds them (by session id).
        self._listed: dict[str, dict[str, CatalogueRow]] = {}
        #: The last whole listing (providers, rows, summaries), until the index changes.
        self._full: tuple[list[str], list[Any], list[dict[str, Any]]] | None = None
        #: Whether this run has built a whole listing (the first is kept out of collections).
        self._whole_built = False
        #: Session id -> the newest write of its host half not made yet. Worker threads
        #: take the lock in any order, so each makes whichever write is newest when it
        #: runs and the ones after find nothing left: an older record never lands last.
        self._host_writes: dict[str, Callable[[sqlite3.Connection], None]] = {}
        #: Sessions this run marked unsettled on disk (see ``unsettle``).
        self._unsettled: set[str] = set()

    # -- SQLite, in a worker thread --------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            target = ":memory:"
            if self.path is not None:
                # The store's own file, and it may be the first to make it: owner-only.
                private_sqlite(self.path, tighten_folder=False)
                target = str(self.path)
            db = sqlite3.connect(target, check_same_thread=False, isolation_level=None, timeout=30)
            if self.path is not None:
                db.execute("PRAGMA journal_mode=WAL")
                # As the store's own: a commit survives a killed host without an fsync
                # of its own (FULL synced the log at each save, two a turn, each a few
                # ms and at times 100 on a busy disk); a lost OS takes both alike.
                db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(_SCHEMA)
            if self.path is not None:
                tighten_sqlite(self.path)
            columns = {row[1] for row in db.execute("PRAGMA table_info(catalogue)")}
            if "summary" not in columns:  # an index an earlier version of this host left
                db.execute("ALTER TABLE catalogue ADD COLUMN summary TEXT")
            found = db.execute("SELECT max(version) FROM catalogue_format").fetchone()[0]
            if found != SUMMARY_FORMAT:
                # The format is written last: a host killed before it clears them again.
                db.execute("UPDATE catalogue SET summary = NULL WHERE summary IS NOT NULL")
                db.execute("DELETE FROM catalogue_format")
                db.execute("INSERT INTO catalogue_format VALUES (?)", (SUMMARY_FORMAT,))
            self._db = db
        return self._db

    def _run(self, work: Any) -> Any:
        with self._lock:
            db = self._connect()
            changes = db.total_changes
            self._quiet_changes = 0
            db.execute("BEGIN IMMEDIATE")
            try:
                result = work(db)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            # Summaries written back by a listing change no row's content.
            if db.total_changes - changes != self._quiet_changes:
                self._full = None  # the index changed: the whole listing must be read again
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
        host = host_half(record)
        chats = [c["uri"] for c in record.get("chats", []) if isinstance(c.get("uri"), str)]
        modified = str(record.get("modifiedAt", ""))

        def work(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT INTO catalogue (id, provider, modified_at, host_row) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(id) DO UPDATE SET host_row = excluded.host_row, summary = NULL, "
                "modified_at = max(catalogue.modified_at, excluded.modified_at)",
                (session_id, provider, modified, json.dumps(host)),
            )
            db.execute("DELETE FROM catalogue_chats WHERE session = ?", (session_id,))
            db.executemany(
                "INSERT OR REPLACE INTO catalogue_chats (chat, session) VALUES (?, ?)",
                [(chat, session_id) for chat in chats],
            )

        await self._write_host(session_id, work)

    async def forget(self, session_id: str) -> None:
        def work(db: sqlite3.Connection) -> None:
            db.execute("DELETE FROM catalogue WHERE id = ?", (session_id,))
            db.execute("DELETE FROM catalogue_chats WHERE session = ?", (session_id,))
            for rows in self._listed.values():
                rows.pop(session_id, None)

        await self._write_host(session_id, work)

    async def _write_host(
        self, session_id: str, work: Callable[[sqlite3.Connection], None]
    ) -> None:
        """Returns once this write, or a newer one of the same session, is committed."""
        self._host_writes[session_id] = work

        def newest(db: sqlite3.Connection) -> None:
            write = self._host_writes.pop(session_id, None)
            if write is not None:
                write(db)

        await self._do(newest)

    # -- a crash between the store's write and the index's ---------------------------
    async def unsettle(self, session_id: str) -> None:
        """Mark on disk that the store may hold a newer record of this session than the index.

        Called before the store is written, so a host killed between the store's
        commit and the index's leaves the mark, and ``recover`` at the next start
        indexes the record the store kept. Marked once per session and run: a
        clean stop clears the marks (``settle``).
        """
        if session_id in self._unsettled:
            return
        await self._do(
            lambda db: db.execute(
                "INSERT OR IGNORE INTO catalogue_unsettled (id) VALUES (?)", (session_id,)
            )
        )
        self._unsettled.add(session_id)

    async def settle(self, unsure: Collection[str] = ()) -> None:
        """A clean stop: every session this run saved is indexed, but those in ``unsure``."""
        done = [(session_id,) for session_id in self._unsettled if session_id not in unsure]
        if not done:
            return
        await self._do(
            lambda db: db.executemany("DELETE FROM catalogue_unsettled WHERE id = ?", done)
        )
        self._unsettled.difference_update(session_id for (session_id,) in done)

    async def recover(
        self, read: Callable[[str], Awaitable[Mapping[str, Any] | None]]
    ) -> list[str]:
        """Index again each session an earlier run left unsettled, from what ``read`` returns
        (its record in the store, or None once disposed). Returns the sessions mended.

        Run before the first save of this run: a record read here is then the
        newest there is.
        """
        found = await self._do(
            lambda db: db.execute("SELECT id FROM catalogue_unsettled").fetchall()
        )
        mended = []
        for (session_id,) in found:
            record = await read(session_id)
            if record is None:
                await self.forget(session_id)
            else:
                uri = record.get("uri")
                provider = record.get("provider") or (
                    uris.scheme_of(uri) if isinstance(uri, str) else None
                )
                if not isinstance(provider, str):
                    log.warning("session %s has no provider in its record: not indexed", session_id)
                    continue
                await self.saved(session_id, provider, record)
            mended.append(session_id)
        await self._do(
            lambda db: db.executemany("DELETE FROM catalogue_unsettled WHERE id = ?", found)
        )
        return mended

    # -- what backends list ----------------------------------------------------------
    async def refresh(self, backend: Backend) -> None:
        """Read the backend's whole catalogue into the index (one refresh at a time).

        Only rows that differ from what the index holds are written, so a
        refresh of an unchanged catalogue writes nothing.
        """
        provider = backend.provider
        running = self._refreshing.get(provider)
        if running is not None:
            await running.wait()
            return
        done = self._refreshing[provider] = anyio.Event()
        started = time.monotonic()
        first = provider not in self._listed
        try:
            with _long_lived() if first else contextlib.nullcontext():
                await self._refresh(backend)
            self._refreshed[provider] = time.monotonic()
            self._refresh_cost[provider] = self._refreshed[provider] - started
        except Exception:
            log.exception("the %s backend could not list its sessions", provider)
        finally:
            del self._refreshing[provider]
            done.set()

    async def _refresh(self, backend: Backend) -> None:
        provider = backend.provider
        rows: list[CatalogueRow] = []
        cursor: str | None = None
        for _ in range(100_000):  # bounded: a backend repeating a cursor stops here
            answer = await calls.call(backend.catalogue, limit=REFRESH_PAGE, cursor=cursor)
            if isinstance(answer, CataloguePage):
                rows += answer.rows
                cursor = answer.next_cursor
            else:
                rows += answer
                cursor = None
            if cursor is None:
                break
        texts: dict[str, str] | None = None
        if provider not in self._listed:
            # The first refresh of a run compares every row's text with the index's;
            # encoded here, before the index is locked, a page asked for meanwhile
            # does not wait for 10,000 encodings.
            texts = await anyio.to_thread.run_sync(_row_texts, rows)
        await self._do(lambda db: self._reconcile(db, provider, rows, texts))

    def _reconcile(
        self,
        db: sqlite3.Connection,
        provider: str,
        rows: list[CatalogueRow],
        texts: Mapping[str, str] | None = None,
    ) -> None:
        listed = {row.session_id: row for row in rows}
        last = self._listed.get(provider)
        if last is None:
            # The first refresh of this run compares with what the index holds on disk.
            held = dict(
                db.execute("SELECT id, backend_row FROM catalogue WHERE provider = ?", (provider,))
            )
            stored = {i for i, text in held.items() if text is not None}
            changed = []
            for session_id, row in listed.items():
                text = texts.get(session_id) if texts is not None else None
                if text is None:
                    text = json.dumps(row_json(row))
                if held.get(session_id) != text:
                    changed.append((session_id, provider, row.modified_at, text))
        else:
            # Later ones with the rows it wrote last time: a row object compares by its fields.
            stored = set(last)
            changed = [
                (i, provider, row.modified_at, json.dumps(row_json(row)))
                for i, row in listed.items()
                if (prior := last.get(i)) is not row and prior != row
            ]
        db.executemany(_UPSERT_LISTED, changed)
        gone = [(i,) for i in stored if i not in listed]
        # Gone from the backend and never kept by this host: gone from the list.
        db.executemany("DELETE FROM catalogue WHERE id = ? AND host_row IS NULL", gone)
        db.executemany("UPDATE catalogue SET backend_row = NULL, summary = NULL WHERE id = ?", gone)
        db.execute("INSERT OR IGNORE INTO catalogue_listed (provider) VALUES (?)", (provider,))
        self._listed[provider] = listed  # last: a statement that failed leaves it as it was

    async def kept(self, provider: str) -> bool:
        """Whether an earlier run left this provider's listing in the index.

        Such a listing answers the first ``listSessions`` of this run while a
        refresh runs behind it, as a listing older than ``REFRESH_SECONDS`` does.
        """
        if self._kept is None:
            found = await self._do(
                lambda db: db.execute("SELECT provider FROM catalogue_listed").fetchall()
            )
            self._kept = {row[0] for row in found}
        return provider in self._kept

    async def refresh_later(self, backend: Backend) -> None:
        """``refresh`` once the answer that found the listing stale is on its way."""
        if backend.provider in self._due:
            return
        self._due.add(backend.provider)
        try:
            await anyio.sleep(REFRESH_AFTER)
        finally:
            self._due.discard(backend.provider)
        await self.refresh(backend)

    def stale(self, provider: str) -> bool:
        seen = self._refreshed.get(provider)
        if seen is None:
            return True
        every = max(REFRESH_SECONDS, self._refresh_cost.get(provider, 0.0) / REFRESH_SHARE)
        return time.monotonic() - seen > every

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
        # A row's summary is kept encoded beside its halves (written the first time it is
        # listed, cleared when either half changes), so a listing after a restart decodes
        # one small text per row instead of merging two.
        sql = (
            "SELECT id, provider, modified_at, summary, "
            "CASE WHEN summary IS NULL THEN backend_row END, "
            "CASE WHEN summary IS NULL THEN host_row END FROM catalogue "
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
            # them would hold the event loop, and every client with it.
            whole = limit is None and after is None
            if whole and self._full is not None and self._full[0] == offered:
                _, found, summaries = self._full
                return found, [dict(summary) for summary in summaries]
            found = db.execute(sql, args).fetchall()
            kept = found[:limit] if limit is not None else found
            cache = self._summaries
            if len(cache) > SUMMARY_CACHE:
                cache.clear()
            # A whole listing keeps only what it used: rows changed since leave the cache.
            fresh: dict[str, dict[str, Any]] | None = {} if whole else None
            items = []
            made = []
            for session_id, provider, _, text, listed, host in kept:
                summary = cache.get(text) if text is not None else None
                if summary is None and text is not None:
                    summary = cache[text] = read_summary(text)
                    if "annotations" not in summary:  # kept by a version that did not count
                        summary["annotations"] = annotations_of(summary["resource"], {})
                elif summary is None:
                    summary = summary_of(
                        provider,
                        session_id,
                        json.loads(listed) if listed else {},
                        json.loads(host) if host else {},
                    )
                    text = summary_text(summary)
                    cache[text] = summary
                    made.append((text, session_id))
                if fresh is not None:
                    fresh[text] = summary
                # A copy: whoever answers may add to a row, and the cache must not see it.
                items.append(dict(summary))
            if made:
                before = db.total_changes
                db.executemany("UPDATE catalogue SET summary = ? WHERE id = ?", made)
                self._quiet_changes = db.total_changes - before
            if fresh is not None:
                self._summaries = fresh
                self._full = (offered, found, list(fresh.values()))
            return found, items

        # The first whole listing of a run decodes a summary per session, which the index
        # keeps (``_full``) for the next: built like a first catalogue (``_long_lived``).
        # At 100,000 sessions, full collections walking them took 40-160 ms each while they
        # were built, and 240 ms on the event loop once built; later whole listings reuse
        # the same summaries, so this is done once.
        first_whole = limit is None and after is None and not self._whole_built
        self._whole_built = self._whole_built or first_whole
        with _long_lived() if first_whole else contextlib.nullcontext():
            rows, items = await self._do(work)
        more = limit is not None and len(rows) > limit
        rows = rows[:limit] if limit is not None else rows
        next_cursor = self.cursors.issue(rows[-1][2], rows[-1][0]) if more and rows else None
        return items, next_cursor

    async def failed(self) -> dict[str, str]:
        """Sessions that could not be made, kept to be read: session id -> provider."""
        rows = await self._do(
            lambda db: db.execute(
                "SELECT id, provider, host_row FROM catalogue "
                'WHERE backend_row IS NULL AND host_row LIKE \'%"lifecycle": "failed"%\''
            ).fetchall()
        )
        return {
            session_id: provider
            for session_id, provider, host in rows
            if json.loads(host).get("lifecycle") == "failed"
        }

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
        values = (row.session_id, provider, row.modified_at, json.dumps(row_json(row)))

        def work(db: sqlite3.Connection) -> None:
            db.execute(_UPSERT_LISTED, values)
            listed = self._listed.get(provider)
            if listed is not None:
                listed[row.session_id] = row

        await self._do(work)

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


#: A page's rows one plugin is handed at a time, and passed over on the loop in one go:
#: at 100,000 rows, one pass of the git plugin held every other client 60-150 ms.
ROWS_PER_TURN = 2000


async def decorate_rows(
    implementations: Iterable[Any], host: Any, rows: list[dict[str, Any]]
) -> None:
    """Let every ``ahp_session_rows`` implementation add to a page's rows, in hook order.

    ``implementations`` are the hook's, each called alone (``impl(host=, rows=)``,
    ``impl.plugin`` its plugin's name), so one plugin's fault costs only its own
    additions: the page is answered. A page of more than ROWS_PER_TURN rows is
    handed over in parts of that many, the loop serving others between them.
    """
    for impl in implementations:
        # An empty page too is handed over: every page reaches every plugin.
        for start in range(0, max(len(rows), 1), ROWS_PER_TURN):
            if start:
                await anyio.sleep(0)  # a long page: other clients go between its parts
            try:
                await resolve(impl(host=host, rows=rows[start : start + ROWS_PER_TURN]))
            except Exception:
                log.exception("the %s plugin could not add to the session list", impl.plugin)
                break
        if len(rows) > 1000:
            await anyio.sleep(0)  # a plugin's pass over many rows: other clients go between
