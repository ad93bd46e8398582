"""Sessions created with ``isolation: worktree`` get a tree of their own.

Wraps ``createSession``: when the session's config says ``isolation:
worktree`` and a plugin provides the worktrees port, the tree is made first
(told to the client as ``root/progress`` when it passed a progress token),
and the session starts in it instead of the folder the client named.
``worktreeIncludeFiles`` and ``worktreeSymlinkFolders`` are handed to the
port. A session refused after its tree was made leaves no tree and no new
branch behind (the port's ``discard``). On ``disposeSession`` a clean tree is
taken off the disk (its branch stays) and a tree with work in it is kept.
``install(host)`` wires it.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any
from urllib.parse import quote_from_bytes, unquote_to_bytes, urlsplit

import anyio

from ahpcore.engine.clients import Client
from ahpcore.protocol.errors import INVALID_PARAMS, ProtocolError
from ahpcore.protocol.uris import session_id_of
from ahpcore.sessions.folders import check_folders

if TYPE_CHECKING:
    from ahpcore.host import Host

log = logging.getLogger(__name__)


def _path(uri: str) -> str | None:
    parts = urlsplit(uri)
    if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
        return None
    return os.fsdecode(unquote_to_bytes(parts.path))


def _uri(path: str) -> str:
    return "file://" + quote_from_bytes(os.fsencode(path), safe="/")


class SessionTrees:
    def __init__(self, host: Host, port: Any) -> None:
        self.host = host
        self.port = port
        #: Session id -> the tree made for it.
        self.trees: dict[str, str] = {}
        router = host.router
        create = router.routes.get("createSession")
        dispose = router.routes.get("disposeSession")
        if create is None or dispose is None:
            return  # no backend: no sessions to isolate
        create_inner, dispose_inner = create.handler, dispose.handler

        async def create_session(client: Client, params: dict[str, Any]) -> Any:
            isolated = await self.isolate(client, params)
            try:
                return await _call(create_inner, client, isolated)
            except Exception:
                if isolated is not params:  # a tree was made for this session, now refused
                    await self.abandon(isolated)
                raise

        async def dispose_session(client: Client, params: dict[str, Any]) -> Any:
            result = await _call(dispose_inner, client, params)
            await self.release(params.get("channel"))
            return result

        create.handler = create_session
        dispose.handler = dispose_session

    async def isolate(self, client: Client, params: dict[str, Any]) -> dict[str, Any]:
        config = params.get("config") or {}
        if config.get("isolation") != "worktree":
            return params
        folders = params.get("workingDirectories") or []
        check_folders(folders)  # before a tree is made from them, as createSession would
        folder = _path(folders[0]) if folders else None
        if folder is None:
            raise ProtocolError(
                INVALID_PARAMS,
                "isolation: worktree needs params.workingDirectories naming a local folder",
            )
        try:
            session_id = session_id_of(params["channel"])
        except ValueError as exc:
            raise ProtocolError(INVALID_PARAMS, f"params.channel: {exc}") from None
        token = params.get("progressToken")
        steps = [0]

        def progress(message: str) -> None:
            if isinstance(token, str):
                steps[0] += 1
                self.host.engine_or_fail.progress(client, token, steps[0], None, message)

        try:
            tree = await self.port.create(
                folder,
                f"session-{session_id[:8]}",
                include=config.get("worktreeIncludeFiles"),
                symlink=config.get("worktreeSymlinkFolders"),
                progress=progress,
            )
        except ValueError as exc:
            raise ProtocolError(INVALID_PARAMS, f"cannot make a worktree: {exc}") from None
        self.trees[session_id] = tree
        return {**params, "workingDirectories": [_uri(tree), *folders[1:]]}

    async def abandon(self, params: dict[str, Any]) -> None:
        """Take back the tree made for a session that then was not created."""
        tree = self.trees.pop(session_id_of(params["channel"]), None)
        if tree is None:
            return
        # Ports from before ``discard`` can at least take the tree off the disk.
        discard = getattr(self.port, "discard", None)
        with anyio.CancelScope(shield=True):
            try:
                if discard is not None:
                    await discard(tree)
                else:
                    await self.port.remove(tree, force=True)
            except Exception:
                log.exception("could not take back the worktree %s", tree)

    async def release(self, session: Any) -> None:
        if not isinstance(session, str):
            return
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


async def _call(handler: Any, client: Client, params: dict[str, Any]) -> Any:
    result = handler(client, params)
    return await result if hasattr(result, "__await__") else result


def install(host: Host) -> SessionTrees | None:
    port = host.ports.get("worktrees")
    return SessionTrees(host, port) if port is not None else None
