"""Sessions and chats while the host holds them: their channels, their runners and the
questions running turns wait on, plus ``Hub``, the narrow view of the host those pieces get,
and ``Runner``, what they use of a chat's runner."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

from ahpcore.engine.channels import Channel
from ahpcore.lifecycle import ToolConfirmation
from ahpcore.ports.backend import Agent, Backend, ChatStart, SessionReporter, TurnReporter


class Hub(Protocol):
    """What a chat's runner and the action handlers need of the host, and no more."""

    def apply(self, uri: str, action: dict[str, Any]) -> dict[str, Any] | None: ...

    def spawn(
        self, function: Callable[..., Coroutine[Any, Any, Any]], *args: Any, name: str | None = None
    ) -> None: ...

    def save_soon(self, session: LiveSession, *, within: float = 0.0) -> None: ...

    def chat_start(
        self, chat: LiveChat, report: SessionReporter, tokens: dict[str, str] | None
    ) -> ChatStart: ...

    def client_tools(self, session: LiveSession) -> list[dict[str, Any]]: ...

    async def intercept_turn(self, chat: LiveChat, turn: Any, report: Any) -> bool:
        """Offer a turn to the host's turn interceptors; True when one of them ran it."""
        ...

    async def tool_confirming(self, chat: LiveChat, fields: dict[str, Any]) -> ToolConfirmation:
        """Offer a tool call asking for confirmation to the plugins before the person."""
        ...

    def child_chat(self, parent: LiveChat, call_id: str, title: str) -> LiveChat:
        """A chat a subagent runs in, made and announced under its parent's session."""
        ...


class Runner(Protocol):
    """What the host's pieces use of a chat's runner (``ChatRunner`` is the one there is).

    Declared here, beside ``Hub``, so a chat can hold its runner while the runner
    module, which builds on this one, stays above it.
    """

    @property
    def chat(self) -> LiveChat: ...

    @property
    def hub(self) -> Hub: ...

    @property
    def agent(self) -> Agent | None:
        """The chat's live agent, once started."""
        ...

    @property
    def turn_id(self) -> str | None:
        """The turn running now."""
        ...

    @property
    def running(self) -> bool:
        """A turn is running or waiting for the one before it to wind down."""
        ...

    @property
    def background_children(self) -> dict[str, tuple[Runner, float]]:
        """Child chats of subagents running in the background: (their runner, when begun)."""
        ...

    async def start_agent(self, tokens: dict[str, str] | None = None) -> Agent: ...

    def start_soon(self, function: Callable[..., Awaitable[Any]], *args: Any) -> None: ...

    def submit(self, turn_id: str, message: dict[str, Any], *, resume: bool = False) -> None: ...

    def cancel(self, turn_id: str) -> int | None: ...

    def take_next(self) -> None: ...

    async def steer(self, message: Mapping[str, Any]) -> bool: ...

    def agent_turn(
        self, message: Mapping[str, Any], origin: str
    ) -> AbstractAsyncContextManager[TurnReporter]: ...

    def end_asks(self, turn_id: str | None = None) -> None: ...

    def serve_edits(self, call_id: str, edits: Any) -> list[dict[str, Any]]: ...

    async def stop(self, *, for_good: bool = False) -> None: ...


@dataclass(eq=False)
class PendingAsk:
    """One question a running turn waits on, keyed by the id its answer names."""

    kind: str  # toolConfirmation | chatInput | toolClientExecution | toolAuthentication
    chat: LiveChat
    client_id: str | None = None
    turn_id: str | None = None
    #: The protected resource a sign-in waits on (toolAuthentication).
    resource: str | None = None
    done: anyio.Event = field(default_factory=anyio.Event)
    answer: Any = None
    #: Settled because its turn ended, not because anybody answered.
    ended: bool = False

    def settle(self, answer: Any) -> None:
        if not self.done.is_set():
            self.answer = answer
            self.done.set()

    def end(self) -> None:
        """Its turn ended: the waiting backend hears ``TurnEnded``."""
        if not self.done.is_set():
            self.ended = True
            self.done.set()


@dataclass(eq=False)
class LiveChat:
    uri: str
    session: LiveSession
    backend_id: str
    channel: Channel
    #: Owns the chat's agent and turns; set by the registry as the chat is made.
    runner: Runner = field(init=False)
    #: Turns older than the snapshot window, oldest first.
    older_turns: list[dict[str, Any]] = field(default_factory=list)
    #: Did a backend already hold this conversation (reopened rather than new)?
    existing: bool = False
    fork_from: tuple[str, str] | None = None
    side_of: tuple[str, str] | None = None
    #: Turn id -> the backend's own reference for it, kept in the store.
    references: dict[str, str] = field(default_factory=dict)
    #: A subagent's chat: (parent chat URI, tool call id). It has no agent of its own.
    parent: tuple[str, str] | None = None

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
    #: The annotations on its ``<uri>/annotations`` channel (kept in the store), whether or
    #: not a client opened the channel yet.
    annotations: list[dict[str, Any]] = field(default_factory=list)

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
