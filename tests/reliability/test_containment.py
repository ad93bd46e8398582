"""A fault in one session, chat, turn or background task stays there: the host keeps serving."""

from __future__ import annotations

import logging

import anyio
import pytest

from ahp_scripted import Rule, Say
from ahpcore.protocol.uris import ROOT_CHANNEL
from tests.reliability.conftest import live_session
from tests.sessions.conftest import open_session, script, session_uri, start_turn

pytestmark = pytest.mark.anyio

SLOW = Rule(
    exact="slow", steps=[Say("one two three four five six seven eight", words=1, delay=0.02)]
)


async def test_disposing_a_session_mid_turn_leaves_the_host_serving(session_host):
    async with session_host(script(SLOW)) as (running, _):
        owner = await running.connect("owner")
        await owner.initialize()
        bystander = await running.connect("bystander")
        await bystander.initialize()
        other, other_chat = await open_session(bystander, 2)
        session, chat = await open_session(owner)
        await start_turn(owner, chat, "slow", "t1")
        # The turn is streaming when the session goes.
        await owner.recv_until(
            lambda f: f.get("method") == "action" and f["params"]["action"]["type"] == "chat/delta"
        )
        await owner.request("disposeSession", {"channel": session})
        # Past the point where the cancelled turn winds down.
        await anyio.sleep(0.1)
        await bystander.sync()
        snapshot = await bystander.request("subscribe", {"channel": other})
        assert snapshot["snapshot"]["state"]["lifecycle"] == "ready"
        newcomer = await running.connect("newcomer")
        await newcomer.initialize()
        await newcomer.sync()
        await start_turn(bystander, other_chat, "hello", "t2")
        assert live_session(running.host, session) is None
        # The cancelled turn wound down before the backend forgot the conversation,
        # so nothing wrote it back.
        listed = await bystander.request("listSessions", {})
        assert session not in [item["resource"] for item in listed["items"]]


async def test_a_failing_background_task_is_logged_and_the_host_goes_on(session_host, caplog):
    async with session_host() as (running, _):
        failed = anyio.Event()

        async def broken() -> None:
            failed.set()
            raise RuntimeError("boom in the background")

        with caplog.at_level(logging.ERROR):
            running.host.spawn(broken, name="a broken helper")
            with anyio.fail_after(5):
                await failed.wait()
            client = await running.connect("c1")
            await client.initialize()
            await client.sync()
        assert any("a broken helper" in record.getMessage() for record in caplog.records)


async def test_applying_to_a_channel_that_is_gone_changes_nothing(session_host, caplog):
    async with session_host() as (running, _):
        engine = running.host.engine_or_fail
        with caplog.at_level(logging.WARNING):
            assert engine.apply("ahp-chat://gone", {"type": "chat/activityChanged"}) is None
        assert any("ahp-chat://gone" in record.getMessage() for record in caplog.records)
        client = await running.connect("c1")
        await client.initialize([ROOT_CHANNEL])
        await client.request("createSession", {"channel": session_uri(3), "provider": "scripted"})
