"""A chat's runner: it owns the chat's agent and the lifecycle of its turns.

One turn runs at a time. A turn the client started while the previous one is
still winding down (its agent draining after a cancel) waits until that
``run_turn`` has returned; everything a turn leaves behind is cleaned up by
its own id, so an old turn ending late never touches a new one. A failure
inside a turn becomes that turn's ``chat/error`` and nothing more.
"""

from __future__ import annotations

import inspect
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio

from ahpcore.ports.backend import Agent, PendingEdit, TurnEnded, TurnInput
from ahpcore.sessions import state as states
from ahpcore.sessions.asker import ChatAsker
from ahpcore.sessions.live import Hub, LiveChat, Runner
from ahpcore.sessions.reporter import AgentReporter, ChildChats, EditServer, end_child
from ahpcore.sessions.turns import TurnRecorder

log = logging.getLogger(__name__)

TITLE_LENGTH = 80
#: How long tear-down waits for a cancelled turn to wind down before going on.
WIND_DOWN_SECONDS = 10.0


def turn_uuid(chat_uri: str, turn_id: str) -> str:
    """A UUID for a turn: its id when that is one, else one derived from it (stable)."""
    try:
        return str(uuid.UUID(turn_id))
    except ValueError:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{chat_uri}#{turn_id}"))


class ChatRunner:
    def __init__(self, chat: LiveChat, hub: Hub, edits: EditServer) -> None:
        self.chat = chat
        self.hub = hub
        self.edits = edits
        self.agent: Agent | None = None
        self.report = AgentReporter(self)
        self._starting = anyio.Lock()
        #: Held for the whole of a turn: the next waits for it.
        self._turn_lock = anyio.Lock()
        self.turn_id: str | None = None
        self.scope: anyio.CancelScope | None = None
        self.started = 0.0
        self.recorder: TurnRecorder | None = None
        #: Turns cancelled while still waiting for the one before to finish.
        self._dropped: set[str] = set()
        #: Being torn down: no turn starts any more.
        self.closing = False
        #: Child chats of subagents that run in the background: (their runner, when begun).
        self.background_children: dict[str, tuple[Runner, float]] = {}
        #: Work the agent runs of its own (``SessionReporter.start_soon``).
        self._background: set[anyio.CancelScope] = set()

    @property
    def running(self) -> bool:
        """A turn is running or waiting for the one before it to wind down."""
        return self.turn_id is not None or self._turn_lock.locked()

    # -- the agent -----------------------------------------------------------------
    async def start_agent(self, tokens: dict[str, str] | None = None) -> Agent:
        async with self._starting:
            if self.agent is None:
                start = self.hub.chat_start(self.chat, self.report, tokens)
                self.agent = await self.chat.session.backend.start(start)
                self.chat.existing = True
            return self.agent

    def start_soon(self, function: Callable[..., Awaitable[Any]], *args: Any) -> None:
        self.hub.spawn(self._own_work, function, args, name=f"work of {self.chat.uri}")

    async def _own_work(self, function: Callable[..., Awaitable[Any]], args: Any) -> None:
        with anyio.CancelScope() as scope:
            self._background.add(scope)
            try:
                await function(*args)
            except Exception:
                log.exception("background work of the agent of %s failed", self.chat.uri)
            finally:
                self._background.discard(scope)

    async def close_agent(self) -> None:
        for scope in list(self._background):
            scope.cancel()
        agent, self.agent = self.agent, None
        if agent is not None:
            with anyio.CancelScope(shield=True):
                try:
                    await agent.close()
                except Exception:
                    log.exception("closing the agent of %s failed", self.chat.uri)
        # Nothing reports for a background subagent once its agent is gone.
        for call_id, opened in list(self.background_children.items()):
            end_child(self, call_id, *opened, "cancelled")
        self.background_children.clear()

    # -- turns ---------------------------------------------------------------------
    def submit(self, turn_id: str, message: dict[str, Any], *, resume: bool = False) -> None:
        """Run a turn whose ``chat/turnStarted`` went out; it waits for the turn before it."""
        self.hub.spawn(self.run, turn_id, message, resume, name=f"turn {turn_id}")

    async def run(self, turn_id: str, message: dict[str, Any], resume: bool = False) -> None:
        async with self._turn_lock:
            if turn_id in self._dropped or not self._is_active(turn_id) or self.closing:
                self._dropped.discard(turn_id)
                return  # cancelled or torn down before it got going
            await self._run(turn_id, message, resume)
        self.take_next()

    def _is_active(self, turn_id: str) -> bool:
        active = self.chat.state.get("activeTurn")
        return (
            active is not None
            and active.get("id") == turn_id
            and self.chat.uri in self.chat.session.chats
        )

    def _recorder(self, turn_id: str) -> TurnRecorder:
        chat, session = self.chat, self.chat.session
        active = chat.state.get("activeTurn") or {}
        return TurnRecorder(
            turn_id,
            chat=lambda action: self._apply_if_live(turn_id, action),
            session=lambda action: self.hub.apply(session.uri, action),
            chat_uri=chat.uri,
            asker=ChatAsker(self.hub, chat, lambda ask_id: None),
            tool_owner=session.tool_owner,
            first_part=len(active.get("responseParts", [])) + 1,
            children=ChildChats(self, turn_id),
            edits_pending=self.serve_edits,
            confirming=lambda fields: self.hub.tool_confirming(chat, fields),
        )

    def serve_edits(self, call_id: str, edits: Any) -> list[dict[str, Any]]:
        """The FileEdit items of a pending approval in this chat, readable until it settles."""
        key = f"{self.chat.uri}#{call_id}"
        pending: list[PendingEdit] = list(edits)
        if not pending:
            self.edits.withdraw(key)
            return []
        return self.edits.offer(key, pending)

    def _apply_if_live(self, turn_id: str, action: dict[str, Any]) -> None:
        # What an agent says after its turn ended (draining after a cancel) is dropped.
        if action.get("turnId") is not None and not self._is_active(turn_id):
            return
        self.hub.apply(self.chat.uri, action)

    def _name_session(self, message: Mapping[str, Any]) -> None:
        """Name the session, and the chat, that have no title yet after the message's first line."""
        chat, session = self.chat, self.chat.session
        first_line = str(message.get("text", "")).strip().splitlines()
        if not first_line or not first_line[0].strip():
            return
        title = first_line[0][:TITLE_LENGTH]
        if not session.state.get("title", "").strip():
            self.hub.apply(session.uri, {"type": "session/titleChanged", "title": title})
        row = next(
            (r for r in session.state.get("chats", []) if r.get("resource") == chat.uri), None
        )
        if row is not None and not str(row.get("title") or "").strip():
            # As a rename does: the session's row of the chat is the title kept and listed.
            self.hub.apply(
                session.uri,
                {"type": "session/chatUpdated", "chat": chat.uri, "changes": {"title": title}},
            )

    async def _run(self, turn_id: str, message: dict[str, Any], resume: bool) -> None:
        chat, session = self.chat, self.chat.session
        if not resume:
            self._name_session(message)
        recorder = self._recorder(turn_id)
        self.turn_id, self.started, self.recorder = turn_id, time.monotonic(), recorder
        log.info("turn %s of %s started", turn_id, chat.uri)
        failure: BaseException | None = None
        with anyio.CancelScope() as scope:
            self.scope = scope
            try:
                agent = await self.start_agent()
                config = dict(session.state.get("config", {}).get("values", {}))
                tools = self.hub.client_tools(session)
                turn = TurnInput(
                    turn_id, message, config, tools, resume, uuid=turn_uuid(chat.uri, turn_id)
                )
                # A turn interceptor may run the turn itself (a !command).
                if not await self.hub.intercept_turn(chat, turn, recorder):
                    await agent.run_turn(turn, recorder)
            except TurnEnded:
                pass  # the backend gave up on a question its ended turn left open
            except Exception as exc:
                failure = exc
        self.scope = None
        outcome = "cancelled" if scope.cancelled_caught else "error" if failure else "complete"
        self._finish(turn_id, recorder, outcome, failure)

    def _finish(
        self, turn_id: str, recorder: TurnRecorder, outcome: str, failure: BaseException | None
    ) -> None:
        chat, session = self.chat, self.chat.session
        duration = int((time.monotonic() - self.started) * 1000)
        self.turn_id, self.recorder = None, None
        self.end_asks(turn_id)
        recorder.end_subagents("cancelled" if outcome == "cancelled" else outcome)
        if recorder.backend_ref is not None:
            chat.references[turn_id] = recorder.backend_ref
        log.info(
            "turn %s of %s ended: %s after %d ms%s",
            turn_id,
            chat.uri,
            outcome,
            duration,
            f" ({failure!r})" if failure else "",
        )
        if chat.uri not in session.chats:
            return
        if self._is_active(turn_id):
            if outcome == "cancelled":
                self.hub.apply(
                    chat.uri,
                    {"type": "chat/turnCancelled", "turnId": turn_id, "duration": duration},
                )
            elif failure is not None:
                error = {
                    "errorType": type(failure).__name__,
                    "message": str(failure) or repr(failure),
                }
                part: dict[str, Any] = {"kind": "error", "error": error}
                if session.backend.abilities.turn_resume:
                    part["resumable"] = True
                self.hub.apply(
                    chat.uri,
                    {"type": "chat/error", "turnId": turn_id, "duration": duration, "part": part},
                )
            else:
                self.hub.apply(
                    chat.uri, {"type": "chat/turnComplete", "turnId": turn_id, "duration": duration}
                )
        if chat.state.get("activity"):
            self.hub.apply(chat.uri, {"type": "chat/activityChanged"})
        session.modified_at = states.now_iso()
        self.hub.save_soon(session)

    def end_asks(self, turn_id: str | None = None) -> None:
        """Settle the questions of one turn (every turn of the chat for None) as ended."""
        for ask in list(self.chat.session.asks.values()):
            if ask.chat is self.chat and (turn_id is None or ask.turn_id == turn_id):
                ask.end()

    def cancel(self, turn_id: str) -> int | None:
        """Cancel a turn: the running one, or one still waiting its go. Its duration so far."""
        if self.turn_id == turn_id and self.scope is not None:
            self.scope.cancel()
            self.end_asks(turn_id)
            return int((time.monotonic() - self.started) * 1000)
        if self._turn_lock.locked() and self._is_active(turn_id):
            self._dropped.add(turn_id)
            return 0
        return None

    def take_next(self) -> None:
        """Start the next waiting message, steering first, then the queue in order."""
        chat = self.chat
        if self.closing or chat.state.get("activeTurn") is not None:
            return
        if chat.uri not in chat.session.chats or chat.parent is not None:
            return
        pending = chat.state.get("steeringMessage")
        if pending is None:
            queued = chat.state.get("queuedMessages") or []
            pending = queued[0] if queued else None
        if pending is None:
            return
        turn_id = str(uuid.uuid4())
        self.hub.apply(
            chat.uri,
            {
                "type": "chat/turnStarted",
                "turnId": turn_id,
                "startedAt": states.now_iso(),
                "message": pending["message"],
                "queuedMessageId": pending["id"],
            },
        )
        self.submit(turn_id, pending["message"])

    async def steer(self, message: Mapping[str, Any]) -> bool:
        """Hand a steering message to the running turn (a plain or an async ``steer``)."""
        steer = getattr(self.agent, "steer", None)
        if not callable(steer) or self.turn_id is None:
            return False
        taken = steer(message)
        if inspect.isawaitable(taken):
            taken = await taken
        return bool(taken)

    # -- turns the agent starts ------------------------------------------------------
    @asynccontextmanager
    async def agent_turn(
        self, message: Mapping[str, Any], origin: str
    ) -> AsyncIterator[TurnRecorder]:
        """A turn of the agent's own: waits its go, and ends as its block exits."""
        chat = self.chat
        async with self._turn_lock:
            if self.closing or chat.uri not in chat.session.chats:
                raise TurnEnded("", f"{chat.uri} is closed")
            turn_id = str(uuid.uuid4())
            said = {**dict(message), "origin": {"kind": origin}}
            self.hub.apply(
                chat.uri,
                {
                    "type": "chat/turnStarted",
                    "turnId": turn_id,
                    "startedAt": states.now_iso(),
                    "message": said,
                },
            )
            recorder = self._recorder(turn_id)
            self.turn_id, self.started, self.recorder = turn_id, time.monotonic(), recorder
            log.info("turn %s of %s started by the agent (%s)", turn_id, chat.uri, origin)
            failure: BaseException | None = None
            with anyio.CancelScope() as scope:
                self.scope = scope
                try:
                    yield recorder
                except TurnEnded:
                    pass
                except Exception as exc:
                    failure = exc
            self.scope = None
            outcome = "cancelled" if scope.cancelled_caught else "error" if failure else "complete"
            self._finish(turn_id, recorder, outcome, failure)
        self.take_next()

    # -- tear-down -----------------------------------------------------------------
    async def stop(self, *, for_good: bool = False) -> None:
        """Cancel the running turn, wait for it to wind down, then close the agent.

        ``for_good``: the chat is going away, so no further turn starts in it.
        """
        self.closing = self.closing or for_good
        if self.scope is not None:
            self.scope.cancel()
        self.end_asks()
        with anyio.move_on_after(WIND_DOWN_SECONDS, shield=True) as waited:
            async with self._turn_lock:
                pass
        if waited.cancelled_caught:
            log.warning("the turn of %s did not wind down when cancelled", self.chat.uri)
        await self.close_agent()
