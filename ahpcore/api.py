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
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

from ahpcore.engine.core import Engine
from ahpcore.findings import Check
from ahpcore.ports import SessionStore
from ahpcore.protocol.uris import ROOT_CHANNEL, file_uri, first_local_path, path_of_file_uri
from ahpcore.services.terminals.output import (
    DEFAULT_SCROLLBACK_BYTES,
    MAX_SCROLLBACK_BYTES,
    MIN_SCROLLBACK_BYTES,
    SCROLLBACK_KEY,
)
from ahpcore.sessions.calls import pausing
from ahpcore.sessions.folders import ENV_REACH, REACH_MACHINE, home_folder, too_wide
from ahpcore.sessions.turns import TurnRecorder
from ahpcore.settings import HostSettings
from ahpcore.store.private import private_folder, private_sqlite, tighten_sqlite, write_private
from ahpcore.tasks import Tasks, Work

log = logging.getLogger(__name__)

#: Where ``PluginHost.automation_event`` goes: (type, event, folder, details).
AutomationEventSink = Callable[[str, str, str | None, dict[str, Any]], None]

__all__ = [
    "DEFAULT_SCROLLBACK_BYTES",
    "ENV_REACH",
    "MAX_SCROLLBACK_BYTES",
    "MIN_SCROLLBACK_BYTES",
    "REACH_MACHINE",
    "SCROLLBACK_KEY",
    "Check",
    "HostSettings",
    "PluginHost",
    "TurnRecorder",
    "file_uri",
    "first_local_path",
    "home_folder",
    "path_of_file_uri",
    "pausing",
    "private_folder",
    "private_sqlite",
    "tighten_sqlite",
    "too_wide",
    "write_private",
]


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
    ) -> None:
        self._automation_event = automation_event
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
        for channel in list(self._engine.channels.values()):
            if channel.kind in ("session", "chat"):
                found.extend(channel.state.get("workingDirectories") or ())
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
