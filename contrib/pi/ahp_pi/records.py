"""What this host keeps beside pi's own session files: one small private JSON file.

pi keeps the conversation; the file says which of pi's session files each chat
is, and the ids, starts and endings of the turns clients knew, so a chat
rebuilt after a restart keeps them.
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
    """A turn as clients knew it."""

    id: str
    started_at: str
    state: str = "cancelled"  # until it is known to have ended otherwise
    duration_ms: int = 0
    error: str | None = None
    #: How many of pi's user messages the turn took (its prompt and each steering message).
    prompts: int = 1


@dataclass
class Link:
    backend_id: str
    session_id: str
    #: pi's session file, and pi's id for the session.
    file: str
    pi_id: str
    turns: list[TurnNote] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Link:
        turns = [TurnNote(**t) for t in data.get("turns") or ()]
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__ and k != "turns"}
        return cls(**fields, turns=turns)


class Records:
    """Every chat's link, and what pi said of itself last; in memory, saved whole."""

    def __init__(self, path: Path | None) -> None:
        self.file = PrivateJsonFile(path)
        self.links: dict[str, Link] = {}
        data = self.file.read()
        for backend_id, link in (data.get("links") or {}).items():
            try:
                self.links[backend_id] = Link.from_json(link)
            except TypeError:
                log.warning("%s: chat %s is not in a shape this host reads", path, backend_id)
        self.learned: dict[str, Any] = dict(data.get("learned") or {})

    def by_pi_id(self, pi_id: str) -> Link | None:
        # list(): worker threads read while the event loop may add a link.
        return next((link for link in list(self.links.values()) if link.pi_id == pi_id), None)

    async def save(self) -> None:
        await self.file.save(
            {
                "version": VERSION,
                "learned": self.learned,
                "links": {k: v.to_json() for k, v in self.links.items()},
            }
        )
