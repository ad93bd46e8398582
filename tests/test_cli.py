"""The ahp command, run as a user runs it: a real process, a real WebSocket, real signals."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import connect

from ahpcore.protocol.wire import assert_valid_frame
from tests.test_plugins import GOOD, make_distribution

AHP = [sys.executable, "-m", "ahpcore.cli"]


def run_ahp(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*AHP, *args], capture_output=True, text=True, timeout=timeout, env=env or os.environ.copy()
    )


def test_version():
    done = run_ahp("version")
    assert done.returncode == 0
    assert re.match(r"ahp \d+\.\d+\.\d+ \(protocol 1\.0\.0, 0\.10\.0, 0\.9\.0\)", done.stdout)


@pytest.fixture
def plugin_env(tmp_path):
    site = tmp_path / "site"
    make_distribution(
        site, "ahp-good", "1.2.3", {"good": "ahp_good_plugin"}, {"ahp_good_plugin": GOOD}
    )
    env = os.environ.copy()
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    env.pop("AHP_PLUGINS", None)
    env.pop("AHP_DISABLE_PLUGINS", None)
    return env


def test_plugins_json_lists_name_distribution_version_and_hooks(plugin_env):
    done = run_ahp("plugins", "--json", env=plugin_env)
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    rows = {row["name"]: row for row in payload["plugins"]}
    assert rows["good"] == {
        "name": "good",
        "distribution": "ahp-good",
        "version": "1.2.3",
        "hooks": ["ahp_root_config"],
        "essential": False,
    }
    assert rows["core"]["essential"] is True
    assert payload["failed"] == []


def test_plugins_hook_filter_and_trimming(plugin_env):
    only_store = json.loads(
        run_ahp("plugins", "--json", "--hook", "ahp_session_store", env=plugin_env).stdout
    )
    assert [row["name"] for row in only_store["plugins"]] == ["core"]
    trimmed = json.loads(run_ahp("plugins", "--json", "--no-plugins", env=plugin_env).stdout)
    assert [row["name"] for row in trimmed["plugins"]] == ["core"]
    env = {**plugin_env, "AHP_DISABLE_PLUGINS": "good"}
    blocked = json.loads(run_ahp("plugins", "--json", env=env).stdout)
    assert "good" not in [row["name"] for row in blocked["plugins"]]


def test_disabling_core_is_refused_with_a_clear_error(plugin_env):
    done = run_ahp("plugins", env={**plugin_env, "AHP_DISABLE_PLUGINS": "core"})
    assert done.returncode == 2
    assert "cannot disable essential plugin(s) core" in done.stderr


def test_serve_refuses_a_public_address_without_a_token(tmp_path):
    done = run_ahp("serve", "--host", "0.0.0.0", "--no-token", "--state-dir", str(tmp_path))
    assert done.returncode == 2
    assert "without a connection token" in done.stderr


class Served:
    def __init__(self, process: subprocess.Popen[str], url: str, token: str | None):
        self.process, self.url, self.token = process, url, token


def start_serve(tmp_path: Path, *extra: str) -> Served:
    process = subprocess.Popen(
        [*AHP, "serve", "--port", "0", "--state-dir", str(tmp_path / "state"), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    url = token = None
    deadline = time.monotonic() + 60
    wants_token = "--no-token" not in extra
    while time.monotonic() < deadline and (url is None or (wants_token and token is None)):
        line = process.stdout.readline()
        if not line:
            raise AssertionError(
                f"ahp serve exited early: {process.stderr.read() if process.stderr else ''}"
            )
        if match := re.search(r"listening on (ws://\S+)", line):
            url = match.group(1)
        if match := re.search(r"connection token: (\S+)", line):
            token = match.group(1)
    assert url is not None
    return Served(process, url, token)


@pytest.mark.anyio
async def test_serve_answers_initialize_and_ping_and_stops_on_sigterm(tmp_path):
    served = start_serve(tmp_path)
    try:
        assert served.url.startswith("ws://127.0.0.1:")
        async with connect(f"{served.url}?token={served.token}") as ws:
            await ws.send(
                json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "ping",
                        "params": {"channel": "ahp-root://"},
                    }
                )
            )
            assert json.loads(await ws.recv()) == {"jsonrpc": "2.0", "id": 1, "result": None}
            await ws.send(
                json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": 2,
                        "method": "initialize",
                        "params": {
                            "channel": "ahp-root://",
                            "protocolVersions": ["0.9.0", "1.0.0"],
                            "clientId": "cli-test",
                        },
                    }
                )
            )
            answer = json.loads(await ws.recv())
            assert answer["result"]["protocolVersion"] == "1.0.0"
            assert answer["result"]["serverInfo"]["name"] == "ahp"
        served.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            while served.process.poll() is None:
                await anyio.sleep(0.05)
        assert served.process.returncode == 0
        assert "ahp stopped" in (served.process.stderr.read() if served.process.stderr else "")
    finally:
        if served.process.poll() is None:
            served.process.kill()
        served.process.wait()


@pytest.mark.anyio
async def test_serve_stops_cleanly_on_ctrl_c(tmp_path):
    served = start_serve(tmp_path, "--no-plugins", "--sessions", "memory")
    try:
        served.process.send_signal(signal.SIGINT)
        with anyio.fail_after(30):
            while served.process.poll() is None:
                await anyio.sleep(0.05)
        assert served.process.returncode == 0
    finally:
        if served.process.poll() is None:
            served.process.kill()
        served.process.wait()


async def _exited(process: subprocess.Popen[str], within: float) -> float:
    """Seconds until ``process`` ended; fails past ``within``."""
    began = time.monotonic()
    with anyio.fail_after(within):
        while process.poll() is None:
            await anyio.sleep(0.05)
    return time.monotonic() - began


async def _send(ws: Any, ident: int, method: str, params: dict[str, Any]) -> None:
    await ws.send(json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params}))


async def _answer(ws: Any, method: str) -> dict[str, Any]:
    """The next frame, held to the protocol's schema by the strict wire validator."""
    frame: dict[str, Any] = json.loads(await ws.recv())
    assert_valid_frame(frame, direction="server", request_method=method)
    return frame


async def _initialize(ws: Any, client_id: str) -> None:
    await _send(ws, 1, "initialize", {"protocolVersions": ["1.0.0"], "clientId": client_id})
    assert "result" in await _answer(ws, "initialize")


@pytest.mark.anyio
async def test_a_stop_the_state_folder_does_not_answer_ends_at_the_stop_timeout(tmp_path):
    # Another process holds the state folder's database: every write of the host
    # waits SQLite's busy timeouts (30 s for the index, 5 s a try for the store).
    served = start_serve(tmp_path, "--no-token", "--stop-timeout", "2")
    blocker = None
    try:
        async with connect(served.url) as ws:
            await _initialize(ws, "stop-test")
            blocker = sqlite3.connect(tmp_path / "state" / "sessions.sqlite3", timeout=0)
            blocker.execute("BEGIN EXCLUSIVE")
            session_id = str(uuid.uuid4())
            create = {"channel": f"scripted:/{session_id}", "provider": "scripted"}
            await _send(ws, 2, "createSession", create)
            # The save is under way, waiting for the database (given time on a loaded machine).
            await anyio.sleep(1.5)
            served.process.send_signal(signal.SIGINT)
            took = await _exited(served.process, 20)
        assert served.process.returncode == 3
        assert took < 10
        said = served.process.stderr.read() if served.process.stderr else ""
        assert "still stopping after 1 s" in said
        assert "could not stop cleanly within 2 s (--stop-timeout)" in said
        # The session whose save never finished is named; it was never acknowledged.
        assert session_id in said
    finally:
        if served.process.poll() is None:
            served.process.kill()
        served.process.wait()
        if blocker is not None:
            blocker.rollback()
            blocker.close()
    # The state folder is whole: the next host starts on it and lists what it holds.
    again = start_serve(tmp_path, "--no-token")
    try:
        async with connect(again.url) as ws:
            await _initialize(ws, "after")
            await _send(ws, 2, "listSessions", {})
            with anyio.fail_after(30):
                assert isinstance((await _answer(ws, "listSessions"))["result"]["items"], list)
        again.process.send_signal(signal.SIGTERM)
        await _exited(again.process, 30)
        assert again.process.returncode == 0
    finally:
        if again.process.poll() is None:
            again.process.kill()
        again.process.wait()


def test_a_negative_stop_timeout_is_refused(tmp_path):
    done = run_ahp("serve", "--stop-timeout", "-1", "--state-dir", str(tmp_path / "state"))
    assert done.returncode != 0
    assert "--stop-timeout -1.0 is negative" in done.stderr


async def _pings(url: str, count: int) -> list[dict]:
    async with connect(url) as ws:
        for ident in range(count):
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": ident, "method": "ping"}))
        with anyio.fail_after(60):
            return [json.loads(await ws.recv()) for _ in range(count)]


@pytest.mark.anyio
async def test_serve_inbound_frames_sets_the_budget_and_zero_lifts_it(tmp_path):
    served = start_serve(tmp_path, "--no-token", "--no-plugins", "--inbound-frames", "2")
    try:
        answers = await _pings(served.url, 6)  # a burst of 2 s holds four frames
        refused = [a for a in answers if "error" in a]
        assert refused and "inbound budget of 2 frames/s" in refused[0]["error"]["message"]
    finally:
        served.process.terminate()
        served.process.wait(timeout=10)
    served = start_serve(tmp_path, "--no-token", "--no-plugins", "--inbound-frames", "0")
    try:
        answers = await _pings(served.url, 2500)  # past the default's burst of 2,000
        assert not [a for a in answers if "error" in a]
    finally:
        served.process.terminate()
        served.process.wait(timeout=10)
    done = subprocess.run(
        [*AHP, "serve", "--inbound-frames", "-1"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "--inbound-frames -1.0 is negative" in done.stderr


@pytest.mark.anyio
async def test_serve_freezes_its_start_up_heap_and_favours_its_event_loop(tmp_path):
    # Full collections walking the start-up heap stalled every client for 0.1-0.9 s
    # during large listings; a serving host keeps that heap out of them.
    served = start_serve(
        tmp_path, "--no-token", "--no-plugins", "--sessions", "memory", "--log-level", "debug"
    )
    try:
        async with connect(served.url) as ws:  # still serving after the freeze
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
            with anyio.fail_after(30):
                assert json.loads(await ws.recv())["id"] == 1
    finally:
        served.process.terminate()
        served.process.wait(timeout=30)
    log = served.process.stderr.read() if served.process.stderr else ""
    match = re.search(r"start-up heap frozen: (\d+) objects", log)
    assert match is not None, log[-2000:]
    assert int(match.group(1)) > 10_000  # modules, the host, the models: not a handful
    # Worker threads hand the interpreter back to the event loop within a millisecond.
    assert "thread switch interval 1.0 ms" in log
