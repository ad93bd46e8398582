"""Commits landing on a branch: the automation trigger ahp-git offers.

No watcher of its own: each time the host reads a folder's git facts again (a
session opened there, a turn ended, a watched changeset moved) the branch and
its head are compared with the last reading. The same branch, a new head that
descends from the old one: commits landed. A checkout of another branch, a
reset backwards or the first reading of a folder fire nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ahp_git import repo as repos
from ahp_git.git import Status

TRIGGER = "ahp.git"
COMMIT_LANDED = "commitLanded"
DEFINITION: dict[str, Any] = {
    "type": TRIGGER,
    "title": "Git in this folder",
    "description": "The git repository of the automation's first working directory, as "
    "the host sees it while a session works there.",
    "events": [
        {
            "id": COMMIT_LANDED,
            "title": "A commit landed on a branch",
            "description": "The checked-out branch moved forward to a new commit.",
        }
    ],
}
#: Where a landing goes: (folder, details shown on the run).
Tell = Callable[[str, dict[str, Any]], None]


class Landings:
    def __init__(self, tell: Tell | None = None) -> None:
        self._tell = tell
        #: Folder -> (branch, head) at its last reading.
        self._heads: dict[str, tuple[str | None, str | None]] = {}

    async def seen(self, directory: str, repo: repos.Repo, status: Status) -> None:
        """``status`` was just read for ``directory``: tell of commits that landed since."""
        before = self._heads.get(directory)
        self._heads[directory] = (status.branch, status.head)
        if self._tell is None or before is None or status.branch is None or status.head is None:
            return
        branch, head = before
        if branch != status.branch or head == status.head:
            return
        if head is not None:
            # One git call, only when the head moved: forward is a landing, anything else not.
            done = await repo.run("merge-base", "--is-ancestor", head, status.head, check=False)
            if done.returncode != 0:
                return
        self._tell(directory, {"branch": status.branch, "commit": status.head})
