"""Past sessions from the CLI's own transcripts: listed, reopened, continued, forked, cut, deleted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from anthropic_server import ToolUse, reply
from conftest import SID, chat_state, connect_and_open, start_turn, turn_end

pytestmark = pytest.mark.anyio

SESSION = SID.format(1)


def transcript(env: dict[str, str], session_id: str = SESSION) -> Path:
    [path] = Path(env["CLAUDE_CONFIG_DIR"]).glob(f"projects/*/{session_id}.jsonl")
    return path


def said(anthropic: Any) -> str:
    """Everything the model was sent in the latest main request."""
    return json.dumps(anthropic.main_requests()[-1].body["messages"])


async def test_a_past_session_is_listed_from_its_transcript_reopened_and_continued(
    claude_host, anthropic, claude_env, workdir
):
    anthropic.script(
        reply(ToolUse("Bash", {"command": "echo listed", "description": "Say it"})),
        reply("First answer"),
        reply("Second answer"),
    )
    async with claude_host() as (running, _):
        client, _, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "first question", "t1")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
    # The CLI stored it under the id the client chose.
    assert transcript(claude_env).exists()
    # A host with no record of its own finds it in the CLI's transcripts.
    async with claude_host(state="fresh") as (running, _):
        client = await running.connect("c2")
        await client.initialize()
        items = (await client.request("listSessions"))["items"]
        [item] = [i for i in items if i["resource"] == f"claude:/{SESSION}"]
        assert item["title"] == "first question"
        assert item["workingDirectories"] == [workdir.as_uri()]
        snapshot = await client.request("subscribe", {"channel": f"claude:/{SESSION}"})
        chat = snapshot["snapshot"]["state"]["defaultChat"]
        state = (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]
        [turn] = state["turns"]
        assert turn["message"]["text"] == "first question"
        kinds = [p["kind"] for p in turn["responseParts"]]
        assert kinds == ["toolCall", "markdown"]
        call = turn["responseParts"][0]["toolCall"]
        assert call["status"] == "completed" and call["_meta"] == {"toolKind": "terminal"}
        assert "listed" in call["content"][0]["text"]
        assert turn["responseParts"][1]["content"] == "First answer"
        assert turn["usage"]["inputTokens"] > 0
        await start_turn(client, chat, "second question", "t2")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        assert "first question" in said(anthropic) and "second question" in said(anthropic)
        # Disposing deletes the transcript.
        path = transcript(claude_env)
        await client.request("disposeSession", {"channel": f"claude:/{SESSION}"})
        assert not path.exists()
        items = (await client.request("listSessions"))["items"]
        assert f"claude:/{SESSION}" not in [i["resource"] for i in items]


async def test_truncate_rewinds_the_conversation_the_cli_continues(
    claude_host, anthropic, claude_env, workdir
):
    anthropic.script(reply("Alpha answer"), reply("Beta answer"), reply("Gamma answer"))
    async with claude_host() as (running, _):
        client, _, chat = await connect_and_open(running, workdir)
        for turn_id, text in (("t1", "alpha"), ("t2", "beta")):
            await start_turn(client, chat, text, turn_id)
            assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        seq = await client.dispatch(chat, {"type": "chat/truncated", "turnId": "t1"})
        assert "rejectionReason" not in await client.answer_to(seq)
        await start_turn(client, chat, "gamma", "t3")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        sent = said(anthropic)
        assert "Alpha answer" in sent and "gamma" in sent
        assert "beta" not in sent and "Beta answer" not in sent
        state = await chat_state(client, chat)
        assert [t["id"] for t in state["turns"]] == ["t1", "t3"]


async def test_a_fork_continues_from_the_named_turn(claude_host, anthropic, workdir):
    anthropic.script(reply("Alpha answer"), reply("Beta answer"), reply("Forked answer"))
    async with claude_host() as (running, _):
        client, session, chat = await connect_and_open(running, workdir)
        for turn_id, text in (("t1", "alpha"), ("t2", "beta")):
            await start_turn(client, chat, text, turn_id)
            assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        fork = "ahp-chat://fork/1"
        await client.request(
            "createChat",
            {
                "channel": session,
                "chat": fork,
                "source": {"kind": "fork", "chat": chat, "turnId": "t1"},
            },
        )
        await client.request("subscribe", {"channel": fork})
        await start_turn(client, fork, "delta", "f1")
        assert (await turn_end(client, fork))["type"] == "chat/turnComplete"
        sent = said(anthropic)
        assert "Alpha answer" in sent and "delta" in sent and "beta" not in sent
        state = await chat_state(client, fork)
        assert [t["id"] for t in state["turns"]] == ["t1", "f1"]


async def test_each_turn_costs_its_own_share_across_a_restart(claude_host, anthropic, workdir):
    # The CLI reports the session's running total, carried across a resume.
    anthropic.script(reply("a"), reply("b"), reply("c"))

    def costs(state: dict[str, Any]) -> list[float]:
        return [t["usage"]["_meta"]["ahp.cost"]["amount"] for t in state["turns"]]

    async with claude_host() as (running, _):
        client, session, chat = await connect_and_open(running, workdir)
        for turn in ("t1", "t2"):
            await start_turn(client, chat, "hi", turn)
            assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        live = costs(await chat_state(client, chat))
    assert live[0] > 0 and live == pytest.approx([live[0]] * 2)
    async with claude_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        await client.request("subscribe", {"channel": session})
        await client.request("subscribe", {"channel": chat})
        # Rebuilt turns keep their own shares; the resumed CLI's next turn adds its own.
        assert costs(await chat_state(client, chat)) == pytest.approx(live)
        await start_turn(client, chat, "hi", "t3")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        assert costs(await chat_state(client, chat)) == pytest.approx([live[0]] * 3)


async def test_chats_are_named_after_their_first_message_as_their_session_is(
    claude_host, anthropic, workdir
):
    anthropic.script(reply("First answer"), reply("Second answer"), reply("Third answer"))
    second = "ahp-chat://second/1"
    async with claude_host() as (running, _):
        client, session, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "plan the trip\nwith details", "t1")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        await client.request("createChat", {"channel": session, "chat": second})
        await client.request("subscribe", {"channel": second})
        assert (await chat_state(client, second))["title"] == ""
        await start_turn(client, second, "book the hotel", "s1")
        assert (await turn_end(client, second))["type"] == "chat/turnComplete"
        # A later message renames nothing.
        await start_turn(client, second, "and the train", "s2")
        assert (await turn_end(client, second))["type"] == "chat/turnComplete"

        async def titles(client: Any) -> dict[str, str]:
            rows = (await chat_state(client, session))["chats"]
            return {row["resource"]: row["title"] for row in rows}

        named = {chat: "plan the trip", second: "book the hotel"}
        assert await titles(client) == named
        assert (await chat_state(client, session))["title"] == "plan the trip"
    async with claude_host() as (running, _):
        client = await running.connect("c2")
        await client.initialize()
        await client.request("subscribe", {"channel": session})
        assert await titles(client) == named
