"""The backend: what the host asks of it is in ``ahpcore.ports.backend``.

The agent answers every message the same way, to show each part of the
contract once: it streams a reply, then asks to use a ``shout`` tool, which
needs a person's approval, and says the result. Replace ``answer`` with calls
to your model; keep reporting through ``report``, never by building protocol
actions yourself.

The methods that read or write files (``catalogue``, ``lookup``,
``read_transcript``, ``delete``, ``truncate``) are plain ``def``: the host
runs those in a worker thread, so blocking I/O there never stalls it. Every
``async def`` runs on the host's event loop and must not block.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from ahpcore.ports.backend import (
    Abilities,
    Approval,
    CatalogueRow,
    ChatStart,
    TranscriptReader,
    TurnEnded,
    TurnInput,
    TurnReporter,
)

from {{ cookiecutter.__package }}.conversations import Conversation, Conversations, Turn, now

#: The provider name: a session of this backend is ``{{ cookiecutter.__hyphenated }}:/<id>``.
PROVIDER = "{{ cookiecutter.__hyphenated }}"
TOOL = "shout"


class Said:
    """Reports to the host and writes the same events into the transcript."""

    def __init__(self, report: TurnReporter, turn: Turn) -> None:
        self.report = report
        self.turn = turn

    def text(self, delta: str) -> None:
        self.report.text(delta)
        self.turn.events.append(["text", delta])


async def answer(text: str, call_id: str, said: Said) -> None:
    """One turn of the agent: stream a reply, use a tool that needs approval, report the result."""
    report = said.report
    # Streaming: each piece reaches clients as soon as it is reported.
    for word in f"You said: {text}".split(" "):
        said.text(word + " ")
    tool_input = json.dumps({"text": text})
    invocation = f"Shout “{text}”"
    report.tool_start(call_id, TOOL, display_name="Shout", intention="Say it louder")
    report.tool_input(call_id, tool_input)
    event: dict[str, Any] = {"call_id": call_id, "input": tool_input, "invocation": invocation}
    said.turn.events.append(["tool", event])
    # Waits until a person approves or denies the call in a client.
    approval = await report.tool_approval(
        call_id, tool_input=tool_input, invocation_message=invocation
    )
    event["approved"] = approval.approved
    if not approval.approved:
        said.text("\n\nFine, I'll keep my voice down.")
        return
    loud = text.upper()
    event["result"] = loud
    report.tool_complete(
        call_id,
        success=True,
        past_tense_message=f"Shouted “{text}”",
        content=[{"type": "text", "text": loud}],
    )
    said.text(f"\n\n{loud}")


def replay(turn: Turn, report: TurnReporter) -> None:
    """Report a past turn again, the way it was reported live."""
    for kind, value in turn.events:
        if kind == "text":
            report.text(value)
            continue
        call_id = value["call_id"]
        report.tool_start(call_id, TOOL, display_name="Shout", intention="Say it louder")
        approved = value.get("approved")
        report.tool_decided(
            call_id,
            tool_input=value["input"],
            invocation_message=value["invocation"],
            # None: the turn ended while the call waited for an answer.
            approval=None if approved is None else Approval(approved=approved),
        )
        if approved:
            report.tool_complete(
                call_id,
                success=True,
                past_tense_message=f"Shouted “{json.loads(value['input'])['text']}”",
                content=[{"type": "text", "text": value["result"]}],
            )


class Agent:
    """The live agent behind one chat."""

    def __init__(self, backend: Backend, conversation: Conversation) -> None:
        self.backend = backend
        self.conversation = conversation

    async def run_turn(self, turn: TurnInput, report: TurnReporter) -> None:
        # The host's UUID for the turn is what a rebuilt turn must carry again.
        record = Turn(turn.uuid or turn.turn_id, dict(turn.message), now())
        self.conversation.turns.append(record)
        began = time.monotonic()
        record.state = "cancelled"  # unless it completes or fails below
        try:
            await answer(turn.text, f"{turn.turn_id}.{TOOL}", Said(report, record))
            record.state = "complete"
        except TurnEnded:
            raise  # cancelled while it waited for an answer: kept as cancelled
        except Exception:
            record.state = "error"
            raise  # the host ends the turn with the error
        finally:
            record.duration_ms = int((time.monotonic() - began) * 1000)
            self.backend.conversations.save(self.conversation)

    async def close(self) -> None:
        """Nothing to stop: the conversation is already on disk."""


class Backend:
    """The ``{{ cookiecutter.__hyphenated }}`` provider."""

    provider = PROVIDER
    abilities = Abilities(resume=True, list_sessions=True, delete=True)

    def __init__(self, directory: Path) -> None:
        self.conversations = Conversations(directory)

    def agents(self) -> Sequence[Mapping[str, Any]]:
        """What the root channel advertises (an ``AgentInfo``)."""
        return [
            {
                "provider": PROVIDER,
                "displayName": "{{ cookiecutter.plugin_name }}",
                "description": "{{ cookiecutter.description }}",
                "models": [{"id": "default", "provider": PROVIDER, "name": "Default"}],
            }
        ]

    async def start(self, start: ChatStart) -> Agent:
        conversation = self.conversations.get(start.backend_id)
        if conversation is None:
            if start.resume:
                raise LookupError(f"no conversation {start.backend_id!r} to reopen")
            created = now()
            conversation = Conversation(
                backend_id=start.backend_id,
                session_id=start.session_id,
                created_at=created,
                modified_at=created,
                working_directories=list(start.working_directories),
            )
            self.conversations.save(conversation)
        return Agent(self, conversation)

    def catalogue(
        self, *, limit: int | None = None, cursor: str | None = None, directory: str | None = None
    ) -> Sequence[CatalogueRow]:
        """Past sessions, newest first: what ``listSessions`` shows after a restart.

        Every row at once (a backend with many would page with ``limit`` and
        ``cursor``); ``directory`` keeps the sessions working in that folder.
        """
        rows = [
            _row(kept)
            for kept in self.conversations.all()
            if kept.backend_id == kept.session_id  # a session's own chat, not its extra chats
            and (directory is None or directory in kept.working_directories)
        ]
        return sorted(rows, key=lambda row: row.modified_at, reverse=True)

    def lookup(self, session_id: str) -> CatalogueRow | None:
        """One past session by id (the host reopening it), or None."""
        kept = self.conversations.get(session_id)
        return _row(kept) if kept is not None else None

    def read_transcript(self, backend_id: str, reader: TranscriptReader) -> bool:
        conversation = self.conversations.get(backend_id)
        if conversation is None:
            return False
        for turn in conversation.turns:
            replay(turn, reader.turn(turn.id, turn.message, started_at=turn.started_at))
            # A turn without an ending was cut short by a host that stopped.
            state: Literal["complete", "cancelled", "error"] = "cancelled"
            if turn.state == "complete" or turn.state == "error":
                state = turn.state
            reader.end_turn(state=state, duration_ms=turn.duration_ms)
        return True

    def delete(self, backend_id: str) -> None:
        self.conversations.delete(backend_id)

    def truncate(self, backend_id: str, turn_id: str | None) -> None:
        raise NotImplementedError("this backend does not truncate (abilities.truncate is False)")


def _row(kept: Conversation) -> CatalogueRow:
    return CatalogueRow(
        session_id=kept.session_id,
        title=kept.title,
        created_at=kept.created_at,
        modified_at=kept.modified_at,
        working_directories=tuple(kept.working_directories),
    )
