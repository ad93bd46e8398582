"""A tiny transcript: one JSON file per conversation, so past sessions can be listed and reopened.

A turn is kept as the list of things the agent reported, in order. Replaying
that list through a reporter rebuilds the turn exactly as a client saw it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Turn:
    id: str
    message: dict[str, Any]
    started_at: str
    #: ["text", delta] or ["tool", {call_id, input, invocation, approved, result}]
    events: list[list[Any]] = field(default_factory=list)
    #: "complete", "cancelled" or "error"; None while the turn runs.
    state: str | None = None
    duration_ms: int = 0


@dataclass
class Conversation:
    backend_id: str
    session_id: str
    created_at: str
    modified_at: str
    working_directories: list[str] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)

    @property
    def title(self) -> str:
        first = self.turns[0].message.get("text", "") if self.turns else ""
        return str(first)[:60] or "New conversation"


class Conversations:
    """Conversations kept as ``<directory>/<backend id>.json``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, backend_id: str) -> Path:
        # A backend id comes from the host; keep it to one safe file name.
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in backend_id)
        return self.directory / f"{safe}.json"

    def get(self, backend_id: str) -> Conversation | None:
        path = self._path(backend_id)
        if not path.exists():
            return None
        return _load(json.loads(path.read_text("utf-8")))

    def all(self) -> list[Conversation]:
        if not self.directory.exists():
            return []
        paths = sorted(self.directory.glob("*.json"))
        return [_load(json.loads(path.read_text("utf-8"))) for path in paths]

    def save(self, conversation: Conversation) -> None:
        conversation.modified_at = now()
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self._path(conversation.backend_id)
        partial = path.with_suffix(".json.tmp")
        partial.write_text(json.dumps(asdict(conversation), indent=1), "utf-8")
        partial.replace(path)  # never a half-written file

    def delete(self, backend_id: str) -> None:
        self._path(backend_id).unlink(missing_ok=True)


def _load(data: dict[str, Any]) -> Conversation:
    turns = [Turn(**turn) for turn in data.pop("turns", [])]
    return Conversation(**data, turns=turns)
