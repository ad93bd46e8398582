"""One configured ACP agent as one provider: its agent info, its chats, its catalogue.

At attach the agent is started once and asked ``initialize`` (a probe): what it
says of itself and whether it can ``session/load`` shape the agent info and the
backend's abilities. An agent that cannot start is still listed, its error in
its description, and each session asked of it is refused with the reason; the
host goes on serving the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from acp import schema

from ahp_acp.agent import MODE_KEY, AcpChat, Replay, settle
from ahp_acp.config import AgentSpec
from ahp_acp.process import AgentFailed, AgentProcess, describe
from ahp_acp.records import Records
from ahp_acp.terminals import HostOpener
from ahpcore.api import HostTerminal, PluginHost, path_of_file_uri, sorted_pausing
from ahpcore.ports.backend import (
    Abilities,
    BackendNotifier,
    CataloguePage,
    CatalogueRow,
    ChatStart,
    TranscriptReader,
)

log = logging.getLogger(__name__)


def _host_terminals(host: PluginHost, chat: str) -> HostOpener:
    """Opens the chat's agent terminals as host terminals, claimed by the chat."""

    async def open_terminal(
        command: str, args: Sequence[str], env: Mapping[str, str], folder: str
    ) -> HostTerminal:
        return await host.open_terminal(chat, command, args, cwd=folder, env=env)

    return open_terminal


def roots_of(working_directories: Sequence[str]) -> list[str]:
    """The local folders among a session's working directories (file URIs)."""
    return [p for p in map(path_of_file_uri, working_directories) if p]


class AcpBackend:
    """The provider ``spec.name``: each chat runs in an agent process of its own."""

    def __init__(
        self,
        spec: AgentSpec,
        state_dir: Path | None,
        *,
        probe: bool = True,
        host: PluginHost | None = None,
    ) -> None:
        self.spec = spec
        #: Runs the agents' terminals as host terminals (None: bare processes).
        self.host = host
        self.provider = spec.name
        self.records = Records(state_dir / "sessions.json" if state_dir is not None else None)
        self.live: dict[str, AcpChat] = {}
        self.notifier: BackendNotifier | None = None
        #: What the agent said to ``initialize`` (the probe's, or the latest chat's).
        self.info: schema.InitializeResponse | None = None
        #: Why the probe could not start the agent, if it could not.
        self.error: str | None = None
        self._probe = probe
        self._probing: asyncio.Task[None] | None = None
        self.abilities = Abilities()
        self._able()

    # -- what it can do -------------------------------------------------------------------
    @property
    def can_load(self) -> bool:
        if self.info is not None and self.info.agent_capabilities is not None:
            return bool(self.info.agent_capabilities.load_session)
        return bool(self.records.learned.get("loadSession"))

    @property
    def can_fork(self) -> bool:
        """Whether the agent advertises ``session/fork`` (an unstable part of ACP)."""
        info = self.info
        if info is not None and info.agent_capabilities is not None:
            sessions = info.agent_capabilities.session_capabilities
            return sessions is not None and sessions.fork is not None
        return bool(self.records.learned.get("fork"))

    def _able(self) -> None:
        load = self.can_load
        # Past sessions are reopened through session/load alone: without it none are listed.
        self.abilities = Abilities(
            resume=load, list_sessions=load, delete=True, configure=True, fork=self.can_fork
        )

    # -- the probe ------------------------------------------------------------------------
    def attach(self, notifier: BackendNotifier) -> None:
        self.notifier = notifier
        if self._probe:
            # The host's own tasks are not running yet: a task of the loop's, cancelled at stop.
            self._probing = asyncio.get_running_loop().create_task(self._run_probe())

    async def stop(self) -> None:
        """The host stops: no probe goes on, and every chat's agent process ends."""
        probing = self._probing
        if probing is not None and not probing.done():
            probing.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await probing
        for chat in list(self.live.values()):
            with contextlib.suppress(Exception):
                await chat.close()

    async def _run_probe(self) -> None:
        process = AgentProcess(self.spec, [])
        try:
            try:
                self._initialized(await process.start(None))
                self.error = None
            except AgentFailed as exc:
                self.error = str(exc)
                log.warning("ACP agent %s: %s", self.spec.name, exc)
            if self.notifier is not None:
                self.notifier.agents_changed()
        finally:
            # Even when the host stops mid-probe, the agent goes before the probe ends.
            closing = asyncio.ensure_future(process.close())
            try:
                await asyncio.shield(closing)
            except asyncio.CancelledError:
                await asyncio.wait([closing])
                raise

    def _initialized(self, info: schema.InitializeResponse) -> None:
        self.info = info
        load = bool(info.agent_capabilities and info.agent_capabilities.load_session)
        self.records.learned["loadSession"] = load
        self.records.learned["fork"] = self.can_fork
        self._able()

    def learn(
        self, modes: Sequence[schema.SessionMode], mode: str | None, options: Sequence[Any]
    ) -> None:
        """What a session offered (modes, options, models): listed from now on, kept."""
        learned = {
            "modes": [{"id": m.id, "name": m.name} for m in modes],
            "mode": mode,
            "options": [
                o.model_dump(mode="json", by_alias=True, exclude_none=True) for o in options
            ],
        }
        old = {k: self.records.learned.get(k) for k in learned}
        if old == learned:
            return
        self.records.learned.update(learned)
        if self.notifier is not None:
            self.notifier.agents_changed()

    # -- the root's view ------------------------------------------------------------------
    def _models(self) -> list[dict[str, Any]]:
        for option in self.records.learned.get("options") or ():
            if option.get("category") == "model" and option.get("type") == "select":
                choices = _choices(option)
                if choices:
                    return [
                        {"id": value, "provider": self.provider, "name": name}
                        for value, name in choices
                    ]
        return [{"id": "default", "provider": self.provider, "name": "The agent's default"}]

    def agents(self) -> Sequence[Mapping[str, Any]]:
        description = describe(self.info, self.spec)
        if self.error:
            description = f"{description}. Not available: {self.error}"
        return [
            {
                "provider": self.provider,
                "displayName": self.spec.title,
                "description": description,
                "models": self._models(),
            }
        ]

    def session_config(
        self, directory: str | None, values: Mapping[str, Any]
    ) -> Mapping[str, Mapping[str, Any]]:
        """The agent's modes and its config options (but the model), as last seen."""
        learned = self.records.learned
        found: dict[str, dict[str, Any]] = {}
        modes = learned.get("modes") or []
        if modes:
            found[MODE_KEY] = {
                "type": "string",
                "title": "Mode",
                "enum": [m["id"] for m in modes],
                "enumLabels": [m["name"] for m in modes],
                "default": learned.get("mode") or modes[0]["id"],
                "sessionMutable": True,
            }
        for option in learned.get("options") or ():
            if option.get("category") == "model" or option.get("id") == MODE_KEY:
                continue
            prop: dict[str, Any] = {
                "title": option.get("name") or option["id"],
                "sessionMutable": True,
            }
            if option.get("description"):
                prop["description"] = option["description"]
            if option.get("type") == "boolean":
                prop.update(type="boolean", default=bool(option.get("currentValue")))
            elif option.get("type") == "select":
                choices = _choices(option)
                if not choices:
                    continue
                prop.update(
                    type="string",
                    enum=[v for v, _ in choices],
                    enumLabels=[n for _, n in choices],
                    default=option.get("currentValue"),
                )
            else:
                continue
            found[option["id"]] = prop
        return found

    # -- chats ------------------------------------------------------------------------------
    async def start(self, start: ChatStart) -> AcpChat:
        roots = roots_of(start.working_directories)
        if not roots:
            raise ValueError(f"{self.spec.title} runs in a local folder; this session names none")
        record = self.records.chats.get(start.backend_id)
        if start.resume and record is None:
            raise LookupError(
                f"no {self.spec.name} session {start.backend_id!r} kept here to reopen"
            )
        process = AgentProcess(self.spec, roots)
        if self.host is not None:
            process.terminals.opener = _host_terminals(self.host, start.chat_uri)
        try:
            self._initialized(await process.start(roots[0]))
        except AgentFailed as exc:
            self.error = str(exc)
            raise
        chat = AcpChat(self, start, process, record if start.resume else None)
        process.handler = chat
        try:
            await chat.open(roots[0])
        except BaseException as exc:
            with contextlib.suppress(Exception):
                await process.close()
            if isinstance(exc, Exception) and not isinstance(exc, AgentFailed):
                raise AgentFailed(
                    process.why(f"{self.spec.title} could not open a session: {exc}")
                ) from None
            raise
        if self.error is not None:
            self.error = None
            if self.notifier is not None:
                self.notifier.agents_changed()
        self.live[start.backend_id] = chat
        return chat

    # -- past sessions ----------------------------------------------------------------------
    def _row(self, backend_id: str) -> CatalogueRow | None:
        record = self.records.chats.get(backend_id)
        if record is None or record.backend_id != record.session_id:
            return None  # a chat of a session, not a session: listed through its session
        return CatalogueRow(
            session_id=record.session_id,
            title=record.title,
            created_at=record.created_at,
            modified_at=record.modified_at,
            working_directories=tuple(record.working_directories),
        )

    def catalogue(
        self, *, limit: int | None = None, cursor: str | None = None, directory: str | None = None
    ) -> CataloguePage:
        rows = [row for key in list(self.records.chats) if (row := self._row(key)) is not None]
        if directory is not None:
            rows = [row for row in rows if directory in row.working_directories]
        rows = sorted_pausing(rows, key=lambda row: (row.modified_at, row.session_id), reverse=True)
        start = int(cursor) if cursor and cursor.isdigit() else 0
        end = len(rows) if limit is None else start + limit
        return CataloguePage(rows[start:end], str(end) if end < len(rows) else None)

    def lookup(self, session_id: str) -> CatalogueRow | None:
        return self._row(session_id)

    async def read_transcript(self, backend_id: str, reader: TranscriptReader) -> bool:
        """The agent replays the session (``session/load``); its turns are rebuilt from that."""
        record = self.records.chats.get(backend_id)
        if record is None or not self.can_load:
            return False
        roots = roots_of(record.working_directories) or [record.cwd]
        process = AgentProcess(self.spec, roots)
        replay = Replay(reader, record.turns, backend_id)
        try:
            await process.start(record.cwd)
            process.handler = _Replaying(replay, record.acp_session_id)
            assert process.conn is not None
            await process.conn.load_session(
                cwd=record.cwd, session_id=record.acp_session_id, mcp_servers=[]
            )
            await settle()
        except Exception as exc:
            # The chat opens with what was replayed before the failure.
            log.warning("%s could not load session %s: %s", self.spec.name, backend_id, exc)
        finally:
            replay.finish()
            await process.close()
        return True

    def truncate(self, backend_id: str, turn_id: str | None) -> None:
        raise LookupError(f"{self.spec.title} cannot drop turns of a session over ACP")

    async def delete(self, backend_id: str) -> None:
        """Forget the session here; the agent keeps its own copy, if it keeps one."""
        if self.records.chats.pop(backend_id, None) is not None:
            await self.records.save()


class _Replaying:
    """The handler of a process that only loads a session: history to the replay."""

    def __init__(self, replay: Replay, acp_session_id: str) -> None:
        self.replay = replay
        self.acp_session_id = acp_session_id

    def session_update(self, session_id: str, update: Any) -> None:
        if session_id == self.acp_session_id:
            self.replay.update(update)

    async def permission(self, tool_call: Any, options: Any) -> str | None:
        return None


def _choices(option: Mapping[str, Any]) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for item in option.get("options") or ():
        if "value" in item:
            found.append((str(item["value"]), str(item.get("name") or item["value"])))
        for inner in item.get("options") or ():
            found.append((str(inner["value"]), str(inner.get("name") or inner["value"])))
    return found


__all__ = ["AcpBackend"]
