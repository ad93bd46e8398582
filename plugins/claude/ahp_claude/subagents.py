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
from typing import TYPE_CHECKING, Any

import anyio

from ahp_claude.turn_state import Stream, Turn

if TYPE_CHECKING:
    from ahp_claude.agent import ClaudeAgent

log = logging.getLogger(__name__)

#: How long an approval waits for the message naming its call to be read.
CALL_WAIT_SECONDS = 1.0


class BackgroundSubagents:
    def __init__(self, agent: ClaudeAgent) -> None:
        self.agent = agent
        #: By the id of the call that started each.
        self.turns: dict[str, Turn] = {}

    def opened(self, call_id: str, child: Stream) -> None:
        """The child chat of a background subagent opened: its messages go to it from now."""
        turn = Turn(child.report)
        turn.main = child
        self.turns[call_id] = turn
        # Open until the CLI says it ended: if the host dies first, it rebuilds as interrupted.
        agent = self.agent
        agent.backend.turn_open(agent.session_id, call_id, True)

    def take(self, message: Any) -> bool:
        """True when ``message`` is a background subagent's (reported in its chat)."""
        turn = self.turns.get(getattr(message, "parent_tool_use_id", None) or "")
        if turn is None:
            return False
        try:
            self.agent._translate(turn, turn.main, message)
        except Exception:  # the subagent's chat may go quiet; its parent's chat goes on
            log.warning("reporting a background subagent failed", exc_info=True)
        return True

    def progress(self, call_id: str, line: str) -> bool:
        """A background subagent's progress line is its chat's activity (its call completed)."""
        turn = self.turns.get(call_id)
        if turn is None:
            return False
        try:
            turn.report.activity(line)
        except Exception:
            log.debug("reporting a background subagent's progress failed", exc_info=True)
        return True

    def ended(self, call_id: str, success: bool) -> None:
        """The CLI said a background subagent finished: so does its child chat's turn."""
        turn = self.turns.pop(call_id, None)
        agent = self.agent
        report = agent.start.report
        if turn is None or report is None:
            return
        turn.done.set()
        took = int((time.monotonic() - turn.main.began) * 1000)
        agent.backend.record_subagent(agent.session_id, call_id, took)
        agent.backend.turn_open(agent.session_id, call_id, False)
        try:
            report.subagent_ended(call_id, success=success)
        except Exception:
            log.warning("ending a background subagent's chat failed", exc_info=True)

    def all_ended(self) -> None:
        """The CLI is gone: no subagent of it runs any more."""
        for call_id in list(self.turns):
            self.ended(call_id, False)

    async def turn_of(self, call_id: str) -> Turn | None:
        """The background subagent's turn a call that asks belongs to, if any.

        The CLI asks only after it sent the call, but the reader may not have
        taken that message yet: wait for it, briefly, while subagents run.
        """
        if not self.turns:
            return None
        running = self.agent._turn
        with anyio.move_on_after(CALL_WAIT_SECONDS):
            while not any(
                call_id in t.calls for t in (running, *self.turns.values()) if t is not None
            ):
                await anyio.sleep(0.01)
        return next((t for t in self.turns.values() if call_id in t.calls), None)
