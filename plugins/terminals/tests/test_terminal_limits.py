"""What one client can take of the machine through terminals, and terminals that die hard."""

from __future__ import annotations

import os
import re
import signal
import socket
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

import ahpcore.services.terminals.service as service

pytestmark = pytest.mark.anyio


async def stalled_client(running, client_id: str):
    """A client whose socket takes almost nothing unless it is read, uncompressed (a
    flood of ``y`` would otherwise shrink to nothing on the wire)."""
    port = int(running.url.rstrip("/").rsplit(":", 1)[1])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    return await running.connect(
        client_id, sock=sock, max_queue=1, compression=None, conformance=False
    )


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


async def test_a_watcher_that_stops_reading_does_not_slow_the_terminal_for_others(
    terminal_host, workdir: Path, monkeypatch
) -> None:
    async with terminal_host() as running:
        reader = await running.connect("reader")
        await reader.initialize()
        await open_session(reader, workdir)
        seq = await reader.dispatch(
            "ahp-root://", {"type": "root/configChanged", "config": {"clientQueueBytes": 4 << 20}}
        )
        assert "rejectionReason" not in await reader.answer_to(seq)
        uri = "ahp-terminal:/flood"
        await open_terminal(reader, workdir, uri)
        stalled = await stalled_client(running, "stalled")
        await stalled.initialize(subscriptions=())
        await stalled.request("subscribe", {"channel": uri})
        # From here on the stalled client reads nothing.
        await reader.dispatch(uri, {"type": "terminal/input", "data": "yes | head -c 16M; exit\r"})
        with anyio.fail_after(60):
            await reader.recv_until(is_action("terminal/exited", uri), timeout=40)
        engine = running.host.engine_or_fail
        # The scrollback cap trimmed what a fresh snapshot holds, which replaying
        # every data action onto the first snapshot cannot show: by design.
        reader.conformance = False
        # Closed for being too far behind (its socket may still be winding down).
        assert [c.peer.closed for c in engine.clients if c.client_id == "stalled"] in ([], [True])


async def test_sizes_a_pty_cannot_take_are_refused(terminal_host, workdir: Path) -> None:
    async with terminal_host() as running:
        client = await running.connect("c1")
        await client.initialize()
        await open_session(client, workdir)
        uri = "ahp-terminal:/t1"
        await open_terminal(client, workdir, uri)
        for cols, rows in [(0, 5), (65535, 10), (-1, 5), (1e300, 5), (1.5, 24), (80, 0.25)]:
            seq = await client.dispatch(
                uri, {"type": "terminal/resized", "cols": cols, "rows": rows}
            )
            assert "whole numbers" in (await client.answer_to(seq))["rejectionReason"]
        seq = await client.dispatch(uri, {"type": "terminal/resized", "cols": 100.0, "rows": 30})
        assert "rejectionReason" not in await client.answer_to(seq)
        for size in ({"cols": 2.5}, {"rows": -3}, {"cols": 1e300}):
            refused = await client.request_frame(
                "createTerminal",
                {
                    "channel": "ahp-terminal:/odd",
                    "claim": {"kind": "client", "clientId": "c1"},
                    "cwd": file_uri(workdir),
                    **size,
                },
            )
            assert refused["error"]["code"] == -32602, size
        await client.assert_replay_agrees()
