"""A session is created, and reopened from its transcript, without waiting for
claude-agent-sdk to load (one to two seconds of CPU): it loads a moment later, or for
the first turn, off the event loop."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from anthropic_server import reply
from conftest import connect_and_open, start_turn, turn_end

pytestmark = pytest.mark.anyio

HERE = Path(__file__).parent


def fresh_host(**asked: Any) -> dict[str, Any]:
    """What a host in a Python that has not loaded the SDK saw (see fresh_host.py)."""
    done = subprocess.run(
        [sys.executable, str(HERE / "fresh_host.py")],
        input=json.dumps(asked),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


async def test_sessions_open_without_the_sdk_which_loads_a_moment_later(
    claude_host, anthropic, claude_env: dict[str, str], tmp_path: Path, workdir: Path
):
    anthropic.script(reply("Hello there."))
    async with claude_host() as (running, backend):
        client, _, chat = await connect_and_open(running, workdir)
        # Loaded in the background soon after, so a first turn need not wait for it.
        with anyio.fail_after(15):
            while backend.launcher is None:
                await anyio.sleep(0.05)
        await start_turn(client, chat, "hello", "t1")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
    said = await anyio.to_thread.run_sync(
        lambda: fresh_host(state=str(tmp_path / "state"), env=claude_env, workdir=str(workdir))
    )
    assert said == {
        "sdk at start": False,
        "sdk once reopened": False,
        "turns": ["hello"],
        "sdk once created": False,
    }
