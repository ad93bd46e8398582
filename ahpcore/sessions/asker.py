"""What a live turn waits on: approvals, answers, client tools and sign-ins.

Each wait raises the session's ``inputNeeded`` entry, holds a ``PendingAsk``
keyed by the id its answer will name, and takes the entry down when settled.
A wait settled because its turn ended raises ``TurnEnded`` in the backend.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ahpcore.ports.backend import Approval, InputAnswer, TurnEnded
from ahpcore.sessions.live import Hub, LiveChat, PendingAsk


class ChatAsker:
    """The ``Asker`` of one live chat."""

    def __init__(self, hub: Hub, chat: LiveChat, on_pending: Callable[[str], None]) -> None:
        self.hub = hub
        self.chat = chat
        #: Told the id of a question once it is up (edits are served while it waits).
        self.on_pending = on_pending

    def _tool_call(self, turn_id: str, call_id: str) -> dict[str, Any]:
        active = self.chat.state.get("activeTurn") or {}
        for part in active.get("responseParts", []):
            call = part.get("toolCall") if part.get("kind") == "toolCall" else None
            if call is not None and call.get("toolCallId") == call_id:
                return dict(call)
        raise TurnEnded(turn_id, f"tool call {call_id} is not in the running turn")

    async def _wait(self, ask_id: str, ask: PendingAsk, request: dict[str, Any]) -> Any:
        session = self.chat.session
        session.asks[ask_id] = ask
        self.hub.apply(session.uri, {"type": "session/inputNeededSet", "request": request})
        try:
            await ask.done.wait()
        finally:
            if session.asks.get(ask_id) is ask:
                session.asks.pop(ask_id, None)
            self.hub.apply(session.uri, {"type": "session/inputNeededRemoved", "id": ask_id})
        if ask.ended:
            raise TurnEnded(ask.turn_id or "", f"{ask.kind} {ask_id} was left unanswered")
        return ask.answer

    async def approval(self, turn_id: str, call_id: str) -> Approval:
        request = {
            "id": call_id,
            "chat": self.chat.uri,
            "kind": "toolConfirmation",
            "turnId": turn_id,
            "toolCall": self._tool_call(turn_id, call_id),
        }
        ask = PendingAsk("toolConfirmation", self.chat, turn_id=turn_id)
        answer = await self._wait(call_id, ask, request)
        if not isinstance(answer, Approval):
            raise TurnEnded(turn_id, f"tool call {call_id} got no answer")
        return answer

    async def answer(self, turn_id: str, request: Any) -> InputAnswer:
        ask_id = str(request["id"])
        entry = {"id": ask_id, "chat": self.chat.uri, "kind": "chatInput", "request": dict(request)}
        ask = PendingAsk("chatInput", self.chat, turn_id=turn_id)
        answer = await self._wait(ask_id, ask, entry)
        if not isinstance(answer, InputAnswer):
            raise TurnEnded(turn_id, f"question {ask_id} got no answer")
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
