"""ahp-files: the resources port over the local filesystem.

Its settings come from the environment (``AHP_FILES_REACH``, ``AHP_FILES_MAX_WATCHERS``,
``AHP_FILES_MAX_COPY_BYTES``) or the config file's ``[files]`` table (``reach``,
``max_watchers``, ``max_copy_bytes``); a variable that is set wins over the file.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ahp_files.fence import ENV_REACH, REACH_MACHINE, REACH_SESSIONS, Fence
from ahp_files.operations import DEFAULT_MAX_COPY_BYTES, ENV_MAX_COPY_BYTES, max_copy_bytes
from ahp_files.port import FilesPort
from ahpcore import hookimpl
from ahpcore.api import PluginHost

if TYPE_CHECKING:
    from pydantic import BaseModel

TABLE = "files"
#: ``ahp_files.watchers.ENV_MAX_WATCHERS``, named here so watchfiles loads with the first watch.
ENV_MAX_WATCHERS = "AHP_FILES_MAX_WATCHERS"


@hookimpl
def ahp_config_tables() -> dict[str, type[BaseModel]]:
    # pydantic loads only for a host whose config file has tables.
    from typing import Literal

    from pydantic import BaseModel, ConfigDict, Field

    class FilesTable(BaseModel):
        """``[files]``: what connections may reach of this machine's files."""

        model_config = ConfigDict(extra="forbid")

        reach: Literal["sessions", "machine"] | None = Field(
            None,
            description="`sessions` (the open sessions' folders, when unset) or `machine` "
            f"(every file this user may read, sessions in system folders included). "
            f"Environment: `{ENV_REACH}`, which wins.",
        )
        max_watchers: int | None = Field(
            None,
            ge=0,
            description="How many OS file watchers the host may run at once (half the "
            f"system's inotify instances when unset). Environment: `{ENV_MAX_WATCHERS}`, "
            "which wins.",
        )
        max_copy_bytes: int | None = Field(
            None,
            ge=0,
            description=f"The most one resourceCopy writes ({DEFAULT_MAX_COPY_BYTES} when "
            f"unset). Environment: `{ENV_MAX_COPY_BYTES}`, which wins.",
        )

    return {TABLE: FilesTable}


def _from_env(name: str) -> bool:
    return bool(os.environ.get(name, "").strip())


@hookimpl
def ahp_resources(host: PluginHost) -> FilesPort:
    table: Any = host.config_table(TABLE)
    reach = os.environ.get(ENV_REACH) or (table.reach if table is not None else None)
    if reach == REACH_MACHINE and not os.environ.get(ENV_REACH):
        # The core's own check of a new session's folders reads the variable: a file
        # that opens the whole machine opens it there too.
        os.environ[ENV_REACH] = REACH_MACHINE
    fence = Fence(host.working_directories, reach=reach or REACH_SESSIONS)
    copy = None
    if table is not None and table.max_copy_bytes is not None and not _from_env(ENV_MAX_COPY_BYTES):
        copy = int(table.max_copy_bytes)
    port = FilesPort(
        fence, spawn=host.spawn, max_copy=copy if copy is not None else max_copy_bytes()
    )
    if table is not None and table.max_watchers is not None:
        port.max_watchers = int(table.max_watchers)
    return port
