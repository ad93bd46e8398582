"""``ahp/inspect``: the figures AHP itself does not tell, for the inspector page.

A client learns sessions, chats and actions through the protocol. What only the
host knows (each connection's backlog and inbound budget, the replay buffer's
fill, which hooks each plugin implements) is answered here, read-only, as one
snapshot. The method is not a protocol method: ``ahp serve --inspector`` adds
it to the router, and it is answered like any request, to an initialized
connection that passed the token. Nothing it answers is a secret: no token,
nothing a plugin keeps about a connection, no session content.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ahpcore.engine.clients import Client
from ahpcore.engine.core import Engine
from ahpcore.engine.router import Router
from ahpcore.plugins import PluginManager
from ahpcore.protocol.methods import COMMANDS
from ahpcore.rpc.peer import HostQueues
from ahpcore.version import __version__

#: A host-specific method name: the protocol's own methods have no slash.
INSPECT_METHOD = "ahp/inspect"
#: Channels listed at most; the rest are counted.
MAX_CHANNELS = 500


class Inspected(Protocol):
    """What the figures are read from: a started host (``ahpcore.host.Host``)."""

    router: Router
    plugins: PluginManager

    @property
    def engine_or_fail(self) -> Engine: ...


@dataclass
class Figures:
    """Answers ``ahp/inspect`` for one host."""

    host: Inspected
    #: The ledger of what all clients have yet to take, when the server keeps one.
    queues: HostQueues | None = None
    clock: Callable[[], float] = time.monotonic
    started: float = field(init=False)

    def __post_init__(self) -> None:
        self.started = self.clock()

    def register(self) -> None:
        """Serve ``ahp/inspect`` on the host's router (once)."""
        self.host.router.add(INSPECT_METHOD, self.answer, owner="ahpcore.inspector")

    def answer(self, client: Client, params: dict[str, Any]) -> dict[str, Any]:
        engine = self.host.engine_or_fail
        replay = engine.replay
        channels = sorted(engine.channels.values(), key=lambda c: (c.kind, c.uri))
        return {
            "version": __version__,
            "uptimeSeconds": round(self.clock() - self.started, 3),
            "serverSeq": engine.server_seq,
            "replay": {
                "entries": len(replay),
                "maxEntries": replay.max_count,
                "bytes": replay.bytes,
                "maxBytes": replay.max_bytes(),
                "oldestSeq": replay.oldest_seq,
            },
            "hostQueues": None if self.queues is None else _host_queues(self.queues),
            "clients": [
                _client(each, each is client)
                for each in sorted(engine.clients, key=lambda c: c.peer.id)
            ],
            "channels": [
                {"uri": channel.uri, "kind": channel.kind, "subscribers": len(channel.subscribers)}
                for channel in channels[:MAX_CHANNELS]
            ],
            "channelCount": len(channels),
            "plugins": [info.as_json() for info in self.host.plugins.plugins()],
            "pluginFailures": [
                {"name": failure.name, "error": failure.error}
                for failure in self.host.plugins.failures
            ],
            "extraMethods": [
                {"method": method, "owner": route.owner}
                for method, route in sorted(self.host.router.routes.items())
                if method not in COMMANDS
            ],
        }


def _host_queues(queues: HostQueues) -> dict[str, Any]:
    return {
        "bytes": queues.total(),
        "ceiling": queues.ceiling,
        "closedFurthestBehind": queues.closed_furthest_behind,
        "dropped": queues.dropped,
    }


def _client(client: Client, asking: bool) -> dict[str, Any]:
    peer = client.peer
    budget = peer.budget
    inbound: dict[str, Any] | None = None
    if budget is not None:
        frames, size = budget.levels()
        inbound = {
            "framesPerSecond": budget.frames_per_second,
            "bytesPerSecond": budget.bytes_per_second,
            "frames": round(frames, 1),
            "frameCapacity": budget.frame_capacity,
            "bytes": round(size),
            "byteCapacity": budget.byte_capacity,
            "refused": budget.refused,
        }
    return {
        "connection": peer.id,
        # The client's own choice of name: the page shows it as text, never as markup.
        "clientId": client.client_id,
        "transport": getattr(peer.wire, "label", type(peer.wire).__name__),
        "protocolVersion": client.served_as,
        "subscriptions": len(client.subscriptions),
        "queuedBytes": peer.queued_bytes,
        "heldBytes": client.held_bytes,
        "queueLimit": peer.queue_limit(),
        "inbound": inbound,
        "closing": peer.closed,
        "you": asking,
    }
