"""The changes port over git: ``ahpcore.ports.ChangesPort``."""

from __future__ import annotations

import base64
import logging
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from ahp_git import git
from ahp_git import repo as repos
from ahp_git.facts import ListedFacts, base_branch, facts_of
from ahp_git.issued import IssuedRefs
from ahp_git.landed import Landings, Tell
from ahp_git.uris import SCHEME, parse_blob_uri, plain_relative
from ahpcore.ports import ChangeScope
from ahpcore.protocol.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    NOT_FOUND,
    PERMISSION_DENIED,
    ProtocolError,
)

log = logging.getLogger(__name__)

CATALOGUE: tuple[dict[str, Any], ...] = (
    {"label": "Uncommitted Changes", "uriTemplate": "uncommitted", "changeKind": "uncommitted"},
    {"label": "Session Changes", "uriTemplate": "session", "changeKind": "session"},
    {"label": "Turn Changes", "uriTemplate": "turn/{turnId}", "changeKind": "turn"},
    {
        "label": "Changes Between Turns",
        "uriTemplate": "compare/{originalTurnId}/{modifiedTurnId}",
        "changeKind": "compare",
    },
)


class GitChanges:
    """Changesets read from ``git status`` and from marks (trees of the working tree)."""

    def __init__(
        self, live: Callable[[], Collection[str]] | None = None, landed: Tell | None = None
    ) -> None:
        """``live`` answers the directories of the host's live sessions (none without it);
        ``landed`` is told of commits that landed on a folder's branch."""
        self.landings = Landings(landed)
        self.missing_reported = False
        self._live = live or (lambda: ())
        #: The object ids put into before-side URIs: the only ones ``read`` serves.
        self.issued = IssuedRefs()
        self._last: dict[str, tuple[git.Status, list[dict[str, Any]]]] = {}
        #: ``_meta.git`` on the listed rows of sessions nobody has open.
        self.listed = ListedFacts(self._repo)

    async def _repo(self, directory: str) -> repos.Repo | None:
        try:
            return await repos.locate(os.fsencode(directory))
        except git.GitMissing as exc:
            if not self.missing_reported:
                log.warning("%s: changesets are off", exc.message)
                self.missing_reported = True
            return None

    async def _need(self, directory: str) -> repos.Repo:
        repo = await self._repo(directory)
        if repo is None:
            if git.git_executable() is None:
                raise ProtocolError(INTERNAL_ERROR, "git is not installed on this machine")
            raise ProtocolError(NOT_FOUND, f"{directory} is not in a git repository")
        return repo

    # -- ChangesPort -------------------------------------------------------------------
    async def catalogue(self, directory: str) -> Sequence[Mapping[str, Any]]:
        repo = await self._repo(directory)
        if repo is None:
            return []
        return [{**entry, "capabilities": {"review": {}}} for entry in CATALOGUE]

    async def mark(self, directory: str) -> str | None:
        repo = await self._repo(directory)
        if repo is None:
            return None
        try:
            return await repo.mark()
        except git.GitError as exc:
            log.warning("could not mark %s: %s", directory, exc.message)
            return None

    # Marks are trees; a ref under refs/ahp/marks keeps each one reachable (git gc leaves
    # it alone) and findable after a restart. Labels are hex-spelt: any turn id is a ref.
    @staticmethod
    def _ref(label: Sequence[str]) -> str:
        return "refs/ahp/marks/" + "/".join(part.encode().hex() or "-" for part in label)

    async def keep(self, directory: str, label: Sequence[str], mark: str) -> None:
        repo = await self._repo(directory)
        if repo is not None:
            await repo.run("update-ref", self._ref(label), mark, check=False)

    async def recall(self, directory: str, label: Sequence[str]) -> str | None:
        repo = await self._repo(directory)
        if repo is None:
            return None
        done = await repo.run("rev-parse", "--verify", "--quiet", self._ref(label), check=False)
        return done.stdout.decode().strip() or None if done.returncode == 0 else None

    async def forget(self, directory: str, label: Sequence[str]) -> None:
        repo = await self._repo(directory)
        if repo is None:
            return
        listed = await repo.run(
            "for-each-ref", "--format=%(refname)", self._ref(label), check=False
        )
        refs = [line for line in listed.stdout.decode().splitlines() if line]
        if refs:
            commands = "".join(f"delete {ref}\n" for ref in refs).encode()
            await repo.run("update-ref", "--stdin", stdin=commands, check=False)

    async def files(self, directory: str, scope: ChangeScope) -> Sequence[Mapping[str, Any]]:
        repo = await self._need(directory)
        try:
            if scope.kind == "uncommitted":
                status = await repo.status()
                rows = await repos.uncommitted_rows(repo, status)
                # operations() follows at once and needs the same read: one status, not two.
                self._last[directory] = (status, rows)
                self.issued.add(repo.top, directory, [status.head])
                return rows
            if scope.before is None and scope.kind == "session":
                return []  # nobody has spoken yet: the session changed nothing
            before = scope.before or await repo.empty_tree()
            after = scope.after or await repo.mark()
            changes = await repo.tree_changes(before, after)
        except git.GitError as exc:
            raise ProtocolError(
                INTERNAL_ERROR, f"git could not read {directory}: {exc.message}"
            ) from None
        self.issued.add(repo.top, directory, [before, scope.after])
        return repos.tree_rows(repo, before, scope.after, changes)

    async def operations(
        self, directory: str, scope: ChangeScope, context: Mapping[str, Any]
    ) -> Sequence[Mapping[str, Any]]:
        repo = await self._repo(directory)
        if repo is None:
            return []
        # The operations (and the pull-request code under them) load when first asked for.
        from ahp_git import pulls
        from ahp_git.operations import offered

        if scope.kind == "uncommitted":
            held = self._last.pop(directory, None)
            if held is None:
                status = await repo.status()
                rows = await repos.uncommitted_rows(repo, status)
            else:
                status, rows = held
            hub = await pulls.github_of(repo) if pulls.token() else None
            context = {**context, "github": hub is not None}
            return offered(scope, rows, context, status.head is not None)
        return offered(scope, [], context, True)

    async def invoke(
        self,
        directory: str,
        scope: ChangeScope,
        params: Mapping[str, Any],
        context: Mapping[str, Any],
    ) -> Mapping[str, Any]:
        from ahp_git.operations import Invocation

        repo = await self._need(directory)
        try:
            return await Invocation(repo, scope, params, context).run()
        except git.GitError as exc:
            raise ProtocolError(INVALID_PARAMS, f"git: {exc.message}") from None

    def serves(self, uri: str) -> bool:
        return uri.startswith(SCHEME + ":")

    async def read(self, params: Mapping[str, Any]) -> Mapping[str, Any]:
        uri = params["uri"]
        try:
            path, ref = parse_blob_uri(uri)
        except ValueError as exc:
            raise ProtocolError(INVALID_PARAMS, f"params.uri: {exc}") from None
        # No connection is named here: a before side is served to whoever holds the
        # token, but only of a live session's repository and at an id issued for it.
        top = self.issued.top_for(path, ref, set(self._live()))
        if top is None:
            raise ProtocolError(
                PERMISSION_DENIED,
                f"params.uri: {uri} is not a before side this host issued: its object id "
                "must come from a changeset of a live session in the repository of its path",
            )
        rel = path[len(top) + 1 :]
        if not plain_relative(rel):
            raise ProtocolError(
                PERMISSION_DENIED,
                f"params.uri: {uri} must name a plain path inside its repository "
                "(no empty, '.' or '..' parts)",
            )
        try:
            done = await git.run(["cat-file", "blob", ref.encode() + b":" + rel], top)
        except git.GitError as exc:
            raise ProtocolError(NOT_FOUND, f"{uri}: {exc.message}") from None
        data: bytes = done.stdout
        if params.get("encoding") != "base64":
            try:
                return {"data": data.decode("utf-8"), "encoding": "utf-8"}
            except UnicodeDecodeError:
                pass
        return {"data": base64.b64encode(data).decode("ascii"), "encoding": "base64"}

    async def watch(self, directory: str, moved: Callable[[], None]) -> None:
        from watchfiles import awatch

        repo = await self._repo(directory)
        if repo is None:
            return
        git_dir = os.fsdecode(repo.git_dir)
        watched = {os.path.join(git_dir, name) for name in ("index", "HEAD")}

        def relevant(change: Any, path: str) -> bool:
            # The index and HEAD move by rename from a .lock, so the final names are what count;
            # a branch moving under refs/heads is HEAD moving too.
            return path in watched or "/refs/heads/" in path

        # The watcher exists once the first iteration starts, before anything yields to the
        # loop, so the re-read asked for here sees every move the watcher does not.
        moved()
        # A short timeout lets a cancelled watch end promptly: its thread cannot be interrupted.
        async for _ in awatch(
            git_dir,
            watch_filter=relevant,
            debounce=50,
            step=20,
            recursive=True,
            rust_timeout=300,
        ):
            moved()

    async def look_for_landings(self, folders: list[str]) -> None:
        """The folders automations with the commit trigger name: commits landed there?"""
        await self.landings.look(folders, self._repo)

    async def facts(self, directory: str) -> Mapping[str, Any] | None:
        repo = await self._repo(directory)
        if repo is None:
            return None
        status = await repo.status()  # limited to the session's folder
        await self.landings.seen(directory, repo, status)
        return facts_of(status, len(status.entries), await base_branch(repo, status.branch))
