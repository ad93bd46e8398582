"""Restart with several chats, turn resume, steering, truncation, answers and bits per chat."""

from __future__ import annotations

import pytest

from ahp_scripted import Ask, Fail, Rule, Say, ScriptedBackend, Wait
from ahpcore.hookspecs import hookimpl
from ahpcore.host import HostSettings
from ahpcore.testing import running_host
from tests.sessions.conftest import (
    is_action,
    message,
    open_session,
    script,
    start_turn,
    turn_end,
)

pytestmark = pytest.mark.anyio


async def test_every_chat_comes_back_after_a_restart(session_host):
    async with session_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        session, default = await open_session(client)
        await client.request("createChat", {"channel": session, "chat": "ahp-chat:/side-b"})
        await client.request("createChat", {"channel": session, "chat": "ahp-chat:/side-a"})
        await client.request("subscribe", {"channel": "ahp-chat:/side-a"})
        await start_turn(client, "ahp-chat:/side-a", "in the second chat", "t1")
        await turn_end(client, "ahp-chat:/side-a")
        await client.sync()
    async with session_host() as (running, _):
        client = await running.connect("c2")
        await client.initialize()
        state = (await client.request("subscribe", {"channel": session}))["snapshot"]["state"]
        assert [row["resource"] for row in state["chats"]] == [
            default,
            "ahp-chat:/side-b",
            "ahp-chat:/side-a",
        ]
        chat = (await client.request("subscribe", {"channel": "ahp-chat:/side-a"}))["snapshot"][
            "state"
        ]
        assert [t["message"]["text"] for t in chat["turns"]] == ["in the second chat"]


async def test_an_errored_turn_can_be_resumed(session_host):
    rules = Rule(exact="flaky", steps=[Say("part one"), Fail("network hiccup"), Say("part two")])
    async with session_host(script(rules)) as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        _, chat = await open_session(client)
        await start_turn(client, chat, "flaky", "t1")
        ending = await turn_end(client, chat)
        assert ending["type"] == "chat/error" and ending["part"]["resumable"] is True
        seq = await client.dispatch(chat, {"type": "chat/turnResume", "turnId": "t1"})
        assert "rejectionReason" not in await client.answer_to(seq)
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        await client.sync()
        state = (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]
        (turn,) = state["turns"]
        text = "".join(
            p.get("content", "") for p in turn["responseParts"] if p["kind"] == "markdown"
        )
        assert "part one" in text and "part two" in text
        ids = [p["id"] for p in turn["responseParts"] if "id" in p]
        assert len(ids) == len(set(ids))  # a resumed turn numbers its parts after the old ones


async def test_a_steering_message_goes_into_the_running_turn(session_host):
    rules = [
        Rule(exact="long", steps=[Say("working"), Wait(gate="g"), Say("original ending")]),
        Rule(exact="change course", steps=[Say("steered ending")]),
    ]
    async with session_host(script(*rules)) as (running, backend):
        client = await running.connect("c1")
        await client.initialize()
        _, chat = await open_session(client)
        await start_turn(client, chat, "long", "t1")
        await client.recv_until(is_action("chat/responsePart", chat))
        await client.dispatch(
            chat,
            {
                "type": "chat/pendingMessageSet",
                "kind": "steering",
                "id": "s1",
                "message": message("change course"),
            },
        )
        removed = await client.recv_until(is_action("chat/pendingMessageRemoved", chat))
        assert removed["params"]["action"]["id"] == "s1"
        backend.release("g")
        await turn_end(client, chat)
        await client.sync()
        state = (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]
        text = str(state["turns"][-1]["responseParts"])
        assert "steered ending" in text and "original ending" not in text
        assert "steeringMessage" not in state


async def test_truncation_drops_later_turns_for_the_agent_too(session_host):
    async with session_host() as (running, backend):
        client = await running.connect("c1")
        await client.initialize()
        session, chat = await open_session(client)
        for n in range(3):
            await start_turn(client, chat, f"turn {n}", f"t{n}")
            await turn_end(client, chat)
        seq = await client.dispatch(chat, {"type": "chat/truncated", "turnId": "t0"})
        assert "rejectionReason" not in await client.answer_to(seq)
        state = (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]
        assert [t["id"] for t in state["turns"]] == ["t0"]
        conversation = backend.conversation(session.split(":/", 1)[1])
        assert [turn.id for turn in conversation.turns] == ["t0"]
        seq = await client.dispatch(chat, {"type": "chat/truncated", "turnId": "nope"})
        assert "no turn 'nope'" in (await client.answer_to(seq))["rejectionReason"]


async def test_two_clients_answer_one_question_together(session_host):
    rules = Rule(exact="ask", steps=[Ask("Your name?", say_answer="Hello ${answer}")])
    async with session_host(script(rules)) as (running, _):
        one = await running.connect("one")
        two = await running.connect("two")
        await one.initialize()
        await two.initialize()
        session, chat = await open_session(one)
        await two.request("subscribe", {"channel": chat})
        await two.request("subscribe", {"channel": session})
        await start_turn(one, chat, "ask", "t1")
        needed = await two.recv_until(is_action("session/inputNeededSet", session))
        request = needed["params"]["action"]["request"]["request"]
        question = request["questions"][0]["id"]
        answer = {"state": "draft", "value": {"kind": "text", "value": "Grace"}}
        seq = await one.dispatch(
            chat,
            {
                "type": "chat/inputAnswerChanged",
                "requestId": request["id"],
                "questionId": question,
                "answer": answer,
            },
        )
        seen = await two.recv_until(is_action("chat/inputAnswerChanged", chat))
        assert seen["params"]["origin"]["clientSeq"] == seq
        # The other window completes without answers of its own: what was synced is used.
        await two.dispatch(
            chat, {"type": "chat/inputCompleted", "requestId": request["id"], "response": "accept"}
        )
        await turn_end(one, chat)
        await one.sync()
        state = (await one.request("subscribe", {"channel": chat}))["snapshot"]["state"]
        assert "Grace" in str(state["turns"][-1]["responseParts"])


async def test_a_chats_read_bit_is_projected_into_both_summaries(session_host):
    async with session_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        session, chat = await open_session(client)
        await client.dispatch(chat, {"type": "chat/isReadChanged", "isRead": False})
        row = await client.recv_until(is_action("session/chatUpdated", session))
        assert not row["params"]["action"]["changes"]["status"] & 32
        summary = await client.recv_until(
            lambda f: (
                f.get("method") == "root/sessionSummaryChanged"
                and "chats" in f["params"]["changes"]
            )
        )
        (compact,) = summary["params"]["changes"]["chats"]
        assert compact["resource"] == chat and not compact["status"] & 32


async def test_queued_messages_reorder_and_unnamed_ones_keep_their_place(session_host):
    async with session_host(script(Rule(exact="hold", steps=[Wait(gate="g")]))) as (
        running,
        backend,
    ):
        client = await running.connect("c1")
        await client.initialize()
        _, chat = await open_session(client)
        await start_turn(client, chat, "hold", "t1")
        for name in ("a", "b", "c"):
            seq = await client.dispatch(
                chat,
                {
                    "type": "chat/pendingMessageSet",
                    "kind": "queued",
                    "id": name,
                    "message": message(name),
                },
            )
            await client.answer_to(seq)
        seq = await client.dispatch(
            chat, {"type": "chat/queuedMessagesReordered", "order": ["c", "a"]}
        )
        await client.answer_to(seq)
        state = (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]
        assert [m["id"] for m in state["queuedMessages"]] == ["c", "a", "b"]
        backend.release("g")
        await turn_end(client, chat)


class ProtectedScripted(ScriptedBackend):
    """The scripted backend, asking for a token the way a hosted model's backend would."""

    RESOURCE = "https://api.example.test"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.starts = []

    def agents(self):
        (agent,) = super().agents()
        return [
            {
                **agent,
                "protectedResources": [{"resource": self.RESOURCE, "resource_name": "Example"}],
            }
        ]

    async def start(self, start):
        self.starts.append(dict(start.tokens))
        return await super().start(start)


class ProtectedPlugin:
    def __init__(self, backend):
        self.backend = backend

    @hookimpl
    def ahp_backends(self, host, register):
        register(self.backend)


async def test_tokens_are_the_connections_own_and_expire(tmp_path):
    backend = ProtectedScripted(tmp_path / "s", script())
    settings = HostSettings(sessions="memory", port=0, state_dir=tmp_path)
    async with running_host([("p", ProtectedPlugin(backend))], settings=settings) as running:
        owner = await running.connect("owner")
        other = await running.connect("other")
        await owner.initialize()
        await other.initialize()
        resource = ProtectedScripted.RESOURCE
        assert await owner.request("authenticate", {"resource": resource, "token": "secret"}) == {}
        await owner.request(
            "createSession", {"channel": "scripted:/00000000-0000-4000-8000-0000000000a1"}
        )
        await other.request(
            "createSession", {"channel": "scripted:/00000000-0000-4000-8000-0000000000a2"}
        )
        assert backend.starts == [{resource: "secret"}, {}]  # spent only on its own sessions
        await owner.request("authenticate", {"resource": resource, "token": ""})  # signs out
        await owner.request(
            "createSession", {"channel": "scripted:/00000000-0000-4000-8000-0000000000a3"}
        )
        assert backend.starts[-1] == {}
        await owner.request(
            "authenticate", {"resource": resource, "token": "short", "expiresIn": 1}
        )
        note = await owner.recv_until(lambda f: f.get("method") == "auth/required", timeout=10)
        assert note["params"]["reason"] == "expired"
        assert note["params"]["resource"]["resource"] == resource
        await other.sync()
        assert not [f for f in other.frames if f.get("method") == "auth/required"]
        frame = await owner.request_frame(
            "authenticate", {"resource": resource, "token": "x", "expiresIn": 0}
        )
        assert frame["error"]["code"] == -32602


async def test_after_a_restart_a_chat_can_be_named_before_its_session(session_host):
    async with session_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        session, default = await open_session(client)
        await client.request("createChat", {"channel": session, "chat": "ahp-chat:/later"})
        await client.request("subscribe", {"channel": "ahp-chat:/later"})
        await start_turn(client, "ahp-chat:/later", "hello there", "t1")
        await turn_end(client, "ahp-chat:/later")
        await client.sync()
    async with session_host() as (running, _):
        client = await running.connect("c2")
        answer = await client.request(
            "reconnect",
            {
                "channel": "ahp-root://",
                "clientId": "c2",
                "lastSeenServerSeq": 0,
                "subscriptions": ["ahp-chat:/later", session],
            },
        )
        assert answer["type"] == "snapshot"
        by_uri = {snap["resource"]: snap["state"] for snap in answer["snapshots"]}
        assert [t["message"]["text"] for t in by_uri["ahp-chat:/later"]["turns"]] == ["hello there"]
        assert by_uri[session]["defaultChat"] == default
        legacy = f"ahp-chat:/{session.split(':/', 1)[1]}"
        other = await running.connect("c3")
        await other.initialize()
        assert (await other.request("subscribe", {"channel": legacy}))["snapshot"][
            "resource"
        ] == legacy
