"""What the catalogue needs of each conversation, without reading every log each time.

Listing sessions needs a few facts per conversation (ids, title, times,
folders), not its turns. ``SummaryIndex`` keeps those facts per log file,
together with the file's size, modification time and inode, in
``.catalogue.jsonl`` beside the logs (a header line, then one line per log, so
reading it back is many small parses, not one long one holding the interpreter). A listing then costs one ``stat`` per log;
only a log whose stat differs from the one remembered is read again. The file
is a cache: it is written without fsync, and one that is missing, torn or of
another format is rebuilt from the logs.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ahpcore.api import pausing

log = logging.getLogger(__name__)

#: Bumped whenever what a summary holds changes: an older cache is then rebuilt.
CACHE_FORMAT = 2
CACHE_NAME = ".catalogue.jsonl"
#: What format 1 was kept in: removed once its successor is written.
_OLD_CACHE_NAME = ".catalogue.json"

#: (size, mtime in ns, inode): a log that was appended to or replaced differs in one of them.
FileKey = tuple[int, int, int]


class Summarised(Protocol):
    """What a summary reads of a conversation (``store.Conversation`` is the one there is)."""

    @property
    def backend_id(self) -> str: ...

    @property
    def session_id(self) -> str: ...

    @property
    def created_at(self) -> str: ...

    @property
    def modified_at(self) -> str: ...

    @property
    def working_directories(self) -> Sequence[str]: ...

    @property
    def side_of(self) -> Sequence[str] | None:
        """The chat this one is a side chat of, if it is one."""
        ...

    def title(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Summary:
    """One conversation as the catalogue sees it."""

    backend_id: str
    session_id: str
    title: str
    created_at: str
    modified_at: str
    working_directories: tuple[str, ...]
    #: A side chat is never the chat a session is listed by.
    side: bool

    @classmethod
    def of(cls, conversation: Summarised) -> Summary:
        return cls(
            backend_id=conversation.backend_id,
            session_id=conversation.session_id,
            title=conversation.title(),
            created_at=conversation.created_at,
            modified_at=conversation.modified_at,
            working_directories=tuple(conversation.working_directories),
            side=conversation.side_of is not None,
        )

    def to_json(self) -> list[Any]:
        return [
            self.backend_id,
            self.session_id,
            self.title,
            self.created_at,
            self.modified_at,
            list(self.working_directories),
            self.side,
        ]

    @classmethod
    def from_json(cls, data: list[Any]) -> Summary:
        backend_id, session_id, title, created, modified, directories, side = data
        return cls(
            str(backend_id),
            str(session_id),
            str(title),
            str(created),
            str(modified),
            tuple(str(d) for d in directories),
            bool(side),
        )


#: A file's key and its summary (None: the log could not be read).
_Entry = tuple[FileKey, Summary | None]


def _key(stat: os.stat_result) -> FileKey:
    return stat.st_size, stat.st_mtime_ns, stat.st_ino


class SummaryIndex:
    """Summaries of the logs under ``directory``, checked against each file's stat.

    ``read`` reads one log (raising ValueError for one that is damaged) and
    ``path`` names the log of a backend id. Conversations open in memory are
    newer than their files and are summarised from memory.
    Scans may run in a worker thread while the event loop saves: the maps they
    share are swapped or changed under a lock.
    """

    def __init__(
        self,
        directory: Path,
        read: Callable[[Path], Summarised],
        path: Callable[[str], Path],
    ) -> None:
        self.directory = directory
        self._read = read
        self._path = path
        self._lock = threading.Lock()
        #: File name -> entry, as of the last scan (loaded from the cache file at first).
        self._files: dict[str, _Entry] | None = None
        #: Backend id -> session id of every conversation saved since this index was made,
        #: so a session's chats are found without a scan.
        self._saved: dict[str, str] = {}
        #: Session id -> backend ids, from the last scan. Tuples of strings, which the
        #: garbage collector stops tracking: at 10,000 sessions, sets here were a quarter
        #: of what each full collection walked.
        self._sessions: dict[str, tuple[str, ...]] = {}
        #: Entries changed since the cache file was written (a lookup's reads, a delete).
        self._dirty = False
        #: The last scan's answer and the open conversations it summarised: a scan that
        #: finds nothing changed returns that very list, so callers can tell at once.
        self._found: list[Summary] | None = None
        self._opened: dict[str, Summary] = {}

    # -- kept in step by the store ---------------------------------------------------
    def saved(self, conversation: Summarised) -> None:
        with self._lock:
            self._saved[conversation.backend_id] = conversation.session_id

    def deleted(self, backend_id: str) -> None:
        with self._lock:
            self._saved.pop(backend_id, None)
            if self._files is not None:
                self._files.pop(self._path(backend_id).name, None)
                self._dirty = True

    # -- reading -----------------------------------------------------------------------
    def scan(self, open_now: Mapping[str, Summarised]) -> list[Summary]:
        """Every conversation kept: one stat per log, a read only for the logs that changed."""
        known = self._loaded()
        fresh: dict[str, _Entry] = {}
        if self.directory.is_dir():
            with os.scandir(self.directory) as entries:
                for entry in pausing(entries):
                    name = entry.name
                    if name.startswith(".") or not name.endswith(".jsonl"):
                        continue
                    try:
                        key = _key(entry.stat())
                    except FileNotFoundError:
                        continue  # deleted while listed
                    held = known.get(name)
                    fresh[name] = (
                        held
                        if held is not None and held[0] == key
                        else self._entry(Path(entry.path), key)
                    )
        sessions: dict[str, tuple[str, ...]] = {}
        for _, summary in fresh.values():
            if summary is not None:
                sessions[summary.session_id] = (
                    *sessions.get(summary.session_id, ()),
                    summary.backend_id,
                )
        with self._lock:
            # Compared a file at a time, not as key views: comparing 100,000 keys in one C
            # call kept the interpreter from the event loop for tens of milliseconds.
            changed = (
                self._dirty
                or len(fresh) != len(known)
                or any(
                    (held := known.get(name)) is None or held[0] != entry[0]
                    for name, entry in fresh.items()
                )
            )
            self._files = fresh
            self._sessions = sessions
            self._dirty = False
        if changed:
            self._write(fresh)
        opened = {backend_id: Summary.of(c) for backend_id, c in open_now.items()}
        if not changed and self._found is not None and opened == self._opened:
            return self._found
        found = dict(opened)
        for _, summary in fresh.values():
            if summary is not None:
                found.setdefault(summary.backend_id, summary)
        self._found, self._opened = list(found.values()), opened
        return self._found

    def of_session(self, session_id: str, open_now: Mapping[str, Summarised]) -> list[Summary]:
        """The conversations of one session: a stat per chat of it, no scan once one was made.

        A session this index has not seen is looked for with a scan, in case
        its logs were written by another process since the last one.
        """
        scanned = self._files is None
        if scanned:
            self.scan({})
        found = self._session(session_id, open_now)
        if not found and not scanned:
            self.scan({})
            found = self._session(session_id, open_now)
        return found

    def _session(self, session_id: str, open_now: Mapping[str, Summarised]) -> list[Summary]:
        with self._lock:
            candidates = set(self._sessions.get(session_id, ()))
            candidates.update(b for b, s in self._saved.items() if s == session_id)
            files = dict(self._files or {})
        candidates.update(b for b, c in open_now.items() if c.session_id == session_id)
        found: list[Summary] = []
        for backend_id in sorted(candidates):
            conversation = open_now.get(backend_id)
            if conversation is not None:
                found.append(Summary.of(conversation))
                continue
            path = self._path(backend_id)
            try:
                key = _key(path.stat())
            except FileNotFoundError:
                continue
            held = files.get(path.name)
            if held is None or held[0] != key:
                held = self._entry(path, key)
                with self._lock:
                    if self._files is not None:
                        self._files[path.name] = held
                        self._dirty = True
            summary = held[1]
            if summary is not None and summary.session_id == session_id:
                found.append(summary)
        return found

    def _entry(self, path: Path, key: FileKey) -> _Entry:
        try:
            return key, Summary.of(self._read(path))
        except ValueError as exc:
            log.warning("skipping %s", exc)
            return key, None

    # -- the cache file ------------------------------------------------------------------
    def _loaded(self) -> dict[str, _Entry]:
        if self._files is not None:
            return self._files
        path = self.directory / CACHE_NAME
        try:
            with path.open("rb") as handle:
                header = json.loads(handle.readline() or b"null")
                if not isinstance(header, dict) or header.get("format") != CACHE_FORMAT:
                    return {}
                files: dict[str, _Entry] = {}
                for line in pausing(handle):
                    name, size, mtime, inode, summary = json.loads(line)
                    files[str(name)] = (
                        (int(size), int(mtime), int(inode)),
                        Summary.from_json(summary) if summary is not None else None,
                    )
                return files
        except FileNotFoundError:
            return {}
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            log.warning("%s: rebuilding the catalogue cache: %s", path, exc)
            return {}

    def _write(self, files: Iterable[tuple[str, _Entry]] | Mapping[str, _Entry]) -> None:
        items = files.items() if isinstance(files, Mapping) else files
        lines = [
            json.dumps(
                [name, *key, summary.to_json() if summary is not None else None],
                separators=(",", ":"),
                ensure_ascii=False,
            )
            for name, (key, summary) in items
        ]
        path = self.directory / CACHE_NAME
        try:
            (self.directory / _OLD_CACHE_NAME).unlink(missing_ok=True)
            if not lines:
                path.unlink(missing_ok=True)
                return
            header = json.dumps({"format": CACHE_FORMAT})
            fd, temp = tempfile.mkstemp(dir=self.directory, prefix=".", suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    handle.write(header + "\n" + "\n".join(lines) + "\n")
                os.replace(temp, path)
            except BaseException:
                Path(temp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            # Only a cache: the next listing reads the logs again.
            log.warning("could not write %s: %s", path, exc)
