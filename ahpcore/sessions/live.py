"""Sessions and chats while the host holds them: their channels, agents, running turns and
the questions those turns are waiting on."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from ahpcore.engine.channels import Channel
from ahpcore.sessions.contract import Agent, Approval, Backend, InputAnswer

if TYPE_CHECKING:
    from ahpcore.sessions.manager import SessionManager


@dataclass(eq=False)
class PendingAsk:
    """One question a running turn waits on, keyed by the id its answer names."""

    kind: str  # toolConfirmation | chatInput | toolClientExecution
    chat: LiveChat
    client_id: str | None = None
    turn_id: str | None = None
    #: The protected resource a sign-in waits on (toolAuthentication).
    resource: str | None = None
    done: anyio.Event = field(default_factory=anyio.Event)
    answer: Any = None

    def settle(self, answer: Any) -> None:
        if not self.done.is_set():
            self.answer = answer
            self.done.set()


@dataclass(eq=False)
class LiveChat:
    uri: str
    session: LiveSession
    backend_id: str
    channel: Channel
    agent: Agent | None = None
    turn_id: str | None = None
    turn_scope: anyio.CancelScope | None = None
    turn_started: float = 0.0
    #: Turns older than the snapshot window, oldest first.
    older_turns: list[dict[str, Any]] = field(default_factory=list)
    #: Set while an agent is being started, so two turns do not start two agents.
    starting: anyio.Lock = field(default_factory=anyio.Lock)
    #: Did a backend already hold this conversation (reopened rather than new)?
    existing: bool = False
    fork_from: tuple[str, str] | None = None
    side_of: tuple[str, str] | None = None
    #: Set when the running turn has wound down (tear-down waits on it).
    turn_done: anyio.Event | None = None
    #: Being torn down: no further turn may start in it.
    closing: bool = False

    @property
    def state(self) -> dict[str, Any]:
        return self.channel.state


@dataclass(eq=False)
class LiveSession:
    id: str
    uri: str
    provider: str
    backend: Backend
    channel: Channel
    created_at: str
    modified_at: str
    working_directories: tuple[str, ...] = ()
    chats: dict[str, LiveChat] = field(default_factory=dict)
    asks: dict[str, PendingAsk] = field(default_factory=dict)
    last_summary: dict[str, Any] | None = None
    #: Who made the session: the creating client's id (kept in the store).
    owner: str | None = None

    @property
    def state(self) -> dict[str, Any]:
        return self.channel.state

    def tool_owner(self, tool_name: str) -> str | None:
        """The active client providing ``<clientId>__<name>`` (or a bare ``<name>`` only one has)."""
        client_id, sep, name = tool_name.partition("__")
        providers = [
            active.get("clientId")
            for active in self.state.get("activeClients", [])
            if any(
                tool.get("name") == (name if sep else tool_name) for tool in active.get("tools", [])
            )
        ]
        if sep:
            return client_id if client_id in providers else None
        return providers[0] if len(providers) == 1 else None


class ChatAsker:
    """The ``Asker`` of one live chat: raises the session's inputNeeded entry and waits."""

    def __init__(self, manager: SessionManager, chat: LiveChat) -> None:
        self.manager = manager
        self.chat = chat

    def _tool_call(self, turn_id: str, call_id: str) -> dict[str, Any]:
        active = self.chat.state.get("activeTurn") or {}
        for part in active.get("responseParts", []):
            call = part.get("toolCall") if part.get("kind") == "toolCall" else None
            if call is not None and call.get("toolCallId") == call_id:
                return dict(call)
        raise LookupError(f"turn {turn_id} has no tool call {call_id}")

    async def _wait(self, ask_id: str, ask: PendingAsk, request: dict[str, Any]) -> Any:
        session = self.chat.session
        session.asks[ask_id] = ask
        self.manager.apply(session.uri, {"type": "session/inputNeededSet", "request": request})
        try:
            await ask.done.wait()
        finally:
            session.asks.pop(ask_id, None)
            self.manager.apply(session.uri, {"type": "session/inputNeededRemoved", "id": ask_id})
        return ask.answer

    async def approval(self, turn_id: str, call_id: str) -> Approval:
        request = {
            "id": call_id,
            "chat": self.chat.uri,
            "kind": "toolConfirmation",
            "turnId": turn_id,
            "toolCall": self._tool_call(turn_id, call_id),
        }
        answer = await self._wait(call_id, PendingAsk("toolConfirmation", self.chat), request)
        assert isinstance(answer, Approval)
        return answer

    async def answer(self, request: Any) -> InputAnswer:
        ask_id = str(request["id"])
        entry = {"id": ask_id, "chat": self.chat.uri, "kind": "chatInput", "request": dict(request)}
        answer = await self._wait(ask_id, PendingAsk("chatInput", self.chat), entry)
        assert isinstance(answer, InputAnswer)
        return answer

    async def client_tool(self, turn_id: str, call_id: str, client_id: str) -> Any:
        request = {
            "id": call_id,
            "chat": self.chat.uri,
            "kind": "toolClientExecution",
            "turnId": turn_id,
            "clientId": client_id,
            "toolCall": self._tool_call(turn_id, call_id),
        }
        ask = PendingAsk("toolClientExecution", self.chat, client_id=client_id, turn_id=turn_id)
        return await self._wait(call_id, ask, request)

    async def sign_in(self, turn_id: str, call_id: str, resource: str) -> str:
        request = {
            "id": call_id,
            "chat": self.chat.uri,
            "kind": "toolAuthentication",
            "turnId": turn_id,
            "toolCall": self._tool_call(turn_id, call_id),
        }
        ask = PendingAsk("toolAuthentication", self.chat, turn_id=turn_id, resource=resource)
        token = await self._wait(call_id, ask, request)
        if not isinstance(token, str):
            raise RuntimeError(f"the sign-in for {resource} was abandoned")
        return token
