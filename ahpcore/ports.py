"""The interfaces plugins implement, as ``typing.Protocol`` classes.

A port is what the core asks of a plugin; it never hands a plugin a
connection, a ``serverSeq`` or an action envelope. Methods may be plain or
``async``; the core awaits what is awaitable. These classes describe shape
only: a plugin need not inherit from them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from ahpcore.sessions.contract import Backend

__all__ = [
    "AutomationStore",
    "Backend",
    "ChangesPort",
    "ResourceChanges",
    "ResourceReader",
    "ResourceWatch",
    "ResourcesPort",
    "RpcHandler",
    "SessionStore",
    "TerminalsPort",
    "UsersDirectory",
    "WorktreesPort",
]

JSON = Any
#: An extra JSON-RPC method: ``handler(connection, params)`` -> result (or awaitable).
RpcHandler = Callable[[Any, Mapping[str, Any] | None], Any | Awaitable[Any]]


@runtime_checkable
class TerminalsPort(Protocol):
    """Ptys the host opens for clients."""

    async def create(self, uri: str, params: Mapping[str, JSON]) -> None: ...

    async def dispose(self, uri: str) -> None: ...

    async def release_session(self, session: str) -> None:
        """Dispose of every terminal the session claimed (the session is being disposed)."""
        ...


#: One batch of changes a watch saw: ``[{"uri": ..., "type": "added"|"updated"|"deleted"}]``.
ResourceChanges = Sequence[Mapping[str, JSON]]
#: Asked before anything else for ``resourceRead``: the protocol's result, or None to pass.
ResourceReader = Callable[
    [Mapping[str, JSON]], Mapping[str, JSON] | Awaitable[Mapping[str, JSON] | None] | None
]


@runtime_checkable
class ResourceWatch(Protocol):
    """A running watcher; ``close()`` stops it without blocking (the last subscriber left)."""

    def close(self) -> None: ...


@runtime_checkable
class ResourcesPort(Protocol):
    """The ``resource*`` family on URIs the host serves itself (``file:``).

    ``params`` are the protocol's params for the command of the same name
    (``read`` is ``resourceRead``, ...); each method returns the protocol's
    result or raises ``ProtocolError`` (-32009 outside what the port lets a
    connection reach, -32008 for nothing there, -32010 already there, -32011
    an ``ifMatch`` that no longer matches). URIs a connected client publishes
    never reach the port: the core forwards those to the client.
    """

    async def read(self, params: Mapping[str, JSON]) -> Mapping[str, JSON]: ...

    async def list(self, params: Mapping[str, JSON]) -> Mapping[str, JSON]: ...

    async def resolve(self, params: Mapping[str, JSON]) -> Mapping[str, JSON]: ...

    async def write(self, params: Mapping[str, JSON]) -> Mapping[str, JSON]: ...

    async def delete(self, params: Mapping[str, JSON]) -> Mapping[str, JSON]: ...

    async def mkdir(self, params: Mapping[str, JSON]) -> Mapping[str, JSON]: ...

    async def move(self, params: Mapping[str, JSON]) -> Mapping[str, JSON]: ...

    async def copy(self, params: Mapping[str, JSON]) -> Mapping[str, JSON]: ...

    async def request(self, params: Mapping[str, JSON]) -> Mapping[str, JSON]: ...

    async def watch(
        self, params: Mapping[str, JSON], emit: Callable[[ResourceChanges], None]
    ) -> ResourceWatch:
        """Start watching ``params["uri"]`` (``createResourceWatch`` params).

        Call ``emit`` on the host's event loop with each coalesced, non-empty
        batch; the core turns it into ``resourceWatch/changed`` on the watch's
        channel.
        """
        ...


@runtime_checkable
class ChangesPort(Protocol):
    """Changesets of a directory and the operations on them."""

    async def operations(self, changeset: str) -> Sequence[Mapping[str, JSON]]: ...

    async def invoke(self, params: Mapping[str, JSON]) -> Mapping[str, JSON]: ...


@runtime_checkable
class WorktreesPort(Protocol):
    """Isolated working trees for sessions that ask for one."""

    async def create(self, repository: str, name: str) -> str: ...

    async def remove(self, tree: str, *, force: bool = False) -> bool: ...


@runtime_checkable
class AutomationStore(Protocol):
    """Automations and their runs, behind ``ahp-automations://``."""

    async def list(self) -> Sequence[Mapping[str, JSON]]: ...


@runtime_checkable
class UsersDirectory(Protocol):
    """Who a token belongs to."""

    async def verify(self, token: str) -> str | None: ...


@runtime_checkable
class SessionStore(Protocol):
    """What the host keeps about a session on top of its backend, keyed by session id."""

    async def get(self, session_id: str) -> Mapping[str, JSON] | None: ...

    async def put(self, session_id: str, record: Mapping[str, JSON]) -> None: ...

    async def delete(self, session_id: str) -> None: ...

    async def ids(self) -> Sequence[str]: ...
