"""Isolated working trees: ``ahpcore.ports.WorktreesPort`` over ``git worktree``.

A tree for ``<repo>`` named ``<name>`` is made at ``<repo>.worktrees/<name>``
(or ``<root>/<repo>/<name>`` under a worktrees root) on a branch of that
name. Which git-ignored files come along and which git-ignored folders are
linked is decided by git itself (``ls-files --ignored`` with the patterns as
``--exclude``), so the patterns mean exactly what they mean in a .gitignore.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import anyio
import anyio.to_thread

from ahp_git import git
from ahp_git import repo as repos

log = logging.getLogger(__name__)

Progress = Callable[[str], None]


def patterns_of(value: str | Sequence[str] | None) -> list[str]:
    """A list of patterns; a comma-separated string is read as one list."""
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else list(value)
    return [item.strip() for item in items if isinstance(item, str) and item.strip()]


@dataclass(frozen=True)
class _Made:
    """A tree ``create`` made: enough to take it back."""

    top: bytes
    path: bytes
    branch: str
    #: The branch was made with the tree; one that was there before is not the host's.
    new_branch: bool


class GitWorktrees:
    def __init__(self, root: str | None = None) -> None:
        self.root = root
        #: Tree path -> how it was made, until it is removed or discarded.
        self._made: dict[str, _Made] = {}

    def place(self, top: bytes, name: str) -> bytes:
        if self.root:
            return os.path.join(os.fsencode(self.root), os.path.basename(top), os.fsencode(name))
        return top + b".worktrees/" + os.fsencode(name)

    async def create(
        self,
        repository: str,
        name: str,
        *,
        include: str | Sequence[str] | None = None,
        symlink: str | Sequence[str] | None = None,
        progress: Progress | None = None,
    ) -> str:
        """Make the tree and return its path; ValueError naming what is wrong."""
        say = progress or (lambda message: None)
        if not name or "/" in name or name.startswith((".", "-")):
            raise ValueError(f"{name!r} cannot name a worktree")
        found = await repos.locate(os.fsencode(repository))
        if found is None:
            raise ValueError(f"{repository} is not in a git repository")
        top = found.top
        path = self.place(top, name)
        if os.path.lexists(path):
            raise ValueError(f"{os.fsdecode(path)} already exists")
        parent = os.path.dirname(path)
        made_parent = not os.path.isdir(parent)
        os.makedirs(parent, exist_ok=True)
        say(f"creating a worktree on branch {name}")
        exists = await git.run(
            ["rev-parse", "--verify", "--quiet", f"refs/heads/{name}"], top, check=False
        )
        made = _Made(top, path, name, new_branch=exists.returncode != 0)
        try:
            await self._make(made, symlink, include, say)
        except BaseException as exc:
            # Half a tree is no use to anyone: it goes, with the branch made for it.
            with anyio.CancelScope(shield=True):
                await self._undo(made)
                if made_parent:
                    with contextlib.suppress(OSError):
                        os.rmdir(parent)  # only when empty
            if isinstance(exc, git.GitError):
                raise ValueError(exc.message) from None
            raise
        self._made[os.fsdecode(path)] = made
        say("worktree ready")
        return os.fsdecode(path)

    async def _make(
        self,
        made: _Made,
        symlink: str | Sequence[str] | None,
        include: str | Sequence[str] | None,
        say: Progress,
    ) -> None:
        top, path, name = made.top, made.path, made.branch
        # The session asked for this tree: its post-checkout hook runs, as with git itself.
        if not made.new_branch:
            await git.run(["worktree", "add", "-q", path, name], top, hooks=True)
        else:
            base = await git.run(["symbolic-ref", "-q", "--short", "HEAD"], top, check=False)
            await git.run(["worktree", "add", "-q", "-b", name, path, "HEAD"], top, hooks=True)
            if base.returncode == 0 and base.stdout.strip():
                # Where VS Code's own git support looks for a branch's base.
                await git.run(
                    ["config", f"branch.{name}.vscode-merge-base", base.stdout.strip()], top
                )
        # Links first, as the reference makes them; each pass is best effort.
        folders = patterns_of(symlink)
        if folders:
            say("linking git-ignored folders")
            await self._link(top, path, folders)
        files = patterns_of(include)
        if files:
            say("copying git-ignored files")
            await self._copy(top, path, files)

    async def discard(self, tree: str) -> None:
        """Undo ``create`` for a session that was then not made: the tree goes whatever it
        holds, and its branch with it when ``create`` made the branch. A tree this port
        did not make is left alone."""
        made = self._made.pop(tree, None)
        if made is not None:
            await self._undo(made)

    async def _undo(self, made: _Made) -> None:
        """Best effort: each step runs whatever the one before it did. Only git removes the
        folder: a failed ``worktree add`` cleans up after itself, and a folder git does not
        know as this tree may be somebody else's."""
        done = await git.run(
            ["worktree", "remove", "--force", "--force", made.path], made.top, check=False
        )
        if done.returncode != 0 and os.path.lexists(made.path):
            log.info("worktree: git could not remove %r: %r", made.path, done.stderr)
        if made.new_branch:
            # Deleting the branch deletes its config section (the recorded base) too.
            done = await git.run(["branch", "-D", made.branch], made.top, check=False)
            if done.returncode != 0:
                log.info("worktree: cannot delete branch %s: %r", made.branch, done.stderr)

    async def _ignored(self, top: bytes, pattern: str, *, folders: bool) -> list[bytes]:
        """Git-ignored paths the pattern matches (folders as ``dir/`` when ``folders``)."""
        shape = ["--directory"] if folders else []
        standard = await git.run(
            ["ls-files", "-z", "--others", "--ignored", "--exclude-standard", *shape], top
        )
        matched = await git.run(
            ["ls-files", "-z", "--others", "--ignored", f"--exclude={pattern}", *shape], top
        )
        ignored = set(standard.stdout.split(b"\0"))
        return [p for p in matched.stdout.split(b"\0") if p and p in ignored]

    async def _link(self, top: bytes, tree: bytes, patterns: list[str]) -> None:
        for pattern in patterns:
            try:
                for rel in await self._ignored(top, pattern, folders=True):
                    if not rel.endswith(b"/"):
                        continue
                    rel = rel.rstrip(b"/")
                    target = os.path.join(tree, rel)
                    if os.path.lexists(target):
                        continue
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    os.symlink(os.path.join(top, rel), target, target_is_directory=True)
                    await self._exclude(top, rel)
            except (OSError, git.GitError) as exc:
                log.info("worktree: cannot link %r: %s", pattern, exc)

    async def _exclude(self, top: bytes, rel: bytes) -> None:
        """Keep a link out of the tree's changes: a "dir/" pattern does not match a link,
        so the link's own path goes into the shared info/exclude (where it was ignored
        anyway, as a folder)."""
        common = await git.run(["rev-parse", "--path-format=absolute", "--git-common-dir"], top)
        exclude = os.path.join(common.stdout.strip(), b"info", b"exclude")
        line = b"/" + rel
        os.makedirs(os.path.dirname(exclude), exist_ok=True)
        held = b""
        if os.path.exists(exclude):
            with open(exclude, "rb") as handle:
                held = handle.read()
        if line not in held.split(b"\n"):
            with open(exclude, "ab") as handle:
                handle.write((b"" if not held or held.endswith(b"\n") else b"\n") + line + b"\n")

    async def _copy(self, top: bytes, tree: bytes, patterns: list[str]) -> None:
        for pattern in patterns:
            try:
                picked = await self._ignored(top, pattern, folders=False)
            except git.GitError as exc:
                log.info("worktree: cannot read %r: %s", pattern, exc)
                continue

            def copy(paths: list[bytes] = picked) -> None:
                for rel in paths:
                    target = os.path.join(tree, rel)
                    if os.path.lexists(target):
                        continue
                    try:
                        os.makedirs(os.path.dirname(target), exist_ok=True)
                        shutil.copy2(os.path.join(top, rel), target, follow_symlinks=False)
                    except OSError as exc:
                        log.info("worktree: cannot copy %r: %s", rel, exc)

            await anyio.to_thread.run_sync(copy)

    async def remove(self, tree: str, *, force: bool = False) -> bool:
        """Take a clean tree off the disk (its branch stays); a dirty one stays unless forced."""
        self._made.pop(tree, None)  # past the point of being discarded
        found = await repos.locate(os.fsencode(tree))
        if found is None:
            return False
        status = await found.status()
        # The folders linked in at creation read as untracked links: they are not work.
        links = [
            found.abs(e.path)
            for e in status.entries
            if e.kind == "?" and os.path.islink(found.abs(e.path))
        ]
        if not force and len(links) < len(status.entries):
            return False
        for link in links:
            os.unlink(link)
        common = await git.run(
            ["rev-parse", "--path-format=absolute", "--git-common-dir"], found.top
        )
        main = os.path.dirname(common.stdout.strip())
        await git.run(["worktree", "remove", *(["--force"] if force else []), found.top], main)
        return True
