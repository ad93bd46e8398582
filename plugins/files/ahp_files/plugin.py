"""ahp-files: the resources port over the local filesystem."""

from __future__ import annotations

from typing import Any

from ahp_files.fence import Fence, session_directories
from ahp_files.port import FilesPort
from ahpcore import hookimpl


@hookimpl
def ahp_resources(host: Any) -> FilesPort:
    fence = Fence(lambda: session_directories(host.engine_or_fail))
    return FilesPort(fence, spawn=host.spawn)
