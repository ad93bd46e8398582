"""Detached worktrees: git worktrees the window asks for before a session runs in them.

The Agents window's Dev Container flow asks the host that owns a repository
for a tree keyed by an opaque handle (a UUID), then runs the session inside a
container in that folder. The trees are made by the worktrees port (ahp-git),
so ``worktreeIncludeFiles`` means what it means for any isolated session; this
module keeps the handles, on disk, so they outlive the host.

Nothing here loses work: archiving commits what the tree holds to its branch
before the checkout goes (and unarchiving puts it back as uncommitted edits),
and deleting a tree with work in it commits that work to the branch, which
then stays. The only paths touched are the ones the host itself recorded: a
client names a handle, never a folder.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
import uuid
from pathlib import Path
from typing import Any

import anyio

from ahpcore.api import PluginHost, file_uri, path_of_file_uri, write_private
from ahpcore.ports import WorktreesPort
from ahpcore.protocol.errors import (
    ALREADY_EXISTS,
    CONFLICT,
    INVALID_PARAMS,
    NOT_FOUND,
    SESSION_NOT_FOUND,
    ProtocolError,
)
from ahpcore.protocol.uris import session_id_of

log = logging.getLogger(__name__)

CREATE = "vscode/createAgentHostDetachedWorktree"
CLAIM = "vscode/claimAgentHostDetachedWorktree"
ARCHIVE = "vscode/setAgentHostDetachedWorktreeArchived"
DELETE = "vscode/deleteAgentHostDetachedWorktree"
RECONCILE = "vscode/reconcileAgentHostDetachedWorktrees"
METHODS = (CREATE, CLAIM, ARCHIVE, DELETE, RECONCILE)

#: VS Code's branches for these trees all start so.
BRANCH_PREFIX = "agents/"
#: A handle no listed session names for this long is deleted (work kept on its branch).
RETENTION_SECONDS = 7 * 24 * 3600
ARCHIVE_MESSAGE = "Work in progress, kept when the session was archived"
DELETE_MESSAGE = "Work in progress, kept when the session's worktree was deleted"
#: Committing needs a name; one the user configured always wins.
FALLBACK_IDENTITY = ("-c", "user.name=ahp", "-c", "user.email=ahp@localhost")


def slug_of(prompt: str) -> str:
    """A few words of the prompt, as a branch name may hold them."""
    words = re.findall(r"[a-z0-9]+", prompt.lower())
    slug = ""
    for word in words:
        if len(slug) + len(word) + 1 > 40:
            break
        slug = f"{slug}-{word}" if slug else word
    return slug or "session"


class GitFailed(Exception):
    pass


async def git(cwd: str, *args: str, check: bool = True) -> tuple[int, str]:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    done = await anyio.run_process(["git", *args], cwd=cwd, check=False, env=env)
    out = done.stdout.decode("utf-8", "replace").strip()
    if check and done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip()
        raise GitFailed(f"git {args[0]}: {said or out or done.returncode}")
    return done.returncode, out


def _unknown(method: str, handle: str) -> ProtocolError:
    return ProtocolError(NOT_FOUND, f"{method}: Unknown detached worktree handle: {handle}")


def _text(method: str, params: dict[str, Any], key: str) -> str:
    value = params.get(key)
    if not isinstance(value, str) or not value:
        raise ProtocolError(INVALID_PARAMS, f"{method}: params.{key} must be a non-empty string")
    return value


class DetachedWorktrees:
    def __init__(self, host: PluginHost, port: WorktreesPort, folder: Path) -> None:
        self._host = host
        self._port = port
        self._file = folder / "worktrees.json"
        self._lock = anyio.Lock()
        self.handles: dict[str, dict[str, Any]] = self._load()

    # -- the file ----------------------------------------------------------------------
    def _load(self) -> dict[str, dict[str, Any]]:
        try:
            held = json.loads(self._file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            # Kept aside, never overwritten: the trees it names are still on disk.
            aside = self._file.with_suffix(f".unreadable-{int(time.time())}")
            log.error("vscode: %s is unreadable (%s); kept as %s", self._file, exc, aside)
            os.replace(self._file, aside)
            return {}
        handles = held.get("handles") if isinstance(held, dict) else None
        return {k: v for k, v in (handles or {}).items() if isinstance(v, dict)}

    def _save(self) -> None:
        text = json.dumps({"version": 1, "handles": self.handles}, indent=1, sort_keys=True)
        write_private(self._file, text)

    def _known(self, method: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        handle = _text(method, params, "handle")
        record = self.handles.get(handle)
        if record is None:
            raise _unknown(method, handle)
        return handle, record

    # -- the five methods ----------------------------------------------------------------
    async def create(self, client: Any, params: dict[str, Any]) -> dict[str, Any]:
        session = _text(CREATE, params, "session")
        prompt = params.get("prompt")
        if not isinstance(prompt, str):
            raise ProtocolError(INVALID_PARAMS, f"{CREATE}: params.prompt must be a string")
        if not self._host.is_open_session(session):
            raise ProtocolError(SESSION_NOT_FOUND, f"{CREATE}: no open session {session}")
        folder = self._host.session_folder(session)
        if folder is None:
            raise ProtocolError(
                INVALID_PARAMS, f"{CREATE}: session {session} has no local working directory"
            )
        repository = await self._main_repository(folder)
        if repository is None:
            raise ProtocolError(INVALID_PARAMS, f"{CREATE}: {folder} is not in a git repository")
        record = await self._host.session_record(session_id_of(session))
        config = (record or {}).get("config") or {}
        handle = str(uuid.uuid4())
        leaf = f"{slug_of(prompt)}-{handle[:8]}"
        name, branch = f"agents-{leaf}", f"{BRANCH_PREFIX}{leaf}"
        async with self._lock:
            try:
                path = await self._port.create(
                    repository, name, include=config.get("worktreeIncludeFiles")
                )
            except ValueError as exc:
                raise ProtocolError(INVALID_PARAMS, f"{CREATE}: {exc}") from None
            try:
                # The port names a branch as it names the folder; VS Code's live under agents/.
                await git(path, "branch", "-m", name, branch)
                _, base = await git(path, "rev-parse", "HEAD")
            except GitFailed as exc:
                await self._port.discard(path)
                raise ProtocolError(CONFLICT, f"{CREATE}: {exc}") from None
            self.handles[handle] = {
                "session": session,
                "source": folder,
                "repository": repository,
                "path": path,
                "branch": branch,
                "base": base,
                "claimed": False,
                "archived": False,
                "createdAt": time.time(),
            }
            self._save()
        return {"handle": handle, "resource": file_uri(path)}

    async def claim(self, client: Any, params: dict[str, Any]) -> None:
        async with self._lock:
            _, record = self._known(CLAIM, params)
            record["claimed"] = True
            record.pop("unlistedSince", None)
            self._save()

    async def set_archived(self, client: Any, params: dict[str, Any]) -> None:
        archived = params.get("archived")
        if not isinstance(archived, bool):
            raise ProtocolError(INVALID_PARAMS, f"{ARCHIVE}: params.archived must be a boolean")
        async with self._lock:
            _, record = self._known(ARCHIVE, params)
            if record.get("archived") == archived:
                return
            try:
                if archived:
                    await self._archive(record)
                else:
                    await self._unarchive(record)
            except GitFailed as exc:
                raise ProtocolError(CONFLICT, f"{ARCHIVE}: {exc}") from None
            record["archived"] = archived
            self._save()

    async def delete(self, client: Any, params: dict[str, Any]) -> None:
        handle = _text(DELETE, params, "handle")
        async with self._lock:
            record = self.handles.get(handle)
            if record is None:
                return  # deleted already: a second delete is not an error
            try:
                await self._delete(record)
            except GitFailed as exc:
                raise ProtocolError(CONFLICT, f"{DELETE}: {exc}") from None
            del self.handles[handle]
            self._save()

    async def reconcile(self, client: Any, params: dict[str, Any]) -> None:
        scope = _text(RECONCILE, params, "scope")
        active = params.get("activeHandles")
        if not isinstance(active, list) or not all(isinstance(h, str) for h in active):
            raise ProtocolError(
                INVALID_PARAMS, f"{RECONCILE}: params.activeHandles must be a list of strings"
            )
        folder = path_of_file_uri(scope)
        now = time.time()
        async with self._lock:
            expired = []
            for handle, record in self.handles.items():
                if handle in active:
                    record.pop("unlistedSince", None)
                    continue
                if folder is None or folder not in (record.get("source"), record.get("repository")):
                    continue  # another window's scope: not this call's to judge
                since = record.setdefault("unlistedSince", now)
                if now - since >= RETENTION_SECONDS:
                    expired.append(handle)
            for handle in expired:
                try:
                    await self._delete(self.handles[handle])
                except GitFailed as exc:
                    log.warning("vscode: kept the unlisted worktree %s: %s", handle, exc)
                    continue
                del self.handles[handle]
            self._save()

    # -- git ------------------------------------------------------------------------------
    @staticmethod
    async def _main_repository(folder: str) -> str | None:
        """The main checkout of the repository ``folder`` is in (not a worktree of it)."""
        try:
            _, common = await git(folder, "rev-parse", "--path-format=absolute", "--git-common-dir")
        except (GitFailed, OSError):
            return None
        if os.path.basename(common) != ".git":
            return None  # a bare repository has no checkout to branch from
        return os.path.dirname(common)

    @staticmethod
    async def _commit_work(path: str, message: str) -> bool:
        """Commit everything the tree holds but ignored files; True when there was any."""
        _, status = await git(path, "status", "--porcelain", "--untracked-files=all")
        if not status:
            return False
        await git(path, "add", "-A")
        code, _ = await git(path, "config", "user.email", check=False)
        identity = () if code == 0 else FALLBACK_IDENTITY
        await git(path, *identity, "commit", "-q", "--no-verify", "-m", message)
        return True

    async def _archive(self, record: dict[str, Any]) -> None:
        path = record["path"]
        if os.path.isdir(path):
            record["workCommitted"] = await self._commit_work(path, ARCHIVE_MESSAGE)
            _, record["archivedAt"] = await git(path, "rev-parse", "HEAD")
            if not await self._port.remove(path):
                raise GitFailed(f"{path} still holds work after it was committed; kept")
        else:
            record["workCommitted"] = False
        await git(record["repository"], "worktree", "prune", check=False)

    async def _unarchive(self, record: dict[str, Any]) -> None:
        path, branch, repository = record["path"], record["branch"], record["repository"]
        if os.path.lexists(path):
            raise ProtocolError(ALREADY_EXISTS, f"{ARCHIVE}: {path} exists already; kept archived")
        await git(repository, "worktree", "add", "-q", path, branch)
        _, head = await git(path, "rev-parse", "HEAD")
        if record.pop("workCommitted", False) and head == record.get("archivedAt"):
            # The edits go back to being edits, as they were when the session was archived.
            await git(path, "reset", "-q", "--mixed", "HEAD~1")
        record.pop("archivedAt", None)

    async def _delete(self, record: dict[str, Any]) -> None:
        path, branch, repository = record["path"], record["branch"], record["repository"]
        if not os.path.isdir(repository):
            return  # the repository is gone, and the tree with it
        worked = False
        if os.path.isdir(path):
            worked = await self._commit_work(path, DELETE_MESSAGE)
            if not await self._port.remove(path, force=True):
                raise GitFailed(f"{path} could not be removed")
        await git(repository, "worktree", "prune", check=False)
        code, tip = await git(repository, "rev-parse", "--verify", "-q", branch, check=False)
        untouched = code == 0 and tip == record.get("base") and not worked
        if untouched and not record.get("workCommitted"):
            # A branch that never got a commit holds nothing: it goes with its tree.
            await git(repository, "branch", "-D", branch, check=False)
        elif code == 0:
            log.info("vscode: kept branch %s: it holds work", branch)
