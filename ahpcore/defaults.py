"""Defaults the command line shows before anything heavy is imported."""

from __future__ import annotations

from pathlib import Path

import platformdirs

DEFAULT_HOST = "127.0.0.1"
#: The port ``ahp serve`` listens on unless told otherwise.
DEFAULT_PORT = 8765
#: Inbound frames larger than this close the connection (1009). The largest inbound
#: messages are a file written through resourceWrite and a prompt carrying attachments,
#: both mostly one base64 string: 16 MiB carries 12 MiB of content, and a client with
#: more raises ``--max-frame-bytes``.
DEFAULT_MAX_FRAME_BYTES = 16 << 20

MIB = 1024 * 1024
#: Neither byte budget (a client's queue, the replay buffer) may be pushed below this:
#: a smaller budget closes healthy clients.
MIN_BUFFER_BYTES = MIB
#: Nor above this: every client's queue and the replay buffer are the host's memory,
#: and any client may set them.
MAX_BUFFER_BYTES = 256 * MIB
DEFAULT_CLIENT_QUEUE_BYTES = 16 * MIB
DEFAULT_REPLAY_BYTES = 32 * MIB


def default_state_dir() -> Path:
    return platformdirs.user_state_path("ahp")
