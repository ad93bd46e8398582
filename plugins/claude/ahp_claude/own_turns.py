"""Turns the CLI starts by itself, reported as turns the agent started.

When background work ends (a shell, a subagent) the CLI tells the model with
a system notification and answers it in a turn nobody asked for. Such a turn
shows as a message arriving while no turn of the host's runs. Its messages are
held until the chat gives the turn its go (``SessionReporter.begin_turn``),
then handed to the agent's usual translation as one turn of its own; its
message is what the CLI said of the work that ended, with origin
``systemNotification`` (``agent`` when the CLI named no such work).

A client may start a turn in the moment between: then the CLI takes the
client's prompt into the turn it started, so what was held goes into the
client's turn, which ends only once a result names its prompt.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import anyio

from ahp_claude import sdk
from ahp_claude.background import last_notification
from ahp_claude.records import SessionRecords
from ahp_claude.turn import ClaudeTurnFailed, Turn
from ahpcore.ports.backend import SessionReporter, TurnEnded, TurnOrigin, TurnReporter

log = logging.getLogger(__name__)

#: How long a turn the CLI began waits for the transcript entry it began at.
ENTRY_WAIT_SECONDS = 2.0


def begins_turn(message: Any) -> bool:
    """Whether a message outside any turn is the CLI starting one (not a subagent's word)."""
    if isinstance(message, sdk.SystemMessage):
        return message.subtype == "init"
    if isinstance(message, sdk.StreamEvent | sdk.AssistantMessage):
        return message.parent_tool_use_id is None
    return False


class OwnTurnsHost(Protocol):
    """What the CLI's own turns ask of the agent whose CLI began them (``agent.ClaudeAgent``)."""

    @property
    def closed(self) -> bool: ...

    def follow(self, report: TurnReporter, held: Sequence[Any]) -> Turn:
        """Make a turn reported through ``report`` the one the CLI's messages go to, ``held``
        first. It has ended already, failed, when the CLI is gone."""
        ...

    async def interrupt(self, running: Turn) -> None:
        """Stop the CLI's turn ``running`` and wait, briefly, until the CLI says it ended."""
        ...


class OwnTurns:
    def __init__(
        self,
        host: OwnTurnsHost,
        report: SessionReporter | None,
        records: SessionRecords,
        *,
        summaries: Callable[[], list[str]],
    ) -> None:
        self._host = host
        #: The chat's session reporter: where none is, the CLI's own turns go unreported.
        self._report = report
        self._records = records
        #: What background work that ended the CLI told the model of (taken once).
        self._summaries = summaries
        #: Messages of a turn the CLI started that has no go yet (None: no such turn).
        self._held: list[Any] | None = None
        self._waiting: anyio.CancelScope | None = None

    @property
    def holding(self) -> bool:
        """The CLI began a turn of its own that has not got its go yet."""
        return self._held is not None

    def take(self, message: Any) -> bool:
        """A message no host turn takes: True when it starts, or belongs to, a turn of the CLI's."""
        report = self._report
        if self._held is not None:
            self._held.append(message)
            return True
        if report is None or self._host.closed or not begins_turn(message):
            return False
        self._held = [message]
        report.start_soon(self._run)
        return True

    def host_turn(self, running: Turn, prompt_uuid: str) -> list[Any]:
        """A client's turn got the chat first: what was held is the start of ``running``."""
        held, self._held = self._held or [], None
        if self._waiting is not None:
            self._waiting.cancel()  # it has not said turnStarted: nothing to take back
            self._waiting = None
        if held:
            # The CLI answers the prompt inside the turn it began: wait for the result naming it.
            running.steering.add(prompt_uuid)
        return held

    async def _run(self) -> None:
        report = self._report
        if report is None or self._held is None:
            return  # a client's turn took what the CLI began before this got going
        said = self._summaries()
        origin: TurnOrigin = "systemNotification" if said else "agent"
        try:
            with anyio.CancelScope() as waiting:
                self._waiting = waiting
                async with report.begin_turn({"text": "\n".join(said)}, origin=origin) as turn:
                    self._waiting = None
                    await self._follow(turn, named=bool(said))
        except TurnEnded:
            log.debug("the chat closed before the CLI's own turn began")
            self._held = None
        finally:
            if self._waiting is waiting:
                self._waiting = None

    async def _follow(self, report: TurnReporter, *, named: bool) -> None:
        """Translate the CLI's turn as the agent translates a host's, to its result."""
        began = time.monotonic()
        held, self._held = self._held or [], None
        running = self._host.follow(report, held)
        # Marked open while it runs, as a host's turn is: cut off by a killed host, it then
        # rebuilds as interrupted, not as the finished answer the transcript may look like.
        entry = await self._name(running) if named else None
        try:
            await running.done.wait()
        except anyio.get_cancelled_exc_class():
            running.live = False
            with anyio.CancelScope(shield=True):
                await self._host.interrupt(running)
            raise
        finally:
            if entry is not None:
                took = int((time.monotonic() - began) * 1000)
                self._records.turn_end(entry, {"duration": took})
                self._records.turn_open(entry, False)
        if running.error is not None:
            raise ClaudeTurnFailed(running.error)

    async def _name(self, running: Turn) -> str | None:
        """Keep the transcript entry the turn began at, so a rebuild names it the same, and
        mark the turn open there; the entry's uuid, or None when it cannot be found."""
        records = self._records
        try:
            path = records.transcript_path()
            known = records.known_turns()
            entry = None
            # The CLI writes the entry as the turn begins, maybe just after its first words.
            with anyio.move_on_after(ENTRY_WAIT_SECONDS):
                while path is not None and not running.done.is_set():
                    entry = await anyio.to_thread.run_sync(last_notification, path)
                    if entry is not None and entry not in known:  # never an older turn's
                        break
                    entry = None
                    await anyio.sleep(0.05)
            if entry is None and path is not None:
                entry = await anyio.to_thread.run_sync(last_notification, path)
            if entry is None or entry in known:
                return None
            running.report.reference(entry)
            records.turn(entry, running.report.turn_id)
            if not running.done.is_set():
                records.turn_open(entry, True)
            return entry
        except Exception:  # the turn still happens; only its rebuild reads differently
            log.warning("keeping the entry of the CLI's own turn failed", exc_info=True)
            return None
