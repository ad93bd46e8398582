"""What the engine tests share."""

from __future__ import annotations

from typing import Any

from ahpcore.engine.channels import Channel
from ahpcore.engine.core import Engine


def add_chat(engine: Engine, uri: str, title: str = "t") -> Channel:
    """A bare chat channel in the engine, for tests that need a channel besides the root."""
    state: dict[str, Any] = {
        "resource": uri,
        "title": title,
        "status": 1,
        "modifiedAt": "2026-01-01T00:00:00Z",
        "turns": [],
    }
    return engine.add_channel(uri, "chat", state)
