"""The engine: channels, serverSeq, the replay buffer, subscriptions and dispatch.

serverSeq moves with state and never with messages: an action that changes
nothing is not buffered and takes no number, and notifications carry none.
The rules for an action a client dispatches live in ``dispatch_from_client``
and nowhere else.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from ahpcore import reducers
from ahpcore.engine.channels import Channel
from ahpcore.engine.clients import Client
from ahpcore.engine.params import check_action
from ahpcore.engine.replay import Buffered, ReplayBuffer
from ahpcore.logs import escape
from ahpcore.protocol.errors import NOT_FOUND, ProtocolError
from ahpcore.protocol.uris import ROOT_CHANNEL, respell_tree
from ahpcore.rpc.framing import dumps, dumps_weighed
from ahpcore.rpc.peer import Peer

log = logging.getLogger(__name__)

#: Resolve a URI the engine does not hold (a session to reopen, a chat alias, ...).
ChannelOpener = Callable[[str], Awaitable[Channel | None]]
#: Map a spelling of a channel to the URI the engine holds it under, or None.
ChannelResolver = Callable[[str], str | None]


class Refused(Exception):
    """Raised by an action handler: the action is refused with this reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Dispatch:
    """An action a client dispatched, as an action handler sees it."""

    engine: Engine
    client: Client
    channel: Channel
    action: dict[str, Any]
    client_seq: int
    #: Work to do once the action has been applied and sent (it follows the action).
    after: list[Callable[[], Any]] = field(default_factory=list)

    @property
    def origin(self) -> dict[str, Any]:
        return {"clientId": self.client.client_id or "", "clientSeq": self.client_seq}


#: Called before a client's action is reduced. Returns the action to apply (the same
#: or a rewritten one), or None when the handler applies what it needs itself;
#: raises Refused to refuse it.
ActionHandler = Callable[[Dispatch], Awaitable[dict[str, Any] | None]]
ClientListener = Callable[[Client, str], Any]
#: Told of every real change after it went out: (channel, action, state before).
ChangeListener = Callable[[Channel, dict[str, Any], dict[str, Any]], None]


def _envelope_frame(envelope: dict[str, Any]) -> tuple[str, int]:
    """The frame carrying ``envelope`` and its size in bytes."""
    return dumps_weighed({"jsonrpc": "2.0", "method": "action", "params": envelope})


class Engine:
    def __init__(
        self,
        root_state: dict[str, Any],
        *,
        replay_count: int = 1000,
        replay_bytes: Callable[[], int] = lambda: 32 << 20,
        first_seq: int | None = None,
    ) -> None:
        # Starting from the clock means a sequence number a client kept from an
        # earlier run of the host is always older than anything buffered now, so
        # it is answered with snapshots rather than a replay of the wrong actions.
        self.server_seq = int(time.time() * 1000) if first_seq is None else first_seq
        #: Where serverSeq started: it has moved once per change of state since.
        self.first_seq = self.server_seq
        #: The newest envelope and its frame, so the sender's echo is not encoded twice.
        self._last_frame: tuple[dict[str, Any] | None, str, int] = (None, "", 0)
        self.channels: dict[str, Channel] = {}
        self.replay = ReplayBuffer(replay_count, replay_bytes)
        self.clients: set[Client] = set()
        self._openers: list[ChannelOpener] = []
        self._resolvers: list[ChannelResolver] = []
        self._action_handlers: dict[str, ActionHandler] = {}
        #: Host-only action types a client may send, its handler deciding which client.
        self._relayed: set[str] = set()
        #: Action types whose handler also takes them on a channel of another kind.
        self._any_channel: set[str] = set()
        self._unsubscribe_listeners: list[ClientListener] = []
        self._disconnect_listeners: list[Callable[[Client], Any]] = []
        #: Each change listener with the action types it is told of (None: every type).
        self._change_listeners: list[tuple[ChangeListener, frozenset[str] | None]] = []
        #: Action type -> the listeners told of it, built on first use of the type.
        self._listeners_by_type: dict[str, list[ChangeListener]] = {}
        #: The root config object last read by ``root_config_value`` and what was read
        #: from it: budgets are read per frame, and the config changes rarely.
        self.config_read: tuple[Any, dict[tuple[str, int], int]] = (None, {})
        self._reconnect_listeners: list[Callable[[Client, list[str]], Any]] = []
        #: Connections served since the engine started (telemetry counts them).
        self.connections_made = 0
        #: Whether a root watcher hears of a session (ahp-users hides other people's);
        #: None: every root watcher does.
        self.root_audience: Callable[[Client, str, dict[str, Any]], bool] | None = None
        #: Protected resources the host answers ``authenticate`` for itself (ahp-users'
        #: ``ahp://users``): resource -> (its metadata, what a pushed token does).
        self.host_resources: dict[
            str, tuple[dict[str, Any], Callable[[Client, str], Awaitable[None]]]
        ] = {}
        self.add_channel(ROOT_CHANNEL, "root", root_state)

    # -- channels ---------------------------------------------------------------
    @property
    def root(self) -> Channel:
        return self.channels[ROOT_CHANNEL]

    def add_channel(
        self, uri: str, kind: str, state: dict[str, Any], *, stateless: bool = False
    ) -> Channel:
        if uri in self.channels:
            raise ValueError(f"channel {uri} already exists")
        channel = Channel(uri, kind, state, stateless=stateless)
        self.channels[uri] = channel
        return channel

    def remove_channel(self, uri: str) -> Channel | None:
        """Forget a channel; its watchers are unsubscribed (they learn of it elsewhere)."""
        channel = self.channels.pop(uri, None)
        if channel is not None:
            for client in list(channel.subscribers):
                client.subscriptions.pop(uri, None)
                client.drop_held(uri)
            channel.subscribers.clear()
        return channel

    def add_opener(self, opener: ChannelOpener) -> None:
        self._openers.append(opener)

    def add_resolver(self, resolver: ChannelResolver) -> None:
        self._resolvers.append(resolver)

    def canonical(self, uri: str) -> str:
        if uri in self.channels:
            return uri
        for resolver in self._resolvers:
            found = resolver(uri)
            if found is not None:
                return found
        return uri

    async def open_channel(self, uri: str) -> Channel | None:
        """The channel ``uri`` names, loading it through an opener if needed."""
        canonical = self.canonical(uri)
        channel = self.channels.get(canonical)
        if channel is not None:
            return channel
        for opener in self._openers:
            channel = await opener(canonical)
            if channel is not None:
                return self.channels.get(channel.uri, channel)
        return None

    def snapshot(
        self, channel: Channel, spelling: str | None = None, client: Client | None = None
    ) -> dict[str, Any]:
        state = channel.state
        if channel.view is not None and client is not None:
            state = channel.view(client, state)
        return {
            "resource": spelling or channel.uri,
            "state": self.spell(channel, state, spelling),
            "fromSeq": self.server_seq,
        }

    def viewed(self, client: Client, uri: str, value: Any) -> Any:
        """``value`` (a state or an envelope of ``uri``) as ``client`` is shown it."""
        channel = self.channels.get(uri)
        if channel is None or channel.view is None:
            return value
        return channel.view(client, value)

    def spell(self, channel: Channel, value: Any, spelling: str | None) -> Any:
        """``value`` as a client that named ``channel`` by ``spelling`` should see it."""
        if spelling is None or spelling == channel.uri:
            return value
        return respell_tree(value, channel.uri, spelling)

    # -- state changes -------------------------------------------------------------
    def apply(
        self,
        uri: str,
        action: dict[str, Any],
        origin: dict[str, Any] | None = None,
        *,
        always: bool = False,
    ) -> dict[str, Any] | None:
        """Reduce ``action`` onto a channel and send it to every watcher.

        Returns the envelope, or None when the action changed nothing (then
        nothing is sent, buffered or numbered), or when the channel is gone: a
        late report from a chat torn down meanwhile changes nothing. ``always``
        sends and numbers it even so: an event such as ``resourceWatch/changed``
        changes no state and exists only to be delivered.
        """
        channel = self.channels.get(uri)
        if channel is None:
            log.warning("%s dropped: no channel %s any more", action.get("type"), uri)
            return None
        before = channel.state
        # Every reducer answers a no-op with the state itself (``keep_if_same``).
        after = reducers.reduce(channel.kind, before, action)
        if after is before and not always:
            return None
        channel.state = after
        self.server_seq += 1
        envelope: dict[str, Any] = {"channel": uri, "action": action, "serverSeq": self.server_seq}
        if origin is not None:
            envelope["origin"] = origin
        text, weight = _envelope_frame(envelope)
        self._last_frame = (envelope, text, weight)
        self.replay.append(Buffered(self.server_seq, uri, envelope, weight))
        # Serialized and weighed once per spelling, not once per watcher.
        frames: dict[str, tuple[str, int]] = {uri: (text, weight)}
        # Clients with nothing queued ahead and room within clientQueueBytes (read once)
        # get the frame in one write per spelling; only the others go one by one.
        ready: dict[tuple[str, Any], tuple[list[Peer], list[Any]]] = {}
        limit: int | None = None
        for client, spelling in channel.subscribers.items():
            if channel.view is not None:
                # Each reader's own frame: few readers, few changes (the automations).
                client.deliver(
                    uri,
                    *_envelope_frame(self.spell(channel, channel.view(client, envelope), spelling)),
                )
                continue
            frame = frames.get(spelling)
            if frame is None:
                frame = frames[spelling] = _envelope_frame(self.spell(channel, envelope, spelling))
            peer = client.peer
            if client.held and uri in client.held:
                client.deliver(uri, *frame)
                continue
            if limit is None:
                limit = peer.queue_limit()
            if (wire := peer.ready_wire(frame[1], limit)) is None:
                peer.send_text(*frame, limit)
                continue
            group = ready.get((spelling, peer.write_many))
            if group is None:
                group = ready[spelling, peer.write_many] = ([], [])
            group[0].append(peer)
            group[1].append(wire)
        for (spelling, write_many), (peers, wires) in ready.items():
            failed = write_many(wires, frames[spelling][0])
            for peer, wire in zip(peers, wires, strict=True) if failed else ():
                if wire in failed:
                    peer.close("send failed")
        action_type = action.get("type")
        listeners = self._listeners_by_type.get(action_type)  # type: ignore[arg-type]
        if listeners is None:
            listeners = self._listeners_of(action_type)
        for listener in listeners:
            try:
                listener(channel, action, before)
            except Exception:
                log.exception("a change listener failed on %s to %s", action_type, uri)
        return envelope

    def on_change(self, listener: ChangeListener, *, types: Collection[str] | None = None) -> None:
        """Be told of every real change, after it was sent (listeners may apply more).

        ``types``: only of changes by these action types; a listener that
        cares about a few types is then not called for every streamed token.
        """
        self._change_listeners.append((listener, None if types is None else frozenset(types)))
        self._listeners_by_type.clear()

    def _listeners_of(self, action_type: Any) -> list[ChangeListener]:
        listeners = [
            listener
            for listener, types in self._change_listeners
            if types is None or action_type in types
        ]
        if isinstance(action_type, str):
            self._listeners_by_type[action_type] = listeners
        return listeners

    def answer_sender(
        self,
        client: Client,
        spelling: str,
        action: dict[str, Any],
        origin: dict[str, Any],
        rejection: str | None = None,
    ) -> None:
        """An envelope to the sender alone, at the current serverSeq, never buffered."""
        envelope: dict[str, Any] = {
            "channel": spelling,
            "action": action,
            "serverSeq": self.server_seq,
            "origin": origin,
        }
        if rejection is not None:
            envelope["rejectionReason"] = rejection
        client.peer.send_text(*_envelope_frame(envelope))

    def refuse_dispatch(self, client: Client, params: Any, reason: str) -> None:
        """Refuse a dispatchAction unread: the sender alone is told why."""
        if not isinstance(params, dict):
            return
        spelling, action, seq = params.get("channel"), params.get("action"), params.get("clientSeq")
        if not isinstance(spelling, str) or not isinstance(action, dict):
            return
        if not isinstance(seq, int) or isinstance(seq, bool):
            seq = 0
        origin = {"clientId": client.client_id or "", "clientSeq": seq}
        self.answer_sender(client, spelling, action, origin, rejection=reason)

    def on_action(
        self,
        action_type: str,
        handler: ActionHandler,
        *,
        relayed: bool = False,
        other_channels: bool = False,
    ) -> None:
        """Handle a client's ``action_type`` before it is reduced.

        ``relayed`` lets a client send a host-only action at all, leaving the
        handler to say which client may: a client publishing resources reports
        its own watch's changes, which the host then relays.
        ``other_channels``: the handler also takes it on a channel of another
        kind (a session action dispatched on a chat), and then applies what
        follows itself, returning None.
        """
        if action_type in self._action_handlers:
            raise ValueError(f"{action_type} already has a handler")
        self._action_handlers[action_type] = handler
        if relayed:
            self._relayed.add(action_type)
        if other_channels:
            self._any_channel.add(action_type)

    async def dispatch_from_client(self, client: Client, params: Any) -> None:
        """Every rule for a client's action, in one place.

        A refusal goes to the sender alone, carrying rejectionReason. An action
        that changes nothing goes back to the sender alone, with its own origin.
        A change goes to every watcher with ``origin``.
        """
        if not isinstance(params, dict):
            log.warning("client %s: dispatchAction without params object dropped", client.label)
            return
        spelling = params.get("channel")
        action = params.get("action")
        client_seq = params.get("clientSeq")
        if not isinstance(spelling, str) or not isinstance(action, dict):
            log.warning("client %s: dispatchAction without channel/action dropped", client.label)
            return
        seq_ok = isinstance(client_seq, int) and not isinstance(client_seq, bool)
        seq: int = client_seq if seq_ok else 0  # type: ignore[assignment]
        origin = {"clientId": client.client_id or "", "clientSeq": seq}
        sent: dict[str, Any] = action

        def refuse(reason: str) -> None:
            log.info("client %s: refused %s: %s", client.label, escape(sent.get("type")), reason)
            self.answer_sender(client, spelling, sent, origin, rejection=reason)

        if not client.initialized:
            return refuse("send initialize before dispatching actions")
        if not seq_ok:
            return refuse("clientSeq must be an integer")
        action_type = action.get("type")
        if not isinstance(action_type, str) or action_type not in reducers.ALL_ACTION_TYPES:
            return refuse(f"unknown action type {action_type!r}")
        if action_type not in reducers.CLIENT_DISPATCHABLE and action_type not in self._relayed:
            return refuse(f"{action_type} is the host's to say: a client cannot claim it happened")
        try:
            action = check_action(action)
        except ProtocolError as error:
            return refuse(error.message)
        # A channel the engine holds under this spelling needs no opener (nor an await).
        channel = self.channels.get(spelling) or await self.open_channel(spelling)
        if channel is None:
            return refuse(f"no channel {spelling} on this host")
        kind = reducers.channel_kind_for_action(action_type)
        if kind != channel.kind and action_type not in self._any_channel:
            return refuse(
                f"{action_type} is a {kind} action; {spelling} is a {channel.kind} channel"
            )
        handler = self._action_handlers.get(action_type)
        dispatch = None
        if handler is not None:
            dispatch = Dispatch(self, client, channel, action, seq)
            try:
                rewritten = await handler(dispatch)
            except Refused as refusal:
                return refuse(refusal.reason)
            except Exception as exc:
                # The sender holds the action until answered: a failure is still an answer.
                log.exception("handling %s from client %s failed", action_type, client.label)
                return refuse(f"the host failed to act on {action_type}: {exc}")
            if rewritten is None:
                self._run_after(dispatch)
                return None
            action = rewritten
        envelope = self.apply(channel.uri, action, origin)
        if envelope is None:
            self.answer_sender(client, spelling, action, origin)
        elif client not in channel.subscribers:
            # The sender is owed an answer to its clientSeq even when not watching.
            last, text, weight = self._last_frame
            if last is not envelope or spelling != channel.uri:
                text, weight = _envelope_frame(self.spell(channel, envelope, spelling))
            client.peer.send_text(text, weight)
        if dispatch is not None:
            self._run_after(dispatch)
        return None

    @staticmethod
    def _run_after(dispatch: Dispatch) -> None:
        for step in dispatch.after:
            try:
                step()
            except Exception:
                log.exception("follow-up of %s failed", dispatch.action.get("type"))

    # -- clients -------------------------------------------------------------------
    def connect(self, client: Client) -> None:
        self.clients.add(client)
        self.connections_made += 1

    def disconnect(self, client: Client) -> None:
        # Listeners are told first, while the client still says what it watched.
        for listener in self._disconnect_listeners:
            try:
                listener(client)
            except Exception:
                log.exception("a disconnect listener failed for client %s", client.label)
        for uri in list(client.subscriptions):
            self._drop_subscription(client, uri)
        self.clients.discard(client)

    def on_disconnect(self, listener: Callable[[Client], Any]) -> None:
        self._disconnect_listeners.append(listener)

    def on_reconnect(self, listener: Callable[[Client, list[str]], Any]) -> None:
        """Be told when a client comes back, with the channels it resubscribed to."""
        self._reconnect_listeners.append(listener)

    def reconnected(self, client: Client, channels: list[str]) -> None:
        for listener in self._reconnect_listeners:
            listener(client, channels)

    def on_unsubscribe(self, listener: ClientListener) -> None:
        self._unsubscribe_listeners.append(listener)

    async def subscribe(
        self, client: Client, spelling: str, *, hold: bool = False
    ) -> dict[str, Any] | None:
        """Take a snapshot and start watching, atomically; None for a stateless channel.

        With ``hold``, frames for the channel wait in the client until
        ``client.release(uri)``, so they cannot overtake the answer carrying
        the snapshot.
        """
        channel = await self.open_channel(spelling)
        if channel is None:
            raise ProtocolError(NOT_FOUND, f"no channel {spelling} on this host")
        snapshot = None if channel.stateless else self.snapshot(channel, spelling, client)
        channel.subscribers[client] = spelling
        client.subscriptions[channel.uri] = spelling
        if hold:
            client.held.setdefault(channel.uri, [])
        return snapshot

    def unsubscribe(self, client: Client, spelling: str) -> None:
        uri = self.canonical(spelling)
        if uri in client.subscriptions:
            self._drop_subscription(client, uri)
            for listener in self._unsubscribe_listeners:
                listener(client, uri)

    def _drop_subscription(self, client: Client, uri: str) -> None:
        client.subscriptions.pop(uri, None)
        client.drop_held(uri)
        channel = self.channels.get(uri)
        if channel is not None:
            channel.subscribers.pop(client, None)

    # -- notifications (no serverSeq, never replayed) -------------------------------
    def notify_watchers(self, uri: str, method: str, params: dict[str, Any]) -> None:
        channel = self.channels.get(uri)
        if channel is None:
            return
        text = dumps({"jsonrpc": "2.0", "method": method, "params": params})
        weight = len(text.encode("utf-8"))
        for client in channel.subscribers:
            client.deliver(uri, text, weight)

    def notify_root(self, method: str, params: dict[str, Any]) -> None:
        """sessionAdded / sessionRemoved / sessionSummaryChanged: root watchers only."""
        audience = self.root_audience
        if audience is None:
            self.notify_watchers(ROOT_CHANNEL, method, {"channel": ROOT_CHANNEL, **params})
            return
        channel = self.channels[ROOT_CHANNEL]
        text = dumps(
            {"jsonrpc": "2.0", "method": method, "params": {"channel": ROOT_CHANNEL, **params}}
        )
        weight = len(text.encode("utf-8"))
        for client in list(channel.subscribers):
            if audience(client, method, params):
                client.deliver(ROOT_CHANNEL, text, weight)

    @staticmethod
    def progress(
        client: Client,
        token: str,
        progress: float,
        total: float | None = None,
        message: str | None = None,
    ) -> None:
        """root/progress, to the one client whose request carried ``token``."""
        params: dict[str, Any] = {
            "channel": ROOT_CHANNEL,
            "progressToken": token,
            "progress": progress,
        }
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        client.peer.notify("root/progress", params)
