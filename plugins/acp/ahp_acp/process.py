"""One running ACP agent process and the client side of its connection.

The host plays the ACP client: it answers the agent's requests (permission,
files, terminals) through whatever ``Handler`` the chat installs, and hears its
``session/update`` notifications. What the agent writes to stderr is kept (the
last lines) to say why it failed, and logged at debug level.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, cast

from acp import PROTOCOL_VERSION, Client, RequestError, connect_to_agent, schema
from acp.client.connection import ClientSideConnection

from ahp_acp import files
from ahp_acp.config import AgentSpec
from ahp_acp.terminals import Terminals

log = logging.getLogger(__name__)

#: How long an agent may take to start and answer ``initialize``.
START_SECONDS = 60.0
#: How long a closing agent gets after its stdin closes, and again after SIGTERM.
STOP_SECONDS = 3.0
#: The longest line the agent may send (a whole file's text travels in one).
LINE_LIMIT = 64 << 20
STDERR_LINES = 40

CLIENT_INFO = schema.Implementation(name="ahp", title="ahp", version="0.1.0")
CAPABILITIES = schema.ClientCapabilities(
    fs=schema.FileSystemCapabilities(read_text_file=True, write_text_file=True),
    terminal=True,
)


class AgentFailed(RuntimeError):
    """The agent could not be started, or stopped answering; the message says why."""


class Handler(Protocol):
    """What a chat does with what its agent asks and says."""

    def session_update(self, session_id: str, update: Any) -> None: ...

    async def permission(
        self, tool_call: schema.ToolCallUpdate, options: Sequence[schema.PermissionOption]
    ) -> str | None: ...


class _Client:
    """The ACP ``Client`` the SDK calls: files and terminals here, the rest to the handler."""

    def __init__(self, process: AgentProcess) -> None:
        self.process = process

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        handler = self.process.handler
        if handler is not None:
            handler.session_update(session_id, update)

    async def request_permission(
        self,
        session_id: str,
        tool_call: schema.ToolCallUpdate,
        options: list[schema.PermissionOption],
        **kwargs: Any,
    ) -> schema.RequestPermissionResponse:
        handler = self.process.handler
        chosen = await handler.permission(tool_call, options) if handler is not None else None
        outcome: schema.AllowedOutcome | schema.DeniedOutcome = (
            schema.AllowedOutcome(outcome="selected", option_id=chosen)
            if chosen is not None
            else schema.DeniedOutcome(outcome="cancelled")
        )
        return schema.RequestPermissionResponse(outcome=outcome)

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> schema.ReadTextFileResponse:
        found = files.inside(path, self.process.roots)
        text = await asyncio.to_thread(files.read_text, found, line, limit)
        return schema.ReadTextFileResponse(content=text)

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> schema.WriteTextFileResponse:
        found = files.inside(path, self.process.roots)
        await asyncio.to_thread(files.write_text, found, content)
        return schema.WriteTextFileResponse()

    async def create_terminal(
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: list[schema.EnvVariable] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
        **kwargs: Any,
    ) -> schema.CreateTerminalResponse:
        terminal = await self.process.terminals.create(
            command,
            args or [],
            {v.name: v.value for v in env or ()},
            cwd,
            output_byte_limit,
        )
        return schema.CreateTerminalResponse(terminal_id=terminal.id)

    async def terminal_output(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> schema.TerminalOutputResponse:
        terminal = self.process.terminals.get(terminal_id)
        status = terminal.status()
        return schema.TerminalOutputResponse(
            output=terminal.text(),
            truncated=terminal.truncated,
            exit_status=(
                schema.TerminalExitStatus(exit_code=status[0], signal=status[1])
                if status is not None
                else None
            ),
        )

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> schema.WaitForTerminalExitResponse:
        terminal = self.process.terminals.get(terminal_id)
        await terminal.wait()
        status = terminal.status() or (None, None)
        return schema.WaitForTerminalExitResponse(exit_code=status[0], signal=status[1])

    async def kill_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> schema.KillTerminalResponse:
        await self.process.terminals.kill(terminal_id)
        return schema.KillTerminalResponse()

    async def release_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> schema.ReleaseTerminalResponse:
        await self.process.terminals.release(terminal_id)
        return schema.ReleaseTerminalResponse()

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        log.debug("agent extension notification %s ignored", method)


class AgentProcess:
    """An ACP agent started in ``cwd``, initialized; ``close()`` ends it."""

    def __init__(self, spec: AgentSpec, roots: Sequence[str]) -> None:
        self.spec = spec
        self.roots = list(roots)
        self.terminals = Terminals(self.roots)
        self.handler: Handler | None = None
        self.process: asyncio.subprocess.Process | None = None
        self.conn: ClientSideConnection | None = None
        self.info: schema.InitializeResponse | None = None
        self.stderr: deque[str] = deque(maxlen=STDERR_LINES)
        self._stderr_task: asyncio.Task[None] | None = None

    def why(self, what: str) -> str:
        """``what`` went wrong, with the agent's exit code and last words when it said any."""
        said = "; ".join(line for line in self.stderr if line.strip())[-600:]
        code = self.process.returncode if self.process is not None else None
        parts = [what]
        if code is not None:
            parts.append(f"it exited with code {code}")
        if said:
            parts.append(f"it said: {said}")
        return "; ".join(parts)

    async def start(self, cwd: str | None) -> schema.InitializeResponse:
        spec = self.spec
        try:
            self.process = await asyncio.create_subprocess_exec(
                spec.command,
                *spec.args,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=cwd if cwd and Path(cwd).is_dir() else None,
                env={**os.environ, **spec.env},
                limit=LINE_LIMIT,
                start_new_session=True,
            )
        except OSError as exc:
            raise AgentFailed(f"could not start `{spec.command_line}`: {exc}") from None
        assert self.process.stdin is not None and self.process.stdout is not None
        self._stderr_task = asyncio.create_task(self._drain_stderr())
        self.conn = connect_to_agent(
            cast(Client, _Client(self)), self.process.stdin, self.process.stdout
        )
        try:
            async with asyncio.timeout(START_SECONDS):
                self.info = await self.conn.initialize(
                    protocol_version=PROTOCOL_VERSION,
                    client_capabilities=CAPABILITIES,
                    client_info=CLIENT_INFO,
                )
        except TimeoutError:
            await self.close()
            raise AgentFailed(
                self.why(f"`{spec.command_line}` did not answer initialize in {START_SECONDS:g}s")
            ) from None
        except (ConnectionError, RequestError, ValueError) as exc:
            await self._exited()
            await self.close()
            raise AgentFailed(
                self.why(f"`{spec.command_line}` failed to initialize: {exc}")
            ) from None
        return self.info

    async def _exited(self) -> None:
        """Give a dying agent a moment to exit and finish its stderr, for ``why``."""
        if self.process is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.process.wait(), 1.0)
        if self._stderr_task is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._stderr_task), 1.0)

    async def failure(self, exc: BaseException) -> AgentFailed:
        """What a request that failed on the connection means, once the agent is seen gone."""
        await self._exited()
        return AgentFailed(self.why(f"the agent stopped answering ({exc})"))

    async def _drain_stderr(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        stream = self.process.stderr
        while True:
            try:
                line = await stream.readline()
            except ValueError:  # a line longer than the limit: skip it
                continue
            if not line:
                return
            text = line.decode("utf-8", errors="replace").rstrip()
            self.stderr.append(text)
            log.debug("%s: %s", self.spec.name, text)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def close(self) -> None:
        await self.terminals.close()
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()
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
        if self._stderr_task is not None:
            self._stderr_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._stderr_task
        close_pipes(process)


def close_pipes(process: asyncio.subprocess.Process) -> None:
    """Let an ended process's pipes go now, not when its transport is collected (which
    may be after the event loop closed, and then complains)."""
    transport = getattr(process, "_transport", None)
    if transport is not None:
        transport.close()


def describe(info: schema.InitializeResponse | None, spec: AgentSpec) -> str:
    """A line about the agent, from what it said of itself."""
    if info is None or info.agent_info is None:
        return spec.description or f"An ACP agent: {spec.command_line}"
    named = info.agent_info.title or info.agent_info.name
    return spec.description or f"{named} {info.agent_info.version} over ACP"
