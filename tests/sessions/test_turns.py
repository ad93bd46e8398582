"""The turn lifecycle over real sockets, driven by the scripted backend."""

from __future__ import annotations

import pytest

from ahp_scripted import Ask, Crash, Fail, Rule, Say, Think, Tool, Usage, Wait
from tests.sessions.conftest import is_action, open_session, script, start_turn, turn_end

pytestmark = pytest.mark.anyio


async def test_a_turn_streams_parts_and_moves_to_turns_when_complete(session_host):
    rules = Rule(
        exact="go",
        steps=[
            Think("let me see"),
            Say("hello there friend"),
            Tool("ls", {"path": "."}, result="a b"),
            Usage(input_tokens=10, output_tokens=5, model="scripted-1"),
        ],
    )
    async with session_host(script(rules)) as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        session, chat = await open_session(client)
        echo = await start_turn(client, chat, "go", "t1")
        assert echo["action"]["type"] == "chat/turnStarted"  # said back
        ending = await turn_end(client, chat)
        assert ending["type"] == "chat/turnComplete"
        assert isinstance(ending["duration"], int) and ending["duration"] >= 0
        actions = [a["action"] for a in client.actions_for(chat)]
        kinds = [a["type"] for a in actions]
        assert kinds[0] == "chat/turnStarted"
        first_part = actions[kinds.index("chat/responsePart")]
        assert first_part["part"]["kind"] == "reasoning"  # a part opens before it streams
        ready = next(a for a in actions if a["type"] == "chat/toolCallReady")
        assert ready["confirmed"] == "not-needed"  # nobody was asked
        complete = next(a for a in actions if a["type"] == "chat/toolCallComplete")
        assert complete["result"]["success"] is True
        assert (
            "responsePart"
            not in [a["type"] for a in actions[kinds.index("chat/toolCallStart") :]][:1]
        )
        await client.sync()
        snapshot = (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]
        assert "activeTurn" not in snapshot
        (turn,) = snapshot["turns"]
        assert turn["id"] == "t1" and turn["state"] == "complete"
        assert turn["usage"]["outputTokens"] == 5
        session_state = (await client.request("subscribe", {"channel": session}))["snapshot"][
            "state"
        ]
        assert session_state["title"] == "go"  # titled after its first message


async def test_a_tool_waiting_for_approval_is_asked_and_answered(session_host):
    rules = Rule(exact="do it", steps=[Tool("rm", {"path": "x"}, approval=True, result="gone")])
    async with session_host(script(rules)) as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        session, chat = await open_session(client)
        await start_turn(client, chat, "do it", "t1")
        ready = await client.recv_until(is_action("chat/toolCallReady", chat))
        assert "confirmed" not in ready["params"]["action"]  # waiting to be allowed
        needed = await client.recv_until(is_action("session/inputNeededSet", session))
        request = needed["params"]["action"]["request"]
        assert request["kind"] == "toolConfirmation" and request["chat"] == chat
        call = request["toolCall"]["toolCallId"]
        seq = await client.dispatch(
            chat,
            {
                "type": "chat/toolCallConfirmed",
                "turnId": "t1",
                "toolCallId": call,
                "approved": True,
                "confirmed": "user-action",
            },
        )
        await client.answer_to(seq)
        await client.recv_until(is_action("session/inputNeededRemoved", session))
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        done = next(
            a["action"]
            for a in client.actions_for(chat)
            if a["action"]["type"] == "chat/toolCallComplete"
        )
        assert done["result"]["success"] is True


async def test_a_denied_tool_does_not_run(session_host):
    rules = Rule(exact="do it", steps=[Tool("rm", {"path": "x"}, approval=True, result="gone")])
    async with session_host(script(rules)) as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        session, chat = await open_session(client)
        await start_turn(client, chat, "do it", "t1")
        needed = await client.recv_until(is_action("session/inputNeededSet", session))
        call = needed["params"]["action"]["request"]["toolCall"]["toolCallId"]
        await client.dispatch(
            chat,
            {
                "type": "chat/toolCallConfirmed",
                "turnId": "t1",
                "toolCallId": call,
                "approved": False,
                "reason": "denied",
            },
        )
        await turn_end(client, chat)
        await client.sync()
        state = (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]
        tool = next(
            p["toolCall"] for p in state["turns"][0]["responseParts"] if p["kind"] == "toolCall"
        )
        assert tool["status"] == "cancelled"


async def test_parallel_approvals_are_held_by_id(session_host):
    rules = Rule(prefix="do", steps=[Tool("rm", {"path": "x"}, approval=True, result="gone")])
    async with session_host(script(rules)) as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        session, chat = await open_session(client)
        second = "ahp-chat:/second"
        await client.request("createChat", {"channel": session, "chat": second})
        await client.request("subscribe", {"channel": second})
        await start_turn(client, chat, "do one", "t1")
        await start_turn(client, second, "do two", "t2")
        for _ in range(2):
            await client.recv_until(is_action("session/inputNeededSet", session))
        state = (await client.request("subscribe", {"channel": session}))["snapshot"]["state"]
        pending = state["inputNeeded"]
        assert sorted(entry["chat"] for entry in pending) == sorted([chat, second])
        # Answer the second first: each answer reaches its own call.
        for entry in reversed(pending):
            await client.dispatch(
                entry["chat"],
                {
                    "type": "chat/toolCallConfirmed",
                    "turnId": entry["turnId"],
                    "toolCallId": entry["toolCall"]["toolCallId"],
                    "approved": True,
                    "confirmed": "user-action",
                },
            )
        assert (await turn_end(client, second))["type"] == "chat/turnComplete"
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"


async def test_a_question_is_asked_and_the_answer_comes_back(session_host):
    rules = Rule(exact="ask", steps=[Ask("What is your name?", say_answer="Hi ${answer}")])
    async with session_host(script(rules)) as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        session, chat = await open_session(client)
        await start_turn(client, chat, "ask", "t1")
        needed = await client.recv_until(is_action("session/inputNeededSet", session))
        request = needed["params"]["action"]["request"]
        assert request["kind"] == "chatInput"
        question = request["request"]["questions"][0]["id"]
        await client.dispatch(
            chat,
            {
                "type": "chat/inputCompleted",
                "requestId": request["id"],
                "response": "accept",
                "answers": {
                    question: {"state": "submitted", "value": {"kind": "text", "value": "Ada"}}
                },
            },
        )
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        text = "".join(
            a["action"].get("content") or a["action"].get("part", {}).get("content", "")
            for a in client.actions_for(chat)
            if a["action"]["type"] in ("chat/delta", "chat/responsePart")
        )
        assert "Ada" in text


@pytest.mark.parametrize("step", [Fail("scripted failure"), Crash("the agent died")])
async def test_a_failing_turn_ends_in_error_with_a_duration(session_host, step):
    async with session_host(script(Rule(exact="break", steps=[Say("working"), step]))) as (
        running,
        _,
    ):
        client = await running.connect("c1")
        await client.initialize()
        _, chat = await open_session(client)
        await start_turn(client, chat, "break", "t1")
        ending = await turn_end(client, chat)
        assert ending["type"] == "chat/error"
        assert ending["part"]["kind"] == "error"
        assert step.message in ending["part"]["error"]["message"]
        assert ending["duration"] >= 0
        # The chat takes the next turn as usual.
        await start_turn(client, chat, "hello", "t2")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"


async def test_cancelling_the_running_turn_ends_it_for_everyone(session_host):
    rules = Rule(exact="slow", steps=[Say("starting"), Wait(gate="never"), Say("never said")])
    async with session_host(script(rules)) as (running, _):
        sender = await running.connect("sender")
        watcher = await running.connect("watcher")
        await sender.initialize()
        await watcher.initialize()
        _, chat = await open_session(sender)
        await watcher.request("subscribe", {"channel": chat})
        await start_turn(sender, chat, "slow", "t1")
        await sender.recv_until(is_action("chat/responsePart", chat))
        seq = await sender.dispatch(
            chat, {"type": "chat/turnCancelled", "turnId": "t1", "duration": 0}
        )
        answer = await sender.answer_to(seq)
        assert answer["action"]["type"] == "chat/turnCancelled"
        seen = await watcher.recv_until(is_action("chat/turnCancelled", chat))
        assert seen["params"]["origin"]["clientId"] == "sender"
        await sender.sync()
        state = (await sender.request("subscribe", {"channel": chat}))["snapshot"]["state"]
        assert state["turns"][-1]["state"] == "cancelled"
        assert not any("never said" in str(t) for t in state["turns"])


async def test_cancelling_a_turn_that_is_not_running_is_answered_to_its_sender_only(session_host):
    async with session_host() as (running, _):
        sender = await running.connect("sender")
        watcher = await running.connect("watcher")
        await sender.initialize()
        await watcher.initialize()
        _, chat = await open_session(sender)
        await watcher.request("subscribe", {"channel": chat})
        engine = running.host.engine_or_fail
        at = engine.server_seq
        seq = await sender.dispatch(
            chat, {"type": "chat/turnCancelled", "turnId": "nope", "duration": 0}
        )
        echo = await sender.answer_to(seq)
        assert "rejectionReason" not in echo and echo["serverSeq"] == at
        await watcher.sync()
        assert not watcher.actions_for(chat)


async def test_a_queued_message_starts_when_the_turn_ends(session_host):
    rules = [
        Rule(exact="first", steps=[Wait(gate="go"), Say("one")]),
        Rule(exact="second", steps=[Say("two")]),
    ]
    async with session_host(script(*rules)) as (running, backend):
        client = await running.connect("c1")
        await client.initialize()
        _, chat = await open_session(client)
        await start_turn(client, chat, "first", "t1")
        seq = await client.dispatch(
            chat,
            {
                "type": "chat/pendingMessageSet",
                "kind": "queued",
                "id": "q1",
                "message": {"text": "second", "origin": {"kind": "user"}},
            },
        )
        await client.answer_to(seq)
        backend.release("go")
        await turn_end(client, chat)
        started = await client.recv_until(
            lambda f: (
                is_action("chat/turnStarted", chat)(f)
                and f["params"]["action"].get("queuedMessageId") == "q1"
            )
        )
        assert "origin" not in started["params"]  # the host started this one
        await turn_end(client, chat)
        await client.sync()
        state = (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]
        assert "queuedMessages" not in state or state["queuedMessages"] == []
        assert [t["message"]["text"] for t in state["turns"]] == ["first", "second"]


async def test_starting_a_turn_while_one_runs_is_refused(session_host):
    async with session_host(script(Rule(exact="wait", steps=[Wait(gate="g")]))) as (
        running,
        backend,
    ):
        client = await running.connect("c1")
        await client.initialize()
        _, chat = await open_session(client)
        await start_turn(client, chat, "wait", "t1")
        refusal = await start_turn(client, chat, "again", "t2")
        assert "already running" in refusal["rejectionReason"]
        backend.release("g")
        await turn_end(client, chat)


async def test_activity_shows_on_the_session_and_clears_as_null_on_the_root(session_host):
    from ahp_scripted import Activity

    rules = Rule(exact="busy", steps=[Activity("Reading files"), Wait(gate="g"), Say("done")])
    async with session_host(script(rules)) as (running, backend):
        client = await running.connect("c1")
        await client.initialize()
        session, chat = await open_session(client)
        await start_turn(client, chat, "busy", "t1")
        busy = await client.recv_until(is_action("session/activityChanged", session))
        assert busy["params"]["action"]["activity"] == "Reading files"
        summary = await client.recv_until(
            lambda f: (
                f.get("method") == "root/sessionSummaryChanged"
                and f["params"]["changes"].get("activity") == "Reading files"
            )
        )
        assert summary["params"]["session"] == session
        backend.release("g")
        await turn_end(client, chat)
        cleared = await client.recv_until(
            lambda f: (
                f.get("method") == "root/sessionSummaryChanged"
                and "activity" in f["params"]["changes"]
                and f["params"]["changes"]["activity"] is None
            )
        )
        assert cleared["params"]["session"] == session
        state = (await client.request("subscribe", {"channel": session}))["snapshot"]["state"]
        assert "activity" not in state
