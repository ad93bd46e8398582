"""The session manager: wires the pieces of the sessions package into the host and serves
the session commands (createSession, disposeSession, listSessions) and reopening.

Who owns what (see docs/backend-contract.md):

- ``SessionRegistry`` (registry.py): the live sessions and chats, their channels
  and their records in the store.
- ``ChatRunner`` (runner.py): one chat's agent and its turns, one at a time.
- ``CatalogueIndex`` (catalogue.py): what ``listSessions`` pages through.
- ``ChatCommands`` (chats.py), ``ClientActions`` (actions.py), ``moves``,
  ``Follower`` (follow.py): the commands and client actions, each given the
  registry rather than this manager.

The manager calls the lifecycle moments (``ahpcore.lifecycle``) as sessions
are created and disposed; what other parts of the host do then is theirs.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import anyio

from ahpcore.engine.channels import Channel
from ahpcore.engine.clients import Client
from ahpcore.engine.core import Engine
from ahpcore.engine.router import Router
from ahpcore.lifecycle import Lifecycle, SessionCreation
from ahpcore.ports.backend import Backend, CatalogueRow
from ahpcore.protocol import uris
from ahpcore.protocol.errors import (
    INVALID_PARAMS,
    PROVIDER_NOT_FOUND,
    SESSION_ALREADY_EXISTS,
    SESSION_NOT_FOUND,
    ProtocolError,
)
from ahpcore.sessions import calls, moves
from ahpcore.sessions import state as states
from ahpcore.sessions.actions import ON_CHATS_TOO, ClientActions
from ahpcore.sessions.annotations import SessionAnnotations
from ahpcore.sessions.auth import Authenticator
from ahpcore.sessions.catalogue import ROWS_PER_TURN, CatalogueIndex, page_limit
from ahpcore.sessions.chats import TURN_WINDOW, ChatCommands
from ahpcore.sessions.failed import FailedSessions
from ahpcore.sessions.folders import check_folders
from ahpcore.sessions.follow import Follower
from ahpcore.sessions.live import LiveChat, LiveSession
from ahpcore.sessions.registry import ARTIFACT_KEYS, SessionRegistry
from ahpcore.sessions.reporter import EDIT_SCHEME
from ahpcore.sessions.servertools import ServerToolHost
from ahpcore.sessions.transcript import Rebuilder
from ahpcore.tasks import Tasks

log = logging.getLogger(__name__)


def capabilities(backend: Backend) -> dict[str, Any]:
    """``AgentCapabilities`` from a backend's abilities: what a client may use."""
    abilities = backend.abilities
    found: dict[str, Any] = {}
    if abilities.multiple_chats:
        chats: dict[str, Any] = {}
        if abilities.fork:
            chats["fork"] = True
        if abilities.side_chat:
            chats["sideChat"] = True
        found["multipleChats"] = chats
    if abilities.multiple_working_directories:
        directories: dict[str, Any] = {}
        if abilities.immutable_primary:
            directories["immutablePrimary"] = True
        if abilities.primary_replacement:
            directories["primaryReplacement"] = True
        found["multipleWorkingDirectories"] = directories
    return found


class SessionManager:
    def __init__(
        self,
        *,
        engine: Engine,
        router: Router,
        tasks: Tasks,
        lifecycle: Lifecycle,
        backends: Mapping[str, Backend],
        store: Any,
        decorate_rows: Callable[[list[dict[str, Any]]], Awaitable[None]],
        reconnect_grace: float,
    ) -> None:
        self.engine = engine
        self.router = router
        self.lifecycle = lifecycle
        self.backends: dict[str, Backend] = dict(backends)
        self._decorate_rows = decorate_rows
        self.registry = registry = SessionRegistry(engine, store, tasks, lifecycle, reconnect_grace)
        self.sessions = registry.sessions
        self.store = store
        path = getattr(self.store, "path", None)
        self.index = CatalogueIndex(Path(path) if path is not None else None)
        #: Sessions whose record the index holds.
        self._indexed_ids: set[str] = set()
        #: Sessions that could not be made, kept to be read and disposed of.
        self.failed = FailedSessions(
            engine, store, self.index, recovered=self._recovered, unsettle=self._unsettle
        )
        registry.on_saved = self._indexed
        registry.on_saving = lambda session: self._unsettle(session.id)
        #: Set once what an unclean stop left unindexed is indexed (see ``_recovered``).
        self._recovery: anyio.Event | None = None
        self.auth = Authenticator(
            self._protected_resources,
            tasks.spawn,
            self._signed_in,
            host_resources=lambda: self.engine.host_resources,
        )
        self.engine.on_disconnect(self.auth.disconnected)
        self._install()
        for backend in self.backends.values():
            attach = getattr(backend, "attach", None)
            if callable(attach):
                attach(self)
        self.publish_agents()

    # -- wiring ----------------------------------------------------------------
    def _install(self) -> None:
        router = self.router
        chat_commands = ChatCommands(
            self.registry, self.reopen_for, self.backend_for, self.auth.tokens
        )
        commands: dict[str, Callable[..., Any]] = {
            "createSession": self.create_session,
            "disposeSession": self.dispose_session,
            "moveChat": self.move_chat,
            "authenticate": self.auth.authenticate,
            "listSessions": self.list_sessions,
        }
        commands.update(chat_commands.routes())
        for method, handler in commands.items():
            router.add(method, handler)
        engine = self.engine
        engine.add_resolver(self.registry.resolve)
        engine.add_opener(self._open)
        self.follow = Follower(self.registry)
        for action_type, handler in ClientActions(self.registry).handlers().items():
            engine.on_action(action_type, handler, other_channels=action_type in ON_CHATS_TOO)
        # Every session's <uri>/annotations, opened when a client names it.
        self.annotations = SessionAnnotations(self.registry)
        self.server_tools = ServerToolHost(
            self.registry, page=self._rows_page, reopen=self.reopen_for
        )
        self.registry.server_tools_for = self.server_tools.for_chat

    async def _rows_page(
        self, limit: int, cursor: str | None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of sessions as listSessions answers it (a server tool lists them)."""
        params: dict[str, Any] = {"limit": limit}
        if cursor is not None:
            params["cursor"] = cursor
        listing = await self.list_sessions(None, params)  # type: ignore[arg-type]
        return list(listing["items"]), listing.get("nextCursor")

    async def move_chat(self, client: Client, params: dict[str, Any]) -> Any:
        return await moves.move_chat(self.registry, client, params)

    def read_edit(self, params: Mapping[str, Any]) -> dict[str, Any] | None:
        """``resourceRead`` of a pending edit's content (None for any other URI)."""
        uri = params.get("uri", "")
        if not (isinstance(uri, str) and uri.startswith(f"{EDIT_SCHEME}:")):
            return None
        content = self.registry.edits.read(uri)
        if content is None:
            raise ProtocolError(INVALID_PARAMS, f"{uri} is not pending: its approval was settled")
        return {"data": content, "encoding": "utf-8", "contentType": "text/plain"}

    # -- lookups other parts of the host use ----------------------------------------
    def session_by_uri(self, uri: str) -> LiveSession | None:
        return self.registry.session_by_uri(uri)

    def chat_by_uri(self, uri: str) -> LiveChat | None:
        return self.registry.chat_by_uri(uri)

    # -- agents ------------------------------------------------------------------
    def publish_agents(self) -> None:
        agents = []
        for backend in self.backends.values():
            for agent in backend.agents():
                info = dict(agent)
                if hasattr(backend, "abilities"):  # one that declares none claims none
                    info.setdefault("capabilities", capabilities(backend))
                # The host's own resources (ahp-users' people) are offered with every agent.
                own = [meta for meta, _ in self.engine.host_resources.values()]
                if own:
                    info["protectedResources"] = [*(info.get("protectedResources") or []), *own]
                agents.append(info)
        self.engine.apply(uris.ROOT_CHANNEL, {"type": "root/agentsChanged", "agents": agents})

    def agents_changed(self) -> None:
        """``BackendNotifier``: a backend's agents changed (models known once it runs)."""
        self.publish_agents()

    def backend_for(self, provider: Any) -> Backend:
        if provider is None:
            if len(self.backends) == 1:
                return next(iter(self.backends.values()))
            offered = ", ".join(sorted(self.backends)) or "none"
            raise ProtocolError(
                INVALID_PARAMS, f"params.provider: name a provider (this host serves: {offered})"
            )
        backend = self.backends.get(provider)
        if backend is None:
            offered = ", ".join(sorted(self.backends)) or "none"
            raise ProtocolError(
                PROVIDER_NOT_FOUND, f"no provider {provider!r} on this host (it serves: {offered})"
            )
        return backend

    # -- finding past sessions ---------------------------------------------------
    async def _open(self, uri: str) -> Channel | None:
        """Reopen a past session a backend lists, when a client names it or one of its chats.

        A client coming back after a restart may name a chat before its session.
        """
        if not uris.is_chat_uri(uri):
            try:
                session_id = uris.session_id_of(uri)
            except ValueError:
                return None
            failed = await self.failed.open(session_id)
            if failed is not None:
                return failed
            session = await self._reopen(session_id)
            return session.channel if session else None
        encoded = uris.session_of_default_chat(uri)
        if encoded is not None:
            session = await self._reopen(uris.session_id_of(encoded))
            return self._default_channel(session)
        if not uri.startswith("ahp-chat://"):
            # The older ahp-chat:/<sessionId> spelling of a default chat.
            session = await self._reopen(uri.split(":", 1)[1].lstrip("/"))
            if session is not None:
                return self._default_channel(session)
        session = await self._reopen_holding(uri)
        chat = session.chats.get(uri) if session is not None else None
        return chat.channel if chat is not None else None

    @staticmethod
    def _default_channel(session: LiveSession | None) -> Channel | None:
        if session is None:
            return None
        return session.chats[session.state["defaultChat"]].channel

    async def _reopen_holding(self, chat_uri: str) -> LiveSession | None:
        """The past session that had ``chat_uri`` among its chats (or a subagent chat of one)."""
        await self._recovered()
        owner = await self.index.session_holding(chat_uri)
        if owner is None and "/subagent/" in chat_uri:
            owner = await self.index.session_holding(chat_uri.split("/subagent/", 1)[0])
        if owner is not None:
            return await self._reopen(owner)
        if self.store is None:
            return None
        # Records kept before the index knew their chats: looked for once, the slow way.
        for session_id in await self.store.ids():
            record = await self.registry.record(session_id)
            if any(stored.get("uri") == chat_uri for stored in record.get("chats", [])):
                return await self._reopen(session_id)
        return None

    async def _find(self, session_id: str) -> tuple[Backend, CatalogueRow] | None:
        """One past session's backend and row: the index, then the backends' own lookup."""
        await self._recovered()
        held = await self.index.get(session_id)
        if held is not None and held[0] in self.backends:
            provider, listed, _ = held
            row = CatalogueRow(
                session_id,
                listed.get("title", ""),
                listed.get("createdAt", ""),
                listed.get("modifiedAt", ""),
                tuple(listed.get("workingDirectories") or ()),
            )
            return self.backends[provider], row
        for backend in self.backends.values():
            if not backend.abilities.list_sessions:
                continue
            try:
                lookup = getattr(backend, "lookup", None)
                if callable(lookup):
                    found = await calls.call(lookup, session_id)
                else:
                    await self.index.refresh(backend)
                    held = await self.index.get(session_id)
                    found = None
                    if held is not None and held[0] == backend.provider:
                        return await self._find(session_id)
            except Exception:
                log.exception("the %s backend could not look up %s", backend.provider, session_id)
                continue
            if found is not None:
                await self.index.put_one(backend.provider, found)
                return backend, found
        return None

    # -- the index across a crash ----------------------------------------------------
    async def _recovered(self) -> None:
        """Index what a host killed between saving and indexing left behind, once.

        Awaited before the index is first read and before the first save writes
        the store, so no record of this run is older than one read here. Lazy
        rather than at start: the first of those opens the index anyway.
        """
        if self._recovery is not None:
            if not self._recovery.is_set():  # set: nothing to wait for, not even a yield
                await self._recovery.wait()
            return
        self._recovery = anyio.Event()
        try:
            if self.store is not None:
                mended = await self.index.recover(self.store.get)
                if mended:
                    log.warning(
                        "the session list was behind the store for %d session(s) after an "
                        "unclean stop; indexed again",
                        len(mended),
                    )
        except Exception:
            log.exception("could not mend the session list after an unclean stop")
        finally:
            self._recovery.set()

    async def _unsettle(self, session_id: str) -> None:
        await self._recovered()
        await self.index.unsettle(session_id)

    async def close(self) -> None:
        """At a stop, once every save has ended: clear what the index knows to be in step."""
        try:
            unsure = set(self.registry.unindexed_ids)
            unsure.update(getattr(self.store, "dirty", ()))
            await self.index.settle(unsure)
        finally:
            self.index.close()

    # -- listSessions --------------------------------------------------------------
    async def list_sessions(self, client: Client, params: dict[str, Any]) -> dict[str, Any]:
        limit = page_limit(params.get("limit"))
        await self._recovered()
        listing = [b for b in self.backends.values() if b.abilities.list_sessions]
        behind = []
        for backend in listing:
            provider = backend.provider
            if not self.index.known(provider) and not await self.index.kept(provider):
                await self.index.refresh(backend)
            elif self.index.stale(provider):
                behind.append(backend)
        for session in list(self.sessions.values()):
            if session.id not in self._indexed_ids:
                await self._indexed(session, self.registry.record_of(session))
        failed = await self.failed.known()
        # A failed session is listed even when its provider is no longer served.
        providers = [*self.backends, *sorted(set(failed.values()) - set(self.backends))]
        items, next_cursor = await self.index.page(providers, limit, params.get("cursor"))
        for backend in behind:
            self.registry.spawn(self.index.refresh_later, backend, name="refreshing the catalogue")
        # A live session answers for itself: its state is newer than any row.
        live = {session.uri: self.registry.summary(session) for session in self.sessions.values()}
        listing_providers = {backend.provider for backend in listing}
        offered: list[dict[str, Any]] = []
        for start in range(0, len(items), ROWS_PER_TURN):
            if start:
                await anyio.sleep(0)  # a pass over 100,000 rows: other clients go between
            offered += [
                live.get(item["resource"], item)
                for item in items[start : start + ROWS_PER_TURN]
                # A past session of a backend that cannot list (or reopen) it is not offered.
                if item["resource"] in live
                or item["provider"] in listing_providers
                or _session_id(item["resource"]) in failed
            ]
        items = offered
        if len(items) > ROWS_PER_TURN:
            await anyio.sleep(0)
        await self._decorate_rows(items)
        result: dict[str, Any] = {"items": items}
        if next_cursor is not None:
            result["nextCursor"] = next_cursor
        return result

    async def _indexed(self, session: LiveSession, record: dict[str, Any]) -> None:
        await self.index.saved(session.id, session.provider, record)
        self._indexed_ids.add(session.id)

    # -- creating and disposing sessions ----------------------------------------
    async def create_session(self, client: Client, params: dict[str, Any]) -> None:
        await self._create_session(client, params)

    async def create_unattended(
        self, params: dict[str, Any], *, origin: Mapping[str, Any] | None = None
    ) -> None:
        """``createSession`` with nobody asking (an automation's run): the same checks and
        moments, no progress, no client's tokens, and ``origin`` on the session's state."""
        await self._create_session(None, params, origin)

    async def _create_session(
        self,
        client: Client | None,
        params: dict[str, Any],
        origin: Mapping[str, Any] | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        uri = params["channel"]
        try:
            session_id = uris.session_id_of(uri)
        except ValueError as exc:
            raise ProtocolError(INVALID_PARAMS, f"params.channel: {exc}") from None
        if session_id in self.sessions:
            raise ProtocolError(SESSION_ALREADY_EXISTS, f"session {uri} already exists")
        backend = self.backend_for(params.get("provider"))
        check_folders(tuple(params.get("workingDirectories") or ()))
        token = params.get("progressToken")
        steps = [0]

        def progress(message: str) -> None:
            if isinstance(token, str) and client is not None:
                steps[0] += 1
                self.engine.progress(client, token, steps[0], None, message)

        creation = SessionCreation(
            uri,
            dict(params),
            progress,
            meta=dict(meta or {}),
            local_folders=backend.abilities.local_folders,
        )
        try:
            await self.lifecycle.session_creating(creation)
            if creation.params.get("workingDirectories") != params.get("workingDirectories"):
                check_folders(tuple(creation.params.get("workingDirectories") or ()))
            await self._create(
                client, creation.params, backend, session_id, origin, meta=creation.meta
            )
        except BaseException:
            with anyio.CancelScope(shield=True):
                await creation.refused()
            raise
        await self.lifecycle.session_created(uri)

    async def _create(
        self,
        client: Client | None,
        params: dict[str, Any],
        backend: Backend,
        session_id: str,
        origin: Mapping[str, Any] | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        uri = params["channel"]
        directories = tuple(params.get("workingDirectories") or ())
        if len(directories) > 1 and not backend.abilities.multiple_working_directories:
            raise ProtocolError(
                INVALID_PARAMS,
                f"params.workingDirectories: the {backend.provider} backend works in one "
                "directory per session",
            )
        token = params.get("progressToken") if client is not None else None
        if isinstance(token, str) and client is not None:
            self.engine.progress(client, token, 0, 2, f"starting the {backend.provider} agent")
        now = states.now_iso()
        config = dict(params.get("config") or {})
        session = self.registry.build(
            session_id,
            uri,
            backend,
            now,
            now,
            directories,
            config,
            lifecycle="creating",
            origin=origin,
            meta=meta,
        )
        session.owner = client.client_id if client is not None else None
        self.server_tools.advertise(session)
        chat = session.chats[session.state["defaultChat"]]
        try:
            await chat.runner.start_agent(self.auth.tokens(client) if client is not None else None)
        except Exception as exc:
            self.registry.forget(session)
            raise ProtocolError(
                INVALID_PARAMS if isinstance(exc, ValueError) else -32603,
                f"the {backend.provider} backend could not start the session: {exc}",
            ) from None
        self.registry.ask_config_again(session)
        self.registry.apply(session.uri, {"type": "session/ready"})
        active = params.get("activeClient")
        if isinstance(active, dict) and client is not None and client.client_id:
            self.registry.apply(
                session.uri,
                {
                    "type": "session/activeClientSet",
                    "activeClient": {**active, "clientId": client.client_id},
                },
            )
        try:
            # On disk before anyone, the creator included, hears of the session.
            await self.registry.save(session)
        except Exception as exc:  # the store could not write: the session was not made
            await chat.runner.stop(for_good=True)
            self.registry.forget(session)
            raise ProtocolError(-32603, f"session {uri} not created: {exc}") from None
        log.info("session %s created (%s)", session.uri, backend.provider)
        session.last_summary = self.registry.summary(session)
        self.engine.notify_root("root/sessionAdded", {"summary": session.last_summary})
        self.registry.announce_count()
        if isinstance(token, str) and client is not None:
            self.engine.progress(client, token, 2, 2, "ready")

    async def _reopen(self, session_id: str) -> LiveSession | None:
        """A past session, rebuilt from its backend's transcript and this host's record."""
        if session_id in self.sessions:
            return self.sessions[session_id]
        found = await self._find(session_id)
        if found is None or session_id in self.sessions:
            return self.sessions.get(session_id)
        backend, row = found
        record = await self.registry.record(session_id)
        uri = record.get("uri") or uris.session_uri(backend.provider, session_id)
        session = self.registry.build(
            session_id,
            uri,
            backend,
            row.created_at,
            max(row.modified_at, record.get("modifiedAt", "")),
            tuple(row.working_directories),
            dict(record.get("config") or {}),
            record=record,
        )
        session.owner = record.get("owner")
        # The set a session keeps may be an older host's: it hears of the one it has now.
        self.server_tools.advertise(session)
        default = session.chats[session.state["defaultChat"]]
        default.existing = True
        for stored in record.get("chats", []):
            if stored.get("uri") == default.uri:
                default.references = dict(stored.get("references") or {})
        await self._rebuild(default)
        await self._seed_meta(session)
        for stored in record.get("chats", []):
            chat = (
                default
                if stored.get("uri") == default.uri
                else self.registry.restore_chat(session, stored)
            )
            if chat is None:
                continue
            if chat is not default:
                chat.references = dict(stored.get("references") or {})
                await self._rebuild(chat)
            kept = {key: stored[key] for key in ("draft", *ARTIFACT_KEYS) if key in stored}
            turn_meta = stored.get("turnMeta")
            if isinstance(turn_meta, dict) and turn_meta:
                kept["turns"] = states.with_turn_meta(list(chat.state.get("turns", [])), turn_meta)
                chat.older_turns = states.with_turn_meta(chat.older_turns, turn_meta)
            if kept:
                chat.channel.state = {**chat.state, **kept}
        order = [row["resource"] for row in session.state.get("chats", [])]
        stored_order = [
            stored["uri"]
            for stored in record.get("chats", [])
            if stored.get("uri") in session.chats
        ]
        if stored_order and len(stored_order) > 1 and stored_order != order[: len(stored_order)]:
            rest = [uri for uri in order if uri not in stored_order]
            self.registry.apply(
                session.uri, {"type": "session/chatsReordered", "chats": stored_order + rest}
            )
        session.last_summary = self.registry.summary(session)
        log.info("session %s reopened", session.uri)
        self.registry.announce_count()
        return session

    async def _seed_meta(self, session: LiveSession) -> None:
        """What the backend kept of a past session beyond any field, before its agent runs."""
        kept = getattr(session.backend, "session_meta", None)
        if kept is None:
            return
        default = session.chats[session.state["defaultChat"]]
        try:
            facts = dict(await calls.call(kept, default.backend_id) or {})
        except Exception:  # the session still opens; its agent says these again later
            log.exception(
                "reading what %s kept of %s failed", session.backend.provider, session.uri
            )
            return
        if facts:
            meta = {**(session.state.get("_meta") or {}), **facts}
            self.registry.apply(session.uri, {"type": "session/metaChanged", "_meta": meta})

    async def _rebuild(self, chat: LiveChat) -> None:
        rebuilder = Rebuilder(chat.uri, chat.state)
        await calls.call(chat.session.backend.read_transcript, chat.backend_id, rebuilder)
        rebuilder.finish_children("cancelled")
        # References a record of an older host kept, then those the transcript gave again.
        chat.references = {**chat.references, **rebuilder.references}
        turns = rebuilder.state.get("turns", [])
        chat.older_turns = list(turns[:-TURN_WINDOW]) if len(turns) > TURN_WINDOW else []
        rebuilt = {**rebuilder.state, "turns": list(turns[-TURN_WINDOW:])}
        if chat.older_turns:
            rebuilt["turnsNextCursor"] = str(len(chat.older_turns))
        chat.channel.state = rebuilt
        self.follow.sync_row(chat)
        for uri, state in rebuilder.children.items():
            if uri in chat.session.chats:
                continue
            origin = state.get("origin") or {}
            child = self.registry.child_chat(
                chat, str(origin.get("toolCallId", "")), state.get("title", "")
            )
            child.existing = True
            child.channel.state = state
            self.follow.sync_row(child)

    async def keep_failed(
        self, uri: str, state: Mapping[str, Any], error: Mapping[str, Any]
    ) -> None:
        """A session made with nobody asking (an automation's run) could not be made:
        ``state`` (what it was while being made) goes through ``session/creationFailed``
        and is kept, listed and announced, to be read and disposed of like any other."""
        await self.failed.keep(uri, state, error)

    async def dispose_session(self, client: Client, params: dict[str, Any]) -> None:
        uri = params["channel"]
        session = self.registry.session_by_uri(uri)
        if session is None:
            failed = await self.failed.channel(uri)
            if failed is not None:
                await self.lifecycle.session_disposing(failed.uri)
                await self.failed.dispose(failed.uri)
                await self.lifecycle.session_disposed(failed.uri, None)
                return
        if session is None:
            session = await self.reopen_for(uri)
        folder = uris.first_local_path(list(session.working_directories))
        for chat in list(session.chats.values()):
            await chat.runner.stop(for_good=True)
        await self.lifecycle.session_disposing(session.uri)
        backend = session.backend
        if backend.abilities.delete:
            for chat in session.chats.values():
                if chat.parent is not None:
                    continue  # a subagent's chat lives in its parent's transcript
                try:
                    await calls.call(backend.delete, chat.backend_id)
                except Exception:
                    log.exception(
                        "the %s backend could not delete %s", backend.provider, chat.backend_id
                    )
        else:
            log.info("the %s backend keeps its own copy of %s", backend.provider, session.uri)
        self.registry.forget(session)
        with self.registry.unsure_while(session.id):
            if self.store is not None:
                await self._unsettle(session.id)
                await self.store.delete(session.id)
            await self.index.forget(session.id)
        self._indexed_ids.discard(session.id)
        log.info("session %s disposed", session.uri)
        self.engine.notify_root("root/sessionRemoved", {"session": session.uri})
        self.registry.announce_count()
        await self.lifecycle.session_disposed(session.uri, folder)

    async def reopen_for(self, uri: str) -> LiveSession:
        try:
            session_id = uris.session_id_of(uri)
        except ValueError as exc:
            raise ProtocolError(INVALID_PARAMS, f"params.channel: {exc}") from None
        session = await self._reopen(session_id)
        if session is None:
            raise ProtocolError(SESSION_NOT_FOUND, f"no session {uri} on this host")
        return session

    # -- sign-ins ------------------------------------------------------------------
    def _protected_resources(self) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        for backend in self.backends.values():
            for agent in backend.agents():
                for resource in agent.get("protectedResources") or []:
                    found.setdefault(resource["resource"], dict(resource))
        # A tool call blocked on a sign-in asks for its server's resource too.
        for session in self.sessions.values():
            for ask in session.asks.values():
                if ask.kind == "toolAuthentication" and ask.resource is not None:
                    found.setdefault(ask.resource, {"resource": ask.resource})
        return found

    def _signed_in(self, resource: str, token: str) -> None:
        for session in self.sessions.values():
            for ask in list(session.asks.values()):
                if ask.kind == "toolAuthentication" and ask.resource == resource:
                    ask.settle(token)


def _session_id(uri: str) -> str | None:
    try:
        return uris.session_id_of(uri)
    except ValueError:
        return None
