"""The host: the composition root.

``Host.start()`` loads the plugins, asks them for what they offer (root config
keys, ports, a session store, backends, extra methods), then builds every part
of the core and hands each the few collaborators it needs: the engine, the
router, ``Tasks``, the lifecycle, a port. Nothing below this module imports it.
The services (``ahpcore.services``) join the plugins as internal plugins, so
the lifecycle moments (``ahpcore.lifecycle``) reach both, in the order pluggy
gives. Each transport then hands its connections to ``serve_connection``.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import anyio

from ahpcore.api import PluginHost
from ahpcore.awaitables import resolve
from ahpcore.config import ConfigError
from ahpcore.defaults import DEFAULT_CLIENT_QUEUE_BYTES, DEFAULT_REPLAY_BYTES, default_state_dir
from ahpcore.engine.clients import Client
from ahpcore.engine.core import Engine
from ahpcore.engine.router import Router
from ahpcore.engine.service import ProtocolService, root_config_value
from ahpcore.lifecycle import HookLifecycle
from ahpcore.notes import note
from ahpcore.plugins import PluginError, PluginManager
from ahpcore.ports import Backend, RpcHandler
from ahpcore.protocol.methods import COMMANDS
from ahpcore.rpc.budget import InboundBudget
from ahpcore.rpc.framing import Message
from ahpcore.rpc.peer import Peer
from ahpcore.rpc.wire import Wire
from ahpcore.services.automations import AutomationService
from ahpcore.services.changesets import ChangesetService
from ahpcore.services.resources import ResourceService
from ahpcore.services.terminals.commands import COMMAND_PREFIX
from ahpcore.services.terminals.service import TerminalService
from ahpcore.services.users import UsersService, root_identity
from ahpcore.services.worktrees import SessionTrees
from ahpcore.sessions.catalogue import decorate_rows
from ahpcore.sessions.manager import SessionManager
from ahpcore.settings import HostSettings
from ahpcore.tasks import Supervisor
from ahpcore.version import __version__

__all__ = ["Host", "HostSettings"]

log = logging.getLogger(__name__)

#: Names the core's services are registered under among the plugins (not listed as plugins).
SERVICE_PREFIX = "ahpcore."


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


class Host:
    def __init__(self, plugins: PluginManager, settings: HostSettings | None = None) -> None:
        self.plugins = plugins
        self.settings = settings or HostSettings()
        self.backends: dict[str, Backend] = {}
        self._backend_owner: dict[str, str] = {}
        #: The ports plugins answered, as they answered them.
        self.ports: dict[str, Any] = {}
        self.router = Router()
        self.tasks = Supervisor()
        self.lifecycle = HookLifecycle(plugins)
        self.engine: Engine | None = None
        self.session_store: Any = None
        #: What plugins see of the host (``ahpcore.api``), once started.
        self.view: PluginHost | None = None
        # The parts built at start; each is None when nothing asks for it.
        self.protocol: ProtocolService | None = None
        self.sessions: SessionManager | None = None
        self.resources: ResourceService | None = None
        self.changesets: ChangesetService | None = None
        self.terminals: TerminalService | None = None
        self.worktrees: SessionTrees | None = None
        self.automations: AutomationService | None = None
        self.users: UsersService | None = None
        #: What plugins asked to run when the host stops (``PluginHost.at_stop``).
        self._at_stop: list[Callable[[], Any]] = []
        #: Each event trigger type -> what looks for its events in automations' folders.
        self._automation_looks: dict[str, Any] = {}
        self._started = False

    # -- startup -------------------------------------------------------------------
    async def start(self) -> Host:
        if self._started:
            return self
        self.plugins.load()
        self._check_config_tables()
        _make_state_dir(self.settings.state_dir)
        router, hook = self.router, self.plugins.hook
        self.view = view = PluginHost(
            engine=lambda: self.engine_or_fail,
            settings=self.settings,
            tasks=self.tasks,
            ports=self.ports,
            plugin_names=self.plugins.names,
            method_names=lambda: list(router.routes),
            session_store=lambda: self.session_store,
            automation_event=self._automation_event,
            automation_looks=self._automation_looks,
            router=router,
            initialize_fields=lambda: self._protocol_or_fail.initialize_fields,
            at_stop=self._at_stop.append,
            terminals=lambda: self.terminals,
            sessions=lambda: self.sessions,
            resources=lambda: self.resources,
            users=lambda: self.users,
        )
        config_schema = await self._collect_root_config(view)
        engine = self.engine = Engine(
            self._initial_root_state(config_schema),
            replay_bytes=lambda: root_config_value(engine, "replayBytes", DEFAULT_REPLAY_BYTES),
        )
        self.protocol = ProtocolService(engine, router, self.lifecycle.channel_subscribing)
        home = _home_uri()
        if home is not None:
            # The folder a client starts a new session in when the person names none.
            self.protocol.initialize_fields["defaultDirectory"] = home
        for port in ("terminals", "resources", "changes", "worktrees", "automations"):
            value = await resolve(getattr(hook, f"ahp_{port}")(host=view))
            if value is not None:
                self.ports[port] = value
        users = await resolve(hook.ahp_users(host=view))
        if users is not None:
            self.ports["users"] = users
        self.session_store = await resolve(hook.ahp_session_store(host=view))
        for impl in self.plugins.implementations("ahp_backends"):
            await resolve(impl(host=view, register=self._backend_registrar(impl.plugin)))
        for impl in self.plugins.implementations("ahp_rpc_methods"):
            await resolve(impl(host=view, register=self._method_registrar(impl.plugin)))
        self._compose(engine, view)
        for impl in self.plugins.implementations("ahp_host_started"):
            await resolve(impl(host=view))
        if self.automations is not None:
            await self.automations.start()
        self._started = True
        return self

    def _compose(self, engine: Engine, view: PluginHost) -> None:
        """Build the core's parts over what the plugins answered, and wire them."""
        router, tasks, lifecycle = self.router, self.tasks, self.lifecycle
        self.resources = resources = ResourceService(
            engine, router, self.ports.get("resources"), lifecycle
        )
        if self.backends:
            # It publishes root/agentsChanged, with each backend's capabilities.
            self.sessions = SessionManager(
                engine=engine,
                router=router,
                tasks=tasks,
                lifecycle=lifecycle,
                backends=self.backends,
                store=self.session_store,
                decorate_rows=self._decorate_rows,
                reconnect_grace=self.settings.reconnect_grace,
            )
            resources.add_reader(self.sessions.read_edit)
        else:
            router.add("listSessions", self._list_no_sessions)
        terminals = self.ports.get("terminals")
        if terminals is not None:
            registry = self.sessions.registry if self.sessions is not None else None
            self.terminals = TerminalService(engine, router, tasks, terminals, registry)
            self._add_service("terminals", self.terminals)
            assert self.protocol is not None
            self.protocol.initialize_fields["terminalCommandPrefix"] = COMMAND_PREFIX
        changes = self.ports.get("changes")
        if changes is not None:
            self.changesets = ChangesetService(engine, router, tasks, changes, resources)
            self._add_service("changesets", self.changesets)
        worktrees = self.ports.get("worktrees")
        if worktrees is not None and self.sessions is not None:
            self.worktrees = SessionTrees(worktrees)
            self._add_service("worktrees", self.worktrees)
        users = self.ports.get("users")
        if users is not None:
            self.users = UsersService(engine, users, self._past_record)
            self._add_service("users", self.users)
        automations = self.ports.get("automations")
        if automations is not None:
            self.automations = AutomationService(
                engine,
                router,
                tasks,
                automations,
                self.sessions,
                self._automation_triggers,
                people=users,
                looks=self._automation_looks,
            )
            self._add_service("automations", self.automations)
            assert self.protocol is not None
            self.protocol.initialize_fields["automations"] = self.automations.capabilities()

    def _add_service(self, name: str, service: object) -> None:
        """Subscribe a service to the lifecycle moments its ``@hookimpl`` methods name."""
        self.plugins.register_service(SERVICE_PREFIX + name, service)

    async def _automation_triggers(self, query: dict[str, Any]) -> list[dict[str, Any]]:
        """Every plugin's event trigger types for ``query``; one that fails is left out."""
        found: list[dict[str, Any]] = []
        for impl in self.plugins.implementations("ahp_automation_triggers"):
            try:
                found.extend(await resolve(impl(query=dict(query))) or ())
            except Exception:
                log.exception("the %s plugin could not list its automation triggers", impl.plugin)
        return found

    def _automation_event(
        self, kind: str, event: str, folder: str | None, details: dict[str, Any]
    ) -> None:
        if self.automations is not None:
            self.automations.fire(kind, event, folder, details)

    async def _decorate_rows(self, rows: list[dict[str, Any]]) -> None:
        await decorate_rows(self.plugins.implementations("ahp_session_rows"), self.view, rows)

    async def __aenter__(self) -> Host:
        await self.start()
        await self.tasks.start()
        if self.automations is not None:
            self.automations.running()
        if self.users is not None:
            self.tasks.spawn(self.users.sweep, name="closing removed people's connections")
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        try:
            await self.tasks.stop()
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
        self.tasks.spawn(function, *args, name=name)

    @property
    def _protocol_or_fail(self) -> ProtocolService:
        if self.protocol is None:
            raise RuntimeError("the host has not been started")
        return self.protocol

    @property
    def engine_or_fail(self) -> Engine:
        if self.engine is None:
            raise RuntimeError("the host has not been started")
        return self.engine

    async def _past_record(self, session_id: str) -> Any:
        """What the session store keeps of a session, for the users service's checks."""
        store = self.session_store
        return await store.get(session_id) if store is not None else None

    def _check_config_tables(self) -> None:
        """Hold the config file's plugin tables to the models their plugins declare."""
        if not self.settings.config.tables:
            return  # nothing to check: the plugins' models stay unbuilt
        declared = self.plugins.config_tables()
        try:
            self.settings.config_tables = self.settings.config.check_tables(
                declared, self.plugins.installed_names() - set(self.plugins.names())
            )
        except ConfigError as exc:
            raise PluginError(str(exc)) from None

    async def _collect_root_config(self, view: PluginHost) -> dict[str, Any]:
        properties: dict[str, Any] = {}
        owners: dict[str, str] = {}
        for impl in self.plugins.implementations("ahp_root_config"):
            answer = await resolve(impl(host=view))
            for key, schema in (answer or {}).items():
                if key in owners:
                    raise PluginError(
                        f"root config key {key!r} is declared by both {owners[key]!r} "
                        f"and {impl.plugin!r}"
                    )
                owners[key] = impl.plugin
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
                self.router.add(method, handler, owner=owner)
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

        users = self.users

        async def on_request(peer: Peer, message: Message) -> Any:
            if users is None:
                return await router.request(client_box[0], message.method, message.params)
            await users.admit(client_box[0], message.method, message.params)
            result = await router.request(client_box[0], message.method, message.params)
            return users.visible(client_box[0], message.method, result)

        async def on_notification(peer: Peer, message: Message) -> None:
            if users is not None and message.method == "dispatchAction":
                reason = users.refusal(client_box[0], message.method, message.params)
                if reason is not None:
                    engine.refuse_dispatch(client_box[0], message.params, reason)
                    return
                users.stamp(client_box[0], message.params)
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
        if users is not None:
            # A socket with no token (stdio, the owner's Unix socket) is the host itself.
            client.identity = getattr(wire, "identity", None) or root_identity()
        client_box.append(client)
        engine.connect(client)
        log.info("client %s connected over %s", peer.id, wire.label)
        try:
            await peer.run(frames)
        finally:
            engine.disconnect(client)
            log.info("client %s disconnected (%s)", client.label, peer.close_reason)

    async def identify(self, token: str) -> str | None:
        """Whose connection a token other than the deployment one opens, or None."""
        return await self.users.identify(token) if self.users is not None else None

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
        while self._at_stop:
            work = self._at_stop.pop()
            try:
                await resolve(work())
            except Exception:
                log.exception("work a plugin left for the host's stop failed")
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
        close = getattr(self.ports.get("automations"), "close", None)
        if callable(close):
            close()
