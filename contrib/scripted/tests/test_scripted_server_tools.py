"""The host's own tools, called by a scripted agent over a real host and real sockets."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import ahp_scripted.plugin
from ahp_scripted import ScriptedBackend
from ahp_scripted.loader import loads_script
from ahpcore.hookspecs import hookimpl
from ahpcore.host import HostSettings
from ahpcore.testing import AhpTestClient, running_host

pytestmark = pytest.mark.anyio

ONE = "scripted:/00000000-0000-4000-8000-00000000a001"
TWO = "scripted:/00000000-0000-4000-8000-00000000a002"
ARTIFACTS = "agentHost/sessionArtifacts"
PR = "https://github.com/octo/repo/pull/7"

SCRIPT = f"""
name: Tools
rules:
  - prefix: "add pr"
    steps:
      - tool: add_artifact_or_reference
        server: true
        input:
          items:
            - {{type: pullRequest, label: "The fix", isArtifact: true, link: "{PR}"}}
            - {{type: file, label: "Notes", isArtifact: false, uri: "file:///w/notes.md"}}
      - say: "${{result}}"
  - prefix: "bad"
    steps:
      - tool: add_artifact_or_reference
        server: true
        input: {{items: [{{type: website, label: "x", isArtifact: false, link: "ftp://x"}}]}}
      - say: "${{result}}"
  - prefix: "list"
    steps:
      - tool: mcp__ahp__list_artifacts_and_references
        server: true
      - say: "${{result}}"
  - prefix: "remove "
    steps:
      - tool: remove_artifact_or_reference
        server: true
        input: {{id: "${{rest}}"}}
      - say: "${{result}}"
  - prefix: "sessions"
    steps:
      - tool: list_sessions
        server: true
      - say: "${{result}}"
  - prefix: "read "
    steps:
      - tool: read_session
        server: true
        input: {{session: "${{rest}}", turns: 2}}
      - say: "${{result}}"
  - prefix: "send "
    steps:
      - tool: send_message
        server: true
        input: {{session: "${{rest}}", text: "hello from afar"}}
      - say: "${{result}}"
default:
  - say: "heard: ${{message}}"
"""


def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    script = tmp_path / "tools.yaml"
    script.write_text(SCRIPT)
    monkeypatch.setenv("AHP_SCRIPTED_SCRIPT", str(script))
    settings = HostSettings(sessions="file", port=0, state_dir=tmp_path / "state")
    return running_host([("scripted", ahp_scripted.plugin)], settings=settings)


async def open_session(client: AhpTestClient, uri: str) -> str:
    await client.request("createSession", {"channel": uri, "provider": "scripted"})
    state = (await client.request("subscribe", {"channel": uri}))["snapshot"]["state"]
    chat: str = state["defaultChat"]
    await client.request("subscribe", {"channel": chat})
    return chat


async def turn(client: AhpTestClient, chat: str, text: str, turn_id: str) -> str:
    """Run one turn to its end; what the agent said."""
    await client.dispatch(
        chat,
        {
            "type": "chat/turnStarted",
            "turnId": turn_id,
            "startedAt": "2026-01-01T00:00:00.000Z",
            "message": {"text": text, "origin": {"kind": "user"}},
        },
    )
    await client.recv_until(
        lambda f: (
            f.get("method") == "action"
            and f["params"]["channel"] == chat
            and f["params"]["action"]["type"] == "chat/turnComplete"
            and f["params"]["action"]["turnId"] == turn_id
        )
    )
    state = (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]
    done = next(t for t in state["turns"] if t["id"] == turn_id)
    return "".join(p["content"] for p in done["responseParts"] if p.get("kind") == "markdown")


async def session_state(client: AhpTestClient, uri: str) -> dict[str, Any]:
    state: dict[str, Any] = (await client.request("subscribe", {"channel": uri}))["snapshot"][
        "state"
    ]
    return state


async def test_a_session_advertises_the_tools_with_a_changed_action(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with host(tmp_path, monkeypatch) as running:
        client = await running.connect()
        await client.initialize()
        await open_session(client, ONE)
        state = await session_state(client, ONE)
        names = [tool["name"] for tool in state["serverTools"]]
        assert names == [
            "list_sessions",
            "get_current_session",
            "read_session",
            "send_message",
            "add_artifact_or_reference",
            "remove_artifact_or_reference",
            "list_artifacts_and_references",
        ]
        await client.assert_replay_agrees()
    # A restarted host reopens the session with the same set and says nothing new.
    async with host(tmp_path, monkeypatch) as running:
        client = await running.connect()
        await client.initialize()
        state = await session_state(client, ONE)
        assert len(state["serverTools"]) == 7


async def test_artifacts_are_added_listed_removed_and_published_on_the_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with host(tmp_path, monkeypatch) as running:
        client = await running.connect()
        await client.initialize()
        chat = await open_session(client, ONE)
        said = await turn(client, chat, "add pr", "t1")
        lines = said.splitlines()
        assert lines[0].startswith("Added artifact: ") and lines[0].endswith(
            f"(pullRequest, artifact) The fix — {PR}"
        )
        assert lines[1].startswith("Added reference: ")
        assert lines[1].endswith("(file, reference) Notes — file:///w/notes.md")
        entries = (await session_state(client, ONE))["_meta"][ARTIFACTS]
        assert [e["type"] for e in entries] == ["pullRequest", "file"]
        assert entries[0]["isGitHub"] is True and entries[0]["chat"] == chat
        # Metadata moved with session/metaChanged, and the row carries the entries.
        assert any(
            env["action"]["type"] == "session/metaChanged" for env in client.actions_for(ONE)
        )
        [row] = [r for r in (await client.request("listSessions", {}))["items"]]
        assert row["_meta"][ARTIFACTS] == entries

        again = await turn(client, chat, "add pr", "t2")
        assert again.splitlines()[0].startswith(f"Already recorded: {entries[0]['id']} ")
        refused = await turn(client, chat, "bad", "t3")
        assert "link must be an absolute http(s) URL" in refused
        assert len((await session_state(client, ONE))["_meta"][ARTIFACTS]) == 2

        listed = await turn(client, chat, "list", "t4")
        assert listed.splitlines()[0].startswith(entries[0]["id"])
        removed = await turn(client, chat, f"remove {entries[0]['id']}", "t5")
        assert removed.startswith(f"Removed artifact: {entries[0]['id']} ")
        missing = await turn(client, chat, "remove nope", "t6")
        assert missing == "No artifact or reference with id nope."
        await client.assert_replay_agrees()
    # Kept in the session's record: a restarted host shows what is left.
    async with host(tmp_path, monkeypatch) as running:
        client = await running.connect()
        await client.initialize()
        left = (await session_state(client, ONE))["_meta"][ARTIFACTS]
        assert [e["id"] for e in left] == [entries[1]["id"]]
        chat = (await session_state(client, ONE))["defaultChat"]
        await client.request("subscribe", {"channel": chat})
        await turn(client, chat, f"remove {entries[1]['id']}", "t7")
        assert ARTIFACTS not in ((await session_state(client, ONE)).get("_meta") or {})
        await client.assert_replay_agrees()


async def test_an_agent_lists_reads_and_messages_another_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with host(tmp_path, monkeypatch) as running:
        client = await running.connect()
        await client.initialize()
        one = await open_session(client, ONE)
        two = await open_session(client, TWO)
        await turn(client, two, "first words", "b1")

        listed = await turn(client, one, "sessions", "a1")
        assert f"{ONE} — " in listed and "(this session)" in listed
        assert f"{TWO} — " in listed

        read = await turn(client, one, f"read {TWO}", "a2")
        assert "User: first words\nAssistant: heard: first words" in read

        sent = await turn(client, one, f"send {TWO}", "a3")
        assert sent.startswith(f"Sent to {TWO} (turn ")
        turn_id = sent.rsplit(" ", 1)[-1].rstrip(").")
        await client.recv_until(
            lambda f: (
                f.get("method") == "action"
                and f["params"]["channel"] == two
                and f["params"]["action"]["type"] == "chat/turnComplete"
                and f["params"]["action"]["turnId"] == turn_id
            )
        )
        state = (await client.request("subscribe", {"channel": two}))["snapshot"]["state"]
        last = state["turns"][-1]
        assert last["message"]["text"] == "hello from afar"
        assert last["message"]["origin"] == {"kind": "tool"}

        itself = await turn(client, one, f"send {ONE}", "a4")
        assert itself == "send_message reaches other sessions, not this one"
        nowhere = await turn(client, one, "read scripted:/nope", "a5")
        assert nowhere == "No session scripted:/nope on this host."
        await client.assert_replay_agrees()


async def test_with_ahp_users_an_agent_reaches_only_its_owners_sessions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ahp_users.plugin

    state = tmp_path / "state"
    tokens = {}
    for name in ("bob", "carol"):
        done = subprocess.run(
            [sys.executable, "-m", "ahpcore.cli", "users", "add", name, "--role", "member"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "AHP_STATE_DIR": str(state)},
        )
        assert done.returncode == 0, done.stderr
        tokens[name] = done.stdout.strip().splitlines()[-1]
    script = tmp_path / "tools.yaml"
    script.write_text(SCRIPT)
    monkeypatch.setenv("AHP_SCRIPTED_SCRIPT", str(script))
    settings = HostSettings(sessions="file", port=0, state_dir=state)
    plugins = [("scripted", ahp_scripted.plugin), ("users", ahp_users.plugin)]
    async with running_host(plugins, settings=settings, token="deployment-0123456789") as running:
        bob = await running.connect("bob", token=tokens["bob"])
        carol = await running.connect("carol", token=tokens["carol"])
        await bob.initialize()
        await carol.initialize()
        mine = await open_session(bob, ONE)
        hers = await open_session(carol, TWO)
        await turn(carol, hers, "private words", "c1")

        listed = await turn(bob, mine, "sessions", "b1")
        assert ONE in listed and TWO not in listed
        read = await turn(bob, mine, f"read {TWO}", "b2")
        assert read == f"No session {TWO} on this host."
        sent = await turn(bob, mine, f"send {TWO}", "b3")
        assert sent == f"No session {TWO} on this host."
        state_two = (await carol.request("subscribe", {"channel": hers}))["snapshot"]["state"]
        assert len(state_two["turns"]) == 1
        await bob.assert_replay_agrees()


class ToollessBackend(ScriptedBackend):
    """The scripted agent on a backend that says it cannot take the host's tools."""

    abilities = dataclasses.replace(ScriptedBackend.abilities, server_tools=False)


class ToollessPlugin:
    def __init__(self, backend: ScriptedBackend) -> None:
        self.backend = backend

    @hookimpl
    def ahp_backends(self, host: Any, register: Any) -> None:
        register(self.backend)


async def test_a_backend_without_the_ability_gets_no_tools_and_its_session_advertises_none(
    tmp_path: Path,
) -> None:
    backend = ToollessBackend(tmp_path / "scripted", loads_script(SCRIPT, format="yaml"))
    settings = HostSettings(sessions="file", port=0, state_dir=tmp_path / "state")
    async with running_host([("scripted", ToollessPlugin(backend))], settings=settings) as running:
        client = await running.connect()
        await client.initialize()
        chat = await open_session(client, ONE)
        assert "serverTools" not in await session_state(client, ONE)
        assert not any(
            env["action"]["type"] == "session/serverToolsChanged" for env in client.actions_for(ONE)
        )
        # The agent was handed none: its call fails, and nothing is recorded.
        said = await turn(client, chat, "add pr", "t1")
        assert said == "this host offers no server tools"
        assert ARTIFACTS not in ((await session_state(client, ONE)).get("_meta") or {})
        await client.assert_replay_agrees()
