"""Changeset channels over the changes port.

The core side of ``<sessionUri>/changeset/<scope>``: channels opened on
subscribe, the turn marks a ``turn/{turnId}`` scope compares, re-reads when
something moved (coalesced per directory, silent when nothing did), the
choice between per-file actions and ``changeset/contentChanged``,
``invokeChangesetOperation``, the changeset catalogue a chat announces, and
``resourceRead`` of the port's own URIs. It learns of turns and tool calls
from the engine's change listeners, so the session machinery knows nothing of
it, and takes part in the lifecycle moments (``ahpcore.lifecycle``): a
changeset is read again before a client subscribes to it, a client's
``resourceWrite`` is something that moved, and a disposed session's changesets
and marks go with it. The host builds it when a plugin provides the changes port.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import anyio

from ahpcore.engine.channels import Channel
from ahpcore.engine.clients import Client
from ahpcore.engine.core import Engine
from ahpcore.engine.router import Router
from ahpcore.markers import hookimpl
from ahpcore.ports import ChangeScope, ChangesPort
from ahpcore.protocol.errors import INVALID_PARAMS, NOT_FOUND, ProtocolError
from ahpcore.protocol.uris import session_id_of, session_of_default_chat
from ahpcore.services.changeset_marks import (
    _ENDS,
    SEGMENT,
    Mark,
    SessionBook,
    TurnMarks,
    _value,
    choose_actions,
    directory_of,
    split_changeset_uri,
)
from ahpcore.services.resources import ResourceService
from ahpcore.tasks import Tasks

log = logging.getLogger(__name__)


#: The changes ``_changed`` acts on; it is not called for any other.
_TOLD_OF = frozenset(
    {
        "session/titleChanged",
        "session/ready",
        "terminal/exited",
        "terminal/commandFinished",
        "chat/turnStarted",
        "chat/toolCallComplete",
        *_ENDS,
    }
)


class ChangesetService:
    def __init__(
        self,
        engine: Engine,
        router: Router,
        tasks: Tasks,
        port: ChangesPort,
        resources: ResourceService,
    ) -> None:
        self.port = port
        self.tasks = tasks
        self.engine = engine
        self.books: dict[str, SessionBook] = {}
        #: Directory -> the cancel scope of its watcher.
        self._watchers: dict[str, anyio.CancelScope] = {}
        self._reading: set[str] = set()
        self._locks: dict[str, anyio.Lock] = {}
        self._again: set[str] = set()
        engine = self.engine
        engine.add_opener(self._open)
        engine.add_resolver(self._resolve)
        engine.on_change(self._changed, types=_TOLD_OF)
        engine.on_unsubscribe(lambda client, uri: self._sweep())
        engine.on_disconnect(lambda client: self._sweep(leaving=client))
        engine.on_reconnect(self._reconnected)
        router.add("invokeChangesetOperation", self.invoke)
        resources.add_reader(self._read_own, first=True)

    # -- where things are ------------------------------------------------------------
    def book(self, session: str) -> SessionBook:
        return self.books.setdefault(session, SessionBook())

    def _session_channel(self, session: str) -> Channel | None:
        channel = self.engine.channels.get(self.engine.canonical(session))
        return channel if channel is not None and channel.kind == "session" else None

    def _session_of_chat(self, chat: str) -> str | None:
        for channel in self.engine.channels.values():
            if channel.kind == "session" and any(
                row.get("resource") == chat for row in channel.state.get("chats") or ()
            ):
                return channel.uri
        default = session_of_default_chat(chat)
        return self.engine.canonical(default) if default else None

    def _resolve(self, uri: str) -> str | None:
        parts = split_changeset_uri(uri)
        if parts is None:
            return None
        session = self.engine.canonical(parts[0])
        return session + SEGMENT + parts[1] if session != parts[0] else None

    def _changesets_of(self, directory: str) -> list[Channel]:
        found = []
        for channel in self.engine.channels.values():
            if channel.kind != "changeset":
                continue
            session = self._session_channel(channel.uri.partition(SEGMENT)[0])
            if session is not None and directory_of(session.state) == directory:
                found.append(channel)
        return found

    def _context(self, session: str) -> dict[str, Any]:
        book = self.book(session)
        channel = self._session_channel(session)
        title = channel.state.get("title", "") if channel is not None else ""
        return {"busy": bool(book.running), "title": title, "spoken": bool(book.order)}

    async def _scope(self, session: str, name: str) -> ChangeScope | None:
        parts = name.split("/")
        book = self.book(session)
        if parts == ["uncommitted"]:
            return ChangeScope(name, "uncommitted")
        if parts == ["session"]:
            if book.order:
                return ChangeScope(name, "session", await _value(book.turns[book.order[0]].start))
            directory = self._directory_of_session(session)
            kept = await self.port.recall(directory, (_id(session), "first")) if directory else None
            return ChangeScope(name, "session", kept)
        if len(parts) == 2 and parts[0] == "turn":
            marks = book.turns.get(parts[1]) or await self._recalled(session, parts[1])
            if marks is None:
                return None
            return ChangeScope(name, "turn", await _value(marks.start), await _value(marks.end))
        if len(parts) == 3 and parts[0] == "compare":
            a = book.turns.get(parts[1]) or await self._recalled(session, parts[1])
            b = book.turns.get(parts[2]) or await self._recalled(session, parts[2])
            if a is None or b is None:
                return None
            return ChangeScope(name, "compare", await _value(a.end or a.start), await _value(b.end))
        return None

    def _directory_of_session(self, session: str) -> str | None:
        channel = self._session_channel(session)
        return directory_of(channel.state) if channel is not None else None

    async def _recalled(self, session: str, turn_id: str) -> TurnMarks | None:
        """A turn from before the host started, from the marks the port kept."""
        directory = self._directory_of_session(session)
        if directory is None:
            return None
        sid = _id(session)
        start = await self.port.recall(directory, (sid, turn_id, "start"))
        if start is None:
            return None
        marks = TurnMarks()
        marks.start.set(start)
        end = await self.port.recall(directory, (sid, turn_id, "end"))
        if end is not None:
            marks.end = Mark()
            marks.end.set(end)
        self.book(session).turns.setdefault(turn_id, marks)
        return self.book(session).turns[turn_id]

    # -- channels ------------------------------------------------------------------------
    async def _open(self, uri: str) -> Channel | None:
        parts = split_changeset_uri(uri)
        if parts is None:
            return None
        session_channel = await self.engine.open_channel(parts[0])
        if session_channel is None or session_channel.kind != "session":
            return None
        directory = directory_of(session_channel.state)
        scope = await self._scope(session_channel.uri, parts[1])
        if directory is None or scope is None:
            return None
        canonical = session_channel.uri + SEGMENT + parts[1]
        files, operations = await self._read(directory, session_channel.uri, scope)
        existing = self.engine.channels.get(canonical)
        if existing is not None:  # opened by another subscriber while this one read
            return existing
        state: dict[str, Any] = {"status": "ready", "files": files}
        if operations:
            state["operations"] = operations
        channel = self.engine.add_channel(canonical, "changeset", state)
        if scope.after is None:
            self._watch(directory)
        return channel

    async def _read(
        self, directory: str, session: str, scope: ChangeScope
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        files = [dict(row) for row in await self.port.files(directory, scope)]
        operations = [
            dict(op) for op in await self.port.operations(directory, scope, self._context(session))
        ]
        return files, operations

    def _sweep(self, leaving: Client | None = None) -> None:
        """Stop watching folders nobody looks at a changeset of.

        The channels stay (with their review marks), and are brought up to date
        when somebody subscribes again or comes back.
        """
        watched: set[str] = set()
        for channel in self.engine.channels.values():
            if channel.kind != "changeset":
                continue
            if any(client is not leaving for client in channel.subscribers):
                directory = self._directory_of_changeset(channel.uri)
                if directory is not None:
                    watched.add(directory)
        for directory in list(self._watchers):
            if directory not in watched:
                self._watchers.pop(directory).cancel()

    def _directory_of_changeset(self, uri: str) -> str | None:
        session = self._session_channel(uri.partition(SEGMENT)[0])
        return directory_of(session.state) if session is not None else None

    async def _freshen(self, uri: str) -> None:
        """A changeset kept while nobody watched is read again before it is handed out."""
        channel = self.engine.channels.get(self.engine.canonical(uri))
        if channel is None or channel.kind != "changeset":
            return
        directory = self._directory_of_changeset(channel.uri)
        if directory is None or directory in self._watchers:
            return
        await self.refresh(directory, only=channel)
        self._watch(directory)

    def _reconnected(self, client: Client, uris: list[str]) -> None:
        for uri in uris:
            channel = self.engine.channels.get(uri)
            if channel is None or channel.kind != "changeset":
                continue
            directory = self._directory_of_changeset(uri)
            if directory is not None and directory not in self._watchers:
                self._watch(directory)  # its first read sends what moved meanwhile

    # -- lifecycle ---------------------------------------------------------------------
    @hookimpl
    async def ahp_channel_subscribing(self, channel: str) -> None:
        await self._freshen(channel)

    @hookimpl
    def ahp_resource_written(self, uri: str) -> None:
        self._touched(uri)

    @hookimpl
    async def ahp_session_disposed(self, session: str, folder: str | None) -> None:
        """A disposed session's changesets go with it: every channel under its URI."""
        prefix = session + SEGMENT
        for uri in [uri for uri in self.engine.channels if uri.startswith(prefix)]:
            self.engine.remove_channel(uri)
        self.books.pop(session, None)
        self._sweep()
        if folder is not None:
            await self.port.forget(folder, (_id(session),))

    def _watch(self, directory: str) -> None:
        if directory in self._watchers or not self.tasks.running:
            return
        scope = anyio.CancelScope()
        self._watchers[directory] = scope

        async def watch() -> None:
            with scope:
                try:
                    await self.port.watch(directory, lambda: self.moved(directory))
                except Exception:
                    log.exception("watching %s for changes failed", directory)

        self.tasks.spawn(watch, name=f"watch {directory}")

    # -- re-reading ------------------------------------------------------------------
    def moved(self, directory: str, *, announce: bool = False) -> None:
        """Something in ``directory`` may have moved: re-read its changesets, coalesced."""
        if directory not in self._watchers:
            return  # nobody looks: read when somebody subscribes again
        if directory in self._reading:
            self._again.add(directory)
            return
        if self.tasks.running:
            self._reading.add(directory)
            self.tasks.spawn(self._reread, directory, announce)

    async def _reread(self, directory: str, announce: bool) -> None:
        try:
            while True:
                self._again.discard(directory)
                await self.refresh(directory, announce=announce)
                if directory not in self._again:
                    return
        finally:
            self._reading.discard(directory)

    async def publish_facts(self, directory: str) -> None:
        """``_meta.git`` on every session in ``directory``, when what the port says moved."""
        try:
            facts = await self.port.facts(directory)
        except Exception as exc:
            log.warning("reading the facts of %s failed: %s", directory, exc)
            return
        for channel in list(self.engine.channels.values()):
            if channel.kind != "session" or directory_of(channel.state) != directory:
                continue
            meta = dict(channel.state.get("_meta") or {})
            if meta.get("git") == facts or (facts is None and "git" not in meta):
                continue
            if facts is None:
                meta.pop("git", None)
            else:
                meta["git"] = dict(facts)
            # The session's row follows from its state: root/sessionAdded carries the
            # facts when they came first, root/sessionSummaryChanged when they came later.
            self.engine.apply(channel.uri, {"type": "session/metaChanged", "_meta": meta})

    async def refresh(
        self, directory: str, *, announce: bool = False, only: Channel | None = None
    ) -> None:
        """Re-read every open changeset of ``directory`` (or just ``only``); send what moved."""
        await self.publish_facts(directory)
        for channel in [only] if only is not None else self._changesets_of(directory):
            session, _, name = channel.uri.partition(SEGMENT)
            scope = await self._scope(session, name)
            if scope is None:
                continue
            status = channel.state.get("status")
            if announce:
                self._apply(channel, {"type": "changeset/statusChanged", "status": "recomputing"})
            try:
                files, operations = await self._read(directory, session, scope)
            except Exception as exc:
                log.warning("re-reading %s failed: %s", channel.uri, exc)
                error = {"errorType": type(exc).__name__, "message": str(exc)}
                self._apply(
                    channel, {"type": "changeset/statusChanged", "status": "error", "error": error}
                )
                continue
            if channel.uri not in self.engine.channels:
                continue
            for action in choose_actions(list(channel.state.get("files") or []), files):
                self._apply(channel, action)
            # A failure stays on its operation until it is pressed again, and one
            # running stays running until it ends: a re-read meanwhile (the
            # operation's own writes wake the watcher) must not show it idle.
            held = {
                op.get("id"): op
                for op in channel.state.get("operations") or ()
                if op.get("status") in ("error", "running")
            }
            for op in operations:
                prior = held.get(op.get("id"))
                if prior is not None and op.get("status") == "idle":
                    op["status"] = prior["status"]
                    if prior.get("error") is not None:
                        op["error"] = prior["error"]
            if operations != (channel.state.get("operations") or []):
                self._apply(
                    channel, {"type": "changeset/operationsChanged", "operations": operations}
                )
            if announce or status != "ready":
                self._apply(channel, {"type": "changeset/statusChanged", "status": "ready"})

    def _apply(self, channel: Channel, action: dict[str, Any]) -> None:
        if self.engine.channels.get(channel.uri) is channel:
            self.engine.apply(channel.uri, action)

    # -- turns -------------------------------------------------------------------------
    def _changed(self, channel: Channel, action: dict[str, Any], before: dict[str, Any]) -> None:
        kind = action.get("type", "")
        if channel.kind == "session" and kind == "session/titleChanged":
            directory = directory_of(channel.state)
            if directory is not None:
                self.moved(directory)
            return
        if channel.kind == "session" and kind == "session/ready" and self.tasks.running:
            directory = directory_of(channel.state)
            chat = channel.state.get("defaultChat")
            if directory is not None:
                self.tasks.spawn(self._session_ready, channel.uri, chat, directory)
            return
        if channel.kind == "terminal" and kind in ("terminal/exited", "terminal/commandFinished"):
            self._touched(channel.state.get("cwd"))
            return
        if channel.kind != "chat" or not self.tasks.running:
            return
        if kind == "chat/turnStarted":
            self._turn_started(channel, action["turnId"])
        elif kind in _ENDS and action.get("turnId"):
            self._turn_ended(channel.uri, action["turnId"])
        elif kind == "chat/toolCallComplete":
            directory = self._directory_of_chat(channel.uri)
            if directory is not None:
                self.moved(directory)

    def _touched(self, uri: Any) -> None:
        """Something wrote at ``uri`` (a terminal's folder, a file a client wrote): re-read
        the watched folders it is in or over."""
        if not isinstance(uri, str):
            return
        path = directory_of({"workingDirectories": [uri]}) if "://" in uri else uri
        if path is None:
            return
        for directory in list(self._watchers):
            inside = path == directory or path.startswith(directory.rstrip("/") + "/")
            if inside or directory.startswith(path.rstrip("/") + "/"):
                self.moved(directory)

    def _directory_of_chat(self, chat: str) -> str | None:
        session = self._session_of_chat(chat)
        channel = self._session_channel(session) if session else None
        return directory_of(channel.state) if channel is not None else None

    def _turn_started(self, chat: Channel, turn_id: str) -> None:
        session = self._session_of_chat(chat.uri)
        directory = self._directory_of_chat(chat.uri)
        if session is None or directory is None:
            return
        book = self.book(session)
        marks = book.turns.setdefault(turn_id, TurnMarks())
        if turn_id not in book.order:
            book.order.append(turn_id)
        book.running.add(turn_id)

        async def started() -> None:
            try:
                value = await self.port.mark(directory)
                marks.start.set(value)
                if value is not None:
                    sid = _id(session)
                    await self.port.keep(directory, (sid, turn_id, "start"), value)
                    if await self.port.recall(directory, (sid, "first")) is None:
                        await self.port.keep(directory, (sid, "first"), value)
            except Exception:
                marks.start.set(None)
                log.exception("marking %s at the start of turn %s failed", directory, turn_id)
            await self._announce(session, chat.uri, directory)
            await self.refresh(directory)

        self.tasks.spawn(started, name=f"mark {turn_id}")

    def _turn_ended(self, chat: str, turn_id: str) -> None:
        session = self._session_of_chat(chat)
        directory = self._directory_of_chat(chat)
        if session is None or directory is None:
            return
        book = self.book(session)
        book.running.discard(turn_id)
        marks = book.turns.get(turn_id)
        if marks is None:
            return
        end = marks.end = Mark()

        async def ended() -> None:
            try:
                await marks.start.ready.wait()
                value = await self.port.mark(directory)
                end.set(value)
                if value is not None:
                    await self.port.keep(directory, (_id(session), turn_id, "end"), value)
            except Exception:
                end.set(None)
                log.exception("marking %s at the end of turn %s failed", directory, turn_id)
            await self.refresh(directory, announce=True)

        self.tasks.spawn(ended, name=f"mark end {turn_id}")

    async def _session_ready(self, session: str, chat: Any, directory: str) -> None:
        await self.publish_facts(directory)
        if isinstance(chat, str):
            await self._announce(session, chat, directory)

    async def _announce(self, session: str, chat: str, directory: str) -> None:
        """chat/changesetsChanged (and the session's) once a chat has done something."""
        book = self.book(session)
        if chat in book.announced:
            return
        entries = await self.port.catalogue(directory)
        if not entries:
            return
        book.announced.add(chat)
        changesets = [
            {**entry, "uriTemplate": session + SEGMENT + entry["uriTemplate"]} for entry in entries
        ]
        if chat in self.engine.channels:
            self.engine.apply(chat, {"type": "chat/changesetsChanged", "changesets": changesets})
        if session in self.engine.channels:
            self.engine.apply(
                session, {"type": "session/changesetsChanged", "changesets": changesets}
            )

    # -- commands ------------------------------------------------------------------------
    async def invoke(self, client: Client, params: dict[str, Any]) -> dict[str, Any]:
        channel = await self.engine.open_channel(params["channel"])
        if channel is None or channel.kind != "changeset":
            raise ProtocolError(NOT_FOUND, f"params.channel: no changeset {params['channel']}")
        session, _, name = channel.uri.partition(SEGMENT)
        session_channel = self._session_channel(session)
        directory = directory_of(session_channel.state) if session_channel else None
        scope = await self._scope(session, name)
        if directory is None or scope is None:
            raise ProtocolError(NOT_FOUND, f"params.channel: no changeset {params['channel']}")
        op_id = params["operationId"]
        offered = {op.get("id"): op for op in channel.state.get("operations") or ()}
        if op_id not in offered:
            raise ProtocolError(
                INVALID_PARAMS,
                f"params.operationId: {op_id!r} is not offered here; this changeset offers "
                + (", ".join(sorted(map(str, offered))) or "none"),
            )
        context = self._context(session)

        def status(value: str, error: dict[str, str] | None = None) -> None:
            action: dict[str, Any] = {
                "type": "changeset/operationStatusChanged",
                "operationId": op_id,
                "status": value,
            }
            if error is not None:
                action["error"] = error
            self._apply(channel, action)

        status("running")
        try:
            # One operation at a time per folder: git's index takes one writer.
            async with self._locks.setdefault(directory, anyio.Lock()):
                result = dict(await self.port.invoke(directory, scope, params, context))
        except anyio.get_cancelled_exc_class():
            # Its caller is gone (or the host stops): it is no longer running, and a
            # re-read keeps a running status, so it must be ended here.
            status("idle")
            raise
        except ProtocolError as error:
            status("error", {"errorType": "refused", "message": error.message})
            await self.refresh(directory)
            raise
        except Exception as exc:
            log.exception("operation %s on %s failed", op_id, channel.uri)
            status("error", {"errorType": type(exc).__name__, "message": str(exc)})
            raise ProtocolError(-32603, f"{op_id} failed: {exc}") from None
        status("idle")
        await self.refresh(directory, announce=True)
        return result

    async def _read_own(self, params: Mapping[str, Any]) -> Any:
        """``resourceRead`` of the port's own URIs (before sides), ahead of anyone else."""
        port = self.port
        return await port.read(params) if port.serves(str(params.get("uri", ""))) else None


def _id(session: str) -> str:
    """The id a session URI names (what marks are kept under), or the URI itself."""
    try:
        return session_id_of(session)
    except ValueError:
        return session
