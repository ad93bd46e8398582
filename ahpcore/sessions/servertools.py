"""The host's own tools, offered to agents: other sessions, and a session's artifacts.

A backend with ``abilities.server_tools`` gets them in ``ChatStart.server_tools``
and its session advertises them in ``SessionState.serverTools``
(``session/serverToolsChanged``, the whole set, whenever it differs from what
the session holds). The tools:

* ``list_sessions``, ``read_session`` (another session's latest turns, bounded),
  ``send_message`` (a turn in another session's default chat);
* ``add_artifact_or_reference``, ``remove_artifact_or_reference``,
  ``list_artifacts_and_references``: entries kept in the session's
  ``_meta["agentHost/sessionArtifacts"]`` (its row carries them too), written
  with ``session/metaChanged`` and kept in the session's record.

With ahp-users a session belongs to someone (``_meta["ahp.owner"]``): its agent
sees and reaches only sessions of the same owner.
"""

from __future__ import annotations

import uuid
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import anyio

from ahpcore.notes import note
from ahpcore.ports.backend import JSON, ToolAnswer
from ahpcore.protocol import uris
from ahpcore.sessions import state as states
from ahpcore.sessions.live import LiveSession
from ahpcore.sessions.registry import SessionRegistry

ARTIFACTS_KEY = "agentHost/sessionArtifacts"
OWNER_KEY = "ahp.owner"
#: What ``read_session`` returns at most: turns, and characters of each message or reply.
READ_TURNS = 10
MAX_READ_TURNS = 50
READ_CHARS = 4000
LISTED = 200

ARTIFACT_TYPES = ("pullRequest", "issue", "commit", "website", "file", "resource")
LINKED = frozenset({"pullRequest", "issue", "website", "commit"})
#: Names older agents still call; answered, never advertised.
LEGACY = {
    "add_artifact": "add_artifact_or_reference",
    "remove_artifact": "remove_artifact_or_reference",
    "list_artifacts": "list_artifacts_and_references",
}

_SESSION_ARG = {"type": "string", "description": "The session's URI, as list_sessions gives it."}
_ITEM = {
    "type": "object",
    "properties": {
        "type": {"type": "string", "enum": list(ARTIFACT_TYPES)},
        "label": {"type": "string", "description": "A short name for it."},
        "isArtifact": {
            "type": "boolean",
            "description": "True for something this session made, false for a reference.",
        },
        "link": {
            "type": "string",
            "description": "http(s) URL: pullRequest, issue, website, commit.",
        },
        "uri": {"type": "string", "description": "URI: file, resource."},
        "commitHash": {"type": "string", "description": "The commit's hash (commit)."},
    },
    "required": ["type", "label", "isArtifact"],
}

TOOLS: tuple[dict[str, Any], ...] = (
    {
        "name": "list_sessions",
        "title": "List sessions",
        "description": "Lists the other sessions on this host: URI, title, provider, and which "
        "one is this session.",
        "inputSchema": {"type": "object", "properties": {}},
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "read_session",
        "title": "Read a session",
        "description": "Reads the latest turns of another session's main chat: each request "
        f"and reply, cut to {READ_CHARS} characters.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "session": _SESSION_ARG,
                "turns": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_READ_TURNS,
                    "description": f"How many of the latest turns (default {READ_TURNS}).",
                },
            },
            "required": ["session"],
        },
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "send_message",
        "title": "Send a message",
        "description": "Sends a message to another session's main chat: it starts a turn "
        "there, or waits in its queue while one runs.",
        "inputSchema": {
            "type": "object",
            "properties": {"session": _SESSION_ARG, "text": {"type": "string"}},
            "required": ["session", "text"],
        },
    },
    {
        "name": "add_artifact_or_reference",
        "title": "Add artifacts or references",
        "description": "Records what this session produced (an artifact: a pull request, a "
        "commit, a file) or relied on (a reference: an issue, a web page), shown beside "
        "the chat.",
        "inputSchema": {
            "type": "object",
            "properties": {"items": {"type": "array", "minItems": 1, "items": _ITEM}},
            "required": ["items"],
        },
    },
    {
        "name": "remove_artifact_or_reference",
        "title": "Remove an artifact or reference",
        "description": "Removes one recorded artifact or reference by its id.",
        "inputSchema": {
            "type": "object",
            "properties": {"id": {"type": "string"}},
            "required": ["id"],
        },
    },
    {
        "name": "list_artifacts_and_references",
        "title": "List artifacts and references",
        "description": "Lists the artifacts and references recorded for this session.",
        "inputSchema": {"type": "object", "properties": {}},
        "annotations": {"readOnlyHint": True},
    },
)


def bare_name(name: str) -> str:
    """``mcp__<server>__<name>`` as ``<name>``; a legacy name as the one it became."""
    if name.startswith("mcp__"):
        name = name.split("__", 2)[-1]
    return LEGACY.get(name, name)


def _owner(state: Mapping[str, Any]) -> Any:
    return (state.get("_meta") or {}).get(OWNER_KEY)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return str(value.get("value") or value.get("text") or "")
    return ""


def _clip(text: str) -> str:
    return text if len(text) <= READ_CHARS else text[:READ_CHARS] + " …"


def _value(entry: Mapping[str, Any]) -> str:
    return str(entry.get("link") or entry.get("uri") or entry.get("commitHash") or "")


def _line(entry: Mapping[str, Any]) -> str:
    kind = "artifact" if entry.get("isArtifact", True) else "reference"
    return f"{entry['id']} ({entry['type']}, {kind}) {entry['label']} — {_value(entry)}"


def _http(link: Any) -> bool:
    if not isinstance(link, str):
        return False
    parts = urlsplit(link.strip())
    return parts.scheme in ("http", "https") and bool(parts.netloc)


def _checked_item(item: Any) -> dict[str, Any]:
    """An entry as it will be kept, or ValueError saying what is wrong with it."""
    if not isinstance(item, Mapping):
        raise ValueError("each item must be an object")
    kind = item.get("type")
    if kind not in ARTIFACT_TYPES:
        raise ValueError(f"type must be one of {', '.join(ARTIFACT_TYPES)}")
    label = item.get("label")
    if not isinstance(label, str) or not label.strip():
        raise ValueError("label must be a non-empty string")
    entry: dict[str, Any] = {
        "type": kind,
        "label": label.strip(),
        "isArtifact": item.get("isArtifact") is not False,
    }
    if kind in LINKED:
        link = item.get("link")
        if link is not None or kind != "commit":
            if not _http(link):
                raise ValueError(f"{kind}: link must be an absolute http(s) URL")
            entry["link"] = str(link).strip()
        if kind in ("pullRequest", "issue"):
            host = (urlsplit(entry["link"]).hostname or "").lower()
            entry["isGitHub"] = host == "github.com" or host.endswith(".github.com")
        if kind == "commit":
            commit = item.get("commitHash")
            if not isinstance(commit, str) or not commit.strip():
                raise ValueError("commit: commitHash is required")
            entry["commitHash"] = commit.strip()
    else:
        uri = item.get("uri")
        scheme = uri.split(":", 1)[0] if isinstance(uri, str) and ":" in uri else ""
        # One letter before the colon is a Windows drive, not a scheme.
        if len(scheme) < 2 or not scheme.replace("+", "").replace("-", "").isalnum():
            raise ValueError(f"{kind}: uri must be a URI with a scheme (file:///...)")
        try:
            uris.parse_session_uri(str(uri))
        except ValueError:
            pass
        else:
            raise ValueError(f"{kind}: a session is not an artifact; name what it made")
        entry["uri"] = str(uri).strip()
    return entry


class ChatServerTools:
    """``ServerTools`` for one chat's agent."""

    def __init__(self, host: ServerToolHost, session: LiveSession, chat_uri: str) -> None:
        self.host = host
        self.session = session
        self.chat_uri = chat_uri

    def definitions(self) -> Sequence[Mapping[str, JSON]]:
        return list(self.session.state.get("serverTools") or ())

    async def call(self, name: str, arguments: Mapping[str, JSON]) -> ToolAnswer:
        return await self.host.call(self.session, self.chat_uri, name, arguments)


class ServerToolHost:
    """Advertises the host's tools on sessions and runs them for agents."""

    def __init__(
        self,
        registry: SessionRegistry,
        *,
        rows: Callable[[], Awaitable[list[dict[str, Any]]]],
        reopen: Callable[[str], Awaitable[LiveSession]],
    ) -> None:
        self.registry = registry
        self._rows = rows
        self._reopen = reopen
        # Additions and removals on one session go one at a time (read, change, keep).
        self._locks: weakref.WeakKeyDictionary[LiveSession, anyio.Lock] = (
            weakref.WeakKeyDictionary()
        )

    def definitions(self) -> list[dict[str, Any]]:
        return [dict(tool) for tool in TOOLS]

    @note(
        "session/serverToolsChanged",
        text="The whole set of the host's own tools (list_sessions, read_session, "
        "send_message and the artifact tools), sent when a session's held set is not the "
        "host's: on creation and on reopening (a record does not keep the set). A backend "
        "without Abilities.server_tools gets none, and its sessions advertise none.",
    )
    def advertise(self, session: LiveSession) -> None:
        """``session/serverToolsChanged`` when the session's set is not the one it should hold."""
        wanted = self.definitions() if session.backend.abilities.server_tools else []
        held = session.state.get("serverTools")
        if held == wanted or (held is None and not wanted):
            return
        self.registry.apply(session.uri, {"type": "session/serverToolsChanged", "tools": wanted})

    def for_chat(self, session: LiveSession, chat_uri: str) -> ChatServerTools | None:
        if not session.backend.abilities.server_tools:
            return None
        return ChatServerTools(self, session, chat_uri)

    async def call(
        self, session: LiveSession, chat_uri: str, name: str, arguments: Mapping[str, Any]
    ) -> ToolAnswer:
        tool = bare_name(name)
        advertised = {t.get("name") for t in session.state.get("serverTools") or ()}
        if tool not in advertised:
            return ToolAnswer(f"No server tool named {name} in this session.", success=False)
        if not isinstance(arguments, Mapping):
            return ToolAnswer("The arguments must be an object.", success=False)
        try:
            if tool == "list_sessions":
                return await self._list(session)
            if tool == "read_session":
                return await self._read(session, arguments)
            if tool == "send_message":
                return await self._send(session, arguments)
            if tool == "add_artifact_or_reference":
                return await self._add(session, chat_uri, arguments)
            if tool == "remove_artifact_or_reference":
                return await self._remove(session, arguments)
            return ToolAnswer(self._listing(session))
        except ValueError as exc:
            return ToolAnswer(str(exc), success=False)

    # -- sessions ----------------------------------------------------------------
    def _mine(self, session: LiveSession, owner: Any) -> bool:
        """Whether a session of ``owner`` is one the calling session may reach."""
        caller = _owner(session.state)
        return caller is None or owner == caller

    async def _list(self, session: LiveSession) -> ToolAnswer:
        lines = []
        for row in (await self._rows())[:LISTED]:
            if not self._mine(session, (row.get("_meta") or {}).get(OWNER_KEY)):
                continue
            here = " (this session)" if row["resource"] == session.uri else ""
            title = row.get("title") or "(untitled)"
            lines.append(f"{row['resource']} — {title} [{row.get('provider', '')}]{here}")
        return ToolAnswer("\n".join(lines) if lines else "No sessions.")

    async def _target(self, session: LiveSession, arguments: Mapping[str, Any]) -> LiveSession:
        uri = arguments.get("session")
        if not isinstance(uri, str) or not uri.strip():
            raise ValueError("session must be a session URI (see list_sessions)")
        held = self.registry.session_by_uri(uri.strip())
        if held is None:
            try:
                held = await self._reopen(uri.strip())
            except Exception:
                held = None
        # Someone else's session is answered as absent: its existence is theirs to tell.
        if held is None or not self._mine(session, _owner(held.state)):
            raise ValueError(f"No session {uri} on this host.")
        return held

    async def _read(self, session: LiveSession, arguments: Mapping[str, Any]) -> ToolAnswer:
        target = await self._target(session, arguments)
        count = arguments.get("turns", READ_TURNS)
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError("turns must be a positive integer")
        count = min(count, MAX_READ_TURNS)
        chat = target.chats[target.state["defaultChat"]]
        turns = list(chat.state.get("turns") or ())[-count:]
        blocks = [f"{target.uri} — {target.state.get('title') or '(untitled)'}"]
        for turn in turns:
            asked = _text((turn.get("message") or {}).get("text"))
            said = "".join(
                _text(part.get("content"))
                for part in turn.get("responseParts") or ()
                if isinstance(part, Mapping) and part.get("kind") == "markdown"
            )
            blocks.append(f"User: {_clip(asked)}\nAssistant: {_clip(said)}")
        if len(blocks) == 1:
            blocks.append("No turns yet.")
        return ToolAnswer("\n\n".join(blocks))

    async def _send(self, session: LiveSession, arguments: Mapping[str, Any]) -> ToolAnswer:
        text = arguments.get("text")
        if not isinstance(text, str) or not text.strip():
            raise ValueError("text must be a non-empty string")
        target = await self._target(session, arguments)
        if target is session:
            raise ValueError("send_message reaches other sessions, not this one")
        chat = target.chats[target.state["defaultChat"]]
        turn_id = str(uuid.uuid4())
        message = {"text": text, "origin": {"kind": "tool"}}
        if chat.state.get("activeTurn") is not None:
            self.registry.apply(
                chat.uri,
                {
                    "type": "chat/pendingMessageSet",
                    "kind": "queued",
                    "id": turn_id,
                    "message": message,
                },
            )
            return ToolAnswer(f"Queued in {target.uri}: a turn is running there.")
        self.registry.apply(
            chat.uri,
            {
                "type": "chat/turnStarted",
                "turnId": turn_id,
                "startedAt": states.now_iso(),
                "message": message,
            },
        )
        chat.runner.submit(turn_id, message)
        return ToolAnswer(f"Sent to {target.uri} (turn {turn_id}).")

    # -- artifacts ---------------------------------------------------------------
    @staticmethod
    def _entries(session: LiveSession) -> list[dict[str, Any]]:
        held = (session.state.get("_meta") or {}).get(ARTIFACTS_KEY)
        return [dict(e) for e in held if isinstance(e, Mapping)] if isinstance(held, list) else []

    def _listing(self, session: LiveSession) -> str:
        entries = self._entries(session)
        if not entries:
            return "No artifacts or references recorded for this session."
        return "\n".join(_line(entry) for entry in entries)

    async def _keep(self, session: LiveSession, entries: list[dict[str, Any]]) -> None:
        meta = dict(session.state.get("_meta") or {})
        if entries:
            meta[ARTIFACTS_KEY] = entries
        else:
            meta.pop(ARTIFACTS_KEY, None)  # an empty list is said by its absence
        self.registry.apply(session.uri, {"type": "session/metaChanged", "_meta": meta})
        await self.registry.save(session)

    def _lock(self, session: LiveSession) -> anyio.Lock:
        lock = self._locks.get(session)
        if lock is None:
            lock = self._locks[session] = anyio.Lock()
        return lock

    async def _add(
        self, session: LiveSession, chat_uri: str, arguments: Mapping[str, Any]
    ) -> ToolAnswer:
        items = arguments.get("items")
        if items is None and "type" in arguments:
            items = [arguments]  # one bare entry
        if not isinstance(items, list) or not items:
            raise ValueError("items must be a non-empty array")
        checked = []
        for index, item in enumerate(items):
            try:
                checked.append(_checked_item(item))
            except ValueError as exc:
                raise ValueError(f"items[{index}]: {exc}. Nothing was added.") from None
        async with self._lock(session):
            entries = self._entries(session)
            lines = []
            for entry in checked:
                key = _value(entry).lower()
                same = next(
                    (
                        e
                        for e in entries
                        if e.get("chat", chat_uri) == chat_uri and _value(e).lower() == key
                    ),
                    None,
                )
                if same is not None:
                    lines.append(f"Already recorded: {_line(same)}")
                    continue
                entry = {"id": uuid.uuid4().hex[:8], **entry, "chat": chat_uri}
                entries.append(entry)
                kind = "artifact" if entry["isArtifact"] else "reference"
                lines.append(f"Added {kind}: {_line(entry)}")
            if len(entries) != len(self._entries(session)):
                await self._keep(session, entries)
        return ToolAnswer("\n".join(lines))

    async def remove(self, session: LiveSession, ident: str) -> dict[str, Any] | None:
        """Take the entry ``ident`` out of the session's artifacts; the entry, or None
        when the session holds none of that id. Kept in the record before it returns."""
        async with self._lock(session):
            entries = self._entries(session)
            gone = next((e for e in entries if e.get("id") == ident), None)
            if gone is not None:
                await self._keep(session, [e for e in entries if e is not gone])
        return gone

    async def _remove(self, session: LiveSession, arguments: Mapping[str, Any]) -> ToolAnswer:
        ident = arguments.get("id")
        if not isinstance(ident, str) or not ident.strip():
            raise ValueError("id must be a non-empty string")
        gone = await self.remove(session, ident.strip())
        if gone is None:
            return ToolAnswer(f"No artifact or reference with id {ident}.")
        kind = "artifact" if gone.get("isArtifact", True) else "reference"
        return ToolAnswer(f"Removed {kind}: {_line(gone)}")
