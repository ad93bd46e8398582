"""The operations a changeset offers, and carrying them out with git.

What is offered depends on the scope: the uncommitted changeset commits,
stages, unstages and discards (and checks out on a session nobody has spoken
in); a turn's or the session's changeset reverts a file to what the agent
found. Everything is disabled while a turn runs.

What the user asks for here (a commit, a checkout, a stash) runs the
repository's hooks, as git would; the reading around it runs none.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from typing import Any

import anyio.to_thread

from ahp_git import pulls
from ahp_git.repo import Repo
from ahp_git.uris import path_of_file_uri
from ahpcore.ports import ChangeScope
from ahpcore.protocol.errors import INVALID_PARAMS, TURN_IN_PROGRESS, ProtocolError

COMMIT_META = "ahp.commit"


def _op(
    op_id: str,
    label: str,
    scopes: Sequence[str],
    busy: bool,
    *,
    icon: str,
    confirmation: str | None = None,
) -> dict[str, Any]:
    op: dict[str, Any] = {
        "id": op_id,
        "label": label,
        "scopes": list(scopes),
        "status": "disabled" if busy else "idle",
        "icon": icon,
        "group": "git",
    }
    if confirmation is not None:
        op["confirmation"] = confirmation
    return op


def _plural(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def offered(
    scope: ChangeScope,
    rows: Sequence[Mapping[str, Any]],
    context: Mapping[str, Any],
    has_commit: bool,
) -> list[dict[str, Any]]:
    busy = bool(context.get("busy"))
    if scope.kind in ("turn", "session", "compare"):
        if scope.kind == "compare":
            return []
        return [
            _op(
                "revert",
                "Revert",
                ["resource"],
                busy,
                icon="discard",
                confirmation="Put this file back the way the agent found it? "
                "Changes made to it since are lost.",
            )
        ]
    staged = [r for r in rows if r.get("_meta", {}).get("ahp.staged", ".") not in (".", "?")]
    title = str(context.get("title") or "").strip()
    subject = title.splitlines()[0] if title else "(no message)"
    if staged:
        takes = f"The whole changeset takes {_plural(len(staged), 'staged file')}."
    else:
        untracked = sum(1 for r in rows if r.get("_meta", {}).get("ahp.untracked"))
        takes = f"The whole changeset takes {_plural(len(rows), 'file')}" + (
            f", {untracked} of them untracked." if untracked else "."
        )
    ops = [
        _op(
            "commit",
            "Commit",
            ["changeset", "resource"],
            busy,
            icon="check",
            confirmation=f"Commit as '{subject}'? {takes}",
        ),
        _op("stage", "Stage", ["changeset", "resource"], busy, icon="add"),
        _op("unstage", "Unstage", ["changeset", "resource"], busy, icon="remove"),
    ]
    if has_commit:
        ops.append(
            _op(
                "discard",
                "Discard",
                ["changeset", "resource"],
                busy,
                icon="trash",
                confirmation="Discard the changes, untracked files included? "
                "This cannot be undone.",
            )
        )
    if not context.get("spoken"):
        ops.append(_op("checkout", "Checkout", ["changeset"], busy, icon="git-branch"))
    if context.get("github"):
        ops.append(
            _op(
                "prepare-pull-request",
                "Prepare Pull Request",
                ["changeset"],
                busy,
                icon="git-pull-request",
            )
        )
        ops.append(
            _op(
                "create-pr",
                "Create Pull Request",
                ["changeset"],
                busy,
                icon="git-pull-request-create",
                confirmation="Commit what is uncommitted, push the branch and open a pull request?",
            )
        )
    return ops


class Invocation:
    """One ``invokeChangesetOperation`` against one repository."""

    def __init__(
        self,
        repo: Repo,
        scope: ChangeScope,
        params: Mapping[str, Any],
        context: Mapping[str, Any],
    ) -> None:
        self.repo = repo
        self.scope = scope
        self.params = params
        self.context = context
        self.meta: Mapping[str, Any] = params.get("_meta") or {}

    def targets(self) -> list[bytes] | None:
        """The target's path relative to the top level, or None for the whole changeset."""
        target = self.params.get("target")
        if not target:
            return None
        resource = target.get("resource")
        try:
            path = path_of_file_uri(resource)
        except ValueError as exc:
            raise ProtocolError(INVALID_PARAMS, f"params.target.resource: {exc}") from None
        rel = self.repo.rel(path)
        if rel is None:
            raise ProtocolError(
                INVALID_PARAMS,
                f"params.target.resource: {resource} is outside the session's folder "
                f"{os.fsdecode(self.repo.folder)}",
            )
        if rel == self.repo.pathspec:
            return None  # the session's own folder is everything
        return [rel]

    async def run(self) -> dict[str, Any]:
        if self.context.get("busy"):
            raise ProtocolError(TURN_IN_PROGRESS, "a turn is running in this session; wait for it")
        op = self.params["operationId"]
        handler = getattr(self, "_" + str(op).replace("-", "_"), None)
        if handler is None:
            raise ProtocolError(INVALID_PARAMS, f"no operation {op!r} on this changeset")
        answer = await handler()
        return answer if isinstance(answer, dict) else {"message": answer}

    # -- the operations ----------------------------------------------------------------
    async def _stage(self) -> str:
        paths = self.targets() or [self.repo.pathspec]
        await self.repo.run("add", "-A", "--", *paths)
        return "Staged " + ("everything" if self.targets() is None else _name(paths[0]))

    async def _unstage(self) -> str:
        paths = self.targets() or [self.repo.pathspec]
        status = await self.repo.status()
        if status.head is None:
            await self.repo.run("rm", "-r", "-q", "--cached", "--ignore-unmatch", "--", *paths)
        else:
            await self.repo.run("reset", "-q", "HEAD", "--", *paths)
        return "Unstaged " + ("everything" if self.targets() is None else _name(paths[0]))

    def _message(self) -> str:
        given = self.meta.get(COMMIT_META)
        if isinstance(given, Mapping) and isinstance(given.get("message"), str):
            text = given["message"].strip()
            if text:
                return text
        title = str(self.context.get("title") or "").strip()
        if not title:
            raise ProtocolError(
                INVALID_PARAMS,
                f"no commit message: the session has no title and _meta['{COMMIT_META}']"
                ".message is empty",
            )
        return title

    async def _commit(self) -> str:
        message = self._message()
        targets = self.targets()
        status = await self.repo.status()
        if targets is not None:
            entry = next((e for e in status.entries if e.path == targets[0]), None)
            if entry is None:
                raise ProtocolError(INVALID_PARAMS, f"{_name(targets[0])} has no change to commit")
            paths = list(targets)
            if entry.orig_path is not None:
                paths.append(entry.orig_path)  # both sides, so git records one rename
            if entry.xy[1] != ".":
                # The target as the tree has it, untracked or deleted too.
                await self.repo.run("add", "-A", "--", targets[0])
            await self.repo.run("commit", "-q", "--only", "-m", message, "--", *paths, hooks=True)
            return f"Committed {_name(targets[0])}"
        if not status.entries:
            raise ProtocolError(INVALID_PARAMS, "nothing to commit in this changeset")
        if not any(e.xy[0] not in (".", "?") for e in status.entries):
            await self.repo.run("add", "-A", "--", self.repo.pathspec)
        await self.repo.run("commit", "-q", "-m", message, hooks=True)
        return f"Committed as '{message.splitlines()[0]}'"

    async def _discard(self) -> str:
        status = await self.repo.status()
        if status.head is None:
            raise ProtocolError(
                INVALID_PARAMS,
                "discard refused: this repository has no commit, so every file is new "
                "and discarding would delete them all",
            )
        targets = self.targets()
        if targets is None:
            await self.repo.run(
                "restore", "--source=HEAD", "--staged", "--worktree", "--", self.repo.pathspec
            )
            await self.repo.run("clean", "-f", "-d", "-q", "--", self.repo.pathspec)
            return "Discarded every change"
        target = targets[0]
        entry = next((e for e in status.entries if e.path == target), None)
        if entry is None:
            raise ProtocolError(INVALID_PARAMS, f"{_name(target)} has no change to discard")
        if entry.in_head:
            await self.repo.run("restore", "--source=HEAD", "--staged", "--worktree", "--", target)
        else:
            await self.repo.run("rm", "-q", "--cached", "--ignore-unmatch", "--", target)
            await _remove(self.repo.abs(target))
        if entry.kind == "2" and entry.rename == "R" and entry.orig_path is not None:
            await self.repo.run(
                "restore", "--source=HEAD", "--staged", "--worktree", "--", entry.orig_path
            )
        return f"Discarded the changes to {_name(target)}"

    async def _revert(self) -> str:
        targets = self.targets()
        if targets is None or self.scope.before is None:
            raise ProtocolError(INVALID_PARAMS, "revert takes one file (params.target)")
        target = targets[0]
        listed = await self.repo.run(
            "ls-tree", "-z", "--name-only", self.scope.before, "--", target
        )
        if listed.stdout:
            await self.repo.run(
                "restore", f"--source={self.scope.before}", "--worktree", "--", target
            )
            return f"Reverted {_name(target)} to what the agent found"
        await _remove(self.repo.abs(target))  # the agent made it: it was not there
        return f"Removed {_name(target)}, which the agent created"

    async def _prepare_pull_request(self) -> Any:
        return await pulls.prepare(self.repo, await self._github(), self.context)

    async def _create_pr(self) -> Any:
        return await pulls.create(self.repo, await self._github(), self.meta, self.context)

    async def _github(self) -> pulls.GitHubRepo:
        hub = await pulls.github_of(self.repo)
        if hub is None or pulls.token() is None:
            raise ProtocolError(
                INVALID_PARAMS, "pull requests need a GitHub origin and GITHUB_TOKEN or GH_TOKEN"
            )
        return hub

    async def _checkout(self) -> str:
        if self.context.get("spoken"):
            raise ProtocolError(
                INVALID_PARAMS, "checkout is offered only on a session nobody has spoken in"
            )
        treeish = self.meta.get("treeish")
        if not isinstance(treeish, str) or not treeish or treeish.startswith("-"):
            raise ProtocolError(INVALID_PARAMS, "checkout needs _meta.treeish naming a branch")
        status = await self.repo.status()
        if status.entries:
            action = self.meta.get("preCheckoutAction")
            if action == "stash":
                await self.repo.run(
                    "stash", "push", "-u", "-q", "-m", f"before checkout {treeish}", hooks=True
                )
            elif action == "commit":
                await self.repo.run("add", "-A", "--", ".")
                await self.repo.run("commit", "-q", "-m", self._message(), hooks=True)
            else:
                raise ProtocolError(
                    INVALID_PARAMS,
                    f"the working tree has {len(status.entries)} uncommitted changes; "
                    "say _meta.preCheckoutAction 'stash' or 'commit'",
                    {"reason": "dirtyWorkingTree"},
                )
        await self.repo.run("checkout", "-q", treeish, "--", hooks=True)
        return f"Checked out {treeish}"


def _name(rel: bytes) -> str:
    return os.fsdecode(rel)


async def _remove(path: bytes) -> None:
    def remove() -> None:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.unlink(path)

    await anyio.to_thread.run_sync(remove)
