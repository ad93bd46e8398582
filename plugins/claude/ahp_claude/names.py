"""How the backend names what it keeps: working directories as paths, turns as transcript
uuids, the CLI's permission modes. Light on purpose: the backend loads it at start,
and claude-agent-sdk only when a chat starts."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from ahpcore.protocol.uris import path_of_file_uri

PERMISSION_MODES = ("default", "acceptEdits", "plan", "bypassPermissions")

Spawn = Callable[..., None]


def to_path(directory: str) -> str:
    """A working directory as a path (the protocol names them by file URI)."""
    if directory.startswith("file:"):
        return path_of_file_uri(directory) or directory
    return directory


def entry_uuid(session_id: str, turn_id: str) -> str:
    """The transcript uuid a turn's message is stored under: the turn id when it is a UUID."""
    try:
        return str(uuid.UUID(turn_id))
    except ValueError:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"ahp-claude:{session_id}:{turn_id}"))
