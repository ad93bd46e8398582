"""The Dev Container relay over real sockets, against stand-ins for the Docker and Dev
Container CLIs (there is no Docker daemon here): scripts on PATH that log each call and,
for the ``docker exec`` of the host inside, run a real ``ahp serve --stdio``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from ahp_scripted import Script, ScriptedBackend
from ahp_vscode import devcontainers as dc
from ahp_vscode.plugin import VSCodePlugin
from ahpcore.hookspecs import hookimpl
from ahpcore.protocol.errors import CONFLICT, INVALID_PARAMS, NOT_FOUND, PERMISSION_DENIED
from ahpcore.protocol.wire import assert_valid_frame
from ahpcore.settings import HostSettings
from ahpcore.testing import AhpTestClient, RunningHost, running_host

pytestmark = pytest.mark.anyio

CONTAINER = "c0ffee0123456789"
AHP = shutil.which("ahp") or str(Path(sys.executable).with_name("ahp"))

DOCKER = f"""#!/bin/sh
# One write per call: the relay's exec and a stop or rm may log at the same moment.
line='docker'; for a in "$@"; do line="$line $a"; done; printf '%s\\n' "$line" >> "$FAKE_LOG"
case "$1" in
  version)
    [ -n "$FAKE_DOCKER_HANGS" ] && exec sleep 30
    [ -n "$FAKE_DOCKER_DOWN" ] && {{ echo "Cannot connect to the Docker daemon" >&2; exit 1; }}
    echo "Server: Docker Engine"; exit 0 ;;
  ps) [ -n "$FAKE_PS" ] && echo "$FAKE_PS"; exit 0 ;;
  stop|rm) echo "$CONTAINER"; exit 0 ;;
  exec)
    shift
    while [ "$#" -gt 0 ]; do
      case "$1" in -i) shift ;; -u|-w) shift 2 ;; *) break ;; esac
    done
    shift  # the container
    if [ "$1" = ahp ]; then
      [ -n "$FAKE_NO_AHP" ] && {{ echo 'exec: "ahp": executable file not found in $PATH' >&2; exit 127; }}
      shift
      [ "$1" = serve ] && echo "pid $$" >> "$FAKE_LOG"
      exec "{AHP}" "$@"
    fi
    exec "$@" ;;
esac
exit 1
"""

DEVCONTAINER = f"""#!/bin/sh
# One write per call: the relay's exec and a stop or rm may log at the same moment.
line='devcontainer'; for a in "$@"; do line="$line $a"; done; printf '%s\\n' "$line" >> "$FAKE_LOG"
if [ "$1" = up ]; then
  echo "[1 ms] Start: Run: docker build" >&2
  echo "Step 1/1 : FROM python"
  if [ -n "$FAKE_UP_FAILS" ]; then
    echo '{{"outcome":"error","message":"no devcontainer.json in '"$3"'"}}'
    exit 1
  fi
  echo '{{"outcome":"success","containerId":"{CONTAINER}","remoteUser":"vscode","remoteWorkspaceFolder":"/workspaces/project"}}'
  exit 0
fi
exit 1
"""


class Scripted:
    @hookimpl
    def ahp_backends(self, host: Any, register: Any) -> None:
        register(ScriptedBackend(host.settings.state_dir / "scripted", Script(default=[])))


class WindowClient(AhpTestClient):
    """A test client that, like the window, also hears the host's ``vscode/*`` requests
    and notifications: those are outside the protocol, so only their envelope is checked."""

    async def _receive(self) -> dict[str, Any]:
        frame = json.loads(await self.connection.recv())
        method = frame.get("method")
        if isinstance(method, str) and method.startswith("vscode/"):
            assert frame.get("jsonrpc") == "2.0" and isinstance(frame.get("params"), dict), frame
        elif "method" in frame:
            assert_valid_frame(frame, direction="server")
        self.frames.append(frame)
        return frame


@pytest.fixture
def fakes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in CLIs first on PATH; the log of their calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("docker", DOCKER), ("devcontainer", DEVCONTAINER)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    calls = tmp_path / "calls.log"
    calls.touch()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_LOG", str(calls))
    monkeypatch.setenv("CONTAINER", CONTAINER)
    # The host inside: the scripted agent alone, its state in a folder of its own.
    monkeypatch.setenv("AHP_PLUGINS", "scripted")
    monkeypatch.setenv("AHP_SESSIONS", "memory")
    monkeypatch.setenv("AHP_STATE_DIR", str(tmp_path / "inside"))
    return calls


def host(tmp_path: Path, docker_seconds: float = 5.0) -> Any:
    settings = HostSettings(sessions="memory", port=0, state_dir=tmp_path / "state")
    plugins = [("scripted", Scripted()), ("vscode", VSCodePlugin(docker_seconds=docker_seconds))]
    return running_host(plugins, settings=settings)


async def window(running: RunningHost) -> WindowClient:
    plain = await running.connect(validate=False)
    client = WindowClient(plain.connection, plain.client_id, False, kind_of=plain.kind_of)
    running._clients[running._clients.index(plain)] = client
    result = await client.initialize()
    client.meta = result.get("_meta") or {}  # type: ignore[attr-defined]
    return client


def calls(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if not line.startswith("pid ")]


def note(method: str, ident: str) -> Any:
    return lambda f: f.get("method") == method and f["params"].get("connectionId") == ident


async def ask(client: WindowClient, ident: int, method: str, params: dict[str, Any]) -> None:
    await client.send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})


async def answer_trust(
    client: WindowClient, trusted: bool, log: Path | None = None
) -> dict[str, Any]:
    request = await client.recv_until(lambda f: f.get("method") == dc.TRUST and "id" in f)
    if log is not None:
        assert not any(c.startswith("devcontainer up") for c in calls(log)), "launched before trust"
    await client.send({"jsonrpc": "2.0", "id": request["id"], "result": {"trusted": trusted}})
    return request


async def answer(client: WindowClient, ident: int) -> dict[str, Any]:
    return await client.recv_until(lambda f: f.get("id") == ident and "method" not in f, 30)


async def connect(client: WindowClient, folder: Path, ident: str, **extra: Any) -> dict[str, Any]:
    params = {"connectionId": ident, "workspaceFolder": str(folder), "name": "project", **extra}
    await ask(client, 900, dc.CONNECT, params)
    await answer_trust(client, True)
    frame = await answer(client, 900)
    assert "result" in frame, frame
    return frame["result"]


async def relayed(client: WindowClient, ident: str, request_id: int) -> dict[str, Any]:
    frame = await client.recv_until(
        lambda f: (
            f.get("method") == dc.RELAY_MESSAGE
            and f["params"]["connectionId"] == ident
            and json.loads(f["params"]["data"]).get("id") == request_id
        ),
        30,
    )
    message: dict[str, Any] = json.loads(frame["params"]["data"])
    return message


async def inner_pid(log: Path, nth: int = 1) -> int:
    """The process id of the ``nth`` host run inside, once its stand-in wrote it."""
    with anyio.fail_after(10):
        while True:
            pids = [c for c in log.read_text().splitlines() if c.startswith("pid ")]
            if len(pids) >= nth:
                return int(pids[nth - 1][4:])
            await anyio.sleep(0.02)


async def gone(pid: int) -> bool:
    with anyio.move_on_after(10):
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            await anyio.sleep(0.05)
    return False


async def test_the_flag_is_set_only_when_docker_answers_in_time(tmp_path, fakes, monkeypatch):
    async with host(tmp_path) as running:
        client = await window(running)
        assert client.meta[dc.FLAG] is True  # type: ignore[attr-defined]
        assert await client.request(dc.IS_DOCKER_AVAILABLE) is True
        frame = await client.request_frame(dc.IS_DOCKER_AVAILABLE, {"folder": "/"})
        assert frame["error"]["code"] == INVALID_PARAMS
    assert calls(fakes)[0] == "docker version"
    monkeypatch.setenv("FAKE_DOCKER_DOWN", "1")
    async with host(tmp_path) as running:
        client = await window(running)
        assert dc.FLAG not in client.meta  # type: ignore[attr-defined]
        assert await client.request(dc.IS_DOCKER_AVAILABLE) is False
    monkeypatch.delenv("FAKE_DOCKER_DOWN")
    monkeypatch.setenv("FAKE_DOCKER_HANGS", "1")
    began = time.monotonic()
    async with host(tmp_path, docker_seconds=0.5) as running:
        client = await window(running)
        assert dc.FLAG not in client.meta  # type: ignore[attr-defined]
    assert time.monotonic() - began < 5  # a Docker that hangs holds nothing up


async def test_connect_asks_trust_first_then_relays_a_real_host_inside(tmp_path, fakes):
    folder = tmp_path / "project"
    folder.mkdir()
    async with host(tmp_path) as running:
        client = await window(running)
        params = {"connectionId": "w1", "workspaceFolder": str(folder), "name": "project"}
        await ask(client, 1, dc.CONNECT, params)
        # A frame sent while the window is still asked about trust finds no relay yet.
        frame = await client.request_frame(dc.RELAY_SEND, {"connectionId": "w1", "data": "{}"})
        assert frame["error"]["code"] == NOT_FOUND
        assert "not connected" in frame["error"]["message"]
        request = await answer_trust(client, True, fakes)
        assert request["params"] == {"workspace": folder.as_uri()}
        result = (await answer(client, 1))["result"]
        assert result == {
            "connectionId": "w1",
            "address": f"devcontainer:{CONTAINER}",
            "name": "project",
            "remoteWorkspaceFolder": "/workspaces/project",
            "hostWorkspaceFolder": str(folder),
        }
        output = "".join(f["params"]["data"] for f in client.frames if f.get("method") == dc.OUTPUT)
        assert "Step 1/1" in output and "Start: Run: docker build" in output
        pid = await inner_pid(fakes)  # the host inside runs: its call is logged
        assert calls(fakes)[1:4] == [
            f"devcontainer up --workspace-folder {folder}",
            f"docker exec -u vscode -w /workspaces/project {CONTAINER} ahp --version",
            f"docker exec -i -u vscode -w /workspaces/project {CONTAINER} ahp serve --stdio",
        ]
        # The window speaks AHP to the host inside, one message per frame each way;
        # a message written over several lines still reaches it as one.
        hello = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "channel": "ahp-root://",
                "protocolVersions": ["1.0.0"],
                "clientId": "inside",
                "initialSubscriptions": [],
            },
        }
        data = json.dumps(hello, indent=2)
        assert await client.request(dc.RELAY_SEND, {"connectionId": "w1", "data": data}) is None
        inner = await relayed(client, "w1", 1)
        assert inner["result"]["protocolVersion"] == "1.0.0"
        assert_valid_frame(inner, direction="server", request_method="initialize")
        listing = {"jsonrpc": "2.0", "id": 2, "method": "listSessions", "params": {}}
        await client.request(dc.RELAY_SEND, {"connectionId": "w1", "data": json.dumps(listing)})
        assert (await relayed(client, "w1", 2))["result"]["items"] == []
        bad = await client.request_frame(dc.RELAY_SEND, {"connectionId": "w1", "data": "not json"})
        assert bad["error"]["code"] == INVALID_PARAMS
        # Closed by the window: the host inside goes, and no notification follows.
        assert await client.request(dc.DISCONNECT, {"connectionId": "w1"}) is None
        assert await gone(pid)
        frame = await client.request_frame(dc.RELAY_SEND, {"connectionId": "w1", "data": "{}"})
        assert frame["error"]["code"] == NOT_FOUND
        await client.sync()
        assert not any(f.get("method") == dc.RELAY_CLOSE for f in client.frames)


async def test_trust_refused_launches_nothing(tmp_path, fakes):
    async with host(tmp_path) as running:
        client = await window(running)
        params = {"connectionId": "w1", "workspaceFolder": str(tmp_path), "name": "p"}
        await ask(client, 1, dc.CONNECT, params)
        await answer_trust(client, False)
        frame = await answer(client, 1)
        assert frame["error"]["code"] == PERMISSION_DENIED
        assert "Workspace trust is required" in frame["error"]["message"]
        await ask(client, 2, dc.STOP, {"workspaceFolder": str(tmp_path)})
        await answer_trust(client, False)
        assert (await answer(client, 2))["error"]["code"] == PERMISSION_DENIED
    assert calls(fakes) == ["docker version"]


async def test_a_relay_that_dies_is_reported_and_forgotten(tmp_path, fakes):
    async with host(tmp_path) as running:
        client = await window(running)
        await connect(client, tmp_path, "w1")
        os.kill(await inner_pid(fakes), signal.SIGKILL)
        await client.recv_until(note(dc.RELAY_CLOSE, "w1"), 10)
        await client.recv_until(note(dc.CLOSE_CONNECTION, "w1"), 10)
        frame = await client.request_frame(dc.RELAY_SEND, {"connectionId": "w1", "data": "{}"})
        assert frame["error"]["code"] == NOT_FOUND
        # The id is free again: the window reconnects with it.
        await connect(client, tmp_path, "w1")


async def test_a_launch_that_fails_says_why(tmp_path, fakes, monkeypatch):
    async with host(tmp_path) as running:
        client = await window(running)
        monkeypatch.setenv("FAKE_NO_AHP", "1")
        params = {"connectionId": "w1", "workspaceFolder": str(tmp_path), "name": "p"}
        await ask(client, 1, dc.CONNECT, params)
        await answer_trust(client, True)
        error = (await answer(client, 1))["error"]
        assert (
            "ahp --version" in error["message"] and "executable file not found" in error["message"]
        )
        monkeypatch.delenv("FAKE_NO_AHP")
        monkeypatch.setenv("FAKE_UP_FAILS", "1")
        await ask(client, 2, dc.CONNECT, params)  # the failed id is free again
        await answer_trust(client, True)
        error = (await answer(client, 2))["error"]
        assert "no devcontainer.json" in error["message"]


async def test_connection_ids_belong_to_their_connection(tmp_path, fakes):
    async with host(tmp_path) as running:
        client = await window(running)
        other = await window(running)
        await connect(client, tmp_path, "w1")
        params = {"connectionId": "w1", "workspaceFolder": str(tmp_path), "name": "p"}
        frame = await client.request_frame(dc.CONNECT, params)
        assert frame["error"]["code"] == INVALID_PARAMS
        assert "already in use" in frame["error"]["message"]
        for method, extra in ((dc.RELAY_SEND, {"data": "{}"}), (dc.DISCONNECT, {})):
            frame = await other.request_frame(method, {"connectionId": "w1", **extra})
            assert frame["error"]["code"] == NOT_FOUND
            assert "not owned by this client" in frame["error"]["message"]
        for bad in ({"connectionId": ""}, {"connectionId": "x" * 257}, {}):
            frame = await client.request_frame(dc.DISCONNECT, bad)
            assert frame["error"]["code"] == INVALID_PARAMS
        # The window's connection ends: its relay and the host inside end with it.
        pid = await inner_pid(fakes)
        await client.close()
        assert await gone(pid)


async def test_stop_and_remove_end_the_relay_and_need_resume_to_start_again(
    tmp_path, fakes, monkeypatch
):
    async with host(tmp_path) as running:
        client = await window(running)
        await connect(client, tmp_path, "w1")
        pid = await inner_pid(fakes)
        await ask(client, 1, dc.STOP, {"workspaceFolder": str(tmp_path)})
        await answer_trust(client, True)
        assert (await answer(client, 1))["result"] is True
        await client.recv_until(note(dc.RELAY_CLOSE, "w1"))
        await client.recv_until(note(dc.CLOSE_CONNECTION, "w1"))
        assert await gone(pid)
        assert calls(fakes)[-1] == f"docker stop {CONTAINER}"
        params = {"connectionId": "w2", "workspaceFolder": str(tmp_path), "name": "p"}
        await ask(client, 2, dc.CONNECT, params)
        await answer_trust(client, True)
        error = (await answer(client, 2))["error"]
        assert error["code"] == CONFLICT and "resume" in error["message"]
        await connect(client, tmp_path, "w3", resume=True)
        # Started inside (its docker exec logged) before it is removed from under it.
        await inner_pid(fakes, 2)
        await ask(client, 3, dc.REMOVE, {"workspaceFolder": str(tmp_path)})
        await answer_trust(client, True)
        assert (await answer(client, 3))["result"] is True
        assert calls(fakes)[-1] == f"docker rm --force {CONTAINER}"
        # A folder this run launched nothing for is found by the CLI's label, if at all.
        elsewhere = tmp_path / "elsewhere"
        await ask(client, 4, dc.STOP, {"workspaceFolder": str(elsewhere)})
        await answer_trust(client, True)
        assert (await answer(client, 4))["result"] is True
        label = f"label={dc.FOLDER_LABEL}={elsewhere}"
        assert calls(fakes)[-1] == f"docker ps -aq --filter {label}"
        monkeypatch.setenv("FAKE_PS", "feedface")
        await ask(client, 5, dc.REMOVE, {"workspaceFolder": str(elsewhere)})
        await answer_trust(client, True)
        assert (await answer(client, 5))["result"] is True
        assert calls(fakes)[-1] == "docker rm --force feedface"


async def test_another_clients_relay_keeps_the_container_running(tmp_path, fakes):
    async with host(tmp_path) as running:
        client = await window(running)
        other = await window(running)
        await connect(other, tmp_path, "theirs")
        await ask(client, 1, dc.STOP, {"workspaceFolder": str(tmp_path)})
        await answer_trust(client, True)
        assert (await answer(client, 1))["result"] is False
        assert not any(c.startswith("docker stop") for c in calls(fakes))
