"""The host's own plugin: its root config keys and its default session store."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ahpcore.hookspecs import hookimpl

if TYPE_CHECKING:
    from ahpcore.host import Host
    from ahpcore.ports import SessionStore

MIB = 1024 * 1024
#: Neither bound may be pushed below this: a smaller budget closes healthy clients.
MIN_BUFFER_BYTES = MIB
#: Nor above this: every client's queue and the replay buffer are the host's memory,
#: and any client may set them.
MAX_BUFFER_BYTES = 256 * MIB
DEFAULT_CLIENT_QUEUE_BYTES = 16 * MIB
DEFAULT_REPLAY_BYTES = 32 * MIB


@hookimpl
def ahp_root_config(host: Host) -> dict[str, Any]:
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
def ahp_session_store(host: Host) -> SessionStore:
    from ahpcore.store import open_store

    return open_store(host.settings.sessions, host.settings.state_dir)
