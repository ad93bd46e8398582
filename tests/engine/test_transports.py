"""The transports: WebSocket (token, plain HTTP answers, compression), stdio, Unix socket,
and the in-process pair."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request

import anyio
import pytest
from websockets.asyncio.client import connect, unix_connect
from websockets.exceptions import InvalidStatus

from ahpcore.host import Host, HostSettings
from ahpcore.plugins import PluginManager, Selection
from ahpcore.protocol.wire import assert_valid_frame
from ahpcore.transports.memory import memory_pair
from ahpcore.transports.websocket import start_unix_server

pytestmark = pytest.mark.anyio
ROOT = "ahp-root://"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"channel": ROOT, "protocolVersions": ["1.0.0"], "clientId": "t"},
}


def http_get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read().decode()


async def test_plain_http_is_401_without_the_token_and_426_with_it(ahp_host):
    async with ahp_host(no_plugins=True, token="s3cret") as running:
        http = running.url.replace("ws://", "http://")
        status, headers, body = await anyio.to_thread.run_sync(http_get, http)
        assert status == 401
        assert headers["Access-Control-Allow-Origin"] == "*"
        assert "token" in body
        status, headers, _ = await anyio.to_thread.run_sync(http_get, http + "?token=wrong")
        assert status == 401
        status, headers, body = await anyio.to_thread.run_sync(http_get, http + "?token=s3cret")
        assert status == 426
        assert headers["Access-Control-Allow-Origin"] == "*"
        status, headers, _ = await anyio.to_thread.run_sync(
            lambda: http_get(http, {"Authorization": "Bearer s3cret"})
        )
        assert status == 426


async def test_a_host_without_a_token_answers_426(ahp_host):
    async with ahp_host(no_plugins=True) as running:
        status, headers, _ = await anyio.to_thread.run_sync(
            http_get, running.url.replace("ws://", "http://")
        )
        assert status == 426 and headers["Access-Control-Allow-Origin"] == "*"


async def test_the_upgrade_needs_the_token(ahp_host):
    async with ahp_host(no_plugins=True, token="s3cret") as running:
        for url in (running.url, running.url + "?token=nope"):
            with pytest.raises(InvalidStatus) as refused:
                await connect(url)
            assert refused.value.response.status_code == 401
        async with connect(
            running.url, additional_headers={"Authorization": "Bearer s3cret"}
        ) as ws:
            await ws.send(json.dumps(INITIALIZE))
            answer = json.loads(await ws.recv())
            assert_valid_frame(answer, direction="server", request_method="initialize")
        client = await running.connect()  # ?token= from the harness
        await client.initialize()
        # VS Code builds the address with ?tkn=.
        with pytest.raises(InvalidStatus):
            await connect(running.url + "?tkn=nope")
        async with connect(running.url + "?tkn=s3cret") as ws:
            await ws.send(json.dumps(INITIALIZE))
            answer = json.loads(await ws.recv())
            assert_valid_frame(answer, direction="server", request_method="initialize")


@pytest.mark.parametrize("compression", [True, False])
async def test_compression_is_configurable(ahp_host, compression):
    settings = HostSettings(sessions="memory", port=0, compression=compression)
    async with ahp_host(no_plugins=True, settings=settings) as running, connect(running.url) as ws:
        extensions = ws.response.headers.get("Sec-WebSocket-Extensions", "")
        assert ("permessage-deflate" in extensions) is compression


async def test_a_frame_over_the_limit_closes_the_connection(ahp_host):
    settings = HostSettings(sessions="memory", port=0, max_frame_bytes=4096)
    async with ahp_host(no_plugins=True, settings=settings) as running:
        async with connect(running.url, max_size=None) as ws:
            await ws.send("x" * 10_000)
            with anyio.fail_after(10):
                await ws.wait_closed()
            assert ws.close_code == 1009
        client = await running.connect()  # the host still serves others
        await client.initialize()


async def test_frames_go_out_as_text_one_message_each(ahp_host):
    async with ahp_host(no_plugins=True) as running, connect(running.url) as ws:
        await ws.send(json.dumps(INITIALIZE))
        frame = await ws.recv()
        assert isinstance(frame, str)
        assert json.loads(frame)["id"] == 1


async def test_unix_socket(tmp_path):
    host = await Host(
        PluginManager(entry_points=False, selection=Selection(protocol_only=True)),
        HostSettings(sessions="memory"),
    ).start()
    path = tmp_path / "ahp.sock"
    server = await start_unix_server(
        host.serve_connection, path=str(path), max_frame_bytes=1 << 20, compression=False
    )
    try:
        assert path.stat().st_mode & 0o077 == 0  # only its owner may connect
        async with unix_connect(str(path)) as ws:
            await ws.send(json.dumps(INITIALIZE))
            answer = json.loads(await ws.recv())
            assert_valid_frame(answer, direction="server", request_method="initialize")
            assert answer["result"]["protocolVersion"] == "1.0.0"
    finally:
        server.close()
        await server.wait_closed()


async def test_in_process_pair():
    host = await Host(
        PluginManager(entry_points=False, selection=Selection(protocol_only=True)),
        HostSettings(sessions="memory"),
    ).start()
    client, wire, incoming = memory_pair()

    async def frames():
        try:
            return await incoming.receive()
        except anyio.EndOfStream:
            return None

    async with anyio.create_task_group() as tg:
        tg.start_soon(host.serve_connection, wire, frames)
        await client.send(INITIALIZE)
        with anyio.fail_after(10):
            answer = await client.recv()
        assert_valid_frame(answer, direction="server", request_method="initialize")
        await client.aclose()
    assert host.engine_or_fail.clients == set()


def test_stdio_speaks_newline_delimited_json_rpc(tmp_path):
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ahpcore.cli",
            "serve",
            "--stdio",
            "--no-plugins",
            "--sessions",
            "memory",
            "--state-dir",
            str(tmp_path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdin and process.stdout
        process.stdin.write(json.dumps(INITIALIZE) + "\n")
        process.stdin.write('{"jsonrpc":"2.0","id":2,"method":"ping"}\n')
        process.stdin.flush()
        first = json.loads(process.stdout.readline())
        assert_valid_frame(first, direction="server", request_method="initialize")
        assert first["result"]["protocolVersion"] == "1.0.0"
        assert json.loads(process.stdout.readline()) == {"jsonrpc": "2.0", "id": 2, "result": None}
        process.stdin.close()  # end of input ends the host
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


async def test_a_unix_socket_path_that_is_not_a_socket_is_left_alone(tmp_path):
    host = await Host(
        PluginManager(entry_points=False, selection=Selection(protocol_only=True)),
        HostSettings(sessions="memory"),
    ).start()
    path = tmp_path / "precious.txt"
    path.write_text("keep me")
    with pytest.raises(FileExistsError, match="not a socket"):
        await start_unix_server(
            host.serve_connection, path=str(path), max_frame_bytes=1 << 20, compression=False
        )
    assert path.read_text() == "keep me"
