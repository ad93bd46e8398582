"""Commits landing on a branch: the automation trigger ahp-git offers.

Each reading of a folder's branch and head is compared with the last one. The
same branch, a new head that descends from the old one: commits landed. A
checkout of another branch, a reset backwards or the first reading of a folder
fire nothing. Readings come from two places: the host reading a folder's git
facts again (a session opened there, a turn ended, a watched changeset moved),
and every few seconds the folders that automations with this trigger name
(``look``), so a commit made with no session open there is seen too.

The look stats the few files a commit moves (``HEAD``, the branch's loose ref,
``packed-refs``, ``reftable/tables.list``) and runs git only when one of them
changed. A watcher per folder (inotify through watchfiles) would hold an inotify
instance and a worker thread per repository for as long as the automation
exists, from pools the rest of the host shares; a few stat calls every couple of
seconds in one worker thread cost less, and see changes on file systems that
send no notifications.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio.to_thread

from ahp_git import repo as repos
from ahp_git.git import Status

TRIGGER = "ahp.git"
COMMIT_LANDED = "commitLanded"
DEFINITION: dict[str, Any] = {
    "type": TRIGGER,
    "title": "Git in this folder",
    "description": "The git repository of the automation's first working directory, "
    "looked at every few seconds whether or not a session works there.",
    "events": [
        {
            "id": COMMIT_LANDED,
            "title": "A commit landed on a branch",
            "description": "The checked-out branch moved forward to a new commit.",
        }
    ],
}
#: How long a folder found in no repository waits before it is looked for again.
RELOCATE_SECONDS = 60.0
#: Where a landing goes: (folder, details shown on the run).
Tell = Callable[[str, dict[str, Any]], None]


#: The stamps of the files a commit moves in one repository: path -> (mtime, size, inode).
Stamps = tuple[tuple[str, tuple[int, int, int] | None], ...]


def _stamp(path: str) -> tuple[int, int, int] | None:
    try:
        found = os.stat(path)
    except OSError:
        return None
    return (found.st_mtime_ns, found.st_size, found.st_ino)


def stamps(git_dir: str) -> Stamps:
    """The stamps of ``HEAD``, the branch it names, ``packed-refs`` and the reftable list.

    A linked worktree keeps its ``HEAD`` in its own git folder and the refs in the
    common one (named by its ``commondir`` file).
    """
    common = git_dir
    try:
        with open(os.path.join(git_dir, "commondir"), encoding="utf-8") as held:
            common = os.path.normpath(os.path.join(git_dir, held.read().strip()))
    except OSError:
        pass
    paths = [
        os.path.join(git_dir, "HEAD"),
        os.path.join(common, "packed-refs"),
        os.path.join(common, "reftable", "tables.list"),
    ]
    try:
        with open(paths[0], encoding="utf-8", errors="replace") as held:
            head = held.read(512).strip()
    except OSError:
        head = ""
    if head.startswith("ref: refs/"):
        paths.append(os.path.join(common, *head[len("ref: ") :].split("/")))
    return tuple((path, _stamp(path)) for path in paths)


class Landings:
    def __init__(self, tell: Tell | None = None) -> None:
        self._tell = tell
        #: Folder (resolved) -> (branch, head) at its last reading.
        self._heads: dict[str, tuple[str | None, str | None]] = {}
        #: Folder looked at -> its repository and the stamps at the last look.
        self._looked: dict[str, tuple[repos.Repo, Stamps]] = {}
        #: Folder in no repository (or missing) -> when to try it again (monotonic).
        self._not_yet: dict[str, float] = {}

    async def seen(self, directory: str, repo: repos.Repo, status: Status) -> None:
        """``status`` was just read for ``directory``: tell of commits that landed since."""
        await self.at(directory, repo, status.branch, status.head)

    async def at(
        self, directory: str, repo: repos.Repo, branch: str | None, head: str | None
    ) -> None:
        """``directory`` is on ``branch`` at ``head`` now: tell of commits landed since."""
        # A session's folder and an automation's may spell one folder differently.
        key = os.path.realpath(directory)
        before = self._heads.get(key)
        self._heads[key] = (branch, head)
        if self._tell is None or before is None or branch is None or head is None:
            return
        old_branch, old_head = before
        if old_branch != branch or old_head == head:
            return
        if old_head is not None:
            # One git call, only when the head moved: forward is a landing, anything else not.
            done = await repo.run("merge-base", "--is-ancestor", old_head, head, check=False)
            if done.returncode != 0:
                return
        self._tell(directory, {"branch": branch, "commit": head})

    async def look(
        self, folders: list[str], locate: Callable[[str], Awaitable[repos.Repo | None]]
    ) -> None:
        """Read the branch and head of each folder whose commit files moved since the last
        look (every folder, the first time); ``locate`` finds a folder's repository."""
        for folder in list(self._looked):
            if folder not in folders:
                del self._looked[folder]  # no automation names it any more
        for folder in list(self._not_yet):
            if folder not in folders:
                del self._not_yet[folder]
        for folder in folders:
            held = self._looked.get(folder)
            if held is None and time.monotonic() < self._not_yet.get(folder, 0.0):
                continue
            repo = held[0] if held is not None else await locate(folder)
            if repo is None:
                # Not a repository (yet): asking git again every look would cost a process.
                self._not_yet[folder] = time.monotonic() + RELOCATE_SECONDS
                continue
            self._not_yet.pop(folder, None)
            now = await anyio.to_thread.run_sync(stamps, os.fsdecode(repo.git_dir))
            if held is not None and held[1] == now:
                continue
            self._looked[folder] = (repo, now)
            done = await repo.run("rev-parse", "--verify", "--quiet", "HEAD", check=False)
            head = done.stdout.decode().strip() or None if done.returncode == 0 else None
            named = await repo.run("symbolic-ref", "--quiet", "--short", "HEAD", check=False)
            branch = named.stdout.decode().strip() or None if named.returncode == 0 else None
            await self.at(folder, repo, branch, head)
