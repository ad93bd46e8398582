"""Creating and disposing sessions in a tight loop, over a real connection, leaves nothing
behind: no channels, no tasks, no sessions, no pending requests."""

from __future__ import annotations

import asyncio
import uuid

import anyio
import pytest

pytestmark = pytest.mark.anyio
PAIRS = 100


def counts(running) -> dict[str, int]:
    host = running.host
    engine = host.engine_or_fail
    return {
        "channels": len(engine.channels),
        "sessions": len(host.sessions.sessions),
        "tasks": len(asyncio.all_tasks()),
        "clients": len(engine.clients),
    }


@pytest.mark.parametrize("store", ["memory", "file"])
async def test_session_churn_leaks_nothing(session_host, store):
    async with session_host(sessions=store) as (running, _):
        client = await running.connect("churn")
        await client.initialize()
        await client.sync()
        before = counts(running)
        for _ in range(PAIRS):
            uri = f"scripted:/{uuid.uuid4()}"
            await client.request("createSession", {"channel": uri, "provider": "scripted"})
            await client.request("subscribe", {"channel": uri})
            await client.request("disposeSession", {"channel": uri})
        await client.sync()
        after = counts(running)
        assert after == before
        await client.assert_replay_agrees()


async def test_a_reconnect_storm_leaves_nothing_behind(session_host):
    async with session_host(sessions="memory", grace=0.0) as (running, _):
        steady = await running.connect("steady")
        await steady.initialize()
        await steady.sync()
        before = counts(running)
        for n in range(100):
            # The same client id over and over, half of them dropped mid-initialize.
            client = await running.connect("stormy")
            if n % 2:
                await client.initialize()
            else:
                await client.send_raw('{"jsonrpc":"2.0","id":1,"method":"initialize","params":')
            await client.connection.close()
        engine = running.host.engine_or_fail
        with anyio.fail_after(10):
            while any(c.client_id == "stormy" for c in engine.clients):
                await steady.sync()
        await steady.sync()
        assert counts(running) == before
