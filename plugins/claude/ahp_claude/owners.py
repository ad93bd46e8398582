"""Which CLI transcripts hold a chat of another session (a fork, a side chat, a second chat).

Every chat runs a CLI session of its own, and the CLI writes each to a transcript
beside the sessions' ones. Such a transcript is part of its session: listed as a
session of its own it could be reopened and disposed, deleting the chat's history.
So the backend keeps, under the host's state, the session each such transcript
belongs to, and where a fork began (its source and the entry it continues from),
so a fork whose CLI has not written its transcript yet still starts from there.

Blocking: reads and writes a small JSON file; safe to call from any thread.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Owner:
    #: The session the chat belongs to (None: a session of its own, once moved out).
    session: str | None
    #: A fork's source transcript and the entry it continues from (None: its end).
    fork_of: tuple[str, str | None] | None = None


class ChatOwners:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._owners: dict[str, Owner] | None = None
        #: Moves whenever the set of owned transcripts changes (listings cache on it).
        self.version = 0

    def _load(self) -> dict[str, Owner]:
        if self._owners is None:
            owners: dict[str, Owner] = {}
            try:
                kept = json.loads(self.path.read_text())
            except FileNotFoundError:
                kept = {}
            except (OSError, ValueError):
                # Hiding too little is better than refusing to start: say so and go on.
                log.warning("could not read which chats own which transcripts", exc_info=True)
                kept = {}
            for backend_id, facts in (kept if isinstance(kept, dict) else {}).items():
                if not isinstance(facts, dict):
                    continue
                session = facts.get("session")
                fork = facts.get("forkOf")
                fork_of = None
                if isinstance(fork, list) and len(fork) == 2 and isinstance(fork[0], str):
                    fork_of = (fork[0], fork[1] if isinstance(fork[1], str) else None)
                owners[backend_id] = Owner(session if isinstance(session, str) else None, fork_of)
            self._owners = owners
        return self._owners

    def _save(self, owners: dict[str, Owner]) -> None:
        kept: dict[str, Any] = {
            backend_id: {
                "session": owner.session,
                **({"forkOf": list(owner.fork_of)} if owner.fork_of else {}),
            }
            for backend_id, owner in owners.items()
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f"{self.path.name}.tmp")
        # Written whole and renamed, so a host killed mid-write keeps the previous list.
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(json.dumps(kept))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.path)

    def _set(self, backend_id: str, owner: Owner | None) -> None:
        owners = self._load()
        before = owners.get(backend_id)
        if before == owner:
            return
        if owner is None:
            del owners[backend_id]
        else:
            owners[backend_id] = owner
        if (before is not None and before.session) != (owner is not None and owner.session):
            self.version += 1
        self._save(owners)

    def get(self, backend_id: str) -> Owner | None:
        with self._lock:
            return self._load().get(backend_id)

    def session_of(self, backend_id: str) -> str | None:
        """The session whose chat ``backend_id`` is, if it is not a session of its own."""
        owner = self.get(backend_id)
        return owner.session if owner is not None else None

    def owned(self) -> frozenset[str]:
        """Every transcript that holds a chat of another session."""
        with self._lock:
            return frozenset(i for i, owner in self._load().items() if owner.session)

    def claim(
        self, backend_id: str, session: str, fork_of: tuple[str, str | None] | None = None
    ) -> None:
        """``backend_id`` is a chat of ``session``: kept before its CLI writes anything."""
        with self._lock:
            before = self._load().get(backend_id)
            if fork_of is None and before is not None:
                fork_of = before.fork_of  # a fork moved to another session is still one
            self._set(backend_id, Owner(session, fork_of))

    def release(self, backend_id: str) -> None:
        """``backend_id`` is a session of its own now (its chat moved out to one)."""
        with self._lock:
            before = self._load().get(backend_id)
            if before is not None:
                self._set(backend_id, Owner(None, before.fork_of) if before.fork_of else None)

    def forget(self, backend_id: str) -> None:
        """``backend_id``'s transcript was deleted."""
        with self._lock:
            if backend_id in self._load():
                self._set(backend_id, None)
