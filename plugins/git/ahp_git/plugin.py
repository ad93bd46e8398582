"""The ``git`` plugin: the changes port, driven through the git command."""

from __future__ import annotations

from typing import Any

from ahp_git.port import GitChanges
from ahp_git.worktrees import GitWorktrees
from ahpcore import hookimpl
from ahpcore.engine.changesets import directory_of


def live_directories(host: Any) -> set[str]:
    """The working directories of the sessions open on this host now."""
    engine = getattr(host, "engine", None)
    if engine is None:
        return set()
    found = set()
    for channel in engine.channels.values():
        if channel.kind == "session":
            directory = directory_of(channel.state)
            if directory is not None:
                found.add(directory)
    return found


@hookimpl
def ahp_changes(host: Any) -> GitChanges:
    return GitChanges(lambda: live_directories(host))


@hookimpl
def ahp_worktrees(host: Any) -> GitWorktrees:
    return GitWorktrees(getattr(host.settings, "worktrees_root", None))


@hookimpl
def ahp_session_rows(host: Any, rows: list[dict[str, Any]]) -> None:
    port = host.ports.get("changes")
    if isinstance(port, GitChanges):
        port.listed.decorate(host, rows)
