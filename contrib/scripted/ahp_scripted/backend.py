"""The scripted backend: the whole backend contract, deterministically, from a script."""

from __future__ import annotations

import copy
import itertools
import json
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from ahp_scripted.catalogue import Summary
from ahp_scripted.gates import Gates
from ahp_scripted.store import Conversation, ConversationStore, TurnRecord, iso
from ahp_scripted.transcript import RecordingReporter, replay
from ahpcore.api import sorted_pausing
from ahpcore.ports.backend import (
    Abilities,
    AgentRefused,
    BackendNotifier,
    CataloguePage,
    CatalogueRow,
    ChatStart,
    TranscriptReader,
    TurnEnded,
    TurnInput,
    TurnReporter,
)

if TYPE_CHECKING:  # the runner and the script's steps load with a chat's first turn
    from ahp_scripted.runner import TurnRun
    from ahp_scripted.script import Script

PROVIDER = "scripted"
MODEL_ID = "scripted"

Variables = Callable[[], Mapping[str, str]]
Clock = Callable[[], datetime]


def _now() -> datetime:
    return datetime.now(UTC)


def _plain(value: Any) -> Any:
    """A deep copy as plain JSON data (what a file can hold)."""
    return json.loads(json.dumps(value))


class ScriptedAgent:
    """The agent behind one chat: runs each turn's steps and records what it reported."""

    def __init__(self, backend: ScriptedBackend, conversation: Conversation, start: ChatStart):
        self.backend = backend
        self.conversation = conversation
        self.client_tools = tuple(str(tool.get("name", "")) for tool in start.client_tools)
        self.server_tools = start.server_tools
        self.closed = False
        self._steering: deque[str] = deque()
        self._running: str | None = None
        #: Where this agent reports outside the host's turns.
        self.session = start.report
        #: What clients asked of the live agent: ("configure", values), ("toggle", id, on), ...
        self.heard: list[tuple[Any, ...]] = []

    @property
    def running_turn(self) -> str | None:
        """The id of the turn running now, if any."""
        return self._running

    def steer(self, message: Mapping[str, Any]) -> bool:
        """Take a steering message into the running turn; False when no turn runs.

        The turn takes it at its next step: the rest of its script gives way to
        the steps the steering text selects.
        """
        if self._running is None:
            return False
        self._steering.append(str(message.get("text", "")))
        return True

    def _next_steering(self) -> str | None:
        return self._steering.popleft() if self._steering else None

    def _context(self, turn_index: int) -> str:
        """What this turn may see of before: the side chat's turn, then this chat's last."""
        conversation = self.conversation
        if turn_index == 0:
            return conversation.side_context or ""
        return conversation.turns[turn_index - 1].said()

    def _begin(self, turn: TurnInput) -> tuple[TurnRecord, int, dict[str, str]]:
        """The record this turn writes to, the step it starts at, and saved variables."""
        turns = self.conversation.turns
        last = turns[-1] if turns else None
        ended = last.end if last is not None else None
        if last is not None and last.id == turn.turn_id and ended and ended["state"] == "error":
            # chat/turnResume: the errored turn picks up after the step that failed.
            resume = last.resume or {"step": -1, "variables": {}}
            last.end = None
            return last, int(resume["step"]) + 1, dict(resume["variables"])
        record = TurnRecord(
            turn.turn_id, _plain(dict(turn.message)), iso(self.backend.clock()), ref=_ref(turn)
        )
        turns.append(record)
        return record, 0, {}

    async def run_turn(self, turn: TurnInput, report: TurnReporter) -> None:
        report.reference(_ref(turn))
        await self._run(turn, report)

    async def _follow_up(self, text: str, origin: str) -> None:
        """A turn of the agent's own, once its background work finished."""
        if self.session is None or self.closed:
            return
        async with self.session.begin_turn({"text": text}, origin=origin) as report:  # type: ignore[arg-type]
            message = {"text": text, "origin": {"kind": origin}}
            await self._run(TurnInput(report.turn_id, message), report)

    async def _run(self, turn: TurnInput, report: TurnReporter) -> None:
        if self.closed:
            raise RuntimeError(f"the scripted agent for {self.conversation.backend_id!r} is closed")
        if self._running is not None:
            raise RuntimeError(f"turn {self._running!r} is still running in this chat")
        from ahp_scripted.runner import TurnRun

        backend = self.backend
        record, start, saved = self._begin(turn)
        # _begin's record is always the last turn (a new one, or an errored one resumed).
        # Looking it up with ``index`` compared it field by field with every earlier turn:
        # a cost that grew with the chat.
        position = len(self.conversation.turns) - 1
        began = backend.clock()
        self._running = turn.turn_id
        await backend.save(self.conversation, changed=record)
        shared = dict(backend.variables())
        run: TurnRun | None = None
        outcome: dict[str, Any] = {"state": "cancelled"}
        try:
            steps, found = backend.script.select(turn.text)
            calls = sum(1 for r in record.reports if r[0] == "tool_start")
            run = TurnRun(
                report=RecordingReporter(report, record.reports),
                variables={
                    **shared,
                    **{f"config.{key}": str(value) for key, value in turn.config.items()},
                    "message": turn.text,
                    "context": self._context(position),
                    **found,
                    **saved,
                },
                gates=backend.gates,
                call_ids=(f"{turn.turn_id}.call{n}" for n in itertools.count(calls + 1)),
                client_tools=self.client_tools,
                server_tools=self.server_tools,
                steering=self._next_steering,
                redirect=backend.script.select,
                session=self.session,
                follow_up=self._follow_up,
            )
            await run.run(steps, start)
            outcome = {"state": "complete"}
        except TurnEnded:
            raise  # the host ended the turn: the file says cancelled
        except Exception as exc:
            outcome = {"state": "error", "error": str(exc)}
            if run is not None:
                kept = {k: v for k, v in run.variables.items() if k not in shared}
                record.resume = {"step": run.position, "variables": kept}
            raise
        finally:
            # Whatever ended the turn (a cancel included), the file says how.
            self._running = None
            self._steering.clear()
            outcome["durationMs"] = max(0, int((backend.clock() - began).total_seconds() * 1000))
            record.end = outcome
            await backend.save(self.conversation, changed=record)

    async def configure(self, values: Mapping[str, Any]) -> None:
        """Config a client changed; a value the backend was told to refuse is refused."""
        for key, value in values.items():
            if self.backend.refuse_config.get(key) == value:
                raise AgentRefused(f"the scripted agent will not switch {key} to {value!r} now")
        self.heard.append(("configure", dict(values)))

    async def toggle(self, customization_id: str, enabled: bool) -> None:
        self.heard.append(("toggle", customization_id, enabled))

    async def mcp_start(self, customization_id: str) -> None:
        self.heard.append(("mcp_start", customization_id))
        if self.session is not None:
            self.session.mcp_server_state(customization_id, {"kind": "ready"})

    async def mcp_stop(self, customization_id: str) -> None:
        self.heard.append(("mcp_stop", customization_id))
        if self.session is not None:
            self.session.mcp_server_state(customization_id, {"kind": "stopped"})

    async def truncate(self, turn_id: str | None, reference: str | None) -> None:
        """Truncation through the live agent: its own conversation, between turns."""
        self.heard.append(("truncate", turn_id, reference))
        await self.backend.truncate(self.conversation.backend_id, turn_id)

    async def close(self) -> None:
        self.closed = True
        if self.backend.agents_by_id.get(self.conversation.backend_id) is self:
            del self.backend.agents_by_id[self.conversation.backend_id]


#: What a scripted session can be configured with: enough for a client to draw a control.
DEFAULT_CONFIG: dict[str, dict[str, Any]] = {
    "verbosity": {
        "type": "string",
        "title": "Verbosity",
        "description": "How much the agent says; a script reads it as ${config.verbosity}.",
        "enum": ["short", "long"],
        "enumLabels": ["Short answers", "Long answers"],
        "default": "short",
        "sessionMutable": True,
    },
}


class ScriptedBackend:
    """The ``scripted`` provider: a deterministic agent that follows ``script``.

    Conversations are kept as JSON files under ``state_dir`` (in memory when
    it is None). ``variables`` adds ``${name}`` values every turn can use;
    ``clock`` is the time source (tests pin it).
    """

    provider = PROVIDER
    abilities = Abilities(
        resume=True,
        fork=True,
        side_chat=True,
        truncate=True,
        delete=True,
        list_sessions=True,
        turn_resume=True,
        steering=True,
        rename=True,
        configure=True,
        toggle=True,
        mcp_control=True,
        agent_truncate=True,
        server_tools=True,
    )

    def __init__(
        self,
        state_dir: Path | str | None = None,
        script: Script | None = None,
        *,
        variables: Variables | None = None,
        clock: Clock = _now,
        config: Mapping[str, Mapping[str, Any]] | None = None,
        refuse_config: Mapping[str, Any] | None = None,
        late_models: Sequence[str] = (),
    ) -> None:
        if script is None:
            from ahp_scripted.demo import host_variables

            variables = variables or host_variables()
        #: None until the demo is first needed: parsing it is a tenth of a host's start.
        self._script = script
        self.store = ConversationStore(Path(state_dir) if state_dir is not None else None)
        self._save_locks: dict[str, anyio.Lock] = {}
        #: The rows of the catalogue listing under way: ((generation, directory), rows).
        self._listed: tuple[tuple[str, str | None], list[CatalogueRow]] | None = None
        self._listings = 0
        #: The summaries of the last whole listing and the rows made of them.
        self._summarised: tuple[list[Summary] | None, list[CatalogueRow]] = (None, [])
        self.variables: Variables = variables or dict
        self.clock = clock
        self.gates = Gates()
        self.agents_by_id: dict[str, ScriptedAgent] = {}
        #: The session config schema's properties (``SessionConfigPropertySchema`` dicts).
        self.config = dict(DEFAULT_CONFIG if config is None else config)
        #: Config values a live agent refuses (key -> value), to exercise refusals.
        self.refuse_config = dict(refuse_config or {})
        #: Models listed only once an agent has started (as a real agent learns them).
        self.late_models = tuple(late_models)
        self.notifier: BackendNotifier | None = None
        self._started_once = False

    # -- the contract ---------------------------------------------------------------
    def session_config(
        self, working_directory: str | None, values: Mapping[str, Any]
    ) -> Mapping[str, Mapping[str, Any]]:
        """The config a session of this backend offers (the same for every folder)."""
        return self.config

    def config_completions(
        self, key: str, query: str, values: Mapping[str, Any]
    ) -> list[dict[str, str]]:
        """Values of ``key`` containing ``query``, case blind, from the property's enum."""
        prop = self.config.get(key) or {}
        labels = list(prop.get("enumLabels") or [])
        found = []
        for index, value in enumerate(prop.get("enum") or []):
            label = labels[index] if index < len(labels) else str(value)
            if query.casefold() in f"{value} {label}".casefold():
                found.append({"value": str(value), "label": label})
        return found

    @property
    def script(self) -> Script:
        if self._script is None:
            from ahp_scripted.demo import demo_script

            self._script = demo_script()
        return self._script

    @script.setter
    def script(self, script: Script) -> None:
        self._script = script

    def _agent_texts(self) -> tuple[str, str]:
        if self._script is None:
            from ahp_scripted.demo import DEMO_DESCRIPTION, DEMO_NAME

            return DEMO_NAME, DEMO_DESCRIPTION
        return self._script.name, self._script.description

    def attach(self, notifier: BackendNotifier) -> None:
        self.notifier = notifier

    def agents(self) -> Sequence[Mapping[str, Any]]:
        models = [{"id": MODEL_ID, "provider": PROVIDER, "name": "Scripted"}]
        if self._started_once:
            models += [{"id": m, "provider": PROVIDER, "name": m} for m in self.late_models]
        name, description = self._agent_texts()
        return [
            {
                "provider": PROVIDER,
                "displayName": name,
                "description": description,
                "models": models,
            }
        ]

    async def rename(self, backend_id: str, title: str) -> None:
        """A client renamed the chat: the catalogue lists it under the new title."""
        conversation = self.store.get(backend_id)
        if conversation is not None:
            conversation.renamed = title
            await self.save(conversation)

    async def start(self, start: ChatStart) -> ScriptedAgent:
        conversation = self.store.get(start.backend_id)
        if conversation is None:
            if start.resume:
                raise LookupError(f"no scripted conversation {start.backend_id!r} to resume")
            conversation = self._new(start)
            await self.save(conversation)
        agent = ScriptedAgent(self, conversation, start)
        self.agents_by_id[start.backend_id] = agent
        if not self._started_once:
            self._started_once = True
            if self.late_models and self.notifier is not None:
                self.notifier.agents_changed()
        return agent

    def _new(self, start: ChatStart) -> Conversation:
        now = iso(self.clock())
        conversation = Conversation(
            backend_id=start.backend_id,
            session_id=start.session_id,
            chat_uri=start.chat_uri,
            created_at=now,
            modified_at=now,
            working_directories=list(start.working_directories),
        )
        if start.fork_from is not None:
            source, turn_id = self._source(start.fork_from, "fork")
            kept = source.turns[: source.turn_index(turn_id) + 1]
            conversation.turns = [TurnRecord.from_json(_plain(t.to_json())) for t in kept]
            conversation.fork_of = list(start.fork_from)
        if start.side_of is not None:
            source, turn_id = self._source(start.side_of, "side chat")
            conversation.side_of = list(start.side_of)
            conversation.side_context = source.turns[source.turn_index(turn_id)].said()
        return conversation

    def _source(self, named: tuple[str, str], what: str) -> tuple[Conversation, str]:
        backend_id, turn_id = named
        source = self.store.get(backend_id)
        if source is None:
            raise LookupError(f"cannot start a {what} of {backend_id!r}: no such conversation")
        return source, turn_id

    def _rows(self, only: str | None = None) -> list[CatalogueRow]:
        """One row per session kept: its chats' conversations grouped by session id."""
        store = self.store
        summaries = store.summaries() if only is None else store.summaries_of(only)
        if only is None and summaries is self._summarised[0]:
            return self._summarised[1]  # nothing changed since the last listing
        sessions: dict[str, list[Summary]] = {}
        for kept in summaries:
            sessions.setdefault(kept.session_id, []).append(kept)
        rows = []
        for session_id, chats in sessions.items():
            if len(chats) == 1:
                (main,) = chats
                created, modified = main.created_at, main.modified_at
            else:
                # The session's own conversation is the one started as it (the default
                # chat); failing that, its oldest chat that is not a side chat.
                chats.sort(key=lambda c: (c.backend_id != session_id, c.side, c.created_at))
                main = chats[0]
                created = min(c.created_at for c in chats)
                modified = max(c.modified_at for c in chats)
            rows.append(
                CatalogueRow(session_id, main.title, created, modified, main.working_directories)
            )
        rows = sorted_pausing(rows, key=lambda row: (row.modified_at, row.session_id), reverse=True)
        if only is None:
            self._summarised = (summaries, rows)
        return rows

    def catalogue(
        self, *, limit: int | None = None, cursor: str | None = None, directory: str | None = None
    ) -> CataloguePage:
        """Pages of the sessions kept, newest first; reads files, so the host runs it in a thread.

        The first page stats every conversation's log and reads only those changed
        since the last listing (see ``ahp_scripted.catalogue``); the pages after it,
        named by the cursor it handed out, reuse that listing.
        """
        generation, _, offset = (cursor or "").partition(":")
        listed = self._listed
        if cursor and listed is not None and listed[0] == (generation, directory):
            rows = listed[1]
        else:
            rows = self._rows()
            if directory is not None:
                rows = [row for row in rows if directory in row.working_directories]
            self._listings += 1
            generation = str(self._listings)
            self._listed = ((generation, directory), rows)
        start = int(offset) if offset.isdigit() else 0
        end = len(rows) if limit is None else start + limit
        if end >= len(rows):
            self._listed = None  # the last page: let the rows go
            return CataloguePage(rows[start:end], None)
        return CataloguePage(rows[start:end], f"{generation}:{end}")

    def lookup(self, session_id: str) -> CatalogueRow | None:
        """The row of one session kept, or None: only that session's chats are looked at."""
        found = self._rows(only=session_id)
        return found[0] if found else None

    def state_file(self, backend_id: str) -> Path | None:
        """The store's log of that conversation, when this backend keeps it on disk."""
        if self.store.directory is None:
            return None
        path = self.store.path(backend_id)
        return path if path.is_file() else None

    async def read_transcript(self, backend_id: str, reader: TranscriptReader) -> bool:
        conversation = self.store.get(backend_id)
        if conversation is None:
            return False
        running = self.agents_by_id.get(backend_id)
        for record in conversation.turns:
            if running is not None and running.running_turn == record.id:
                continue  # still being reported live
            turn_report = reader.turn(record.id, record.message, started_at=record.started_at)
            if record.ref is not None:
                turn_report.reference(record.ref)
            replay(record.reports, turn_report)
            # A turn without an end was cut short by a host that stopped.
            end = record.end or {"state": "cancelled", "durationMs": 0}
            reader.end_turn(
                state=end["state"],
                duration_ms=int(end.get("durationMs", 0)),
                error=end.get("error"),
            )
        return True

    async def delete(self, backend_id: str) -> None:
        self.store.delete(backend_id)

    # -- beyond the protocol methods --------------------------------------------------
    async def truncate(self, backend_id: str, turn_id: str | None) -> None:
        """Drop the turns after ``turn_id`` (all of them when None)."""
        conversation = self.store.get(backend_id)
        if conversation is None:
            raise LookupError(f"no scripted conversation {backend_id!r} to truncate")
        keep = 0 if turn_id is None else conversation.turn_index(turn_id) + 1
        del conversation.turns[keep:]
        await self.save(conversation)

    async def save(self, conversation: Conversation, changed: TurnRecord | None = None) -> None:
        """Append what changed; the write and its fsync run off the event loop, in order.

        ``changed``: the one turn (with any after it) that may differ from the last save.
        """
        conversation.modified_at = iso(self.clock())
        lock = self._save_locks.setdefault(conversation.backend_id, anyio.Lock())
        # Shielded: a turn's end is written even when its cancellation ended it.
        with anyio.CancelScope(shield=True):
            async with lock:
                write = self.store.prepare(conversation, changed=changed)
                if write is not None:
                    await anyio.to_thread.run_sync(write)

    def conversation(self, backend_id: str) -> Conversation | None:
        """The kept conversation, for tests and tools (a copy: changing it changes nothing)."""
        found = self.store.get(backend_id)
        return copy.deepcopy(found) if found is not None else None

    def release(self, gate: str, times: int = 1) -> None:
        """Let ``times`` turns through the ``wait`` gate named ``gate``."""
        self.gates.release(gate, times)

    async def reached(self, gate: str) -> None:
        """Return once a turn waits at ``gate`` (pair with ``anyio.fail_after``)."""
        await self.gates.reached(gate)


__all__ = ["ScriptedAgent", "ScriptedBackend"]


def _ref(turn: TurnInput) -> str:
    """The backend's own reference for a turn, as ``run_turn`` reports it."""
    return f"scripted:{turn.uuid or turn.turn_id}"
