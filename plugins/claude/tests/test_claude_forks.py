"""A chat's own transcript (a fork's, a side chat's) belongs to its session: it is never
listed, reopened or deleted as a session of its own, and its history survives restarts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from anthropic_server import reply
from conftest import SID, chat_state, connect_and_open, start_turn, turn_end

from ahpcore.protocol.errors import SESSION_NOT_FOUND

pytestmark = pytest.mark.anyio

SESSION = SID.format(1)


def transcript_of(env: dict[str, str], backend_id: str) -> Path | None:
    found = list(Path(env["CLAUDE_CONFIG_DIR"]).glob(f"projects/*/{backend_id}.jsonl"))
    return found[0] if found else None


def sent(anthropic: Any) -> str:
    """Everything the model was sent in the latest main request."""
    return json.dumps(anthropic.main_requests()[-1].body["messages"])


async def listed(client: Any) -> list[str]:
    return sorted(i["resource"] for i in (await client.request("listSessions"))["items"])


async def fork_at(client: Any, session: str, chat: str, turn_id: str, fork: str) -> None:
    await client.request(
        "createChat",
        {
            "channel": session,
            "chat": fork,
            "source": {"kind": "fork", "chat": chat, "turnId": turn_id},
        },
    )
    await client.request("subscribe", {"channel": fork})


async def refused_as_unknown(client: Any, session: str) -> None:
    frame = await client.request_frame("disposeSession", {"channel": session})
    assert frame.get("error", {}).get("code") == SESSION_NOT_FOUND, frame


async def test_a_forks_transcript_is_no_session_of_its_own_and_keeps_its_history(
    claude_host, anthropic, claude_env, workdir
):
    anthropic.script(
        reply("Alpha answer"),
        reply("Beta answer"),
        reply("Forked answer"),
        reply("Forked again"),
        reply("Moved answer"),
    )
    fork = "ahp-chat://fork/1"
    async with claude_host() as (running, backend):
        client, session, chat = await connect_and_open(running, workdir)
        for turn_id, text in (("t1", "alpha"), ("t2", "beta")):
            await start_turn(client, chat, text, turn_id)
            assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        await fork_at(client, session, chat, "t1", fork)
        await start_turn(client, fork, "delta", "f1")
        assert (await turn_end(client, fork))["type"] == "chat/turnComplete"
        [fork_id] = [i for i in backend.live if i != SESSION]
        fork_transcript = transcript_of(claude_env, fork_id)
        assert fork_transcript is not None
        # Live: one session, whose two chats are the default and the fork.
        assert await listed(client) == [session]
        await refused_as_unknown(client, f"claude:/{fork_id}")
        assert fork_transcript.exists()

    async with claude_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        assert await listed(client) == [session]
        await refused_as_unknown(client, f"claude:/{fork_id}")
        assert fork_transcript.exists()
        await client.request("subscribe", {"channel": session})
        await client.request("subscribe", {"channel": fork})
        # The fork's next turn sends the model the whole forked history, and only it.
        await start_turn(client, fork, "epsilon", "f2")
        assert (await turn_end(client, fork))["type"] == "chat/turnComplete"
        said = sent(anthropic)
        for words in ("alpha", "Alpha answer", "delta", "Forked answer", "epsilon"):
            assert words in said
        assert "beta" not in said and "Beta answer" not in said
        state = await chat_state(client, fork)
        assert [t["id"] for t in state["turns"]] == ["t1", "f1", "f2"]

        # Moved to a session of its own, the fork is that session; disposing the one it
        # left keeps its history.
        moved = await client.request(
            "moveChat", {"channel": fork, "destination": {"kind": "newSession"}}
        )
        assert moved["session"] == f"claude:/{fork_id}"
        original = transcript_of(claude_env, SESSION)
        assert original is not None
        await client.request("disposeSession", {"channel": session})
        assert not original.exists() and fork_transcript.exists()
        assert await listed(client) == [f"claude:/{fork_id}"]

    async with claude_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        assert await listed(client) == [f"claude:/{fork_id}"]
        await client.request("subscribe", {"channel": f"claude:/{fork_id}"})
        await client.request("subscribe", {"channel": fork})
        await start_turn(client, fork, "zeta", "f3")
        assert (await turn_end(client, fork))["type"] == "chat/turnComplete"
        said = sent(anthropic)
        assert "Forked again" in said and "zeta" in said


async def test_disposing_a_fork_chat_keeps_its_sessions_transcript(
    claude_host, anthropic, claude_env, workdir
):
    anthropic.script(
        reply("Alpha answer"), reply("Side answer"), reply("Forked answer"), reply("Later answer")
    )
    fork, side = "ahp-chat://fork/2", "ahp-chat://side/2"
    async with claude_host() as (running, backend):
        client, session, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "alpha", "t1")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        # A side chat's transcript is its session's too.
        await client.request(
            "createChat",
            {
                "channel": session,
                "chat": side,
                "source": {"kind": "sideChat", "chat": chat, "turnId": "t1"},
            },
        )
        await client.request("subscribe", {"channel": side})
        await start_turn(client, side, "aside", "s1")
        assert (await turn_end(client, side))["type"] == "chat/turnComplete"
        await fork_at(client, session, chat, "t1", fork)
        await start_turn(client, fork, "delta", "f1")
        assert (await turn_end(client, fork))["type"] == "chat/turnComplete"
        [side_id] = [i for i, a in backend.live.items() if a.start.chat_uri == side]
        [fork_id] = [i for i, a in backend.live.items() if a.start.chat_uri == fork]
        assert transcript_of(claude_env, side_id) is not None
        assert await listed(client) == [session]
        fork_transcript = transcript_of(claude_env, fork_id)
        await client.request("disposeChat", {"channel": fork})
        assert fork_transcript is not None and not fork_transcript.exists()
        original = transcript_of(claude_env, SESSION)
        assert original is not None
        await start_turn(client, chat, "later", "t2")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        said = sent(anthropic)
        assert "alpha" in said and "Alpha answer" in said and "delta" not in said
        assert await listed(client) == [session]


async def test_a_fork_reopened_before_its_first_turn_still_carries_the_forked_history(
    claude_host, anthropic, claude_env, workdir
):
    anthropic.script(reply("Alpha answer"), reply("Beta answer"), reply("Forked answer"))
    fork = "ahp-chat://fork/3"
    async with claude_host() as (running, _):
        client, session, chat = await connect_and_open(running, workdir)
        for turn_id, text in (("t1", "alpha"), ("t2", "beta")):
            await start_turn(client, chat, text, turn_id)
            assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        await fork_at(client, session, chat, "t1", fork)
    async with claude_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        assert await listed(client) == [session]
        await client.request("subscribe", {"channel": session})
        state = (await client.request("subscribe", {"channel": fork}))["snapshot"]["state"]
        assert [t["id"] for t in state["turns"]] == ["t1"]
        await start_turn(client, fork, "delta", "f1")
        assert (await turn_end(client, fork))["type"] == "chat/turnComplete"
        said = sent(anthropic)
        assert "alpha" in said and "Alpha answer" in said and "delta" in said
        assert "beta" not in said
        state = await chat_state(client, fork)
        assert [t["id"] for t in state["turns"]] == ["t1", "f1"]
