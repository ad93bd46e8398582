"""A chat's runner: one turn at a time, cleanup by turn id, turns the agent starts itself."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from ahp_scripted import Background, Drain, Rule, Say, Tool, Usage, Wait
from tests.sessions.conftest import is_action, open_session, script, start_turn, turn_end
from tests.sessions.live_rebuilt import assert_rebuilt_equals_live

pytestmark = pytest.mark.anyio


async def ended(client: Any, chat: str, turn_id: str) -> dict[str, Any]:
    """The host's ending of one turn (not a client's cancel of another)."""
    frame = await client.recv_until(
        lambda f: (
            f.get("method") == "action"
            and f["params"]["channel"] == chat
            and f["params"]["action"].get("turnId") == turn_id
            and f["params"]["action"]["type"]
            in ("chat/turnComplete", "chat/turnCancelled", "chat/error")
        )
    )
    return dict(frame["params"]["action"])


DRAINS = Rule(exact="slow", steps=[Drain(0.6), Say("working"), Wait(gate="never")])


async def test_a_turn_started_while_the_last_one_drains_completes_normally(session_host):
    """The race: cancel a turn whose agent takes time to stop, then start the next at once."""
    asks = Rule(exact="ask", steps=[Tool("rm", {"path": "x"}, approval=True, result="gone")])
    async with session_host(script(DRAINS, asks)) as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        _, chat = await open_session(client)
        await start_turn(client, chat, "slow", "t1")
        await client.recv_until(is_action("chat/responsePart", chat))
        seq = await client.dispatch(
            chat, {"type": "chat/turnCancelled", "turnId": "t1", "duration": 0}
        )
        await client.answer_to(seq)
        # At once, while the first agent is still draining: a turn that asks for approval.
        await start_turn(client, chat, "ask", "t2")
        frame = await client.recv_until(is_action("chat/toolCallReady", chat), timeout=5)
        assert frame["params"]["action"]["turnId"] == "t2"
        call_id = frame["params"]["action"]["toolCallId"]
        await client.dispatch(
            chat,
            {
                "type": "chat/toolCallConfirmed",
                "turnId": "t2",
                "toolCallId": call_id,
                "approved": True,
                "confirmed": "user-action",
            },
        )
        assert (await ended(client, chat, "t2"))["type"] == "chat/turnComplete"
        await client.sync()
        state = (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]
        first, second = state["turns"]
        assert first["state"] == "cancelled" and second["state"] == "complete"
        # What the first agent said while draining belongs to no turn.
        assert "draining" not in str(state["turns"])


async def test_a_turn_cancelled_while_waiting_its_go_never_runs(session_host):
    async with session_host(script(DRAINS)) as (running, backend):
        client = await running.connect("c1")
        await client.initialize()
        _, chat = await open_session(client)
        await start_turn(client, chat, "slow", "t1")
        await client.recv_until(is_action("chat/responsePart", chat))
        await client.dispatch(chat, {"type": "chat/turnCancelled", "turnId": "t1", "duration": 0})
        await start_turn(client, chat, "hello", "t2")
        seq = await client.dispatch(
            chat, {"type": "chat/turnCancelled", "turnId": "t2", "duration": 0}
        )
        answer = await client.answer_to(seq)
        assert answer["action"]["type"] == "chat/turnCancelled"
        await start_turn(client, chat, "hello", "t3")
        assert (await ended(client, chat, "t3"))["type"] == "chat/turnComplete"
        kept = backend.store.get(next(iter(backend.store.all())).backend_id)
        assert [turn.id for turn in kept.turns] == ["t1", "t3"]  # t2 never reached the agent


async def test_disposing_a_session_waits_for_its_draining_turn(session_host):
    async with session_host(script(DRAINS)) as (running, backend):
        client = await running.connect("c1")
        await client.initialize()
        session, chat = await open_session(client)
        await start_turn(client, chat, "slow", "t1")
        await client.recv_until(is_action("chat/responsePart", chat))
        await client.request("disposeSession", {"channel": session})
        # The turn had wound down, and said how, before the answer came.
        assert list(backend.store.all()) == [] or all(
            turn.end is not None for kept in backend.store.all() for turn in kept.turns
        )
        assert not running.host.engine_or_fail.channels.get(chat)


FOLLOWS = Rule(
    exact="background",
    steps=[
        Say("started a build"),
        Background(
            "shell:1",
            "npm run build",
            command="npm run build",
            gate="built",
            follow_up="the build finished",
        ),
        Usage(input_tokens=3, output_tokens=4, cost=0.25),
    ],
)
FOLLOW_UP = Rule(exact="the build finished", steps=[Say("The build is done.")])


async def test_background_work_ends_in_a_turn_the_agent_starts(session_host):
    async with session_host(script(FOLLOWS, FOLLOW_UP)) as (running, backend):
        client = await running.connect("c1")
        await client.initialize()
        session, chat = await open_session(client)
        await start_turn(client, chat, "background", "t1")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        await client.sync()
        state = (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]
        (work,) = state["backgroundWork"]
        assert work == {**work, "id": "shell:1", "kind": "shell", "command": "npm run build"}
        usage = state["turns"][0]["usage"]
        assert usage["_meta"]["ahp.cost"] == {"amount": 0.25, "currency": "USD"}
        backend.gates.release("built")
        started = await client.recv_until(is_action("chat/turnStarted", chat))
        action: dict[str, Any] = started["params"]["action"]
        assert action["message"]["origin"] == {"kind": "agent"}
        assert "origin" not in started["params"] or started["params"]["origin"] is None
        ending = await turn_end(client, chat)
        assert ending["turnId"] == action["turnId"] and ending["type"] == "chat/turnComplete"
        await client.sync()
        state = (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]
        assert "backgroundWork" not in state or not state["backgroundWork"]
        assert state["turns"][-1]["responseParts"][0]["content"] == "The build is done."
    await assert_rebuilt_equals_live(
        session_host, script(FOLLOWS, FOLLOW_UP), session, chat, live={chat: state}
    )


async def test_a_client_cancels_a_turn_the_agent_started(session_host):
    follows = Rule(
        exact="later",
        steps=[Background("shell:2", "sleep", gate="go", follow_up="long follow up")],
    )
    long = Rule(exact="long follow up", steps=[Say("on it"), Wait(gate="never")])
    async with session_host(script(follows, long)) as (running, backend):
        client = await running.connect("c1")
        await client.initialize()
        _, chat = await open_session(client)
        await start_turn(client, chat, "later", "t1")
        await turn_end(client, chat)
        backend.gates.release("go")
        started = await client.recv_until(is_action("chat/turnStarted", chat))
        turn_id = started["params"]["action"]["turnId"]
        await client.recv_until(is_action("chat/responsePart", chat))
        await client.dispatch(
            chat, {"type": "chat/turnCancelled", "turnId": turn_id, "duration": 0}
        )
        with anyio.fail_after(5):
            while backend.agents_by_id and any(
                a.running_turn for a in backend.agents_by_id.values()
            ):
                await anyio.sleep(0.01)
        await start_turn(client, chat, "hello", "t3")
        assert (await ended(client, chat, "t3"))["type"] == "chat/turnComplete"
