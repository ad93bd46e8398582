"""What one client can take of the machine through terminals, and terminals that die hard."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import anyio
import pytest
from terminal_harness import (
    file_uri,
    is_action,
    open_session,
    open_terminal,
    output_of,
    wait_for_output,
)

import ahpcore.terminals.service as service

pytestmark = pytest.mark.anyio


async def create(client, workdir: Path, uri: str) -> dict:
    return await client.request_frame(
        "createTerminal",
        {
            "channel": uri,
            "claim": {"kind": "client", "clientId": client.client_id},
            "cwd": file_uri(workdir),
        },
    )


async def test_one_client_cannot_open_terminals_without_end(
    terminal_host, workdir: Path, monkeypatch
) -> None:
    monkeypatch.setattr(service, "MAX_TERMINALS_PER_CLIENT", 2)
    async with terminal_host() as running:
        greedy = await running.connect("greedy")
        await greedy.initialize()
        await open_session(greedy, workdir)
        for n in range(2):
            assert "result" in await create(greedy, workdir, f"ahp-terminal:/g{n}")
        refused = await create(greedy, workdir, "ahp-terminal:/g2")
        assert refused["error"]["code"] == -32602
        assert "(2)" in refused["error"]["message"]
        # Handing a terminal's claim away does not make room: the creator still opened it.
        other = await running.connect("other")
        await other.initialize()
        assert "result" in await create(other, workdir, "ahp-terminal:/o0")
        await greedy.request("disposeTerminal", {"channel": "ahp-terminal:/g0"})
        assert "result" in await create(greedy, workdir, "ahp-terminal:/g2")


async def test_the_host_as_a_whole_has_a_ceiling(terminal_host, workdir: Path, monkeypatch):
    monkeypatch.setattr(service, "MAX_TERMINALS", 1)
    async with terminal_host() as running:
        first = await running.connect("first")
        await first.initialize()
        await open_session(first, workdir)
        assert "result" in await create(first, workdir, "ahp-terminal:/a")
        second = await running.connect("second")
        await second.initialize()
        refused = await create(second, workdir, "ahp-terminal:/b")
        assert refused["error"]["code"] == -32602 and "(1)" in refused["error"]["message"]


async def test_a_shell_killed_with_sigkill_exits_and_refuses_input(terminal_host, workdir: Path):
    async with terminal_host() as running:
        client = await running.connect("c1")
        await client.initialize()
        await open_session(client, workdir)
        uri = "ahp-terminal:/t1"
        await open_terminal(client, workdir, uri)
        # Quotes keep the typed line from matching what the shell prints.
        await client.dispatch(uri, {"type": "terminal/input", "data": 'echo P""ID=$$ E""ND\n'})
        await wait_for_output(client, uri, "END")
        pid = int(re.search(r"PID=(\d+)", output_of(client, uri)).group(1))
        os.kill(pid, signal.SIGKILL)
        with anyio.fail_after(10):
            await client.recv_until(is_action("terminal/exited", uri))
        seq = await client.dispatch(uri, {"type": "terminal/input", "data": "ls\n"})
        assert "exited" in (await client.answer_to(seq))["rejectionReason"]
        await client.request("disposeTerminal", {"channel": uri})
        await client.assert_replay_agrees()
