"""What all clients have yet to take is bounded for the host, not only per connection: past
the ceiling the client furthest behind is closed with a reason, and a reading client goes on."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from ahpcore.host import Host
from ahpcore.protocol.uris import ROOT_CHANNEL
from ahpcore.rpc.peer import FURTHEST_BEHIND, HostQueues
from ahpcore.testing import AhpTestClient
from ahpcore.transports.websocket import ConnectionLimits, start_websocket_server
from tests.sessions.conftest import session_uri

pytestmark = pytest.mark.anyio
MIB = 1024 * 1024
CEILING = 6 * MIB
TITLE_BYTES = 64 * 1024


@asynccontextmanager
async def served(host: Host, limits: ConnectionLimits) -> AsyncIterator[str]:
    server = await start_websocket_server(
        host.serve_connection,
        host="127.0.0.1",
        port=0,
        token=None,
        max_frame_bytes=1 << 24,
        compression=False,
        limits=limits,
    )
    try:
        yield f"ws://127.0.0.1:{next(iter(server.sockets)).getsockname()[1]}/"
    finally:
        server.close()
        await server.wait_closed()


async def silent_client(url: str, name: str, channels: list[str]) -> ClientConnection:
    """A client that subscribes and then reads nothing (a small socket buffer, so what
    it is sent piles up on the host soon)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    host, port = url.removeprefix("ws://").strip("/").split(":")
    sock.connect((host, int(port)))
    sock.setblocking(False)
    ws = await connect(url, sock=sock, max_size=None, max_queue=1, compression=None)
    await ws.send(json.dumps(initialize(name, channels)))
    while json.loads(await ws.recv()).get("id") != 0:
        pass
    return ws


def initialize(name: str, channels: list[str]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "channel": ROOT_CHANNEL,
            "protocolVersions": ["1.0.0"],
            "clientId": name,
            "initialSubscriptions": channels,
        },
    }


def queued_on_host(host: Host) -> dict[str, int]:
    """What each connected client has yet to take: its peer's outbox and its socket's buffer."""
    return {
        client.client_id or str(client.peer.id): client.peer.queued_bytes
        + (client.peer.wire.buffered_bytes() or 0)
        for client in host.engine_or_fail.clients
    }


def peer_of(host: Host, client_id: str) -> Any:
    return next(c.peer for c in host.engine_or_fail.clients if c.client_id == client_id)


async def test_past_the_host_ceiling_the_client_furthest_behind_is_closed(session_host):
    async with session_host(sessions="memory") as (running, _):
        host = running.host
        engine = host.engine_or_fail
        async with served(host, ConnectionLimits(queues=HostQueues(CEILING))) as url:
            session = session_uri(1)
            driver = AhpTestClient(await connect(url, max_size=None), "driver")
            await driver.initialize([])
            await driver.request("createSession", {"channel": session, "provider": "scripted"})
            reader = AhpTestClient(await connect(url, max_size=None), "reader")
            await reader.initialize([session])
            titles_read: list[str] = []

            async def read() -> None:
                while True:
                    frame = await reader.recv(timeout=60)
                    action = frame.get("params", {}).get("action", {})
                    if action.get("type") == "session/titleChanged":
                        titles_read.append(action["title"])

            behind = await silent_client(url, "behind", [session])
            sent = 0
            most = 0

            async def dispatch() -> None:
                nonlocal sent, most
                sent += 1
                title = f"{sent:06d}" + "x" * TITLE_BYTES
                await driver.dispatch(session, {"type": "session/titleChanged", "title": title})
                await driver.sync()
                most = max(most, sum(queued_on_host(host).values()))
                assert most <= CEILING, queued_on_host(host)

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(read)
                # The first silent client falls behind on its own for a while...
                for _ in range(400):
                    if queued_on_host(host)["behind"] >= 2 * MIB:
                        break
                    await dispatch()
                # ... then two more, until the host's queues are full.
                others = [await silent_client(url, f"silent-{n}", [session]) for n in range(2)]
                for _ in range(400):
                    if peer_of(host, "behind").closed:
                        break
                    await dispatch()
                assert peer_of(host, "behind").close_reason == FURTHEST_BEHIND
                assert not any(peer_of(host, f"silent-{n}").closed for n in range(2))
                # The reading client has every title, and is served on.
                with anyio.fail_after(30):
                    while len(titles_read) < sent:
                        await anyio.sleep(0.01)
                tasks.cancel_scope.cancel()
            assert [int(title[:6]) for title in titles_read] == list(range(1, sent + 1))
            await reader.sync()
            # The client that was furthest behind reads what it was sent, then why it ends.
            with anyio.fail_after(30), pytest.raises(ConnectionClosed):
                while True:
                    await behind.recv()
            assert behind.close_code == 1008
            assert "furthest behind" in (behind.close_reason or "")
            print(f"{sent} titles; the host's queues held at most {most / MIB:.1f} MiB")
            for ws in others:
                ws.transport.abort()
            await driver.close()
            await reader.close()
        with anyio.fail_after(10):
            while any(client.client_id == "behind" for client in engine.clients):
                await anyio.sleep(0.01)
