"""``terminal/*``: real processes an agent starts, their output kept for it to read.

Each terminal is a child process in a session of its own (so killing it ends
everything it started), stdout and stderr merged, its output capped at the
agent's ``outputByteLimit`` by dropping the oldest bytes. The folder it runs in
must lie inside the session's folders, as files must.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from acp import RequestError

from ahp_acp.files import inside

log = logging.getLogger(__name__)

#: Output kept when the agent names no limit.
DEFAULT_LIMIT = 1 << 20
#: How long a killed terminal's process group gets to go after SIGTERM.
KILL_GRACE_SECONDS = 2.0


@dataclass
class Terminal:
    id: str
    command_line: str
    process: asyncio.subprocess.Process
    limit: int
    output: bytearray = field(default_factory=bytearray)
    truncated: bool = False
    reader: asyncio.Task[None] | None = None
    exited: asyncio.Event = field(default_factory=asyncio.Event)

    def text(self) -> str:
        data = bytes(self.output)
        # Cut at a character boundary: a multi-byte character may have lost its head.
        for skip in range(min(4, len(data)) + 1):
            try:
                return data[skip:].decode("utf-8")
            except UnicodeDecodeError:
                continue
        return data.decode("utf-8", errors="replace")

    def status(self) -> tuple[int | None, str | None] | None:
        """(exit code, signal name) once it exited, else None."""
        code = self.process.returncode
        if code is None or not self.exited.is_set():
            return None
        if code < 0:
            try:
                return None, signal.Signals(-code).name
            except ValueError:
                return None, str(-code)
        return code, None


class Terminals:
    """The terminals of one chat's agent."""

    def __init__(self, roots: Sequence[str]) -> None:
        self.roots = list(roots)
        self.running: dict[str, Terminal] = {}
        self._ids = itertools.count(1)

    async def create(
        self,
        command: str,
        args: Sequence[str],
        env: Mapping[str, str],
        cwd: str | None,
        limit: int | None,
    ) -> Terminal:
        folder = str(inside(cwd, self.roots)) if cwd else (self.roots[0] if self.roots else None)
        if folder is None:
            raise RequestError.invalid_params({"reason": "the session has no folder to run in"})
        try:
            process = await asyncio.create_subprocess_exec(
                command,
                *args,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                cwd=folder,
                env={**os.environ, **env},
                start_new_session=True,
            )
        except OSError as exc:
            raise RequestError.internal_error(
                {"command": command, "reason": f"could not start: {exc}"}
            ) from None
        terminal = Terminal(
            id=f"term-{next(self._ids)}",
            command_line=" ".join((command, *args)),
            process=process,
            limit=DEFAULT_LIMIT if limit is None else max(int(limit), 0),
        )
        terminal.reader = asyncio.create_task(self._read(terminal))
        self.running[terminal.id] = terminal
        log.info("agent terminal %s: %s in %s", terminal.id, terminal.command_line, folder)
        return terminal

    async def _read(self, terminal: Terminal) -> None:
        stream = terminal.process.stdout
        assert stream is not None
        try:
            while chunk := await stream.read(1 << 16):
                terminal.output += chunk
                over = len(terminal.output) - terminal.limit
                if over > 0:
                    del terminal.output[:over]
                    terminal.truncated = True
            await terminal.process.wait()
        finally:
            terminal.exited.set()

    def get(self, terminal_id: str) -> Terminal:
        found = self.running.get(terminal_id)
        if found is None:
            raise RequestError.invalid_params(
                {"terminalId": terminal_id, "reason": "no such terminal"}
            )
        return found

    async def kill(self, terminal_id: str) -> None:
        await _kill(self.get(terminal_id))

    async def release(self, terminal_id: str) -> None:
        terminal = self.running.pop(terminal_id, None)
        if terminal is not None:
            await _kill(terminal)
            if terminal.reader is not None:
                terminal.reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await terminal.reader
            transport = getattr(terminal.process, "_transport", None)
            if transport is not None:
                transport.close()

    async def close(self) -> None:
        for terminal_id in list(self.running):
            await self.release(terminal_id)


async def _kill(terminal: Terminal) -> None:
    if terminal.exited.is_set():
        return
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_SECONDS), (signal.SIGKILL, KILL_GRACE_SECONDS)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(terminal.process.pid, sig)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(terminal.exited.wait(), wait)
            return
