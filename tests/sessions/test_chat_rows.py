"""A session's ``chats`` rows follow their chats: activity clears and modifiedAt moves."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from ahp_scripted import Activity, Fail, Rule, Say, Wait
from ahpcore.sessions.state import now_iso
from ahpcore.testing import AhpTestClient
from tests.sessions.conftest import is_action, message, open_session, script, turn_end

pytestmark = pytest.mark.anyio

RULES = (
    Rule(exact="finish", steps=[Activity("Thinking"), Wait(gate="g"), Say("done")]),
    Rule(exact="fail", steps=[Activity("Thinking"), Wait(gate="g"), Fail("it broke")]),
    Rule(exact="hang", steps=[Activity("Thinking"), Wait(gate="never")]),
)


async def row_of(client: AhpTestClient, session: str, chat: str) -> dict[str, Any]:
    await client.sync()
    state = (await client.request("subscribe", {"channel": session}))["snapshot"]["state"]
    return next(row for row in state["chats"] if row["resource"] == chat)


async def chat_state(client: AhpTestClient, chat: str) -> dict[str, Any]:
    return (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]


@pytest.mark.parametrize("ending", ["finish", "fail", "cancel"])
async def test_a_rows_activity_clears_and_modified_at_moves_with_its_turn(session_host, ending):
    async with session_host(script(*RULES)) as (running, backend):
        client = await running.connect("c1")
        await client.initialize()
        session, chat = await open_session(client)
        created = (await row_of(client, session, chat))["modifiedAt"]
        await anyio.sleep(0.01)  # so the turn's moment is a later one than the chat's creation
        started = now_iso()
        text = "hang" if ending == "cancel" else ending
        await client.dispatch(
            chat,
            {
                "type": "chat/turnStarted",
                "turnId": "t1",
                "startedAt": started,
                "message": message(text),
            },
        )
        busy = await client.recv_until(
            lambda f: (
                is_action("session/chatUpdated", session)(f)
                and f["params"]["action"]["changes"].get("activity") == "Thinking"
            )
        )
        assert busy["params"]["action"]["chat"] == chat
        during = await row_of(client, session, chat)
        assert during["activity"] == "Thinking"
        assert during["modifiedAt"] == started > created
        if ending == "cancel":
            await client.dispatch(
                chat, {"type": "chat/turnCancelled", "turnId": "t1", "duration": 0}
            )
        else:
            backend.release("g")
        await turn_end(client, chat)
        after = await row_of(client, session, chat)
        assert not after.get("activity"), f"the row still says {after.get('activity')!r}"
        held = await chat_state(client, chat)
        assert "activity" not in held
        # The row says when its chat last changed: when the turn ended.
        assert after["modifiedAt"] == held["modifiedAt"] >= started
        await client.assert_replay_agrees([session, chat])


async def test_a_second_turn_moves_the_row_again(session_host):
    async with session_host(script(*RULES)) as (running, backend):
        client = await running.connect("c1")
        await client.initialize()
        session, chat = await open_session(client)
        stamps = []
        for turn in ("t1", "t2"):
            await anyio.sleep(0.01)
            await client.dispatch(
                chat,
                {
                    "type": "chat/turnStarted",
                    "turnId": turn,
                    "startedAt": now_iso(),
                    "message": message("finish"),
                },
            )
            await backend.reached("g")
            backend.release("g")
            await turn_end(client, chat)
            stamps.append((await row_of(client, session, chat))["modifiedAt"])
        assert stamps[0] < stamps[1]
        await client.assert_replay_agrees([session])
