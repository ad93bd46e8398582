"""ahp-files: the resources port over the local filesystem."""

from __future__ import annotations

from ahp_files.fence import Fence
from ahp_files.port import FilesPort
from ahpcore import hookimpl
from ahpcore.api import PluginHost


@hookimpl
def ahp_resources(host: PluginHost) -> FilesPort:
    fence = Fence(host.working_directories)
    return FilesPort(fence, spawn=host.spawn)
