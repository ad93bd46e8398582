"""Conversations kept as one append-only JSON Lines log each, read back after a restart."""

from __future__ import annotations

import copy
import json
import logging
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ahp_scripted.catalogue import Summary, SummaryIndex
from ahp_scripted.transcript import Report
from ahpcore.api import private_folder

log = logging.getLogger(__name__)

#: Bumped when the file layout changes incompatibly.
FORMAT = 2


def _plain(value: Any) -> Any:
    """What json cannot write itself: any other mapping or sequence a reporter was handed."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return list(value)
    raise TypeError(f"cannot keep {type(value).__name__} in a conversation file")


def iso(moment: datetime) -> str:
    """A UTC timestamp the way the protocol writes them (``2026-01-01T00:00:00.000Z``)."""
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


@dataclass
class TurnRecord:
    """One turn: the message, the reports it made, and how it ended (None while it runs)."""

    id: str
    message: dict[str, Any]
    started_at: str
    reports: list[Report] = field(default_factory=list)
    #: {"state": complete|cancelled|error, "durationMs": int, "error": str|None}
    end: dict[str, Any] | None = None
    #: Where an errored turn picks up when it is resumed: {"step": int, "variables": {...}}.
    resume: dict[str, Any] | None = None
    #: The reference reported for the turn, reported again when its transcript is read.
    ref: str | None = None

    def said(self) -> str:
        """The visible text the turn streamed."""
        return "".join(str(r[1]["delta"]) for r in self.reports if r[0] == "text")

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "message": self.message,
            "startedAt": self.started_at,
            "reports": self.reports,
            "end": self.end,
            "resume": self.resume,
            **({"ref": self.ref} if self.ref is not None else {}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TurnRecord:
        return cls(
            id=data["id"],
            message=data["message"],
            started_at=data["startedAt"],
            reports=data.get("reports", []),
            end=data.get("end"),
            resume=data.get("resume"),
            ref=data.get("ref"),
        )


@dataclass
class Conversation:
    """Everything the scripted backend keeps of one chat."""

    backend_id: str
    session_id: str
    chat_uri: str
    created_at: str
    modified_at: str
    working_directories: list[str] = field(default_factory=list)
    turns: list[TurnRecord] = field(default_factory=list)
    #: (backend id, turn id) this conversation was forked from.
    fork_of: list[str] | None = None
    #: (backend id, turn id) this side chat looks at, and what that turn said.
    side_of: list[str] | None = None
    side_context: str | None = None
    #: The title a client gave the chat, over the one its first message makes.
    renamed: str | None = None

    def turn_index(self, turn_id: str) -> int:
        for index, turn in enumerate(self.turns):
            if turn.id == turn_id:
                return index
        raise LookupError(f"conversation {self.backend_id!r} has no turn {turn_id!r}")

    def title(self) -> str:
        """A client's title, else the first message's text on one line, at most 60 characters."""
        if self.renamed:
            return self.renamed
        if not self.turns:
            return ""
        return " ".join(str(self.turns[0].message.get("text", "")).split())[:60]

    def to_json(self, *, turns: bool = True) -> dict[str, Any]:
        data: dict[str, Any] = {
            "format": FORMAT,
            "backendId": self.backend_id,
            "sessionId": self.session_id,
            "chatUri": self.chat_uri,
            "createdAt": self.created_at,
            "modifiedAt": self.modified_at,
            "workingDirectories": self.working_directories,
            "forkOf": self.fork_of,
            "sideOf": self.side_of,
            "sideContext": self.side_context,
            **({"renamed": self.renamed} if self.renamed else {}),
        }
        if turns:
            data["turns"] = [turn.to_json() for turn in self.turns]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Conversation:
        if data.get("format") != FORMAT:
            raise ValueError(f"format {data.get('format')!r}, expected {FORMAT}")
        return cls(
            backend_id=data["backendId"],
            session_id=data["sessionId"],
            chat_uri=data["chatUri"],
            created_at=data["createdAt"],
            modified_at=data["modifiedAt"],
            working_directories=list(data.get("workingDirectories", [])),
            turns=[TurnRecord.from_json(turn) for turn in data.get("turns", [])],
            fork_of=data.get("forkOf"),
            side_of=data.get("sideOf"),
            side_context=data.get("sideContext"),
            renamed=data.get("renamed"),
        )


@dataclass
class _Written:
    """What a conversation's log already says: its header and each turn's last line."""

    header: str
    #: One key per turn, as the log has them (see ``_turn_key``).
    turns: list[_TurnKey]
    lines: int
    renamed: str | None = None


class ConversationStore:
    """Open conversations by backend id, each kept as an append-only log under ``directory``.

    A log is JSON Lines: a ``conversation`` header, then one ``turn`` line each
    time a turn changes (the last line for a turn id wins) and a ``truncate``
    line when turns are dropped. A save appends only what changed since the
    last one, as one fsync'd write, so a turn costs the same in a long chat as
    in a short one; the log is rewritten whole (temp file + rename) only when
    it has grown well past what it describes. A line torn by a crash mid-write
    is skipped on reading, so the turn reads back as it was before it.

    Without a directory conversations live in memory only (tests that need no
    files). One ``Conversation`` object per backend id is shared by the agent
    running it and the backend's truncate and delete.
    """

    #: Rewrite a log once it holds this many times more lines than it has turns (plus slack).
    COMPACT_FACTOR = 4
    COMPACT_SLACK = 16

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self._open: dict[str, Conversation] = {}
        self._written: dict[str, _Written] = {}
        self._index = (
            SummaryIndex(directory, lambda path: self._read(path)[0], self.path)
            if directory is not None
            else None
        )

    def path(self, backend_id: str) -> Path:
        if self.directory is None:
            raise RuntimeError("this store keeps conversations in memory only")
        # Any backend id becomes a safe file name; the id itself is kept inside.
        return self.directory / f"{quote(backend_id, safe='-_.')}.jsonl"

    def get(self, backend_id: str) -> Conversation | None:
        found = self._open.get(backend_id)
        if found is not None or self.directory is None:
            return found
        path = self.path(backend_id)
        if not path.exists():
            return None
        conversation, written = self._read(path)
        self._open[backend_id] = conversation
        self._written[backend_id] = written
        return conversation

    @staticmethod
    def _read(path: Path) -> tuple[Conversation, _Written]:
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise ValueError(f"{path}: not a scripted conversation log: {exc}") from None
        header: dict[str, Any] | None = None
        turns: dict[str, dict[str, Any]] = {}
        order: list[str] = []
        lines = 0
        for number, line in enumerate(raw.split(b"\n"), start=1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                # Only the last line can be torn (a crash mid-append); anything else is damage.
                if raw.rstrip(b"\n").endswith(line):
                    log.warning("%s: ignoring a torn last line", path)
                    continue
                raise ValueError(f"{path}:{number}: not a JSON line") from None
            lines += 1
            kind = entry.get("kind") if isinstance(entry, dict) else None
            if kind == "conversation":
                header = entry
            elif kind == "turn" and header is not None:
                turn = entry["turn"]
                if turn["id"] not in turns:
                    order.append(turn["id"])
                turns[turn["id"]] = turn
                header["modifiedAt"] = entry.get("modifiedAt", header["modifiedAt"])
            elif kind == "rename" and header is not None:
                header["renamed"] = entry["title"]
                header["modifiedAt"] = entry.get("modifiedAt", header["modifiedAt"])
            elif kind == "truncate" and header is not None:
                for dropped in order[entry["keep"] :]:
                    del turns[dropped]
                del order[entry["keep"] :]
                header["modifiedAt"] = entry.get("modifiedAt", header["modifiedAt"])
            else:
                raise ValueError(f"{path}:{number}: unexpected {kind!r} line")
        if header is None:
            raise ValueError(f"{path}: no conversation header")
        try:
            conversation = Conversation.from_json({**header, "turns": [turns[t] for t in order]})
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}: not a scripted conversation log: {exc}") from None
        written = _Written(
            header=_header_line(conversation),
            turns=[_turn_key(t) for t in conversation.turns],
            lines=lines,
            renamed=conversation.renamed,
        )
        return conversation, written

    def save(self, conversation: Conversation, *, changed: TurnRecord | None = None) -> None:
        """Write what changed since the last save, here and now."""
        write = self.prepare(conversation, changed=changed)
        if write is not None:
            write()

    def prepare(
        self, conversation: Conversation, *, changed: TurnRecord | None = None
    ) -> Callable[[], None] | None:
        """Work out what changed (on the caller's thread); returns the file write to run, if any.

        ``changed`` is a promise that no turn before it differs from the last
        save (a running turn's own saves), so only it and the turns after it are
        looked at and a save costs the same at turn 500 as at turn 1.

        The diff reads the conversation, so it runs where the conversation is
        changed; the write and its fsync touch only the returned closure's own
        data, so a caller may run it in a worker thread. Writes of one
        conversation must run in the order they were prepared.
        """
        backend_id = conversation.backend_id
        self._open[backend_id] = conversation
        if self._index is None:
            return None
        self._index.saved(conversation)
        header = _header_line(conversation)
        written = self._written.get(backend_id)
        old = written.turns if written is not None else []
        keys, start = _turn_keys(conversation.turns, old, changed)
        if written is None or written.header != header or self._worth_compacting(written, keys):
            stamp = conversation.modified_at
            body = [header] + [_turn_line(stamp, t) for t in conversation.turns]
            if conversation.renamed is not None:
                body.append(_rename_line(stamp, conversation.renamed))
            self._written[backend_id] = _Written(header, keys, len(body), conversation.renamed)
            return self._writer(backend_id, body, replace=True)
        stamp = conversation.modified_at
        lines: list[str] = []
        if conversation.renamed != written.renamed and conversation.renamed is not None:
            lines.append(_rename_line(stamp, conversation.renamed))
        # keys[:start] are old's own key objects: only the rest can differ.
        same = start
        for index in range(start, min(len(old), len(keys))):
            if old[index][0] != keys[index][0]:
                break
            same = index + 1
        if same < len(old):
            lines.append(_dumps({"kind": "truncate", "keep": same, "modifiedAt": stamp}))
        turns = conversation.turns
        for index in range(start, len(keys)):
            if index >= same or old[index] is not keys[index]:
                lines.append(_turn_line(stamp, turns[index]))
        if not lines:
            return None
        self._written[backend_id] = _Written(
            header, keys, written.lines + len(lines), conversation.renamed
        )
        return self._writer(backend_id, lines, replace=False)

    def _writer(self, backend_id: str, lines: list[str], *, replace: bool) -> Callable[[], None]:
        directory, path = self.directory, self.path(backend_id)
        assert directory is not None
        text = "\n".join(lines) + "\n"

        def write() -> None:
            try:
                private_folder(directory)  # conversations are the user's alone
                if replace:
                    _replace(directory, path, text)
                else:
                    with path.open("a", encoding="utf-8") as handle:
                        handle.write(text)
                        handle.flush()
                        os.fsync(handle.fileno())
            except BaseException:
                # What is on disk is no longer known: the next save rewrites the log whole.
                self._written.pop(backend_id, None)
                raise

        return write

    def _worth_compacting(self, written: _Written, keys: list[_TurnKey]) -> bool:
        return written.lines > self.COMPACT_FACTOR * len(keys) + self.COMPACT_SLACK

    def delete(self, backend_id: str) -> None:
        self._open.pop(backend_id, None)
        self._written.pop(backend_id, None)
        if self._index is not None:
            self.path(backend_id).unlink(missing_ok=True)
            self._index.deleted(backend_id)

    def all(self) -> list[Conversation]:
        """Every conversation kept, open or on disk; unreadable files are logged and skipped."""
        found = dict(self._open)
        if self.directory is not None and self.directory.is_dir():
            for path in sorted(self.directory.glob("*.jsonl")):
                try:
                    conversation, _ = self._read(path)
                except ValueError as exc:
                    log.warning("skipping %s", exc)
                    continue
                found.setdefault(conversation.backend_id, conversation)
        return list(found.values())

    def summaries(self) -> list[Summary]:
        """What the catalogue needs of every conversation kept, reading only logs that changed."""
        open_now = dict(self._open)
        if self._index is None:
            return [Summary.of(c) for c in open_now.values()]
        return self._index.scan(open_now)

    def summaries_of(self, session_id: str) -> list[Summary]:
        """The same for one session's conversations (its default chat, forks and side chats)."""
        open_now = dict(self._open)
        if self._index is None:
            return [Summary.of(c) for c in open_now.values() if c.session_id == session_id]
        return self._index.of_session(session_id, open_now)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_plain)


#: (turn id, reports count, end, resume): a turn's message never changes and its
#: reports only grow, so these stand for the whole turn.
_TurnKey = tuple[str, int, Any, Any]


def _turn_key(turn: TurnRecord) -> _TurnKey:
    """A turn's key, holding copies of its ending so later edits in place still show."""
    return turn.id, len(turn.reports), copy.deepcopy(turn.end), copy.deepcopy(turn.resume)


def _turn_keys(
    turns: list[TurnRecord], old: list[_TurnKey], changed: TurnRecord | None
) -> tuple[list[_TurnKey], int]:
    """Each turn's key, reusing the old key object where the turn is unchanged.

    An unchanged turn keeps the very same key object, which ``prepare`` tests by
    identity. Turns before ``changed`` are taken as unchanged unseen; the rest
    are compared with their old keys (a few fields), never encoded. Also returns
    how many leading keys were taken unseen.
    """
    start = 0
    if changed is not None:
        # The running turn is nearly always the last one.
        if turns and turns[-1] is changed:
            start = len(turns) - 1
        else:
            start = next((i for i, turn in enumerate(turns) if turn is changed), 0)
        if start > len(old):
            start = 0
    keys: list[_TurnKey] = old[:start]
    for index in range(start, len(turns)):
        turn = turns[index]
        if index < len(old):
            key = old[index]
            if (
                key[0] == turn.id
                and key[1] == len(turn.reports)
                and key[2] == turn.end
                and key[3] == turn.resume
            ):
                keys.append(key)
                continue
        keys.append(_turn_key(turn))
    return keys, start


def _rename_line(stamp: str, title: str) -> str:
    return _dumps({"kind": "rename", "title": title, "modifiedAt": stamp})


def _turn_line(stamp: str, turn: TurnRecord) -> str:
    return _dumps({"kind": "turn", "modifiedAt": stamp, "turn": turn.to_json()})


def _replace(directory: Path, path: Path, text: str) -> None:
    """Temp file + rename: a crash mid-write leaves the old log whole."""
    fd, temp = tempfile.mkstemp(dir=directory, prefix=".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _header_line(conversation: Conversation) -> str:
    """The log's first line: what never changes after the start, and the time it was started.

    A rename is a line of its own, so renaming a long chat appends one line.
    """
    data = conversation.to_json(turns=False)
    data.pop("renamed", None)
    data["modifiedAt"] = data["createdAt"]
    return _dumps({"kind": "conversation", **data})
