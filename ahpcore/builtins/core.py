"""The host's own plugin: its root config keys and its default session store."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ahpcore.defaults import (
    DEFAULT_CLIENT_QUEUE_BYTES,
    DEFAULT_REPLAY_BYTES,
    MAX_BUFFER_BYTES,
    MIN_BUFFER_BYTES,
)
from ahpcore.hookspecs import hookimpl

if TYPE_CHECKING:
    from ahpcore.api import PluginHost
    from ahpcore.ports import SessionStore


@hookimpl
def ahp_root_config(host: PluginHost) -> dict[str, Any]:
    return {
        "clientQueueBytes": {
            "type": "number",
            "title": "Client queue bytes",
            "description": (
                "How many bytes a client may fall behind before the host closes its "
                "connection (it recovers by reconnecting). At least 1 MiB, at most 256 MiB."
            ),
            "default": DEFAULT_CLIENT_QUEUE_BYTES,
            "minimum": MIN_BUFFER_BYTES,
            "maximum": MAX_BUFFER_BYTES,
        },
        "replayBytes": {
            "type": "number",
            "title": "Replay buffer bytes",
            "description": (
                "How many bytes of recent actions the host keeps for reconnecting "
                "clients, besides the 1000-action bound. At least 1 MiB, at most 256 MiB."
            ),
            "default": DEFAULT_REPLAY_BYTES,
            "minimum": MIN_BUFFER_BYTES,
            "maximum": MAX_BUFFER_BYTES,
        },
    }


@hookimpl(trylast=True)
def ahp_session_store(host: PluginHost) -> SessionStore:
    from ahpcore.store import open_store

    return open_store(host.settings.sessions, host.settings.state_dir)
