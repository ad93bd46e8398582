"""The moments of a session's life that the core's services and plugins take part in.

Each moment is a hook (``ahpcore.hookspecs``, ``ahp_session_creating`` and the
rest), so services and plugins subscribe the same way and pluggy decides the
order: ``tryfirst``, ``trylast``, and otherwise the order plugins load in. The
host runs the implementations one after another, awaiting each before the next
starts. This module holds what a moment hands its subscribers and the
``Lifecycle`` the session machinery calls; it knows nothing of how the
subscribers are found.

The moments, in the order a session meets them:

1. ``session_creating``: ``createSession`` passed its checks and nothing is made
   yet. A subscriber may change the folders (``SessionCreation.params``) and say
   how to undo what it made, should the session then be refused. Raising
   refuses the session.
2. ``session_created``: the session is ready, saved and announced.
3. ``channel_subscribing``: a client is about to be handed a channel's snapshot
   (a changeset is read again first).
4. ``turn_starting``: a turn is about to go to the agent; a subscriber may run
   it itself (``!command``) and say so.
   ``tool_confirming``: within a turn, the agent asks to confirm a tool call; a
   subscriber may approve or deny it before the person is asked.
5. ``resource_written``: a client wrote a file through ``resourceWrite``.
6. ``session_disposing``: ``disposeSession`` stopped the session's chats; the
   backend has not deleted it yet.
7. ``session_disposed``: the session is gone from the host, its store and the
   listing.

Listing rows are decorated by ``ahp_session_rows``, the one hook called per
page.
"""

from __future__ import annotations

import json
import logging
import shlex
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ahpcore.awaitables import resolve
from ahpcore.ports.backend import Agent, TurnInput, TurnReporter

log = logging.getLogger(__name__)

Undo = Callable[[], Awaitable[None]]


@dataclass
class SessionCreation:
    """A ``createSession`` about to be carried out."""

    #: The session's URI.
    session: str
    #: The request's params; a subscriber may replace ``workingDirectories``.
    params: dict[str, Any]
    #: Tell the requester how far the creation got (``root/progress``, when it asked).
    progress: Callable[[str], None]
    #: What the session's ``_meta`` starts with, there before it is announced (its owner).
    meta: dict[str, Any] = field(default_factory=dict)
    #: Whether its folders are this machine's (``Abilities.local_folders``): a subscriber
    #: that makes something of them here (a worktree) leaves a session elsewhere alone.
    local_folders: bool = True
    _undo: list[Undo] = field(default_factory=list)

    @property
    def config(self) -> Mapping[str, Any]:
        """The session config the client asked for (``params.config``)."""
        return self.params.get("config") or {}

    def undo(self, work: Undo) -> None:
        """Run ``work`` if the session is refused after this moment (latest first)."""
        self._undo.append(work)

    async def refused(self) -> None:
        """The session was not made: take back what subscribers made for it."""
        while self._undo:
            work = self._undo.pop()
            try:
                await work()
            except Exception:
                log.exception("could not take back what was made for %s", self.session)


@dataclass(frozen=True)
class TurnStart:
    """A turn about to go to a chat's agent."""

    session: str
    chat: str
    provider: str
    #: The session's working directories (URIs).
    working_directories: tuple[str, ...]
    turn: TurnInput
    #: Where a subscriber that runs the turn itself reports what happened.
    report: TurnReporter
    #: The chat's live agent (its optional ``ran`` takes a ``!command``'s output).
    agent: Agent | None


#: The ``toolKind`` of a tool that runs a shell command line (``_meta.toolKind``).
TERMINAL_KIND = "terminal"


@dataclass
class ToolConfirmation:
    """A tool call the agent asks to confirm, before anyone is asked.

    A subscriber decides with ``approve(reason)`` or ``deny(reason)``; the first to
    decide wins and the person is not asked. ``reason`` says who decided and why (a
    rule's name): it is logged, a denial shows it to clients as the call's
    ``reasonMessage``, and an approval marks the call ``confirmed: "setting"``.
    """

    session: str
    chat: str
    provider: str
    turn_id: str
    call_id: str
    tool_name: str
    #: The call's ``_meta.toolKind`` as its backend started it (``terminal``, ``read``,
    #: ``search`` ...), or None when it gave none.
    tool_kind: str | None
    #: The input as the backend reported it (usually JSON text).
    tool_input: str | None
    invocation_message: str
    #: The shell command line, when the tool runs one (``tool_kind`` is ``terminal``
    #: and its input names a ``command``), else None.
    command: str | None = None
    approved: bool | None = None
    reason: str = ""
    decided_by: str | None = None

    @property
    def decided(self) -> bool:
        return self.approved is not None

    def approve(self, reason: str) -> None:
        """Let the call run without asking; ``reason`` says what allowed it."""
        self._decide(True, reason)

    def deny(self, reason: str) -> None:
        """Refuse the call without asking; ``reason`` tells clients and the agent why."""
        self._decide(False, reason)

    def _decide(self, approved: bool, reason: str) -> None:
        if self.approved is None:  # the first decision stands
            self.approved, self.reason = approved, reason


def command_of(tool_kind: str | None, tool_input: str | None) -> str | None:
    """The command line a terminal tool's input names: ``{"command": "..."}`` (Claude's
    Bash, pi's bash, most ACP agents), a list of words, or plain text."""
    if tool_kind != TERMINAL_KIND or not tool_input:
        return None
    try:
        data = json.loads(tool_input)
    except ValueError:
        return tool_input.strip() or None
    if isinstance(data, dict):
        data = data.get("command", data.get("cmd"))
    if isinstance(data, list) and data and all(isinstance(word, str) for word in data):
        return shlex.join(data)
    return (data.strip() or None) if isinstance(data, str) else None


class Lifecycle(Protocol):
    """What the session machinery calls at each moment (the host implements it)."""

    async def session_creating(self, creation: SessionCreation) -> None: ...

    async def session_created(self, session: str) -> None: ...

    async def channel_subscribing(self, channel: str) -> None: ...

    async def turn_starting(self, start: TurnStart) -> bool: ...

    async def tool_confirming(self, confirmation: ToolConfirmation) -> None: ...

    async def resource_written(self, uri: str) -> None: ...

    async def session_disposing(self, session: str) -> None: ...

    async def session_disposed(self, session: str, folder: str | None) -> None: ...


class HookSource(Protocol):
    """Where a hook's implementations come from (``ahpcore.plugins.PluginManager``)."""

    def implementations(self, hook: str) -> list[Any]:
        """Each implementation of ``hook``, in calling order: ``impl.plugin`` is its
        plugin's name, ``impl(**kwargs)`` calls it alone and returns its answer."""
        ...


class HookLifecycle:
    """``Lifecycle`` over the ``ahp_*`` lifecycle hooks: one implementation at a time,
    each answer awaited before the next implementation is called."""

    def __init__(self, hooks: HookSource) -> None:
        self._hooks = hooks

    async def _each(self, hook: str, *, strict: bool, **kwargs: Any) -> None:
        for impl in self._hooks.implementations(hook):
            try:
                await resolve(impl(**kwargs))
            except Exception:
                if strict:
                    raise
                log.exception("the %s plugin failed at %s", impl.plugin, hook)

    async def session_creating(self, creation: SessionCreation) -> None:
        await self._each("ahp_session_creating", strict=True, creation=creation)

    async def session_created(self, session: str) -> None:
        await self._each("ahp_session_created", strict=False, session=session)

    async def channel_subscribing(self, channel: str) -> None:
        await self._each("ahp_channel_subscribing", strict=False, channel=channel)

    async def turn_starting(self, start: TurnStart) -> bool:
        for impl in self._hooks.implementations("ahp_turn_starting"):
            if await resolve(impl(start=start)):
                return True
        return False

    async def tool_confirming(self, confirmation: ToolConfirmation) -> None:
        for impl in self._hooks.implementations("ahp_tool_confirming"):
            try:
                await resolve(impl(confirmation=confirmation))
            except Exception:
                # A plugin that fails decides nothing: the next one, or the person, does.
                log.exception("the %s plugin failed at ahp_tool_confirming", impl.plugin)
                continue
            if confirmation.decided:
                confirmation.decided_by = impl.plugin
                return

    async def resource_written(self, uri: str) -> None:
        await self._each("ahp_resource_written", strict=False, uri=uri)

    async def session_disposing(self, session: str) -> None:
        await self._each("ahp_session_disposing", strict=False, session=session)

    async def session_disposed(self, session: str, folder: str | None) -> None:
        await self._each("ahp_session_disposed", strict=False, session=session, folder=folder)
