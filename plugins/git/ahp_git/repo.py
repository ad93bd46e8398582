"""One repository as the changesets see it: where it is, what moved, and marks.

Paths inside are bytes relative to the top level; the session's folder is a
``prefix`` of them (empty at the top level), and every listing is limited to it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread

from ahp_git import git
from ahp_git.git import Status, StatusEntry, TreeChange
from ahp_git.uris import blob_uri, file_uri

#: git's own test for binary content: a NUL in the first 8000 bytes.
_SNIFF = 8000


@dataclass(frozen=True)
class Repo:
    top: bytes  # the working tree's top level, absolute
    git_dir: bytes  # absolute
    prefix: bytes  # the session folder relative to ``top`` ("" or "sub/dir/")

    @property
    def folder(self) -> bytes:
        return self.top + b"/" + self.prefix.rstrip(b"/") if self.prefix else self.top

    def abs(self, rel: bytes) -> bytes:
        return self.top + b"/" + rel

    def rel(self, path: bytes) -> bytes | None:
        """``path`` relative to the top level, or None when it is outside the session folder."""
        path = os.path.normpath(path)
        # git names the top level by its real path; a client may reach it through a link.
        head, tail = os.path.split(path)
        path = os.path.join(os.path.realpath(head), tail) if tail else os.path.realpath(path)
        folder = self.folder
        if path == folder:
            return self.prefix.rstrip(b"/") or b"."
        if not path.startswith(folder + b"/"):
            return None
        return path[len(self.top) + 1 :]

    @property
    def pathspec(self) -> bytes:
        return self.prefix.rstrip(b"/") or b"."

    async def run(self, *args: git.Arg, **kwargs: Any) -> Any:
        return await git.run(args, self.top, **kwargs)

    # -- reading -------------------------------------------------------------------
    async def status(self) -> Status:
        done = await self.run(
            "status",
            "--porcelain=v2",
            "-z",
            "--branch",
            "--untracked-files=all",
            "--",
            self.pathspec,
        )
        return git.parse_status(done.stdout)

    async def mark(self) -> str:
        """A tree holding the working tree as it is now, untracked files included.

        Built in an index of its own, seeded from the real one so unchanged
        files are not hashed again; the real index is never touched.
        """
        index = os.path.join(self.git_dir, f"ahp-mark-{uuid.uuid4().hex}.index".encode())
        real = os.path.join(self.git_dir, b"index")
        env = {"GIT_INDEX_FILE": os.fsdecode(index)}
        try:
            if os.path.exists(real):
                await anyio.to_thread.run_sync(shutil.copyfile, real, index)
            await self.run("add", "-A", "--", ".", env=env)
            done = await self.run("write-tree", env=env)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(index)
        return done.stdout.decode().strip()

    async def tree_changes(self, before: str, after: str) -> list[TreeChange]:
        done = await self.run(
            "diff",
            "--raw",
            "--numstat",
            "-z",
            "-M",
            "-C",
            "--no-ext-diff",
            "--no-textconv",
            before,
            after,
            "--",
            self.pathspec,
        )
        return git.parse_raw_numstat(done.stdout)

    async def empty_tree(self) -> str:
        done = await self.run("hash-object", "-t", "tree", "--stdin", stdin=b"")
        return done.stdout.decode().strip()


async def locate(directory: bytes) -> Repo | None:
    """The repository ``directory`` is in, or None when it is in none."""
    if not os.path.isdir(directory):
        return None
    try:
        done = await git.run(
            ["rev-parse", "--show-toplevel", "--absolute-git-dir", "--show-prefix"], directory
        )
    except git.GitMissing:
        raise
    except git.GitError:
        return None
    lines = done.stdout.split(b"\n")
    if len(lines) < 3:
        return None
    return Repo(top=lines[0], git_dir=lines[1], prefix=lines[2])


# -- rows ---------------------------------------------------------------------------
def _side(uri: str, content: str) -> dict[str, Any]:
    return {"uri": uri, "content": {"uri": content}}


def _row(edit: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    side = edit.get("after") or edit["before"]
    row: dict[str, Any] = {"id": side["uri"], "edit": edit}
    if meta:
        row["_meta"] = meta
    return row


def _is_binary(path: bytes) -> bool:
    try:
        with open(path, "rb") as handle:
            return b"\0" in handle.read(_SNIFF)
    except OSError:
        return False


async def binaries(paths: Sequence[bytes]) -> set[bytes]:
    """Which of ``paths`` hold binary content, sniffed in a worker thread."""

    def sniff() -> set[bytes]:
        return {path for path in paths if _is_binary(path)}

    return await anyio.to_thread.run_sync(sniff) if paths else set()


async def uncommitted_rows(repo: Repo, status: Status) -> list[dict[str, Any]]:
    """One row per path ``git status`` reports, renames and copies as one."""
    present = [repo.abs(e.path) for e in status.entries if e.in_worktree]
    binary = await binaries(present)
    return [_uncommitted_row(repo, status.head, entry, binary) for entry in status.entries]


def _uncommitted_row(
    repo: Repo, head: str | None, entry: StatusEntry, binary: set[bytes]
) -> dict[str, Any]:
    path = repo.abs(entry.path)
    edit: dict[str, Any] = {}
    if entry.in_head and head is not None:
        if entry.kind == "2" and entry.rename == "R" and entry.orig_path is not None:
            orig = repo.abs(entry.orig_path)
            edit["before"] = _side(file_uri(orig), blob_uri(orig, head))
        elif entry.kind == "2" and entry.orig_path is not None:
            # A copy's source is still there: the new path on both sides.
            edit["before"] = _side(file_uri(path), blob_uri(repo.abs(entry.orig_path), head))
        else:
            edit["before"] = _side(file_uri(path), blob_uri(path, head))
    if entry.in_worktree:
        edit["after"] = _side(file_uri(path), file_uri(path))
    if not edit:  # added to the index, then removed from the tree
        edit["before"] = _side(file_uri(path), file_uri(path))
    meta: dict[str, Any] = {"ahp.staged": entry.xy[0], "ahp.unstaged": entry.xy[1]}
    if entry.kind == "?":
        meta = {"ahp.staged": ".", "ahp.unstaged": "?", "ahp.untracked": True}
    elif entry.kind == "u":
        meta["ahp.conflict"] = True
    if entry.kind == "2" and entry.rename == "C":
        meta["ahp.copiedFrom"] = file_uri(repo.abs(entry.orig_path or b""))
    if path in binary:
        meta["ahp.binary"] = True
    return _row(edit, meta)


def tree_rows(
    repo: Repo, before: str, after: str | None, changes: Iterable[TreeChange]
) -> list[dict[str, Any]]:
    """Rows between two marks; ``after`` None means the after side is the file itself."""
    rows = []
    for change in changes:
        path = repo.abs(change.path)
        edit: dict[str, Any] = {}
        if change.status != "A":
            source = repo.abs(change.orig_path) if change.orig_path else path
            shown = source if change.status == "R" else path
            edit["before"] = _side(file_uri(shown), blob_uri(source, before))
        if change.status != "D":
            edit["after"] = _side(
                file_uri(path), file_uri(path) if after is None else blob_uri(path, after)
            )
        if change.added is not None:
            edit["diff"] = {"added": change.added, "removed": change.removed}
        meta: dict[str, Any] = {"ahp.binary": True} if change.binary else {}
        if change.status == "C" and change.orig_path:
            meta["ahp.copiedFrom"] = file_uri(repo.abs(change.orig_path))
        rows.append(_row(edit, meta))
    return rows
