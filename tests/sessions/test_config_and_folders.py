"""Session config (resolved iteratively, changed mid-session) and working directories."""

from __future__ import annotations

import pytest

from ahp_scripted import Rule, Say, Wait
from tests.sessions.conftest import open_session, script, session_uri, start_turn, turn_end

pytestmark = pytest.mark.anyio
ROOT = "file:///work/repo"
OTHER = "file:///work/other"


async def test_resolve_session_config_keeps_what_was_answered(session_host):
    async with session_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        fresh = await client.request("resolveSessionConfig", {"provider": "scripted"})
        assert fresh["values"] == {"verbosity": "short"}
        assert fresh["schema"]["properties"]["verbosity"]["sessionMutable"] is True
        answered = await client.request(
            "resolveSessionConfig", {"provider": "scripted", "config": {"verbosity": "long"}}
        )
        assert answered["values"] == {"verbosity": "long"}
        found = await client.request(
            "sessionConfigCompletions",
            {"provider": "scripted", "property": "verbosity", "query": "LON"},
        )
        assert found == {"items": [{"value": "long", "label": "Long answers"}]}


async def test_config_changes_mid_session_only_for_mutable_keys(session_host):
    rules = Rule(exact="how", steps=[Say("verbosity is ${config.verbosity}")])
    async with session_host(script(rules)) as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        session, chat = await open_session(client, config={"verbosity": "short"})
        seq = await client.dispatch(
            session, {"type": "session/configChanged", "config": {"verbosity": "long"}}
        )
        assert "rejectionReason" not in await client.answer_to(seq)
        seq = await client.dispatch(
            session, {"type": "session/configChanged", "config": {"secret": 1}}
        )
        assert "secret" in (await client.answer_to(seq))["rejectionReason"]
        await start_turn(client, chat, "how", "t1")
        await turn_end(client, chat)
        await client.sync()
        state = (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]
        assert "verbosity is long" in str(state["turns"][-1]["responseParts"])


async def test_working_directory_rules(session_host):
    async with session_host(script(Rule(exact="hold", steps=[Wait(gate="g")]))) as (
        running,
        backend,
    ):
        client = await running.connect("c1")
        await client.initialize()
        session, chat = await open_session(client, workingDirectories=[ROOT])
        seq = await client.dispatch(
            session, {"type": "session/workingDirectoryRemoved", "directory": ROOT}
        )
        assert "cannot be removed" in (await client.answer_to(seq))["rejectionReason"]
        seq = await client.dispatch(chat, {"type": "chat/workingDirectorySet", "directory": OTHER})
        assert "not one of the session's" in (await client.answer_to(seq))["rejectionReason"]
        seq = await client.dispatch(
            session, {"type": "session/workingDirectorySet", "directory": OTHER}
        )
        assert "rejectionReason" not in await client.answer_to(seq)
        seq = await client.dispatch(chat, {"type": "chat/workingDirectorySet", "directory": OTHER})
        assert "rejectionReason" not in await client.answer_to(seq)
        await start_turn(client, chat, "hold", "t1")
        seq = await client.dispatch(
            session,
            {
                "type": "session/workingDirectoryReplaced",
                "directory": ROOT,
                "replacement": "file:///x",
            },
        )
        assert "turn is running" in (await client.answer_to(seq))["rejectionReason"]
        backend.release("g")
        await turn_end(client, chat)
        state = (await client.request("subscribe", {"channel": session}))["snapshot"]["state"]
        assert state["workingDirectories"] == [ROOT, OTHER]


async def test_a_session_made_with_folders_lists_them(session_host):
    async with session_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        await client.request(
            "createSession", {"channel": session_uri(7), "workingDirectories": [ROOT]}
        )
        (row,) = (await client.request("listSessions"))["items"]
        assert row["workingDirectories"] == [ROOT]
