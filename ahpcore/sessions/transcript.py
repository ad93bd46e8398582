"""Rebuilding a past conversation: the ``TranscriptReader`` a backend reads its history into.

It drives the very ``TurnRecorder`` a live turn uses, with a sink that folds
each action into a detached chat state through the reducers, so a rebuilt turn
is the same shape as a live one. A subagent's turn is folded into a child
chat state the same way, under the URI the live turn gave it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from ahpcore.reducers import reduce
from ahpcore.sessions import state as states
from ahpcore.sessions.reporter import subagent_chat_uri
from ahpcore.sessions.turns import TurnRecorder


class Rebuilder:
    def __init__(self, chat_uri: str, state: dict[str, Any]) -> None:
        self.chat_uri = chat_uri
        self.state = state
        self._turn: str | None = None
        self._started: str | None = None
        #: Subagent chats met on the way, by URI: their rebuilt states, in order.
        self.children: dict[str, dict[str, Any]] = {}
        self._child_builders: dict[str, Rebuilder] = {}
        #: Each rebuilt turn's reporter, for the reference its backend gave it again.
        self._turns: dict[str, TurnRecorder] = {}
        #: A subagent's chat: the reporter of its one turn, which says how that turn ended.
        self._own: TurnRecorder | None = None

    def _chat(self, action: dict[str, Any]) -> None:
        self.state = reduce("chat", self.state, action)

    def _session(self, action: dict[str, Any]) -> None:
        pass  # a rebuilt turn's title or questions belong to the past, not the session's state

    def recorder(self, turn_id: str) -> TurnRecorder:
        return TurnRecorder(
            turn_id,
            chat=self._chat,
            session=self._session,
            chat_uri=self.chat_uri,
            children=RebuiltChildren(self),
        )

    def turn(
        self, turn_id: str, message: Mapping[str, Any], *, started_at: str | None = None
    ) -> TurnRecorder:
        if self._turn is not None:
            self.end_turn()
        self._turn = turn_id
        self._started = started_at or states.now_iso()
        self._chat(
            {
                "type": "chat/turnStarted",
                "turnId": turn_id,
                "startedAt": self._started,
                "message": dict(message),
            }
        )
        recorder = self._turns[turn_id] = self.recorder(turn_id)
        return recorder

    @property
    def references(self) -> dict[str, str]:
        """Turn id -> the backend's own id for it, as the transcript reported them."""
        return {t: r.backend_ref for t, r in self._turns.items() if r.backend_ref is not None}

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
        self.finish_children("cancelled")

    def finish_children(self, state: str) -> None:
        for uri, child in list(self._child_builders.items()):
            child.end_child(state)
            self.children[uri] = child.state
            self.children.update(child.children)
        self._child_builders.clear()

    def end_child(self, state: str) -> None:
        active = self.state.get("activeTurn")
        if active is None:
            return
        turn_id = active["id"]
        own = self._own
        duration = own.took_ms or 0 if own is not None else 0
        failed = "the call failed"
        if own is not None and own.cut_off is not None:
            state, failed = "error", own.cut_off
        if state == "complete":
            self._chat({"type": "chat/turnComplete", "turnId": turn_id, "duration": duration})
        elif state == "error":
            part = {"kind": "error", "error": {"errorType": "error", "message": failed}}
            self._chat(
                {"type": "chat/error", "turnId": turn_id, "duration": duration, "part": part}
            )
        else:
            self._chat({"type": "chat/turnCancelled", "turnId": turn_id, "duration": duration})
        self.finish_children("cancelled")


class RebuiltChildren:
    """Subagents of a rebuilt turn: child chat states folded like the parent's."""

    def __init__(self, parent: Rebuilder) -> None:
        self.parent = parent

    def open(
        self, turn_id: str, call_id: str, name: str, description: str
    ) -> tuple[str, TurnRecorder]:
        uri = subagent_chat_uri(self.parent.chat_uri, call_id)
        state = states.new_chat_state(
            uri,
            title=description or name,
            modified_at=self.parent._started or states.now_iso(),
            origin={"kind": "tool", "chat": self.parent.chat_uri, "toolCallId": call_id},
            working_directories=self.parent.state.get("workingDirectories") or (),
        )
        child = Rebuilder(uri, state)
        child._started = self.parent._started
        child._chat(
            {
                "type": "chat/turnStarted",
                "turnId": call_id,
                "startedAt": self.parent._started or states.now_iso(),
                "message": {"text": description, "origin": {"kind": "tool"}},
            }
        )
        self.parent._child_builders[uri] = child
        child._own = child.recorder(call_id)
        return uri, child._own

    def keep(self, call_id: str) -> None:
        """A transcript holds a background subagent's whole run: its call's end ends it."""

    def close(self, call_id: str, state: str) -> None:
        uri = subagent_chat_uri(self.parent.chat_uri, call_id)
        child = self.parent._child_builders.pop(uri, None)
        if child is not None:
            child.end_child(state)
            self.parent.children[uri] = child.state
            self.parent.children.update(child.children)
