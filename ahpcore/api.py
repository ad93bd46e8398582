"""What a plugin may use of the host: ``PluginHost``, and the helpers plugins share.

A startup hook (``ahp_backends``, ``ahp_changes``, ...) receives a
``PluginHost``. It is the whole of the host a plugin reaches: supervised
background work, the ports other plugins answered, the open sessions and their
folders, a listing row's ``_meta``, root config and the host's settings.
Everything else a plugin needs is a port Protocol (``ahpcore.ports``, the
backend contract in ``ahpcore.ports.backend``), the protocol's own data
(``ahpcore.protocol``) or a helper named here. ``docs/plugin-api.md`` is
generated from this module.
"""

from __future__ import annotations

import logging
import shlex
import uuid
from collections.abc import Awaitable, Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, cast

import anyio

from ahpcore.engine.channels import Channel
from ahpcore.engine.clients import Client
from ahpcore.engine.core import Engine
from ahpcore.engine.router import RequestDone, Router
from ahpcore.findings import Check
from ahpcore.logs import escape, redact
from ahpcore.ports import SessionStore
from ahpcore.protocol.errors import PERMISSION_DENIED, ProtocolError
from ahpcore.protocol.uris import ROOT_CHANNEL, file_uri, first_local_path, path_of_file_uri
from ahpcore.rpc.framing import dumps_weighed
from ahpcore.rpc.peer import PeerClosed
from ahpcore.services.terminals.commands import plain_text
from ahpcore.services.terminals.output import (
    DEFAULT_SCROLLBACK_BYTES,
    MAX_SCROLLBACK_BYTES,
    MIN_SCROLLBACK_BYTES,
    SCROLLBACK_KEY,
)
from ahpcore.sessions.calls import call, pausing, sorted_pausing
from ahpcore.sessions.folders import ENV_REACH, REACH_MACHINE, home_folder, too_wide
from ahpcore.sessions.turns import TurnRecorder
from ahpcore.settings import HostSettings
from ahpcore.store.private import (
    PrivateJsonFile,
    private_folder,
    private_sqlite,
    tighten_sqlite,
    write_private,
)
from ahpcore.tasks import Tasks, Work

if TYPE_CHECKING:
    from ahpcore.ports import ResourceReader
    from ahpcore.services.resources import ResourceService
    from ahpcore.services.terminals.output import LiveTerminal
    from ahpcore.services.terminals.service import TerminalService
    from ahpcore.services.users import UsersService
    from ahpcore.sessions.manager import SessionManager

log = logging.getLogger(__name__)

#: Where ``PluginHost.automation_event`` goes: (type, event, folder, details).
AutomationEventSink = Callable[[str, str, str | None, dict[str, Any]], None]
#: Looks for a trigger's events in folders (``host.look_in_automation_folders``).
FolderLook = Callable[[list[str]], Awaitable[None]]
#: What ``PluginHost.on_request`` is told: (the client's clientId or None, method).
RequestWatcher = Callable[[str | None, str], RequestDone | None]
#: What ``PluginHost.on_change`` is told: (channel URI, action).
ChangeWatcher = Callable[[str, Mapping[str, Any]], None]
#: Work for when the host stops: a function, or one returning an awaitable.
StopWork = Callable[[], Awaitable[None] | None]
#: ``InitializeResult`` fields the core writes itself; ``advertise`` leaves them alone.
CORE_INITIALIZE_FIELDS = frozenset({"protocolVersion", "serverSeq", "serverInfo", "snapshots"})

__all__ = [
    "DEFAULT_SCROLLBACK_BYTES",
    "ENV_REACH",
    "MAX_SCROLLBACK_BYTES",
    "MIN_SCROLLBACK_BYTES",
    "REACH_MACHINE",
    "SCROLLBACK_KEY",
    "Check",
    "HostMeasures",
    "HostSettings",
    "HostTerminal",
    "NoTerminals",
    "PluginHost",
    "PrivateJsonFile",
    "Stream",
    "TurnRecorder",
    "escape",
    "file_uri",
    "first_local_path",
    "home_folder",
    "path_of_file_uri",
    "pausing",
    "private_folder",
    "private_sqlite",
    "redact",
    "sorted_pausing",
    "tighten_sqlite",
    "too_wide",
    "write_private",
]


@dataclass(frozen=True)
class HostMeasures:
    """What the host carries at one moment (``host.measures()``), for telemetry."""

    #: Connections open now, and served since the host started.
    connections: int
    connections_made: int
    #: Sessions open on the host now.
    sessions: int
    #: Changes of state applied since the host started (each took a serverSeq).
    actions: int
    #: Bytes the replay buffer holds.
    replay_bytes: int
    #: Bytes each connection has yet to take (queued and held), by its clientId (the
    #: connection's id before it initialized).
    queued_bytes: Mapping[str, int]


class Stream:
    """A stateless channel a plugin serves (``host.open_stream``), such as ``ahp-otlp:``.

    A client subscribes to it like any channel and is answered with no snapshot;
    what the channel carries are notifications, with no ``serverSeq``, never
    buffered nor replayed. Each goes to a subscriber like any frame: a client too
    far behind is closed (``clientQueueBytes``), and nobody else waits for it.
    """

    def __init__(self, channel: Channel, close: Callable[[], None]) -> None:
        self._channel = channel
        self._close = close

    @property
    def uri(self) -> str:
        """The channel's URI."""
        return self._channel.uri

    @property
    def watched(self) -> bool:
        """Whether any client subscribes now: cheap enough to ask before any work."""
        return bool(self._channel.subscribers)

    def notify(self, method: str, params: Mapping[str, Any]) -> None:
        """Send notification ``method`` to every subscriber, ``params.channel`` the URI
        as that subscriber spelled it. Call it on the event loop."""
        subscribers = self._channel.subscribers
        if not subscribers:
            return
        frames: dict[str, tuple[str, int]] = {}
        for client, spelling in list(subscribers.items()):
            frame = frames.get(spelling)
            if frame is None:
                message = {
                    "jsonrpc": "2.0",
                    "method": method,
                    "params": {**params, "channel": spelling},
                }
                frame = frames[spelling] = dumps_weighed(message)
            client.deliver(self._channel.uri, *frame)

    def close(self) -> None:
        """Stop serving the channel; its subscribers are dropped."""
        self._close()


class NoTerminals(RuntimeError):
    """``host.open_terminal`` on a host that opens no terminals: no terminals port is
    installed, or the one installed cannot open any here. The message says which."""


#: How long ``HostTerminal.kill`` waits for the port to report the exit.
_KILL_WAIT_SECONDS = 10.0


class HostTerminal:
    """A terminal a plugin opened with ``host.open_terminal``: an ``ahp-terminal:``
    channel claimed by a session's chat, which clients subscribe to like any other.

    Its channel stays (exited) once the command ends, so a tool call may keep
    pointing at it; it goes with the session, or with ``dispose()``.
    """

    def __init__(self, service: TerminalService, live: LiveTerminal, title: str) -> None:
        self._service = service
        self._live = live
        #: What clients see it called (the command line unless named otherwise).
        self.title = title

    @property
    def uri(self) -> str:
        """The ``ahp-terminal:`` channel's URI: what a tool call's ``terminal`` content names."""
        return self._live.uri

    @property
    def exited(self) -> bool:
        """Whether the command ended and all its output was reported."""
        return self._live.feed.done.is_set()

    @property
    def exit_code(self) -> int | None:
        """The command's exit code once it exited; None before, or when it was killed."""
        return self._live.feed.exit_code

    @property
    def truncated(self) -> bool:
        """Whether the scrollback cap (``terminalScrollbackBytes``) dropped old output."""
        return self._live.feed.trimmed

    def output(self) -> str:
        """The output the terminal still holds, as plain text (no escape sequences,
        ``\\n`` line ends)."""
        self._live.feed.flush()
        return plain_text(self._live.feed.output_text())

    def write(self, data: str) -> None:
        """Type ``data`` into the terminal. Raises ``RuntimeError`` once it exited."""
        process = self._live.process
        if process is None or self.exited:
            raise RuntimeError(f"{self.uri} has exited")
        process.write(data.encode("utf-8"))

    async def wait(self) -> int | None:
        """Wait for the command to end; its exit code (None when killed)."""
        await self._live.feed.done.wait()
        return self._live.feed.exit_code

    async def kill(self) -> None:
        """End every process the command started; the channel stays, exited."""
        process = self._live.process
        if process is None or self.exited:
            return
        await process.kill()
        with anyio.move_on_after(_KILL_WAIT_SECONDS):
            await self._live.feed.done.wait()

    async def dispose(self) -> None:
        """Kill it and close its channel."""
        await self._service.dispose(self.uri)


class PluginHost:
    """The host as a plugin sees it.

    One is built per host and handed to every startup hook as ``host``; keep it
    for as long as the plugin lives. Every member is safe to call on the event
    loop and returns at once.
    """

    def __init__(
        self,
        *,
        engine: Callable[[], Engine],
        settings: HostSettings,
        tasks: Tasks,
        ports: Mapping[str, Any],
        plugin_names: Callable[[], list[str]],
        method_names: Callable[[], list[str]],
        session_store: Callable[[], SessionStore | None] = lambda: None,
        automation_event: AutomationEventSink | None = None,
        automation_looks: dict[str, FolderLook] | None = None,
        router: Router | None = None,
        initialize_fields: Callable[[], dict[str, Any]] | None = None,
        at_stop: Callable[[StopWork], None] | None = None,
        terminals: Callable[[], TerminalService | None] = lambda: None,
        sessions: Callable[[], SessionManager | None] = lambda: None,
        resources: Callable[[], ResourceService | None] = lambda: None,
        users: Callable[[], UsersService | None] = lambda: None,
    ) -> None:
        self._sessions = sessions
        self._users = users
        self._resources = resources
        # Asked when a plugin opens a terminal: the service is built after the plugins.
        self._terminals = terminals
        self._automation_event = automation_event
        self._automation_looks = automation_looks if automation_looks is not None else {}
        self._router = router
        self._initialize_fields = initialize_fields
        self._at_stop = at_stop
        #: Lower-cased URI -> the URI of a stream whose spelling is case-insensitive.
        self._folded: dict[str, str] = {}
        self._engine_of = engine
        self._tasks = tasks
        self._plugin_names = plugin_names
        self._method_names = method_names
        self._session_store = session_store
        self._settings = settings
        self._ports: Mapping[str, Any] = MappingProxyType(ports)

    @property
    def settings(self) -> HostSettings:
        """What the host was started with: ``state_dir`` (each plugin keeps its files in a
        folder of its own there), ``worktrees_root``, ``sessions`` and the rest. Read it;
        changing it changes nothing."""
        return self._settings

    @property
    def ports(self) -> Mapping[str, Any]:
        """The ports the plugins answered, by name (``terminals``, ``resources``,
        ``changes``, ``worktrees``), each as its plugin returned it. Read-only; a
        port is there once the hook that asks for it has been answered."""
        return self._ports

    @property
    def _engine(self) -> Engine:
        # Root config keys are asked for before the engine exists (they shape its
        # root state); everything else here is for later.
        return self._engine_of()

    # -- work ----------------------------------------------------------------------
    def spawn(self, function: Work, *args: Any, name: str | None = None) -> None:
        """Run ``await function(*args)`` for as long as the host runs.

        An exception in it is logged with ``name`` (what the work is for) and goes
        no further; the work is cancelled when the host stops. Raises
        ``RuntimeError`` before the host runs; while it stops, the work is dropped.
        """
        self._tasks.spawn(function, *args, name=name)

    @property
    def running(self) -> bool:
        """Whether ``spawn`` starts work now (the host runs and is not stopping)."""
        return self._tasks.running

    # -- what the host is ------------------------------------------------------------
    def plugin_names(self) -> list[str]:
        """The names of the plugins loaded, the core's own first."""
        return self._plugin_names()

    def method_names(self) -> list[str]:
        """Every JSON-RPC method the host answers, sorted."""
        return sorted(self._method_names())

    def config_table(self, name: str) -> Any:
        """This plugin's table of the config file (``[name]``), checked against the
        model it declared through ``ahp_config_tables``: the model's instance, or None
        when the file has no such table (then the plugin's own defaults hold; nothing
        builds the model, so a host with no config file never loads pydantic for it)."""
        return self._settings.config_tables.get(name)

    def root_config(self, key: str, default: Any = None) -> Any:
        """The value root config holds for ``key`` now, or ``default`` when none is set."""
        root = self._engine.channels.get(ROOT_CHANNEL)
        config = root.state.get("config") if root is not None else None
        values = config.get("values") if isinstance(config, dict) else None
        return values.get(key, default) if isinstance(values, dict) else default

    def automation_event(
        self,
        type: str,
        event: str,
        *,
        folder: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        """Say that ``event`` of the trigger ``type`` this plugin offers (through
        ``ahp_automation_triggers``) happened: every enabled automation with a trigger
        of that type selecting that event starts a run. ``folder`` (a local path)
        limits it to automations whose sessions work there; ``details`` is shown on
        the run as what happened (nothing secret). Does nothing on a host without
        automations."""
        if self._automation_event is not None:
            self._automation_event(type, event, folder, dict(details or {}))

    def look_in_automation_folders(self, type: str, look: FolderLook) -> None:
        """Have ``await look(folders)`` called every few seconds while the host runs, with
        the local folder (first working directory) of every enabled automation that has
        an event trigger of ``type``, this plugin's own (none: not called).

        For a trigger whose events happen in a folder whether or not a session is open
        there (a commit landing): ``look`` checks each folder and reports with
        ``automation_event``. Keep it cheap when nothing moved; an exception is logged
        and the next look comes as usual. One look per type: a second replaces it.
        """
        self._automation_looks[type] = look

    def at_stop(self, work: StopWork) -> None:
        """Run ``work()`` (awaited when it returns an awaitable) when the host stops,
        after the last connection: flush and stop what the plugin started."""
        if self._at_stop is None:
            raise RuntimeError("this host runs no work at stop")
        self._at_stop(work)

    # -- what clients are told -------------------------------------------------------
    def advertise(self, field: str, value: Any) -> None:
        """Answer every ``initialize`` from now on with ``field`` set to ``value``.

        ``field`` must be one the protocol's ``InitializeResult`` declares (the
        strict frame checks of ``ahpcore.testing`` refuse any other) and nobody has
        set yet (``telemetry``, ...); the core's own fields are refused, and so is a
        second plugin setting one field. Raises ``ValueError`` naming the field.
        """
        if self._initialize_fields is None:
            raise RuntimeError("this host answers no initialize")
        fields = self._initialize_fields()
        # Not checked against the generated models: loading them costs every start.
        if field in CORE_INITIALIZE_FIELDS:
            raise ValueError(f"{field!r} is not an InitializeResult field a plugin may set")
        if field in fields:
            raise ValueError(f"{field!r} is already advertised on this host")
        fields[field] = value

    def advertise_meta(self, key: str, value: Any) -> None:
        """Answer every ``initialize`` from now on with ``_meta[key]`` set to ``value``:
        a capability flag outside the protocol (VS Code reads ``vscode.*`` flags there).

        Each plugin adds its own keys; a key somebody set already is refused with
        ``ValueError`` naming it. Call it from a startup hook (``ahp_rpc_methods``,
        ``ahp_host_started``).
        """
        if self._initialize_fields is None:
            raise RuntimeError("this host answers no initialize")
        meta = self._initialize_fields().setdefault("_meta", {})
        if key in meta:
            raise ValueError(f"_meta[{key!r}] is already advertised on this host")
        meta[key] = value

    def open_stream(self, uri: str, *, kind: str = "stream", fold_case: bool = False) -> Stream:
        """Serve ``uri`` as a stateless channel (``Stream``) from now on.

        ``kind`` names the channel in the host's own figures (the inspector).
        ``fold_case``: a client may spell the URI in any case (each subscriber is
        still sent the spelling it used). Raises ``ValueError`` when the host
        already serves ``uri``.
        """
        engine = self._engine
        channel = engine.add_channel(uri, kind, {}, stateless=True)
        if fold_case:
            if not self._folded:
                engine.add_resolver(lambda spelling: self._folded.get(spelling.lower()))
            self._folded[uri.lower()] = uri

        def close() -> None:
            self._folded.pop(uri.lower(), None)
            engine.remove_channel(uri)

        return Stream(channel, close)

    # -- what happens ------------------------------------------------------------------
    def on_request(self, watcher: RequestWatcher) -> None:
        """Be told of every request a client makes, before it is answered:
        ``watcher(client_id, method)`` returns what to call once it is answered (with
        the exception it raised, or None), or None to hear no more of it. Called on
        the event loop for every request: return at once."""
        if self._router is None:
            raise RuntimeError("this host has no router to watch")

        def observer(client: Client, method: str) -> RequestDone | None:
            return watcher(client.client_id, method)

        self._router.observe(observer)

    def on_change(self, watcher: ChangeWatcher, *, types: Collection[str]) -> None:
        """Be told of every change of state by an action of one of ``types``, after it
        went out: ``watcher(channel_uri, action)``, on the event loop. Read the action;
        never change it."""

        def listener(channel: Channel, action: dict[str, Any], before: dict[str, Any]) -> None:
            watcher(channel.uri, action)

        self._engine.on_change(listener, types=types)

    def measures(self) -> HostMeasures:
        """What the host carries now: connections, sessions, actions since start, the
        replay buffer's and each connection's queued bytes. Call it on the event loop."""
        engine = self._engine
        queued: dict[str, int] = {}
        for client in list(engine.clients):
            peer = client.peer
            queued[client.client_id or str(peer.id)] = peer.queued_bytes + client.held_bytes
        sessions = sum(1 for _ in self._open_sessions())
        return HostMeasures(
            connections=len(engine.clients),
            connections_made=engine.connections_made,
            sessions=sessions,
            actions=engine.server_seq - engine.first_seq,
            replay_bytes=engine.replay.bytes,
            queued_bytes=MappingProxyType(queued),
        )

    # -- sessions ----------------------------------------------------------------------
    def _open_sessions(self) -> Iterator[tuple[str, Mapping[str, Any]]]:
        for channel in list(self._engine.channels.values()):
            if channel.kind == "session":
                yield channel.uri, channel.state

    def is_open_session(self, uri: str) -> bool:
        """Whether ``uri`` (exactly as the host holds it) is a session open on this host."""
        channel = self._engine.channels.get(uri)
        return channel is not None and channel.kind == "session"

    def session_folder(self, uri: str) -> str | None:
        """The local path of an open session's first local working directory, or None."""
        channel = self._engine.channels.get(uri)
        if channel is None or channel.kind != "session":
            return None
        return first_local_path(channel.state.get("workingDirectories"))

    def session_folders(self) -> dict[str, str]:
        """Every open session with a local folder: its URI -> that folder's path."""
        found = {}
        for uri, state in self._open_sessions():
            folder = first_local_path(state.get("workingDirectories"))
            if folder is not None:
                found[uri] = folder
        return found

    def working_directories(self) -> list[str]:
        """Every working directory (a URI) of every open session and chat: what a
        fence around the host's files lets connections reach."""
        found: list[str] = []
        elsewhere = self._elsewhere()
        for channel in list(self._engine.channels.values()):
            if channel.kind in ("session", "chat") and channel.uri not in elsewhere:
                found.extend(channel.state.get("workingDirectories") or ())
        return found

    def _elsewhere(self) -> set[str]:
        """The channels of sessions whose folders are another machine's, and their chats'."""
        manager = self._sessions()
        if manager is None:
            return set()
        found: set[str] = set()
        for session in list(manager.sessions.values()):
            if not session.backend.abilities.local_folders:
                found.add(session.uri)
                found.update(session.chats)
        return found

    def session_meta(self, uri: str) -> Mapping[str, Any]:
        """An open session's ``_meta`` (empty for any other URI). Read-only."""
        channel = self._engine.channels.get(uri)
        if channel is None or channel.kind != "session":
            return MappingProxyType({})
        return MappingProxyType(dict(channel.state.get("_meta") or {}))

    async def session_record(self, session_id: str) -> Mapping[str, Any] | None:
        """What the host keeps of a session on top of its backend (title, folders, config,
        chats...), by session id; None when it keeps nothing. Reads the session store."""
        store = self._session_store()
        return await store.get(session_id) if store is not None else None

    async def session_state_file(self, session: str, chat: str | None = None) -> Path | None:
        """The file a session's backend itself keeps of one of its chats (the default chat
        when ``chat`` is None): the Claude transcript, the scripted store's log. None when
        the backend keeps none or cannot say (no ``state_file`` ability).

        Only a regular file the backend names is answered, never a link: what a client
        learns here is a path the backend already writes. Raises ``LookupError`` naming
        what is not open here. May read the disk (in a worker thread).
        """
        manager = self._sessions()
        live = manager.session_by_uri(session) if manager is not None else None
        if live is None:
            raise LookupError(f"session {session} is not open on this host")
        if chat is None:
            backend_id = live.id  # the default chat is the session's own conversation
        else:
            found = live.chats.get(chat)
            if found is None:
                raise LookupError(f"chat {chat} is not a chat of session {session}")
            backend_id = found.backend_id
        state_file = getattr(live.backend, "state_file", None)
        if state_file is None:
            return None
        answer = await call(state_file, backend_id)
        if answer is None:
            return None
        path = Path(answer)

        def regular() -> bool:
            return path.is_absolute() and not path.is_symlink() and path.is_file()

        return path if await anyio.to_thread.run_sync(regular) else None

    async def remove_session_artifact(
        self, session: str, artifact_id: str, *, connection: Any = None
    ) -> Mapping[str, Any] | None:
        """Take the artifact or reference ``artifact_id`` out of a session's
        ``_meta["agentHost/sessionArtifacts"]``, as the agent's own tool does: the
        session and its row are told (``session/metaChanged``) and its record keeps
        the change. A past session is opened again first.

        With ``connection`` (as a method handler receives it), the person on it must
        be allowed to change the session (``refusal``), checked once it is open, when
        its owner is known: ``PermissionError`` says why not. Returns the entry taken
        out, or None when the session holds no entry of that id; raises
        ``LookupError`` naming a session this host does not have."""
        manager = self._sessions()
        if manager is None:
            raise LookupError(f"no session {session} on this host: it runs no agents")
        live = manager.session_by_uri(session)
        if live is None:
            try:
                live = await manager.reopen_for(session)
            except ProtocolError as error:
                raise LookupError(error.message) from None
        if connection is not None:
            reason = self.refusal(connection, "dispatchAction", {"channel": live.uri})
            if reason is not None:
                raise PermissionError(reason)
        return await manager.server_tools.remove(live, artifact_id)

    def add_resource_reader(self, reader: ResourceReader) -> None:
        """Ask ``reader`` about every ``resourceRead`` (its params) before the files port:
        it answers the protocol's result, None to pass, or raises ``ProtocolError``. For
        a file the plugin itself handed a client that lies outside the sessions' folders.
        Call it from ``ahp_host_started``: the resources are set up after the plugins."""
        service = self._resources()
        if service is None:
            raise RuntimeError("add_resource_reader is for ahp_host_started and later")
        service.add_reader(reader)

    def change_row_meta(self, row: dict[str, Any], key: str, value: Any) -> None:
        """Tell clients that ``_meta[key]`` of a listed session's row is now ``value``
        (None takes the key away), keeping the rest of the row's ``_meta``.

        ``row`` is the ``SessionSummary`` row as the plugin last saw it in
        ``ahp_session_rows`` (other plugins' keys included); it is updated in
        place. An open session's row follows its state instead: this does nothing
        for one.
        """
        session = row.get("resource")
        if not isinstance(session, str) or self.is_open_session(session):
            return
        meta = {k: v for k, v in (row.get("_meta") or {}).items() if k != key}
        if value is not None:
            meta[key] = value
        row["_meta"] = meta
        # changes._meta replaces the row's whole bag, so the rest travels with it.
        self._engine.notify_root(
            "root/sessionSummaryChanged", {"session": session, "changes": {"_meta": meta}}
        )

    # -- connections -------------------------------------------------------------------
    def refusal(self, connection: Any, method: str, params: Any) -> str | None:
        """Why the person on ``connection`` (as a method handler receives it) may not
        send ``method`` with ``params`` now, or None: ahp-users' roles, the same test
        the protocol's own requests meet (``dispatchAction`` on a session's URI asks
        whether they may change it). Always None on a host without people."""
        users = self._users()
        return users.refusal(connection, method, params) if users is not None else None

    async def ask_connection(
        self, connection: Any, method: str, params: Any, *, timeout: float
    ) -> Any:
        """Send a request to the client on ``connection`` and wait for its answer.

        Raises ``ProtocolError`` with the client's error, ``ConnectionError`` when the
        connection ends first, and ``TimeoutError`` after ``timeout`` seconds."""
        try:
            return await connection.peer.request(method, params, timeout=timeout)
        except PeerClosed as closed:
            raise ConnectionError(str(closed)) from None

    def tell_connection(self, connection: Any, method: str, params: Any) -> bool:
        """Send a notification to the client on ``connection``; False when it is gone."""
        return bool(connection.peer.notify(method, params))

    def on_disconnect(self, watcher: Callable[[Any], None]) -> None:
        """Be told of every connection that ends: ``watcher(connection)``, on the event
        loop, with the object method handlers were handed for it."""
        self._engine.on_disconnect(watcher)

    # -- terminals ---------------------------------------------------------------------
    def terminals_unavailable(self) -> str | None:
        """Why ``open_terminal`` cannot open a terminal on this host now, or None when it
        can. Ask it after the host started: the terminals are set up after the plugins."""
        service = self._terminals()
        if service is None:
            return "this host runs no terminals: no terminals port is installed"
        return service.port.unavailable()

    async def open_terminal(
        self,
        chat: str,
        command: str,
        args: Sequence[str] = (),
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        name: str | None = None,
        turn_id: str | None = None,
        tool_call_id: str | None = None,
    ) -> HostTerminal:
        """Run ``command`` in a terminal claimed by ``chat`` (a chat URI) and its session,
        as a ``!command`` runs: a pty under the terminals port, an ``ahp-terminal:``
        channel clients may subscribe to, listed on the root channel, disposed with the
        session.

        ``args`` given, ``command`` is a program and each argument is passed as is;
        none given, ``command`` is a command line for the shell. ``cwd`` (a local path
        or ``file:`` URI) must lie inside the session's working directories, the same
        fence clients meet; none given, the session's first. ``env`` is added to the
        host's environment. ``turn_id`` and ``tool_call_id`` go in the claim.

        Raises ``NoTerminals`` when the host opens no terminals (keep a fallback of
        your own), ``ValueError`` for a chat that is not open here, and
        ``PermissionError`` for a folder outside the fence.
        """
        reason = self.terminals_unavailable()
        service = self._terminals()
        if reason is not None or service is None:
            raise NoTerminals(reason or "this host runs no terminals")
        found = service.sessions.chat_by_uri(chat) if service.sessions is not None else None
        if found is None:
            raise ValueError(f"no chat {chat} open on this host")
        claim: dict[str, Any] = {"kind": "session", "session": found.session.uri, "chat": chat}
        if turn_id is not None:
            claim["turnId"] = turn_id
        if tool_call_id is not None:
            claim["toolCallId"] = tool_call_id
        line = shlex.join([command, *args]) if args else command
        if env:
            # The port takes no environment: env(1) sets it for the command alone.
            program = line if args else shlex.join(["sh", "-c", command])
            line = shlex.join(["env", *(f"{k}={v}" for k, v in env.items())]) + " " + program
        title = name or shlex.join([command, *args])
        try:
            service._check_claim(None, claim)
            # A session claim with or without a cwd never reads the client.
            folder = service._start_directory(cwd, claim, cast(Any, None))
            live = await service.open(
                f"ahp-terminal:/plugin-{uuid.uuid4().hex}", claim, folder, {"name": title}, line
            )
        except ProtocolError as error:
            if error.code == PERMISSION_DENIED:
                raise PermissionError(error.message) from None
            raise ValueError(error.message) from None
        return HostTerminal(service, live, title)
