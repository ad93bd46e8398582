"""The host: one plugin manager, one engine, one router, any number of connections.

``Host.start()`` asks every plugin for what it offers (backends, ports, root
config keys, extra methods) and builds the engine from the answers; each
transport then hands its connections to ``serve_connection``.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from ahpcore import __version__
from ahpcore.builtins.core import DEFAULT_CLIENT_QUEUE_BYTES, DEFAULT_REPLAY_BYTES
from ahpcore.defaults import (
    DEFAULT_HOST,
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_PORT,
    default_state_dir,
)
from ahpcore.engine.clients import Client
from ahpcore.engine.core import Engine
from ahpcore.engine.resources import ResourceService
from ahpcore.engine.router import Router, resolve
from ahpcore.engine.service import ProtocolService, root_config_value
from ahpcore.notes import note
from ahpcore.plugins import PluginError, PluginManager
from ahpcore.ports import Backend, RpcHandler
from ahpcore.protocol.methods import COMMANDS
from ahpcore.rpc.budget import DEFAULT_BYTES_PER_SECOND, DEFAULT_FRAMES_PER_SECOND, InboundBudget
from ahpcore.rpc.framing import Message
from ahpcore.rpc.peer import Peer
from ahpcore.terminals import install as install_terminals
from ahpcore.transports.base import Wire

log = logging.getLogger(__name__)


def _describe(function: Callable[..., Any]) -> str:
    return getattr(function, "__qualname__", None) or repr(function)


async def _supervised(
    function: Callable[..., Coroutine[Any, Any, Any]], args: tuple[Any, ...], name: str | None
) -> None:
    # Cancellation passes through; any other failure ends here, logged.
    try:
        await function(*args)
    except Exception:
        what = name or _describe(function)
        log.exception("background work %s failed (args: %s)", what, _brief(args))


def _brief(args: tuple[Any, ...]) -> str:
    described = []
    for arg in args:
        uri = getattr(arg, "uri", None)
        described.append(str(uri) if isinstance(uri, str) else type(arg).__name__)
    return ", ".join(described) or "none"


#: The state folder holds titles, folders and conversations: the user's alone.
STATE_DIR_MODE = 0o700


def _make_state_dir(path: Path) -> None:
    """Create the state folder owner-only, before any plugin writes into it."""
    try:
        if not path.exists():
            path.mkdir(parents=True, mode=STATE_DIR_MODE)
            path.chmod(STATE_DIR_MODE)  # mkdir's mode is cut by the umask
        elif path == default_state_dir() and path.stat().st_uid == os.getuid():
            path.chmod(STATE_DIR_MODE)  # ours alone: tighten what older versions made
    except OSError as exc:
        # Whoever needs the folder reports it when it cannot use it.
        log.warning("could not make the state folder %s private: %s", path, exc)


def _home_uri() -> str | None:
    """The user's home folder as a file URI (None where there is no home to name)."""
    try:
        return Path.home().as_uri()
    except (RuntimeError, KeyError, ValueError):
        return None


@dataclass
class HostSettings:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    #: Which session store the core plugin opens: "file" or "memory".
    sessions: str = "file"
    state_dir: Path = field(default_factory=default_state_dir)
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    compression: bool = True
    #: How long a dropped client stays a session's active client, waiting to reconnect.
    reconnect_grace: float = 30.0
    #: Where session worktrees go (``<root>/<repo>/<name>``); None: beside each repository.
    worktrees_root: Path | None = None
    #: What one connection may send per second before its frames are refused
    #: (see ahpcore.rpc.budget); None lifts the budget.
    inbound_frames_per_second: float | None = DEFAULT_FRAMES_PER_SECOND
    inbound_bytes_per_second: float = DEFAULT_BYTES_PER_SECOND


class Host:
    def __init__(self, plugins: PluginManager, settings: HostSettings | None = None) -> None:
        self.plugins = plugins
        self.settings = settings or HostSettings()
        self.backends: dict[str, Backend] = {}
        self._backend_owner: dict[str, str] = {}
        self.ports: dict[str, Any] = {}
        self.router = Router()
        self.engine: Engine | None = None
        self.session_store: Any = None
        #: The session manager, when at least one backend is registered.
        self.sessions: Any = None
        #: resource* routing and resource watches (``ahpcore.engine.resources``).
        self.resources: ResourceService | None = None
        #: Consulted before a turn goes to its backend: ``await f(chat, turn, report)``
        #: returns True when it ran the turn itself (``!command``); raising fails the turn.
        self.turn_interceptors: list[Callable[..., Awaitable[bool]]] = []
        self._started = False
        self._tasks: anyio.abc.TaskGroup | None = None
        self._stopping = False

    # -- startup -------------------------------------------------------------------
    async def start(self) -> Host:
        if self._started:
            return self
        self.plugins.load()
        _make_state_dir(self.settings.state_dir)
        hook = self.plugins.hook
        config_schema = await self._collect_root_config()
        self.engine = Engine(
            self._initial_root_state(config_schema),
            replay_bytes=lambda: root_config_value(
                self.engine_or_fail, "replayBytes", DEFAULT_REPLAY_BYTES
            ),
        )
        self.protocol = ProtocolService(self.engine, self.router)
        home = _home_uri()
        if home is not None:
            # The folder a client starts a new session in when the person names none.
            self.protocol.initialize_fields["defaultDirectory"] = home
        self.router.add("listSessions", self._list_no_sessions)
        for port in ("terminals", "resources", "changes", "worktrees", "automations", "users"):
            value = await resolve(getattr(hook, f"ahp_{port}")(host=self))
            if value is not None:
                self.ports[port] = value
        self.resources = ResourceService(self)
        self.session_store = await resolve(hook.ahp_session_store(host=self))
        for impl in hook.ahp_backends.get_hookimpls():
            register_backend = self._backend_registrar(impl.plugin_name)
            await resolve(impl.function(host=self, register=register_backend))
        for impl in hook.ahp_rpc_methods.get_hookimpls():
            register_method = self._method_registrar(impl.plugin_name)
            await resolve(impl.function(host=self, register=register_method))
        if self.backends:
            from ahpcore.sessions.manager import SessionManager

            # It publishes root/agentsChanged, with each backend's capabilities.
            self.sessions = SessionManager(self)
        install_terminals(self)
        from ahpcore.engine import changes, worktrees

        changes.install(self)
        worktrees.install(self)
        self._started = True
        return self

    async def intercept_turn(self, chat: Any, turn: Any, report: Any) -> bool:
        """Offer a turn to ``turn_interceptors``; True when one of them ran it."""
        for intercept in self.turn_interceptors:
            if await intercept(chat, turn, report):
                return True
        return False

    async def __aenter__(self) -> Host:
        await self.start()
        self._tasks = anyio.create_task_group()
        await self._tasks.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        tasks, self._tasks = self._tasks, None
        self._stopping = True
        try:
            if tasks is not None:
                tasks.cancel_scope.cancel()
                await tasks.__aexit__(None, None, None)
        finally:
            with anyio.CancelScope(shield=True):
                await self.aclose()

    def spawn(
        self, function: Callable[..., Coroutine[Any, Any, Any]], *args: Any, name: str | None = None
    ) -> None:
        """Run background work for as long as the host runs (``async with host``).

        The work is supervised: an exception in it is logged with what the work
        was for and goes no further, so one session's fault never stops the host.
        Work spawned while the host shuts down is dropped.
        """
        if self._tasks is None:
            if self._stopping:
                log.debug("host stopping: %s not started", name or _describe(function))
                return
            raise RuntimeError("the host is not running: use 'async with host'")
        self._tasks.start_soon(_supervised, function, args, name, name=name)

    @property
    def engine_or_fail(self) -> Engine:
        if self.engine is None:
            raise RuntimeError("the host has not been started")
        return self.engine

    async def _collect_root_config(self) -> dict[str, Any]:
        properties: dict[str, Any] = {}
        owners: dict[str, str] = {}
        hook = self.plugins.hook.ahp_root_config
        for impl in hook.get_hookimpls():  # registration order
            answer = await resolve(impl.function(host=self))
            for key, schema in (answer or {}).items():
                if key in owners:
                    raise PluginError(
                        f"root config key {key!r} is declared by both {owners[key]!r} "
                        f"and {impl.plugin_name!r}"
                    )
                owners[key] = impl.plugin_name
                properties[key] = schema
        return {"type": "object", "properties": properties}

    def _initial_root_state(self, config_schema: dict[str, Any]) -> dict[str, Any]:
        return {
            "agents": [],
            "activeSessions": 0,
            "terminals": [],
            "config": {"schema": config_schema, "values": {}},
            "_meta": {
                "ahp.version": __version__,
                # platform.python_version(), without importing platform for it
                "ahp.python": sys.version.split()[0],
                "ahp.platform": sys.platform,
                "ahp.plugins": self.plugins.names(),
            },
        }

    def _backend_registrar(self, owner: str) -> Callable[[Backend], None]:
        def register(backend: Backend) -> None:
            provider = backend.provider
            if provider in self.backends:
                raise PluginError(
                    f"provider {provider!r} is claimed by both {self._backend_owner[provider]!r} "
                    f"and {owner!r}"
                )
            self.backends[provider] = backend
            self._backend_owner[provider] = owner

        return register

    def _method_registrar(self, owner: str) -> Callable[[str, RpcHandler], None]:
        def register(method: str, handler: RpcHandler) -> None:
            if method in COMMANDS:
                raise PluginError(
                    f"{method!r} is a protocol method; plugin {owner!r} cannot replace it"
                )
            try:
                self.router.add(method, lambda client, params: handler(client, params), owner=owner)
            except ValueError as exc:
                raise PluginError(str(exc)) from None

        return register

    @staticmethod
    @note("listSessions", text="Without a backend the list is empty, never an error.")
    def _list_no_sessions(client: Client, params: dict[str, Any]) -> dict[str, Any]:
        return {"items": []}

    # -- connections ---------------------------------------------------------------
    def client_queue_bytes(self) -> int:
        return root_config_value(
            self.engine_or_fail, "clientQueueBytes", DEFAULT_CLIENT_QUEUE_BYTES
        )

    def _inbound_budget(self) -> InboundBudget | None:
        frames = self.settings.inbound_frames_per_second
        if frames is None:
            return None
        return InboundBudget(frames, self.settings.inbound_bytes_per_second)

    async def serve_connection(
        self, wire: Wire, frames: Callable[[], Awaitable[str | bytes | None]]
    ) -> None:
        """Serve one connection until it ends; nothing of it is left behind."""
        engine = self.engine_or_fail
        router = self.router
        client_box: list[Client] = []

        async def on_request(peer: Peer, message: Message) -> Any:
            return await router.request(client_box[0], message.method, message.params)

        async def on_notification(peer: Peer, message: Message) -> None:
            await router.notification(client_box[0], message.method, message.params)

        def on_over_budget(peer: Peer, message: Message, reason: str) -> None:
            if message.method == "dispatchAction":
                engine.refuse_dispatch(client_box[0], message.params, reason)

        peer = Peer(
            wire,
            on_request=on_request,
            on_notification=on_notification,
            queue_limit=self.client_queue_bytes,
            inline_methods=frozenset({"initialize", "reconnect"}),
            budget=self._inbound_budget(),
            on_over_budget=on_over_budget,
        )
        client = Client(peer)
        client_box.append(client)
        engine.connect(client)
        log.info("client %s connected over %s", peer.id, wire.label)
        try:
            await peer.run(frames)
        finally:
            engine.disconnect(client)
            log.info("client %s disconnected (%s)", client.label, peer.close_reason)

    def unsure_sessions(self) -> list[str]:
        """Sessions whose newest record is not yet known to be in the store and the index.

        Read by a stop that hangs, from a thread of its own while the event loop
        may still change them, so it copies and gives up after a few collisions.
        """
        registry = getattr(self.sessions, "registry", None)
        for _ in range(5):
            try:
                found = set(getattr(self.session_store, "dirty", ()))
                found.update(getattr(registry, "unindexed_ids", ()))
                return sorted(found)
            except RuntimeError:  # changed size while copied
                continue
        return []

    async def aclose(self) -> None:
        for provider, backend in self.backends.items():
            stop = getattr(backend, "stop", None)
            if callable(stop):
                try:
                    await resolve(stop())
                except Exception:
                    log.exception("the %s backend did not stop cleanly", provider)
        store = self.session_store
        flush = getattr(store, "flush", None)
        if flush is not None:
            # One last try for records a failed write left dirty.
            with anyio.move_on_after(10):
                try:
                    await flush()
                except Exception:
                    log.exception("could not save every session before stopping")
        if self.sessions is not None:
            try:
                await self.sessions.close()
            except Exception:
                log.exception("could not close the session index cleanly")
        if store is not None and hasattr(store, "close"):
            store.close()
