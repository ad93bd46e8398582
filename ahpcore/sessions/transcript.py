"""Rebuilding a past conversation: the ``TranscriptReader`` a backend reads its history into.

It drives the very ``TurnRecorder`` a live turn uses, with a sink that folds
each action into a detached chat state through the reducers, so a rebuilt turn
is the same shape as a live one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from ahpcore.reducers import reduce
from ahpcore.sessions.state import now_iso
from ahpcore.sessions.turns import TurnRecorder


class Rebuilder:
    def __init__(self, chat_uri: str, state: dict[str, Any]) -> None:
        self.chat_uri = chat_uri
        self.state = state
        self._turn: str | None = None

    def _chat(self, action: dict[str, Any]) -> None:
        self.state = reduce("chat", self.state, action)

    def _session(self, action: dict[str, Any]) -> None:
        pass  # a rebuilt turn's title or questions belong to the past, not the session's state

    def turn(
        self, turn_id: str, message: Mapping[str, Any], *, started_at: str | None = None
    ) -> TurnRecorder:
        if self._turn is not None:
            self.end_turn()
        self._turn = turn_id
        self._chat(
            {
                "type": "chat/turnStarted",
                "turnId": turn_id,
                "startedAt": started_at or now_iso(),
                "message": dict(message),
            }
        )
        return TurnRecorder(turn_id, chat=self._chat, session=self._session, chat_uri=self.chat_uri)

    def end_turn(
        self,
        *,
        state: Literal["complete", "cancelled", "error"] = "complete",
        duration_ms: int = 0,
        error: str | None = None,
    ) -> None:
        turn_id, self._turn = self._turn, None
        if turn_id is None:
            return
        if state == "error":
            part = {"kind": "error", "error": {"errorType": "error", "message": error or "failed"}}
            self._chat(
                {"type": "chat/error", "turnId": turn_id, "duration": duration_ms, "part": part}
            )
        elif state == "cancelled":
            self._chat({"type": "chat/turnCancelled", "turnId": turn_id, "duration": duration_ms})
        else:
            self._chat({"type": "chat/turnComplete", "turnId": turn_id, "duration": duration_ms})
