"""A machine whose host listens there, reached through an SSH tunnel (``ssh -N -L``): the real
``ssh`` program, an SSH server on 127.0.0.1 (asyncssh) forwarding to a host on a 127.0.0.1
WebSocket with a token."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import time
import uuid
from pathlib import Path

import anyio
import pytest
from remote_support import (
    MACHINE,
    PROVIDER,
    TOKEN,
    approve,
    chat_state,
    client_of,
    free_port,
    inner_host,
    is_action,
    machine_of,
    machines_env,
    open_session,
    outer_host,
    root_agents,
    said,
    start_turn,
    subscribe,
    tools,
    turn_end,
)

from ahp_remote.link import TunnelLink
from ahp_remote.machine import Machine

pytest.importorskip("asyncssh", reason="asyncssh runs the SSH server these tests reach")
if shutil.which("ssh") is None:
    pytest.skip("no ssh program on PATH", allow_module_level=True)

from ssh_support import SshServer, ssh_server, stranger_key  # after the skips: asyncssh is there

pytestmark = pytest.mark.anyio


def tunnel_env(server: SshServer, port: int, identity: Path | None = None) -> str:
    return machines_env(
        **{
            MACHINE: {
                "ssh": "builder@127.0.0.1",
                "url": f"ws://127.0.0.1:{port}/",
                "token": TOKEN,
                "sshOptions": server.options(identity),
            }
        }
    )


def tunnel_of(machine: Machine) -> TunnelLink:
    link = machine.link
    assert isinstance(link, TunnelLink), link
    assert link.process is not None and link.process.returncode is None
    return link


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_a_turn_with_an_approval_through_the_tunnel(
    tmp_path: Path,
    inner_state: Path,
    outer_state: Path,
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    port = free_port()
    async with ssh_server(tmp_path / "ssh") as server, inner_host(inner_state, port):
        monkeypatch.setenv("AHP_REMOTE_MACHINES", tunnel_env(server, port))
        async with outer_host(outer_state) as running:
            client = await client_of(running)
            agent = (await root_agents(client))[PROVIDER]
            assert "Not available" not in agent["description"], agent
            assert "through ssh builder@127.0.0.1" in agent["description"]
            _, chat = await open_session(client, workdir)
            await start_turn(client, chat, "echo through the tunnel")
            await approve(client, chat)
            assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
            state = await chat_state(client, chat)
            assert said(state) == "I will echo it. echo: through the tunnel"
            assert tools(state)[0]["status"] == "completed"
            link = tunnel_of(machine_of(running))
            # The WebSocket rides a local port that ssh forwards to the host's, there.
            assert server.forwarded and set(server.forwarded) == {("127.0.0.1", port)}
            assert TOKEN not in " ".join(link.argv(link.local_port))
            pid = link.process.pid  # type: ignore[union-attr]
        # A stopped host leaves no tunnel behind.
        assert gone(pid)
    # What this host logs never holds the token (the inner host's server, a separate
    # machine in life, logs the headers it was sent at debug level: not this host's lines).
    here = [r for r in caplog.records if not r.name.startswith("websockets.server")]
    assert any(r.name == "websockets.client" for r in here)
    assert not [r.getMessage() for r in here if TOKEN in r.getMessage()]


async def test_a_tunnel_killed_mid_turn_is_restarted_and_the_turn_replayed(
    tmp_path: Path,
    inner_state: Path,
    outer_state: Path,
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port = free_port()
    async with ssh_server(tmp_path / "ssh") as server, inner_host(inner_state, port):
        monkeypatch.setenv("AHP_REMOTE_MACHINES", tunnel_env(server, port))
        async with outer_host(outer_state) as running:
            client = await client_of(running)
            _, chat = await open_session(client, workdir)
            machine = machine_of(running)
            await start_turn(client, chat, "drop")
            await client.recv_until(is_action("chat/responsePart", chat), timeout=30)
            old = tunnel_of(machine)
            # The far side's network goes away and the tunnel's ssh dies with it.
            server.refusing = True
            os.kill(old.process.pid, signal.SIGKILL)  # type: ignore[union-attr]
            with anyio.fail_after(10):
                while machine.up.is_set():
                    await anyio.sleep(0.05)
            down_at = time.monotonic()
            assert machine.reason.startswith("ssh was killed by signal 9"), machine.reason
            await anyio.sleep(1.5)  # the remote turn goes on meanwhile: a tool call, more text
            assert not machine.up.is_set()
            server.refusing = False
            assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
            assert time.monotonic() - down_at >= 1.5
            assert machine.relinked_by == "replay"
            new = tunnel_of(machine)
            assert new is not old and new.process.pid != old.process.pid  # type: ignore[union-attr]
            state = await chat_state(client, chat)
            assert said(state) == "before the drop. during the drop. after the drop."
            [call] = tools(state)
            assert call["status"] == "completed" and call["toolName"] == "ls"

            # The session goes on over the new tunnel.
            await start_turn(client, chat, "echo again")
            await approve(client, chat)
            assert (await turn_end(client, chat))["type"] == "chat/turnComplete"


async def test_a_tunnel_that_cannot_start_is_listed_with_why(
    tmp_path: Path, outer_state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with ssh_server(tmp_path / "ssh") as server:
        stranger = stranger_key(tmp_path / "stranger")
        monkeypatch.setenv("AHP_REMOTE_MACHINES", tunnel_env(server, free_port(), stranger))
        monkeypatch.setenv("AHP_REMOTE_PROBE_SECONDS", "2")
        async with outer_host(outer_state) as running:
            client = await client_of(running)
            agent = (await root_agents(client))[f"remote-{MACHINE}"]
            assert "Not available" in agent["description"]
            assert "ssh exited with status 255" in agent["description"], agent
            assert "Permission denied" in agent["description"], agent
            assert TOKEN not in json.dumps(agent)
            # The host keeps serving: a session on it is refused, saying why; others go on.
            frame = await client.request_frame(
                "createSession",
                {
                    "channel": f"remote-{MACHINE}:/{uuid.uuid4()}",
                    "provider": f"remote-{MACHINE}",
                    "workingDirectories": [tmp_path.as_uri()],
                },
            )
            assert "not reachable" in frame["error"]["message"]
            assert "Permission denied" in frame["error"]["message"]
            listed = await client.request("listSessions", {"channel": "ahp-root://"})
            assert listed["items"] == []


async def test_both_hosts_restart_and_the_session_is_found_again(
    tmp_path: Path,
    inner_state: Path,
    outer_state: Path,
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port = free_port()
    async with ssh_server(tmp_path / "ssh") as server:
        monkeypatch.setenv("AHP_REMOTE_MACHINES", tunnel_env(server, port))
        async with inner_host(inner_state, port), outer_host(outer_state) as running:
            client = await client_of(running)
            session, chat = await open_session(client, workdir)
            await start_turn(client, chat, "echo kept")
            await approve(client, chat)
            assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        # Both stopped; both start again, the build server's host on its same state.
        async with inner_host(inner_state, port), outer_host(outer_state) as running:
            client = await client_of(running)
            listed = await client.request("listSessions", {"channel": "ahp-root://"})
            assert session in [row["resource"] for row in listed["items"]]
            chat = await subscribe(client, session)
            assert said(await chat_state(client, chat)) == "I will echo it. echo: kept"
            await start_turn(client, chat, "hello")
            assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
            state = await chat_state(client, chat)
            assert said(state) == "hello from the inner host" and len(state["turns"]) == 2
