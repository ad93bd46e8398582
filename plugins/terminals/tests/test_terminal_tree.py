"""Disposing of a terminal ends every process started from it, and no other.

A process that calls ``setsid`` leaves the terminal's session, and a daemon
that forks twice leaves its shell's children: neither is found by session or
process group, and both used to outlive ``disposeTerminal``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from terminal_harness import open_session, open_terminal, output_of, wait_for_output

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="walks /proc"),
]
#: How long a disposed terminal's processes may take to go.
GONE_WITHIN = 5.0


def _stat(pid: int) -> list[bytes] | None:
    """Fields of /proc/<pid>/stat after the name; None when gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == b"Z" else fields


def alive(pid: int) -> bool:
    return _stat(pid) is not None


def sleeping(seconds: str) -> list[int]:
    """Live ``sleep <seconds>`` processes (each test asks for a length nobody else does)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                argv = cmdline.read().split(b"\0")
        except OSError:
            continue
        if argv[:2] == [b"sleep", seconds.encode()] and alive(int(entry)):
            found.append(int(entry))
    return found


def unique_seconds() -> str:
    """A sleep length no other process on the machine is likely to have."""
    return f"{900 + uuid.uuid4().int % 99}.{uuid.uuid4().int % 10**6:06d}"


async def started(seconds: str, count: int) -> list[int]:
    with anyio.fail_after(10):
        while len(found := sleeping(seconds)) < count:
            await anyio.sleep(0.05)
    return found


async def gone(pids: list[int]) -> list[int]:
    """The pids still alive after GONE_WITHIN seconds (none, when all went)."""
    with anyio.move_on_after(GONE_WITHIN):
        while any(alive(pid) for pid in pids):
            await anyio.sleep(0.05)
    return [pid for pid in pids if alive(pid)]


async def type_line(client: Any, uri: str, line: str) -> None:
    marker = uuid.uuid4().hex[:8]
    # The quotes keep the typed line from matching what the shell prints.
    await client.dispatch(
        uri, {"type": "terminal/input", "data": f"{line}; echo d''one-{marker}\r"}
    )
    await wait_for_output(client, uri, f"done-{marker}")


async def test_setsid_children_and_double_forked_daemons_die_with_their_terminal(
    terminal_host, workdir: Path
) -> None:
    seconds = unique_seconds()
    async with terminal_host() as running:
        client = await running.connect()
        await client.initialize()
        await open_session(client, workdir)
        uri = "ahp-terminal:/escape"
        await open_terminal(client, workdir, uri)
        await type_line(
            client,
            uri,
            f"setsid sleep {seconds} & (setsid sh -c 'sleep {seconds}; true' &)"
            f" ; (sh -c 'sleep {seconds} & true' &)"
            # No mark in its environment: found because the shell adopted it.
            f" ; (env -i /bin/sh -c 'setsid sleep {seconds} &')",
        )
        escaped = await started(seconds, 4)
        await client.request("disposeTerminal", {"channel": uri})
        assert await gone(escaped) == []


async def test_a_daemon_outliving_its_shell_dies_on_dispose(terminal_host, workdir: Path) -> None:
    seconds = unique_seconds()
    async with terminal_host() as running:
        client = await running.connect()
        await client.initialize()
        await open_session(client, workdir)
        uri = "ahp-terminal:/gone"
        await open_terminal(client, workdir, uri)
        # Away from the pty, as a daemon goes: the terminal then ends with its shell.
        quiet = "</dev/null >/dev/null 2>&1"
        await type_line(client, uri, f"(setsid sh -c 'sleep {seconds}; true' {quiet} &)")
        (daemon,) = await started(seconds, 1)
        await client.dispatch(uri, {"type": "terminal/input", "data": "exit\r"})
        with anyio.fail_after(10):
            while running.host.engine_or_fail.channels[uri].state["lifecycle"]["status"] != (
                "exited"
            ):
                await anyio.sleep(0.05)
        assert alive(daemon)  # the shell went; the daemon did not
        await client.request("disposeTerminal", {"channel": uri})
        assert await gone([daemon]) == []


async def test_disposing_kills_nothing_that_was_not_started_from_that_terminal(
    terminal_host, workdir: Path
) -> None:
    seconds = unique_seconds()
    outsider = subprocess.Popen(["sleep", seconds], start_new_session=True)
    try:
        async with terminal_host() as running:
            client = await running.connect()
            await client.initialize()
            await open_session(client, workdir)
            await open_terminal(client, workdir, "ahp-terminal:/one")
            await open_terminal(client, workdir, "ahp-terminal:/two")
            await started(seconds, 1)
            await type_line(client, "ahp-terminal:/two", f"(setsid sleep {seconds} &)")
            (neighbour,) = set(await started(seconds, 2)) - {outsider.pid}
            await type_line(client, "ahp-terminal:/one", f"(setsid sleep {seconds} &)")
            (mine,) = set(await started(seconds, 3)) - {outsider.pid, neighbour}
            await client.request("disposeTerminal", {"channel": "ahp-terminal:/one"})
            assert await gone([mine]) == []
            await anyio.sleep(0.2)  # anything killed by mistake has had time to go
            assert alive(neighbour) and alive(outsider.pid)
            await client.request("disposeTerminal", {"channel": "ahp-terminal:/two"})
            assert await gone([neighbour]) == []
            assert alive(outsider.pid)
    finally:
        outsider.kill()
        outsider.wait()


async def test_daemons_that_finish_leave_no_zombies_behind(terminal_host, workdir: Path) -> None:
    async with terminal_host() as running:
        client = await running.connect()
        await client.initialize()
        await open_session(client, workdir)
        uri = "ahp-terminal:/reaped"
        await open_terminal(client, workdir, uri)
        await type_line(client, uri, 'echo "P""ID=$$="')
        shell = int(output_of(client, uri).split("PID=")[1].split("=")[0])
        for _ in range(5):
            await type_line(client, uri, "(setsid sh -c 'sleep 0.05; true' &)")
        await anyio.sleep(0.5)
        await type_line(client, uri, "true")  # the shell reaps at its next command
        zombies = [
            entry
            for entry in os.listdir("/proc")
            if entry.isdigit() and _zombie_child_of(int(entry), shell)
        ]
        assert zombies == []


def _zombie_child_of(pid: int, parent: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except OSError:
        return False
    return fields[0] == b"Z" and int(fields[1]) == parent
