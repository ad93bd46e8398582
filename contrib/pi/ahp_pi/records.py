"""What this host keeps beside pi's own session files: one small private JSON file.

pi keeps the conversation; the file says which of pi's session files each chat
is, and the ids, starts and endings of the turns clients knew, so a chat
rebuilt after a restart keeps them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from ahpcore.api import write_private

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
        self.path = path
        self.links: dict[str, Link] = {}
        self.learned: dict[str, Any] = {}
        self._lock = anyio.Lock()
        self._load()

    def _load(self) -> None:
        if self.path is None:
            return
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError):
            log.warning("could not read %s; starting without it", self.path, exc_info=True)
            return
        for backend_id, link in (data.get("links") or {}).items():
            try:
                self.links[backend_id] = Link.from_json(link)
            except TypeError:
                log.warning("%s: chat %s is not in a shape this host reads", self.path, backend_id)
        self.learned = dict(data.get("learned") or {})

    def by_pi_id(self, pi_id: str) -> Link | None:
        # list(): worker threads read while the event loop may add a link.
        return next((link for link in list(self.links.values()) if link.pi_id == pi_id), None)

    async def save(self) -> None:
        """Write the file (made on the event loop, written in a worker thread)."""
        if self.path is None:
            return
        text = json.dumps(
            {
                "version": VERSION,
                "learned": self.learned,
                "links": {k: v.to_json() for k, v in self.links.items()},
            },
            indent=1,
        )
        # Shielded: a turn's ending is written even when a cancel ended it.
        with anyio.CancelScope(shield=True):
            async with self._lock:
                await anyio.to_thread.run_sync(write_private, self.path, text)
