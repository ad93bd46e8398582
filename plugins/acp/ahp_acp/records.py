"""What this host keeps of an ACP agent's sessions: one small private JSON file per agent.

The agent keeps its conversations itself (and replays one on ``session/load``);
the file holds what it does not say: which ACP session a chat is, the session's
title and folders for the catalogue, the ids clients knew its turns by, and
what the agent advertised last (models, modes, options), so a restarted host
lists them before the agent runs again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ahpcore.api import PrivateJsonFile

log = logging.getLogger(__name__)

VERSION = 1


@dataclass
class TurnNote:
    """A turn as clients knew it: its id, when it started, how it ended."""

    id: str
    started_at: str
    state: str = "cancelled"  # until it is known to have ended otherwise
    duration_ms: int = 0
    error: str | None = None


@dataclass
class ChatRecord:
    backend_id: str
    session_id: str
    acp_session_id: str
    created_at: str
    modified_at: str
    cwd: str
    working_directories: list[str] = field(default_factory=list)
    title: str = ""
    turns: list[TurnNote] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ChatRecord:
        turns = [TurnNote(**t) for t in data.get("turns") or ()]
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__ and k != "turns"}
        return cls(**fields, turns=turns)


class Records:
    """The chats of one agent, and what it advertised; in memory, saved whole on change."""

    def __init__(self, path: Path | None) -> None:
        self.file = PrivateJsonFile(path)
        self.chats: dict[str, ChatRecord] = {}
        data = self.file.read()
        for backend_id, chat in (data.get("chats") or {}).items():
            try:
                self.chats[backend_id] = ChatRecord.from_json(chat)
            except TypeError:
                log.warning("%s: chat %s is not in a shape this host reads", path, backend_id)
        self.learned: dict[str, Any] = dict(data.get("learned") or {})

    async def save(self) -> None:
        await self.file.save(
            {
                "version": VERSION,
                "learned": self.learned,
                "chats": {k: c.to_json() for k, c in self.chats.items()},
            }
        )
