"""A pi session file told to a ``TranscriptReader``, turn by turn.

Each user message begins a turn (with as many more as the turn took through
steering); assistant messages and tool results are told through the same
``TurnView`` a live turn uses. A turn takes the id, start and ending this host
noted for it live, in order; one this host never saw (a session pi ran on its
own) gets an id derived from pi's entry id, stable across restarts.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ahp_pi.records import TurnNote
from ahp_pi.view import TurnView, message_text
from ahpcore.ports.backend import TranscriptReader


def _ms(stamp: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp() * 1000
    except ValueError:
        return None


class Replay:
    def __init__(self, reader: TranscriptReader, notes: Sequence[TurnNote], pi_id: str) -> None:
        self.reader = reader
        self.notes = list(notes)
        self.pi_id = pi_id
        self.count = 0
        self.view: TurnView | None = None
        self.note: TurnNote | None = None
        self.left = 0  # user messages the open turn still takes (steering)
        self.first: str | None = None
        self.last: str | None = None

    def tell(self, entries: Sequence[Mapping[str, Any]]) -> None:
        for entry in entries:
            kind = entry.get("type")
            if kind == "message":
                self._message(entry)
            elif kind == "compaction" and self.view is not None:
                self.view.report.notification(
                    "pi compacted the conversation", meta={"ahp.compaction": "summary"}
                )
            if self.view is not None:
                self.last = str(entry.get("timestamp") or self.last or "")
        self._end()

    def _message(self, entry: Mapping[str, Any]) -> None:
        message = entry.get("message") or {}
        role = message.get("role")
        if role == "user":
            if self.view is not None and self.left > 0:
                self.left -= 1  # a steering message, taken into the running turn
                return
            self._end()
            self._begin(entry, message_text(message.get("content")))
        elif self.view is None:
            return  # before any prompt (or what pi ran itself): not a turn
        elif role == "assistant":
            self.view.assistant_message(message)
        elif role == "toolResult":
            self.view.tool_result(
                str(message.get("toolCallId")),
                str(message.get("toolName") or "tool"),
                message.get("content"),
                is_error=bool(message.get("isError")),
            )

    def _begin(self, entry: Mapping[str, Any], text: str) -> None:
        note = self.notes[self.count] if self.count < len(self.notes) else None
        self.count += 1
        turn_id = (
            note.id
            if note
            else str(uuid.uuid5(uuid.NAMESPACE_URL, f"pi:{self.pi_id}/{entry.get('id')}"))
        )
        started = note.started_at if note else str(entry.get("timestamp") or "") or None
        report = self.reader.turn(
            turn_id, {"text": text, "origin": {"kind": "user"}}, started_at=started
        )
        self.view = TurnView(report)
        self.note = note
        self.left = note.prompts - 1 if note else 0
        self.first = self.last = str(entry.get("timestamp") or "")

    def _end(self) -> None:
        view, note = self.view, self.note
        if view is None:
            return
        view.finish()
        if note is not None and note.state in ("complete", "cancelled", "error"):
            state, error, duration = note.state, note.error, note.duration_ms
        else:
            state = "error" if view.error else "cancelled" if view.aborted else "complete"
            error = view.error
            began, ended = _ms(self.first), _ms(self.last)
            duration = int(ended - began) if began is not None and ended is not None else 0
        self.reader.end_turn(
            state=state,  # type: ignore[arg-type]
            duration_ms=max(duration, 0),
            error=error if state == "error" else None,
        )
        self.view = None
        self.note = None
