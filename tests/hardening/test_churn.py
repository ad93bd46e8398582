"""Creating and disposing sessions in a tight loop, over a real connection, leaves nothing
behind: no channels, no tasks, no sessions, no pending requests."""

from __future__ import annotations

import asyncio
import uuid

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
