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


@runtime_checkable
class ResourcesPort(Protocol):
    """Reads and writes of ``file:`` and friends; ``params`` are the protocol's."""

    async def read(self, params: Mapping[str, JSON]) -> Mapping[str, JSON]: ...

    async def list(self, params: Mapping[str, JSON]) -> Mapping[str, JSON]: ...

    async def resolve(self, params: Mapping[str, JSON]) -> Mapping[str, JSON]: ...

    async def write(self, params: Mapping[str, JSON]) -> Mapping[str, JSON]: ...


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
