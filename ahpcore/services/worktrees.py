"""Sessions created with ``isolation: worktree`` get a tree of their own.

At ``session_creating``, when the session's config says ``isolation:
worktree``, the worktrees port makes the tree first (each step told to the
client as ``root/progress`` when it passed a progress token) and the session
starts in it instead of the folder the client named. ``worktreeIncludeFiles``
and ``worktreeSymlinkFolders`` are handed to the port. A session refused after
its tree was made leaves no tree and no new branch behind (the port's
``discard``). At ``session_disposed`` a clean tree is taken off the disk (its
branch stays) and a tree with work in it is kept.
"""

from __future__ import annotations

import logging

import anyio

from ahpcore.lifecycle import SessionCreation
from ahpcore.markers import hookimpl
from ahpcore.ports import WorktreesPort
from ahpcore.protocol.errors import INVALID_PARAMS, ProtocolError
from ahpcore.protocol.uris import file_uri, path_of_file_uri, session_id_of
from ahpcore.sessions.folders import check_folders

log = logging.getLogger(__name__)


class SessionTrees:
    def __init__(self, port: WorktreesPort) -> None:
        self.port = port
        #: Session id -> the tree made for it.
        self.trees: dict[str, str] = {}

    # The tree is made before anyone else sees the session's folders.
    @hookimpl(tryfirst=True)
    async def ahp_session_creating(self, creation: SessionCreation) -> None:
        params = creation.params
        config = creation.config
        if config.get("isolation") != "worktree" or not creation.local_folders:
            return  # a session on another machine has its worktree made there, if anywhere
        folders = params.get("workingDirectories") or []
        check_folders(folders)  # before a tree is made from them, as createSession would
        folder = path_of_file_uri(folders[0]) if folders else None
        if folder is None:
            raise ProtocolError(
                INVALID_PARAMS,
                "isolation: worktree needs params.workingDirectories naming a local folder",
            )
        session_id = session_id_of(creation.session)
        try:
            tree = await self.port.create(
                folder,
                f"session-{session_id[:8]}",
                include=config.get("worktreeIncludeFiles"),
                symlink=config.get("worktreeSymlinkFolders"),
                progress=creation.progress,
            )
        except ValueError as exc:
            raise ProtocolError(INVALID_PARAMS, f"cannot make a worktree: {exc}") from None
        self.trees[session_id] = tree
        creation.undo(lambda: self.abandon(session_id))
        params["workingDirectories"] = [file_uri(tree), *folders[1:]]

    async def abandon(self, session_id: str) -> None:
        """Take back the tree made for a session that then was not created."""
        tree = self.trees.pop(session_id, None)
        if tree is None:
            return
        with anyio.CancelScope(shield=True):
            try:
                await self.port.discard(tree)
            except Exception:
                log.exception("could not take back the worktree %s", tree)

    # Last: whatever else reads the tree (a changeset forgetting its marks) goes first.
    @hookimpl(trylast=True)
    async def ahp_session_disposed(self, session: str, folder: str | None) -> None:
        try:
            tree = self.trees.pop(session_id_of(session), None)
        except ValueError:
            return
        if tree is None:
            return
        try:
            if not await self.port.remove(tree):
                log.info("kept the worktree %s: it holds work", tree)
        except Exception:
            log.exception("could not remove the worktree %s", tree)
