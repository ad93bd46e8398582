"""The Claude backend: Claude Code sessions through claude-agent-sdk and the CLI it ships."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from ahp_claude import customizations, guard, model_meta, sdk, shell, transcripts
from ahp_claude.index import Row, TranscriptIndex
from ahp_claude.names import PERMISSION_MODES, Spawn, entry_uuid, to_path
from ahp_claude.owners import ChatOwners
from ahp_claude.probe import Watcher, run_probe, session_model
from ahpcore.api import private_folder
from ahpcore.ports.backend import (
    Abilities,
    BackendNotifier,
    CataloguePage,
    CatalogueRow,
    ChatStart,
    TranscriptReader,
)

if TYPE_CHECKING:  # claude-agent-sdk is loaded when the first chat starts, not with the host
    from ahp_claude.agent import ClaudeAgent

log = logging.getLogger(__name__)

PROVIDER = "claude"
API_RESOURCE = "https://api.anthropic.com"

#: Shown until a CLI has said which models it offers.
DEFAULT_MODELS: tuple[Mapping[str, Any], ...] = (
    {"id": "default", "name": "Default (recommended)"},
    {"id": "opus", "name": "Opus"},
    {"id": "sonnet", "name": "Sonnet"},
    {"id": "haiku", "name": "Haiku"},
)


@functools.lru_cache(maxsize=4096)
def _uri(directory: str) -> str:
    return Path(directory).as_uri()


SANDBOX_PRESETS = ("default", "on", "off")

#: How long a chat's CLI (about 200 MiB) may sit idle before it is stopped; its next turn
#: starts one that resumes the transcript. ``AHP_CLAUDE_IDLE_SECONDS``.
IDLE_SECONDS = 300.0
#: How many CLIs may run at once; a CLI about to start stops the longest idle one beyond
#: that. ``AHP_CLAUDE_MAX_CLIS``.
MAX_CLIS = 8
#: How long stopping waits for a boot probe's thread (its child ends within a poll).
PROBE_STOP_SECONDS = 5.0

#: How long after the first chat starts the SDK is loaded, if no turn needed it sooner.
SDK_WARM_DELAY_SECONDS = 1.0

#: What the sidecar keeps of a session (see ``ClaudeBackend.sidecar``).
SIDECAR_KINDS = ("calls", "turns", "ended", "open", "subagents")


def config_dir(env: Mapping[str, str]) -> Path:
    """Where the CLI keeps its state: ``CLAUDE_CONFIG_DIR``, else ``~/.claude``."""
    chosen = env.get("CLAUDE_CONFIG_DIR") or os.environ.get("CLAUDE_CONFIG_DIR")
    if chosen:
        return Path(chosen)
    home = env.get("HOME") or os.environ.get("HOME") or str(Path.home())
    return Path(home) / ".claude"


class ClaudeBackend:
    provider = PROVIDER
    abilities = Abilities(
        resume=True,
        fork=True,
        side_chat=True,
        truncate=True,
        delete=True,
        list_sessions=True,
        steering=True,
        multiple_working_directories=True,
        configure=True,
        toggle=True,
        mcp_control=True,
        server_tools=True,
    )

    def __init__(
        self,
        state_dir: Path,
        spawn: Spawn,
        *,
        env: Mapping[str, str] | None = None,
        probe: bool = True,
        watch: bool = True,
        sandbox: str = "default",
        kept_record: Callable[[str], Awaitable[Mapping[str, Any] | None]] | None = None,
        idle_seconds: float | None = IDLE_SECONDS,
        max_clis: int | None = MAX_CLIS,
    ) -> None:
        self.state_dir = state_dir
        self.spawn = spawn
        #: Set on top of the host's own environment for every CLI this backend starts.
        self.env = dict(env or {})
        self.config_dir = config_dir(self.env)
        self.home = Path(self.env.get("HOME") or os.environ.get("HOME") or Path.home())
        self.index = TranscriptIndex(self.config_dir / "projects", state_dir / "catalogue.sqlite")
        #: Transcripts that hold a chat of another session: never listed as sessions.
        self.owners = ChatOwners(state_dir / "chats.json")
        #: The host's own record of a session, by its id (None when it keeps none).
        self.kept_record = kept_record
        self.notifier: BackendNotifier | None = None
        self._rows: dict[Row, CatalogueRow] = {}
        self._listed: tuple[tuple[int, int, str | None], list[CatalogueRow]] | None = None
        self._probe, self._watch = probe, watch
        if sandbox not in SANDBOX_PRESETS:
            raise ValueError(
                f"sandbox must be one of {', '.join(SANDBOX_PRESETS)}, not {sandbox!r}"
            )
        #: default: whatever the CLI's own settings say; on / off: this backend decides.
        self.sandbox = sandbox
        self.watcher: Watcher | None = None
        self.probed = threading.Event()
        #: Set by ``stop``: a boot probe still waiting to start then never starts.
        self.stopped = threading.Event()
        self.probe_thread: threading.Thread | None = None
        #: What the boot probe learned from a CLI (get_server_info), once it answered.
        self.server_info: dict[str, Any] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        #: The live agent of each conversation, by its session id.
        self.live: dict[str, ClaudeAgent] = {}
        #: (session id, turn id) -> the transcript uuid its message was stored under.
        self.references: dict[tuple[str, str], str] = {}
        #: (cli_path, env) that run each CLI under a guard that ends it with the host; None
        #: until the first chat starts (it loads the SDK), or where no guard can run.
        self.launcher: tuple[str, dict[str, str]] | None = None
        #: How long a chat's CLI may sit idle before it is stopped (None or 0: never).
        self.idle_seconds = idle_seconds
        #: How many CLIs may run at once; beyond it the longest idle stops (None: no limit).
        self.max_clis = max_clis
        self._reaping = False
        self._look_again: anyio.Event | None = None
        #: Set once the SDK is loaded and the launcher sought (``ready_to_run``).
        self._cli_ready = threading.Event()
        self._cli_lock = threading.Lock()
        self._warming = False
        self.models: list[dict[str, Any]] = [
            {**model, "provider": PROVIDER} for model in DEFAULT_MODELS
        ]

    def attach(self, notifier: BackendNotifier) -> None:
        """Start the boot probe and the transcript watcher; both report through ``notifier``."""
        self.notifier = notifier
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        if self._watch and self.watcher is None:
            projects = self.index.projects
            projects.mkdir(parents=True, exist_ok=True)
            # The index trusts the watcher from its first answer on (_transcripts_changed).
            self.watcher = Watcher(str(projects), self._transcripts_changed).start()
        if self._probe:
            self.probe_thread = run_probe(
                self.env,
                str(self.home),
                self._probed,
                stopped=self.stopped,
                guard_folder=str(self.state_dir / "bin"),
            )

    def stop(self) -> None:
        self.stopped.set()
        if self.probe_thread is not None:
            # A probe asking ends its child within a poll: over before the host says it
            # stopped, rather than failing (and saying so) after.
            self.probe_thread.join(PROBE_STOP_SECONDS)
        if self.watcher is not None:
            self.watcher.close()
            self.watcher = None
            self.index.watched = False
        self.index.close()

    def _on_loop(self, call: Callable[[], None]) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        loop.call_soon_threadsafe(call)

    def _probed(self, info: dict[str, Any]) -> None:
        models = [session_model(m, PROVIDER) for m in info.get("models") or () if m.get("value")]
        self.server_info = info
        if models:
            self.models = models
        self.probed.set()
        notifier = self.notifier
        if notifier is not None:
            self._on_loop(notifier.agents_changed)

    def _transcripts_changed(self, paths: list[str]) -> None:
        fresh = self.index.update(paths) if paths else self.index.refresh()
        # Paths or not, the watch is on: listings need not look at the folder themselves.
        self.index.watched = self.watcher is not None
        notifier = self.notifier
        # The contract has no way yet to say a past session appeared; a core that offers one
        # (sessions_changed) hears of it.
        tell = getattr(notifier, "sessions_changed", None)
        if fresh and tell is not None:
            owned = self.owners.owned()
            ids = [row.session_id for row in fresh if row.session_id not in owned]
            if ids:
                self._on_loop(lambda: tell(ids))

    # -- what the root lists ------------------------------------------------------------
    def agents(self) -> Sequence[Mapping[str, Any]]:
        return [
            {
                "provider": PROVIDER,
                "displayName": "Claude",
                "description": "Claude Code, through the Claude Agent SDK",
                "models": self.models,
                "protectedResources": [
                    {"resource": API_RESOURCE, "resource_name": "Anthropic API", "required": False}
                ],
                **customizations.for_agent(self.server_info, self.home),
            }
        ]

    def session_config(self, directory: str | None, values: Mapping[str, Any]) -> Mapping[str, Any]:
        return {
            "permissionMode": {
                "type": "string",
                "title": "Permissions",
                "enum": list(PERMISSION_MODES),
                "enumLabels": ["Ask first", "Accept edits", "Plan only", "Bypass permissions"],
                "default": "default",
                "sessionMutable": True,
            },
            shell.KEY: {**shell.SCHEMA, "sessionMutable": True},
        }

    def environment(self, tokens: Mapping[str, str]) -> dict[str, str]:
        """What a CLI gets on top of the host's environment; a pushed token adds a key."""
        env = dict(self.env)
        token = tokens.get(API_RESOURCE)
        if token:
            env["ANTHROPIC_API_KEY"] = token
        return env

    # -- chats ----------------------------------------------------------------------------
    async def start(self, start: ChatStart) -> ClaudeAgent:
        from ahp_claude.agent import ClaudeAgent

        await anyio.to_thread.run_sync(self._note_owner, start)
        agent = ClaudeAgent(self, start, self.spawn)
        self.live[start.backend_id] = agent
        if self.server_info:
            # What the boot probe learned, until this session's own CLI answers.
            agent.custom.publish()
        if not self._cli_ready.is_set() and not self._warming:
            self._warming = True
            self.spawn(self._warm, name="claude sdk")
        return agent

    # -- how many CLIs run ------------------------------------------------------------------
    async def make_room(self, starting: ClaudeAgent) -> None:
        """Before ``starting``'s CLI starts: stop the longest idle CLIs until it fits within
        ``max_clis`` (busy ones are never stopped, so the count may go over while all work).
        Also makes sure idle CLIs are looked for."""
        self.watch_idle()
        limit = self.max_clis
        if not limit or limit < 1:
            return
        for _ in range(len(self.live)):
            running = [a for a in self.live.values() if a is not starting and a.cli_running]
            if len(running) < limit:
                return
            idle = [(since, a) for a in running if (since := a.idle_since()) is not None]
            if not idle:
                log.info("%d Claude Code CLIs run, all busy: one more starts", len(running))
                return
            await min(idle, key=lambda pair: pair[0])[1].rest()

    def watch_idle(self) -> None:
        """Look for CLIs idle for ``idle_seconds`` (as it is now) from now on."""
        if self._reaping:
            if self._look_again is not None:
                self._look_again.set()  # it may be waiting out a longer period
        elif self.idle_seconds:
            self._reaping = True
            self.spawn(self._reap_idle, name="claude idle CLIs")

    async def _reap_idle(self) -> None:
        """Stop each CLI that sat idle for ``idle_seconds``, as long as the host runs."""
        try:
            while self.idle_seconds and not self.stopped.is_set():
                idle = float(self.idle_seconds)
                self._look_again = again = anyio.Event()
                with anyio.move_on_after(min(max(idle / 4, 0.05), 15.0)):
                    await again.wait()
                now = time.monotonic()
                for agent in list(self.live.values()):
                    since = agent.idle_since()
                    if since is not None and now - since >= idle:
                        await agent.rest()
        finally:
            self._reaping = False

    async def _warm(self) -> None:
        # A first message is likely soon: have the SDK loaded by then. Not at once: the
        # import's CPU would slow the answers a new session's client is waiting for.
        await anyio.sleep(SDK_WARM_DELAY_SECONDS)
        await self.ready_to_run()

    async def ready_to_run(self) -> None:
        """Load the SDK and find the guarded CLI once, in a worker thread; a chat's CLI
        starts only after this, a session is created and reopened without it."""
        if not self._cli_ready.is_set():
            # Abandoned when cancelled (a host stopping waits for no import); it still
            # finishes in its thread, for whoever asks next.
            await anyio.to_thread.run_sync(self._prepare_cli, abandon_on_cancel=True)

    def _prepare_cli(self) -> None:
        with self._cli_lock:
            if self._cli_ready.is_set():
                return
            sdk.load()
            self.launcher = guard.launcher(str(self.state_dir / "bin"))
            self._cli_ready.set()

    def _note_owner(self, start: ChatStart) -> None:
        """Keep whose chat this CLI session is before the CLI writes a line of it: a chat's
        transcript listed as a session could be reopened and disposed, and its history lost."""
        if "/" in start.backend_id:
            return  # a subagent's chat: its history is in its parent's transcript
        if start.backend_id == start.session_id:
            # A session's own chat (a chat moved out to a session of its own, too).
            self.owners.release(start.backend_id)
            return
        fork_of = None
        if start.fork_from is not None:
            fork_of = self._fork_origin(*start.fork_from, start.references)
            self._inherit(start.backend_id, start.fork_from[0], fork_of[0])
        self.owners.claim(start.backend_id, start.session_id, fork_of)

    def _inherit(self, fork: str, *sources: str) -> None:
        """A fork keeps what its sources' sidecars say of the turns it copies (their ids,
        who was asked, how long they took) in its own: the source may be deleted before
        the fork is next read. What it says of turns the fork did not copy is never read."""
        known = self.sidecar(fork)
        merged = {kind: dict(known[kind]) for kind in known}
        for source in dict.fromkeys(sources):
            kept = self.sidecar(source)
            for kind in SIDECAR_KINDS:
                merged[kind] = {**kept[kind], **merged[kind]}
        if merged != known:
            self._store(fork, merged, "what it forked")

    def _fork_origin(
        self, source: str, turn_id: str, references: Mapping[str, str]
    ) -> tuple[str, str | None]:
        """The transcript a fork at ``turn_id`` of ``source`` continues, and the entry."""
        # A fork of a fork whose CLI wrote nothing yet forks what that one forked.
        for _ in range(100):
            if self.transcript_path(source) is not None:
                break
            kept = self.owners.get(source)
            if kept is None or kept.fork_of is None:
                break
            source = kept.fork_of[0]
        known = references.get(turn_id) or entry_uuid(source, turn_id)
        return source, self.fork_point(source, known, turn_id)

    def transcript_path(self, session_id: str) -> Path | None:
        # Never load the whole index for one path: a fresh host may not have read it yet.
        found = self.index.path_of(session_id) if self.index.loaded else None
        return found or transcripts.find(self.config_dir, session_id)

    def state_file(self, backend_id: str) -> Path | None:
        """The CLI's transcript of that conversation, only when it lies in the CLI's own
        projects folder (the index could name a file a link leads elsewhere)."""
        found = self.transcript_path(backend_id)
        if found is None:
            return None
        projects = (self.config_dir / "projects").resolve()
        return found if found.resolve().is_relative_to(projects) else None

    # -- what the transcript does not keep: who was asked, and the turn ids clients know ---
    def _sidecar_path(self, session_id: str) -> Path:
        return self.state_dir / "sidecar" / f"{session_id}.json"

    def sidecar(self, session_id: str) -> dict[str, dict[str, Any]]:
        """``{"calls": {call id: decision}, "turns": {entry uuid: turn id},
        "ended": {entry uuid: how a turn ended, beyond its transcript},
        "open": {entry uuid, or a background subagent's call id: true while it runs},
        "subagents": {call id: what the host saw of the subagent it ran (its duration)}}``
        of one session."""
        try:
            known = dict(json.loads(self._sidecar_path(session_id).read_text()))
        except (OSError, ValueError):
            known = {}
        return {kind: dict(known.get(kind) or {}) for kind in SIDECAR_KINDS}

    def _remember(self, session_id: str, kind: str, key: str, value: Any) -> None:
        """Set ``key`` of ``kind`` in the session's sidecar (None removes it)."""
        known = self.sidecar(session_id)
        if value is None:
            if known[kind].pop(key, None) is None:
                return
        else:
            known[kind][key] = value
        self._store(session_id, known, kind)

    def _store(self, session_id: str, known: Mapping[str, Any], kind: str) -> None:
        path = self._sidecar_path(session_id)
        try:
            private_folder(path.parent)
            # Whole or not at all: a host killed mid-write keeps the sidecar it had.
            temporary = path.with_name(f"{path.name}.tmp")
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(json.dumps(known))
            os.replace(temporary, path)
        except OSError:
            # A rebuild then reads less than the live turn showed; the turn itself goes on.
            log.warning("could not keep %s of %s in %s", kind, session_id, path, exc_info=True)

    def record_decision(self, session_id: str, call_id: str, decision: Mapping[str, Any]) -> None:
        """Keep how a person answered a call, so the rebuilt call reads as it did live."""
        self._remember(session_id, "calls", call_id, dict(decision))

    def record_turn_end(self, session_id: str, entry: str, facts: Mapping[str, Any]) -> None:
        """Keep how a turn ended where its transcript does not say: its cost, the model's
        context window, the error it failed with. ``entry`` is its message's uuid."""
        known = self.sidecar(session_id)["ended"].get(entry) or {}
        fresh = {k: v for k, v in facts.items() if v is not None}
        self._remember(session_id, "ended", entry, {**known, **fresh})

    def cost_total(self, *session_ids: str) -> float:
        """The highest running cost total the CLI reported for these sessions (0 if none)."""
        totals = [
            float(facts["costTotal"])
            for session_id in session_ids
            for facts in self.sidecar(session_id)["ended"].values()
            if isinstance(facts, Mapping) and isinstance(facts.get("costTotal"), int | float)
        ]
        return max(totals, default=0.0)

    def last_model(self, *session_ids: str) -> str | None:
        """The model the latest ended turn of these sessions ran on, as this host kept it."""
        for session_id in session_ids:
            for facts in reversed(self.sidecar(session_id)["ended"].values()):
                if isinstance(facts, Mapping) and facts.get("model"):
                    return str(facts["model"])
        return None

    def session_meta(self, backend_id: str) -> dict[str, Any]:
        """A reopened session's model, from its last turn, before its CLI says it again."""
        model = self.last_model(backend_id)
        return {model_meta.KEY: model} if model else {}

    def record_turn(self, session_id: str, entry: str, turn_id: str) -> None:
        """Keep a turn's id when it is not its transcript uuid, so a rebuild names it the same."""
        self.references[(session_id, turn_id)] = entry
        if entry != turn_id:
            self._remember(session_id, "turns", entry, turn_id)

    def record_subagent(self, session_id: str, call_id: str, duration_ms: int) -> None:
        """Keep how long the subagent of ``call_id`` ran, so its rebuilt chat lasts as long."""
        self._remember(session_id, "subagents", call_id, {"duration": duration_ms})

    def turn_open(self, session_id: str, entry: str, running: bool) -> None:
        """Keep that the turn begun at ``entry`` runs (until ``running`` is False): a turn
        still open when the host starts again was cut off by the host's end, however the
        transcript reads (the CLI writes a half-streamed answer as a finished one)."""
        self._remember(session_id, "open", entry, True if running else None)

    def _entry_of(self, session_id: str, turn_id: str) -> str:
        """The transcript uuid of a turn clients know as ``turn_id``."""
        found = self.references.get((session_id, turn_id))
        if found is None:
            turns = self.sidecar(session_id)["turns"]
            found = next((e for e, t in turns.items() if t == turn_id), None)
        return found or entry_uuid(session_id, turn_id)

    def fork_point(self, source: str, *ids: str) -> str | None:
        """The transcript entry a fork at a turn continues from: that turn's last entry."""
        path = self.transcript_path(source)
        if path is None:
            return None
        known = [self._entry_of(source, i) for i in ids]
        return transcripts.turn_end_uuid(path, *known, *ids)

    def side_context(self, source: str, turn_id: str) -> str:
        path = self.transcript_path(source)
        said = transcripts.turn_text(path, entry_uuid(source, turn_id), turn_id) if path else ""
        return f"(Context from the conversation this side chat started from:)\n{said}".strip()

    # -- the catalogue (blocking: the host calls these in a worker thread) ----------------
    def _row(self, row: Row) -> CatalogueRow:
        # Rows are immutable and most stay unchanged between listings: convert each once.
        made = self._rows.get(row)
        if made is None:
            if len(self._rows) > 4 * len(self.index) + 1000:
                self._rows.clear()
            made = self._rows[row] = CatalogueRow(
                session_id=row.session_id,
                title=row.title or "",
                created_at=row.created_at or row.modified_at,
                modified_at=row.modified_at,
                working_directories=(_uri(row.cwd),) if row.cwd else (),
            )
        return made

    def catalogue(
        self, *, limit: int | None = None, cursor: str | None = None, directory: str | None = None
    ) -> CataloguePage:
        rows = self._listing(directory)
        start = int(cursor) if cursor and cursor.isdigit() else 0
        end = len(rows) if limit is None else start + limit
        return CataloguePage(rows[start:end], str(end) if end < len(rows) else None)

    def _listing(self, directory: str | None) -> list[CatalogueRow]:
        """Every row (of one directory), newest first; kept until the index changes."""
        rows = self.index.rows()
        key = (self.index.version, self.owners.version, directory)
        if self._listed is not None and self._listed[0] == key:
            return self._listed[1]
        owned = self.owners.owned()
        if owned:
            rows = [row for row in rows if row.session_id not in owned]
        if directory is not None:
            wanted = to_path(directory)
            rows = [row for row in rows if row.cwd == wanted]
        made = [self._row(row) for row in rows]
        self._listed = (key, made)
        return made

    async def lookup(self, session_id: str) -> CatalogueRow | None:
        row, owned = await anyio.to_thread.run_sync(self._lookup, session_id)
        if row is not None and owned and not await self._own_session(session_id):
            return None  # a chat of another session: reopened only through that session
        return row

    def _lookup(self, session_id: str) -> tuple[CatalogueRow | None, bool]:
        row = self.index.lookup(session_id)
        if row is None or row.title is None:
            return None, False
        return self._row(row), self.owners.session_of(session_id) is not None

    async def _own_session(self, backend_id: str) -> bool:
        """Whether the host keeps ``backend_id`` as a session of its own (a chat moved out
        to a new session is one before its CLI next starts)."""
        if self.kept_record is None:
            return False
        record = await self.kept_record(backend_id) or {}
        return any(
            isinstance(chat, Mapping) and chat.get("backendId") == backend_id
            for chat in record.get("chats") or ()
        )

    def read_transcript(self, backend_id: str, reader: TranscriptReader) -> bool:
        path = self.transcript_path(backend_id)
        sidecar = self.sidecar(backend_id)
        owner = self.owners.get(backend_id)
        fork_of = owner.fork_of if owner is not None else None
        ancestor = owner
        for _ in range(100):  # a fork made before forks kept their own: its sources' sidecars
            if ancestor is None or ancestor.fork_of is None:
                break
            # The turns a fork carried over are known by the ids its source gave them.
            source = self.sidecar(ancestor.fork_of[0])
            for kind in SIDECAR_KINDS:
                sidecar[kind] = {**source[kind], **sidecar[kind]}
            ancestor = self.owners.get(ancestor.fork_of[0])
        if path is not None:
            entries = transcripts.read_entries(path)
        elif fork_of is not None and (source_path := self.transcript_path(fork_of[0])):
            # A fork whose CLI has not written yet: what it continues is its source's, so far.
            path = source_path
            entries = transcripts.up_to(transcripts.read_entries(path), fork_of[1])
        else:
            return False
        # Loaded with the first transcript read, not with the host: the replay brings the
        # core's turn recorder along.
        from ahp_claude import rebuild

        rebuild.rebuild(
            entries,
            reader,
            sidecar["calls"],
            sidecar["turns"],
            path=path,
            ended=sidecar["ended"],
            cut_off=set(sidecar["open"]),
            subagents=sidecar["subagents"],
        )
        return True

    def delete(self, backend_id: str) -> None:
        path = self.transcript_path(backend_id)
        self.owners.forget(backend_id)
        self._sidecar_path(backend_id).unlink(missing_ok=True)
        if path is not None:
            path.unlink(missing_ok=True)
            self.index.forget(path)
            # The CLI keeps a folder of its own beside the transcript for subagents and tools.
            shutil.rmtree(path.with_suffix(""), ignore_errors=True)

    def truncate(self, backend_id: str, turn_id: str | None) -> None:
        path = self.transcript_path(backend_id)
        if path is None:
            raise LookupError(f"no Claude transcript for session {backend_id}")
        keep = None
        if turn_id is not None:
            keep = self._entry_of(backend_id, turn_id)
        transcripts.truncate(path, keep, turn_id)
        agent = self.live.get(backend_id)
        if agent is not None:
            agent.stale = True
