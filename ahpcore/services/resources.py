"""The ``resource*`` family and resource watches, as the core routes them.

Three places can answer a resource command, asked in this order:

1. for ``resourceRead`` only, the readers added with ``add_reader`` (the
   changesets service puts the changes port's own URIs first, the sessions
   their pending edits), because the before side of an edit is not a file on
   disk;
2. a connected client, when the URI is ``<scheme>://<clientId>/...`` naming it:
   the request is forwarded to that client and its answer, refusals included,
   comes back verbatim;
3. the resources port (``ahp_resources``), for everything else.

Client routing needs no filesystem, so it works with no resources port at all.
A ``resourceWrite`` that succeeded is the ``resource_written`` lifecycle moment.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ahpcore.awaitables import resolve
from ahpcore.engine.clients import Client
from ahpcore.engine.core import Dispatch, Engine, Refused
from ahpcore.engine.router import Router, missing_port_message
from ahpcore.lifecycle import Lifecycle
from ahpcore.ports import ResourceChanges, ResourceReader, ResourcesPort, ResourceWatch
from ahpcore.protocol.errors import (
    ALREADY_EXISTS,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    NOT_FOUND,
    ProtocolError,
)
from ahpcore.rpc.peer import PeerClosed

log = logging.getLogger(__name__)

WATCH_SCHEME = "ahp-resource-watch"
WATCH_KIND = "resourceWatch"
#: How long a client publishing resources has to answer a forwarded request.
FORWARD_TIMEOUT = 30.0
#: Watches one connection may hold at once. Each one the host runs filters every
#: batch of changes in its folder. The OS watchers under them (Linux allows 128
#: per user by default, shared by every process) are shared by folder and capped
#: host-wide by the files plugin.
MAX_WATCHES_PER_CLIENT = 32

#: Protocol method -> the resources port's method serving it.
PORT_METHODS: dict[str, str] = {
    "resourceRead": "read",
    "resourceList": "list",
    "resourceResolve": "resolve",
    "resourceWrite": "write",
    "resourceDelete": "delete",
    "resourceMkdir": "mkdir",
    "resourceMove": "move",
    "resourceCopy": "copy",
    "resourceRequest": "request",
}
TWO_ENDED = frozenset({"resourceMove", "resourceCopy"})


@dataclass(eq=False)
class Watch:
    uri: str
    #: The client id whose resources are watched; None for the host's own.
    owner_id: str | None
    owner: Client | None
    #: The connection that asked for it.
    creator: Client | None = None
    #: The port's watcher, for a watch the host runs itself.
    handle: ResourceWatch | None = None


def client_authority(uri: Any) -> str | None:
    """The authority a client could publish ``uri`` under, or None when no client can.

    ``file:`` is never a client's, and neither is an ``ahp-`` scheme, whose
    authority is part of a channel name.
    """
    if not isinstance(uri, str):
        return None
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if not scheme or scheme == "file" or scheme.startswith("ahp-"):
        return None
    return parts.netloc or None


def _result_problem(method: str, result: Any) -> str | None:
    """What is wrong with a publishing client's answer, or None when it is a valid result.

    Relayed unchecked, a client's garbage would reach the asker as the host's own
    malformed frame.
    """
    from ahpcore.protocol.wire import validate_frame

    answer = {"jsonrpc": "2.0", "id": 0, "result": result}
    issues = validate_frame(answer, direction="client", request_method=method)
    return "; ".join(str(issue) for issue in issues[:3]) if issues else None


class ResourceService:
    def __init__(
        self,
        engine: Engine,
        router: Router,
        port: ResourcesPort | None,
        lifecycle: Lifecycle,
    ) -> None:
        self.engine = engine
        self.port = port
        self.lifecycle = lifecycle
        #: Asked first for every resourceRead; the first answer that is not None wins.
        self.readers: list[ResourceReader] = []
        self.watches: dict[str, Watch] = {}
        for method, handler in {
            "resourceRead": self.resource_read,
            "resourceList": self.resource_list,
            "resourceResolve": self.resource_resolve,
            "resourceWrite": self.resource_write,
            "resourceDelete": self.resource_delete,
            "resourceMkdir": self.resource_mkdir,
            "resourceMove": self.resource_move,
            "resourceCopy": self.resource_copy,
            "resourceRequest": self.resource_request,
            "createResourceWatch": self.create_watch,
        }.items():
            router.add(method, handler)
        self.engine.on_action("resourceWatch/changed", self._relay_changed, relayed=True)
        self.engine.on_unsubscribe(self._unsubscribed)
        self.engine.on_disconnect(self._disconnected)

    def add_reader(self, reader: ResourceReader, *, first: bool = False) -> None:
        """Ask ``reader`` about every ``resourceRead`` before clients and the port.

        It answers the protocol's result, None to pass, or raises ``ProtocolError``.
        """
        if first:
            self.readers.insert(0, reader)
        else:
            self.readers.append(reader)

    def publisher(self, uri: Any) -> Client | None:
        """The connected client publishing ``uri``, if its authority names one."""
        authority = client_authority(uri)
        if authority is None:
            return None
        # A client reconnecting can hold two connections for a while, the old one
        # perhaps already dead: the newest is the one that answers.
        live = [
            client
            for client in self.engine.clients
            if client.client_id == authority and not client.peer.closed
        ]
        return max(live, key=lambda client: client.peer.id, default=None)

    def _port_for(self, method: str, uri: Any) -> Any:
        port = self.port
        if port is None:
            raise ProtocolError(
                METHOD_NOT_FOUND,
                f"{missing_port_message(f'{method} on {uri}', 'resources')}; only resources "
                "a connected client publishes are served here",
            )
        return port

    # -- commands -----------------------------------------------------------------
    async def resource_read(self, client: Client, params: dict[str, Any]) -> Any:
        return await self.serve("resourceRead", params)

    async def resource_list(self, client: Client, params: dict[str, Any]) -> Any:
        return await self.serve("resourceList", params)

    async def resource_resolve(self, client: Client, params: dict[str, Any]) -> Any:
        return await self.serve("resourceResolve", params)

    async def resource_write(self, client: Client, params: dict[str, Any]) -> Any:
        result = await self.serve("resourceWrite", params)
        uri = params.get("uri")
        if isinstance(uri, str):
            await self.lifecycle.resource_written(uri)
        return result

    async def resource_delete(self, client: Client, params: dict[str, Any]) -> Any:
        return await self.serve("resourceDelete", params)

    async def resource_mkdir(self, client: Client, params: dict[str, Any]) -> Any:
        return await self.serve("resourceMkdir", params)

    async def resource_move(self, client: Client, params: dict[str, Any]) -> Any:
        return await self.serve("resourceMove", params)

    async def resource_copy(self, client: Client, params: dict[str, Any]) -> Any:
        return await self.serve("resourceCopy", params)

    async def resource_request(self, client: Client, params: dict[str, Any]) -> Any:
        return await self.serve("resourceRequest", params)

    async def serve(self, method: str, params: dict[str, Any]) -> Any:
        if method in TWO_ENDED:
            return await self._serve_two_ended(method, params)
        uri = params.get("uri")
        if method == "resourceRead":
            for reader in self.readers:
                answer = await resolve(reader(params))
                if answer is not None:
                    return answer
        owner = self.publisher(uri)
        if owner is not None:
            return await self._forward(owner, method, params, uri)
        port = self._port_for(method, uri)
        return await getattr(port, PORT_METHODS[method])(params)

    async def _serve_two_ended(self, method: str, params: dict[str, Any]) -> Any:
        source, destination = params.get("source"), params.get("destination")
        source_owner, destination_owner = self.publisher(source), self.publisher(destination)
        if source_owner is not destination_owner:

            def whose(owner: Client | None) -> str:
                return f"client {owner.client_id}'s" if owner is not None else "this host's"

            raise ProtocolError(
                INVALID_PARAMS,
                f"{method} across two peers: {source} is {whose(source_owner)} and "
                f"{destination} is {whose(destination_owner)}, and neither can carry it out",
            )
        if source_owner is not None:
            return await self._forward(source_owner, method, params, source)
        port = self._port_for(method, source)
        return await getattr(port, PORT_METHODS[method])(params)

    async def _forward(
        self, owner: Client, method: str, params: Mapping[str, Any], uri: Any
    ) -> Any:
        try:
            result = await owner.peer.request(method, dict(params), timeout=FORWARD_TIMEOUT)
        except ProtocolError as error:
            log.info(
                "%s %s refused by client %s: %d %s",
                method,
                uri,
                owner.label,
                error.code,
                error.message,
            )
            raise  # verbatim: the client's code, message and data
        except PeerClosed:
            raise ProtocolError(
                NOT_FOUND, f"client {owner.client_id} left before answering {method} on {uri}"
            ) from None
        except TimeoutError:
            raise ProtocolError(
                INTERNAL_ERROR,
                f"client {owner.client_id} did not answer {method} on {uri} "
                f"within {FORWARD_TIMEOUT:g} s",
            ) from None
        problem = _result_problem(method, result)
        if problem is not None:
            log.warning(
                "%s %s: client %s answered with a malformed result: %s",
                method,
                uri,
                owner.label,
                problem,
            )
            raise ProtocolError(
                INTERNAL_ERROR,
                f"client {owner.client_id} answered {method} on {uri} with something that "
                f"is not a {method} result ({problem})",
            )
        log.debug("%s %s answered by client %s", method, uri, owner.label)
        return result

    # -- watches ------------------------------------------------------------------
    async def create_watch(self, client: Client, params: dict[str, Any]) -> dict[str, Any]:
        uri = params["uri"]
        held = sum(1 for watch in self.watches.values() if watch.creator is client)
        if held >= MAX_WATCHES_PER_CLIENT:
            raise ProtocolError(
                INVALID_PARAMS,
                f"this connection already holds {held} resource watches, the most one may "
                f"({MAX_WATCHES_PER_CLIENT}); unsubscribe from one to release it",
            )
        state: dict[str, Any] = {"root": uri, "recursive": bool(params.get("recursive", False))}
        for key in ("includes", "excludes"):
            if params.get(key) is not None:
                state[key] = params[key]
        owner = self.publisher(uri)
        if owner is not None:
            result = await self._forward(owner, "createResourceWatch", params, uri)
            channel = result.get("channel") if isinstance(result, dict) else None
            if not isinstance(channel, str) or not channel.startswith(f"{WATCH_SCHEME}:"):
                raise ProtocolError(
                    INTERNAL_ERROR,
                    f"client {owner.client_id} answered createResourceWatch on {uri} "
                    f"without an {WATCH_SCHEME}: channel",
                )
            if channel in self.engine.channels:
                raise ProtocolError(
                    ALREADY_EXISTS,
                    f"client {owner.client_id} named watch channel {channel}, "
                    "which this host already holds",
                )
            self.engine.add_channel(channel, WATCH_KIND, state)
            self.watches[channel] = Watch(channel, owner.client_id, owner, client)
            return {"channel": channel}
        port = self._port_for("createResourceWatch", uri)
        channel = f"{WATCH_SCHEME}:/{uuid.uuid4().hex}"
        self.engine.add_channel(channel, WATCH_KIND, state)
        watch = Watch(channel, None, None, client)
        self.watches[channel] = watch
        try:
            watch.handle = await port.watch(params, lambda changes: self._emit(channel, changes))
        except BaseException:
            self.watches.pop(channel, None)
            self.engine.remove_channel(channel)
            raise
        return {"channel": channel}

    def _emit(self, channel: str, changes: ResourceChanges) -> None:
        if channel not in self.watches or not changes:
            return  # released, or nothing to say: an empty batch must not be sent
        action = {"type": "resourceWatch/changed", "changes": {"items": list(changes)}}
        self.engine.apply(channel, action, always=True)

    async def _relay_changed(self, dispatch: Dispatch) -> None:
        watch = self.watches.get(dispatch.channel.uri)
        if watch is None or watch.owner_id is None:
            raise Refused("this host reports the changes of its own watches")
        if dispatch.client.client_id != watch.owner_id:
            raise Refused(
                f"only client {watch.owner_id}, which publishes what this watch covers, "
                "may report its changes"
            )
        if not dispatch.action["changes"]["items"]:
            raise Refused("an empty batch of changes is not sent")
        envelope = self.engine.apply(
            dispatch.channel.uri, dispatch.action, dispatch.origin, always=True
        )
        if envelope is not None and dispatch.client not in dispatch.channel.subscribers:
            # The owner is owed an answer to its clientSeq even when not watching.
            dispatch.client.peer.notify("action", envelope)

    def _unsubscribed(self, client: Client, uri: str) -> None:
        channel = self.engine.channels.get(uri)
        if uri in self.watches and (channel is None or not channel.subscribers):
            self.release(uri)

    def _disconnected(self, client: Client) -> None:
        # Called while the client still says what it watched.
        for uri, watch in list(self.watches.items()):
            channel = self.engine.channels.get(uri)
            watchers = set(channel.subscribers) if channel else set()
            mine = client in watchers or (watch.creator is client and not watchers)
            if watch.owner is client or (mine and not watchers - {client}):
                self.release(uri)

    def release(self, uri: str) -> None:
        """Stop a watch: its watcher is closed and its channel goes."""
        watch = self.watches.pop(uri, None)
        if watch is None:
            return
        self.engine.remove_channel(uri)
        if watch.handle is not None:
            try:
                watch.handle.close()
            except Exception:
                log.exception("closing the watcher of %s failed", uri)
        log.debug("released resource watch %s", uri)
