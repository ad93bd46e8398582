"""An index of the CLI's transcripts: one row per file, kept by path, size and mtime.

Listing sessions must not read every transcript (there may be thousands, some of
megabytes). A row needs only the first entries (the first prompt, its directory
and time) and the last ones (a title the person gave, the last activity), so a
file is read at its head and tail, and again only when its size or mtime moved.
Rows live in SQLite under the host's state, so a restarted host lists at once.

Blocking: every method does file I/O; call them off the event loop.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ahp_claude.transcripts import prompt_text
from ahpcore.api import pausing, private_sqlite, sorted_pausing, tighten_sqlite

HEAD_BYTES = 64 * 1024
TAIL_BYTES = 64 * 1024
TITLE_CHARS = 100

SCHEMA = """
create table if not exists transcripts (
    path text primary key,
    session_id text not null,
    size integer not null,
    mtime_ns integer not null,
    title text,
    created_at text,
    modified_at text not null,
    cwd text
)
"""


@dataclass(frozen=True)
class Row:
    path: str
    session_id: str
    size: int
    mtime_ns: int
    title: str | None
    created_at: str | None
    modified_at: str
    cwd: str | None


def _iso(ns: int) -> str:
    moment = datetime.fromtimestamp(ns / 1e9, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _entries(lines: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # cut at the edge of what was read, or still being written
        if isinstance(entry, dict):
            yield entry


def summarize(path: Path, size: int, mtime_ns: int) -> Row:
    """A row from the head and tail of one transcript."""
    with path.open("rb") as handle:
        head = handle.read(HEAD_BYTES)
        tail = head
        if size > HEAD_BYTES:
            handle.seek(max(size - TAIL_BYTES, HEAD_BYTES))
            tail = handle.read(TAIL_BYTES)
    title = cwd = created = None
    # Parse lines only until the first prompt: the head's later lines are not needed.
    for entry in _entries(head.split(b"\n")):
        created = created or entry.get("timestamp")
        cwd = cwd or entry.get("cwd")
        text = prompt_text(entry)
        if text is not None:
            title = " ".join(text.split())[:TITLE_CHARS] or None
            break
    # Of the tail, only a title the person or the CLI gave matters: skip every other line.
    named = [
        line for line in tail.split(b"\n") if b'"custom-title"' in line or b'"summary"' in line
    ]
    for entry in reversed(list(_entries(named))):
        if entry.get("type") == "custom-title" and entry.get("customTitle"):
            title = str(entry["customTitle"])
            break
        if entry.get("type") == "summary" and entry.get("summary"):
            title = str(entry["summary"])
            break
    return Row(
        str(path), path.stem, size, mtime_ns, title, created or _iso(mtime_ns), _iso(mtime_ns), cwd
    )


def _expanded(paths: list[str]) -> list[str]:
    """The transcripts among ``paths``, and those inside a folder among them.

    A new project folder may get its first transcript before the watch on it
    begins, so a folder that appears is looked into.
    """
    found: list[str] = []
    for path in paths:
        if path.endswith(".jsonl"):
            found.append(path)
        elif os.path.isdir(path):
            try:
                found += [e.path for e in os.scandir(path) if e.name.endswith(".jsonl")]
            except OSError:
                continue
    return found


class TranscriptIndex:
    def __init__(self, projects: Path, database: Path) -> None:
        self.projects = projects
        self.database = database
        self._rows: dict[str, Row] | None = None
        self._by_id: dict[str, str] = {}
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        #: False while nothing watches the folder: then each listing looks for changes.
        self.watched = False
        #: Moves whenever a row is added, changed or dropped.
        self.version = 0
        self._listed: tuple[int, list[Row]] | None = None

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            # Titles and folders of every past session: owner-only, and its journal with it.
            private_sqlite(self.database)
            self._db = sqlite3.connect(self.database, check_same_thread=False)
            self._db.execute(SCHEMA)
            tighten_sqlite(self.database)
        return self._db

    def _load(self) -> dict[str, Row]:
        if self._rows is None:
            db = self._connection()
            self._rows = {r[0]: Row(*r) for r in db.execute("select * from transcripts")}
            self._by_id = {row.session_id: path for path, row in self._rows.items()}
            self._refresh_all()
        return self._rows

    def _files(self) -> dict[str, os.stat_result]:
        found: dict[str, os.stat_result] = {}
        try:
            projects = list(os.scandir(self.projects))
        except OSError:
            return found
        for project in projects:
            if not project.is_dir():
                continue
            try:
                for item in pausing(os.scandir(project.path)):
                    if item.name.endswith(".jsonl") and item.is_file():
                        found[item.path] = item.stat()
            except OSError:
                continue
        return found

    def _refresh_all(self) -> list[Row]:
        rows = self._rows
        assert rows is not None
        files = self._files()
        changed = [
            path
            for path, stat in files.items()
            if (row := rows.get(path)) is None
            or (row.size, row.mtime_ns) != (stat.st_size, stat.st_mtime_ns)
        ]
        gone = [path for path in rows if path not in files]
        return self._apply(changed, gone, files)

    def _apply(
        self, changed: list[str], gone: list[str], files: dict[str, os.stat_result]
    ) -> list[Row]:
        rows = self._rows
        assert rows is not None
        db = self._connection()
        fresh: list[Row] = []
        if changed or gone:
            self.version += 1
        for path in pausing(changed):
            stat = files[path]
            try:
                row = summarize(Path(path), stat.st_size, stat.st_mtime_ns)
            except OSError:
                gone.append(path)
                continue
            rows[path] = row
            self._by_id[row.session_id] = path
            fresh.append(row)
        for path in gone:
            dropped = rows.pop(path, None)
            if dropped is not None and self._by_id.get(dropped.session_id) == path:
                del self._by_id[dropped.session_id]
        with db:
            db.executemany(
                "insert or replace into transcripts values (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        r.path,
                        r.session_id,
                        r.size,
                        r.mtime_ns,
                        r.title,
                        r.created_at,
                        r.modified_at,
                        r.cwd,
                    )
                    for r in fresh
                ],
            )
            db.executemany("delete from transcripts where path = ?", [(p,) for p in gone])
        return fresh

    @property
    def loaded(self) -> bool:
        return self._rows is not None

    def __len__(self) -> int:
        return len(self._rows or ())

    def rows(self) -> list[Row]:
        """Every transcript that holds a conversation, newest first."""
        with self._lock:
            fresh = self._rows is None
            rows = self._load()
            if not fresh and not self.watched:
                self._refresh_all()
            if self._listed is not None and self._listed[0] == self.version:
                return self._listed[1]
            listed = sorted_pausing(
                (row for row in rows.values() if row.title is not None),
                key=lambda row: row.modified_at,
                reverse=True,
            )
            self._listed = (self.version, listed)
        return listed

    def refresh(self) -> list[Row]:
        """Look at the whole folder again; returns new or changed rows."""
        with self._lock:
            if self._rows is None:
                self._load()
                return []
            return self._refresh_all()

    def update(self, paths: list[str]) -> list[Row]:
        """Look again at the named files (a watcher saw them change); returns new or changed rows."""
        with self._lock:
            self._load()
            files: dict[str, os.stat_result] = {}
            gone: list[str] = []
            for path in _expanded(paths):
                try:
                    files[path] = os.stat(path)
                except OSError:
                    gone.append(path)
            return self._apply(list(files), gone, files)

    def lookup(self, session_id: str) -> Row | None:
        with self._lock:
            path = self._load() and self._by_id.get(session_id)
            row = self._rows.get(path) if path and self._rows else None
        if row is not None and not Path(row.path).exists():
            return None
        return row

    def path_of(self, session_id: str) -> Path | None:
        row = self.lookup(session_id)
        return Path(row.path) if row is not None else None

    def forget(self, path: Path) -> None:
        with self._lock:
            if self._rows is not None:
                self._apply([], [str(path)], {})

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
