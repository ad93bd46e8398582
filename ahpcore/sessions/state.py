"""Building session and chat states, and the summaries that describe them.

One function builds a chat's row for both the session state's ``chats`` and
the root summary's ``chats``, so the two cannot disagree about which chats a
session has or what they are doing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from ahpcore.protocol.uris import annotations_uri
from ahpcore.reducers._helpers import (
    STATUS_ACTIVITY_MASK,
    STATUS_IDLE,
    STATUS_IS_ARCHIVED,
    STATUS_IS_READ,
)

State = dict[str, Any]
#: The fields of a chat that make its row in a session's list.
CHAT_ROW_FIELDS = (
    "resource",
    "title",
    "status",
    "activity",
    "modifiedAt",
    "origin",
    "movable",
    "interactivity",
    "workingDirectories",
)
#: The fields of a chat row the root summary carries (SessionChatSummary).
COMPACT_ROW_FIELDS = ("resource", "title", "origin", "interactivity", "status")
#: Summary fields the protocol says never move (left out of a change).
IDENTITY_FIELDS = ("resource", "provider", "createdAt")


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def flags(status: int, *, is_read: bool, is_archived: bool) -> int:
    status = status | STATUS_IS_READ if is_read else status & ~STATUS_IS_READ
    return status | STATUS_IS_ARCHIVED if is_archived else status & ~STATUS_IS_ARCHIVED


def new_chat_state(
    uri: str,
    *,
    title: str = "",
    modified_at: str,
    origin: Mapping[str, Any] | None = None,
    movable: bool | None = None,
    working_directories: Iterable[str] = (),
    turns: Iterable[Mapping[str, Any]] = (),
    is_read: bool = True,
    is_archived: bool = False,
) -> State:
    state: State = {
        "resource": uri,
        "title": title,
        "status": flags(STATUS_IDLE, is_read=is_read, is_archived=is_archived),
        "modifiedAt": modified_at,
        "turns": [dict(turn) for turn in turns],
    }
    if origin is not None:
        state["origin"] = dict(origin)
    if movable is not None:
        state["movable"] = movable
    directories = list(working_directories)
    if directories:
        state["workingDirectories"] = directories
    return state


def chat_row(chat: Mapping[str, Any]) -> State:
    """A chat's ``ChatSummary``: the row a session lists it by."""
    return {key: chat[key] for key in CHAT_ROW_FIELDS if key in chat}


def same_row(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """``chat_row(a) == chat_row(b)``, without building either (asked on every chat change)."""
    for key in CHAT_ROW_FIELDS:
        x, y = a.get(key, _ABSENT), b.get(key, _ABSENT)
        if x is not y and x != y:
            return False
    return True


_ABSENT = object()


def compact_row(row: Mapping[str, Any]) -> State:
    """The ``SessionChatSummary`` a root summary carries for a chat row."""
    return {key: row[key] for key in COMPACT_ROW_FIELDS if key in row}


def new_session_state(
    *,
    provider: str,
    title: str,
    chats: Iterable[Mapping[str, Any]],
    default_chat: str,
    working_directories: Iterable[str] = (),
    config: Mapping[str, Any] | None = None,
    is_read: bool = True,
    is_archived: bool = False,
    lifecycle: str = "ready",
) -> State:
    state: State = {
        "provider": provider,
        "title": title,
        "status": flags(STATUS_IDLE, is_read=is_read, is_archived=is_archived),
        "lifecycle": lifecycle,
        "activeClients": [],
        "chats": [chat_row(chat) for chat in chats],
        "defaultChat": default_chat,
    }
    directories = list(working_directories)
    if directories:
        state["workingDirectories"] = directories
    if config is not None:
        state["config"] = dict(config)
    return state


def annotations_summary(session_uri: str, annotations: Iterable[Mapping[str, Any]]) -> State:
    """The ``AnnotationsSummary`` of a session's annotations: its channel and its counts."""
    held = list(annotations)
    return {
        "resource": annotations_uri(session_uri),
        "annotationCount": len(held),
        "entryCount": sum(len(a.get("entries") or ()) for a in held),
    }


#: The keys of a session's ``_meta`` its store record keeps: who owns it (ahp-users)
#: and the artifacts its agent recorded outlive a restart, and show on the past row.
KEPT_META_KEYS = frozenset({"ahp.owner", "agentHost/sessionArtifacts"})
#: The keys of a session's ``_meta`` its catalogue row carries as well.
ROW_META_KEYS = frozenset({"git"}) | KEPT_META_KEYS
#: What a summary change says for a key the new summary no longer has.
CLEARED: dict[str, Any] = {"activity": None, "_meta": {}}


#: The keys of a turn's message ``_meta`` its chat's store record keeps: who sent it
#: (ahp-users), which a transcript rebuilt from the backend does not say.
KEPT_TURN_META_KEYS = frozenset({"ahp.sender"})


def kept_turn_meta(turns: Iterable[Mapping[str, Any]]) -> dict[str, State]:
    """Turn id -> the kept keys of its message's ``_meta``, for the turns that have any."""
    found: dict[str, State] = {}
    for turn in turns:
        message = turn.get("message")
        if not isinstance(message, Mapping) or not isinstance(turn.get("id"), str):
            continue
        if kept := kept_meta(message, KEPT_TURN_META_KEYS):
            found[turn["id"]] = kept
    return found


def with_turn_meta(turns: list[Any], kept: Mapping[str, Any]) -> list[Any]:
    """``turns`` with what a record kept of their messages' ``_meta`` put back."""
    if not kept:
        return turns
    out = []
    for turn in turns:
        turn_id = turn.get("id") if isinstance(turn, Mapping) else None
        extra = kept.get(turn_id) if isinstance(turn_id, str) else None
        message = turn.get("message") if isinstance(extra, Mapping) else None
        if isinstance(extra, Mapping) and isinstance(message, Mapping):
            meta = {**(message.get("_meta") or {}), **extra}
            turn = {**turn, "message": {**message, "_meta": meta}}
        out.append(turn)
    return out


def kept_meta(holder: Mapping[str, Any], keys: frozenset[str] = KEPT_META_KEYS) -> State:
    """The ``_meta`` keys of a state or record that its store record keeps."""
    meta = holder.get("_meta")
    if not isinstance(meta, Mapping):
        return {}
    return {key: value for key, value in meta.items() if key in keys}


def session_summary(
    uri: str, session: Mapping[str, Any], *, created_at: str, modified_at: str
) -> State:
    """A session's catalogue row (``SessionSummary``), built from its state.

    Its status takes what the default chat is doing and the session's own
    read and archived bits; its chats are the session's rows, compacted.
    """
    rows = list(session.get("chats", []))
    default = next((row for row in rows if row.get("resource") == session.get("defaultChat")), None)
    own = int(session.get("status", STATUS_IDLE))
    activity_bits = int(default.get("status", STATUS_IDLE)) if default else STATUS_IDLE
    status = (own & ~STATUS_ACTIVITY_MASK) | (activity_bits & STATUS_ACTIVITY_MASK)
    summary: State = {
        "resource": uri,
        "provider": session["provider"],
        "title": session.get("title", ""),
        "status": status,
        "createdAt": created_at,
        "modifiedAt": max([modified_at, *(row.get("modifiedAt", "") for row in rows)]),
        "chats": [compact_row(row) for row in rows],
    }
    if session.get("defaultChat"):
        summary["defaultChat"] = session["defaultChat"]
    if session.get("activity"):
        summary["activity"] = session["activity"]
    if session.get("workingDirectories"):
        summary["workingDirectories"] = list(session["workingDirectories"])
    if session.get("origin"):
        # Made for an automation's run: a listing links the session back to it.
        summary["origin"] = session["origin"]
    if session.get("annotations"):
        summary["annotations"] = session["annotations"]
    # What a plugin learned of the session's folder (git's branch and counts) shows on
    # its row too; the rest of the session's _meta is the session's alone.
    facts = {k: v for k, v in (session.get("_meta") or {}).items() if k in ROW_META_KEYS}
    if facts:
        summary["_meta"] = facts
    return summary


def summary_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> State:
    """What moved between two summaries; identity fields left out, a cleared activity as None."""
    changes: State = {}
    for key in set(before) | set(after):
        if key in IDENTITY_FIELDS or before.get(key) == after.get(key):
            continue
        if key not in after:
            # A cleared activity is said as null, facts that went as an empty _meta;
            # the rest keep their value.
            if key in CLEARED:
                changes[key] = CLEARED[key]
            continue
        changes[key] = after[key]
    return changes
