"""The host's own tools, offered to agents: other sessions, and a session's artifacts.

A backend with ``abilities.server_tools`` gets them in ``ChatStart.server_tools``
and its session advertises them in ``SessionState.serverTools``
(``session/serverToolsChanged``, the whole set, whenever it differs from what
the session holds). The tools:

* ``list_sessions`` (a page at a time, newest first, with a cursor to older ones and
  a filter), ``get_current_session``, ``read_session`` (another session's latest
  turns, bounded), ``send_message`` (a turn in another session's default chat);
* ``add_artifact_or_reference``, ``remove_artifact_or_reference``,
  ``list_artifacts_and_references``: entries kept in the session's
  ``_meta["agentHost/sessionArtifacts"]`` (its row carries them too), written
  with ``session/metaChanged`` and kept in the session's record.

The artifact tools go with root config ``artifactTools`` (VS Code's window pushes it
from ``chat.artifactTools.enabled``): ``false`` takes them off every session, and
the agent is told when to record one (``ServerTools.instructions``) only while
they are on.

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
from ahpcore.protocol.errors import ProtocolError
from ahpcore.sessions import state as states
from ahpcore.sessions.live import LiveSession
from ahpcore.sessions.registry import SessionRegistry

ARTIFACTS_KEY = "agentHost/sessionArtifacts"
OWNER_KEY = "ahp.owner"
#: What ``read_session`` returns at most: turns, and characters of each message or reply.
READ_TURNS = 10
MAX_READ_TURNS = 50
READ_CHARS = 4000
#: Sessions ``list_sessions`` answers at most, by default, and how many rows one call
#: looks through for a ``query`` before it hands back a cursor to go on from.
LISTED = 100
LISTED_DEFAULT = 30
SCANNED = 2000
#: The root config key that switches the artifact tools (VS Code's name for it).
ARTIFACT_TOOLS_KEY = "artifactTools"
ARTIFACT_TOOLS = frozenset(
    {"add_artifact_or_reference", "remove_artifact_or_reference", "list_artifacts_and_references"}
)
#: What the agent is told about the artifact tools while they are on: when an entry is
#: worth recording, and what counts as an artifact rather than a reference.
ARTIFACT_INSTRUCTION = (
    "This host shows the user, beside the chat, what a session produced (artifacts) and "
    "what it relied on (references). Record an entry with add_artifact_or_reference only "
    "when the user is likely to want it: recording nothing is the normal case. A pull "
    "request or issue you opened, or one you worked to fix, change or unblock, is an "
    "artifact; one you only read or reviewed is a reference. A deliverable the user asked "
    "for (a report, a plan) or a result they will want to open again is an artifact; an "
    "existing page, file or resource they should look at is a reference. Do not record "
    "routine or scratch files, caches, logs, intermediate output, commits you made unless "
    "asked, or sessions and chats; never make a file just to record it. Put related "
    "entries in one call. list_artifacts_and_references shows what is recorded, with ids; "
    "remove_artifact_or_reference takes one off."
)

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
        "description": "Lists the sessions on this host, newest first: URI, title, provider, "
        "and which one is this session. One page at a time: an answer that stops before the "
        "oldest ends with a cursor; pass it back to list older ones. query keeps only "
        "sessions whose title, URI or provider contains it.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": LISTED,
                    "description": f"How many sessions at most (default {LISTED_DEFAULT}).",
                },
                "cursor": {
                    "type": "string",
                    "description": "Where to go on from: the cursor a previous answer ended with.",
                },
                "query": {
                    "type": "string",
                    "description": "Only sessions whose title, URI or provider contains this "
                    "(case does not matter).",
                },
            },
        },
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "get_current_session",
        "title": "Get the current session",
        "description": "Says which session this conversation runs in: its URI, title, "
        "provider, working directories and chats.",
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

    def instructions(self) -> str:
        return self.host.instructions(self.session)

    async def call(self, name: str, arguments: Mapping[str, JSON]) -> ToolAnswer:
        return await self.host.call(self.session, self.chat_uri, name, arguments)


class ServerToolHost:
    """Advertises the host's tools on sessions and runs them for agents."""

    def __init__(
        self,
        registry: SessionRegistry,
        *,
        page: Callable[[int, str | None], Awaitable[tuple[list[dict[str, Any]], str | None]]],
        reopen: Callable[[str], Awaitable[LiveSession]],
    ) -> None:
        self.registry = registry
        #: One page of the catalogue as listSessions answers it: (rows, next cursor).
        self._page = page
        self._reopen = reopen
        # Additions and removals on one session go one at a time (read, change, keep).
        self._locks: weakref.WeakKeyDictionary[LiveSession, anyio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        registry.engine.on_change(self._config_changed, types=("root/configChanged",))

    def _artifacts_on(self) -> bool:
        root = self.registry.engine.channels.get(uris.ROOT_CHANNEL)
        values = ((root.state.get("config") or {}).get("values") or {}) if root else {}
        return values.get(ARTIFACT_TOOLS_KEY) is not False

    def definitions(self) -> list[dict[str, Any]]:
        on = self._artifacts_on()
        return [dict(tool) for tool in TOOLS if on or tool["name"] not in ARTIFACT_TOOLS]

    def instructions(self, session: LiveSession) -> str:
        """What the agent should be told about the tools it holds (empty: nothing)."""
        held = {t.get("name") for t in session.state.get("serverTools") or ()}
        return ARTIFACT_INSTRUCTION if "add_artifact_or_reference" in held else ""

    def _config_changed(self, channel: Any, action: dict[str, Any], before: dict[str, Any]) -> None:
        """``artifactTools`` moved: every open session says its new set at once."""
        for session in list(self.registry.sessions.values()):
            self.advertise(session)

    @note(
        "session/serverToolsChanged",
        text="The whole set of the host's own tools (list_sessions, get_current_session, "
        "read_session, send_message and the artifact tools), sent when a session's held set "
        "is not the host's: on creation, on reopening (a record does not keep the set) and "
        "when root config artifactTools turns the artifact tools off or on again. A backend "
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
                return await self._list(session, arguments)
            if tool == "get_current_session":
                return self._current(session, chat_uri)
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

    async def _list(self, session: LiveSession, arguments: Mapping[str, Any]) -> ToolAnswer:
        """A page of sessions, newest first, and a cursor to the older ones.

        Each catalogue page asked for is no longer than what is still wanted, so every
        row of it is looked at and the cursor after it loses none; a ``query`` or the
        caller's owner may leave a page short, and the next is asked for, up to
        ``SCANNED`` rows a call.
        """
        limit = arguments.get("limit", LISTED_DEFAULT)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"limit must be an integer from 1 to {LISTED}")
        limit = min(limit, LISTED)
        cursor = arguments.get("cursor")
        if cursor is not None and (not isinstance(cursor, str) or not cursor.strip()):
            raise ValueError("cursor must be the cursor a previous list_sessions answer gave")
        query = arguments.get("query")
        if query is not None and not isinstance(query, str):
            raise ValueError("query must be a string")
        needle = (query or "").strip().lower()
        lines: list[str] = []
        scanned = 0
        while len(lines) < limit and scanned < SCANNED:
            try:
                rows, cursor = await self._page(limit - len(lines), cursor)
            except ProtocolError as exc:
                raise ValueError(f"{exc.message}; start again without a cursor") from None
            scanned += max(len(rows), 1)
            for row in rows:
                if not self._mine(session, (row.get("_meta") or {}).get(OWNER_KEY)):
                    continue
                title = row.get("title") or "(untitled)"
                provider = row.get("provider", "")
                said = f"{row['resource']} {title} {provider}".lower()
                if needle and needle not in said:
                    continue
                here = " (this session)" if row["resource"] == session.uri else ""
                lines.append(f"{row['resource']} — {title} [{provider}]{here}")
            if cursor is None:
                break
        if not lines:
            lines.append("No sessions" + (f" matching {query!r}" if needle else "") + ".")
        if cursor is not None:
            lines.append(f"More: older sessions follow; call list_sessions with cursor: {cursor}")
        return ToolAnswer("\n".join(lines))

    def _current(self, session: LiveSession, chat_uri: str) -> ToolAnswer:
        state = session.state
        lines = [
            f"{session.uri} — {state.get('title') or '(untitled)'} "
            f"[{state.get('provider', '')}] (this session)",
            f"This chat: {chat_uri}",
        ]
        folders = [str(f) for f in state.get("workingDirectories") or ()]
        lines.append("Working directories: " + (", ".join(folders) if folders else "none"))
        for chat in state.get("chats") or ():
            if not isinstance(chat, Mapping):
                continue
            default = " (default)" if chat.get("resource") == state.get("defaultChat") else ""
            lines.append(f"Chat: {chat.get('resource')} — {chat.get('title') or ''}{default}")
        return ToolAnswer("\n".join(lines))

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
