"""The session manager: the session and chat commands, the client actions that need more
than a reducer, and everything a backend reports.

It holds the live sessions; a session's record in the store keeps what the host
adds on top of a backend (read and archived bits, titles, config, chat order,
drafts), keyed by the session's id so every spelling of its URI finds it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio

from ahpcore.engine.channels import Channel
from ahpcore.engine.clients import Client
from ahpcore.engine.core import Engine
from ahpcore.engine.router import resolve
from ahpcore.protocol import uris
from ahpcore.protocol.errors import (
    INVALID_PARAMS,
    PROVIDER_NOT_FOUND,
    SESSION_ALREADY_EXISTS,
    SESSION_NOT_FOUND,
    ProtocolError,
)
from ahpcore.sessions import calls, composer, moves
from ahpcore.sessions import state as states
from ahpcore.sessions.actions import ClientActions
from ahpcore.sessions.auth import Authenticator
from ahpcore.sessions.catalogue import Cursors, page
from ahpcore.sessions.chats import TURN_WINDOW, ChatCommands
from ahpcore.sessions.contract import (
    Backend,
    CataloguePage,
    CatalogueRow,
    ChatStart,
    TurnInput,
)
from ahpcore.sessions.follow import Follower
from ahpcore.sessions.live import ChatAsker, LiveChat, LiveSession
from ahpcore.sessions.transcript import Rebuilder
from ahpcore.sessions.turns import TurnRecorder

if TYPE_CHECKING:
    from ahpcore.host import Host

log = logging.getLogger(__name__)

TITLE_LENGTH = 80
#: A chat's references to what it made (changesets, canvases), kept across restarts.
ARTIFACT_KEYS = ("changesets", "canvases")


class SessionManager:
    def __init__(self, host: Host) -> None:
        self.host = host
        self.engine: Engine = host.engine_or_fail
        self.backends: dict[str, Backend] = dict(host.backends)
        self.store = host.session_store
        self.sessions: dict[str, LiveSession] = {}
        self.cursors = Cursors()
        self.auth = Authenticator(self._protected_resources, host.spawn, self._signed_in)
        self._install()

    # -- wiring ----------------------------------------------------------------
    def _install(self) -> None:
        router = self.host.router
        commands: dict[str, Callable[..., Any]] = {
            "createSession": self.create_session,
            "disposeSession": self.dispose_session,
            "moveChat": self.move_chat,
            "authenticate": self.auth.authenticate,
        }
        commands.update(ChatCommands(self).routes())
        for method, handler in commands.items():
            router.add(method, handler)
        router.routes.pop("listSessions", None)
        router.add("listSessions", self.list_sessions)
        engine = self.engine
        engine.add_resolver(self._resolve)
        engine.add_opener(self._open)
        self.follow = Follower(self)
        for action_type, handler in ClientActions(self).handlers().items():
            engine.on_action(action_type, handler)

    def apply(self, uri: str, action: dict[str, Any]) -> dict[str, Any] | None:
        return self.engine.apply(uri, action)

    async def move_chat(self, client: Client, params: dict[str, Any]) -> dict[str, Any]:
        return await moves.move_chat(self, client, params)

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

    def _resolve(self, uri: str) -> str | None:
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

    async def _open(self, uri: str) -> Channel | None:
        """Reopen a past session a backend lists, when a client names it or one of its chats.

        A client coming back after a restart may name a chat before its session.
        """
        if not uris.is_chat_uri(uri):
            try:
                session_id = uris.session_id_of(uri)
            except ValueError:
                return None
            session = await self._reopen(session_id, uri)
            return session.channel if session else None
        encoded = uris.session_of_default_chat(uri)
        if encoded is not None:
            session = await self._reopen(uris.session_id_of(encoded), encoded)
            return self._default_channel(session)
        if not uri.startswith("ahp-chat://"):
            # The older ahp-chat:/<sessionId> spelling of a default chat.
            session = await self._reopen(uri.split(":", 1)[1].lstrip("/"), uri)
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
        """The past session whose stored record lists ``chat_uri`` among its chats."""
        if self.store is None:
            return None
        for session_id in await self.store.ids():
            record = await self._record(session_id)
            if any(stored.get("uri") == chat_uri for stored in record.get("chats", [])):
                return await self._reopen(session_id, record.get("uri", ""))
        return None

    # -- the catalogue -----------------------------------------------------------
    async def _catalogue(self) -> dict[str, tuple[Backend, CatalogueRow]]:
        found: dict[str, tuple[Backend, CatalogueRow]] = {}
        for backend in self.backends.values():
            if not backend.abilities.list_sessions:
                continue
            try:
                answer = await calls.call(
                    backend.catalogue,
                )
            except Exception:
                log.exception("the %s backend could not list its sessions", backend.provider)
                continue
            rows = answer.rows if isinstance(answer, CataloguePage) else answer
            for row in rows:
                found.setdefault(row.session_id, (backend, row))
        return found

    async def _record(self, session_id: str) -> dict[str, Any]:
        if self.store is None:
            return {}
        return dict(await self.store.get(session_id) or {})

    async def _save(self, session: LiveSession) -> None:
        if self.store is None:
            return
        state = session.state
        record = {
            "uri": session.uri,
            "owner": session.owner,
            "provider": session.provider,
            "title": state.get("title", ""),
            "createdAt": session.created_at,
            "modifiedAt": session.modified_at,
            "workingDirectories": list(session.working_directories),
            "isRead": bool(state.get("status", 0) & states.STATUS_IS_READ),
            "isArchived": bool(state.get("status", 0) & states.STATUS_IS_ARCHIVED),
            "defaultChat": state.get("defaultChat"),
            "config": state.get("config", {}).get("values", {}),
            "chats": [
                {
                    "uri": chat.uri,
                    "backendId": chat.backend_id,
                    "title": chat.state.get("title", ""),
                    "isRead": bool(chat.state.get("status", 0) & states.STATUS_IS_READ),
                    "isArchived": bool(chat.state.get("status", 0) & states.STATUS_IS_ARCHIVED),
                    **({"draft": chat.state["draft"]} if "draft" in chat.state else {}),
                    **({"origin": chat.state["origin"]} if "origin" in chat.state else {}),
                    # What the chat produced that clients open by reference.
                    **{key: chat.state[key] for key in ARTIFACT_KEYS if key in chat.state},
                }
                for chat in session.chats.values()
            ],
        }
        await self.store.put(session.id, record)

    def save_soon(self, session: LiveSession) -> None:
        if self.store is not None:
            self.host.spawn(self._save, session)

    async def list_sessions(self, client: Client, params: dict[str, Any]) -> dict[str, Any]:
        rows = [self.summary(session) for session in self.sessions.values()]
        for session_id, (backend, row) in (await self._catalogue()).items():
            if session_id in self.sessions:
                continue
            record = await self._record(session_id)
            rows.append(self._row_summary(backend, row, record))
        return page(rows, self.cursors, params.get("limit"), params.get("cursor"))

    @staticmethod
    def _row_summary(backend: Backend, row: CatalogueRow, record: dict[str, Any]) -> dict[str, Any]:
        uri = record.get("uri") or uris.session_uri(backend.provider, row.session_id)
        status = states.flags(
            states.STATUS_IDLE,
            is_read=record.get("isRead", True),
            is_archived=record.get("isArchived", False),
        )
        summary: dict[str, Any] = {
            "resource": uri,
            "provider": backend.provider,
            "title": record.get("title") or row.title,
            "status": status,
            "createdAt": row.created_at,
            "modifiedAt": max(row.modified_at, record.get("modifiedAt", "")),
        }
        if row.working_directories:
            summary["workingDirectories"] = list(row.working_directories)
        return summary

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

    # -- creating and disposing sessions ----------------------------------------
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

    async def create_session(self, client: Client, params: dict[str, Any]) -> None:
        uri = params["channel"]
        try:
            session_id = uris.session_id_of(uri)
        except ValueError as exc:
            raise ProtocolError(INVALID_PARAMS, f"params.channel: {exc}") from None
        if session_id in self.sessions:
            raise ProtocolError(SESSION_ALREADY_EXISTS, f"session {uri} already exists")
        backend = self.backend_for(params.get("provider"))
        token = params.get("progressToken")
        if isinstance(token, str):
            self.engine.progress(client, token, 0, 2, f"starting the {backend.provider} agent")
        now = states.now_iso()
        directories = tuple(params.get("workingDirectories") or ())
        config = dict(params.get("config") or {})
        session = self._build(
            session_id, uri, backend, now, now, directories, config, lifecycle="creating"
        )
        session.owner = client.client_id
        chat = session.chats[session.state["defaultChat"]]
        try:
            await self.start_agent(chat, tokens=self.tokens(client))
        except Exception as exc:
            self._forget(session)
            raise ProtocolError(
                INVALID_PARAMS if isinstance(exc, ValueError) else -32603,
                f"the {backend.provider} backend could not start the session: {exc}",
            ) from None
        self.apply(session.uri, {"type": "session/ready"})
        active = params.get("activeClient")
        if isinstance(active, dict) and client.client_id:
            self.apply(
                session.uri,
                {
                    "type": "session/activeClientSet",
                    "activeClient": {**active, "clientId": client.client_id},
                },
            )
        await self._save(session)
        session.last_summary = self.summary(session)
        self.engine.notify_root("root/sessionAdded", {"summary": session.last_summary})
        self.announce_count()
        if isinstance(token, str):
            self.engine.progress(client, token, 2, 2, "ready")

    def _build(
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
    ) -> LiveSession:
        record = record or {}
        default = uris.default_chat_uri(uri)
        chat_state = states.new_chat_state(
            default,
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
        session = LiveSession(
            id=session_id,
            uri=uri,
            provider=backend.provider,
            backend=backend,
            channel=self.engine.add_channel(uri, "session", session_state),
            created_at=created_at,
            modified_at=modified_at,
            working_directories=directories,
        )
        chat = LiveChat(
            default, session, session_id, self.engine.add_channel(default, "chat", chat_state)
        )
        session.chats[default] = chat
        self.sessions[session_id] = session
        return session

    def _forget(self, session: LiveSession) -> None:
        for chat in session.chats.values():
            self.engine.remove_channel(chat.uri)
        self.engine.remove_channel(session.uri)
        self.sessions.pop(session.id, None)

    async def _reopen(self, session_id: str, spelling: str) -> LiveSession | None:
        """A past session, rebuilt from its backend's transcript and this host's record."""
        if session_id in self.sessions:
            return self.sessions[session_id]
        catalogue = await self._catalogue()
        if session_id not in catalogue or session_id in self.sessions:
            return self.sessions.get(session_id)
        backend, row = catalogue[session_id]
        record = await self._record(session_id)
        uri = record.get("uri") or uris.session_uri(backend.provider, session_id)
        session = self._build(
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
        default = session.chats[session.state["defaultChat"]]
        default.existing = True
        await self._rebuild(default)
        for stored in record.get("chats", []):
            chat = (
                default if stored.get("uri") == default.uri else self._restore_chat(session, stored)
            )
            if chat is None:
                continue
            if chat is not default:
                await self._rebuild(chat)
            kept = {key: stored[key] for key in ("draft", *ARTIFACT_KEYS) if key in stored}
            if kept:
                chat.channel.state = {**chat.state, **kept}
        order = [
            stored["uri"]
            for stored in record.get("chats", [])
            if stored.get("uri") in session.chats
        ]
        if len(order) == len(session.chats) and len(order) > 1:
            self.apply(session.uri, {"type": "session/chatsReordered", "chats": order})
        session.last_summary = self.summary(session)
        self.announce_count()
        return session

    def _restore_chat(self, session: LiveSession, stored: dict[str, Any]) -> LiveChat | None:
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
        chat = LiveChat(uri, session, backend_id, self.engine.add_channel(uri, "chat", chat_state))
        chat.existing = True
        session.chats[uri] = chat
        self.apply(
            session.uri, {"type": "session/chatAdded", "summary": states.chat_row(chat_state)}
        )
        return chat

    async def _rebuild(self, chat: LiveChat) -> None:
        rebuilder = Rebuilder(chat.uri, chat.state)
        await calls.call(chat.session.backend.read_transcript, chat.backend_id, rebuilder)
        turns = rebuilder.state.get("turns", [])
        chat.older_turns = list(turns[:-TURN_WINDOW]) if len(turns) > TURN_WINDOW else []
        rebuilt = {**rebuilder.state, "turns": list(turns[-TURN_WINDOW:])}
        if chat.older_turns:
            rebuilt["turnsNextCursor"] = str(len(chat.older_turns))
        chat.channel.state = rebuilt
        self.follow.sync_row(chat)

    async def dispose_session(self, client: Client, params: dict[str, Any]) -> None:
        uri = params["channel"]
        session = self.session_by_uri(uri)
        if session is None:
            session = await self.reopen_for(uri)
        for chat in list(session.chats.values()):
            await self.stop_chat(chat)
        terminals = self.host.ports.get("terminals")
        if terminals is not None:
            await resolve(terminals.release_session(session.uri))
        backend = session.backend
        if backend.abilities.delete:
            for chat in session.chats.values():
                try:
                    await calls.call(backend.delete, chat.backend_id)
                except Exception:
                    log.exception(
                        "the %s backend could not delete %s", backend.provider, chat.backend_id
                    )
        else:
            log.info("the %s backend keeps its own copy of %s", backend.provider, session.uri)
        self._forget(session)
        if self.store is not None:
            await self.store.delete(session.id)
        self.engine.notify_root("root/sessionRemoved", {"session": session.uri})
        self.announce_count()

    async def reopen_for(self, uri: str) -> LiveSession:
        try:
            session_id = uris.session_id_of(uri)
        except ValueError as exc:
            raise ProtocolError(INVALID_PARAMS, f"params.channel: {exc}") from None
        session = await self._reopen(session_id, uri)
        if session is None:
            raise ProtocolError(SESSION_NOT_FOUND, f"no session {uri} on this host")
        return session

    async def stop_chat(self, chat: LiveChat) -> None:
        if chat.turn_scope is not None:
            chat.turn_scope.cancel()
        for ask in list(chat.session.asks.values()):
            if ask.chat is chat:
                ask.settle(None)
        agent, chat.agent = chat.agent, None
        if agent is not None:
            with anyio.CancelScope(shield=True):
                try:
                    await agent.close()
                except Exception:
                    log.exception("closing the agent of %s failed", chat.uri)

    # -- agents and turns -------------------------------------------------------
    def tokens(self, client: Client) -> dict[str, str]:
        return self.auth.tokens(client)

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

    async def start_agent(self, chat: LiveChat, tokens: dict[str, str] | None = None) -> None:
        async with chat.starting:
            if chat.agent is not None:
                return
            session = chat.session
            start = ChatStart(
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
                client_tools=self._client_tools(session),
            )
            chat.agent = await session.backend.start(start)
            chat.existing = True

    @staticmethod
    def _client_tools(session: LiveSession) -> list[dict[str, Any]]:
        tools = []
        for active in session.state.get("activeClients", []):
            for tool in active.get("tools", []):
                tools.append({**tool, "name": f"{active['clientId']}__{tool['name']}"})
        return tools

    async def run_turn(
        self, chat: LiveChat, turn_id: str, message: dict[str, Any], *, resume: bool = False
    ) -> None:
        session = chat.session
        if not resume and not session.state.get("title", "").strip():
            first_line = message.get("text", "").strip().splitlines()
            if first_line and first_line[0].strip():
                self.apply(
                    session.uri,
                    {"type": "session/titleChanged", "title": first_line[0][:TITLE_LENGTH]},
                )
        recorder = TurnRecorder(
            turn_id,
            chat=lambda action: self._apply_if_live(chat, action),
            session=lambda action: self._apply_if_live(chat, action, session.uri),
            chat_uri=chat.uri,
            asker=ChatAsker(self, chat),
            tool_owner=session.tool_owner,
            first_part=len((chat.state.get("activeTurn") or {}).get("responseParts", [])) + 1,
        )
        chat.turn_id, chat.turn_started = turn_id, time.monotonic()
        failure: BaseException | None = None
        with anyio.CancelScope() as scope:
            chat.turn_scope = scope
            try:
                await self.start_agent(chat)
                assert chat.agent is not None
                config = dict(session.state.get("config", {}).get("values", {}))
                turn = TurnInput(turn_id, message, config, self._client_tools(session), resume)
                await chat.agent.run_turn(turn, recorder)
            except Exception as exc:
                failure = exc
                log.info("turn %s of %s failed: %r", turn_id, chat.uri, exc)
        chat.turn_scope = None
        chat.turn_id = None
        duration = int((time.monotonic() - chat.turn_started) * 1000)
        for ask_id, ask in list(session.asks.items()):
            if ask.chat is chat:
                ask.settle(None)
                session.asks.pop(ask_id, None)
        if chat.uri not in session.chats:
            return
        active = chat.state.get("activeTurn")
        if active is not None and active.get("id") == turn_id:
            if scope.cancelled_caught:
                self.apply(
                    chat.uri,
                    {"type": "chat/turnCancelled", "turnId": turn_id, "duration": duration},
                )
            elif failure is not None:
                error = {
                    "errorType": type(failure).__name__,
                    "message": str(failure) or repr(failure),
                }
                part: dict[str, Any] = {"kind": "error", "error": error}
                if session.backend.abilities.turn_resume:
                    part["resumable"] = True
                self.apply(
                    chat.uri,
                    {
                        "type": "chat/error",
                        "turnId": turn_id,
                        "duration": duration,
                        "part": part,
                    },
                )
            else:
                self.apply(
                    chat.uri, {"type": "chat/turnComplete", "turnId": turn_id, "duration": duration}
                )
        if chat.state.get("activity"):
            self.apply(chat.uri, {"type": "chat/activityChanged"})
        session.modified_at = states.now_iso()
        self.save_soon(session)
        self.take_next(chat)

    def _apply_if_live(
        self, chat: LiveChat, action: dict[str, Any], uri: str | None = None
    ) -> None:
        # A turn the client cancelled has already ended; what its agent says after is dropped.
        active = chat.state.get("activeTurn")
        if (
            uri is None
            and action.get("turnId") is not None
            and (active is None or active.get("id") != action.get("turnId"))
        ):
            return
        self.apply(uri or chat.uri, action)

    def take_next(self, chat: LiveChat) -> None:
        """Start the next waiting message, steering first, then the queue in order."""
        if chat.state.get("activeTurn") is not None or chat.uri not in chat.session.chats:
            return
        pending = chat.state.get("steeringMessage")
        if pending is None:
            queued = chat.state.get("queuedMessages") or []
            pending = queued[0] if queued else None
        if pending is None:
            return
        turn_id = str(uuid.uuid4())
        self.apply(
            chat.uri,
            {
                "type": "chat/turnStarted",
                "turnId": turn_id,
                "startedAt": states.now_iso(),
                "message": pending["message"],
                "queuedMessageId": pending["id"],
            },
        )
        self.host.spawn(self.run_turn, chat, turn_id, pending["message"])
