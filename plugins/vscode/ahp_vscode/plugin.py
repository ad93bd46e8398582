"""The ``vscode`` plugin: the VS Code window's own requests, on the AHP connection.

Served as plain JSON-RPC methods (``ahp_rpc_methods``), each ``vscode/*`` family
switched on for the window by a ``true`` flag in ``InitializeResult._meta``,
set only for what is really answered here.
"""

from __future__ import annotations

import base64
import logging
import os
import signal
import weakref
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio

from ahp_vscode import artifacts, autoapprove, debuglogs, devcontainers, diagnostics, worktrees
from ahp_vscode.config import ROOT_CONFIG
from ahpcore.api import PluginHost, file_uri, path_of_file_uri, private_folder
from ahpcore.hookspecs import hookimpl
from ahpcore.lifecycle import ToolConfirmation, TurnStart
from ahpcore.protocol.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    NOT_FOUND,
    SESSION_NOT_FOUND,
    ProtocolError,
)

log = logging.getLogger(__name__)

#: ``_meta`` flag of the five detached-worktree methods.
DETACHED_WORKTREES_FLAG = "vscode.detachedWorktrees"
#: The backend's own record of a session (``PluginHost.session_state_file``).
STATE_FILE = "vscode/getAgentHostSessionStateFile"
#: ``_meta`` flag: ``vscode/getAgentHostSessionStateFile`` takes a chat other than the default.
STATE_FILE_CHAT_FLAG = "vscode.getAgentHostSessionStateFile.chat"
#: What a person types before a shell command on a session (initialize's terminalCommandPrefix).
COMMAND_PREFIX = "!"
#: Long enough for the answer to ``shutdown`` to leave before the host stops.
SHUTDOWN_DELAY = 0.2


def stop_by_signal() -> None:
    """Stop the process the way Ctrl-C does: ``ahp serve`` stops cleanly on SIGTERM.

    Only where something handles SIGTERM: a host run inside another program
    (a test, an embedding) is not the plugin's to end.
    """
    if _unhandled_sigterm():
        raise ProtocolError(
            INTERNAL_ERROR, "shutdown: this host is not run by `ahp serve`; stop it where it runs"
        )
    os.kill(os.getpid(), signal.SIGTERM)


def _unhandled_sigterm() -> bool:
    return signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, signal.SIG_IGN, None)


class VSCodePlugin:
    """One per host. ``endpoints`` are what diagnostics may fetch; ``stop`` ends the host."""

    def __init__(
        self,
        *,
        endpoints: Sequence[diagnostics.Endpoint] = diagnostics.DEFAULT_ENDPOINTS,
        stop: Callable[[], None] = stop_by_signal,
        docker_seconds: float = devcontainers.DOCKER_SECONDS,
    ) -> None:
        self.docker_seconds = docker_seconds
        self.endpoints = tuple(endpoints)
        self.stop = stop
        self.detached: worktrees.DetachedWorktrees | None = None
        self.containers: devcontainers.DevContainers | None = None
        self.host: PluginHost | None = None
        self._stopping = False
        #: Paths of the state files handed out: the only ones ``read_state_file`` serves.
        self._state_files: set[str] = set()

    @hookimpl
    def ahp_root_config(self, host: PluginHost) -> dict[str, Any]:
        return dict(ROOT_CONFIG)

    @hookimpl
    def ahp_rpc_methods(self, host: PluginHost, register: Callable[..., None]) -> Awaitable[None]:
        self.host = host
        register("shutdown", self.shutdown)
        register("getNetworkDiagnosticsInfo", self.network_info)
        register("getManagedSettingsDiagnostics", self.managed_settings)
        register("diagnosticsFetch", self.fetch)
        # No _meta flag gates these: the window asks, and hears why when there is no log file.
        logs = debuglogs.DebugLogs(host.settings.state_dir / "vscode" / "debug-logs")
        register(debuglogs.COLLECT, logs.collect)
        register(debuglogs.READ, logs.read)
        register(STATE_FILE, self.state_file)
        # Any chat may be named, not only the default one.
        host.advertise_meta(STATE_FILE_CHAT_FLAG, True)
        register(artifacts.REMOVE, artifacts.Artifacts(host).remove)
        host.advertise_meta(artifacts.FLAG, True)
        port = host.ports.get("worktrees")
        if port is not None:
            folder = private_folder(host.settings.state_dir / "vscode")
            self.detached = detached = worktrees.DetachedWorktrees(host, port, folder)
            register(worktrees.CREATE, detached.create)
            register(worktrees.CLAIM, detached.claim)
            register(worktrees.ARCHIVE, detached.set_archived)
            register(worktrees.DELETE, detached.delete)
            register(worktrees.RECONCILE, detached.reconcile)
            host.advertise_meta(DETACHED_WORKTREES_FLAG, True)
        self.containers = containers = devcontainers.DevContainers(
            host, docker_seconds=self.docker_seconds
        )
        register(devcontainers.IS_DOCKER_AVAILABLE, containers.is_docker_available)
        register(devcontainers.CONNECT, containers.connect)
        register(devcontainers.DISCONNECT, containers.disconnect)
        register(devcontainers.STOP, containers.stop)
        register(devcontainers.REMOVE, containers.remove)
        register(devcontainers.RELAY_SEND, containers.relay_send)
        return self._offer_dev_containers(host, containers)

    @staticmethod
    async def _offer_dev_containers(
        host: PluginHost, containers: devcontainers.DevContainers
    ) -> None:
        # Asked once, as the host starts (bounded by docker_seconds): the window
        # offers Dev Containers only when this flag says they can be launched.
        if await containers.can_launch():
            host.advertise_meta(devcontainers.FLAG, True)
        else:
            log.debug(
                "vscode: no Dev Containers here (Docker does not answer, or no devcontainer CLI)"
            )

    # -- shutdown and diagnostics ---------------------------------------------------------
    async def shutdown(self, client: Any, params: Any) -> None:
        if self._stopping:
            return None  # asked twice: it is on its way
        if self.stop is stop_by_signal and _unhandled_sigterm():
            stop_by_signal()  # refuses, saying why, before anything is answered
        assert self.host is not None
        self._stopping = True
        log.info("vscode: a client asked the host to shut down")

        async def later() -> None:
            await anyio.sleep(SHUTDOWN_DELAY)
            self.stop()

        # The answer (null) goes out first; the host stops a moment later.
        self.host.spawn(later, name="shutdown asked by a client")
        return None

    async def state_file(self, client: Any, params: Any) -> dict[str, Any]:
        """The backend's own record of a session's chat, as a ``file:`` URI; ``{}`` when its
        backend keeps none (the window then says the session exposes no state file)."""
        params = params if isinstance(params, dict) else {}
        session, chat = params.get("session"), params.get("chat")
        if not isinstance(session, str) or not session:
            raise ProtocolError(INVALID_PARAMS, f"{STATE_FILE}: params.session must be a string")
        if chat is not None and not isinstance(chat, str):
            raise ProtocolError(INVALID_PARAMS, f"{STATE_FILE}: params.chat must be a string")
        assert self.host is not None
        try:
            path = await self.host.session_state_file(session, chat)
        except LookupError as exc:
            raise ProtocolError(SESSION_NOT_FOUND, f"{STATE_FILE}: {exc}") from None
        if path is None:
            return {}
        self._state_files.add(str(path))
        return {"resource": file_uri(str(path))}

    @hookimpl(tryfirst=True)
    def ahp_turn_starting(self, start: TurnStart) -> None:
        """A ``!command`` a deny rule of the window's names is refused, saying which rule.

        Only a deny rule stops one: a person typed it, which is approval enough for
        a command no rule denies (VS Code would ask; a typed command has no step
        that asks). The terminals service runs every other one, as before.
        """
        host = self.host
        if host is None or "terminals" not in host.ports or start.turn.resume:
            return None
        text = start.turn.text.strip()
        command = text[len(COMMAND_PREFIX) :].strip()
        if not text.startswith(COMMAND_PREFIX) or not command:
            return None
        if host.root_config(autoapprove.ENABLED_KEY) is not True:
            return None
        verdict = autoapprove.judge(command, host.root_config(autoapprove.RULES_KEY))
        if verdict.result == "denied":
            log.info("vscode: a !command was refused by the rule %s", verdict.rule)
            raise RuntimeError(
                f"{verdict.reason} (terminalAutoApproveRules, pushed by VS Code): it was not "
                "run; change the rule in VS Code's chat.tools.terminal.autoApprove to run it"
            )
        return None

    @hookimpl
    def ahp_tool_confirming(self, confirmation: ToolConfirmation) -> None:
        """A shell command an agent asks to run is approved or denied by the window's
        rules, as VS Code's own agents' are; one no rule decides is the person's to answer.

        The rules are root config, which only an admin may push where ahp-users is
        installed, so they speak for whoever runs the host rather than for one client.
        """
        host = self.host
        if host is None or confirmation.command is None:
            return
        if host.root_config(autoapprove.ENABLED_KEY) is not True:
            return
        verdict = autoapprove.judge(confirmation.command, host.root_config(autoapprove.RULES_KEY))
        said = f"{verdict.reason} (terminalAutoApproveRules, pushed by VS Code)"
        if verdict.result == "approved":
            confirmation.approve(said)
        elif verdict.result == "denied":
            confirmation.deny(
                f"{said}: it was not run; change the rule in VS Code's "
                "chat.tools.terminal.autoApprove to run it"
            )

    @hookimpl
    def ahp_host_started(self, host: PluginHost) -> None:
        # The window opens the state file with resourceRead, and the file lies outside
        # every session's folder, where the files fence would refuse it.
        host.add_resource_reader(self.read_state_file)
        if self.containers is not None:
            host.on_disconnect(self.containers.connection_ended)

    def read_state_file(self, params: Any) -> Awaitable[dict[str, Any]] | None:
        uri = params.get("uri") if isinstance(params, dict) else None
        path = path_of_file_uri(uri) if isinstance(uri, str) else None
        if path is None or path not in self._state_files:
            return None  # not one handed out here: the files port decides
        return anyio.to_thread.run_sync(_read_state_file, Path(path), str(uri))

    def network_info(self, client: Any, params: Any) -> dict[str, Any]:
        return diagnostics.network_info(self.endpoints)

    @staticmethod
    def managed_settings(client: Any, params: Any) -> list[Any]:
        # No enterprise policy layer here: an empty list is VS Code's answer for that.
        return []

    async def fetch(self, client: Any, params: Any) -> dict[str, Any]:
        url = params.get("url") if isinstance(params, dict) else None
        return await diagnostics.fetch(url, self.endpoints)


#: A state file larger than this is not sent whole (a frame holds 16 MiB at most).
STATE_FILE_BYTES = 8 << 20


def _read_state_file(path: Path, uri: str) -> dict[str, Any]:
    """The resourceRead result for a state file handed out, checked again as it is read."""
    try:
        if path.is_symlink() or not path.is_file():
            raise ProtocolError(NOT_FOUND, f"{uri} is gone")
        with path.open("rb") as file:
            data = file.read(STATE_FILE_BYTES + 1)
    except OSError as exc:
        raise ProtocolError(NOT_FOUND, f"{uri} cannot be read ({exc.strerror})") from None
    if len(data) > STATE_FILE_BYTES:
        raise ProtocolError(
            INVALID_PARAMS,
            f"{uri} is over {STATE_FILE_BYTES >> 20} MiB: open it on the host's machine",
        )
    try:
        return {"data": data.decode("utf-8"), "encoding": "utf-8", "contentType": "text/plain"}
    except UnicodeDecodeError:
        encoded = base64.b64encode(data).decode("ascii")
        return {"data": encoded, "encoding": "base64", "contentType": "application/octet-stream"}


_plugin = VSCodePlugin()
#: The plugin serving each host, for the hooks after ``ahp_rpc_methods``.
_per_host: weakref.WeakKeyDictionary[PluginHost, VSCodePlugin] = weakref.WeakKeyDictionary()


@hookimpl
def ahp_root_config(host: PluginHost) -> dict[str, Any]:
    return _plugin.ahp_root_config(host)


@hookimpl
def ahp_rpc_methods(host: PluginHost, register: Callable[..., None]) -> Awaitable[None]:
    # A fresh plugin per host: handles and the shutdown latch are one host's.
    _per_host[host] = plugin = VSCodePlugin()
    return plugin.ahp_rpc_methods(host, register)


@hookimpl
def ahp_host_started(host: PluginHost) -> None:
    plugin = _per_host.get(host)
    if plugin is not None:
        plugin.ahp_host_started(host)


@hookimpl(tryfirst=True)
def ahp_turn_starting(start: TurnStart) -> None:
    # The host whose session it is: several hosts may run in one process.
    for host, plugin in list(_per_host.items()):
        if host.is_open_session(start.session):
            return plugin.ahp_turn_starting(start)
    return None
