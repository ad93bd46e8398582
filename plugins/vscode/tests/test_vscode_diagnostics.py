"""shutdown, the diagnostics methods and the root config keys, over real sockets."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import anyio
import pytest

from ahp_vscode.diagnostics import Endpoint
from ahp_vscode.plugin import DETACHED_WORKTREES_FLAG, VSCodePlugin
from ahpcore.protocol.errors import INTERNAL_ERROR, INVALID_PARAMS, PERMISSION_DENIED
from ahpcore.testing import running_host

pytestmark = pytest.mark.anyio
ROOT = "ahp-root://"


class Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[str] = []

    def do_GET(self) -> None:
        self.seen.append(self.path)
        if self.path == "/moved":
            self.send_response(302)
            self.send_header("Location", "/secret")
            self.end_headers()
            return
        body = b"pong " + b"x" * 10_000
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    Recorder.seen = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def plugin_for(base: str, stops: list[str] | None = None) -> VSCodePlugin:
    endpoints = [Endpoint("Local", f"{base}/ping"), Endpoint("Moved", f"{base}/moved", 302)]
    if stops is None:
        return VSCodePlugin(endpoints=endpoints)
    return VSCodePlugin(endpoints=endpoints, stop=lambda: stops.append("stopped"))


async def test_diagnostics_name_the_endpoints_and_fetch_only_those(server, tmp_path):
    async with running_host([("vscode", plugin_for(server))], state_dir=tmp_path) as running:
        client = await running.connect()
        result = await client.initialize()
        meta = result.get("_meta") or {}
        assert "vscode.agentHost" not in meta
        assert DETACHED_WORKTREES_FLAG not in meta  # no worktrees port on this host

        info = await client.request("getNetworkDiagnosticsInfo")
        assert set(info) == {"version", "os", "arch", "proxySettings", "proxyEnv", "endpoints"}
        assert info["proxyEnv"] == {}
        assert info["endpoints"][0] == {
            "name": "Local",
            "url": f"{server}/ping",
            "expectedStatus": 200,
        }
        assert await client.request("getManagedSettingsDiagnostics") == []

        fetched = await client.request("diagnosticsFetch", {"url": f"{server}/ping"})
        assert fetched["statusCode"] == 200
        assert fetched["body"].startswith("pong") and len(fetched["body"]) == 4096
        assert fetched["dnsIpv4"]["address"] == "127.0.0.1"
        assert fetched["durationMs"] >= 0 and "proxyUrl" not in fetched

        # A redirect is reported, never followed.
        moved = await client.request("diagnosticsFetch", {"url": f"{server}/moved"})
        assert moved["statusCode"] == 302

        refused = await client.request_frame("diagnosticsFetch", {"url": f"{server}/secret"})
        assert refused["error"]["code"] == PERMISSION_DENIED
        assert refused["error"]["message"].startswith("diagnosticsFetch: ")
        assert f"{server}/ping" in refused["error"]["message"]
        bad = await client.request_frame("diagnosticsFetch", {"url": 3})
        assert bad["error"]["code"] == INVALID_PARAMS
        assert Recorder.seen == ["/ping", "/moved"]


async def test_proxy_credentials_never_reach_the_window(server, tmp_path, monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://me:hunter2@proxy.example:3128")
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    async with running_host([("vscode", plugin_for(server))], state_dir=tmp_path) as running:
        client = await running.connect()
        await client.initialize()
        info = await client.request("getNetworkDiagnosticsInfo")
        assert info["proxyEnv"] == {
            "HTTPS_PROXY": "http://[redacted]@proxy.example:3128",
            "no_proxy": "127.0.0.1",
        }


async def test_shutdown_answers_null_then_stops_the_host(server, tmp_path):
    stops: list[str] = []
    plugin = plugin_for(server, stops)
    async with running_host([("vscode", plugin)], state_dir=tmp_path) as running:
        client = await running.connect()
        await client.initialize()
        assert await client.request("shutdown") is None
        assert await client.request("shutdown") is None  # asked twice: once is enough
        with anyio.fail_after(5):
            while not stops:
                await anyio.sleep(0.02)
        await anyio.sleep(0.3)
        assert stops == ["stopped"]


async def test_shutdown_is_refused_where_nothing_stops_on_sigterm(server, tmp_path):
    # pytest leaves SIGTERM to its default: the plugin must not kill what runs it.
    async with running_host([("vscode", plugin_for(server))], state_dir=tmp_path) as running:
        client = await running.connect()
        await client.initialize()
        refused = await client.request_frame("shutdown")
        assert refused["error"]["code"] == INTERNAL_ERROR
        assert refused["error"]["message"].startswith("shutdown: ")


async def test_the_windows_root_config_is_kept_and_read_back(server, tmp_path):
    pushed = {
        "telemetryLevel": "error",
        "terminalAutoApproveEnabled": True,
        "terminalAutoApproveRules": {"ls": True, "rm": False, "git push": None},
        "mcpServers": {},
        "permissions": {"allow": [], "deny": []},
        "claudeMultiRootEnabled": False,
    }
    async with running_host([("vscode", plugin_for(server))], state_dir=tmp_path) as running:
        client = await running.connect()
        await client.initialize()
        seq = await client.dispatch(ROOT, {"type": "root/configChanged", "config": pushed})
        answer = await client.answer_to(seq)
        assert "rejectionReason" not in answer
        other = await running.connect()
        result = await other.initialize()
        values = result["snapshots"][0]["state"]["config"]["values"]
        assert {key: values[key] for key in pushed} == pushed


async def test_shutdown_stops_a_real_ahp_serve(tmp_path):
    import json
    import re
    import subprocess
    import sys

    from websockets.asyncio.client import connect

    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "ahpcore.cli", "serve", "--port", "0", "--no-token"),
            *("--plugins", "vscode", "--state-dir", str(tmp_path / "state")),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = None
        with anyio.fail_after(60):
            while url is None:
                line = await anyio.to_thread.run_sync(process.stdout.readline)
                assert line, "ahp serve exited early"
                if match := re.search(r"listening on (ws://\S+)", line):
                    url = match.group(1)
        async with connect(url) as ws:
            hello = {"channel": ROOT, "protocolVersions": ["1.0.0"], "clientId": "window"}
            await ws.send(
                json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello})
            )
            assert "result" in json.loads(await ws.recv())
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "shutdown"}))
            assert json.loads(await ws.recv()) == {"jsonrpc": "2.0", "id": 2, "result": None}
        with anyio.fail_after(30):
            while process.poll() is None:
                await anyio.sleep(0.05)
        assert process.returncode == 0
        assert "ahp stopped" in (process.stderr.read() if process.stderr else "")
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
