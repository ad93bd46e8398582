"""What the changeset channels are made of: turn marks, scopes' URIs, and the choice
of actions that takes a client's rows to a new read. Pure, apart from waiting on a mark."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio

from ahpcore.protocol.uris import first_local_path

SEGMENT = "/changeset/"
#: How long a turn scope waits for the mark taken when its turn started.
MARK_WAIT = 30.0
_ENDS = ("chat/turnComplete", "chat/turnCancelled", "chat/error")


@dataclass
class Mark:
    """A point the port answered for a directory, once it has answered."""

    ready: anyio.Event = field(default_factory=anyio.Event)
    value: str | None = None

    def set(self, value: str | None) -> None:
        self.value = value
        self.ready.set()


@dataclass
class TurnMarks:
    start: Mark = field(default_factory=Mark)
    end: Mark | None = None


@dataclass
class SessionBook:
    """What the changesets know of one session's turns."""

    turns: dict[str, TurnMarks] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    running: set[str] = field(default_factory=set)
    announced: set[str] = field(default_factory=set)


def directory_of(session_state: dict[str, Any]) -> str | None:
    """The local path of a session's first working directory."""
    return first_local_path(session_state.get("workingDirectories"))


def split_changeset_uri(uri: str) -> tuple[str, str] | None:
    session, sep, scope = uri.partition(SEGMENT)
    if not sep or not session or not scope:
        return None
    return session, scope


def choose_actions(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The fewest actions taking ``old`` rows to ``new``: per file, contentChanged or cleared.

    A row whose content did not move keeps the review mark it had; nothing
    at all is said when no row moved.
    """
    held = {row["id"]: row for row in old}
    kept: list[dict[str, Any]] = []
    for row in new:
        before = held.get(row["id"])
        if (
            before is not None
            and "reviewed" in before
            and {**before, "reviewed": None} == {**row, "reviewed": None}
        ):
            row = {**row, "reviewed": before["reviewed"]}
        kept.append(row)
    ids = {row["id"] for row in kept}
    per_file: list[dict[str, Any]] = [
        {"type": "changeset/fileSet", "file": row} for row in kept if held.get(row["id"]) != row
    ]
    per_file += [
        {"type": "changeset/fileRemoved", "fileId": row["id"]}
        for row in old
        if row["id"] not in ids
    ]
    if not per_file:
        return []
    if not kept:
        return [{"type": "changeset/cleared"}]
    if len(per_file) < len(kept):
        return per_file
    return [{"type": "changeset/contentChanged", "files": kept}]


async def _value(mark: Mark | None) -> str | None:
    if mark is None:
        return None
    with anyio.move_on_after(MARK_WAIT):
        await mark.ready.wait()
    return mark.value
