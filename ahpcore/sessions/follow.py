"""Keeping the derived views in step: a chat's row in its session, the session's
activity and root summary, and the clients a session counts as active.

Every listener here is told by the engine after a change went out, and may
apply the actions that follow from it.
"""

from __future__ import annotations

from typing import Any

import anyio

from ahpcore import reducers
from ahpcore.engine.channels import Channel
from ahpcore.engine.clients import Client
from ahpcore.sessions import state as states
from ahpcore.sessions.live import LiveChat, LiveSession
from ahpcore.sessions.registry import SessionRegistry

#: Chat actions whose reducer sets one field a chat's row does not show (the draft):
#: they can move no row, activity or summary, and a draft changes with every keystroke.
ROW_BLIND = frozenset({"chat/draftChanged"})
#: The changes the follower is told of.
FOLLOWED = (reducers.ACTION_TYPES["chat"] | reducers.ACTION_TYPES["session"]) - ROW_BLIND


class Follower:
    def __init__(self, registry: SessionRegistry) -> None:
        self.registry = registry
        engine = registry.engine
        engine.on_change(self._changed, types=FOLLOWED)
        engine.on_unsubscribe(self._unsubscribed)
        engine.on_disconnect(self._disconnected)
        engine.on_reconnect(self._reconnected)

    def _changed(self, channel: Channel, action: dict[str, Any], before: dict[str, Any]) -> None:
        if channel.kind == "chat":
            if states.same_row(before, channel.state):
                return  # a streamed token moves nothing a row or a summary shows
            chat = self.registry.chat_by_uri(channel.uri)
            if chat is not None:
                self.sync_row(chat)
                self._sync_activity(chat)
                self._sync_summary(chat.session)
        elif channel.kind == "session":
            session = self.registry.session_by_uri(channel.uri)
            if session is not None and session.channel is channel:
                self._sync_summary(session)

    def sync_row(self, chat: LiveChat) -> None:
        """session/chatUpdated, only when the row moved (status, activity or modifiedAt).

        A chat's title is the session row's to hold: a rename changes the row
        (``session/chatUpdated``) and no chat action carries one.
        """
        session = chat.session
        row = states.chat_row(chat.state)
        held = next(
            (r for r in session.state.get("chats", []) if r.get("resource") == chat.uri), None
        )
        if held is None:
            return
        changes = {
            key: row[key]
            for key in ("status", "modifiedAt")
            if row.get(key) is not None and row[key] != held.get(key)
        }
        # The partial only writes what it carries, and activity is a string: a
        # chat gone idle leaves its row an empty one, since a key left off would
        # keep the last "Thinking" showing.
        activity = row.get("activity") or ""
        if activity != (held.get("activity") or ""):
            changes["activity"] = activity
        if changes:
            self.registry.apply(
                session.uri, {"type": "session/chatUpdated", "chat": chat.uri, "changes": changes}
            )

    def _sync_activity(self, chat: LiveChat) -> None:
        """A session is doing what its default chat is doing; absent means idle."""
        session = chat.session
        if session.state.get("defaultChat") != chat.uri:
            return
        activity = chat.state.get("activity")
        if activity != session.state.get("activity"):
            action: dict[str, Any] = {"type": "session/activityChanged"}
            if activity:
                action["activity"] = activity
            self.registry.apply(session.uri, action)

    def _sync_summary(self, session: LiveSession) -> None:
        if session.last_summary is None:
            return
        summary = self.registry.summary(session)
        changes = states.summary_changes(session.last_summary, summary)
        if changes:
            session.last_summary = summary
            self.registry.engine.notify_root(
                "root/sessionSummaryChanged", {"session": session.uri, "changes": changes}
            )

    def _unsubscribed(self, client: Client, uri: str) -> None:
        session = self.registry.session_by_uri(uri)
        if session is not None and session.channel.uri == uri:
            self._drop_active_client(session, client)

    def _disconnected(self, client: Client) -> None:
        if client.client_id is not None and any(
            other is not client and other.client_id == client.client_id
            for other in self.registry.engine.clients
        ):
            # Its clientId lives on in a newer connection (it took the id over): what the
            # client was asked to run and where it is active are that connection's now.
            return
        for session in self.registry.sessions.values():
            for call_id, ask in list(session.asks.items()):
                if ask.kind == "toolClientExecution" and ask.client_id == client.client_id:
                    # Nothing can settle the call any more: it fails, and the turn goes on.
                    result = {
                        "success": False,
                        "pastTenseMessage": "The client running this tool left",
                        "error": {"message": f"client {client.client_id} disconnected"},
                    }
                    self.registry.apply(
                        ask.chat.uri,
                        {
                            "type": "chat/toolCallComplete",
                            "turnId": ask.turn_id,
                            "toolCallId": call_id,
                            "result": result,
                        },
                    )
                    ask.settle(result)
            if session.channel.uri in client.subscriptions:
                # A dropped client may be back in a moment; it stays listed until then.
                self.registry.spawn(self._drop_after_grace, session, client)

    async def _drop_after_grace(self, session: LiveSession, client: Client) -> None:
        await anyio.sleep(self.registry.reconnect_grace)
        if self.registry.sessions.get(session.id) is session:
            self._drop_active_client(session, client)

    def _reconnected(self, client: Client, channels: list[str]) -> None:
        """A client back without a session it was active in is no longer active there."""
        for session in self.registry.sessions.values():
            if session.channel.uri not in channels:
                self._drop_active_client(session, client)

    def _drop_active_client(self, session: LiveSession, client: Client) -> None:
        """Removed unless another connection of the same client still watches the session."""
        if client.client_id is None:
            return
        others = [
            other
            for other in session.channel.subscribers
            if other is not client and other.client_id == client.client_id
        ]
        listed = any(
            active.get("clientId") == client.client_id
            for active in session.state.get("activeClients", [])
        )
        if listed and not others:
            self.registry.apply(
                session.uri, {"type": "session/activeClientRemoved", "clientId": client.client_id}
            )
