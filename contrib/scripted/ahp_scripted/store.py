"""Conversations kept as one JSON file each, written atomically, read back after a restart."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ahp_scripted.transcript import Report

log = logging.getLogger(__name__)

#: Bumped when the file layout changes incompatibly.
FORMAT = 1


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

    def to_json(self) -> dict[str, Any]:
        return {
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
            "turns": [turn.to_json() for turn in self.turns],
        }

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


class ConversationStore:
    """Open conversations by backend id, each kept in a file under ``directory``.

    Without a directory conversations live in memory only (tests that need no
    files). One ``Conversation`` object per backend id is shared by the agent
    running it and the backend's truncate and delete.
    """

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self._open: dict[str, Conversation] = {}

    def path(self, backend_id: str) -> Path:
        if self.directory is None:
            raise RuntimeError("this store keeps conversations in memory only")
        # Any backend id becomes a safe file name; the id itself is kept inside.
        return self.directory / f"{quote(backend_id, safe='-_.')}.json"

    def get(self, backend_id: str) -> Conversation | None:
        found = self._open.get(backend_id)
        if found is not None or self.directory is None:
            return found
        path = self.path(backend_id)
        if not path.exists():
            return None
        conversation = self._read(path)
        self._open[backend_id] = conversation
        return conversation

    @staticmethod
    def _read(path: Path) -> Conversation:
        try:
            return Conversation.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}: not a scripted conversation file: {exc}") from None

    def save(self, conversation: Conversation) -> None:
        self._open[conversation.backend_id] = conversation
        if self.directory is None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        target = self.path(conversation.backend_id)
        text = json.dumps(conversation.to_json(), indent=1, ensure_ascii=False, default=_plain)
        # Temp file + rename: a crash mid-write leaves the old file whole.
        fd, temp = tempfile.mkstemp(dir=self.directory, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, target)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise

    def delete(self, backend_id: str) -> None:
        self._open.pop(backend_id, None)
        if self.directory is not None:
            self.path(backend_id).unlink(missing_ok=True)

    def all(self) -> list[Conversation]:
        """Every conversation kept, open or on disk; unreadable files are logged and skipped."""
        found = dict(self._open)
        if self.directory is not None and self.directory.is_dir():
            for path in sorted(self.directory.glob("*.json")):
                try:
                    conversation = self._read(path)
                except ValueError as exc:
                    log.warning("skipping %s", exc)
                    continue
                found.setdefault(conversation.backend_id, conversation)
        return list(found.values())
