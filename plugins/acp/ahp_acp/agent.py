"""The live agent behind one chat: one ACP process, one ACP session.

``session/update`` notifications go to the turn running now (text, thinking,
tool calls, plans) or to the session (commands, modes, config options, title,
context usage). A turn the host cancels sends ``session/cancel`` and waits a
while for the agent's ``cancelled`` answer, so the next prompt starts clean.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any, Protocol
from urllib.parse import quote

import anyio
from acp import RequestError, schema

from ahp_acp.config import AgentSpec
from ahp_acp.process import AgentFailed, AgentProcess
from ahp_acp.records import ChatRecord, Records, TurnNote
from ahp_acp.updates import TurnView
from ahpcore.ports.backend import (
    AgentRefused,
    ChatStart,
    Cost,
    SessionReporter,
    TranscriptReader,
    TurnInput,
    TurnReporter,
)


class Owner(Protocol):
    """What a chat needs of the backend that started it (``AcpBackend``)."""

    spec: AgentSpec
    records: Records
    live: dict[str, AcpChat]

    @property
    def can_load(self) -> bool: ...

    def learn(
        self, modes: Sequence[schema.SessionMode], mode: str | None, options: Sequence[Any]
    ) -> None: ...


log = logging.getLogger(__name__)

#: How long a cancelled turn waits for the agent to answer ``cancelled``.
DRAIN_SECONDS = 10.0
MODE_KEY = "mode"
MODEL_META = "ahp.model"
COMMANDS_ID = "acp:commands"


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def prompt_blocks(message: Mapping[str, Any]) -> list[Any]:
    """A protocol ``Message`` as ACP content blocks: its text, then what it attaches."""
    blocks: list[Any] = [schema.TextContentBlock(type="text", text=str(message.get("text", "")))]
    for attachment in message.get("attachments") or ():
        kind = attachment.get("type")
        label = str(attachment.get("label") or "")
        if kind == "resource" and attachment.get("uri"):
            blocks.append(
                schema.ResourceContentBlock(
                    type="resource_link",
                    uri=str(attachment["uri"]),
                    name=label or str(attachment["uri"]),
                    mime_type=attachment.get("contentType"),
                )
            )
        elif kind == "simple" and attachment.get("modelRepresentation"):
            blocks.append(
                schema.TextContentBlock(type="text", text=str(attachment["modelRepresentation"]))
            )
    return blocks


def commands_customization(commands: Sequence[schema.AvailableCommand]) -> list[dict[str, Any]]:
    """The agent's slash commands as one container of prompts, for the slash menu."""
    children = []
    for command in commands:
        about = f"# /{command.name}\n\n{command.description}\n"
        child: dict[str, Any] = {
            "id": f"command:{command.name}",
            "uri": "data:text/markdown;charset=utf-8," + quote(about, safe=""),
            "name": command.name,
            "type": "prompt",
        }
        if command.description:
            child["description"] = command.description
        hint = command.input.root.hint if command.input is not None else None
        if hint:
            child["_meta"] = {"ahp.argumentHint": hint}
        children.append(child)
    about = "Commands the agent offers; type / to use one.\n"
    return [
        {
            "id": COMMANDS_ID,
            "uri": "data:text/markdown;charset=utf-8," + quote(about, safe=""),
            "name": "Commands",
            "type": "directory",
            "enabled": True,
            "contents": "prompt",
            "writable": False,
            "load": {"kind": "loaded"},
            "children": children,
        }
    ]


def option_values(option: Any) -> list[tuple[str, str]]:
    """(value, name) of a select option's choices, flat or grouped."""
    found: list[tuple[str, str]] = []
    for item in getattr(option, "options", None) or ():
        if isinstance(item, schema.SessionConfigSelectOption):
            found.append((item.value, item.name))
        else:
            found.extend((inner.value, inner.name) for inner in item.options)
    return found


class AcpChat:
    """One chat's ACP session in its own agent process."""

    def __init__(
        self,
        backend: Owner,
        start: ChatStart,
        process: AgentProcess,
        record: ChatRecord | None = None,
    ) -> None:
        self.backend = backend
        self.start = start
        self.process = process
        self.record = record
        self.session: SessionReporter | None = start.report
        self.view: TurnView | None = None
        #: Where a ``session/load``'s replayed history goes while it loads (None: live).
        self.replay: Replay | None = None
        self.modes: list[schema.SessionMode] = []
        self.mode: str | None = None
        self.options: dict[str, Any] = {}
        self.context: tuple[int, int, schema.Cost | None] | None = None
        self.closed = False

    @property
    def acp_id(self) -> str:
        return self.record.acp_session_id if self.record is not None else ""

    # -- opening ------------------------------------------------------------------------
    async def open(self, cwd: str) -> None:
        """Start a new ACP session, or load the recorded one when the host reopens the chat."""
        conn = self.process.conn
        assert conn is not None
        start = self.start
        if start.resume and self.record is not None:
            if not self.backend.can_load:
                raise AgentFailed(
                    f"{self.backend.spec.title} cannot load a past session (it does not "
                    "advertise loadSession), so this chat cannot go on after a restart"
                )
            # The history was rebuilt from an earlier load: this one's replay is dropped.
            self.replay = Replay(None, [], start.backend_id)
            try:
                loaded = await conn.load_session(
                    cwd=cwd, session_id=self.record.acp_session_id, mcp_servers=[]
                )
            finally:
                await settle()
                self.replay = None
            self._took(loaded.modes if loaded else None, loaded.config_options if loaded else None)
        else:
            turns: list[TurnNote] = []
            if start.fork_from is not None:
                source, turns = self._fork_source(*start.fork_from)
                made: Any = await conn.fork_session(
                    session_id=source.acp_session_id, cwd=cwd, mcp_servers=[]
                )
            else:
                made = await conn.new_session(cwd=cwd, mcp_servers=[])
            now = now_iso()
            self.record = ChatRecord(
                backend_id=start.backend_id,
                session_id=start.session_id,
                acp_session_id=made.session_id,
                created_at=now,
                modified_at=now,
                cwd=cwd,
                working_directories=list(start.working_directories),
                turns=turns,
            )
            self.backend.records.chats[start.backend_id] = self.record
            self._took(made.modes, made.config_options)
            await self.backend.records.save()
        await self._apply_config(start.config)

    def _fork_source(self, backend_id: str, turn_id: str) -> tuple[ChatRecord, list[TurnNote]]:
        """The chat a fork continues, and its turns up to the one forked from.

        ``session/fork`` copies a whole conversation: the agent would remember every
        turn after the one named, so only a fork from the last turn is what was asked.
        """
        title = self.backend.spec.title
        source = self.backend.records.chats.get(backend_id)
        if source is None:
            raise AgentFailed(f"{title}: this host keeps no record of the chat to fork")
        ids = [turn.id for turn in source.turns]
        if turn_id not in ids:
            raise AgentFailed(f"{title}: the chat to fork has no turn {turn_id!r}")
        if ids[-1] != turn_id:
            raise AgentFailed(
                f"{title} forks a whole conversation (session/fork), so a chat can be "
                f"forked from its last turn only, not from {turn_id!r}"
            )
        return source, [TurnNote(**asdict(turn)) for turn in source.turns]

    def _took(self, modes: schema.SessionModeState | None, options: Sequence[Any] | None) -> None:
        """What a new or loaded session offers: its modes and config options."""
        if modes is not None:
            self.modes = list(modes.available_modes)
            self.mode = modes.current_mode_id
        if options is not None:
            self.options = {option.id: option for option in options}
        self.backend.learn(self.modes, self.mode, list(self.options.values()))
        self._say_model()

    async def _apply_config(self, values: Mapping[str, Any]) -> None:
        """The session's config as the client made it, for what differs from the agent's."""
        wanted = {k: v for k, v in values.items() if v is not None and v != self._current(k)}
        if wanted:
            try:
                await self.configure(wanted)
            except AgentRefused as exc:
                log.info("%s: starting with the agent's own settings: %s", self.start.chat_uri, exc)

    def _current(self, key: str) -> Any:
        if key == MODE_KEY:
            return self.mode
        option = self.options.get(key)
        return getattr(option, "current_value", None)

    def _model_option(self) -> Any:
        return next(
            (o for o in self.options.values() if getattr(o, "category", None) == "model"), None
        )

    def _say_model(self) -> None:
        option = self._model_option()
        if option is not None and self.session is not None:
            self.session.meta({MODEL_META: str(option.current_value)})

    # -- what the agent says -------------------------------------------------------------
    def session_update(self, session_id: str, update: Any) -> None:
        if session_id != self.acp_id and self.acp_id:
            return
        if self.replay is not None:
            self.replay.update(update)
            return
        if self._session_level(update):
            return
        view = self.view
        if view is None or not view.update(update):
            log.debug("%s: %s outside a turn, dropped", self.start.chat_uri, type(update).__name__)

    def _session_level(self, update: Any) -> bool:
        session = self.session
        if isinstance(update, schema.AvailableCommandsUpdate):
            if session is not None:
                session.customizations(commands_customization(update.available_commands))
        elif isinstance(update, schema.CurrentModeUpdate):
            self.mode = update.current_mode_id
            if session is not None:
                session.config({MODE_KEY: update.current_mode_id})
        elif isinstance(update, schema.ConfigOptionUpdate):
            self.options = {option.id: option for option in update.config_options}
            self.backend.learn(self.modes, self.mode, list(self.options.values()))
            if session is not None:
                session.config({o.id: o.current_value for o in update.config_options})
            self._say_model()
        elif isinstance(update, schema.SessionInfoUpdate):
            if update.title and session is not None:
                session.title(update.title)
            if update.title and self.record is not None:
                self.record.title = update.title
                self._save_soon()
        elif isinstance(update, schema.UsageUpdate):
            self.context = (update.used, update.size, update.cost)
        elif isinstance(update, schema.UserMessageChunk):
            pass  # the prompt this host sent, said back
        else:
            return False
        return True

    def _save_soon(self) -> None:
        if self.session is not None:
            self.session.start_soon(self.backend.records.save)

    async def permission(
        self, tool_call: schema.ToolCallUpdate, options: Sequence[schema.PermissionOption]
    ) -> str | None:
        view = self.view
        if view is None or view.ended:
            return None  # nobody to ask outside a turn: cancelled, as ACP says for a dead turn
        return await view.permission(tool_call, options, self.process.roots)

    # -- turns --------------------------------------------------------------------------
    async def run_turn(self, turn: TurnInput, report: TurnReporter) -> None:
        process, record = self.process, self.record
        if self.closed or process.conn is None or not process.running or record is None:
            raise AgentFailed(process.why(f"{self.backend.spec.title} is not running"))
        conn = process.conn
        note = TurnNote(turn.turn_id, now_iso())
        record.turns.append(note)
        record.modified_at = note.started_at
        if not record.title and turn.text.strip():
            record.title = turn.text.strip().splitlines()[0][:80]
        await self.backend.records.save()
        view = self.view = TurnView(report, terminal_content=self._terminal_content)
        began = time.monotonic()
        try:
            await self._pick_model(turn.message)
            asked = asyncio.ensure_future(
                conn.prompt(session_id=record.acp_session_id, prompt=prompt_blocks(turn.message))
            )
            try:
                response = await asyncio.shield(asked)
            except asyncio.CancelledError:
                with anyio.CancelScope(shield=True):
                    await self._stop(asked)
                raise
            except (ConnectionError, RequestError) as exc:
                if isinstance(exc, RequestError):
                    raise AgentFailed(
                        f"the agent failed the prompt: {exc} {exc.data or ''}".strip()
                    ) from None
                raise await process.failure(exc) from None
            view.finish()
            self._usage(report, response.usage)
            if response.stop_reason == "refusal":
                raise AgentFailed(f"{self.backend.spec.title} refused to go on")
            if response.stop_reason in ("max_tokens", "max_turn_requests"):
                report.notification(
                    f"{self.backend.spec.title} stopped: {response.stop_reason.replace('_', ' ')}",
                    meta={"ahp.stopReason": response.stop_reason},
                )
            note.state = "complete"
        except Exception as exc:
            note.state, note.error = "error", str(exc)
            view.finish()
            raise
        finally:
            if self.view is view:
                self.view = None
            note.duration_ms = int((time.monotonic() - began) * 1000)
            record.modified_at = now_iso()
            await self.backend.records.save()

    async def _stop(self, asked: asyncio.Future[Any]) -> None:
        """The host cancelled the turn: tell the agent, and give it a while to wind down."""
        view = self.view
        conn = self.process.conn
        if conn is not None and self.record is not None:
            with contextlib.suppress(Exception):
                await conn.cancel(session_id=self.record.acp_session_id)
        with anyio.move_on_after(DRAIN_SECONDS):
            with contextlib.suppress(Exception):
                await asked
        if not asked.done():
            log.info("%s: the agent did not answer a cancel in time", self.start.chat_uri)
            asked.cancel()
        if view is not None:
            view.finish()

    async def _pick_model(self, message: Mapping[str, Any]) -> None:
        """A message's model selection, passed on when it differs from the agent's."""
        selection = message.get("model")
        option = self._model_option()
        if not isinstance(selection, Mapping) or option is None:
            return
        wanted = str(selection.get("id") or "")
        if wanted and wanted != option.current_value and wanted in dict(option_values(option)):
            await self.configure({option.id: wanted})

    def _usage(self, report: TurnReporter, usage: schema.Usage | None) -> None:
        context = self.context
        if usage is None and context is None:
            return
        option = self._model_option()
        cost = context[2] if context is not None else None
        report.usage(
            input_tokens=usage.input_tokens if usage else 0,
            output_tokens=usage.output_tokens if usage else 0,
            model=str(option.current_value) if option is not None else None,
            cache_read_tokens=usage.cached_read_tokens if usage else None,
            cache_write_tokens=usage.cached_write_tokens if usage else None,
            reasoning_tokens=usage.thought_tokens if usage else None,
            context_used=context[0] if context else None,
            context_size=context[1] if context else None,
            cost=Cost(cost.amount, cost.currency) if cost is not None else None,
        )

    def _terminal_content(self, terminal_id: str) -> dict[str, Any] | None:
        terminal = self.process.terminals.running.get(terminal_id)
        return terminal.content() if terminal is not None else None

    # -- what clients change --------------------------------------------------------------
    async def configure(self, values: Mapping[str, Any]) -> None:
        conn, record = self.process.conn, self.record
        if conn is None or record is None:
            raise AgentRefused(f"{self.backend.spec.title} is not running")
        for key, value in values.items():
            try:
                if key == MODE_KEY:
                    if value not in {m.id for m in self.modes}:
                        raise AgentRefused(f"{self.backend.spec.title} has no mode {value!r}")
                    await conn.set_session_mode(
                        session_id=record.acp_session_id, mode_id=str(value)
                    )
                    self.mode = str(value)
                elif key in self.options:
                    answer = await conn.set_config_option(
                        config_id=key, session_id=record.acp_session_id, value=value
                    )
                    if answer is not None and answer.config_options:
                        self.options = {o.id: o for o in answer.config_options}
                    elif hasattr(self.options[key], "current_value"):
                        self.options[key].current_value = value
                    if getattr(self.options.get(key), "category", None) == "model":
                        self._say_model()
            except RequestError as exc:
                raise AgentRefused(
                    f"{self.backend.spec.title} would not set {key} to {value!r}: {exc}"
                ) from None
            except ConnectionError as exc:
                raise AgentRefused(str(await self.process.failure(exc))) from None

    async def close(self) -> None:
        self.closed = True
        view, self.view = self.view, None
        if view is not None:
            view.ended = True
        if self.backend.live.get(self.start.backend_id) is self:
            del self.backend.live[self.start.backend_id]
        await self.process.close()


async def settle() -> None:
    """Let the notifications that arrived before an answer be handled before going on.

    The SDK handles each notification in a task of its own, started in the order
    they arrived; a few turns of the loop let those started before the answer end.
    """
    for _ in range(5):
        await asyncio.sleep(0)


class Replay:
    """A loaded session's history, told to a ``TranscriptReader`` one turn at a time.

    A user message chunk begins a turn (the chunks after it, until the agent
    speaks, are the same message); each turn takes the id, start and ending this
    host noted for it live, in order, and an id derived from the chat otherwise.
    ``reader`` None drops everything (a load whose history was read already).
    """

    def __init__(self, reader: TranscriptReader | None, notes: Sequence[TurnNote], backend_id: str):
        self.reader = reader
        self.notes = list(notes)
        self.backend_id = backend_id
        self.count = 0
        self.asking: list[str] | None = None
        self.view: TurnView | None = None
        self.note: TurnNote | None = None
        self.title: str | None = None

    def update(self, update: Any) -> None:
        if self.reader is None:
            return
        if isinstance(update, schema.SessionInfoUpdate):
            self.title = update.title or self.title
            return
        if isinstance(update, schema.UserMessageChunk):
            if self.asking is None:
                self._end()
                self.asking = []
            text = getattr(update.content, "text", None)
            if text:
                self.asking.append(text)
            return
        if self.view is None:
            self._begin()
        assert self.view is not None
        self.view.update(update)  # what is not a turn's (modes, commands) is not history

    def _begin(self) -> None:
        assert self.reader is not None
        note = self.notes[self.count] if self.count < len(self.notes) else None
        turn_id = (
            note.id
            if note
            else str(uuid.uuid5(uuid.NAMESPACE_URL, f"acp:{self.backend_id}/{self.count}"))
        )
        self.count += 1
        message = {"text": "".join(self.asking or ()), "origin": {"kind": "user"}}
        self.asking = None
        report = self.reader.turn(turn_id, message, started_at=note.started_at if note else None)
        self.view = TurnView(report)
        self.note = note

    def _end(self) -> None:
        if self.view is None:
            return
        assert self.reader is not None
        self.view.finish()
        note = self.note
        state = note.state if note is not None else "complete"
        self.reader.end_turn(
            state=state if state in ("complete", "cancelled", "error") else "complete",  # type: ignore[arg-type]
            duration_ms=note.duration_ms if note is not None else 0,
            error=note.error if note is not None and state == "error" else None,
        )
        self.view = None
        self.note = None

    def finish(self) -> None:
        if self.reader is None:
            return
        if self.asking is not None:
            self._begin()  # a question the agent never answered
        self._end()
