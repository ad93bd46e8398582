"""``!command`` on a session: a shell command run in a terminal the session claims.

A turn whose text starts with ``!`` does not go to the model. The command runs
with the shell's ``-c`` in the session's first working directory, in a
terminal claimed by the session (so disposing the session disposes it), and
the chat shows it as a tool call whose result is that terminal, with its exit
code and a preview of the output. The backend is then handed the command and
its output through its agent's optional ``ran`` method, so the conversation
knows what was run; an agent without ``ran`` has the turn refused with the
reason before anything runs.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from typing import Any, Protocol

import anyio

from ahpcore.awaitables import resolve
from ahpcore.lifecycle import TurnStart
from ahpcore.protocol.uris import path_of_file_uri
from ahpcore.services.terminals.output import LiveTerminal

log = logging.getLogger(__name__)

#: What a client types before a shell command on a session (initialize's terminalCommandPrefix).
COMMAND_PREFIX = "!"

#: How much of the output the tool call's result carries for clients that never subscribe.
PREVIEW_CHARS = 16 << 10
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


def plain_text(output: str) -> str:
    """Terminal output as a model should read it: no escape sequences, ``\\n`` line ends."""
    return _ESCAPES.sub("", output).replace("\r\n", "\n").replace("\r", "\n")


class TerminalOpener(Protocol):
    """What a command needs of the terminals service: a terminal, opened past the fence."""

    async def open(
        self,
        uri: str,
        claim: dict[str, Any],
        cwd: str,
        params: dict[str, Any],
        command: str | None = None,
    ) -> LiveTerminal: ...


class TerminalCommands:
    def __init__(self, service: TerminalOpener) -> None:
        self.service = service

    async def run(self, start: TurnStart) -> bool:
        """Run the turn's ``!command``; False when the turn is not one."""
        turn, report = start.turn, start.report
        text = turn.text.strip()
        if turn.resume or not text.startswith(COMMAND_PREFIX):
            return False
        command = text[len(COMMAND_PREFIX) :].strip()
        if not command:
            return False
        ran = getattr(start.agent, "ran", None)
        if not callable(ran):
            raise RuntimeError(
                f"the {start.provider} backend cannot take the result of a "
                f"{COMMAND_PREFIX}command, so {command!r} was not run; "
                f"send it without the {COMMAND_PREFIX} to ask the agent instead"
            )
        directories = [p for p in map(path_of_file_uri, start.working_directories) if p]
        if not directories:
            raise RuntimeError(
                f"{start.session} has no local working directory to run {command!r} in"
            )
        call_id = f"command-{turn.turn_id}"
        uri = f"ahp-terminal:/command-{uuid.uuid4().hex}"
        claim = {
            "kind": "session",
            "session": start.session,
            "chat": start.chat,
            "turnId": turn.turn_id,
            "toolCallId": call_id,
        }
        report.tool_start(
            call_id, "terminal", display_name="Run in terminal", meta={"toolKind": "terminal"}
        )
        report.tool_running(
            call_id,
            tool_input=json.dumps({"command": command}),
            invocation_message=f"Running `{command}`",
        )
        terminal = await self.service.open(uri, claim, directories[0], {"name": command}, command)
        try:
            await terminal.feed.done.wait()
        finally:
            if not terminal.feed.done.is_set() and terminal.process is not None:
                with anyio.CancelScope(shield=True):
                    await terminal.process.kill()
        output = terminal.feed.output_text()
        code = terminal.feed.exit_code
        preview = output[-PREVIEW_CHARS:]
        result: dict[str, Any] = {
            "preview": preview,
            "truncated": len(preview) < len(output) or terminal.feed.trimmed,
        }
        if code is not None:
            result["exitCode"] = code
        report.tool_complete(
            call_id,
            success=code == 0,
            past_tense_message=f"Ran `{command}`"
            + ("" if code == 0 else f" (exit code {code if code is not None else 'unknown'})"),
            content=[
                {
                    "type": "terminal",
                    "resource": uri,
                    "title": command,
                    "isPty": True,
                    "result": result,
                }
            ],
        )
        await resolve(ran(command=command, output=plain_text(output), exit_code=code))
        log.info("%s ran a command (exit code %s)", start.session, code)  # never its text
        return True
