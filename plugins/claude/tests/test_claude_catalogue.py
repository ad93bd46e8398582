"""The boot probe and the transcript watcher, with the real CLI and a real folder."""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import pytest

from ahp_claude.backend import ClaudeBackend
from ahpcore.protocol.wire import validate_value

pytestmark = pytest.mark.anyio

SESSION = "11111111-2222-4333-8444-555555555555"
EARLY = "11111111-2222-4333-8444-666666666666"


class Heard:
    """Stands for the host's side of the notifier: records what the backend said, on the loop."""

    def __init__(self) -> None:
        self.agents = anyio.Event()
        self.sessions: list[str] = []
        self.session_seen = anyio.Event()

    def agents_changed(self) -> None:
        self.agents.set()

    def sessions_changed(self, ids: list[str]) -> None:
        self.sessions += ids
        self.session_seen.set()


def no_spawn(*args: object, **kwargs: object) -> None:
    raise AssertionError("nothing here starts a chat")


def write_transcript(folder: Path, session_id: str, prompt: str, cwd: str) -> Path:
    path = folder / "-tmp-elsewhere" / f"{session_id}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    entries = [
        {"type": "queue-operation", "operation": "enqueue", "sessionId": session_id},
        {
            "type": "user",
            "uuid": "aaaaaaaa-0000-4000-8000-000000000001",
            "parentUuid": None,
            "timestamp": "2026-11-30T10:00:00.000Z",
            "cwd": cwd,
            "sessionId": session_id,
            "message": {"role": "user", "content": prompt},
        },
    ]
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return path


async def test_the_boot_probe_lists_the_clis_models_with_their_effort_levels(
    tmp_path: Path, claude_env: dict[str, str]
):
    commands = Path(claude_env["HOME"]) / ".claude" / "commands"
    commands.mkdir(parents=True)
    (commands / "standup.md").write_text(
        "---\ndescription: Write the standup\nargument-hint: <day>\n---\nWrite it for $ARGUMENTS\n"
    )
    backend = ClaudeBackend(tmp_path / "state", no_spawn, env=claude_env, watch=False)
    [before] = backend.agents()
    assert before["models"]  # listed before any CLI answered
    assert "customizations" not in before
    heard = Heard()
    backend.attach(heard)
    with anyio.fail_after(30):
        await heard.agents.wait()
    [after] = backend.agents()
    assert validate_value("AgentInfo", after) == []
    ids = [model["id"] for model in after["models"]]
    assert "default" in ids
    with_effort = [m for m in after["models"] if "configSchema" in m]
    assert with_effort
    levels = with_effort[0]["configSchema"]["properties"]["thinkingLevel"]["enum"]
    assert "medium" in levels
    # The commands the CLI offers in any folder, before any session: one container per kind.
    found = {c["id"]: c for c in after["customizations"]}
    [standup] = [c for c in found["dir:commands"]["children"] if c["name"] == "standup"]
    assert standup["_meta"]["ahp.argumentHint"] == "<day>"
    assert found["dir:commands"]["uri"] == commands.as_uri()
    # The CLI's subagents under the agents folder; "inherit" is said by leaving the model out.
    agents = {c["name"]: c for c in found["dir:agents"]["children"]}
    assert agents["general-purpose"]["id"] == "agent:general-purpose"
    assert all(c.get("model") != "inherit" for c in agents.values())
    # No MCP server configured: the probe says so, and the agent lists none.
    assert backend.server_info["mcpServers"] == []
    assert not [c for c in after["customizations"] if c["type"] == "mcpServer"]
    backend.stop()


async def test_a_transcript_written_elsewhere_reaches_the_index_as_it_appears(
    tmp_path: Path, claude_env: dict[str, str]
):
    backend = ClaudeBackend(tmp_path / "state", no_spawn, env=claude_env, probe=False)
    projects = Path(claude_env["CLAUDE_CONFIG_DIR"]) / "projects"
    heard = Heard()
    backend.attach(heard)
    try:
        assert backend.catalogue().rows == []
        # The watch starts a moment after the host; until then each listing looks itself.
        assert not backend.watcher.ready.is_set()
        write_transcript(projects, EARLY, "before the watch", str(tmp_path))
        assert [row.session_id for row in backend.catalogue().rows] == [EARLY]
        assert await anyio.to_thread.run_sync(backend.watcher.ready.wait, 5)
        write_transcript(projects, SESSION, "from a terminal", str(tmp_path))
        with anyio.fail_after(10):
            await heard.session_seen.wait()
        assert heard.sessions == [SESSION]
        assert backend.index.watched
        row = await backend.lookup(SESSION)
        assert row is not None and row.title == "from a terminal"
        assert row.working_directories == (tmp_path.as_uri(),)
    finally:
        backend.stop()
    # A new index over the same state lists it at once, from SQLite, with no change on disk.
    again = ClaudeBackend(tmp_path / "state", no_spawn, env=claude_env, probe=False, watch=False)
    assert {row.session_id for row in again.catalogue().rows} == {SESSION, EARLY}
    again.stop()


def test_the_index_reads_a_changed_file_again_and_forgets_a_deleted_one(
    tmp_path: Path, claude_env: dict[str, str]
):
    projects = Path(claude_env["CLAUDE_CONFIG_DIR"]) / "projects"
    path = write_transcript(projects, SESSION, "first words", str(tmp_path))
    backend = ClaudeBackend(tmp_path / "state", no_spawn, env=claude_env, probe=False, watch=False)
    assert [r.title for r in backend.catalogue().rows] == ["first words"]
    with path.open("a") as handle:
        handle.write(json.dumps({"type": "custom-title", "customTitle": "Renamed"}) + "\n")
    assert [r.title for r in backend.catalogue().rows] == ["Renamed"]
    path.unlink()
    assert backend.catalogue().rows == []
    backend.stop()


def test_the_catalogue_pages_newest_first_and_filters_by_directory(
    tmp_path: Path, claude_env: dict[str, str]
):
    projects = Path(claude_env["CLAUDE_CONFIG_DIR"]) / "projects"
    ids = [f"11111111-2222-4333-8444-55555555555{n}" for n in range(5)]
    for n, session_id in enumerate(ids):
        path = write_transcript(projects, session_id, f"prompt {n}", str(tmp_path / str(n % 2)))
        os.utime(path, ns=(n * 10**9 + 10**18, n * 10**9 + 10**18))
    backend = ClaudeBackend(tmp_path / "state", no_spawn, env=claude_env, probe=False, watch=False)
    first = backend.catalogue(limit=2)
    assert [r.title for r in first.rows] == ["prompt 4", "prompt 3"]
    second = backend.catalogue(limit=2, cursor=first.next_cursor)
    assert [r.title for r in second.rows] == ["prompt 2", "prompt 1"]
    last = backend.catalogue(limit=2, cursor=second.next_cursor)
    assert [r.title for r in last.rows] == ["prompt 0"] and last.next_cursor is None
    odd = backend.catalogue(directory=(tmp_path / "1").as_uri())
    assert [r.title for r in odd.rows] == ["prompt 3", "prompt 1"]
    backend.stop()


@pytest.mark.parametrize(
    ("preset", "stored", "expected"),
    [
        ("default", {}, None),
        ("on", {}, {"enabled": True}),
        ("off", {"sandboxEnabled": True}, {"enabled": False}),
        ("default", {"sandboxEnabled": True}, {"enabled": True}),
    ],
)
def test_sandbox_presets_decide_what_the_cli_is_told(
    tmp_path: Path, claude_env: dict[str, str], preset: str, stored: dict, expected: object
):
    from ahp_claude.agent import ClaudeAgent
    from ahpcore.ports.backend import ChatStart

    backend = ClaudeBackend(
        tmp_path / "state", no_spawn, env=claude_env, probe=False, watch=False, sandbox=preset
    )
    start = ChatStart("s", "ahp-chat://x", SESSION, (tmp_path.as_uri(),), stored)
    options = ClaudeAgent(backend, start, no_spawn).options()
    assert options.sandbox == expected
    assert options.cwd == str(tmp_path)
    assert options.session_id == SESSION  # the id the client chose names the transcript


def test_an_unknown_sandbox_preset_is_refused_in_words(tmp_path: Path):
    with pytest.raises(ValueError, match="default, on, off"):
        ClaudeBackend(tmp_path, no_spawn, sandbox="maybe")
