"""A small AHP host written for the check's tests, with faults that can be switched on.

It is not this project's host: a few hundred lines over ``websockets`` that
keep one serverSeq, a replay buffer, a root, sessions with their chats, and an
agent that answers each turn after a moment. Without faults it passes every
check; each fault breaks one thing the protocol asks, so a test can show that
``ahp check`` notices it and names it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import anyio
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from ahpcore import reducers
from ahpcore.protocol.errors import ProtocolError
from ahpcore.protocol.methods import COMMANDS
from ahpcore.protocol.uris import ROOT_CHANNEL, default_chat_uri, same_session
from ahpcore.protocol.versions import negotiate
from ahpcore.protocol.wire import validate_params

FAULTS = frozenset(
    {
        # the answer to an unsupported version is a result, not -32005
        "unsupported-version-accepted",
        # an unknown method is answered -32600
        "unknown-method-code",
        # initialize's result carries a key the protocol does not declare
        "extra-field",
        # the second action a connection is sent carries an older serverSeq
        "seq-backwards",
        # the agent's answer is sent with other words than the ones kept
        "replay-disagrees",
        # a replay also carries the action the client saw last
        "replay-stale",
        # unsubscribe is ignored
        "leaky-unsubscribe",
        # the agent never ends a turn
        "turn-never-ends",
        # the WebSocket opens, and nothing is ever answered
        "silent",
    }
)

AGENT = {
    "provider": "fake",
    "displayName": "Fake agent",
    "description": "Answers every message with the same words.",
    "models": [{"id": "fake", "provider": "fake", "name": "Fake"}],
    "capabilities": {"multipleChats": {}},
}
WHEN = "2026-01-01T00:00:00.000Z"


@dataclass
class Peer:
    ws: ServerConnection
    client_id: str = ""
    subscriptions: set[str] = field(default_factory=set)
    sent_actions: int = 0


@dataclass
class FakeHost:
    faults: frozenset[str] = frozenset()
    with_agent: bool = True
    seq: int = 1000
    channels: dict[str, tuple[str, Any]] = field(default_factory=dict)
    buffer: list[dict[str, Any]] = field(default_factory=list)
    peers: list[Peer] = field(default_factory=list)
    url: str = ""
    #: Where the agent's answers run (set while serving).
    group: Any = None

    def __post_init__(self) -> None:
        unknown = set(self.faults) - FAULTS
        assert not unknown, f"no such fault: {unknown}"
        self.channels[ROOT_CHANNEL] = ("root", {"agents": [AGENT] if self.with_agent else []})

    # -- wire

    async def serve(self, ws: ServerConnection) -> None:
        peer = Peer(ws)
        self.peers.append(peer)
        try:
            async for data in ws:
                if "silent" in self.faults:
                    continue
                await self.handle(peer, data)
        except ConnectionClosed:
            pass
        finally:
            self.peers.remove(peer)

    async def send(self, peer: Peer, message: dict[str, Any]) -> None:
        with suppress(ConnectionClosed):
            await peer.ws.send(json.dumps({"jsonrpc": "2.0", **message}))

    async def handle(self, peer: Peer, data: str | bytes) -> None:
        try:
            frame = json.loads(data)
        except ValueError:
            await self.send(peer, {"id": None, "error": {"code": -32700, "message": "not JSON"}})
            return
        ident = frame.get("id") if isinstance(frame, dict) else None
        if not isinstance(frame, dict) or not isinstance(frame.get("method"), str):
            await self.send(peer, {"id": ident, "error": {"code": -32600, "message": "bad"}})
            return
        method, params = frame["method"], frame.get("params")
        if "id" not in frame:
            await self.notification(peer, method, params)
            return
        try:
            result = await self.command(peer, method, params)
        except ProtocolError as exc:
            await self.send(peer, {"id": ident, "error": exc.to_error()})
            return
        await self.send(peer, {"id": ident, "result": result})

    # -- commands

    async def command(self, peer: Peer, method: str, params: Any) -> Any:
        if method not in COMMANDS:
            code = -32600 if "unknown-method-code" in self.faults else -32601
            raise ProtocolError(code, f"unknown method {method}")
        if not isinstance(params, dict):
            raise ProtocolError(-32602, "params must be an object")
        issues = validate_params(method, params)
        if issues:
            raise ProtocolError(-32602, f"{method}: {issues[0]}")
        handler = getattr(self, "do_" + method, None)
        if handler is None:
            raise ProtocolError(-32601, f"{method} is not served here")
        return await handler(peer, params)

    async def do_initialize(self, peer: Peer, params: dict[str, Any]) -> Any:
        try:
            chosen = negotiate(params["protocolVersions"], ["1.0.0"])
        except ProtocolError as exc:
            if exc.code == -32005 and "unsupported-version-accepted" in self.faults:
                offered = params["protocolVersions"][0]
                return {"protocolVersion": offered, "serverSeq": self.seq, "snapshots": []}
            raise
        peer.client_id = params["clientId"]
        snapshots = [
            self.snapshot(uri)
            for uri in params.get("initialSubscriptions", [])
            if uri in self.channels
        ]
        peer.subscriptions.update(s["resource"] for s in snapshots)
        result = {
            "protocolVersion": chosen.protocol_version,
            "serverSeq": self.seq,
            "snapshots": snapshots,
        }
        if "extra-field" in self.faults:
            result["bogus"] = True
        return result

    async def do_ping(self, peer: Peer, params: dict[str, Any]) -> Any:
        return None

    async def do_listSessions(self, peer: Peer, params: dict[str, Any]) -> Any:
        return {"items": []}

    async def do_subscribe(self, peer: Peer, params: dict[str, Any]) -> Any:
        uri = params["channel"]
        if uri not in self.channels:
            raise ProtocolError(-32008, f"no channel {uri}")
        peer.subscriptions.add(uri)
        return {"snapshot": self.snapshot(uri)}

    async def do_reconnect(self, peer: Peer, params: dict[str, Any]) -> Any:
        peer.client_id = params["clientId"]
        wanted = params["subscriptions"]
        known = [uri for uri in wanted if uri in self.channels]
        peer.subscriptions.update(known)
        last = params["lastSeenServerSeq"]
        if self.buffer and last >= self.buffer[0]["serverSeq"] - 1:
            floor = last - 1 if "replay-stale" in self.faults else last
            actions = [e for e in self.buffer if e["serverSeq"] > floor and e["channel"] in known]
            missing = [uri for uri in wanted if uri not in self.channels]
            return {"type": "replay", "actions": actions, "missing": missing}
        return {"type": "snapshot", "snapshots": [self.snapshot(uri) for uri in known]}

    async def do_createSession(self, peer: Peer, params: dict[str, Any]) -> Any:
        uri = params["channel"]
        if params.get("provider") != AGENT["provider"] or not self.with_agent:
            raise ProtocolError(-32002, f"no provider {params.get('provider')!r}")
        if any(same_session(uri, held) for held in self.sessions()):
            raise ProtocolError(-32003, f"{uri} exists")
        chat = default_chat_uri(uri)
        summary = {"resource": chat, "title": "", "status": 1, "modifiedAt": WHEN}
        self.channels[chat] = ("chat", {**summary, "turns": []})
        self.channels[uri] = (
            "session",
            {
                "provider": "fake",
                "title": "",
                "status": 1,
                "lifecycle": "creating",
                "activeClients": [],
                "chats": [summary],
                "defaultChat": chat,
            },
        )
        self.ready_soon(uri)
        await self.notify_root(
            "root/sessionAdded",
            {
                "summary": {
                    "resource": uri,
                    "provider": "fake",
                    "title": "",
                    "status": 1,
                    "createdAt": WHEN,
                    "modifiedAt": WHEN,
                }
            },
        )
        return None

    async def do_disposeSession(self, peer: Peer, params: dict[str, Any]) -> Any:
        uri = params["channel"]
        if uri not in self.sessions():
            raise ProtocolError(-32001, f"no session {uri}")
        _, state = self.channels.pop(uri)
        for chat in state["chats"]:
            self.channels.pop(chat["resource"], None)
        await self.notify_root("root/sessionRemoved", {"session": uri})
        return None

    async def do_createChat(self, peer: Peer, params: dict[str, Any]) -> Any:
        session, chat = params["channel"], params["chat"]
        if session not in self.sessions():
            raise ProtocolError(-32001, f"no session {session}")
        summary = {"resource": chat, "title": "", "status": 1, "modifiedAt": WHEN}
        self.channels[chat] = ("chat", {**summary, "turns": []})
        await self.apply(session, {"type": "session/chatAdded", "summary": summary})
        return None

    # -- notifications and actions

    async def notification(self, peer: Peer, method: str, params: Any) -> None:
        if method == "unsubscribe" and "leaky-unsubscribe" not in self.faults:
            peer.subscriptions.discard(params.get("channel"))
        elif method == "dispatchAction":
            await self.dispatch(peer, params)

    async def dispatch(self, peer: Peer, params: dict[str, Any]) -> None:
        channel, action = params["channel"], params["action"]
        origin = {"clientId": peer.client_id, "clientSeq": params["clientSeq"]}
        if channel not in self.channels:
            await self.send(
                peer,
                {
                    "method": "action",
                    "params": {
                        "channel": channel,
                        "action": action,
                        "serverSeq": self.seq,
                        "origin": origin,
                        "rejectionReason": "no such channel",
                    },
                },
            )
            return
        if action["type"] == "chat/turnCancelled":
            active = self.channels[channel][1].get("activeTurn")
            if not active or active.get("id") != action["turnId"]:
                await self.send(
                    peer,
                    {
                        "method": "action",
                        "params": {
                            "channel": channel,
                            "action": action,
                            "serverSeq": self.seq,
                            "origin": origin,
                            "rejectionReason": "no such turn",
                        },
                    },
                )
                return
        await self.apply(channel, action, origin)
        if action["type"] == "chat/turnStarted" and "turn-never-ends" not in self.faults:
            self.later(channel, action["turnId"])

    def ready_soon(self, session: str) -> None:
        """A session is created ``creating`` and made ready a moment later, as the protocol has it."""

        async def ready() -> None:
            await anyio.sleep(0.1)
            if session in self.channels:
                await self.apply(session, {"type": "session/ready"})

        self.group.start_soon(ready)

    def later(self, chat: str, turn: str) -> None:
        async def answer() -> None:
            await anyio.sleep(0.3)  # time for a cancel to land
            active = self.channels.get(chat, ("", {}))[1].get("activeTurn")
            if not active or active.get("id") != turn:
                return
            part = {"kind": "markdown", "id": f"{turn}.1", "content": "Hello from the fake agent."}
            await self.apply(chat, {"type": "chat/responsePart", "turnId": turn, "part": part})
            await self.apply(chat, {"type": "chat/turnComplete", "turnId": turn, "duration": 300})

        assert self.group is not None
        self.group.start_soon(answer)

    async def apply(
        self, channel: str, action: dict[str, Any], origin: dict[str, Any] | None = None
    ) -> None:
        kind, state = self.channels[channel]
        self.seq += 1
        self.channels[channel] = (kind, reducers.reduce(kind, state, action))
        sent = action
        if "replay-disagrees" in self.faults and action["type"] == "chat/responsePart":
            sent = {**action, "part": {**action["part"], "content": "Other words."}}
        envelope: dict[str, Any] = {"channel": channel, "action": sent, "serverSeq": self.seq}
        if origin is not None:
            envelope["origin"] = origin
        self.buffer.append(envelope)
        for peer in list(self.peers):
            if channel in peer.subscriptions:
                peer.sent_actions += 1
                shown = envelope
                if "seq-backwards" in self.faults and peer.sent_actions == 2:
                    shown = {**envelope, "serverSeq": self.seq - 50}
                await self.send(peer, {"method": "action", "params": shown})

    async def notify_root(self, method: str, params: dict[str, Any]) -> None:
        for peer in list(self.peers):
            if ROOT_CHANNEL in peer.subscriptions:
                await self.send(
                    peer, {"method": method, "params": {"channel": ROOT_CHANNEL, **params}}
                )

    # -- state

    def sessions(self) -> list[str]:
        return [uri for uri, (kind, _) in self.channels.items() if kind == "session"]

    def snapshot(self, uri: str) -> dict[str, Any]:
        return {"resource": uri, "state": self.channels[uri][1], "fromSeq": self.seq}


@asynccontextmanager
async def fake_host(*faults: str, with_agent: bool = True) -> AsyncIterator[FakeHost]:
    """A fake host serving 127.0.0.1 on a free port, with ``faults`` switched on."""
    host = FakeHost(frozenset(faults), with_agent)
    async with anyio.create_task_group() as group:
        host.group = group
        async with serve(host.serve, "127.0.0.1", 0) as server:
            port = next(iter(server.sockets)).getsockname()[1]
            host.url = f"ws://127.0.0.1:{port}/"
            yield host
            server.close()
        group.cancel_scope.cancel()
