"""What the host keeps of one session beside its transcript, while the session runs.

The transcript is the CLI's; what it does not say (turn ids clients know, how a
turn ended, whether it is still open, who answered a call) the backend keeps in
the session's sidecar (``ClaudeBackend.sidecar``), so a chat rebuilt later reads
as it did live. The parts of a live chat (its turns, the CLI's own turns, its
background subagents) record through ``SessionRecords``, bound to their session,
rather than through the whole backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


class Sidecar(Protocol):
    """The backend's record of its sessions (``backend.ClaudeBackend`` keeps it)."""

    def transcript_path(self, session_id: str) -> Path | None: ...

    def sidecar(self, session_id: str) -> dict[str, dict[str, Any]]: ...

    def record_turn(self, session_id: str, entry: str, turn_id: str) -> None: ...

    def turn_open(self, session_id: str, entry: str, running: bool) -> None: ...

    def record_turn_end(self, session_id: str, entry: str, facts: Mapping[str, Any]) -> None: ...

    def record_subagent(self, session_id: str, call_id: str, duration_ms: int) -> None: ...

    def record_decision(
        self, session_id: str, call_id: str, decision: Mapping[str, Any]
    ) -> None: ...


@dataclass(frozen=True)
class SessionRecords:
    """One session's part of the sidecar (see ``Sidecar`` for what each record means)."""

    sidecar: Sidecar
    session_id: str

    def transcript_path(self) -> Path | None:
        return self.sidecar.transcript_path(self.session_id)

    def known_turns(self) -> dict[str, Any]:
        """The turns kept so far: their transcript uuid to the turn id clients know."""
        return self.sidecar.sidecar(self.session_id)["turns"]

    def turn(self, entry: str, turn_id: str) -> None:
        self.sidecar.record_turn(self.session_id, entry, turn_id)

    def turn_open(self, entry: str, running: bool) -> None:
        self.sidecar.turn_open(self.session_id, entry, running)

    def turn_end(self, entry: str, facts: Mapping[str, Any]) -> None:
        self.sidecar.record_turn_end(self.session_id, entry, facts)

    def subagent(self, call_id: str, duration_ms: int) -> None:
        self.sidecar.record_subagent(self.session_id, call_id, duration_ms)

    def decision(self, call_id: str, decision: Mapping[str, Any]) -> None:
        self.sidecar.record_decision(self.session_id, call_id, decision)
