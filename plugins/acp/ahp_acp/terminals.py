"""``terminal/*``: real processes an agent starts, their output kept for it to read.

Where the host runs terminals, each is a host terminal (``host.open_terminal``):
an ``ahp-terminal:`` channel claimed by the chat, which clients watch, and a
tool call showing it points at it. Elsewhere each is a child process in a
session of its own (so killing it ends everything it started), stdout and
stderr merged. Either way what the agent reads is capped at its
``outputByteLimit`` by dropping the oldest bytes, and the folder it runs in
must lie inside the session's folders, as files must.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from acp import RequestError

from ahp_acp.files import inside
from ahpcore.api import HostTerminal, NoTerminals

log = logging.getLogger(__name__)

#: Output kept when the agent names no limit.
DEFAULT_LIMIT = 1 << 20
#: How long a killed terminal's process group gets to go after SIGTERM.
KILL_GRACE_SECONDS = 2.0

#: Opens a host terminal: (command, args, env, folder) -> the terminal.
HostOpener = Callable[[str, Sequence[str], Mapping[str, str], str], Awaitable[HostTerminal]]


def _tail(data: bytes, limit: int) -> tuple[bytes, bool]:
    return (data[len(data) - limit :], True) if len(data) > limit else (data, False)


def _decode(data: bytes) -> str:
    # Cut at a character boundary: a multi-byte character may have lost its head.
    for skip in range(min(4, len(data)) + 1):
        try:
            return data[skip:].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return data.decode("utf-8", errors="replace")


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
    #: A bare process has no channel a client could watch.
    uri: str | None = None

    def text(self) -> str:
        return _decode(bytes(self.output))

    async def wait(self) -> None:
        await self.exited.wait()

    async def kill(self) -> None:
        await _kill(self)

    async def release(self) -> None:
        await _kill(self)
        if self.reader is not None:
            self.reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.reader
        transport = getattr(self.process, "_transport", None)
        if transport is not None:
            transport.close()

    def content(self) -> dict[str, Any]:
        return {"type": "text", "text": self.text()}

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


@dataclass
class HostBacked:
    """An agent's terminal the host runs: a channel clients watch."""

    id: str
    command_line: str
    terminal: HostTerminal
    limit: int

    @property
    def uri(self) -> str:
        return self.terminal.uri

    def _kept(self) -> tuple[bytes, bool]:
        return _tail(self.terminal.output().encode("utf-8"), self.limit)

    def text(self) -> str:
        return _decode(self._kept()[0])

    @property
    def truncated(self) -> bool:
        return self.terminal.truncated or self._kept()[1]

    def status(self) -> tuple[int | None, str | None] | None:
        if not self.terminal.exited:
            return None
        code = self.terminal.exit_code
        # The port reports no code for a process it killed, nor which signal did.
        return (code, None) if code is not None else (None, "SIGKILL")

    async def wait(self) -> None:
        await self.terminal.wait()

    async def kill(self) -> None:
        await self.terminal.kill()

    async def release(self) -> None:
        # The channel stays, exited, for the tool call that shows it; it goes with
        # the session.
        await self.terminal.kill()

    def content(self) -> dict[str, Any]:
        result: dict[str, Any] = {"preview": self.text(), "truncated": self.truncated}
        if self.terminal.exit_code is not None:
            result["exitCode"] = self.terminal.exit_code
        return {
            "type": "terminal",
            "resource": self.uri,
            "title": self.terminal.title,
            "isPty": True,
            "result": result,
        }


AgentTerminal = Terminal | HostBacked


class Terminals:
    """The terminals of one chat's agent."""

    def __init__(self, roots: Sequence[str], opener: HostOpener | None = None) -> None:
        self.roots = list(roots)
        self.running: dict[str, AgentTerminal] = {}
        self._ids = itertools.count(1)
        #: How to open a host terminal; None once the host said it runs none.
        self.opener = opener

    async def create(
        self,
        command: str,
        args: Sequence[str],
        env: Mapping[str, str],
        cwd: str | None,
        limit: int | None,
    ) -> AgentTerminal:
        folder = str(inside(cwd, self.roots)) if cwd else (self.roots[0] if self.roots else None)
        if folder is None:
            raise RequestError.invalid_params({"reason": "the session has no folder to run in"})
        kept = DEFAULT_LIMIT if limit is None else max(int(limit), 0)
        if self.opener is not None:
            try:
                opened = await self.opener(command, args, env, folder)
            except NoTerminals as exc:
                log.info("agent terminals run as bare processes: %s", exc)
                self.opener = None
            except (ValueError, PermissionError) as exc:
                raise RequestError.invalid_params(
                    {"command": command, "reason": str(exc)}
                ) from None
            else:
                found = HostBacked(f"term-{next(self._ids)}", opened.title, opened, kept)
                self.running[found.id] = found
                log.info("agent terminal %s is %s, in %s", found.id, found.uri, folder)
                return found
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
            limit=kept,
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

    def get(self, terminal_id: str) -> AgentTerminal:
        found = self.running.get(terminal_id)
        if found is None:
            raise RequestError.invalid_params(
                {"terminalId": terminal_id, "reason": "no such terminal"}
            )
        return found

    async def kill(self, terminal_id: str) -> None:
        await self.get(terminal_id).kill()

    async def release(self, terminal_id: str) -> None:
        terminal = self.running.pop(terminal_id, None)
        if terminal is not None:
            await terminal.release()

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
