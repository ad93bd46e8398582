"""``moveChat``: a chat moved within its session, into another one, or into a new one.

Ownership and order are settled before anything is published, so a client is
never told a chat is in two places or in none.
"""

from __future__ import annotations

from typing import Any

from ahpcore.engine.clients import Client
from ahpcore.protocol import uris
from ahpcore.protocol.errors import INVALID_PARAMS, SESSION_NOT_FOUND, ProtocolError
from ahpcore.sessions import state as states
from ahpcore.sessions.live import LiveChat, LiveSession
from ahpcore.sessions.registry import SessionRegistry


def _refuse(message: str) -> ProtocolError:
    return ProtocolError(INVALID_PARAMS, message)


def _order(session: LiveSession, chat: str, after: str | None) -> list[str]:
    order = [row["resource"] for row in session.state.get("chats", []) if row["resource"] != chat]
    if after is None:
        return [chat, *order]
    if after == chat:
        raise _refuse("params.destination.after names the chat being moved")
    if after not in order:
        raise _refuse(f"params.destination.after: {after} is not a chat of {session.uri}")
    index = order.index(after) + 1
    return [*order[:index], chat, *order[index:]]


async def move_chat(
    manager: SessionRegistry, client: Client, params: dict[str, Any]
) -> dict[str, Any]:
    channel = await manager.engine.open_channel(params["channel"])
    chat = manager.chat_by_uri(channel.uri) if channel is not None else None
    if chat is None:
        raise ProtocolError(SESSION_NOT_FOUND, f"no chat {params['channel']} on this host")
    source = chat.session
    if chat.uri == source.state.get("defaultChat"):
        raise _refuse(f"{params['channel']} is its session's default chat, which does not move")
    if not source.backend.abilities.resume:
        raise _refuse(
            f"the {source.provider} backend cannot reopen a conversation by its id, "
            "so its chats cannot move"
        )
    if chat.state.get("activeTurn") is not None:
        raise _refuse(f"{params['channel']} is running a turn: wait for it or cancel it first")
    destination = params["destination"]
    if destination.get("kind") == "newSession":
        return await _to_new_session(manager, chat)
    target = manager.session_by_uri(destination["session"])
    if target is None:
        raise _refuse(
            f"params.destination.session: this host is not running {destination['session']}"
        )
    after = destination.get("after")
    after = manager.engine.canonical(after) if isinstance(after, str) else None
    if target is source:
        order = _order(source, chat.uri, after)
        manager.apply(source.uri, {"type": "session/chatsReordered", "chats": order})
        await manager.save(source)  # answered once on disk
        return {"session": source.uri}
    if target.provider != source.provider:
        raise _refuse(
            f"{target.uri} runs the {target.provider} backend and {source.uri} the "
            f"{source.provider} backend: a chat moves only between sessions of one backend"
        )
    order = _order(target, chat.uri, after)
    await chat.runner.stop()
    del source.chats[chat.uri]
    chat.session = target
    chat.existing = True
    target.chats[chat.uri] = chat
    manager.apply(source.uri, {"type": "session/chatRemoved", "chat": chat.uri})
    manager.apply(target.uri, {"type": "session/chatAdded", "summary": states.chat_row(chat.state)})
    manager.apply(target.uri, {"type": "session/chatsReordered", "chats": order})
    await _save_moved(manager, target, source)
    return {"session": target.uri}


async def _to_new_session(manager: SessionRegistry, chat: LiveChat) -> dict[str, Any]:
    source = chat.session
    if chat.backend_id in manager.sessions:
        raise _refuse(f"a session with id {chat.backend_id} already exists")
    await chat.runner.stop()
    uri = uris.session_uri(source.provider, chat.backend_id)
    now = states.now_iso()
    session_state = states.new_session_state(
        provider=source.provider,
        title=chat.state.get("title") or source.state.get("title", ""),
        chats=[{**chat.state, "movable": False}],
        default_chat=chat.uri,
        working_directories=chat.state.get("workingDirectories") or source.working_directories,
        config=source.state.get("config"),
    )
    # A new session: its annotations are its own, and none yet.
    session_state["annotations"] = states.annotations_summary(uri, ())
    # Whose it is (ahp-users) goes with the chat, before anyone hears of the session.
    if kept := states.kept_meta(source.state):
        session_state["_meta"] = kept
    session = LiveSession(
        id=chat.backend_id,
        uri=uri,
        provider=source.provider,
        backend=source.backend,
        channel=manager.engine.add_channel(uri, "session", session_state),
        created_at=now,
        modified_at=now,
        working_directories=tuple(session_state.get("workingDirectories", ())),
    )
    del source.chats[chat.uri]
    chat.session = session
    chat.existing = True
    session.chats[chat.uri] = chat
    manager.sessions[session.id] = session
    if chat.state.get("movable"):
        manager.apply(chat.uri, {"type": "chat/movableChanged", "movable": False})
    manager.apply(source.uri, {"type": "session/chatRemoved", "chat": chat.uri})
    session.last_summary = manager.summary(session)
    manager.engine.notify_root("root/sessionAdded", {"summary": session.last_summary})
    manager.announce_count()
    await _save_moved(manager, session, source)
    return {"session": uri}


async def _save_moved(manager: SessionRegistry, target: LiveSession, source: LiveSession) -> None:
    """Both records on disk before the move is answered: the one the chat went to first,
    so a stop between the two writes leaves the chat in both records, never in neither."""
    await manager.save(target)
    await manager.save(source)
