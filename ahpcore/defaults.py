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


def default_state_dir() -> Path:
    return platformdirs.user_state_path("ahp")
