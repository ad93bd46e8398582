"""The ``git`` plugin: the changes port, driven through the git command."""

from __future__ import annotations

from typing import Any

from ahp_git import landed
from ahp_git.port import GitChanges
from ahp_git.worktrees import GitWorktrees
from ahpcore import hookimpl
from ahpcore.api import PluginHost


@hookimpl
def ahp_changes(host: PluginHost) -> GitChanges:
    def tell(folder: str, details: dict[str, Any]) -> None:
        host.automation_event(landed.TRIGGER, landed.COMMIT_LANDED, folder=folder, details=details)

    # The folders of the sessions open now: where the before side of an edit may be read.
    port = GitChanges(lambda: set(host.session_folders().values()), tell)
    # And the folders automations watch for commits, open session or not.
    host.look_in_automation_folders(landed.TRIGGER, port.look_for_landings)
    return port


@hookimpl
def ahp_automation_triggers(query: dict[str, Any]) -> list[dict[str, Any]] | None:
    return [landed.DEFINITION]


@hookimpl
def ahp_worktrees(host: PluginHost) -> GitWorktrees:
    root = host.settings.worktrees_root
    return GitWorktrees(str(root) if root is not None else None)


@hookimpl
def ahp_session_rows(host: PluginHost, rows: list[dict[str, Any]]) -> None:
    port = host.ports.get("changes")
    if isinstance(port, GitChanges):
        port.listed.decorate(host, rows)
