"""Subagents the CLI runs in the background, each in its child chat for as long as it runs.

An Agent (or Task) call with ``run_in_background`` returns at once and its
subagent works on, past the turn that started it. Its child chat's turn is
opened as a background one (``TurnReporter.subagent(..., background=True)``)
and kept here as a turn of its own: every later message naming the call as
its parent (text, tool calls, the approvals they ask for) goes there, until
the CLI says the task finished (``SessionReporter.subagent_ended``). Nothing
that goes wrong here reaches the parent's chat.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import anyio

from ahp_claude.records import SessionRecords
from ahp_claude.turn import Stream, Turn, TurnHost
from ahpcore.ports.backend import SessionReporter

log = logging.getLogger(__name__)

#: How long an approval waits for the message naming its call to be read.
CALL_WAIT_SECONDS = 1.0


class BackgroundSubagents:
    """The chat's background subagents (``turn.Subagents``), each followed as a turn."""

    def __init__(
        self,
        host: TurnHost,
        report: SessionReporter | None,
        records: SessionRecords,
        *,
        backgrounded: Callable[[str], bool | None],
        current: Callable[[], Turn | None],
    ) -> None:
        #: What the subagents' turns ask of the chat's agent.
        self._host = host
        #: The chat's session reporter: None where it has none, and then nothing runs on
        #: past its call in a chat of its own.
        self._report = report
        self._records = records
        #: What the CLI said of a call's task: whether it runs in the background (None:
        #: nothing yet).
        self._backgrounded = backgrounded
        #: The chat's turn running now, if any.
        self._current = current
        #: By the id of the call that started each.
        self._turns: dict[str, Turn] = {}

    def __contains__(self, call_id: object) -> bool:
        return call_id in self._turns

    @property
    def running(self) -> bool:
        """Some background subagent still runs."""
        return bool(self._turns)

    def backgrounds(self, call_id: str, asked: bool) -> bool:
        # What the CLI says of the task decides, not the call's input: this CLI backgrounds
        # an Agent call that did not ask for it, and its subagent goes on past the call.
        said = self._backgrounded(call_id)
        if said is None:
            said = asked
        return said and self._report is not None

    def opened(self, call_id: str, child: Stream) -> None:
        """The child chat of a background subagent opened: its messages go to it from now."""
        self._turns[call_id] = Turn(child.report, self._host, main=child)
        # Open until the CLI says it ended: if the host dies first, it rebuilds as interrupted.
        self._records.turn_open(call_id, True)

    def take(self, message: Any) -> bool:
        """True when ``message`` is a background subagent's (reported in its chat)."""
        turn = self._turns.get(getattr(message, "parent_tool_use_id", None) or "")
        if turn is None:
            return False
        try:
            turn.translate(turn.main, message)
        except Exception:  # the subagent's chat may go quiet; its parent's chat goes on
            log.warning("reporting a background subagent failed", exc_info=True)
        return True

    def progress(self, call_id: str, line: str) -> bool:
        """A background subagent's progress line is its chat's activity (its call completed)."""
        turn = self._turns.get(call_id)
        if turn is None:
            return False
        try:
            turn.report.activity(line)
        except Exception:
            log.debug("reporting a background subagent's progress failed", exc_info=True)
        return True

    def ended(self, call_id: str, success: bool) -> None:
        """The CLI said a background subagent finished: so does its child chat's turn."""
        turn = self._turns.pop(call_id, None)
        report = self._report
        if turn is None or report is None:
            return
        turn.done.set()
        took = int((time.monotonic() - turn.main.began) * 1000)
        self._records.subagent(call_id, took)
        self._records.turn_open(call_id, False)
        try:
            report.subagent_ended(call_id, success=success)
        except Exception:
            log.warning("ending a background subagent's chat failed", exc_info=True)

    def all_ended(self) -> None:
        """The CLI is gone: no subagent of it runs any more."""
        for call_id in list(self._turns):
            self.ended(call_id, False)

    async def turn_of(self, call_id: str) -> Turn | None:
        """The background subagent's turn a call that asks belongs to, if any.

        The CLI asks only after it sent the call, but the reader may not have
        taken that message yet: wait for it, briefly, while subagents run.
        """
        if not self._turns:
            return None
        running = self._current()
        with anyio.move_on_after(CALL_WAIT_SECONDS):
            while not any(
                call_id in t.calls for t in (running, *self._turns.values()) if t is not None
            ):
                await anyio.sleep(0.01)
        return next((t for t in self._turns.values() if call_id in t.calls), None)
