"""The session registry: the sessions and chats the host holds, their channels, and their
records in the store.

A session's record keeps what the host adds on top of a backend (read and
archived bits, titles, config, chat order, drafts), keyed by
the session's id so every spelling of its URI finds it. Every chat is made
here, with the runner that owns its turns.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import anyio

from ahpcore.engine.core import Engine
from ahpcore.lifecycle import Lifecycle, ToolConfirmation, TurnStart
from ahpcore.ports.backend import Backend, ChatStart, ServerTools, SessionReporter
from ahpcore.protocol import uris
from ahpcore.sessions import composer
from ahpcore.sessions import state as states
from ahpcore.sessions.live import LiveChat, LiveSession
from ahpcore.sessions.reporter import EditServer, subagent_chat_uri
from ahpcore.sessions.runner import ChatRunner
from ahpcore.tasks import Tasks

log = logging.getLogger(__name__)

#: A chat's references to what it made (changesets, canvases), kept across restarts.
ARTIFACT_KEYS = ("changesets", "canvases")

#: How long a save of what a client only types (a draft) may wait for more of it:
#: a burst of keystrokes costs one write. Never acknowledged as durable, so a crash
#: loses at most this much typing; a stopping host still writes it.
DRAFT_SAVE_DELAY = 0.5


#: How long a save waits for the catalogue index once the store holds the record.
INDEX_WAIT = 10.0


class SessionRegistry:
    def __init__(
        self, engine: Engine, store: Any, tasks: Tasks, lifecycle: Lifecycle, reconnect_grace: float
    ) -> None:
        self.engine = engine
        self.store = store
        self.tasks = tasks
        self.lifecycle = lifecycle
        #: How long a dropped client stays a session's active client, waiting to reconnect.
        self.reconnect_grace = reconnect_grace
        self.sessions: dict[str, LiveSession] = {}
        self.edits = EditServer()
        #: Sessions with a save waiting, and what hurries it (set: write now).
        self._saves_waiting: dict[str, anyio.Event] = {}
        self.draft_save_delay = DRAFT_SAVE_DELAY
        #: Awaited after every save (the catalogue index keeps its row in step).
        self.on_saved: Callable[[LiveSession, dict[str, Any]], Awaitable[None]] | None = None
        #: Session id -> the newest record written and not yet passed to ``on_saved``.
        #: Saves in flight together may finish in any order; whichever finishes
        #: first passes on the newest, so an older record never reaches the index last.
        self._unindexed: dict[str, dict[str, Any]] = {}
        #: Awaited before the store is written (the index marks the session unsettled).
        self.on_saving: Callable[[LiveSession], Awaitable[None]] | None = None
        #: Sessions whose newest record may not have reached the index.
        self.unindexed_ids: set[str] = set()
        #: The host's own tools for a chat's agent (``ChatStart.server_tools``); set by the manager.
        self.server_tools_for: Callable[[LiveSession, str], ServerTools | None] = (
            lambda session, chat_uri: None
        )

    @contextmanager
    def unsure_while(self, session_id: str) -> Iterator[None]:
        """Count the session among ``unindexed_ids`` until the block ends without error.

        A block cut off halfway (an index write that failed, a cancelled dispose)
        leaves it there, so a clean stop keeps its unsettled mark for the next start.
        """
        self.unindexed_ids.add(session_id)
        yield
        self.unindexed_ids.discard(session_id)

    # -- the hub a runner sees ---------------------------------------------------
    def apply(self, uri: str, action: dict[str, Any]) -> dict[str, Any] | None:
        if uri not in self.engine.channels:
            return None  # a channel torn down while its agent still spoke
        return self.engine.apply(uri, action)

    def spawn(
        self, function: Callable[..., Coroutine[Any, Any, Any]], *args: Any, name: str | None = None
    ) -> None:
        # The host supervises it: a failure is logged and goes no further.
        self.tasks.spawn(function, *args, name=name)

    async def intercept_turn(self, chat: LiveChat, turn: Any, report: Any) -> bool:
        session = chat.session
        start = TurnStart(
            session=session.uri,
            chat=chat.uri,
            provider=session.provider,
            working_directories=tuple(session.working_directories),
            turn=turn,
            report=report,
            agent=chat.runner.agent,
        )
        return await self.lifecycle.turn_starting(start)

    async def tool_confirming(self, chat: LiveChat, fields: dict[str, Any]) -> ToolConfirmation:
        session = chat.session
        confirmation = ToolConfirmation(
            session=session.uri, chat=chat.uri, provider=session.provider, **fields
        )
        await self.lifecycle.tool_confirming(confirmation)
        return confirmation

    def chat_start(
        self, chat: LiveChat, report: SessionReporter, tokens: dict[str, str] | None
    ) -> ChatStart:
        session = chat.session
        return ChatStart(
            session_id=session.id,
            chat_uri=chat.uri,
            backend_id=chat.backend_id,
            working_directories=tuple(
                chat.state.get("workingDirectories") or session.working_directories
            ),
            config=dict(session.state.get("config", {}).get("values", {})),
            resume=chat.existing,
            fork_from=chat.fork_from,
            side_of=chat.side_of,
            tokens=tokens or {},
            client_tools=self.client_tools(session),
            server_tools=self.server_tools_for(session, chat.uri),
            report=report,
            references=dict(chat.references),
        )

    @staticmethod
    def client_tools(session: LiveSession) -> list[dict[str, Any]]:
        tools = []
        for active in session.state.get("activeClients", []):
            for tool in active.get("tools", []):
                tools.append({**tool, "name": f"{active['clientId']}__{tool['name']}"})
        return tools

    def child_chat(self, parent: LiveChat, call_id: str, title: str) -> LiveChat:
        session = parent.session
        uri = subagent_chat_uri(parent.uri, call_id)
        existing = session.chats.get(uri)
        if existing is not None:
            return existing
        chat_state = states.new_chat_state(
            uri,
            title=title,
            modified_at=states.now_iso(),
            origin={"kind": "tool", "chat": parent.uri, "toolCallId": call_id},
            working_directories=parent.state.get("workingDirectories") or (),
        )
        chat = self.new_chat(session, uri, f"{parent.backend_id}/{call_id}", chat_state)
        chat.parent = (parent.uri, call_id)
        self.apply(
            session.uri, {"type": "session/chatAdded", "summary": states.chat_row(chat.state)}
        )
        return chat

    # -- finding sessions and chats ---------------------------------------------
    def session_by_uri(self, uri: str) -> LiveSession | None:
        try:
            return self.sessions.get(uris.session_id_of(uri))
        except ValueError:
            return None

    def chat_by_uri(self, uri: str) -> LiveChat | None:
        for session in self.sessions.values():
            chat = session.chats.get(uri)
            if chat is not None:
                return chat
        return None

    def resolve(self, uri: str) -> str | None:
        """Every spelling of a session or its default chat -> the URI the host holds it under."""
        session = self.session_by_uri(uri)
        if session is not None:
            return session.uri
        encoded = uris.session_of_default_chat(uri)
        if encoded is not None:
            session = self.session_by_uri(encoded)
            return session.state.get("defaultChat") if session else None
        if uris.is_chat_uri(uri) and not uri.startswith("ahp-chat://"):
            session = self.sessions.get(uri.split(":", 1)[1].lstrip("/"))
            return session.state.get("defaultChat") if session else None
        return None

    # -- views -----------------------------------------------------------------
    def summary(self, session: LiveSession) -> dict[str, Any]:
        return states.session_summary(
            session.uri,
            session.state,
            created_at=session.created_at,
            modified_at=session.modified_at,
        )

    def announce_count(self) -> None:
        self.apply(
            uris.ROOT_CHANNEL,
            {"type": "root/activeSessionsChanged", "activeSessions": len(self.sessions)},
        )

    # -- the store ----------------------------------------------------------------
    async def record(self, session_id: str) -> dict[str, Any]:
        if self.store is None:
            return {}
        return dict(await self.store.get(session_id) or {})

    def record_of(self, session: LiveSession, *, title: str | None = None) -> dict[str, Any]:
        state = session.state
        return {
            "uri": session.uri,
            "owner": session.owner,
            "provider": session.provider,
            "title": state.get("title", "") if title is None else title,
            "createdAt": session.created_at,
            "modifiedAt": session.modified_at,
            "workingDirectories": list(session.working_directories),
            "isRead": bool(state.get("status", 0) & states.STATUS_IS_READ),
            "isArchived": bool(state.get("status", 0) & states.STATUS_IS_ARCHIVED),
            "defaultChat": state.get("defaultChat"),
            "config": state.get("config", {}).get("values", {}),
            **({"origin": state["origin"]} if "origin" in state else {}),
            **({"_meta": kept} if (kept := states.kept_meta(state)) else {}),
            # Review comments live nowhere else: the backend's transcript does not hold them.
            **({"annotations": session.annotations} if session.annotations else {}),
            "chats": [
                self._chat_record(chat)
                for chat in self._in_order(session)
                if chat.parent is None  # a subagent's chat comes back from its transcript
            ],
        }

    @staticmethod
    def _in_order(session: LiveSession) -> list[LiveChat]:
        """The session's chats in the order its state lists them: a reorder
        (``session/chatsReordered``) is the person's, and outlives a restart."""
        order = {
            row.get("resource"): index
            for index, row in enumerate(session.state.get("chats") or ())
            if isinstance(row, dict)
        }
        return sorted(session.chats.values(), key=lambda chat: order.get(chat.uri, len(order)))

    @staticmethod
    def _chat_record(chat: LiveChat) -> dict[str, Any]:
        # A rename changes the session's row of the chat, which is the title to keep.
        row: dict[str, Any] = next(
            (r for r in chat.session.state.get("chats", []) if r.get("resource") == chat.uri), {}
        )
        active = chat.state.get("activeTurn")
        turns = [*chat.older_turns, *chat.state.get("turns", []), *([active] if active else [])]
        return {
            "uri": chat.uri,
            "backendId": chat.backend_id,
            "title": row.get("title", chat.state.get("title", "")),
            "isRead": bool(chat.state.get("status", 0) & states.STATUS_IS_READ),
            "isArchived": bool(chat.state.get("status", 0) & states.STATUS_IS_ARCHIVED),
            **({"draft": chat.state["draft"]} if "draft" in chat.state else {}),
            **({"origin": chat.state["origin"]} if "origin" in chat.state else {}),
            # What the chat produced that clients open by reference.
            **{key: chat.state[key] for key in ARTIFACT_KEYS if key in chat.state},
            # Who sent each turn: a transcript rebuilt from the backend does not say.
            **({"turnMeta": kept} if (kept := states.kept_turn_meta(turns)) else {}),
        }

    async def save(self, session: LiveSession, *, title: str | None = None) -> None:
        """Write the session's record; returns once the store holds it.

        ``title``: a title about to be applied, saved before anyone is told of it.
        """
        record = self.record_of(session, title=title)
        self._unindexed[session.id] = record
        self.unindexed_ids.add(session.id)
        if self.on_saving is not None:
            try:
                await self.on_saving(session)
            except Exception:
                # The store is what counts: the record is still written.
                log.exception("could not mark %s as being saved in the index", session.uri)
        if self.sessions.get(session.id) is not session:
            # Disposed while this save waited: writing now would bring the record back.
            self._unindexed.pop(session.id, None)
            return
        try:
            if self.store is not None:
                await self.store.put(session.id, record)
        except anyio.get_cancelled_exc_class():
            # The store finishes a write in its own shield, even for a caller
            # cancelled meanwhile (a stopping host): the index follows it.
            await self._index_newest(session)
            raise
        await self._index_newest(session)

    async def _index_newest(self, session: LiveSession) -> None:
        newest = self._unindexed.pop(session.id, None)
        if newest is None or self.on_saved is None:
            return
        # Shielded: cut off halfway, a restart would list an older row than the store's.
        with anyio.CancelScope(shield=True), anyio.move_on_after(INDEX_WAIT):
            try:
                await self.on_saved(session, newest)
            except Exception:
                # The store holds the record; the index catches up at the next save or start.
                log.exception("could not index the saved record of %s", session.uri)
                return
            if session.id not in self._unindexed:
                self.unindexed_ids.discard(session.id)

    def save_soon(self, session: LiveSession, *, within: float = 0.0) -> None:
        """Save the session's record in the background, within ``within`` seconds.

        At most one save waits per session: it writes whatever the session holds
        when it runs, so a burst of changes costs one write, not one each. A
        prompt save (``within`` 0) hurries one that waits.
        """
        hurry = self._saves_waiting.get(session.id)
        if hurry is not None:
            if within <= 0:
                hurry.set()
            return
        hurry = anyio.Event()
        if within <= 0:
            hurry.set()
        self._saves_waiting[session.id] = hurry
        self.spawn(self._save_waiting, session, hurry, within, name=f"saving {session.uri}")

    async def _save_waiting(self, session: LiveSession, hurry: anyio.Event, within: float) -> None:
        try:
            if not hurry.is_set():
                with anyio.move_on_after(within):
                    await hurry.wait()
        except anyio.get_cancelled_exc_class():
            # The host is stopping: what waited is written before the store closes.
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                await self._save_now(session, hurry)
            raise
        await self._save_now(session, hurry)

    async def _save_now(self, session: LiveSession, hurry: anyio.Event) -> None:
        if self._saves_waiting.get(session.id) is hurry:
            del self._saves_waiting[session.id]
        if self.sessions.get(session.id) is session:  # a disposed session stays deleted
            await self.save(session)

    # -- making and dropping sessions and chats -----------------------------------
    def new_chat(
        self, session: LiveSession, uri: str, backend_id: str, chat_state: dict[str, Any]
    ) -> LiveChat:
        chat = LiveChat(uri, session, backend_id, self.engine.add_channel(uri, "chat", chat_state))
        chat.runner = ChatRunner(chat, self, self.edits)
        session.chats[uri] = chat
        return chat

    def drop_chat(self, chat: LiveChat) -> None:
        chat.session.chats.pop(chat.uri, None)
        self.engine.remove_channel(chat.uri)

    def build(
        self,
        session_id: str,
        uri: str,
        backend: Backend,
        created_at: str,
        modified_at: str,
        directories: tuple[str, ...],
        config: dict[str, Any],
        *,
        lifecycle: str = "ready",
        record: dict[str, Any] | None = None,
        origin: Mapping[str, Any] | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> LiveSession:
        record = record or {}
        origin = origin or record.get("origin")
        default = uris.default_chat_uri(uri)
        kept: dict[str, Any] = next(
            (c for c in record.get("chats", []) if c.get("uri") == default), {}
        )
        chat_state = states.new_chat_state(
            default,
            title=kept.get("title", ""),
            modified_at=modified_at,
            working_directories=directories,
            movable=False,
            is_read=record.get("isRead", True),
        )
        session_state = states.new_session_state(
            provider=backend.provider,
            title=record.get("title", ""),
            chats=[chat_state],
            default_chat=default,
            working_directories=directories,
            config={
                "schema": {
                    "type": "object",
                    "properties": composer.config_properties(
                        backend, next(iter(directories), None), config
                    ),
                },
                "values": config,
            },
            is_read=record.get("isRead", True),
            is_archived=record.get("isArchived", False),
            lifecycle=lifecycle,
        )
        if origin:
            session_state["origin"] = dict(origin)
        kept = {**states.kept_meta(record), **(meta or {})}
        if kept:
            session_state["_meta"] = kept
        annotations = [dict(a) for a in record.get("annotations") or () if isinstance(a, dict)]
        session_state["annotations"] = states.annotations_summary(uri, annotations)
        session = LiveSession(
            id=session_id,
            uri=uri,
            provider=backend.provider,
            backend=backend,
            channel=self.engine.add_channel(uri, "session", session_state),
            created_at=created_at,
            modified_at=modified_at,
            working_directories=directories,
            annotations=annotations,
        )
        self.new_chat(session, default, session_id, chat_state)
        self.sessions[session_id] = session
        return session

    def ask_config_again(self, session: LiveSession) -> None:
        """The backend's config properties, asked again once the session's first agent
        started: an agent may tell its modes and options only as a session opens.

        The protocol has no action that changes a config schema, so it changes only
        while nobody watches the session (it is still being created, unannounced).
        """
        channel = self.engine.channels.get(session.uri)
        config = dict(session.state.get("config") or {})
        if channel is None or channel.subscribers or not config:
            return
        directories = session.state.get("workingDirectories") or ()
        values = dict(config.get("values") or {})
        properties = composer.config_properties(
            session.backend, next(iter(directories), None), values
        )
        if properties != config.get("schema", {}).get("properties"):
            schema = {"type": "object", "properties": properties}
            channel.state = {**channel.state, "config": {"schema": schema, "values": values}}

    def forget(self, session: LiveSession) -> None:
        for chat in list(session.chats.values()):
            self.engine.remove_channel(chat.uri)
        self.engine.remove_channel(session.uri)
        self.engine.remove_channel(uris.annotations_uri(session.uri))
        self.sessions.pop(session.id, None)
        self._unindexed.pop(session.id, None)  # a save still in flight leaves no row behind

    def restore_chat(self, session: LiveSession, stored: dict[str, Any]) -> LiveChat | None:
        """A chat the store says the session had, back under its URI and backend id."""
        uri, backend_id = stored.get("uri"), stored.get("backendId")
        if (
            not isinstance(uri, str)
            or not isinstance(backend_id, str)
            or uri in self.engine.channels
        ):
            return None
        chat_state = states.new_chat_state(
            uri,
            title=stored.get("title", ""),
            modified_at=session.modified_at,
            origin=stored.get("origin"),
            movable=session.backend.abilities.resume,
            working_directories=session.working_directories,
            is_read=stored.get("isRead", True),
            is_archived=stored.get("isArchived", False),
        )
        chat = self.new_chat(session, uri, backend_id, chat_state)
        chat.existing = True
        self.apply(
            session.uri, {"type": "session/chatAdded", "summary": states.chat_row(chat_state)}
        )
        return chat
