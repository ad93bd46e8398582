"""The resources port over the local filesystem: ``file:`` URIs behind the fence.

The fence turns each URI into a checked target; the work on it runs in a worker
thread (``ahp_files.operations``), relative to folders it opened itself.
"""

from __future__ import annotations

import base64
import binascii
import errno
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread

from ahp_files import operations
from ahp_files.atomic import NotAFile, is_temp
from ahp_files.fence import Fence, Target, path_of
from ahp_files.operations import WriteRequest, max_copy_bytes
from ahpcore.protocol.errors import (
    ALREADY_EXISTS,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    NOT_FOUND,
    PERMISSION_DENIED,
    ProtocolError,
)

if TYPE_CHECKING:  # watchfiles (and multiprocessing under it) loads with the first watch
    from ahp_files.watch import FileWatch

log = logging.getLogger(__name__)
T = TypeVar("T")


def _position(params: Mapping[str, Any]) -> int:
    value = params.get("position", 0)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProtocolError(
            INVALID_PARAMS, f"position must be a byte offset (an integer >= 0), not {value!r}"
        )
    return value


def _decode(params: Mapping[str, Any]) -> bytes:
    data, encoding = params["data"], params["encoding"]
    if encoding == "base64":
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise ProtocolError(INVALID_PARAMS, "data is not valid base64") from None
    return str(data).encode("utf-8")


class FilesPort:
    def __init__(
        self,
        fence: Fence,
        spawn: Callable[..., None] | None = None,
        *,
        max_copy: int | None = None,
    ) -> None:
        self.fence = fence
        self._spawn = spawn
        self._locks: dict[Path, anyio.Lock] = {}
        #: The most one copy writes, and the most of a file one write rewrites.
        self.max_copy_bytes = max_copy_bytes() if max_copy is None else max_copy
        #: The config file's ceiling on OS watchers (``AHP_FILES_MAX_WATCHERS`` wins).
        self.max_watchers: int | None = None

    async def _run(self, uri: Any, work: Callable[[], T]) -> T:
        """Blocking work off the event loop; OS errors become refusals naming ``uri``.

        A cancelled request stops the work at its next checkpoint
        (``anyio.from_thread.check_cancelled``), which cleans up after itself.
        """
        try:
            return await anyio.to_thread.run_sync(work)
        except ProtocolError:
            raise
        except FileNotFoundError:
            raise ProtocolError(NOT_FOUND, f"nothing at {uri}") from None
        except NotAFile:
            raise ProtocolError(
                INVALID_PARAMS, f"{uri} is not a regular file (a pipe, device or socket)"
            ) from None
        except FileExistsError:
            raise ProtocolError(ALREADY_EXISTS, f"{uri} already exists") from None
        except IsADirectoryError:
            raise ProtocolError(INVALID_PARAMS, f"{uri} is a folder") from None
        except NotADirectoryError:
            raise ProtocolError(
                INVALID_PARAMS, f"{uri}: a part of the path is not a folder"
            ) from None
        except PermissionError:
            raise ProtocolError(
                PERMISSION_DENIED, f"the host's user may not do that to {uri}"
            ) from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                # The fence resolved every link; one that appears after that is a race.
                raise ProtocolError(
                    PERMISSION_DENIED, f"{uri} became a link while it was opened"
                ) from None
            if exc.errno == errno.ENAMETOOLONG:
                raise ProtocolError(INVALID_PARAMS, f"{uri}: a name in it is too long") from None
            if exc.errno == errno.ENOTEMPTY:
                raise ProtocolError(
                    INVALID_PARAMS, f"{uri} is a folder with something in it: pass recursive"
                ) from None
            raise ProtocolError(INTERNAL_ERROR, f"{uri}: {exc.strerror or exc}") from None

    async def _locked(self, path: Path, uri: Any, work: Callable[[], T]) -> T:
        # One writer per file at a time in this host, so ifMatch and append see a settled file.
        lock = self._locks.setdefault(path, anyio.Lock())
        try:
            async with lock:
                return await self._run(uri, work)
        finally:
            if not lock.locked() and lock.statistics().tasks_waiting == 0:
                self._locks.pop(path, None)

    # -- reading --------------------------------------------------------------------
    async def read(self, params: Mapping[str, Any]) -> dict[str, Any]:
        target = self.fence.target(params["uri"])
        wanted = params.get("encoding")
        return await self._run(target.uri, lambda: operations.read(target, wanted))

    async def list(self, params: Mapping[str, Any]) -> dict[str, Any]:
        target = self.fence.target(params["uri"])
        return await self._run(target.uri, lambda: operations.list_folder(target))

    async def resolve(self, params: Mapping[str, Any]) -> dict[str, Any]:
        uri = params["uri"]
        follow = params.get("followSymlinks", True) is not False
        target = self.fence.target(uri, follow=follow)
        requested = Path(os.path.normpath(path_of(uri)))
        return await self._run(
            uri, lambda: operations.resolve(target, follow=follow, requested=requested)
        )

    async def request(self, params: Mapping[str, Any]) -> dict[str, Any]:
        uri = params["uri"]
        self.fence.target(uri)  # refuses -32009 outside
        log.info(
            "resourceRequest %s (read=%s, write=%s) granted",
            uri,
            params.get("read", True),
            params.get("write", False),
        )
        return {}

    # -- writing --------------------------------------------------------------------
    async def write(self, params: Mapping[str, Any]) -> dict[str, Any]:
        target = self.fence.target(params["uri"], change=True)
        return await self._write_target(target, params)

    async def _write_target(self, target: Target, params: Mapping[str, Any]) -> dict[str, Any]:
        if_match = params.get("ifMatch")
        request = WriteRequest(
            data=_decode(params),
            mode=params.get("mode") or "truncate",
            position=_position(params),
            if_match=if_match if isinstance(if_match, str) else None,
            create_only=bool(params.get("createOnly")),
        )
        limit = self.max_copy_bytes
        return await self._locked(
            target.path,
            target.uri,
            lambda: operations.write(target, request, rewrite_limit=limit),
        )

    async def delete(self, params: Mapping[str, Any]) -> dict[str, Any]:
        target = self.fence.target(params["uri"], follow=False, change=True)
        recursive = bool(params.get("recursive"))

        def work() -> dict[str, Any]:
            operations.delete(target, recursive=recursive, checkpoint=_checkpoint)
            return {}

        return await self._locked(target.path, target.uri, work)

    async def mkdir(self, params: Mapping[str, Any]) -> dict[str, Any]:
        uri = params["uri"]
        seen = self.fence.target(uri)
        if self.fence.is_root(seen.path) and await anyio.to_thread.run_sync(seen.path.is_dir):
            return {}  # a session's folder is there already; it is never made or changed
        target = self.fence.target(uri, change=True)

        def work() -> dict[str, Any]:
            operations.mkdir(target)
            return {}

        return await self._run(uri, work)

    async def move(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return await self._transfer(params, move=True)

    async def copy(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return await self._transfer(params, move=False)

    async def _transfer(self, params: Mapping[str, Any], *, move: bool) -> dict[str, Any]:
        # A move carries a link as it is and takes its source away; a copy carries
        # what the source points to and leaves it.
        source = self.fence.target(params["source"], follow=not move, change=move)
        if not move:
            self.fence.refuse_git(source.uri, source.path, "copies from")
        destination = self.fence.target(params["destination"], follow=False, change=True)
        fail_if_exists = bool(params.get("failIfExists"))
        limit = self.max_copy_bytes
        operation = operations.move if move else operations.copy

        def work() -> dict[str, Any]:
            operation(
                source,
                destination,
                fail_if_exists=fail_if_exists,
                limit=limit,
                checkpoint=_checkpoint,
            )
            return {}

        return await self._locked(destination.path, destination.uri, work)

    # -- watching -------------------------------------------------------------------
    async def watch(self, params: Mapping[str, Any], emit: Callable[[Any], None]) -> FileWatch:
        uri = params["uri"]
        path = self.fence.locate(uri)
        if self._spawn is None:
            raise ProtocolError(INTERNAL_ERROR, "this host runs no background work for watches")
        from ahp_files.watch import open_watch

        # Answered once an OS watcher is running for it: never a watch that is dead.
        return await open_watch(self, self._spawn, uri, path, params, emit, ignore=is_temp)


def _checkpoint() -> None:
    """Stops a worker thread's long work once its request is cancelled."""
    anyio.from_thread.check_cancelled()
