"""moveChat: within a session, between sessions, into a new one, and every refusal."""

from __future__ import annotations

import pytest

from ahp_scripted import Rule, Wait
from ahpcore.protocol.errors import INVALID_PARAMS
from tests.sessions.conftest import (
    is_action,
    open_session,
    script,
    session_uri,
    start_turn,
    turn_end,
)

pytestmark = pytest.mark.anyio


async def chats_of(client, session):
    state = (await client.request("subscribe", {"channel": session}))["snapshot"]["state"]
    return [row["resource"] for row in state["chats"]]


async def test_a_chat_moves_within_its_session(session_host):
    async with session_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        session, default = await open_session(client)
        for name in ("a", "b", "c"):
            await client.request("createChat", {"channel": session, "chat": f"ahp-chat:/{name}"})
        result = await client.request(
            "moveChat",
            {
                "channel": "ahp-chat:/c",
                "destination": {"kind": "session", "session": session, "after": default},
            },
        )
        assert result == {"session": session}
        assert await chats_of(client, session) == [
            default,
            "ahp-chat:/c",
            "ahp-chat:/a",
            "ahp-chat:/b",
        ]
        await client.request(
            "moveChat",
            {"channel": "ahp-chat:/b", "destination": {"kind": "session", "session": session}},
        )
        assert (await chats_of(client, session))[0] == "ahp-chat:/b"


async def test_move_refusals_change_nothing(session_host):
    rules = Rule(exact="wait", steps=[Wait(gate="g")])
    async with session_host(script(rules)) as (running, backend):
        client = await running.connect("c1")
        await client.initialize()
        session, default = await open_session(client)
        await client.request("createChat", {"channel": session, "chat": "ahp-chat:/a"})
        await client.request("subscribe", {"channel": "ahp-chat:/a"})
        before = await chats_of(client, session)
        cases = [
            (default, {"kind": "session", "session": session}, "default chat"),
            (
                "ahp-chat:/a",
                {"kind": "session", "session": session, "after": "ahp-chat:/a"},
                "being moved",
            ),
            (
                "ahp-chat:/a",
                {"kind": "session", "session": session, "after": "ahp-chat:/zz"},
                "not a chat",
            ),
            ("ahp-chat:/a", {"kind": "session", "session": session_uri(9)}, "not running"),
        ]
        for chat, destination, words in cases:
            frame = await client.request_frame(
                "moveChat", {"channel": chat, "destination": destination}
            )
            assert (
                frame["error"]["code"] == INVALID_PARAMS and words in frame["error"]["message"]
            ), frame
        await start_turn(client, "ahp-chat:/a", "wait", "t1")
        frame = await client.request_frame(
            "moveChat", {"channel": "ahp-chat:/a", "destination": {"kind": "newSession"}}
        )
        assert "running a turn" in frame["error"]["message"]
        backend.release("g")
        await turn_end(client, "ahp-chat:/a")
        assert await chats_of(client, session) == before


async def test_a_chat_moves_to_another_session_and_keeps_its_turns(session_host):
    async with session_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        source, _ = await open_session(client, 1)
        target, target_default = await open_session(client, 2)
        await client.request("createChat", {"channel": source, "chat": "ahp-chat:/m"})
        await client.request("subscribe", {"channel": "ahp-chat:/m"})
        await start_turn(client, "ahp-chat:/m", "before the move", "t1")
        await turn_end(client, "ahp-chat:/m")
        result = await client.request(
            "moveChat",
            {
                "channel": "ahp-chat:/m",
                "destination": {"kind": "session", "session": target, "after": target_default},
            },
        )
        assert result == {"session": target}
        await client.recv_until(is_action("session/chatRemoved", source))
        assert "ahp-chat:/m" not in await chats_of(client, source)
        assert await chats_of(client, target) == [target_default, "ahp-chat:/m"]
        await start_turn(client, "ahp-chat:/m", "after the move", "t2")
        assert (await turn_end(client, "ahp-chat:/m"))["type"] == "chat/turnComplete"
        state = (await client.request("subscribe", {"channel": "ahp-chat:/m"}))["snapshot"]["state"]
        assert [t["id"] for t in state["turns"]] == ["t1", "t2"]


async def test_a_chat_moves_into_a_new_session(session_host):
    async with session_host() as (running, _):
        watcher = await running.connect("w")
        client = await running.connect("c1")
        await watcher.initialize()
        await client.initialize()
        source, _ = await open_session(client)
        await client.request("createChat", {"channel": source, "chat": "ahp-chat:/solo"})
        result = await client.request(
            "moveChat", {"channel": "ahp-chat:/solo", "destination": {"kind": "newSession"}}
        )
        made = result["session"]
        added = await watcher.recv_until(
            lambda f: (
                f.get("method") == "root/sessionAdded"
                and f["params"]["summary"]["resource"] == made
            )
        )
        assert added["params"]["summary"]["defaultChat"] == "ahp-chat:/solo"
        state = (await client.request("subscribe", {"channel": made}))["snapshot"]["state"]
        assert state["defaultChat"] == "ahp-chat:/solo"
        assert "ahp-chat:/solo" not in await chats_of(client, source)


def _on_disk(state_dir, session: str) -> list[str]:
    """The chats a session's record holds as another reader of the store file sees it:
    only what has been committed to disk."""
    import json
    import sqlite3

    with sqlite3.connect(state_dir / "sessions.sqlite3") as db:
        row = db.execute(
            "SELECT record FROM sessions WHERE id = ?", (session.split("/")[-1],)
        ).fetchone()
    return [chat["uri"] for chat in json.loads(row[0])["chats"]] if row else []


@pytest.mark.parametrize("where", ["same", "other", "new"])
async def test_a_move_is_answered_once_it_is_on_disk(session_host, tmp_path, where):
    async with session_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        session, default = await open_session(client)
        other, _ = await open_session(client, 2)
        for name in ("a", "b"):
            await client.request("createChat", {"channel": session, "chat": f"ahp-chat:/{name}"})
        state_dir = tmp_path / "state"
        if where == "same":
            destination = {"kind": "session", "session": session, "after": default}
        elif where == "other":
            destination = {"kind": "session", "session": other}
        else:
            destination = {"kind": "newSession"}
        # Nothing else may save for it: the answer alone has to mean the record is written.
        result = await client.request(
            "moveChat", {"channel": "ahp-chat:/b", "destination": destination}
        )
        target = result["session"]
        assert "ahp-chat:/b" in _on_disk(state_dir, target)
        if where == "same":
            assert _on_disk(state_dir, session)[:2] == [default, "ahp-chat:/b"]
        else:
            assert "ahp-chat:/b" not in _on_disk(state_dir, session)


async def test_a_reordered_session_keeps_its_order_after_a_restart(session_host):
    async with session_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        session, default = await open_session(client)
        for name in ("a", "b"):
            await client.request("createChat", {"channel": session, "chat": f"ahp-chat:/{name}"})
        await client.request(
            "moveChat",
            {
                "channel": "ahp-chat:/b",
                "destination": {"kind": "session", "session": session, "after": default},
            },
        )
        assert await chats_of(client, session) == [default, "ahp-chat:/b", "ahp-chat:/a"]
    async with session_host() as (running, _):
        client = await running.connect("c2")
        await client.initialize()
        assert await chats_of(client, session) == [default, "ahp-chat:/b", "ahp-chat:/a"]
