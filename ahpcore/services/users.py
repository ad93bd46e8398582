"""People on a host with a users port: who a connection is, what their role lets them do.

Built only when a plugin answers ``ahp_users``; without one nothing here runs and
the deployment token opens everything, as before. A connection is opened as
somebody at the handshake (``identify``): the deployment token as the host itself
(``root:<hostname>``, every right), a person's token as ``user:<name>``. Each
request and dispatched action is checked against that person's role as it is
now (the port reads its file again when it changes), and a person removed from
the file has their connections closed within a second or so.
"""

from __future__ import annotations

import logging
import re
import socket
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio

from ahpcore.engine.clients import Client
from ahpcore.engine.core import Engine
from ahpcore.lifecycle import SessionCreation
from ahpcore.markers import hookimpl
from ahpcore.ports import Person, UsersPort
from ahpcore.protocol import uris
from ahpcore.protocol.errors import AUTH_REQUIRED, PERMISSION_DENIED, ProtocolError
from ahpcore.protocol.uris import ROOT_CHANNEL
from ahpcore.rpc.peer import Reply

log = logging.getLogger(__name__)

OWNER_KEY = "ahp.owner"
SENDER_KEY = "ahp.sender"
ROOT_PREFIX = "root:"
USER_PREFIX = "user:"
#: How often open connections are checked against the people file.
SWEEP_SECONDS = 1.0

#: Requests that change state: a viewer is refused them all.
CHANGING = frozenset(
    {
        "createSession",
        "disposeSession",
        "createChat",
        "disposeChat",
        "moveChat",
        "createTerminal",
        "disposeTerminal",
        "resourceWrite",
        "resourceDelete",
        "resourceMkdir",
        "resourceMove",
        "resourceCopy",
        "invokeChangesetOperation",
        "runAutomation",
    }
)


#: The protected resource a connection authenticates with to become another person.
USERS_RESOURCE = "ahp://users"
USERS_METADATA = {
    "resource": USERS_RESOURCE,
    "resource_name": "People of this host (ahp-users)",
    "required": False,
}
#: Where a connection keeps who its handshake made it, for an empty token to go back to.
HANDSHAKE_KEY = "ahp.users.handshake"


#: The annotations actions that write entries: each entry is stamped with its writer.
ANNOTATION_WRITES = frozenset({"annotations/set", "annotations/entrySet"})


def _unowned(entry: Mapping[str, Any]) -> dict[str, Any]:
    """An entry without the writer the host stamped on it, to compare what it says."""
    meta = {k: v for k, v in (entry.get("_meta") or {}).items() if k != OWNER_KEY}
    return {**entry, "_meta": meta} if meta else {k: v for k, v in entry.items() if k != "_meta"}


def root_identity() -> str:
    return ROOT_PREFIX + socket.gethostname()


#: ``<scheme>:/<id>`` at the head of a URI: the session a channel under it belongs to.
_SESSION_HEAD = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):/+([^/?#]+)")
#: Schemes that never name a session.
_NOT_SESSIONS = frozenset({"ahp-root", "ahp-chat", "ahp-terminal", "ahp-automations", "file"})

#: Reads what the session store keeps of a session, by id (None: nothing).
PastRecord = Callable[[str], Awaitable[Mapping[str, Any] | None]]


def _session_id_in(uri: str) -> str | None:
    head = _SESSION_HEAD.match(uri)
    if head is None or head.group(1).lower() in _NOT_SESSIONS:
        return None
    return head.group(2)


class UsersService:
    def __init__(
        self, engine: Engine, port: UsersPort, past_record: PastRecord | None = None
    ) -> None:
        self.engine = engine
        self.port = port
        self._past_record = past_record
        self.root = root_identity()
        #: createSession requests under way: session URI -> who asked.
        self._creating: dict[str, str] = {}
        #: Sessions being disposed -> their owner, for the root/sessionRemoved that follows.
        self._leaving: dict[str, str] = {}
        engine.root_audience = self.hears
        engine.host_resources[USERS_RESOURCE] = (dict(USERS_METADATA), self.switch)
        self._offer_with_agents()

    # -- who ---------------------------------------------------------------------------
    async def identify(self, token: str) -> str | None:
        """Whose connection ``token`` opens (``user:<name>``), or None: a slow hash, off the loop."""
        person = await anyio.to_thread.run_sync(self.port.person, token)
        return person.identity if person is not None else None

    def person(self, client: Client) -> Person | None:
        """The person behind ``client`` as they are now; None for the host itself or nobody."""
        identity = client.identity
        if identity is None or not identity.startswith(USER_PREFIX):
            return None
        return self.port.named(identity[len(USER_PREFIX) :])

    def _role(self, client: Client) -> str | None:
        """``admin`` for the host itself, the person's role, or None once they are gone."""
        if client.identity is None or client.identity.startswith(ROOT_PREFIX):
            return "admin"
        person = self.person(client)
        return person.role if person is not None else None

    def owner_of(self, uri: str) -> str | None:
        """Who owns what ``uri`` names: a session, one of its chats or channels under
        them (annotations, changesets), or a terminal by its claim; None when unknown."""
        uri = self.engine.canonical(uri)
        channel = self.engine.channels.get(uri)
        if channel is not None and channel.kind == "terminal":
            return self._terminal_owner(channel.state.get("claim"))
        for channel in list(self.engine.channels.values()):
            if channel.kind != "session":
                continue
            state = channel.state
            held = [channel.uri, uris.alias_uri(uris.session_id_of(channel.uri))]
            held += [
                chat["resource"]
                for chat in state.get("chats") or ()
                if isinstance(chat, Mapping) and isinstance(chat.get("resource"), str)
            ]
            if any(uri == h or uri.startswith(h + "/") for h in held):
                return self._owner_in(state)
        return None

    def _owner_in(self, state: Mapping[str, Any]) -> str:
        owner = (state.get("_meta") or {}).get(OWNER_KEY)
        return owner if isinstance(owner, str) else self.root

    def _terminal_owner(self, claim: Any) -> str | None:
        """A session's terminal is its owner's; a client's, the person on that connection."""
        if not isinstance(claim, Mapping):
            return None
        if claim.get("kind") == "session" and isinstance(claim.get("session"), str):
            return self.owner_of(claim["session"])
        if claim.get("kind") == "client":
            for client in list(self.engine.clients):
                if client.client_id == claim.get("clientId") and client.identity is not None:
                    return client.identity
        return None

    def _folder_owner(self, client: Client, uri: Any) -> str | None:
        """Whose session's working directory the file ``uri`` lies in, the asker's first."""
        path = uris.path_of_file_uri(uri) if isinstance(uri, str) else None
        if path is None:
            return None
        owners: list[str] = []
        for channel in list(self.engine.channels.values()):
            if channel.kind != "session":
                continue
            for folder in channel.state.get("workingDirectories") or ():
                root = uris.path_of_file_uri(folder) if isinstance(folder, str) else None
                if root is not None and (path == root or path.startswith(root.rstrip("/") + "/")):
                    owners.append(self._owner_in(channel.state))
        if client.identity in owners:
            return client.identity
        return owners[0] if owners else None

    # -- authenticate --------------------------------------------------------------------
    def _offer_with_agents(self) -> None:
        """Add ``ahp://users`` to agents already published (later ones carry it anyway)."""
        agents = self.engine.channels[ROOT_CHANNEL].state.get("agents") or []
        if not any(
            isinstance(agent, Mapping)
            and USERS_RESOURCE
            not in [r.get("resource") for r in agent.get("protectedResources") or []]
            for agent in agents
        ):
            return
        offered = [
            {
                **agent,
                "protectedResources": [*(agent.get("protectedResources") or []), USERS_METADATA],
            }
            if USERS_RESOURCE
            not in [r.get("resource") for r in agent.get("protectedResources") or []]
            else agent
            for agent in agents
        ]
        self.engine.apply(ROOT_CHANNEL, {"type": "root/agentsChanged", "agents": offered})

    async def switch(self, client: Client, token: str) -> None:
        """``authenticate`` with ``ahp://users``: the connection becomes the token's person.

        An empty token goes back to whoever the handshake opened it as. Channels the
        new person may not see are unsubscribed at once.
        """
        handshake = client.data.setdefault(HANDSHAKE_KEY, client.identity)
        if token == "":
            identity = handshake
        else:
            identity = await self.identify(token)
            if identity is None:
                raise ProtocolError(
                    AUTH_REQUIRED,
                    f"that token opens no person on this host ({USERS_RESOURCE})",
                    {"resources": [dict(USERS_METADATA)]},
                )
        log.info("client %s is now %s", client.label, identity)
        client.identity = identity
        for uri in list(client.subscriptions):
            if uri != ROOT_CHANNEL and self.refusal(client, "subscribe", {"channel": uri}):
                self.engine.unsubscribe(client, uri)

    # -- what they may do --------------------------------------------------------------
    def refusal(self, client: Client, method: str, params: Any) -> str | None:
        """Why ``client`` may not send ``method`` with ``params`` now, or None."""
        role = self._role(client)
        if role == "admin":
            return None
        if role is None:
            return f"{client.identity} is no longer a person on this host"
        channel = params.get("channel") if isinstance(params, Mapping) else None
        if role == "viewer":
            if method in CHANGING or method == "dispatchAction":
                return f"{client.identity} is a viewer: {method} needs the member or admin role"
            return None
        # member
        if method == "dispatchAction" and channel == ROOT_CHANNEL:
            return f"{client.identity} is a member: root config needs the admin role"
        if isinstance(channel, str) and method != "createSession":
            owner = self.owner_of(channel)
            if owner is not None and owner != client.identity:
                return f"{client.identity} is a member: {channel} belongs to {owner}"
        if not isinstance(params, Mapping):
            return None
        if method == "createTerminal":
            owner = self._terminal_owner(params.get("claim"))
            if owner is not None and owner != client.identity:
                return f"{client.identity} is a member: that session belongs to {owner}"
        if method.startswith("resource") or method == "createTerminal":
            # Files in someone else's session's folders are theirs (the fence still holds).
            for key in ("uri", "source", "destination", "cwd"):
                owner = self._folder_owner(client, params.get(key))
                if owner is not None and owner != client.identity:
                    return f"{client.identity} is a member: {params[key]} belongs to {owner}"
        return None

    def check(self, client: Client, method: str, params: Any) -> None:
        """Raise -32009 naming what is missing when ``client`` may not make this request."""
        if method in ("initialize", "ping", "reconnect", "authenticate"):
            return
        reason = self.refusal(client, method, params)
        if reason is not None:
            raise ProtocolError(PERMISSION_DENIED, reason)
        if method == "createSession" and isinstance(params, Mapping):
            uri = params.get("channel")
            if isinstance(uri, str) and client.identity is not None:
                self._creating[uri] = client.identity

    async def admit(self, client: Client, method: str, params: Any) -> None:
        """``check``, and for a member naming a session that is not open, its owner read
        from the session store: disposing of, or reaching into, someone else's past
        session is refused before anything opens or deletes it."""
        self.check(client, method, params)
        if self._past_record is None or self._role(client) != "member":
            return
        channel = params.get("channel") if isinstance(params, Mapping) else None
        if not isinstance(channel, str) or method == "createSession":
            return
        if self.owner_of(channel) is not None:
            return  # open: ``check`` knew its owner
        session_id = _session_id_in(channel)
        record = await self._past_record(session_id) if session_id is not None else None
        if record is None:
            return
        owner = (record.get("_meta") or {}).get(OWNER_KEY) or self.root
        if owner != client.identity:
            raise ProtocolError(
                PERMISSION_DENIED, f"{client.identity} is a member: {channel} belongs to {owner}"
            )

    def stamp(self, client: Client, params: Any) -> None:
        """Say who sent a turn on the turn itself (``_meta["ahp.sender"]``), and who wrote
        each annotation entry on the entry (``_meta["ahp.owner"]``)."""
        action = params.get("action") if isinstance(params, dict) else None
        if isinstance(action, dict) and action.get("type") in ANNOTATION_WRITES:
            self._stamp_entries(client, params.get("channel"), action)
            return
        if (
            isinstance(action, dict)
            and action.get("type") == "chat/turnStarted"
            and client.identity is not None
        ):
            meta = action.get("_meta")
            action["_meta"] = {
                **(meta if isinstance(meta, dict) else {}),
                SENDER_KEY: client.identity,
            }
            # On the message too, which the turn keeps: the chat's record holds it from there.
            message = action.get("message")
            if isinstance(message, dict):
                said = message.get("_meta")
                message["_meta"] = {
                    **(said if isinstance(said, dict) else {}),
                    SENDER_KEY: client.identity,
                }

    def _stamp_entries(self, client: Client, channel: Any, action: dict[str, Any]) -> None:
        """Each entry an annotations action writes says who wrote it, as the host knows them.

        What the client put under ``ahp.owner`` is never kept. An entry the annotation
        already holds, unchanged but for that key, keeps its writer: re-sending a whole
        annotation (``annotations/set``) to add one entry does not make the others the
        sender's.
        """
        writer = client.identity or self.root
        held: dict[Any, Mapping[str, Any]] = {}
        state = (
            self.engine.channels.get(self.engine.canonical(channel))
            if isinstance(channel, str)
            else None
        )
        if action["type"] == "annotations/set":
            annotation = action.get("annotation")
            entries = annotation.get("entries") if isinstance(annotation, dict) else None
            ident = annotation.get("id") if isinstance(annotation, dict) else None
        else:
            entry = action.get("entry")
            entries = [entry] if isinstance(entry, dict) else None
            ident = action.get("annotationId")
        if not isinstance(entries, list):
            return
        if state is not None:
            for kept in state.state.get("annotations") or ():
                if isinstance(kept, Mapping) and kept.get("id") == ident:
                    held = {
                        e.get("id"): e for e in kept.get("entries") or () if isinstance(e, Mapping)
                    }
        for entry in entries:
            if not isinstance(entry, dict):
                continue
            before = held.get(entry.get("id"))
            owner = writer
            if before is not None and _unowned(before) == _unowned(entry):
                kept_owner = (before.get("_meta") or {}).get(OWNER_KEY)
                owner = kept_owner if isinstance(kept_owner, str) else writer
            meta = entry.get("_meta")
            entry["_meta"] = {**(meta if isinstance(meta, dict) else {}), OWNER_KEY: owner}

    def visible(self, client: Client, method: str, result: Any) -> Any:
        """``result`` as ``client`` may see it: a member's session list holds their own.

        A past session's owner is known only once it is open again, so a
        subscription that opened one is checked again now, and taken back.
        """
        answer = result.result if isinstance(result, Reply) else result
        if method == "subscribe" and isinstance(answer, Mapping):
            channel = (answer.get("snapshot") or {}).get("resource")
            reason = self.refusal(client, method, {"channel": channel})
            if isinstance(channel, str) and reason is not None:
                self.engine.unsubscribe(client, channel)
                raise ProtocolError(PERMISSION_DENIED, reason)
        if method in ("initialize", "reconnect") and isinstance(answer, dict):
            # initialSubscriptions and a reconnect's channels pass the same test as subscribe:
            # what the person may not see is left out, as a channel that cannot be snapshotted is.
            for key in ("snapshots", "actions"):
                held = answer.get(key)
                if not isinstance(held, list):
                    continue
                kept = []
                for item in held:
                    channel = item.get("resource") or item.get("channel")
                    if (
                        isinstance(channel, str)
                        and channel != ROOT_CHANNEL
                        and self.refusal(client, "subscribe", {"channel": channel})
                    ):
                        self.engine.unsubscribe(client, channel)
                        continue
                    kept.append(item)
                answer[key] = kept
        if method != "listSessions" or self._role(client) != "member":
            return result
        if not isinstance(result, dict) or not isinstance(result.get("items"), list):
            return result
        mine = [
            row
            for row in result["items"]
            if ((row.get("_meta") or {}).get(OWNER_KEY) or self.root) == client.identity
        ]
        return {**result, "items": mine}

    def hears(self, client: Client, method: str, params: Mapping[str, Any]) -> bool:
        """Whether ``client`` is told of a session's arrival, change or removal.

        A member hears only of their own sessions: others' stay invisible to them.
        """
        if self._role(client) != "member":
            return self._role(client) is not None
        summary = params.get("summary")
        if isinstance(summary, Mapping):
            uri = summary.get("resource")
            owner = (summary.get("_meta") or {}).get(OWNER_KEY)
        else:
            uri = params.get("session")
            owner = None
        if owner is None and isinstance(uri, str):
            owner = self.owner_of(uri) or self._leaving.get(uri)
        return (owner or self.root) == client.identity

    # -- moments -----------------------------------------------------------------------
    @hookimpl
    def ahp_session_creating(self, creation: SessionCreation) -> None:
        # Stamped before the session is announced, so its root/sessionAdded says whose
        # it is and reaches only those who may see it.
        asked = self._creating.pop(creation.session, None)
        creation.meta[OWNER_KEY] = asked or creation.meta.get(OWNER_KEY) or self.root

    @hookimpl
    def ahp_session_created(self, session: str) -> None:
        self._creating.pop(session, None)
        channel = self.engine.channels.get(session)
        if channel is None or OWNER_KEY in (channel.state.get("_meta") or {}):
            return
        meta = {**(channel.state.get("_meta") or {}), OWNER_KEY: self.root}
        self.engine.apply(session, {"type": "session/metaChanged", "_meta": meta})

    @hookimpl
    def ahp_session_disposing(self, session: str) -> None:
        self._leaving[session] = self.owner_of(session) or self.root

    @hookimpl
    def ahp_session_disposed(self, session: str, folder: str | None) -> None:
        self._leaving.pop(session, None)

    # -- removals ------------------------------------------------------------------------
    async def sweep(self) -> None:
        """Close the connections of people no longer in the file, for as long as the host runs."""
        while True:
            await anyio.sleep(SWEEP_SECONDS)
            for client in list(self.engine.clients):
                if client.identity is None or not client.identity.startswith(USER_PREFIX):
                    continue
                if self.person(client) is None:
                    log.info("closing %s: %s was removed", client.label, client.identity)
                    client.peer.close(f"{client.identity} was removed from this host")
