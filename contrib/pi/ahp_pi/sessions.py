"""pi's session files, read: the catalogue, one session's header and title, its turns.

A file is JSON lines: a ``session`` header (id, cwd, timestamp), then entries
linked by ``parentId`` into a tree. The conversation is the path from the last
entry back to the root. Files live in ``<sessions dir>/<folder>/`` and are named
``<timestamp>_<session id>.jsonl``. Every function here blocks on file I/O: the
host calls them from a worker thread.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ahp_pi.view import message_text
from ahpcore.api import file_uri, pausing

log = logging.getLogger(__name__)

TITLE_CHARS = 80


@dataclass(frozen=True)
class Summary:
    """What the catalogue shows of one session file."""

    id: str
    path: Path
    cwd: str
    created_at: str
    modified_at: str
    title: str

    @property
    def working_directories(self) -> tuple[str, ...]:
        return (file_uri(self.cwd),) if self.cwd.startswith("/") else ()


def iso_of(seconds: float) -> str:
    return (
        datetime.fromtimestamp(seconds, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def entries(path: Path) -> Iterator[dict[str, Any]]:
    """The file's lines as JSON objects; a line that is not one is skipped."""
    with path.open("rb") as handle:
        for raw in handle:
            # pi splits records on LF alone; bytes keep U+2028 inside a line where it belongs.
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            if isinstance(entry, dict):
                yield entry


class Catalogue:
    """The session files under one folder, each summarised once per (size, mtime)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._seen: dict[Path, tuple[tuple[int, int], Summary | None]] = {}

    def files(self) -> list[Path]:
        try:
            folders = [p for p in self.root.iterdir() if p.is_dir()]
        except OSError:
            return []
        found: list[Path] = []
        for folder in pausing(folders):
            try:
                found.extend(folder.glob("*.jsonl"))
            except OSError:
                continue
        return found

    def summaries(self) -> list[Summary]:
        found: list[Summary] = []
        for path in pausing(self.files()):
            summary = self.summary(path)
            if summary is not None:
                found.append(summary)
        return found

    def find(self, session_id: str) -> Path | None:
        """The file of pi's session ``session_id`` (it ends every file's name)."""
        if not session_id or "/" in session_id or "*" in session_id:
            return None
        for folder in self.root.glob("*"):
            for path in folder.glob(f"*_{session_id}.jsonl"):
                return path
        return None

    def summary(self, path: Path) -> Summary | None:
        try:
            stat = path.stat()
        except OSError:
            return None
        key = (stat.st_size, stat.st_mtime_ns)
        seen = self._seen.get(path)
        if seen is not None and seen[0] == key:
            return seen[1]
        summary = read_summary(path, iso_of(stat.st_mtime))
        self._seen[path] = (key, summary)
        return summary


def read_summary(path: Path, modified_at: str) -> Summary | None:
    header: Mapping[str, Any] | None = None
    first: str = ""
    named: str = ""
    try:
        for entry in entries(path):
            kind = entry.get("type")
            if header is None:
                if kind != "session" or not entry.get("id"):
                    return None  # not a pi session file
                header = entry
            elif kind == "session_info":
                named = str(entry.get("name") or "")
            elif kind == "message" and not first:
                message = entry.get("message") or {}
                if message.get("role") == "user":
                    first = message_text(message.get("content")).strip()
    except OSError:
        return None
    if header is None:
        return None
    title = named or (first.splitlines()[0][:TITLE_CHARS] if first else "")
    return Summary(
        id=str(header["id"]),
        path=path,
        cwd=str(header.get("cwd") or ""),
        created_at=str(header.get("timestamp") or modified_at),
        modified_at=modified_at,
        title=title,
    )


def conversation(path: Path) -> list[dict[str, Any]]:
    """The entries of the conversation as it stands: the last entry's path to the root."""
    by_id: dict[str, dict[str, Any]] = {}
    last: dict[str, Any] | None = None
    for entry in entries(path):
        if entry.get("type") == "session" or not entry.get("id"):
            continue
        by_id[str(entry["id"])] = entry
        last = entry
    path_entries: list[dict[str, Any]] = []
    seen: set[str] = set()
    while last is not None and str(last["id"]) not in seen:
        seen.add(str(last["id"]))
        path_entries.append(last)
        parent = last.get("parentId")
        last = by_id.get(str(parent)) if parent else None
    path_entries.reverse()
    return path_entries
