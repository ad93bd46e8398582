"""A host killed mid-turn (kill -9): its CLIs die with it, and the turn it never saw end
reads as interrupted after a restart, with what the transcript kept and nothing invented."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from anthropic_server import AnthropicServer, Hold, Text, reply
from conftest import SID, connect_and_open, start_turn, turn_end
from websockets.asyncio.client import connect

from ahpcore.testing import AhpTestClient

pytestmark = pytest.mark.anyio

SESSION = SID.format(1)
AHP = [sys.executable, "-m", "ahpcore.cli"]
SAID = "The first part of the answer, streamed before the crash."
STOPPED = "the host stopped before this turn ended"


class Serve:
    def __init__(self, process: subprocess.Popen[str], url: str) -> None:
        self.process, self.url = process, url


@contextmanager
def serve(state: Path, env: dict[str, str]) -> Iterator[Serve]:
    """``ahp serve`` as a user runs it, with the Claude backend on the scripted API."""
    process = subprocess.Popen(
        [*AHP, "serve", "--port", "0", "--no-token", "--state-dir", str(state)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **env, "AHP_CLAUDE_PROBE": "0", "AHP_CLAUDE_WATCH": "0"},
    )
    try:
        assert process.stdout is not None
        url = None
        deadline = time.monotonic() + 60
        while url is None and time.monotonic() < deadline:
            line = process.stdout.readline()
            assert line, "ahp serve exited before it listened"
            if found := re.search(r"listening on (ws://\S+)", line):
                url = found.group(1)
        assert url is not None
        yield Serve(process, url)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


async def client_of(url: str) -> AhpTestClient:
    client = AhpTestClient(await connect(url, max_size=None), "c1", conformance=False)
    await client.initialize()
    return client


def processes_with(marker: str, besides: int) -> list[int]:
    """Live processes (not zombies) whose environment holds ``marker``, but ``besides``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == besides:
            continue
        try:
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            if marker.encode() in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except (OSError, IndexError):
            continue  # gone meanwhile, or not ours to read
    return found


async def gone_within(marker: str, besides: int, seconds: float) -> list[int]:
    """The processes still alive with ``marker`` after waiting up to ``seconds``."""
    left = processes_with(marker, besides)
    with anyio.move_on_after(seconds):
        while left:
            await anyio.sleep(0.1)
            left = processes_with(marker, besides)
    return left


def texts(turn: dict[str, Any]) -> str:
    return json.dumps(turn["responseParts"])


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc")
@pytest.mark.parametrize("cut", ["after a block", "inside a block"])
async def test_a_killed_host_takes_its_cli_along_and_the_turn_reads_interrupted(
    tmp_path, anthropic: AnthropicServer, claude_env, workdir, cut
):
    hold = Hold()
    if cut == "after a block":
        # The CLI wrote the finished block to the transcript (as if the answer ended there).
        anthropic.script(reply(SAID, hold), reply("Second answer"))
    else:
        # Half a block streamed: the transcript has nothing of it, and ends at the prompt.
        anthropic.script(reply(Text(SAID, hold=hold)), reply("Second answer"))
    state = tmp_path / "state"
    marker = f"CLAUDE_CONFIG_DIR={claude_env['CLAUDE_CONFIG_DIR']}"
    session, chat = f"claude:/{SESSION}", f"ahp-chat:/{SESSION}"
    with serve(state, claude_env) as host:
        client = await client_of(host.url)
        await client.request(
            "createSession",
            {"channel": session, "provider": "claude", "workingDirectories": [workdir.as_uri()]},
        )
        snapshot = await client.request("subscribe", {"channel": session})
        chat = snapshot["snapshot"]["state"]["defaultChat"]
        await client.request("subscribe", {"channel": chat})
        await start_turn(client, chat, "tell me", "t1")
        assert await anyio.to_thread.run_sync(hold.reached.wait, 30)
        streamed = SAID[-20:] if cut == "after a block" else SAID[: len(SAID) // 2][-20:]
        await client.recv_until(lambda f: streamed in json.dumps(f), timeout=30)
        clis = processes_with(marker, host.process.pid)
        assert clis, "no CLI runs for the turn"
        host.process.kill()
        host.process.wait()
        # The CLI went with its host, and let go of the model call it was in.
        assert await gone_within(marker, host.process.pid, 10) == []
        assert await anyio.to_thread.run_sync(hold.closed.wait, 5)
        await client.close()
    hold.release.set()
    calls = len(anthropic.main_requests())

    with serve(state, claude_env) as host:
        client = await client_of(host.url)
        await client.request("subscribe", {"channel": session})
        chat_state = (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]
        [turn] = chat_state["turns"]
        assert turn["state"] == "error", turn
        assert STOPPED in texts(turn)
        if cut == "after a block":
            assert SAID in texts(turn)
        else:
            assert SAID[:10] not in texts(turn)  # nothing kept it, and nothing is made up
        assert "No response requested." not in texts(turn)
        # Nothing finished the model call behind the host's back.
        assert len(anthropic.main_requests()) == calls
        # The conversation goes on from there.
        await start_turn(client, chat, "go on", "t2")
        assert (await turn_end(client, chat))["type"] == "chat/turnComplete"
        said = json.dumps(anthropic.main_requests()[-1].body["messages"])
        assert "tell me" in said and "go on" in said
        await client.close()

    if cut == "after a block":
        return  # the transcript ended at an answer: the resumed CLI had nothing to fill in
    # The resumed CLI wrote words of its own for the cut turn: still not the model's.
    with serve(state, claude_env) as host:
        client = await client_of(host.url)
        await client.request("subscribe", {"channel": session})
        chat_state = (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]
        first, second = chat_state["turns"]
        assert first["state"] == "error" and STOPPED in texts(first)
        assert "No response requested." not in texts(first) + texts(second)
        assert second["state"] == "complete" and "Second answer" in texts(second)
        await client.close()


async def test_a_turn_cut_short_by_a_host_stopping_cleanly_reads_cancelled(
    claude_host, anthropic: AnthropicServer, workdir
):
    hold = Hold()
    anthropic.script(reply(SAID, hold))
    async with claude_host() as (running, _):
        client, session, chat = await connect_and_open(running, workdir)
        await start_turn(client, chat, "tell me", "t1")
        assert await anyio.to_thread.run_sync(hold.reached.wait, 30)
        await client.recv_until(lambda f: SAID[-20:] in json.dumps(f), timeout=30)
    hold.release.set()
    async with claude_host() as (running, _):
        client = await running.connect("c1")
        await client.initialize()
        await client.request("subscribe", {"channel": session})
        [turn] = (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"][
            "turns"
        ]
        assert turn["state"] == "cancelled", turn
        assert SAID in texts(turn)
