"""The ``git`` plugin: the changes port, driven through the git command."""

from __future__ import annotations

from typing import Any

from ahp_git.port import GitChanges
from ahp_git.worktrees import GitWorktrees
from ahpcore import hookimpl
from ahpcore.api import PluginHost


@hookimpl
def ahp_changes(host: PluginHost) -> GitChanges:
    # The folders of the sessions open now: where the before side of an edit may be read.
    return GitChanges(lambda: set(host.session_folders().values()))


@hookimpl
def ahp_worktrees(host: PluginHost) -> GitWorktrees:
    root = host.settings.worktrees_root
    return GitWorktrees(str(root) if root is not None else None)


@hookimpl
def ahp_session_rows(host: PluginHost, rows: list[dict[str, Any]]) -> None:
    port = host.ports.get("changes")
    if isinstance(port, GitChanges):
        port.listed.decorate(host, rows)
