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

from ahpcore.ports.backend import Backend

__all__ = [
    "AutomationContext",
    "AutomationEvents",
    "AutomationsPort",
    "Backend",
    "ChangeScope",
    "ChangesPort",
    "Person",
    "ResourceChanges",
    "ResourceReader",
    "ResourceWatch",
    "ResourcesPort",
    "RpcHandler",
    "SessionStore",
    "TerminalEvents",
    "TerminalProcess",
    "TerminalSpec",
    "TerminalsPort",
    "UsersPort",
    "WorktreesPort",
]

JSON = Any
#: An extra JSON-RPC method: ``handler(connection, params)`` -> result (or awaitable).
RpcHandler = Callable[[Any, Mapping[str, Any] | None], Any | Awaitable[Any]]


@dataclass(frozen=True)
class TerminalSpec:
    """What the core asks a terminals port to start, already checked against the fence."""

    #: The terminal's channel URI, as the client chose it.
    uri: str
    #: A local directory inside what the requester may reach.
    cwd: str
    cols: int = 80
    rows: int = 24
    #: Run this command line with the shell's ``-c`` instead of an interactive shell.
    command: str | None = None
    #: The shell the connection asked for (root config ``defaultShell``), if any.
    shell: str | None = None


class TerminalEvents(Protocol):
    """How a terminals port reports what its process did (the core implements this).

    Reports arrive in the order things happened; the core turns them into
    ``terminal/*`` actions and coalesces output into frames.
    """

    async def output(self, data: bytes) -> None:
        """Bytes the process wrote, shell-integration marks already removed.

        May wait: that is how the core slows a flood down to what it can send.
        """
        ...

    def title(self, title: str) -> None:
        """The process set its title (OSC 0 or 2)."""
        ...

    def cwd(self, path: str) -> None:
        """The shell said where it is now (OSC 7), as a local path."""
        ...

    def detection_available(self) -> None:
        """Shell integration loaded: command boundaries will follow."""
        ...

    def command_started(self, command_line: str) -> None:
        """A command began executing (OSC 133 C)."""
        ...

    def command_finished(self, exit_code: int | None, duration_ms: int | None) -> None:
        """The command begun last finished (OSC 133 D)."""
        ...

    def exited(self, exit_code: int | None) -> None:
        """The process is gone and every byte it wrote has been reported."""
        ...


class TerminalProcess(Protocol):
    """One running terminal, as its port hands it to the core."""

    #: The shell's (or command's) own name, the title a terminal starts with.
    name: str
    #: Whether the port injects shell integration into this process.
    integrated: bool

    def write(self, data: bytes) -> None:
        """Keystrokes for the process (through the pty's line discipline)."""
        ...

    def resize(self, cols: int, rows: int) -> None:
        """Set the pty's size; the kernel sends SIGWINCH."""
        ...

    async def kill(self) -> None:
        """End every process the terminal started, not just its shell."""
        ...


@runtime_checkable
class TerminalsPort(Protocol):
    """Pseudoterminals the host opens.

    The core owns the terminal channels, claims, the fence, scrollback and the
    root list; a port only runs processes and reports what they did.
    """

    def unavailable(self) -> str | None:
        """Why this port cannot open terminals here (e.g. no pty on Windows), or None."""
        ...

    async def open(self, spec: TerminalSpec, events: TerminalEvents) -> TerminalProcess:
        """Start the process; raise ``OSError`` or ``ValueError`` with a reason if it cannot."""
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

    async def discard(self, tree: str) -> None:
        """Undo ``create`` for a session that was then refused: the tree goes whatever it
        holds, and its branch too when ``create`` made it. Best effort; a port without
        it gets ``remove(tree, force=True)``."""
        ...


@runtime_checkable
class SessionStore(Protocol):
    """What the host keeps about a session on top of its backend, keyed by session id."""

    async def get(self, session_id: str) -> Mapping[str, JSON] | None: ...

    async def put(self, session_id: str, record: Mapping[str, JSON]) -> None: ...

    async def delete(self, session_id: str) -> None: ...

    async def ids(self) -> Sequence[str]: ...


@dataclass(frozen=True)
class AutomationContext:
    """What the host knows when an automations port checks a definition."""

    #: The providers this host serves (``AgentInfo.provider``), in no particular order.
    providers: tuple[str, ...] = ()
    #: The event trigger types installed plugins offer now (``AutomationTriggerDefinition``).
    triggers: tuple[Mapping[str, JSON], ...] = ()
    #: Whose request this is, as ahp-users spells an owner; None on a host without users.
    owner: str | None = None


class AutomationEvents(Protocol):
    """What an automations port tells the core of its own accord (the core implements this)."""

    async def run_admitted(self, run: Mapping[str, JSON]) -> None:
        """A schedule came due and the port holds a new ``pending`` run for it on disk
        (``AutomationRunState``): the core starts it. Returns once it is under way."""
        ...

    def entry_changed(self, entry: Mapping[str, JSON]) -> None:
        """An entry moved with nobody asking (``nextRunAt``, ``runCount``, a disable
        condition met): the whole ``AutomationEntry`` as it is now, to publish."""
        ...


@runtime_checkable
class AutomationsPort(Protocol):
    """Automation definitions and their runs, kept durably, and the clock that fires them.

    The core owns the ``ahp-automations://`` channel, the run channels, the
    commands and the sessions a run makes; the port keeps definitions and runs
    (on disk before it returns: what a client was told survives a crash),
    checks and normalises definitions, and fires schedules. Entries and runs
    are the protocol's own shapes (``AutomationEntry``, ``AutomationRunState``).
    A definition the port will not keep raises ``ValueError`` whose text starts
    with the field at fault (``definition.triggers[1].id: ...``); an automation
    it does not hold raises ``KeyError``.
    """

    def capabilities(self) -> Mapping[str, JSON]:
        """What ``AutomationCapabilities`` says of the port: ``schedules`` (and its
        ``minIntervalMinutes``) and ``runHistoryLimit``. The core adds what it does."""
        ...

    async def start(self, events: AutomationEvents) -> Sequence[Mapping[str, JSON]]:
        """Open the store and answer every entry. A run the last host left ``pending``
        or ``running`` is ``failed`` from now on: nothing is running it any more."""
        ...

    async def schedule(self) -> None:
        """Fire schedules until cancelled, through ``events`` (the host runs it as long
        as it runs, with or without clients)."""
        ...

    async def create(
        self, resource: str, definition: Mapping[str, JSON], context: AutomationContext
    ) -> Mapping[str, JSON]:
        """Check, normalise and keep a new definition; the entry as held."""
        ...

    async def update(
        self, resource: str, changes: Mapping[str, JSON], context: AutomationContext
    ) -> Mapping[str, JSON]:
        """Apply an ``AutomationDefinitionPatch``; the entry as held."""
        ...

    async def remove(self, resource: str) -> bool:
        """Forget a definition and its runs; False when there was none."""
        ...

    async def entry(self, resource: str) -> Mapping[str, JSON] | None:
        """One entry as held now, or None."""
        ...

    async def admit(
        self, automation: str, origin: Mapping[str, JSON], request_id: str | None = None
    ) -> tuple[Mapping[str, JSON], bool]:
        """Keep a new ``pending`` run (``AutomationRunState``) and say True; with a
        ``request_id`` the automation has seen, the run made then and False."""
        ...

    async def run(self, resource: str) -> Mapping[str, JSON] | None:
        """A run by its URI, or None."""
        ...

    async def record(self, run: Mapping[str, JSON]) -> Mapping[str, JSON]:
        """Keep a run's new state (lifecycle, sessions); its automation's entry as held."""
        ...

    async def more_runs(self, automation: str, cursor: str | None) -> Mapping[str, JSON]:
        """Show one more page of older runs on the entry (``fetchAutomationRuns``); the
        entry as held. A cursor the entry did not offer raises ``ValueError``."""
        ...


@dataclass(frozen=True)
class Person:
    """Someone a users port knows: a name and a role (``admin``, ``member``, ``viewer``)."""

    name: str
    role: str

    @property
    def identity(self) -> str:
        """How the host names them on what they own or send: ``user:<name>``."""
        return f"user:{self.name}"


class UsersPort(Protocol):
    """The people who may connect, each with a token of their own and a role.

    Both methods are plain and may block briefly (a file read, a slow hash): the
    core calls ``person`` on a worker thread, ``named`` on the event loop after a
    ``person`` has been answered, so keep ``named`` to memory and a ``stat``.
    """

    def person(self, token: str) -> Person | None:
        """Whose connection ``token`` opens, or None when it is nobody's."""
        ...

    def named(self, name: str) -> Person | None:
        """``name`` as they are now (their role may have changed), or None once removed."""
        ...
