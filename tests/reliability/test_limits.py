"""Bounds a client cannot lift or dodge: budget ceilings, held frames, sign-in timers,
and what createSession/createChat accept."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import anyio
import pytest
from websockets.exceptions import ConnectionClosed

from ahpcore.engine.channels import Channel
from ahpcore.hookspecs import hookimpl
from ahpcore.host import HostSettings
from ahpcore.protocol.uris import ROOT_CHANNEL
from ahpcore.sessions.auth import TIMER_NAME
from ahpcore.testing import running_host
from tests.reliability.conftest import live_session
from tests.sessions.conftest import open_session, session_uri
from tests.sessions.test_chat_features import ProtectedPlugin, ProtectedScripted, script

pytestmark = pytest.mark.anyio

MIB = 1 << 20


@pytest.mark.parametrize("key", ["clientQueueBytes", "replayBytes"])
async def test_byte_budgets_cannot_be_raised_past_their_ceiling(ahp_host, key):
    async with ahp_host() as running:
        client = await running.connect("c1")
        await client.initialize()
        seq = await client.dispatch(
            ROOT_CHANNEL, {"type": "root/configChanged", "config": {key: 1e12}}
        )
        answer = await client.answer_to(seq)
        assert answer["rejectionReason"] == (
            f"{key} may not exceed {256 * MIB} (256 MiB), this host's ceiling"
        )
        values = running.host.engine_or_fail.root.state["config"]["values"]
        assert key not in values
        seq = await client.dispatch(
            ROOT_CHANNEL, {"type": "root/configChanged", "config": {key: 256 * MIB}}
        )
        assert "rejectionReason" not in await client.answer_to(seq)


class SlowChannels:
    """Root config key ``blob``, and a channel that takes until released to open."""

    def __init__(self) -> None:
        self.asked = anyio.Event()
        self.release = anyio.Event()

    @hookimpl
    def ahp_root_config(self, host):
        return {"blob": {"type": "string", "title": "Blob"}}

    async def opener(self, uri: str) -> Channel | None:
        if uri != "slow:/one":
            return None
        self.asked.set()
        await self.release.wait()
        return None


async def test_frames_held_behind_a_snapshot_count_against_client_queue_bytes(ahp_host):
    slow = SlowChannels()
    async with ahp_host([("slow", slow)]) as running:
        engine = running.host.engine_or_fail
        engine.add_opener(slow.opener)
        engine.apply(
            ROOT_CHANNEL, {"type": "root/configChanged", "config": {"clientQueueBytes": MIB}}
        )
        client = await running.connect("held", conformance=False)
        await client.send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "channel": ROOT_CHANNEL,
                    "protocolVersions": ["1.0.0"],
                    "clientId": "held",
                    # The root's frames are held while the second channel opens.
                    "initialSubscriptions": [ROOT_CHANNEL, "slow:/one"],
                },
            }
        )
        with anyio.fail_after(10):
            await slow.asked.wait()
        (held,) = [c for c in engine.clients if c.client_id == "held"]
        for n in range(40):  # 40 x 64 KiB: far past 1 MiB
            blob: dict[str, Any] = {"blob": f"{n}:" + os.urandom(32 * 1024).hex()}
            engine.apply(ROOT_CHANNEL, {"type": "root/configChanged", "config": blob})
            if held.peer.closed:
                break
        assert held.peer.closed, "frames held behind a snapshot were not counted"
        assert held.held_bytes <= MIB
        slow.release.set()
        with anyio.fail_after(10), pytest.raises(ConnectionClosed):
            while True:
                await client.connection.recv()
        assert client.connection.close_code == 1008
        other = await running.connect("other")
        await other.initialize()


def expiry_timers() -> int:
    return sum(1 for task in asyncio.all_tasks() if task.get_name().startswith(TIMER_NAME))


async def test_one_expiry_timer_per_connection_however_many_tokens(tmp_path):
    backend = ProtectedScripted(tmp_path / "s", script())
    settings = HostSettings(sessions="memory", port=0, state_dir=tmp_path)
    async with running_host([("p", ProtectedPlugin(backend))], settings=settings) as running:
        client = await running.connect("c1")
        await client.initialize()
        resource = ProtectedScripted.RESOURCE
        for n in range(200):
            await client.request(
                "authenticate", {"resource": resource, "token": f"t{n}", "expiresIn": 3600}
            )
        assert expiry_timers() == 1
        # The newest token still expires when due, and the connection is told.
        await client.request(
            "authenticate", {"resource": resource, "token": "soon", "expiresIn": 1}
        )
        note = await client.recv_until(lambda f: f.get("method") == "auth/required", timeout=10)
        assert note["params"]["reason"] == "expired"
        assert expiry_timers() == 0  # nothing left to expire
        await client.request(
            "authenticate", {"resource": resource, "token": "long", "expiresIn": 3600}
        )
        assert expiry_timers() == 1
        await client.close()
        # The connection went: its timer goes too, without waiting an hour.
        with anyio.fail_after(5):
            while expiry_timers():
                await anyio.sleep(0.01)


@pytest.mark.parametrize(
    "chat",
    [
        "scripted:/00000000-0000-4000-8000-000000000099",
        "file:///etc/passwd",
        "ahp-chat://default/x",
    ],
)
async def test_create_chat_refuses_uris_that_are_not_this_hosts_chats(session_host, chat):
    async with session_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        session, _ = await open_session(client)
        frame = await client.request_frame("createChat", {"channel": session, "chat": chat})
        assert frame["error"]["code"] == -32602
        assert "is not a chat URI of this host" in frame["error"]["message"]
        assert chat not in running.host.engine_or_fail.channels


@pytest.mark.parametrize("directory", ["../../..", "file:///work/../etc", "file:relative"])
async def test_relative_working_directories_are_refused(session_host, directory):
    async with session_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        frame = await client.request_frame(
            "createSession",
            {"channel": session_uri(1), "provider": "scripted", "workingDirectories": [directory]},
        )
        assert frame["error"]["code"] == -32602
        assert "params.workingDirectories[0]" in frame["error"]["message"]
        assert live_session(running.host, session_uri(1)) is None
        session, _ = await open_session(client, 2, workingDirectories=["file:///work/repo"])
        frame = await client.request_frame(
            "createChat",
            {"channel": session, "chat": "ahp-chat:/side", "workingDirectories": [directory]},
        )
        assert frame["error"]["code"] == -32602
