"""The interfaces plugins implement, as ``typing.Protocol`` classes.

A port is what the core asks of a plugin; it never hands a plugin a
connection, a ``serverSeq`` or an action envelope. Methods may be plain or
``async``; the core awaits what is awaitable. These classes describe shape
only: a plugin need not inherit from them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ahpcore.sessions.contract import Backend

__all__ = [
    "AutomationStore",
    "Backend",
    "ChangeScope",
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


@dataclass(frozen=True)
class ChangeScope:
    """What one changeset compares, as the core resolved it from the channel URI.

    ``name`` is the scope part of ``<sessionUri>/changeset/<scope>``. ``before``
    and ``after`` are marks the port itself answered from ``mark()``: ``after``
    None means the directory as it is now. ``uncommitted`` ignores both (it is
    the tree against the port's own notion of the last commit).
    """

    name: str
    kind: str  # "uncommitted", "session", "turn" or "compare"
    before: str | None = None
    after: str | None = None


@runtime_checkable
class ChangesPort(Protocol):
    """Changesets of a session's directory and the operations on them.

    Directories are local paths (the session's first working directory). The
    core owns the channels, subscriptions and turn bookkeeping; the port only
    reads and acts on the tree.
    """

    async def catalogue(self, directory: str) -> Sequence[Mapping[str, JSON]]:
        """The changesets a session in ``directory`` offers: ``Changeset`` entries whose
        ``uriTemplate`` is the scope alone (``uncommitted``, ``turn/{turnId}``, ...);
        the core prefixes ``<sessionUri>/changeset/``. Empty when nothing is tracked there."""
        ...

    async def mark(self, directory: str) -> str | None:
        """A handle on the directory as it is now, to compare against later (a turn's start)."""
        ...

    async def keep(self, directory: str, label: Sequence[str], mark: str) -> None:
        """Keep ``mark`` under ``label`` (session id, turn id, ``start``/``end``, or session
        id and ``first``) so that it outlives the host."""
        ...

    async def recall(self, directory: str, label: Sequence[str]) -> str | None:
        """The mark kept under ``label``, or None."""
        ...

    async def forget(self, directory: str, label: Sequence[str]) -> None:
        """Let go of every mark kept under labels starting with ``label`` (a disposed session)."""
        ...

    async def files(self, directory: str, scope: ChangeScope) -> Sequence[Mapping[str, JSON]]:
        """The scope's rows (``ChangesetFile``), keyed by ``id``."""
        ...

    async def operations(
        self, directory: str, scope: ChangeScope, context: Mapping[str, JSON]
    ) -> Sequence[Mapping[str, JSON]]:
        """The scope's ``ChangesetOperation`` list. ``context`` carries ``busy`` (a turn
        runs), ``title`` (the session's) and ``spoken`` (any turn was ever started)."""
        ...

    async def invoke(
        self,
        directory: str,
        scope: ChangeScope,
        params: Mapping[str, JSON],
        context: Mapping[str, JSON],
    ) -> Mapping[str, JSON]:
        """Run ``invokeChangesetOperation``; the answer is its result. Raises
        ``ahpcore.protocol.ProtocolError`` to refuse."""
        ...

    def serves(self, uri: str) -> bool:
        """Whether ``uri`` is one of the port's own (the before side of an edit)."""
        ...

    async def read(self, params: Mapping[str, JSON]) -> Mapping[str, JSON]:
        """``resourceRead`` of a URI ``serves`` claimed."""
        ...

    async def watch(self, directory: str, moved: Callable[[], None]) -> None:
        """Call ``moved`` whenever the tree may have moved under the core; runs until
        cancelled, and is only started while somebody watches a changeset there."""
        ...

    async def facts(self, directory: str) -> Mapping[str, JSON] | None:
        """What ``_meta.git`` says about a session in ``directory``, or None."""
        ...


@runtime_checkable
class WorktreesPort(Protocol):
    """Isolated working trees for sessions that ask for one (``isolation: worktree``)."""

    async def create(
        self,
        repository: str,
        name: str,
        *,
        include: str | Sequence[str] | None = None,
        symlink: str | Sequence[str] | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> str:
        """Make a tree of ``repository`` on branch ``name`` and return its path.

        ``include`` and ``symlink`` are ``worktreeIncludeFiles`` and
        ``worktreeSymlinkFolders``: .gitignore patterns (a list, or one
        comma-separated string) for the git-ignored files to copy in and the
        git-ignored folders to link, best effort. ``progress`` is told each step,
        for ``root/progress``. Raises ValueError naming what is wrong.
        """
        ...

    async def remove(self, tree: str, *, force: bool = False) -> bool:
        """Take a clean tree off the disk, keeping its branch; True when it went.
        A tree with somebody's work in it stays (False) unless ``force``."""
        ...


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
