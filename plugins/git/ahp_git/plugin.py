"""The ``git`` plugin: the changes port, driven through the git command."""

from __future__ import annotations

from typing import Any

from ahp_git.port import GitChanges
from ahp_git.worktrees import GitWorktrees
from ahpcore import hookimpl


@hookimpl
def ahp_changes(host: Any) -> GitChanges:
    return GitChanges()


@hookimpl
def ahp_worktrees(host: Any) -> GitWorktrees:
    return GitWorktrees(getattr(host.settings, "worktrees_root", None))


@hookimpl
def ahp_session_rows(host: Any, rows: list[dict[str, Any]]) -> None:
    port = host.ports.get("changes")
    if isinstance(port, GitChanges):
        port.listed.decorate(host, rows)
