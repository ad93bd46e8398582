"""An ACP agent for the tests, on the same SDK, run as a real subprocess over stdio.

What it does is chosen by the prompt's first word:

- ``hello``: thinks, answers in two chunks, names the session, says its context use;
- ``plan``: a plan of two steps, updated as it goes;
- ``write NAME TEXT``: asks permission to write NAME (an edit with a diff), then
  writes it with ``fs/write_text_file`` when allowed;
- ``read PATH``: reads PATH with ``fs/read_text_file`` and says what it got (or the error);
- ``run COMMAND``: runs COMMAND with ``sh -c`` in a ``terminal/*`` terminal and says its output;
- ``slow``: says it is working, then waits for ``session/cancel`` (30 s at most);
- ``crash``: says why on stderr and exits 3 mid-turn;
- anything else: ``You said: ...``.

It keeps each session's history (what was asked, what it answered) in
``$FAKE_ACP_STATE/<session>.json`` and replays it on ``session/load``.
``FAKE_ACP_LOAD=0`` makes it say it cannot load sessions; ``FAKE_ACP_FAIL=1``
makes it exit at once, saying why on stderr.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import acp
from acp import schema

STATE = Path(os.environ.get("FAKE_ACP_STATE", "."))
MODES = [schema.SessionMode(id="ask", name="Ask"), schema.SessionMode(id="code", name="Code")]


def model_option(current: str) -> schema.SessionConfigOptionSelect:
    return schema.SessionConfigOptionSelect(
        type="select",
        id="model",
        name="Model",
        category="model",
        current_value=current,
        options=[
            schema.SessionConfigSelectOption(value="fast", name="Fast"),
            schema.SessionConfigSelectOption(value="smart", name="Smart"),
        ],
    )


class FakeAgent:
    def __init__(self) -> None:
        self.conn: Any = None
        self.cancelled: dict[str, asyncio.Event] = {}
        self.model: dict[str, str] = {}

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> schema.InitializeResponse:
        return schema.InitializeResponse(
            protocol_version=acp.PROTOCOL_VERSION,
            agent_capabilities=schema.AgentCapabilities(
                load_session=os.environ.get("FAKE_ACP_LOAD", "1") != "0",
                session_capabilities=schema.SessionCapabilities(
                    fork=schema.SessionForkCapabilities()
                    if os.environ.get("FAKE_ACP_FORK") == "1"
                    else None
                ),
            ),
            agent_info=schema.Implementation(name="fake", title="Fake agent", version="1.0"),
        )

    def _history(self, session_id: str) -> list[dict[str, Any]]:
        path = STATE / f"{session_id}.json"
        return json.loads(path.read_text()) if path.exists() else []

    def _keep(self, session_id: str, kind: str, text: str) -> None:
        history = self._history(session_id)
        history.append({"kind": kind, "text": text})
        (STATE / f"{session_id}.json").write_text(json.dumps(history))

    async def _say(self, session_id: str, text: str) -> None:
        await self.conn.session_update(session_id, acp.update_agent_message_text(text))
        self._keep(session_id, "agent", text)

    async def _commands(self, session_id: str) -> None:
        await asyncio.sleep(0.05)
        await self.conn.session_update(
            session_id,
            schema.AvailableCommandsUpdate(
                session_update="available_commands_update",
                available_commands=[
                    schema.AvailableCommand(
                        name="review",
                        description="Review the changes",
                        input=schema.AvailableCommandInput(
                            root=schema.UnstructuredCommandInput(hint="what to look at")
                        ),
                    )
                ],
            ),
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> schema.NewSessionResponse:
        session_id = f"fake-{uuid.uuid4().hex[:12]}"
        self.model[session_id] = "fast"
        asyncio.get_running_loop().create_task(self._commands(session_id))
        return schema.NewSessionResponse(
            session_id=session_id,
            modes=schema.SessionModeState(current_mode_id="ask", available_modes=MODES),
            config_options=[model_option("fast")],
        )

    async def fork_session(
        self, session_id: str, cwd: str, **kwargs: Any
    ) -> schema.ForkSessionResponse:
        forked = f"fake-{uuid.uuid4().hex[:12]}"
        (STATE / f"{forked}.json").write_text(json.dumps(self._history(session_id)))
        self.model[forked] = self.model.get(session_id, "fast")
        return schema.ForkSessionResponse(
            session_id=forked,
            modes=schema.SessionModeState(current_mode_id="ask", available_modes=MODES),
            config_options=[model_option(self.model[forked])],
        )

    async def load_session(
        self, cwd: str, session_id: str, **kwargs: Any
    ) -> schema.LoadSessionResponse:
        for entry in self._history(session_id):
            if entry["kind"] == "user":
                update: Any = acp.update_user_message_text(entry["text"])
            else:
                update = acp.update_agent_message_text(entry["text"])
            await self.conn.session_update(session_id, update)
        self.model.setdefault(session_id, "fast")
        return schema.LoadSessionResponse(
            modes=schema.SessionModeState(current_mode_id="ask", available_modes=MODES),
            config_options=[model_option(self.model[session_id])],
        )

    async def set_session_mode(self, session_id: str, mode_id: str, **kwargs: Any) -> None:
        await self.conn.session_update(
            session_id,
            schema.CurrentModeUpdate(session_update="current_mode_update", current_mode_id=mode_id),
        )

    async def set_config_option(
        self, config_id: str, session_id: str, value: Any, **kwargs: Any
    ) -> schema.SetSessionConfigOptionResponse:
        if config_id != "model" or value not in ("fast", "smart"):
            raise acp.RequestError.invalid_params({"value": value})
        self.model[session_id] = value
        return schema.SetSessionConfigOptionResponse(config_options=[model_option(value)])

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self.cancelled.setdefault(session_id, asyncio.Event()).set()

    async def prompt(
        self, prompt: list[Any], session_id: str, **kwargs: Any
    ) -> schema.PromptResponse:
        text = " ".join(getattr(block, "text", "") for block in prompt).strip()
        self._keep(session_id, "user", text)
        word, _, rest = text.partition(" ")
        cancelled = self.cancelled[session_id] = asyncio.Event()
        usage = None
        if word == "hello":
            await self.conn.session_update(session_id, acp.update_agent_thought_text("Greeting. "))
            await self._say(session_id, "Hello ")
            await self._say(session_id, "there")
            await self.conn.session_update(
                session_id,
                schema.SessionInfoUpdate(session_update="session_info_update", title="A greeting"),
            )
            await self.conn.session_update(
                session_id,
                schema.UsageUpdate(
                    session_update="usage_update",
                    used=1200,
                    size=200000,
                    cost=schema.Cost(amount=0.01, currency="USD"),
                ),
            )
            usage = schema.Usage(input_tokens=10, output_tokens=4, total_tokens=14)
        elif word == "recall":
            said = [e["text"] for e in self._history(session_id) if e["kind"] == "user"][:-1]
            await self._say(session_id, "earlier: " + " | ".join(said))
        elif word == "plan":
            entries = [
                acp.plan_entry("Look around", status="in_progress"),
                acp.plan_entry("Say so", status="pending"),
            ]
            await self.conn.session_update(session_id, acp.update_plan(entries))
            entries = [
                acp.plan_entry("Look around", status="completed"),
                acp.plan_entry("Say so", status="completed"),
            ]
            await self.conn.session_update(session_id, acp.update_plan(entries))
            await self._say(session_id, "Planned.")
        elif word == "write":
            await self._write(session_id, rest)
        elif word == "read":
            try:
                read = await self.conn.read_text_file(session_id=session_id, path=rest)
                await self._say(session_id, f"read: {read.content}")
            except acp.RequestError as exc:
                await self._say(session_id, f"refused: {exc.data}")
        elif word == "run":
            await self._run(session_id, rest)
        elif word == "slow":
            await self._say(session_id, "working")
            try:
                await asyncio.wait_for(cancelled.wait(), 30)
            except TimeoutError:
                return schema.PromptResponse(stop_reason="end_turn")
            return schema.PromptResponse(stop_reason="cancelled")
        elif word == "crash":
            print("the fake agent fell over on purpose", file=sys.stderr, flush=True)
            os._exit(3)
        else:
            await self._say(session_id, f"You said: {text}")
        return schema.PromptResponse(stop_reason="end_turn", usage=usage)

    async def _write(self, session_id: str, rest: str) -> None:
        name, _, content = rest.partition(" ")
        cwd = os.getcwd()
        path = name if os.path.isabs(name) else os.path.join(cwd, name)
        call = f"write-{uuid.uuid4().hex[:6]}"
        await self.conn.session_update(
            session_id,
            acp.start_tool_call(
                call,
                f"Write {name}",
                kind="edit",
                status="pending",
                content=[acp.tool_diff_content(path, content, None)],
                locations=[schema.ToolCallLocation(path=path)],
                raw_input={"path": path, "content": content},
            ),
        )
        answer = await self.conn.request_permission(
            session_id=session_id,
            tool_call=acp.update_tool_call(call, title=f"Write {name}"),
            options=[
                schema.PermissionOption(option_id="once", name="Allow once", kind="allow_once"),
                schema.PermissionOption(
                    option_id="always", name="Always allow", kind="allow_always"
                ),
                schema.PermissionOption(option_id="no", name="Reject", kind="reject_once"),
            ],
        )
        outcome = answer.outcome
        if outcome.outcome == "selected" and outcome.option_id in ("once", "always"):
            await self.conn.session_update(
                session_id, acp.update_tool_call(call, status="in_progress")
            )
            try:
                await self.conn.write_text_file(session_id=session_id, path=path, content=content)
            except acp.RequestError as exc:
                await self.conn.session_update(
                    session_id,
                    acp.update_tool_call(call, status="failed", raw_output=str(exc.data)),
                )
                await self._say(session_id, f"refused: {exc.data}")
                return
            await self.conn.session_update(
                session_id, acp.update_tool_call(call, status="completed")
            )
            await self._say(session_id, f"wrote {name} ({outcome.option_id})")
        else:
            await self.conn.session_update(session_id, acp.update_tool_call(call, status="failed"))
            await self._say(session_id, f"not written ({outcome.outcome})")

    async def _run(self, session_id: str, command: str) -> None:
        call = f"run-{uuid.uuid4().hex[:6]}"
        await self.conn.session_update(
            session_id,
            acp.start_tool_call(
                call,
                f"Run {command}",
                kind="execute",
                status="in_progress",
                raw_input={"command": command},
            ),
        )
        made = await self.conn.create_terminal(
            session_id=session_id, command="sh", args=["-c", command], output_byte_limit=4096
        )
        await self.conn.session_update(
            session_id,
            acp.update_tool_call(call, content=[acp.tool_terminal_ref(made.terminal_id)]),
        )
        exited = await self.conn.wait_for_terminal_exit(
            session_id=session_id, terminal_id=made.terminal_id
        )
        out = await self.conn.terminal_output(session_id=session_id, terminal_id=made.terminal_id)
        await self.conn.session_update(session_id, acp.update_tool_call(call, status="completed"))
        await self.conn.release_terminal(session_id=session_id, terminal_id=made.terminal_id)
        await self._say(session_id, f"exit {exited.exit_code}: {out.output.strip()}")


async def main() -> None:
    if os.environ.get("FAKE_ACP_FAIL") == "1":
        print("no credentials for the fake agent", file=sys.stderr, flush=True)
        sys.exit(2)
    await acp.run_agent(FakeAgent(), use_unstable_protocol=True)


if __name__ == "__main__":
    asyncio.run(main())
