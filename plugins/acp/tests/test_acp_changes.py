"""An ACP agent's file edits show in the session's changesets, like any agent's: the
git plugin watches the folder, whichever agent wrote to it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import anyio
import pytest
from acp_support import acp_host, connect_and_open, is_action, start_turn, turn_end

from ahp_files import plugin as files_plugin
from ahp_git import plugin as git_plugin

pytestmark = pytest.mark.anyio


def _git(folder: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=folder,
        check=True,
        capture_output=True,
    )


async def test_a_write_the_agent_makes_is_a_row_of_its_turn_and_session(
    fake_agent, tmp_path: Path, workdir: Path
):
    _git(workdir, "init", "-q")
    (workdir / "base.txt").write_text("base\n")
    _git(workdir, "add", "-A")
    _git(workdir, "commit", "-q", "-m", "base")
    async with acp_host(
        tmp_path / "state", also=[("git", git_plugin), ("files", files_plugin)]
    ) as running:
        client, session, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "write notes.txt from the agent", "t1")
        needed = await client.recv_until(is_action("session/inputNeededSet", session), timeout=30)
        call = needed["params"]["action"]["request"]["toolCall"]
        await client.dispatch(
            chat,
            {
                "type": "chat/toolCallConfirmed",
                "turnId": "t1",
                "toolCallId": call["toolCallId"],
                "approved": True,
                "confirmed": "user-action",
                "selectedOptionId": "once",
            },
        )
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        notes = (workdir / "notes.txt").resolve().as_uri()
        for scope in ("turn/t1", "session"):
            uri = f"{session}/changeset/{scope}"
            rows: list[str] = []
            for _ in range(50):  # the changeset settles after the turn: bounded wait
                snapshot = await client.request("subscribe", {"channel": uri})
                state = snapshot["snapshot"]["state"]
                rows = [
                    row["edit"]["after"]["uri"] for row in state["files"] if "after" in row["edit"]
                ]
                if state.get("status") == "ready" and rows:
                    break
                await client.request("unsubscribe", {"channel": uri})
                await anyio.sleep(0.1)
            assert rows == [notes], (scope, state)
            after = next(row for row in state["files"])["edit"]["after"]["content"]["uri"]
            read = await client.request("resourceRead", {"channel": "ahp-root://", "uri": after})
            assert read["data"] == "from the agent"
