"""Method routing: which handler answers which JSON-RPC method.

Handlers take ``(client, params)`` and return the result (or raise
ProtocolError). A result wrapped in ``Reply`` runs ``after`` once the answer
is queued (``ahpcore.rpc.peer.Reply``), which is how held channel frames are
released behind it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ahpcore.awaitables import resolve
from ahpcore.engine.clients import Client
from ahpcore.engine.params import checked, load_models, models_built
from ahpcore.protocol.errors import INVALID_REQUEST, METHOD_NOT_FOUND, ProtocolError
from ahpcore.protocol.methods import CLIENT_NOTIFICATIONS, COMMANDS

log = logging.getLogger(__name__)

Handler = Callable[[Client, dict[str, Any]], Any]
#: Called once the request is answered, with what it raised (None when it succeeded).
RequestDone = Callable[[BaseException | None], None]
#: Told of each request before it is answered (client, method); returns what to call
#: when it is, or None to hear no more of this one.
RequestObserver = Callable[[Client, str], RequestDone | None]

#: The port each protocol command needs when no plugin serves it, for the refusal.
#: The resource* family is always routed (``ahpcore.services.resources``): a client may
#: publish resources with no port installed, and that module names the port itself.
PORT_OF_COMMAND: dict[str, str] = {
    "createTerminal": "terminals",
    "disposeTerminal": "terminals",
    "invokeChangesetOperation": "changes",
    "listAutomationTriggerDefinitions": "automations",
    "runAutomation": "automations",
    "fetchAutomationRuns": "automations",
    "createSession": "backends",
    "disposeSession": "backends",
    "createChat": "backends",
    "disposeChat": "backends",
    "moveChat": "backends",
    "fetchTurns": "backends",
    "completions": "backends",
    "authenticate": "backends",
    "resolveSessionConfig": "backends",
    "sessionConfigCompletions": "backends",
}
#: The distributions that provide each port, named in the refusal so a person knows what to install.
PLUGINS_OF_PORT: dict[str, tuple[str, ...]] = {
    "backends": ("ahp-claude", "ahp-scripted"),
    "terminals": ("ahp-terminals",),
    "resources": ("ahp-files",),
    "changes": ("ahp-git",),
    "automations": ("ahp-automations",),
}
#: Answered before initialize: how a client finds out it can talk at all.
BEFORE_INITIALIZE = frozenset({"initialize", "ping", "reconnect"})


@dataclass(frozen=True)
class Route:
    handler: Handler
    #: Validate params against this protocol model first (None: the handler checks).
    params_model: str | None
    owner: str


class Router:
    """One handler per method, added once and never replaced: what happens around a
    command belongs to the lifecycle moments (``ahpcore.lifecycle``), not to wrappers."""

    def __init__(self) -> None:
        self._routes: dict[str, Route] = {}
        self._notifications: dict[str, Handler] = {}
        self._observers: list[RequestObserver] = []
        #: Read-only views of what is served.
        self.routes: Mapping[str, Route] = MappingProxyType(self._routes)
        self.notifications: Mapping[str, Handler] = MappingProxyType(self._notifications)

    def add(self, method: str, handler: Handler, *, owner: str = "ahpcore") -> None:
        """Serve ``method``. A protocol method takes its params model from the method table."""
        existing = self._routes.get(method)
        if existing is not None:
            raise ValueError(
                f"method {method!r} is served by {existing.owner}; {owner} cannot serve it too"
            )
        command = COMMANDS.get(method)
        self._routes[method] = Route(handler, command.params if command else None, owner)

    def add_notification(self, method: str, handler: Handler) -> None:
        if method in self._notifications:
            raise ValueError(f"notification {method!r} already has a handler")
        self._notifications[method] = handler

    def observe(self, observer: RequestObserver) -> None:
        """Be told of every request and of its end (telemetry's span per request)."""
        self._observers.append(observer)

    async def request(self, client: Client, method: str, params: Any) -> Any:
        if not self._observers:
            return await self._answer(client, method, params)
        told = [done for observer in self._observers if (done := observer(client, method))]
        if not told:
            return await self._answer(client, method, params)
        try:
            result = await self._answer(client, method, params)
        except BaseException as exc:
            _tell(told, exc)
            raise
        _tell(told, None)
        return result

    async def _answer(self, client: Client, method: str, params: Any) -> Any:
        route = self.routes.get(method)
        if route is None and method in CLIENT_NOTIFICATIONS:
            raise ProtocolError(
                INVALID_REQUEST, f"{method} is a notification: send it without an id"
            )
        if route is None:
            port = PORT_OF_COMMAND.get(method)
            if port is not None:
                raise ProtocolError(METHOD_NOT_FOUND, missing_port_message(method, port))
            raise ProtocolError(METHOD_NOT_FOUND, f"unknown method {method!r}")
        if not client.initialized and method not in BEFORE_INITIALIZE:
            raise ProtocolError(INVALID_REQUEST, f"send initialize before {method}")
        if route.params_model is not None:
            params = await checked(method, route.params_model, params)
        elif params is None:
            params = {}
        return await resolve(route.handler(client, params))

    async def notification(self, client: Client, method: str, params: Any) -> None:
        handler = self.notifications.get(method)
        if handler is None:
            return  # JSON-RPC: a notification is never answered, not even to refuse it
        model = CLIENT_NOTIFICATIONS.get(method)
        if model is not None:
            if method != "dispatchAction":
                params = await checked(method, model, params)
            elif not models_built():
                await load_models(model)
        await resolve(handler(client, params))


def _tell(told: list[RequestDone], error: BaseException | None) -> None:
    for done in told:
        try:
            done(error)
        except Exception:
            log.exception("a request observer failed")


def missing_port_message(method: str, port: str) -> str:
    """Why ``method`` is refused on this host, and what to install to have it served."""
    plugins = PLUGINS_OF_PORT.get(port, ())
    if plugins:
        remedy = f"install {' or '.join(plugins)} to serve it"
    else:
        remedy = "no published plugin provides it yet"
    return f"{method} needs the {port} port, and no plugin on this host provides it: {remedy}"
