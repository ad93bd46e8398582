"""Git facts: what ``_meta.git`` says about a session's folder.

The keys are the ones the VS Code window reads from a session's ``_meta.git``:
``branchName`` (or ``isDetachedHead``), ``upstreamBranchName``,
``outgoingChanges`` (commits the branch has that its upstream lacks: ahead),
``incomingChanges`` (commits the upstream has that the branch lacks: behind),
``uncommittedChanges`` (files) and ``baseBranchName``.

``ListedFacts`` puts them on the ``listSessions`` rows of sessions nobody has
opened since the host started. A page may hold ten thousand rows, so a row is
given what is already known of its folder (a dictionary look-up) and the rest is
read behind the answer: folders are located a few at a time, the folders of one
repository share one ``git status`` of it, and a row whose facts moved is told
with ``root/sessionSummaryChanged``. A reading is trusted for ``FRESH`` seconds;
a listing after that reads it again, and says so only if something moved.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import anyio

from ahp_git import git
from ahp_git.git import Status
from ahp_git.repo import Repo
from ahpcore.api import PluginHost, path_of_file_uri

log = logging.getLogger(__name__)

#: Seconds a folder's facts are trusted before a listing reads them again.
FRESH = 5.0
#: git commands run at once while reading the facts of listed rows.
PARALLEL = 4
#: Rounds one background reading goes through before it hands over to the next listing.
ROUNDS = 1000
#: Listed rows told their facts between two turns of the event loop.
TELL_PER_TURN = 2000


async def base_branch(repo: Repo, branch: str | None) -> str | None:
    """The branch a worktree's branch was made from, as the window records it."""
    if branch is None:
        return None
    done = await repo.run("config", "--get", f"branch.{branch}.vscode-merge-base", check=False)
    if done.returncode != 0 or not done.stdout.strip():
        return None
    return str(done.stdout.decode("utf-8", "replace").strip())


def facts_of(status: Status, uncommitted: int, base: str | None) -> dict[str, Any]:
    facts: dict[str, Any] = {"uncommittedChanges": uncommitted}
    if status.branch is not None:
        facts["branchName"] = status.branch
    elif status.head is not None:
        facts["isDetachedHead"] = True
    if status.upstream is not None:
        facts["upstreamBranchName"] = status.upstream
    if status.ahead is not None:
        facts["outgoingChanges"] = status.ahead
        facts["incomingChanges"] = status.behind
    if base is not None:
        facts["baseBranchName"] = base
    return facts


def count_under(status: Status, prefix: bytes) -> int:
    """The changed files under ``prefix`` (relative to the top level, "" for all)."""
    if not prefix:
        return len(status.entries)
    return sum(1 for entry in status.entries if entry.path.startswith(prefix))


def folder_uri(row: dict[str, Any]) -> str | None:
    """The working directory whose facts a row carries: its first local folder."""
    for uri in row.get("workingDirectories") or ():
        if isinstance(uri, str) and uri.startswith("file:"):
            return uri
    return None


@dataclass
class _Reading:
    at: float
    facts: dict[str, Any] | None


class ListedFacts:
    """``_meta.git`` on listed rows, kept per folder and read per repository."""

    def __init__(self, locate: Callable[[str], Awaitable[Repo | None]]) -> None:
        self._locate = locate
        #: Folder URI -> what was read of it.
        self._known: dict[str, _Reading] = {}
        #: Folder URI -> session URI -> (the row last answered, the git it was told). The row
        #: is kept rather than its ``_meta`` now: plugins decorating after this one add to it.
        self._told: dict[str, dict[str, tuple[dict[str, Any], dict[str, Any] | None]]] = {}
        self._pending: set[str] = set()
        self._reading = False
        self._limit = anyio.CapacityLimiter(PARALLEL)

    # -- on the event loop, once per page --------------------------------------------
    def decorate(self, host: PluginHost, rows: Iterable[dict[str, Any]]) -> None:
        # Ten thousand rows pass through here on the event loop: locals, no calls per row
        # beyond dictionary look-ups (and one per row to the host).
        is_open = host.is_open_session
        known, told, pending = self._known, self._told, self._pending
        stale = time.monotonic() - FRESH
        for row in rows:
            folders = row.get("workingDirectories")
            if not folders:
                continue
            uri = folders[0]
            if not isinstance(uri, str) or not uri.startswith("file:"):
                uri = folder_uri(row)
                if uri is None:
                    continue
            session = row.get("resource")
            if not isinstance(session, str):
                continue
            if is_open(session):
                continue  # an open session's facts come from its own state
            reading = known.get(uri)
            if reading is None:
                facts = None
                pending.add(uri)
            else:
                facts = reading.facts
                if facts is not None:
                    meta = row.get("_meta")
                    row["_meta"] = {**meta, "git": facts} if meta else {"git": facts}
                if reading.at < stale:
                    pending.add(uri)
            told_here = told.get(uri)
            if told_here is None:
                told_here = told[uri] = {}
            told_here[session] = (row, facts)
        if pending and not self._reading:
            self._reading = True
            try:
                host.spawn(self._read_pending, host, name="git facts of listed sessions")
            except RuntimeError:  # the host is stopping
                self._reading = False

    # -- behind the answer -----------------------------------------------------------
    async def _read_pending(self, host: PluginHost) -> None:
        try:
            for _ in range(ROUNDS):
                if not self._pending:
                    return
                batch, self._pending = self._pending, set()
                found = await self.read(batch)
                now = time.monotonic()
                for uri, facts in found.items():
                    self._known[uri] = _Reading(now, facts)
                await self._tell(host, found)
        finally:
            self._reading = False

    async def read(self, uris: Iterable[str]) -> dict[str, dict[str, Any] | None]:
        """The facts of each folder URI (None outside any repository), one status per repo."""
        found: dict[str, dict[str, Any] | None] = {}
        located: dict[str, Repo] = {}

        async def locate(uri: str) -> None:
            found[uri] = None
            path = path_of_file_uri(uri)
            if path is None:
                return
            async with self._limit:
                repo = await self._locate(path)
            if repo is not None:
                located[uri] = repo

        async with anyio.create_task_group() as group:
            for uri in uris:
                group.start_soon(locate, uri)

        by_top: dict[bytes, list[tuple[str, Repo]]] = {}
        for uri, repo in located.items():
            by_top.setdefault(repo.top, []).append((uri, repo))

        async def read_repository(members: list[tuple[str, Repo]]) -> None:
            first = members[0][1]
            whole = Repo(top=first.top, git_dir=first.git_dir, prefix=b"")
            async with self._limit:
                try:
                    status = await whole.status()
                    base = await base_branch(whole, status.branch)
                except git.GitError as exc:
                    log.warning("reading %r for the session list failed: %s", first.top, exc)
                    return
            for uri, repo in members:
                found[uri] = facts_of(status, count_under(status, repo.prefix), base)

        async with anyio.create_task_group() as group:
            for members in by_top.values():
                group.start_soon(read_repository, members)
        return found

    async def _tell(self, host: PluginHost, found: dict[str, dict[str, Any] | None]) -> None:
        passed = 0
        for uri, facts in found.items():
            told = self._told.get(uri, {})
            for session, (row, before) in list(told.items()):
                passed += 1
                if passed % TELL_PER_TURN == 0:
                    await anyio.sleep(0)  # 100,000 listed rows: other clients go between
                if before == facts or host.is_open_session(session):
                    continue  # unchanged, or opened meanwhile: its own facts are published
                told[session] = (row, facts)
                host.change_row_meta(row, "git", facts)
