"""How the backend names what it keeps: working directories as paths, turns as transcript
uuids, the CLI's permission modes. Light on purpose: the backend loads it at start,
and claude-agent-sdk only when a chat starts."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from urllib.parse import unquote, urlparse


def url2pathname(path: str) -> str:
    """``urllib.request.url2pathname``, without loading urllib.request (and http.client
    and ssl under it) into a host that never opens a URL."""
    if os.name == "nt":
        from nturl2path import url2pathname as convert

        return convert(path)
    return unquote(path)


PERMISSION_MODES = ("default", "acceptEdits", "plan", "bypassPermissions")

Spawn = Callable[..., None]


def to_path(directory: str) -> str:
    """A working directory as a path (the protocol names them by file URI)."""
    if directory.startswith("file:"):
        return url2pathname(urlparse(directory).path)
    return directory


def entry_uuid(session_id: str, turn_id: str) -> str:
    """The transcript uuid a turn's message is stored under: the turn id when it is a UUID."""
    try:
        return str(uuid.UUID(turn_id))
    except ValueError:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"ahp-claude:{session_id}:{turn_id}"))
