"""The inspector's host side: ``ahp/inspect`` answers figures and never a secret, and
the page is served on the host's port behind the same checks as a WebSocket."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import re
import subprocess
import zipfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from websockets.asyncio.client import connect

from ahp_scripted import Rule, ScriptedBackend
from ahpcore.host import HostSettings
from ahpcore.inspector.figures import INSPECT_METHOD, Figures
from ahpcore.inspector.page import page
from ahpcore.rpc.peer import HostQueues
from ahpcore.testing import RunningHost, running_host
from ahpcore.transports.websocket import ConnectionLimits, start_websocket_server
from tests.sessions.conftest import ScriptedPlugin, open_session, script, start_turn, turn_end
from tests.test_cli import start_serve
from tests.test_wheels import ROOT, uv

pytestmark = pytest.mark.anyio

TOKEN = "inspector-test-token-0123456789"


@asynccontextmanager
async def inspected(
    tmp_path: Path, *, inspector: bool = True, rules: tuple[Rule, ...] = ()
) -> AsyncIterator[tuple[RunningHost, int]]:
    """A host on the scripted backend with ``ahp/inspect``, and the port of a listener
    that serves the page (``inspector``) beside the test clients' own."""
    backend = ScriptedBackend(tmp_path / "scripted", script(*rules))
    settings = HostSettings(sessions="memory", port=0, state_dir=tmp_path / "state")
    queues = HostQueues()
    async with running_host(
        [("scripted", ScriptedPlugin(backend))],
        settings=settings,
        token=TOKEN,
        limits=ConnectionLimits(queues=queues),
    ) as running:
        if inspector:
            Figures(running.host, queues).register()
        server = await start_websocket_server(
            running.host.serve_connection,
            host="127.0.0.1",
            port=0,
            token=TOKEN,
            max_frame_bytes=1 << 20,
            compression=True,
            inspector=inspector,
        )
        try:
            yield running, next(iter(server.sockets)).getsockname()[1]
        finally:
            server.close()
            await server.wait_closed()


def _get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        body = response.read().decode("utf-8", "replace")
        return response.status, {k.lower(): v for k, v in response.getheaders()}, body
    finally:
        connection.close()


async def get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict, str]:
    return await anyio.to_thread.run_sync(_get, port, path, headers)


async def test_ahp_inspect_tells_connections_replay_and_plugins(tmp_path):
    async with inspected(tmp_path) as (running, _):
        watcher = await running.connect("watcher")
        await watcher.initialize()
        worker = await running.connect("worker")
        await worker.initialize()
        session, chat = await open_session(worker)
        await start_turn(worker, chat, "hello", "t1")
        await turn_end(worker, chat)

        figures = await watcher.request(INSPECT_METHOD)

        engine = running.host.engine_or_fail
        assert figures["serverSeq"] == engine.server_seq
        by_id = {each["clientId"]: each for each in figures["clients"]}
        assert set(by_id) == {"watcher", "worker"}
        assert by_id["watcher"]["you"] and not by_id["worker"]["you"]
        assert by_id["worker"]["subscriptions"] == 3  # root, the session, its chat
        assert by_id["worker"]["protocolVersion"] == "1.0.0"
        assert by_id["worker"]["queueLimit"] > 0
        inbound = by_id["worker"]["inbound"]
        assert inbound["framesPerSecond"] == running.host.settings.inbound_frames_per_second
        assert 0 < inbound["frames"] <= inbound["frameCapacity"]
        assert inbound["refused"] == 0
        replay = figures["replay"]
        assert replay["entries"] == len(engine.replay) > 0
        assert 0 < replay["bytes"] <= replay["maxBytes"]
        assert figures["hostQueues"]["ceiling"] == HostQueues().ceiling
        channels = {each["uri"]: each for each in figures["channels"]}
        assert channels[session]["kind"] == "session"
        assert channels[chat] == {"uri": chat, "kind": "chat", "subscribers": 1}
        plugins = {each["name"]: each for each in figures["plugins"]}
        assert "ahp_backends" in plugins["scripted"]["hooks"]
        assert plugins["core"]["essential"]
        assert {"method": INSPECT_METHOD, "owner": "ahpcore.inspector"} in figures["extraMethods"]


async def test_ahp_inspect_tells_no_token_and_nothing_a_plugin_keeps(tmp_path):
    async with inspected(tmp_path) as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        # What a plugin keeps about a connection (a pushed token, say) stays there.
        next(iter(running.host.engine_or_fail.clients)).data["secret"] = "kept-by-a-plugin"
        text = json.dumps(await client.request(INSPECT_METHOD))
        assert TOKEN not in text
        assert "kept-by-a-plugin" not in text


async def test_without_the_inspector_there_is_no_method_and_no_page(tmp_path):
    async with inspected(tmp_path, inspector=False) as (running, port):
        client = await running.connect("c1")
        await client.initialize()
        answer = await client.request_frame(INSPECT_METHOD)
        assert answer["error"]["code"] == -32601
        status, _, _ = await get(port, f"/inspect?token={TOKEN}")
        assert status == 426  # an AHP endpoint, not a page


async def test_ahp_inspect_needs_initialize_first(tmp_path):
    async with inspected(tmp_path) as (running, _):
        client = await running.connect("c1", conformance=False)
        answer = await client.request_frame(INSPECT_METHOD)
        assert answer["error"]["code"] == -32600


async def test_the_page_is_served_with_the_token_only(tmp_path):
    async with inspected(tmp_path) as (_, port):
        assert (await get(port, "/inspect"))[0] == 401
        assert (await get(port, "/inspect?token=wrong-token-wrong-token"))[0] == 401
        status, headers, body = await get(port, f"/inspect?token={TOKEN}")
        assert status == 200
        assert headers["content-type"] == "text/html; charset=utf-8"
        assert headers["cache-control"] == "no-store"
        assert headers["referrer-policy"] == "no-referrer"
        assert headers["x-content-type-options"] == "nosniff"
        assert "access-control-allow-origin" not in headers
        assert "<title>AHP inspector</title>" in body
        # The page holds no token of its own: it reads the one in its address.
        assert TOKEN not in body
        status, _, _ = await get(port, "/inspect", {"Authorization": f"Bearer {TOKEN}"})
        assert status == 200


async def test_the_page_is_refused_to_a_foreign_page_and_a_rebound_name(tmp_path):
    async with inspected(tmp_path) as (_, port):
        path = f"/inspect?token={TOKEN}"
        status, headers, _ = await get(port, path, {"Origin": "https://evil.example"})
        assert status == 403
        assert "access-control-allow-origin" not in headers
        assert (await get(port, path, {"Host": f"attacker.example:{port}"}))[0] == 403
        assert (await get(port, path, {"Origin": "null"}))[0] == 403
        # Its own origin, as a browser sends it for the page's WebSocket.
        own = {"Origin": f"http://127.0.0.1:{port}"}
        assert (await get(port, path, own))[0] == 200


def _hash(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


def test_the_policy_lets_run_only_the_page_own_style_and_script():
    document, headers = page()
    policy = headers["Content-Security-Policy"]
    scripts = re.findall(r"<script>(.*?)</script>", document, re.DOTALL)
    styles = re.findall(r"<style>(.*?)</style>", document, re.DOTALL)
    assert len(scripts) == 1 and len(styles) == 1
    assert f"script-src '{_hash(scripts[0])}'" in policy
    assert f"style-src '{_hash(styles[0])}'" in policy
    assert "default-src 'none'" in policy
    assert "connect-src 'self'" in policy
    assert "frame-ancestors 'none'" in policy
    # Nothing is loaded from elsewhere: no address in any src or href but the empty icon.
    assert re.findall(r'(?:src|href)="([^"]*)"', document) == ["data:,"]


def test_the_page_files_ship_in_the_wheel(tmp_path):
    subprocess.run(
        [uv(), "build", "--wheel", "--quiet", "--out-dir", str(tmp_path)],
        cwd=ROOT,
        check=True,
        timeout=300,
    )
    [wheel] = tmp_path.glob("ahpcore-*-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as archive:
        shipped = {n for n in archive.namelist() if n.startswith("ahpcore/inspector/static/")}
    assert shipped == {f"ahpcore/inspector/static/inspect.{ext}" for ext in ("html", "css", "js")}


def test_the_script_builds_no_markup_from_strings():
    script = (ROOT / "ahpcore" / "inspector" / "static" / "inspect.js").read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in script


async def test_ahp_serve_inspector_prints_the_page_and_serves_it(tmp_path):
    served = start_serve(tmp_path, "--inspector", "--no-plugins", "--sessions", "memory")
    try:
        assert served.process.stdout is not None
        line = await anyio.to_thread.run_sync(served.process.stdout.readline)
        while line.startswith("connect with:"):
            line = await anyio.to_thread.run_sync(served.process.stdout.readline)
        match = re.fullmatch(r"inspector: http://127\.0\.0\.1:(\d+)/inspect\?token=(\S+)\n", line)
        assert match is not None, line
        port = int(match.group(1))
        assert match.group(2) == served.token
        status, _, body = await get(port, f"/inspect?token={served.token}")
        assert status == 200 and "AHP inspector" in body
        async with connect(f"{served.url}?token={served.token}") as ws:
            for ident, method, params in (
                (1, "initialize", {"protocolVersions": ["1.0.0"], "clientId": "cli"}),
                (2, INSPECT_METHOD, {}),
            ):
                await ws.send(
                    json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
                )
                answer = json.loads(await ws.recv())
            assert [c["clientId"] for c in answer["result"]["clients"]] == ["cli"]
            assert served.token not in json.dumps(answer)
    finally:
        served.process.terminate()
        served.process.communicate(timeout=30)


async def test_ahp_serve_refuses_the_inspector_on_stdio(tmp_path):
    from tests.test_cli import run_ahp

    done = await anyio.to_thread.run_sync(
        lambda: run_ahp("serve", "--stdio", "--inspector", "--state-dir", str(tmp_path))
    )
    assert done.returncode == 2
    assert "--inspector serves its page on the TCP port" in done.stderr
