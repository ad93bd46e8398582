"""One pi process in RPC mode: commands as JSON lines on its stdin, responses and events
on its stdout.

A command carries an ``id``; its ``response`` comes back with the same id. Every
other line is an event, handed to ``on_event`` in the order it arrived. Lines are
split on LF alone (pi's framing: a JSON string may hold U+2028). What pi writes
to stderr is kept (the last lines) to say why it failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: How long pi may take to answer a command (its first answer includes its start).
ANSWER_SECONDS = 60.0
#: How long a closing pi gets after its stdin closes, and again after SIGTERM.
STOP_SECONDS = 3.0
#: The longest line pi may send (a whole file's text travels in one).
LINE_LIMIT = 64 << 20
STDERR_LINES = 40

Event = Mapping[str, Any]


class PiFailed(RuntimeError):
    """pi could not be started, stopped answering, or refused a command; the message says why."""


class PiProcess:
    """pi started with ``--mode rpc`` in ``cwd``; ``close()`` ends it."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        args: Sequence[str] = (),
        cwd: str | None = None,
        on_event: Callable[[Event], None] | None = None,
    ) -> None:
        self.argv = [*command, "--mode", "rpc", *args]
        self.cwd = cwd
        self.on_event = on_event
        self.process: asyncio.subprocess.Process | None = None
        self.stderr: deque[str] = deque(maxlen=STDERR_LINES)
        self.exited = asyncio.Event()
        self._ids = itertools.count(1)
        self._waiting: dict[str, asyncio.Future[Any]] = {}
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def command_line(self) -> str:
        return " ".join(self.argv)

    def why(self, what: str) -> str:
        """``what`` went wrong, with pi's exit code and last words when it said any."""
        said = "; ".join(line for line in self.stderr if line.strip())[-600:]
        code = self.process.returncode if self.process is not None else None
        parts = [what]
        if code is not None:
            parts.append(f"it exited with code {code}")
        if said:
            parts.append(f"it said: {said}")
        return "; ".join(parts)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def start(self) -> None:
        cwd = self.cwd if self.cwd and Path(self.cwd).is_dir() else None
        try:
            self.process = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=cwd,
                env=dict(os.environ),
                limit=LINE_LIMIT,
                start_new_session=True,
            )
        except OSError as exc:
            raise PiFailed(f"could not start `{self.command_line}`: {exc}") from None
        self._tasks = [
            asyncio.create_task(self._read_stdout()),
            asyncio.create_task(self._read_stderr()),
        ]

    async def request(self, command: Mapping[str, Any], seconds: float = ANSWER_SECONDS) -> Any:
        """Send ``command``; its response's ``data`` once pi says it succeeded."""
        process = self.process
        if process is None or process.stdin is None or not self.running:
            raise PiFailed(self.why("pi is not running"))
        key = f"ahp-{next(self._ids)}"
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[key] = waiter
        try:
            process.stdin.write(json.dumps({**command, "id": key}).encode() + b"\n")
            await process.stdin.drain()
            async with asyncio.timeout(seconds):
                response = await waiter
        except TimeoutError:
            raise PiFailed(
                self.why(f"pi did not answer {command.get('type')!r} in {seconds:g}s")
            ) from None
        except (ConnectionError, BrokenPipeError) as exc:
            await self._exit_seen()
            raise PiFailed(self.why(f"pi stopped answering ({exc})")) from None
        finally:
            self._waiting.pop(key, None)
        if not response.get("success"):
            raise PiFailed(f"pi refused {command.get('type')!r}: {response.get('error')}")
        return response.get("data")

    def send(self, command: Mapping[str, Any]) -> None:
        """Send a line that gets no response (an answer to pi's own dialog request)."""
        process = self.process
        if process is not None and process.stdin is not None and self.running:
            with contextlib.suppress(ConnectionError, RuntimeError):
                process.stdin.write(json.dumps(command).encode() + b"\n")

    async def _read_stdout(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        stream = self.process.stdout
        try:
            while True:
                try:
                    line = await stream.readline()
                except ValueError:  # longer than the limit: nothing sensible to do with it
                    log.warning("pi sent a line longer than %d bytes; dropped", LINE_LIMIT)
                    continue
                if not line:
                    return
                try:
                    message = json.loads(line)
                except ValueError:
                    log.debug("pi said something that is not JSON: %r", line[:200])
                    continue
                if not isinstance(message, dict):
                    continue
                if message.get("type") == "response":
                    waiter = self._waiting.get(str(message.get("id")))
                    if waiter is not None and not waiter.done():
                        waiter.set_result(message)
                    continue
                if self.on_event is not None:
                    try:
                        self.on_event(message)
                    except Exception:
                        log.exception("pi event %s could not be handled", message.get("type"))
        finally:
            await self._exit_seen()
            self.exited.set()
            gone = PiFailed(self.why("pi stopped"))
            for waiter in self._waiting.values():
                if not waiter.done():
                    waiter.set_exception(gone)

    async def _exit_seen(self) -> None:
        if self.process is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.process.wait(), 1.0)

    async def _read_stderr(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        stream = self.process.stderr
        while True:
            try:
                line = await stream.readline()
            except ValueError:
                continue
            if not line:
                return
            text = line.decode("utf-8", errors="replace").rstrip()
            self.stderr.append(text)
            log.debug("pi: %s", text)

    async def close(self) -> None:
        process = self.process
        if process is None:
            return
        if process.stdin is not None:
            with contextlib.suppress(Exception):
                process.stdin.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), STOP_SECONDS)
        for sig in (15, 9):
            if process.returncode is not None:
                break
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, sig)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), STOP_SECONDS)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        # Let the pipes go now, not when the transport is collected after the loop closed.
        transport = getattr(process, "_transport", None)
        if transport is not None:
            transport.close()
