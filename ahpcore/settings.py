"""What a host is started with: where it listens, where it keeps state, its budgets."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ahpcore.config import ConfigFile
from ahpcore.defaults import (
    DEFAULT_HOST,
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_PORT,
    default_state_dir,
)
from ahpcore.rpc.budget import DEFAULT_BYTES_PER_SECOND, DEFAULT_FRAMES_PER_SECOND


@dataclass
class HostSettings:
    """What a host is started with: where it listens and keeps its state, how much a
    connection may send, where session worktrees go (``ahp serve``'s options)."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    #: Which session store the core plugin opens: "file" or "memory".
    sessions: str = "file"
    state_dir: Path = field(default_factory=default_state_dir)
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    compression: bool = True
    #: How long a dropped client stays a session's active client, waiting to reconnect.
    reconnect_grace: float = 30.0
    #: Where session worktrees go (``<root>/<repo>/<name>``); None: beside each repository.
    worktrees_root: Path | None = None
    #: What one connection may send per second before its frames are refused
    #: (see ahpcore.rpc.budget); None lifts the budget.
    inbound_frames_per_second: float | None = DEFAULT_FRAMES_PER_SECOND
    inbound_bytes_per_second: float = DEFAULT_BYTES_PER_SECOND
    #: An OpenTelemetry collector's OTLP/HTTP base URL (``--otlp-endpoint``), for ahp-otlp.
    otlp_endpoint: str | None = None
    #: The config file the host was started with (``ahpcore.config``): its plugin
    #: tables are checked against the plugins' models at start.
    config: ConfigFile = field(default_factory=ConfigFile)
    #: Each plugin table as checked at start (``PluginHost.config_table``).
    config_tables: dict[str, Any] = field(default_factory=dict)
