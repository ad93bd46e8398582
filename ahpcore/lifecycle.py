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
5. ``resource_written``: a client wrote a file through ``resourceWrite``.
6. ``session_disposing``: ``disposeSession`` stopped the session's chats; the
   backend has not deleted it yet.
7. ``session_disposed``: the session is gone from the host, its store and the
   listing.

Listing rows are decorated by ``ahp_session_rows``, the one hook called per
page.
"""

from __future__ import annotations

import logging
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


class Lifecycle(Protocol):
    """What the session machinery calls at each moment (the host implements it)."""

    async def session_creating(self, creation: SessionCreation) -> None: ...

    async def session_created(self, session: str) -> None: ...

    async def channel_subscribing(self, channel: str) -> None: ...

    async def turn_starting(self, start: TurnStart) -> bool: ...

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

    async def resource_written(self, uri: str) -> None:
        await self._each("ahp_resource_written", strict=False, uri=uri)

    async def session_disposing(self, session: str) -> None:
        await self._each("ahp_session_disposing", strict=False, session=session)

    async def session_disposed(self, session: str, folder: str | None) -> None:
        await self._each("ahp_session_disposed", strict=False, session=session, folder=folder)
