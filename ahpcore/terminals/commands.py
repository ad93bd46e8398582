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

import inspect
import json
import logging
import re
import uuid
from typing import TYPE_CHECKING, Any

import anyio

from ahpcore.terminals.service import COMMAND_PREFIX, local_path

if TYPE_CHECKING:
    from ahpcore.sessions.contract import TurnInput, TurnReporter
    from ahpcore.sessions.live import LiveChat
    from ahpcore.terminals.service import TerminalService

log = logging.getLogger(__name__)

#: How much of the output the tool call's result carries for clients that never subscribe.
PREVIEW_CHARS = 16 << 10
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


def plain_text(output: str) -> str:
    """Terminal output as a model should read it: no escape sequences, ``\\n`` line ends."""
    return _ESCAPES.sub("", output).replace("\r\n", "\n").replace("\r", "\n")


class TerminalCommands:
    def __init__(self, service: TerminalService) -> None:
        self.service = service

    async def intercept(self, chat: LiveChat, turn: TurnInput, report: TurnReporter) -> bool:
        text = turn.text.strip()
        if turn.resume or not text.startswith(COMMAND_PREFIX):
            return False
        command = text[len(COMMAND_PREFIX) :].strip()
        if not command:
            return False
        session = chat.session
        ran = getattr(chat.runner.agent, "ran", None)
        if not callable(ran):
            raise RuntimeError(
                f"the {session.provider} backend cannot take the result of a "
                f"{COMMAND_PREFIX}command, so {command!r} was not run; "
                f"send it without the {COMMAND_PREFIX} to ask the agent instead"
            )
        directories = [p for p in map(local_path, session.working_directories) if p]
        if not directories:
            raise RuntimeError(
                f"{session.uri} has no local working directory to run {command!r} in"
            )
        call_id = f"command-{turn.turn_id}"
        uri = f"ahp-terminal:/command-{uuid.uuid4().hex}"
        claim = {
            "kind": "session",
            "session": session.uri,
            "chat": chat.uri,
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
        answer = ran(command=command, output=plain_text(output), exit_code=code)
        if inspect.isawaitable(answer):
            await answer
        log.info("%s ran a command (exit code %s)", session.uri, code)  # never its text
        return True
