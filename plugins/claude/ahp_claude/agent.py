"""The live agent behind one chat: one Claude Code CLI, driven through ``ClaudeSDKClient``.

The SDK client enters a task group when it connects and must leave it from the
same task, so each agent runs its CLI in a task of its own (``_own``) that reads
every message the CLI sends and hands it on (``_on_message``): to the turn
running now (``turn.Turn``), a background subagent's turn (``subagents``), or a
turn the CLI begins by itself (``own_turns``). Turns talk to the CLI by writing
to it (``query``, ``interrupt``), which any task may do.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import anyio

from ahp_claude import client_tools, sdk, shell, tools
from ahp_claude.background import BackgroundTasks
from ahp_claude.customizations import Customizations
from ahp_claude.model_meta import ModelMeta
from ahp_claude.names import PERMISSION_MODES, Spawn, entry_uuid, to_path
from ahp_claude.own_turns import OwnTurns
from ahp_claude.owners import ChatOwners
from ahp_claude.records import SessionRecords, Sidecar
from ahp_claude.subagents import BackgroundSubagents
from ahp_claude.turn import SIGN_IN, ClaudeTurnFailed, Turn
from ahpcore.ports.backend import AgentRefused, ChatStart, TurnInput, TurnReporter

log = logging.getLogger(__name__)

EFFORTS = ("low", "medium", "high", "xhigh", "max")

#: How long a cancelled turn waits for the CLI to finish the turn it interrupted.
DRAIN_SECONDS = 5.0


async def one_message(message: dict[str, Any]) -> Any:
    """One message as the stream ``ClaudeSDKClient.query`` reads."""
    yield message


class AgentBackend(Sidecar, Protocol):
    """What an agent asks of the backend that started it (``backend.ClaudeBackend``).

    Named here rather than imported: the backend imports this module to start agents,
    and the two would otherwise depend on each other."""

    @property
    def state_dir(self) -> Path: ...

    @property
    def home(self) -> Path: ...

    @property
    def owners(self) -> ChatOwners: ...

    @property
    def server_info(self) -> dict[str, Any]: ...

    @property
    def sandbox(self) -> str: ...

    @property
    def launcher(self) -> tuple[str, dict[str, str]] | None: ...

    #: The live agent of each conversation, by its session id (a closed one leaves it).
    live: dict[str, ClaudeAgent]

    def environment(self, tokens: Mapping[str, str]) -> dict[str, str]: ...

    def cost_total(self, *session_ids: str) -> float: ...

    def last_model(self, *session_ids: str) -> str | None: ...

    def fork_point(self, source: str, *ids: str) -> str | None: ...

    def side_context(self, source: str, turn_id: str) -> str: ...

    async def ready_to_run(self) -> None: ...

    async def make_room(self, starting: ClaudeAgent) -> None: ...


class ClaudeAgent:
    def __init__(self, backend: AgentBackend, start: ChatStart, spawn: Spawn) -> None:
        self.backend = backend
        self.start = start
        self.session_id = start.backend_id
        self.records = SessionRecords(backend, self.session_id)
        self._spawn = spawn
        self._client: sdk.ClaudeSDKClient | None = None
        self._ready = anyio.Event()
        self._ended = anyio.Event()
        self._failure: str | None = None
        self._scope: anyio.CancelScope | None = None
        self._turn: Turn | None = None
        self._one_turn = anyio.Lock()
        self._started = False
        # A fork's source: its costs and model carry over (kept by Backend.start, which
        # has loaded the owners already: no file is read here).
        owner = backend.owners.get(self.session_id)
        forked = start.fork_from[0] if start.fork_from else None
        if forked is None and owner is not None and owner.fork_of is not None:
            forked = owner.fork_of[0]
        #: The CLI's running cost total when the last turn ended: it reports a session's
        #: total (carried across resumes), and a turn's usage is that turn's share.
        self._cost_total = backend.cost_total(self.session_id, *((forked,) if forked else ()))
        self._first_turn = True
        self.model: str | None = None
        self.stderr: list[str] = []
        self.shell = shell.ShellInit(backend.state_dir / "shell" / f"{self.session_id}.sh")
        self.closed = False
        #: Set when the transcript changed under the running CLI.
        self.stale = False
        #: Rules and folders "allow always" gave the CLI for this session only.
        self._session_rules: dict[str, list[str]] = {"allow": [], "deny": []}
        self._session_folders: list[str] = []
        #: When the CLI last said anything, or a turn ended (time.monotonic()).
        self.last_active = time.monotonic()
        #: What the CLI offers (commands, skills, plugins, MCP servers) and the switches on it.
        directories = start.working_directories
        self.custom = Customizations(
            start.report,
            backend.server_info,
            directory=Path(to_path(directories[0])) if directories else backend.home,
            home=backend.home,
            client=lambda: self._client,
            spawn=spawn,
        )
        self.background = BackgroundTasks(
            start.report,
            command_of=self._command_of,
            open_subagent=self._open_subagent,
            subagent_ended=self._subagent_ended,
            progress=self._task_progress,
        )
        self.subagents = BackgroundSubagents(
            self,
            start.report,
            self.records,
            backgrounded=self.background.backgrounded,
            current=lambda: self._turn,
        )
        self.own_turns = OwnTurns(
            self, start.report, self.records, summaries=self.background.take_summaries
        )
        self.model_meta = ModelMeta(start.report, backend.server_info.get("models") or ())
        if start.config.get("model"):
            self.model_meta.chosen(start.config["model"])
        else:
            # What the session last ran on, until its CLI says what it runs on now.
            kept = backend.last_model(self.session_id, *((forked,) if forked else ()))
            if kept is None:
                self.model_meta.chosen(None)
            else:
                self.model_meta.running(kept)

    # -- the CLI's life -----------------------------------------------------------
    def options(self) -> sdk.ClaudeAgentOptions:
        start = self.start
        directories = [to_path(d) for d in start.working_directories] or [str(self.backend.home)]
        config = start.config
        resume: dict[str, Any] = {}
        written = self.backend.transcript_path(self.session_id) is not None
        # Where a fork began is kept (Backend.start): a fork whose CLI wrote nothing before
        # it stopped forks again, rather than starting a conversation with no history.
        owner = self.backend.owners.get(self.session_id)
        fork_of = owner.fork_of if owner is not None and not written else None
        if fork_of is None and start.fork_from is not None:
            source, turn_id = start.fork_from
            fork_of = (
                source,
                self.backend.fork_point(
                    source, start.references.get(turn_id) or entry_uuid(source, turn_id), turn_id
                ),
            )
        if fork_of is not None:
            resume = {
                "resume": fork_of[0],
                "fork_session": True,
                "session_id": self.session_id,
                "resume_session_at": fork_of[1],
            }
        elif start.resume and written:
            resume = {"resume": self.session_id}
        else:
            resume = {"session_id": self.session_id}
        mcp = client_tools.server(
            start.client_tools,
            self._run_client_tool,
            start.server_tools.definitions() if start.server_tools is not None else (),
            self._run_server_tool,
        )
        self.shell.update(config.get(shell.KEY))
        effort = config.get("thinkingLevel") or config.get("effort")
        env = self.backend.environment(start.tokens)
        cli_path = None
        if self.backend.launcher is not None:
            # Through a guard that ends the CLI when the host ends, however it ends.
            cli_path, guarded = self.backend.launcher
            env = {**env, **guarded}
        # The host's word on its own tools goes where the CLI's instructions are: its
        # system prompt, said again to each CLI started for the session.
        told = start.server_tools.instructions() if start.server_tools is not None else ""
        return sdk.ClaudeAgentOptions(
            cli_path=cli_path,
            system_prompt=told or None,
            mcp_servers={tools.CLIENT_SERVER: mcp} if mcp is not None else {},
            cwd=directories[0],
            add_dirs=[*directories[1:], *self._session_folders],
            allowed_tools=list(self._session_rules["allow"]),
            disallowed_tools=list(self._session_rules["deny"]),
            env={**env, **self.shell.environment(env)},
            include_partial_messages=True,
            forward_subagent_text=True,  # a subagent's words go to its child chat
            can_use_tool=self._can_use_tool,
            permission_mode=config.get("permissionMode") or None,
            effort=effort if effort in EFFORTS else None,
            **self._sandbox(),
            model=config.get("model") or None,
            stderr=self._on_stderr,
            **resume,
        )

    def _sandbox(self) -> dict[str, Any]:
        preset = self.backend.sandbox
        # A session stored while a sandbox control existed may still say on: never run it
        # less sandboxed than it was, unless the preset says off on purpose.
        if preset == "default" and self.start.config.get("sandboxEnabled") is True:
            preset = "on"
        if preset == "default":
            return {}
        return {"sandbox": {"enabled": preset == "on"}}

    def _on_stderr(self, line: str) -> None:
        self.stderr = [*self.stderr[-20:], line]

    async def _ensure(self) -> sdk.ClaudeSDKClient:
        if self.closed:
            raise RuntimeError(f"the Claude agent for {self.session_id} is closed")
        if self.stale and self._started and not self._ended.is_set():
            # The transcript changed under the CLI (a truncation): start one that reads it anew.
            if self._scope is not None:
                self._scope.cancel()
            await self._ended.wait()
        self.stale = False
        if self._started and self._ended.is_set():
            # The CLI exited (or was killed): the next turn starts one that resumes the transcript.
            self._started = False
            self._ready, self._ended, self._failure = anyio.Event(), anyio.Event(), None
            self.start = replace(self.start, resume=True, fork_from=None)
        if not self._started:
            await self.backend.ready_to_run()
            # Within the host's limit of live CLIs: the longest idle of the others stops.
            await self.backend.make_room(self)
            self._started = True
            self.last_active = time.monotonic()
            self._spawn(self._own, name=f"claude {self.session_id}")
        await self._ready.wait()
        if self._client is None:
            raise ClaudeTurnFailed(self._failure or "Claude Code did not start")
        return self._client

    async def _own(self) -> None:
        client = sdk.ClaudeSDKClient(self.options())
        try:
            with anyio.CancelScope() as self._scope:
                try:
                    await client.connect()
                except Exception as exc:
                    self._failure = f"Claude Code did not start: {exc}"
                    log.warning("%s", self._failure)
                    return
                self._client = client
                await self.model_meta.connected(client, self.start.config.get("model") or None)
                self._ready.set()
                self._spawn(self.custom.connected, client, name="claude customizations")
                try:
                    async for message in client.receive_messages():
                        self._on_message(message)
                except Exception as exc:
                    self._failure = f"Claude Code stopped: {exc}"
                else:
                    self._failure = "Claude Code exited"
        finally:
            self._client = None
            self._ready.set()
            self._ended.set()
            if self._turn is not None:
                self._turn.fail(self._failure or "Claude Code exited")
            if not self.closed:  # closing, the chat ends them as cancelled
                self.subagents.all_ended()
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                try:
                    await client.disconnect()
                except Exception:  # the process may be gone already
                    log.debug("disconnect after the CLI ended", exc_info=True)

    @property
    def client(self) -> sdk.ClaudeSDKClient | None:
        """The SDK client while a CLI runs."""
        return self._client

    @property
    def pid(self) -> int | None:
        """The CLI's process id while it runs."""
        transport = getattr(self._client, "_transport", None)
        process = getattr(transport, "_process", None)
        return getattr(process, "pid", None)

    @property
    def cli_running(self) -> bool:
        """A CLI runs (or starts) for this chat."""
        return self._started and not self._ended.is_set()

    def _quiet(self) -> bool:
        """Nothing waits on the CLI: no turn (the host's or its own), no background work."""
        running = self._turn
        return (
            not self.closed
            and self._client is not None
            and self.cli_running
            and (running is None or running.done.is_set())
            and not self.own_turns.holding
            and not self.background.busy()
            and not self.subagents.running
        )

    def idle_since(self) -> float | None:
        """When this chat's CLI last did anything, while it runs and does nothing; else None."""
        if self._one_turn.locked() or not self._quiet():
            return None
        return self.last_active

    async def rest(self) -> bool:
        """Stop the CLI while it is idle, to give its memory back; the next turn starts one
        that resumes the transcript (``_ensure``). False when it was not idle."""
        if self.idle_since() is None:
            return False
        async with self._one_turn:  # a turn arriving now waits, then starts a CLI again
            if not self._quiet() or self._scope is None:
                return False
            log.info("stopping the idle Claude Code CLI of %s", self.session_id)
            self._scope.cancel()
            with anyio.move_on_after(DRAIN_SECONDS * 2):
                await self._ended.wait()
        return True

    async def close(self) -> None:
        self.closed = True
        self.shell.remove()
        self.backend.live.pop(self.session_id, None)
        if self._scope is not None:
            self._scope.cancel()
            with anyio.move_on_after(10):
                await self._ended.wait()

    # -- turns ----------------------------------------------------------------------
    async def run_turn(self, turn: TurnInput, report: TurnReporter) -> None:
        began = time.monotonic()  # the host's clock for the turn starts about now too
        # One turn at a time: a turn started while a cancelled one drains waits for it.
        async with self._one_turn:
            await self._run_turn(turn, report, began)

    async def _run_turn(self, turn: TurnInput, report: TurnReporter, began: float) -> None:
        offered = sorted(str(t.get("name")) for t in self.start.client_tools)
        if sorted(str(t.get("name")) for t in turn.client_tools) != offered:
            # The CLI learns its MCP tools when it starts: new client tools need a new CLI.
            self.start = replace(self.start, client_tools=tuple(turn.client_tools))
            self.stale = self._started
        picked = self._picked(turn.message)
        if picked:
            await self.configure(picked)
        client = await self._ensure()
        running = Turn(report, self)
        self._turn = running
        message = self._user_message(turn)
        running.entry = message["uuid"]
        self.background.take_summaries()  # what ended is this turn's to hear, not a turn's text
        for held in self.own_turns.host_turn(running, message["uuid"]):
            self._on_message(held)
        report.reference(message["uuid"])
        self.records.turn(message["uuid"], turn.turn_id)
        self.records.turn_open(message["uuid"], True)
        cancelled = False
        took: float | None = None
        try:
            await client.query(one_message(message))
            await running.done.wait()
        except anyio.get_cancelled_exc_class():
            # A cancelled turn ends for its chat now, not once the CLI has drained it.
            cancelled, running.live, took = True, False, time.monotonic() - began
            with anyio.CancelScope(shield=True):
                await self._interrupt(client, running)
            raise
        finally:
            self._first_turn = False
            # How long the turn took (the transcript's timestamps leave out the CLI's start),
            # and what it failed with, for the turn rebuilt from the transcript later.
            took = time.monotonic() - began if took is None else took
            ended: dict[str, Any] = {"duration": int(took * 1000)}
            if running.error is not None and not cancelled:
                ended["error"] = running.error
            self.records.turn_end(message["uuid"], ended)
            # Seen to its end, whichever: only a turn the host never saw end stays open.
            self.records.turn_open(message["uuid"], False)
            self.last_active = time.monotonic()
        if running.error is not None:
            raise ClaudeTurnFailed(running.error)

    async def interrupt(self, running: Turn) -> None:
        """Stop the CLI's turn ``running`` (one it began by itself: ``own_turns``) and wait,
        briefly, until it says the turn ended; with no CLI running there is none to stop."""
        client = self._client
        if client is not None:
            await self._interrupt(client, running)

    async def _interrupt(self, client: sdk.ClaudeSDKClient, running: Turn) -> None:
        """Stop the CLI's turn and wait until it says the turn ended, so the next starts clean."""
        with anyio.move_on_after(DRAIN_SECONDS):
            try:
                await client.interrupt()
            except Exception:
                log.debug("interrupt failed", exc_info=True)
                return
            await running.done.wait()

    def _picked(self, message: Mapping[str, Any]) -> dict[str, Any]:
        """What a message's model selection (``Message.model``) changes in the session's config.

        Clients pick the model, and its thinking level from the model's configSchema, with
        each message; only a change is passed on, so an unchanged pick costs nothing.
        """
        selection = message.get("model")
        if not isinstance(selection, Mapping) or not selection.get("id"):
            return {}
        config = self.start.config
        picked: dict[str, Any] = {}
        if selection["id"] != config.get("model"):
            picked["model"] = str(selection["id"])
        level = (selection.get("config") or {}).get("thinkingLevel")
        if level in EFFORTS and level != (config.get("thinkingLevel") or config.get("effort")):
            picked["thinkingLevel"] = level
        return picked

    def _user_message(self, turn: TurnInput) -> dict[str, Any]:
        text = turn.text
        if self._first_turn and self.start.side_of is not None:
            text = f"{self.backend.side_context(*self.start.side_of)}\n\n{text}"
        return {
            "type": "user",
            "message": {"role": "user", "content": text},
            "parent_tool_use_id": None,
            "session_id": self.session_id,
            "uuid": turn.uuid or entry_uuid(self.session_id, turn.turn_id),
        }

    def steer(self, message: Mapping[str, Any]) -> bool:
        """Send a message into the running turn; the CLI takes it at its next step."""
        client, running = self._client, self._turn
        if client is None or running is None or running.done.is_set():
            return False
        steering: dict[str, Any] = {
            "type": "user",
            "message": {"role": "user", "content": str(message.get("text", ""))},
            "parent_tool_use_id": None,
            "session_id": self.session_id,
            "uuid": str(uuid.uuid4()),
        }
        running.steering.add(steering["uuid"])
        self._spawn(client.query, one_message(steering), name="claude steering")
        return True

    async def configure(self, values: Mapping[str, Any]) -> None:
        """Permission mode and model change in the running CLI; the next start uses them too."""
        mode = values.get("permissionMode")
        if mode is not None and mode not in PERMISSION_MODES:
            raise AgentRefused(f"Claude has no permission mode {mode!r}")
        self.start = replace(self.start, config={**self.start.config, **values})
        if shell.KEY in values:
            self.shell.update(values[shell.KEY])
        if {"thinkingLevel", "effort"} & set(values):
            # The CLI fixes its effort when it starts: the next turn starts one that resumes.
            self.stale = self._started
        client = self._client
        if client is None:
            return
        if mode is not None:
            await client.set_permission_mode(mode)
        if "model" in values:
            await client.set_model(values["model"] or None)
            self.model_meta.chosen(values["model"] or None)

    async def toggle(self, customization_id: str, enabled: bool) -> None:
        await self.custom.toggle(customization_id, enabled)

    async def mcp_start(self, customization_id: str) -> None:
        await self.custom.mcp(customization_id, True)

    async def mcp_stop(self, customization_id: str) -> None:
        await self.custom.mcp(customization_id, False)

    # -- what the CLI says --------------------------------------------------------------
    def _on_message(self, message: Any) -> None:
        self.last_active = time.monotonic()
        running = self._turn
        if self.background.on_message(message):
            return
        if self.subagents.take(message):
            return
        if (running is None or running.done.is_set()) and self.own_turns.take(message):
            return  # the CLI began a turn of its own
        if isinstance(message, sdk.ResultMessage) and message.num_turns == 0 and self._client:
            # A local command ran (it may have been /model): ask what the CLI runs on now.
            self._spawn(self.model_meta.ask, self._client, name="claude model")
        if isinstance(message, sdk.SystemMessage):
            if message.subtype == "init":
                self.model = message.data.get("model") or self.model
                self.custom.init(message.data)
                self.model_meta.running(self.model)
            elif message.subtype == "compact_boundary" and running is not None and running.live:
                running.compacted(message.data.get("compact_metadata") or {})
            elif (
                message.subtype == "api_retry"
                and message.data.get("error") == "authentication_failed"
                and running is not None
                and running.live
            ):
                # The CLI would retry a key the API refused for minutes: stop and say so.
                running.error, running.live = SIGN_IN, False
                if self._client is not None:
                    self._spawn(self._client.interrupt, name="claude interrupt")
            return
        if running is None or running.done.is_set():
            return
        if isinstance(message, sdk.ResultMessage):
            running.result(message)
            return
        if not running.live:
            return
        parent = getattr(message, "parent_tool_use_id", None)
        stream = running.main if parent is None else running.child(parent)
        if stream is not None:
            running.translate(stream, message)

    def follow(self, report: TurnReporter, held: Sequence[Any]) -> Turn:
        """A turn the CLI began by itself got its go (``own_turns``): the CLI's messages go
        to it from now on, those held until the go first."""
        running = Turn(report, self)
        self._turn = running
        for message in held:
            self._on_message(message)
        if self._ended.is_set():
            # The CLI ended while the turn waited for its go: nothing more will come.
            running.fail(self._failure or "Claude Code exited")
        return running

    def cost_of(self, total: float | None) -> float | None:
        """A turn's share of the running cost ``total`` the CLI reported as it ended."""
        if total is None:
            return None
        before, self._cost_total = self._cost_total, float(total)
        # A total below the last one means the CLI counted anew (a fork that did not carry it).
        return round(total - before, 10) if total >= before else float(total)

    # -- background work ------------------------------------------------------------------
    def _task_progress(self, call_id: str, line: str) -> None:
        """What a subagent does now: a line on its running call (a background one's chat
        shows it as its activity instead: its call has completed)."""
        if self.subagents.progress(call_id, line):
            return
        if self._turn is not None:
            self._turn.progress(call_id, line)

    def _subagent_ended(self, call_id: str, success: bool) -> None:
        self.subagents.ended(call_id, success)

    def _command_of(self, call_id: str) -> str | None:
        """The command line of the Bash call ``call_id`` of the running turn."""
        call = self._turn.calls.get(call_id) if self._turn is not None else None
        command = call.input.get("command") if call is not None else None
        return str(command) if command else None

    def _open_subagent(self, call_id: str) -> None:
        running = self._turn
        if running is not None and not running.done.is_set():
            running.child(call_id)

    # -- what the CLI asks ---------------------------------------------------------------
    async def _run_client_tool(self, name: str, arguments: dict[str, Any]) -> Mapping[str, Any]:
        running = self._turn
        if running is None or running.done.is_set():
            return {"success": False, "error": {"message": "no turn is running"}}
        return await running.client_tool(name, arguments)

    async def _run_server_tool(self, name: str, arguments: dict[str, Any]) -> Mapping[str, Any]:
        """One of the host's own tools; the turn reports the call from the CLI's stream."""
        offered = self.start.server_tools
        if offered is None:
            return {"success": False, "error": {"message": "this host offers no server tools"}}
        answer = await offered.call(name, arguments)
        return {"success": answer.success, "content": [{"type": "text", "text": answer.text}]}

    async def _can_use_tool(
        self, name: str, tool_input: dict[str, Any], context: sdk.ToolPermissionContext
    ) -> sdk.PermissionResultAllow | sdk.PermissionResultDeny:
        call_id = context.tool_use_id or ""
        running = await self.subagents.turn_of(call_id) or self._turn
        if running is None or running.done.is_set() or not running.live:
            return sdk.PermissionResultDeny(message="The turn has ended.", interrupt=True)
        decided = await running.approve(call_id, name, tool_input, context)
        if isinstance(decided, sdk.PermissionResultAllow) and decided.updated_permissions:
            self._keep_for_next_cli(decided.updated_permissions)  # "allow always" was picked
        return decided

    def _keep_for_next_cli(self, updates: Any) -> None:
        """What "allow always" gave the CLI for this session only (a mode, rules, folders)
        dies with it: kept here, a CLI started again (after an idle stop) has it too. The
        CLI writes the other destinations to its settings files itself."""
        for update in updates:
            if getattr(update, "destination", None) != "session":
                continue
            if update.type == "setMode" and update.mode:
                self.start = replace(
                    self.start, config={**self.start.config, "permissionMode": update.mode}
                )
            elif update.type == "addRules" and update.behavior in ("allow", "deny"):
                for rule in update.rules or ():
                    said = rule.tool_name + (f"({rule.rule_content})" if rule.rule_content else "")
                    self._session_rules[update.behavior].append(said)
            elif update.type == "addDirectories":
                self._session_folders.extend(update.directories or ())
