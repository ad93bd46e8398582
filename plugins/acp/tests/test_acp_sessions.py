"""Past sessions: listed from what this host recorded, reopened through session/load."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from acp_support import (
    FAKE,
    PROVIDER,
    acp_host,
    agents_env,
    backend_of,
    chat_state,
    connect_and_open,
    parts,
    start_turn,
    turn_end,
)

pytestmark = pytest.mark.anyio


async def test_a_session_reopens_after_a_restart_from_what_the_agent_replays(
    fake_agent, tmp_path: Path, workdir: Path
):
    state_dir = tmp_path / "state"
    async with acp_host(state_dir) as running:
        client, session, chat = await connect_and_open(running, workdir)
        for n, text in enumerate(["first thing", "second thing"], 1):
            await start_turn(client, chat, text, f"turn-{n}")
            assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        live = await chat_state(client, chat)
    kept = state_dir / "acp" / PROVIDER / "sessions.json"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    async with acp_host(state_dir) as running:
        client = await running.connect("c2")
        await client.initialize()
        listed = await client.request("listSessions", {})
        [row] = [item for item in listed["items"] if item["resource"] == session]
        assert row["title"] == "first thing"
        await client.request("subscribe", {"channel": session})
        rebuilt = await chat_state(client, chat)
        assert [t["id"] for t in rebuilt["turns"]] == ["turn-1", "turn-2"]
        assert [t["message"]["text"] for t in rebuilt["turns"]] == ["first thing", "second thing"]
        assert [parts({"turns": [t]}) for t in rebuilt["turns"]] == [
            parts({"turns": [t]}) for t in live["turns"]
        ]
        # The conversation goes on in the agent's own session, loaded again.
        await start_turn(client, chat, "third thing", "turn-3")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        state = await chat_state(client, chat)
        assert parts(state)[-1]["content"] == "You said: third thing"
        acp_id = backend_of(running).records.chats[session.split(":/")[1]].acp_session_id
        history = json.loads((fake_agent / f"{acp_id}.json").read_text())
        assert [h["text"] for h in history if h["kind"] == "user"] == [
            "first thing",
            "second thing",
            "third thing",
        ]


async def test_an_agent_that_cannot_start_is_listed_with_why_and_refused(
    tmp_path: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch
):
    state = tmp_path / "fake-state"
    state.mkdir()
    agents = json.loads(agents_env(state, FAKE_ACP_FAIL="1"))
    agents["missing"] = {"command": str(tmp_path / "no-such-agent")}
    monkeypatch.setenv("AHP_ACP_AGENTS", json.dumps(agents))
    async with acp_host(tmp_path / "state") as running:
        client = await running.connect("c1")
        await client.initialize()
        frame = await client.request_frame(
            "createSession",
            {
                "channel": "fake:/00000000-0000-4000-8000-000000000009",
                "provider": PROVIDER,
                "workingDirectories": [workdir.as_uri()],
            },
        )
        assert "no credentials for the fake agent" in frame["error"]["message"]
        frame = await client.request_frame(
            "createSession",
            {
                "channel": "missing:/00000000-0000-4000-8000-000000000008",
                "provider": "missing",
                "workingDirectories": [workdir.as_uri()],
            },
        )
        assert "could not start" in frame["error"]["message"]
        await client.sync()
        root = (await client.request("subscribe", {"channel": "ahp-root://"}))["snapshot"]["state"]
        described = {a["provider"]: a["description"] for a in root["agents"]}
        assert "Not available" in described["missing"] and "could not start" in described["missing"]
        # The host goes on serving.
        await client.request("ping", {"channel": "ahp-root://"})


async def test_an_agent_without_load_lists_nothing_to_reopen(
    tmp_path: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch
):
    state = tmp_path / "fake-state"
    state.mkdir()
    monkeypatch.setenv("AHP_ACP_AGENTS", agents_env(state, FAKE_ACP_LOAD="0"))
    async with acp_host(tmp_path / "state") as running:
        client, _, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "hi", "t1")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        backend = backend_of(running)
        assert not backend.abilities.resume and not backend.abilities.list_sessions


def test_the_plugin_is_found_by_its_entry_point():
    from importlib.metadata import entry_points

    [found] = [e for e in entry_points(group="ahp") if e.name == "acp"]
    assert found.value == "ahp_acp.plugin"
    assert FAKE.exists() and os.access(sys.executable, os.X_OK)
