"""list_sessions a page at a time, get_current_session, and root config switching the artifact
tools: called by a scripted agent over a real host and real sockets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_scripted_server_tools import open_session, session_state, turn

import ahp_scripted.plugin
import ahp_vscode.plugin
from ahpcore.host import HostSettings
from ahpcore.testing import running_host

pytestmark = pytest.mark.anyio

BASE = "scripted:/00000000-0000-4000-8000-0000000000"

SCRIPT = """
name: Pages
rules:
  - prefix: "page"
    steps:
      - tool: list_sessions
        server: true
        input: {limit: 2}
      - say: "${result}"
  - prefix: "more "
    steps:
      - tool: list_sessions
        server: true
        input: {limit: 2, cursor: "${rest}"}
      - say: "${result}"
  - prefix: "find "
    steps:
      - tool: list_sessions
        server: true
        input: {query: "${rest}", limit: 1}
      - say: "${result}"
  - prefix: "bad cursor"
    steps:
      - tool: list_sessions
        server: true
        input: {cursor: "not-a-cursor"}
      - say: "${result}"
  - prefix: "where"
    steps:
      - tool: get_current_session
        server: true
      - say: "${result}"
  - prefix: "add"
    steps:
      - tool: add_artifact_or_reference
        server: true
        input: {items: [{type: website, label: "Docs", isArtifact: false, link: "https://x.test"}]}
      - say: "${result}"
default:
  - say: "heard: ${message}"
"""


def uri(n: int) -> str:
    return f"{BASE}{n:02d}"


def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    script = tmp_path / "pages.yaml"
    script.write_text(SCRIPT)
    monkeypatch.setenv("AHP_SCRIPTED_SCRIPT", str(script))
    settings = HostSettings(sessions="file", port=0, state_dir=tmp_path / "state")
    # ahp-vscode declares artifactTools, the key VS Code's window pushes.
    plugins = [("scripted", ahp_scripted.plugin), ("vscode", ahp_vscode.plugin)]
    return running_host(plugins, settings=settings)


def listed(said: str) -> list[str]:
    return [line.split(" — ")[0] for line in said.splitlines() if line.startswith(BASE)]


def cursor_of(said: str) -> str | None:
    last = said.splitlines()[-1]
    return last.rpartition("cursor: ")[2] if last.startswith("More: ") else None


async def test_list_sessions_goes_a_page_at_a_time_to_the_oldest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with host(tmp_path, monkeypatch) as running:
        client = await running.connect()
        await client.initialize()
        for n in range(1, 6):
            chat = await open_session(client, uri(n))
            await turn(client, chat, "hi", f"t{n}")  # newest first: 5, 4, ..., 1
        said = await turn(client, chat, "page", "p1")
        assert listed(said) == [uri(5), uri(4)] and "(this session)" in said
        seen = listed(said)
        for step in range(5):
            cursor = cursor_of(said)
            if cursor is None:
                break
            said = await turn(client, chat, f"more {cursor}", f"m{step}")
            seen += listed(said)
        assert seen == [uri(n) for n in (5, 4, 3, 2, 1)]
        assert cursor_of(said) is None

        # a query looks past the first page, and says where to go on from
        found = await turn(client, chat, "find 000002", "f1")
        assert listed(found) == [uri(2)]
        assert await turn(client, chat, "find nothing-like-it", "f2") == (
            "No sessions matching 'nothing-like-it'."
        )
        refused = await turn(client, chat, "bad cursor", "b1")
        assert "was not issued by this host" in refused

        here = await turn(client, chat, "where", "w1")
        assert here.splitlines()[0].startswith(f"{uri(5)} — ")
        assert f"This chat: {chat}" in here
        await client.assert_replay_agrees()


async def test_list_sessions_reads_a_page_not_the_catalogue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An answer is bounded and the rest is reached through its cursor: the catalogue is
    asked for no more rows than the answer can still hold."""
    asked: list[int] = []
    async with host(tmp_path, monkeypatch) as running:
        client = await running.connect()
        await client.initialize()
        for n in range(1, 8):
            chat = await open_session(client, uri(n))
        assert running.host.sessions is not None
        manager = running.host.sessions.server_tools
        page = manager._page

        async def counted(limit: int, cursor: str | None) -> Any:
            asked.append(limit)
            return await page(limit, cursor)

        manager._page = counted
        said = await turn(client, chat, "find 00000", "f1")  # every session matches
        assert len(listed(said)) == 1 and cursor_of(said) is not None
        assert asked == [1]


async def test_artifact_tools_go_and_come_back_with_root_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with host(tmp_path, monkeypatch) as running:
        client = await running.connect()
        await client.initialize()
        chat = await open_session(client, uri(1))

        async def push(on: bool) -> None:
            seq = await client.dispatch(
                "ahp-root://", {"type": "root/configChanged", "config": {"artifactTools": on}}
            )
            assert "rejectionReason" not in await client.answer_to(seq)

        def names(state: dict[str, Any]) -> set[str]:
            return {tool["name"] for tool in state["serverTools"]}

        assert "add_artifact_or_reference" in names(await session_state(client, uri(1)))
        await push(False)
        held = names(await session_state(client, uri(1)))
        assert "add_artifact_or_reference" not in held and "list_sessions" in held
        said = await turn(client, chat, "add", "t1")
        assert said == "No server tool named add_artifact_or_reference in this session."
        await push(True)
        assert "add_artifact_or_reference" in names(await session_state(client, uri(1)))
        assert (await turn(client, chat, "add", "t2")).startswith("Added reference: ")
        await client.assert_replay_agrees()
