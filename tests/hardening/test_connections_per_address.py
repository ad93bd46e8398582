"""One address may hold only so many connections (all of loopback is one address): the next
upgrade is refused 429 saying why, and a connection that ends makes room."""

from __future__ import annotations

import socket
import sys

import anyio
import pytest
from websockets.asyncio.client import ClientConnection, connect

from ahpcore.host import HostSettings
from ahpcore.transports.websocket import ConnectionLimits, start_websocket_server
from tests.hardening.handshakes import handshake

pytestmark = pytest.mark.anyio
LIMIT = 3


async def connect_from(url: str, source: str) -> ClientConnection:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((source, 0))
    host, port = url.removeprefix("ws://").strip("/").split(":")
    sock.connect((host, int(port)))
    sock.setblocking(False)
    return await connect(url, sock=sock)


async def test_the_connection_past_the_limit_from_one_address_is_refused(ahp_host):
    limits = ConnectionLimits(per_address=LIMIT)
    settings = HostSettings(sessions="memory", port=0)
    async with ahp_host(no_plugins=True, settings=settings) as running:
        server = await start_websocket_server(
            running.host.serve_connection,
            host="127.0.0.1",
            port=0,
            token=None,
            max_frame_bytes=1 << 20,
            compression=False,
            limits=limits,
        )
        url = f"ws://127.0.0.1:{next(iter(server.sockets)).getsockname()[1]}/"
        try:
            # Plain HTTP requests are answered and not counted.
            for _ in range(LIMIT + 2):
                status, _, _ = await handshake(url, upgrade=False)
                assert status == 426
            # Every 127.x.y.z source is the same address.
            held = [await connect_from(url, f"127.0.0.{n}") for n in range(1, LIMIT + 1)]
            assert limits.open_from("127.0.0.1") == LIMIT
            for source in ("127.0.0.1", "127.0.0.9", "127.3.2.1"):
                status, _, body = await handshake(url, source=source)
                assert status == 429, source
                assert "--max-connections-per-address" in body
            # Those open are served as before; one that ends makes room.
            await held[0].send('{"jsonrpc":"2.0","id":1,"method":"ping"}')
            assert '"id":1' in (await held[0].recv()).replace(" ", "")
            await held[0].close()
            with anyio.fail_after(10):
                while limits.open_from("127.0.0.1") >= LIMIT:
                    await anyio.sleep(0.01)
            held[0] = await connect_from(url, "127.0.0.5")
            assert limits.open_from("127.0.0.5") == LIMIT
            # A connection dropped without a close is let go of too.
            held[1].transport.abort()
            with anyio.fail_after(10):
                while limits.open_from("127.0.0.1") >= LIMIT:
                    await anyio.sleep(0.01)
            for ws in held:
                await ws.close()
            with anyio.fail_after(10):
                while limits.open_from("127.0.0.1"):
                    await anyio.sleep(0.01)
        finally:
            server.close()
            await server.wait_closed()


def test_the_default_limit_is_64():
    assert ConnectionLimits().per_address == 64


async def test_ahp_serve_takes_the_limits_from_its_options(tmp_path):
    from tests.test_cli import start_serve

    served = start_serve(
        tmp_path, "--no-token", "--no-plugins", "--max-connections-per-address", "1"
    )
    try:
        async with connect(served.url) as first:
            status, _, body = await handshake(served.url, source="127.0.0.2")
            assert status == 429 and "already has 1 connections" in body
            await first.send('{"jsonrpc":"2.0","id":1,"method":"ping"}')
            assert '"id":1' in (await first.recv()).replace(" ", "")
    finally:
        served.process.terminate()
        served.process.wait(timeout=10)
    for option, value in (("--max-connections-per-address", "-1"), ("--host-queue-bytes", "10")):
        served_badly = await anyio.run_process(
            [sys.executable, "-m", "ahpcore.cli", "serve", option, value], check=False
        )
        assert served_badly.returncode == 2, option
        assert option in served_badly.stderr.decode()
