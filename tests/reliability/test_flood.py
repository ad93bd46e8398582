"""A flood from some clients does not starve the others: an inbound budget per connection,
and one coalescing writer per session behind it."""

from __future__ import annotations

import contextlib
import json
import time

import anyio
import pytest
from websockets.exceptions import ConnectionClosed

from ahp_scripted import ScriptedBackend
from ahpcore.host import HostSettings
from ahpcore.protocol.uris import ROOT_CHANNEL
from ahpcore.testing import running_host
from tests.reliability.conftest import live_session
from tests.sessions.conftest import ScriptedPlugin, script, session_uri

pytestmark = pytest.mark.anyio


def title_frame(session: str, seq: int, title: str) -> str:
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "method": "dispatchAction",
            "params": {
                "channel": session,
                "clientSeq": seq,
                "action": {"type": "session/titleChanged", "title": title},
            },
        }
    )


async def test_a_client_past_its_budget_is_told_and_then_closed(tmp_path):
    backend = ScriptedBackend(tmp_path / "scripted", script())
    settings = HostSettings(
        port=0, state_dir=tmp_path / "state", inbound_frames_per_second=5
    )  # a burst of 10 frames
    async with running_host([("scripted", ScriptedPlugin(backend))], settings=settings) as running:
        client = await running.connect("flooder", conformance=False)
        await client.initialize([ROOT_CHANNEL])
        session = session_uri(1)
        await client.request("createSession", {"channel": session, "provider": "scripted"})
        for seq in range(1, 14):  # past the burst, short of closing
            await client.send_raw(title_frame(session, seq, f"title {seq}"))
        refused = await client.recv_until(
            lambda f: f.get("method") == "action" and "rejectionReason" in f["params"]
        )
        assert "inbound budget of 5 frames/s" in refused["params"]["rejectionReason"]
        # A request over budget is answered with an error saying so.
        answer = await client.request_frame("ping", {"channel": ROOT_CHANNEL})
        assert "inbound budget" in answer["error"]["message"]
        # Keeping on regardless closes the connection, with the reason.
        for seq in range(14, 1000):
            try:
                await client.send_raw(title_frame(session, seq, f"title {seq}"))
            except Exception:
                break
        with anyio.fail_after(10), pytest.raises(ConnectionClosed):
            while True:  # read what is queued up to the close
                await client.connection.recv()
        assert client.connection.close_code == 1008
        assert "sent more than 5 frames/s" in (client.connection.close_reason or "")
        # Everyone else is served as before.
        other = await running.connect("other")
        await other.initialize([ROOT_CHANNEL])
        await other.sync()


async def test_ten_flooding_clients_do_not_keep_a_new_client_out(tmp_path):
    backend = ScriptedBackend(tmp_path / "scripted", script())
    # The file store, and a budget the flood overruns at once (bench/flood.py runs the default).
    settings = HostSettings(
        port=0, state_dir=tmp_path / "state", inbound_frames_per_second=5, compression=False
    )
    async with running_host([("scripted", ScriptedPlugin(backend))], settings=settings) as running:
        setup = await running.connect("setup")
        await setup.initialize([ROOT_CHANNEL])
        session = session_uri(1)
        await setup.request("createSession", {"channel": session, "provider": "scripted"})
        flooders = []
        for n in range(10):
            flooder = await running.connect(
                f"flood-{n}", conformance=False, max_queue=None, compression=None
            )
            await flooder.initialize([])
            flooders.append(flooder)

        async def flood(n: int) -> None:
            ws = flooders[n].connection
            with contextlib.suppress(ConnectionClosed):
                for seq in range(1, 2001):
                    await ws.send(title_frame(session, seq, f"flood {n} {seq}"))

        async with anyio.create_task_group() as tasks:
            for n in range(10):
                tasks.start_soon(flood, n)
        began = time.monotonic()
        with anyio.fail_after(5):
            newcomer = await running.connect("newcomer")
            await newcomer.initialize([ROOT_CHANNEL, session])
            await newcomer.sync()
        print(f"new client served in {time.monotonic() - began:.2f}s after the flood")
        # Each flooder was told: refusals naming the budget, then a close saying why.
        for flooder in flooders:
            with anyio.fail_after(30), pytest.raises(ConnectionClosed):
                while True:
                    await flooder.connection.recv()
            assert flooder.connection.close_code == 1008
        # The session holds one of the flooded titles, and the store has it.
        state = (await newcomer.request("subscribe", {"channel": session}))["snapshot"]["state"]
        assert state["title"].startswith("flood ")
        # The store ends up with the title the session shows (titles that committed
        # together may have applied in another order; the save after them settles it).
        live = live_session(running.host, session)
        with anyio.fail_after(10):
            while (await running.host.session_store.get(live.id))["title"] != live.state["title"]:
                await anyio.sleep(0.01)
