"""Driving the scripted backend through the core's real TurnRecorder and reducers.

``Chat`` plays the core and a client for one chat: it starts turns with
``chat/turnStarted``, hands the backend a real ``TurnRecorder`` whose sinks
validate every action and fold it through the real reducers, answers
approvals, questions and client tools as a client would (dispatching the
client's own action first), and ends each turn the way the core does.
``StateReader`` is a ``TranscriptReader`` that rebuilds a chat state the same way.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import anyio

from ahp_scripted import Script, ScriptedAgent, ScriptedBackend
from ahpcore.ports.backend import Approval, ChatStart, InputAnswer, TurnInput
from ahpcore.protocol.wire import format_issues, validate_value
from ahpcore.reducers import reduce
from ahpcore.sessions.turns import TurnRecorder

NOW = datetime(2026, 1, 1, tzinfo=UTC)
STARTED = "2026-01-01T00:00:00.000Z"
CHAT_URI = "ahp-chat://default/c2NyaXB0ZWQ6L3Rlc3Q"
SESSION_URI = "scripted:/test"


def fixed_clock() -> datetime:
    return NOW


def backend(state_dir: Path | None, script: Script | None = None, **kwargs: Any) -> ScriptedBackend:
    return ScriptedBackend(state_dir, script, clock=fixed_clock, **kwargs)


def chat_start(backend_id: str = "conv-1", **kwargs: Any) -> ChatStart:
    fields: dict[str, Any] = {
        "session_id": "test",
        "chat_uri": CHAT_URI,
        "backend_id": backend_id,
        "working_directories": ("/work/project",),
        "config": {},
    }
    fields.update(kwargs)
    return ChatStart(**fields)


def checked(action: Mapping[str, Any]) -> dict[str, Any]:
    issues = validate_value("StateAction", action)
    assert not issues, f"invalid action {action}:\n{format_issues(issues)}"
    return dict(action)


def empty_chat() -> dict[str, Any]:
    return {
        "resource": CHAT_URI,
        "title": "",
        "status": 1,
        "modifiedAt": "2026-01-01T00:00:00Z",
        "turns": [],
    }


def empty_session() -> dict[str, Any]:
    return {
        "provider": "scripted",
        "title": "",
        "status": 1,
        "lifecycle": "ready",
        "activeClients": [],
        "chats": [],
    }


@dataclass
class Folded:
    """A chat state and a session state, and every action folded into them."""

    chat_state: dict[str, Any] = field(default_factory=empty_chat)
    session_state: dict[str, Any] = field(default_factory=empty_session)
    actions: list[dict[str, Any]] = field(default_factory=list)

    def chat(self, action: Mapping[str, Any]) -> None:
        self.actions.append(checked(action))
        self.chat_state = reduce("chat", self.chat_state, action)

    def session(self, action: Mapping[str, Any]) -> None:
        self.actions.append(checked(action))
        self.session_state = reduce("session", self.session_state, action)

    def begin(self, turn_id: str, message: Mapping[str, Any], started_at: str = STARTED) -> None:
        self.chat(
            {
                "type": "chat/turnStarted",
                "turnId": turn_id,
                "startedAt": started_at,
                "message": dict(message),
            }
        )

    def end(
        self,
        turn_id: str,
        state: Literal["complete", "cancelled", "error"],
        duration: int = 0,
        error: str | None = None,
    ) -> None:
        if state == "complete":
            self.chat({"type": "chat/turnComplete", "turnId": turn_id, "duration": duration})
        elif state == "cancelled":
            self.chat({"type": "chat/turnCancelled", "turnId": turn_id, "duration": duration})
        else:
            part = {"kind": "error", "error": {"errorType": "error", "message": error or ""}}
            self.chat({"type": "chat/error", "turnId": turn_id, "duration": duration, "part": part})

    @property
    def last_turn(self) -> dict[str, Any]:
        return self.chat_state["turns"][-1]

    def parts(self, turn: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        turn = turn if turn is not None else self.last_turn
        return list(turn["responseParts"])

    def text(self, turn: Mapping[str, Any] | None = None) -> str:
        return "".join(p["content"] for p in self.parts(turn) if p["kind"] == "markdown")

    def tool_calls(self, turn: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        return [p["toolCall"] for p in self.parts(turn) if p["kind"] == "toolCall"]

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [a for a in self.actions if a["type"] == kind]


def message(text: str) -> dict[str, Any]:
    return {"text": text, "origin": {"kind": "user"}}


@dataclass
class Question:
    kind: str
    key: str
    detail: Any
    answered: anyio.Event = field(default_factory=anyio.Event)
    value: Any = None


class Chat(Folded):
    """One chat with one scripted agent, driven as the core and a client would."""

    def __init__(
        self,
        agent: ScriptedAgent,
        *,
        approvals: list[Approval] | None = None,
        answers: list[InputAnswer] | None = None,
        client_results: list[Mapping[str, Any]] | None = None,
    ) -> None:
        super().__init__()
        self.agent = agent
        self.approvals = list(approvals or [])
        self.answers = list(answers or [])
        self.client_results = list(client_results or [])
        self.turn_id = ""
        self.pending: list[Question] = []
        self.asked = anyio.Event()
        self.error: BaseException | None = None
        self._ids = itertools.count(1)

    # -- the Asker the recorder waits on ---------------------------------------------
    async def _wait(self, question: Question, preset: list[Any]) -> Any:
        if preset:
            self._answer(question, preset.pop(0))
        else:
            self.pending.append(question)
            self.asked.set()
            self.asked = anyio.Event()
        await question.answered.wait()
        return question.value

    async def approval(self, turn_id: str, call_id: str) -> Approval:
        value: Approval = await self._wait(Question("approval", call_id, turn_id), self.approvals)
        return value

    async def answer(self, turn_id: str, request: Mapping[str, Any]) -> InputAnswer:
        value: InputAnswer = await self._wait(
            Question("ask", str(request["id"]), request), self.answers
        )
        return value

    async def client_tool(self, turn_id: str, call_id: str, client_id: str) -> Mapping[str, Any]:
        value: Mapping[str, Any] = await self._wait(
            Question("client", call_id, client_id), self.client_results
        )
        return value

    def _answer(self, question: Question, value: Any) -> None:
        """Dispatch what the answering client would, then wake the backend."""
        if question.kind == "approval":
            approval: Approval = value
            action: dict[str, Any] = {
                "type": "chat/toolCallConfirmed",
                "turnId": self.turn_id,
                "toolCallId": question.key,
                "approved": approval.approved,
            }
            if approval.approved:
                action["confirmed"] = "user-action"
                if approval.edited_input is not None:
                    action["editedToolInput"] = approval.edited_input
            else:
                action["reason"] = approval.reason or "denied"
            self.chat(action)
        elif question.kind == "ask":
            answer: InputAnswer = value
            self.chat(
                {
                    "type": "chat/inputCompleted",
                    "requestId": question.key,
                    "response": answer.response,
                    "answers": dict(answer.answers),
                }
            )
        else:
            self.chat(
                {
                    "type": "chat/toolCallComplete",
                    "turnId": self.turn_id,
                    "toolCallId": question.key,
                    "result": dict(value),
                }
            )
        question.value = value
        question.answered.set()

    async def question(self) -> Question:
        """The next question nobody has answered yet (waits for one)."""
        with anyio.fail_after(5):
            while not self.pending:
                await self.asked.wait()
        return self.pending[0]

    def reply(self, value: Any) -> None:
        self._answer(self.pending.pop(0), value)

    # -- turns -----------------------------------------------------------------------
    def recorder(self, turn_id: str) -> TurnRecorder:
        return TurnRecorder(
            turn_id=turn_id,
            chat=self.chat,
            session=self.session,
            chat_uri=CHAT_URI,
            asker=self,
            tool_owner=lambda name: name.split("__", 1)[0] if "__" in name else None,
        )

    async def turn(self, text: str, turn_id: str | None = None) -> str:
        """Run one turn to its end as the core would; returns how it ended."""
        turn_id = turn_id or f"t{next(self._ids)}"
        self.turn_id = turn_id
        self.begin(turn_id, message(text))
        with anyio.fail_after(10):
            return await self.run(TurnInput(turn_id, message(text)))

    async def run(self, turn: TurnInput) -> str:
        try:
            await self.agent.run_turn(turn, self.recorder(turn.turn_id))
        except anyio.get_cancelled_exc_class():
            self.end(turn.turn_id, "cancelled")
            raise
        except Exception as exc:
            self.error = exc
            self.end(turn.turn_id, "error", error=str(exc))
            return "error"
        self.end(turn.turn_id, "complete")
        return "complete"


class StateReader(Folded):
    """A ``TranscriptReader`` that folds a rebuilt conversation into a chat state."""

    def __init__(self) -> None:
        super().__init__()
        self._turn = ""

    def turn(
        self, turn_id: str, message: Mapping[str, Any], *, started_at: str | None = None
    ) -> TurnRecorder:
        self._turn = turn_id
        self.begin(turn_id, message, started_at or STARTED)
        return TurnRecorder(
            turn_id=turn_id, chat=self.chat, session=self.session, chat_uri=CHAT_URI
        )

    def end_turn(
        self,
        *,
        state: Literal["complete", "cancelled", "error"] = "complete",
        duration_ms: int = 0,
        error: str | None = None,
    ) -> None:
        self.end(self._turn, state, duration_ms, error)


async def rebuilt(backend: ScriptedBackend, backend_id: str = "conv-1") -> StateReader:
    reader = StateReader()
    assert await backend.read_transcript(backend_id, reader)
    return reader
