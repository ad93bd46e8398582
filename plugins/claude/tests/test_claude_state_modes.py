"""What the Claude backend keeps (its catalogue, sidecars, shell init files) is the user's
alone, whatever the umask: folders 0700, files 0600. A transcript it cuts stays private."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from anthropic_server import reply
from conftest import SID, connect_and_open, start_turn, turn_end

from ahp_claude.index import TranscriptIndex

pytestmark = pytest.mark.anyio


@pytest.fixture
def umask_022() -> Iterator[None]:
    before = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(before)


def wider_than_owner(root: Path) -> list[str]:
    """Each folder under ``root`` that is not 0700 and each file that is not 0600
    (0700 for a script the host runs)."""
    found = []
    for folder, folders, files in os.walk(root):
        for name in [*folders, *files]:
            path = Path(folder) / name
            mode = stat.S_IMODE(path.lstat().st_mode)
            if mode not in ((0o700,) if path.is_dir() else (0o600, 0o700)):
                found.append(f"{oct(mode)} {path.relative_to(root)}")
    return sorted(found)


async def test_the_claude_state_is_private_under_umask_022(
    claude_host, anthropic, claude_env, workdir, tmp_path, umask_022
):
    anthropic.script(reply("Alpha answer"), reply("Beta answer"))
    scripts = [{"shell": "bash", "script": "export AHP_GREETING=hello"}]
    async with claude_host() as (running, backend):
        client, _, chat = await connect_and_open(
            running, workdir, config={"shellInitScripts": scripts}
        )
        for turn_id, text in (("t1", "alpha"), ("t2", "beta")):
            await start_turn(client, chat, text, turn_id)
            assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        items = (await client.request("listSessions"))["items"]
        assert f"claude:/{SID.format(1)}" in [item["resource"] for item in items]
        # Cutting the conversation rewrites the CLI's transcript.
        [transcript] = Path(claude_env["CLAUDE_CONFIG_DIR"]).glob("projects/*/*.jsonl")
        os.chmod(transcript, 0o600)
        seq = await client.dispatch(chat, {"type": "chat/truncated", "turnId": "t1"})
        assert "rejectionReason" not in await client.answer_to(seq)
        assert stat.S_IMODE(transcript.stat().st_mode) == 0o600
        claude_state = backend.state_dir
        # What a running session keeps: the index, the sidecar, the shell init files.
        assert (claude_state / "catalogue.sqlite").exists()
        assert list((claude_state / "shell").iterdir())
        assert list((claude_state / "sidecar").iterdir())
        assert wider_than_owner(tmp_path / "state") == []
    assert wider_than_owner(tmp_path / "state") == []


def test_the_index_alone_makes_its_folder_and_database_private(tmp_path, umask_022):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    index = TranscriptIndex(tmp_path / "projects", state / "claude" / "catalogue.sqlite")
    try:
        assert index.rows() == []
    finally:
        index.close()
    assert (state / "claude" / "catalogue.sqlite").exists()
    assert wider_than_owner(state) == []
