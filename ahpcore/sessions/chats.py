"""The chat and composer commands: createChat, disposeChat, fetchTurns, completions,
resolveSessionConfig and sessionConfigCompletions."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from ahpcore.awaitables import resolve
from ahpcore.engine.clients import Client
from ahpcore.ports.backend import Backend
from ahpcore.protocol import uris
from ahpcore.protocol.errors import (
    INVALID_PARAMS,
    SESSION_ALREADY_EXISTS,
    SESSION_NOT_FOUND,
    ProtocolError,
)
from ahpcore.sessions import calls, composer
from ahpcore.sessions import state as states
from ahpcore.sessions.folders import check_folders
from ahpcore.sessions.live import LiveSession
from ahpcore.sessions.registry import SessionRegistry

log = logging.getLogger(__name__)

#: Turns a chat snapshot carries; older ones arrive through fetchTurns.
TURN_WINDOW = 50


class ChatCommands:
    def __init__(
        self,
        registry: SessionRegistry,
        reopen: Callable[[str], Awaitable[LiveSession]],
        backend_for: Callable[[Any], Backend],
        tokens: Callable[[Client], dict[str, str]],
    ) -> None:
        self.registry = registry
        self.reopen = reopen
        self.backend_for = backend_for
        self.tokens = tokens

    def routes(self) -> dict[str, Any]:
        return {
            "createChat": self.create_chat,
            "disposeChat": self.dispose_chat,
            "fetchTurns": self.fetch_turns,
            "completions": self.completions,
            "resolveSessionConfig": self.resolve_session_config,
            "sessionConfigCompletions": self.session_config_completions,
        }

    async def create_chat(self, client: Client, params: dict[str, Any]) -> None:
        session = self.registry.session_by_uri(params["channel"]) or await self.reopen(
            params["channel"]
        )
        uri = params["chat"]
        # Default chats are the host's to name: a client may pick any other chat URI.
        if not uris.is_chat_uri(uri) or uri.startswith(uris.DEFAULT_CHAT_PREFIX):
            raise ProtocolError(
                INVALID_PARAMS,
                f"params.chat: {uri!r} is not a chat URI of this host "
                f"(expected {uris.CHAT_SCHEME}:/<name>, outside {uris.DEFAULT_CHAT_PREFIX})",
            )
        if not session.backend.abilities.multiple_chats:
            raise ProtocolError(
                INVALID_PARAMS,
                f"the {session.provider} backend runs one chat per session "
                "(it does not advertise multipleChats)",
            )
        if self.registry.engine.canonical(uri) in self.registry.engine.channels:
            raise ProtocolError(SESSION_ALREADY_EXISTS, f"chat {uri} already exists")
        source = params.get("source")
        origin: dict[str, Any] = {"kind": "user"}
        turns: list[dict[str, Any]] = []
        fork_from = side_of = None
        backend = session.backend
        if isinstance(source, dict):
            source_chat = self.registry.chat_by_uri(self.registry.engine.canonical(source["chat"]))
            if source_chat is None or source_chat.session is not session:
                raise ProtocolError(
                    INVALID_PARAMS, f"params.source.chat: no chat {source['chat']} in {session.uri}"
                )
            turn_id = source["turnId"]
            history = source_chat.older_turns + source_chat.state.get("turns", [])
            index = next((i for i, t in enumerate(history) if t.get("id") == turn_id), None)
            if index is None:
                raise ProtocolError(
                    INVALID_PARAMS,
                    f"params.source.turnId: {source_chat.uri} has no turn {turn_id!r}",
                )
            if source["kind"] == "fork":
                if not backend.abilities.fork:
                    raise ProtocolError(
                        INVALID_PARAMS, f"the {backend.provider} backend cannot fork a chat"
                    )
                turns = history[: index + 1]
                fork_from = (source_chat.backend_id, turn_id)
            else:
                if not backend.abilities.side_chat:
                    raise ProtocolError(
                        INVALID_PARAMS, f"the {backend.provider} backend cannot start a side chat"
                    )
                side_of = (source_chat.backend_id, turn_id)
            origin = {"kind": source["kind"], "chat": source_chat.uri, "turnId": turn_id}
        named = tuple(params.get("workingDirectories") or ())
        check_folders(named)  # the session's own were checked when it took them
        directories = named or session.working_directories
        outside = [d for d in directories if d not in session.working_directories]
        if outside:
            raise ProtocolError(
                INVALID_PARAMS,
                f"params.workingDirectories: {outside[0]} is not one of the session's",
            )
        chat_state = states.new_chat_state(
            uri,
            modified_at=states.now_iso(),
            origin=origin,
            movable=backend.abilities.resume,
            working_directories=directories,
            turns=turns,
        )
        chat = self.registry.new_chat(session, uri, str(uuid.uuid4()), chat_state)
        chat.fork_from, chat.side_of = fork_from, side_of
        try:
            await chat.runner.start_agent(self.tokens(client))
        except Exception as exc:
            self.registry.drop_chat(chat)
            raise ProtocolError(
                -32603, f"the {backend.provider} backend could not start the chat: {exc}"
            ) from None
        try:
            # On disk before anyone, the creator included, is told the chat exists.
            await self.registry.save(session)
        except Exception as exc:  # whatever the session store raises
            await chat.runner.stop(for_good=True)
            self.registry.drop_chat(chat)
            raise ProtocolError(-32603, f"chat {uri} not created: {exc}") from None
        self.registry.apply(
            session.uri, {"type": "session/chatAdded", "summary": states.chat_row(chat.state)}
        )
        message = params.get("initialMessage")
        if isinstance(message, dict):
            turn_id = str(uuid.uuid4())
            self.registry.apply(
                uri,
                {
                    "type": "chat/turnStarted",
                    "turnId": turn_id,
                    "startedAt": states.now_iso(),
                    "message": message,
                },
            )
            chat.runner.submit(turn_id, message)

    async def dispose_chat(self, client: Client, params: dict[str, Any]) -> None:
        uri = self.registry.engine.canonical(params["channel"])
        chat = self.registry.chat_by_uri(uri)
        if chat is None:
            raise ProtocolError(SESSION_NOT_FOUND, f"no chat {params['channel']} on this host")
        session = chat.session
        if len(session.chats) == 1:
            raise ProtocolError(
                INVALID_PARAMS,
                f"{params['channel']} is the last chat of {session.uri}: dispose the session instead",
            )
        await chat.runner.stop(for_good=True)
        if (
            session.backend.abilities.delete
            and chat.uri != session.state.get("defaultChat")
            and chat.parent is None
        ):
            try:
                await calls.call(session.backend.delete, chat.backend_id)
            except Exception:
                log.exception(
                    "the %s backend could not delete %s", session.provider, chat.backend_id
                )
        self.registry.drop_chat(chat)
        if session.state.get("defaultChat") == chat.uri:
            # The role moves before the chat goes, so the session always has a default.
            successor = next(iter(session.chats))
            self.registry.apply(
                session.uri, {"type": "session/defaultChatChanged", "defaultChat": successor}
            )
        try:
            # On disk before anyone, the disposer included, is told the chat is gone:
            # a host killed right after the answer must not bring it back.
            await self.registry.save(session)
        except Exception as exc:  # whatever the session store raises
            # The chat is gone here; the store keeps the record pending and writes it
            # with the session's next save or at the stop.
            self.registry.apply(session.uri, {"type": "session/chatRemoved", "chat": chat.uri})
            raise ProtocolError(
                -32603, f"chat {chat.uri} disposed, but its removal is not on disk yet: {exc}"
            ) from None
        self.registry.apply(session.uri, {"type": "session/chatRemoved", "chat": chat.uri})

    async def fetch_turns(self, client: Client, params: dict[str, Any]) -> dict[str, Any]:
        channel = await self.registry.engine.open_channel(params["channel"])
        chat = self.registry.chat_by_uri(channel.uri) if channel is not None else None
        if chat is None:
            raise ProtocolError(SESSION_NOT_FOUND, f"no chat {params['channel']} on this host")
        older = chat.older_turns
        cursor = params.get("cursor")
        end = len(older)
        if cursor is not None:
            if not (isinstance(cursor, str) and cursor.isdigit() and int(cursor) <= len(older)):
                raise ProtocolError(
                    INVALID_PARAMS, f"params.cursor: {cursor!r} was not issued by this host"
                )
            end = int(cursor)
        start = max(0, end - TURN_WINDOW)
        action: dict[str, Any] = {"type": "chat/turnsLoaded", "turns": older[start:end]}
        if start > 0:
            action["turnsNextCursor"] = str(start)
        self.registry.apply(chat.uri, action)
        return {}

    async def completions(self, client: Client, params: dict[str, Any]) -> dict[str, Any]:
        channel = await self.registry.engine.open_channel(params["channel"])
        session = self.registry.session_by_uri(channel.uri) if channel is not None else None
        chat = self.registry.chat_by_uri(channel.uri) if channel is not None else None
        session = session or (chat.session if chat else None)
        if session is None:
            raise ProtocolError(
                SESSION_NOT_FOUND, f"no session or chat {params['channel']} on this host"
            )
        start, word = composer.word_at(params["text"], params["offset"])
        typing_in = chat.uri if chat else session.state.get("defaultChat", "")
        if word.startswith("/") and not params["text"][:start].strip():
            customizations = session.state.get("customizations") or [
                c for agent in session.backend.agents() for c in agent.get("customizations") or []
            ]
            return {"items": composer.command_items(customizations, start, word)}
        if word.startswith("#") and (
            composer.CHAT_PREFIX.startswith(word) or word.startswith(composer.CHAT_PREFIX)
        ):
            chats = [c.state for c in session.chats.values()]
            return {"items": composer.chat_items(chats, typing_in, start, word)}
        return {"items": []}

    async def resolve_session_config(
        self, client: Client, params: dict[str, Any]
    ) -> dict[str, Any]:
        backend = self.backend_for(params.get("provider"))
        answered = dict(params.get("config") or {})
        properties = composer.config_properties(backend, params.get("workingDirectory"), answered)
        return composer.resolve_config(properties, answered)

    async def session_config_completions(
        self, client: Client, params: dict[str, Any]
    ) -> dict[str, Any]:
        backend = self.backend_for(params.get("provider"))
        complete = getattr(backend, "config_completions", None)
        if not callable(complete):
            return {"items": []}
        items = complete(
            params["property"], params.get("query", ""), dict(params.get("config") or {})
        )
        items = await resolve(items)
        return {"items": [dict(item) for item in items or []]}
