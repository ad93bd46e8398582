"""The resources port over the local filesystem: ``file:`` URIs behind the fence."""

from __future__ import annotations

import base64
import binascii
import errno
import logging
import mimetypes
import os
import shutil
import stat
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.to_thread

from ahp_files.atomic import (
    NotAFile,
    atomic_write,
    file_chunks,
    is_temp,
    mode_of,
    read_bounded,
)
from ahp_files.fence import Fence, path_of
from ahpcore.protocol.errors import (
    ALREADY_EXISTS,
    CONFLICT,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    NOT_FOUND,
    PERMISSION_DENIED,
    ProtocolError,
)

if TYPE_CHECKING:  # watchfiles (and multiprocessing under it) loads with the first watch
    from ahp_files.watch import FileWatch

log = logging.getLogger(__name__)

#: The largest file resourceRead answers with (base64 grows it by a third, and a
#: frame past the host's limit would close the connection).
MAX_READ_BYTES = 32 << 20
T = TypeVar("T")


def etag_of(info: os.stat_result) -> str:
    """Changes whenever the file is rewritten, renamed over, or touched."""
    return f"{info.st_mtime_ns:x}-{info.st_size:x}-{info.st_ino:x}"


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).isoformat().replace("+00:00", "Z")


def _content_type(path: Path, sample: bytes | None = None) -> str | None:
    guessed, _ = mimetypes.guess_type(path.name)
    if guessed:
        return guessed
    if sample is None:
        return None
    return "application/octet-stream" if b"\x00" in sample[:8192] else "text/plain"


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


def _is_folder(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


class FilesPort:
    def __init__(self, fence: Fence, spawn: Callable[..., None] | None = None) -> None:
        self.fence = fence
        self._spawn = spawn
        self._locks: dict[Path, anyio.Lock] = {}

    async def _run(self, uri: Any, work: Callable[[], T]) -> T:
        """Blocking work off the event loop; OS errors become refusals naming ``uri``."""
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
        uri = params["uri"]
        path = self.fence.locate(uri)
        wanted = params.get("encoding")

        def work() -> dict[str, Any]:
            info = os.stat(path)
            if stat.S_ISDIR(info.st_mode):
                raise ProtocolError(INVALID_PARAMS, f"{uri} is a folder: list it with resourceList")
            if info.st_size > MAX_READ_BYTES:
                raise ProtocolError(
                    INVALID_PARAMS,
                    f"{uri} is {info.st_size} bytes; resourceRead answers up to {MAX_READ_BYTES}",
                )
            found = read_bounded(path, MAX_READ_BYTES)
            if found is None:
                raise ProtocolError(
                    INVALID_PARAMS,
                    f"{uri} grew past {MAX_READ_BYTES} bytes while it was read",
                )
            data = found
            result: dict[str, Any] = {}
            text = None
            if wanted != "base64":
                try:
                    text = data.decode("utf-8")
                except UnicodeDecodeError:
                    text = None  # the protocol's fallback for bytes that are not text
            if text is not None:
                result.update(data=text, encoding="utf-8")
            else:
                result.update(data=base64.b64encode(data).decode("ascii"), encoding="base64")
            content_type = _content_type(path, data)
            if content_type:
                result["contentType"] = content_type
            return result

        return await self._run(uri, work)

    async def list(self, params: Mapping[str, Any]) -> dict[str, Any]:
        uri = params["uri"]
        path = self.fence.locate(uri)

        def work() -> dict[str, Any]:
            if not path.is_dir():
                if path.exists():
                    raise ProtocolError(INVALID_PARAMS, f"{uri} is not a folder")
                raise FileNotFoundError(path)
            entries = []
            with os.scandir(path) as found:
                for entry in found:
                    try:
                        is_dir = entry.is_dir()
                    except OSError:
                        is_dir = False
                    entries.append({"name": entry.name, "type": "directory" if is_dir else "file"})
            entries.sort(key=lambda e: e["name"])
            return {"entries": entries}

        return await self._run(uri, work)

    async def resolve(self, params: Mapping[str, Any]) -> dict[str, Any]:
        uri = params["uri"]
        follow = params.get("followSymlinks", True) is not False
        path = self.fence.locate(uri, follow=follow)
        requested = Path(os.path.normpath(path_of(uri)))

        def work() -> dict[str, Any]:
            info = os.stat(path) if follow else os.lstat(path)
            result: dict[str, Any] = {"uri": uri}
            if follow and path != requested:
                result["uri"] = path.as_uri()  # canonical: a link was followed
            if stat.S_ISLNK(info.st_mode):
                result["type"] = "symlink"
            elif stat.S_ISDIR(info.st_mode):
                result["type"] = "directory"
            else:
                result["type"] = "file"
            if result["type"] != "directory":
                result["size"] = info.st_size
            result["mtime"] = _iso(info.st_mtime)
            birth = getattr(info, "st_birthtime", None)
            if birth is not None:
                result["ctime"] = _iso(birth)
            if result["type"] == "file":
                result["etag"] = etag_of(info)
                content_type = _content_type(path)
                if content_type:
                    result["contentType"] = content_type
            return result

        return await self._run(uri, work)

    async def request(self, params: Mapping[str, Any]) -> dict[str, Any]:
        uri = params["uri"]
        self.fence.locate(uri)  # refuses -32009 outside
        log.info(
            "resourceRequest %s (read=%s, write=%s) granted",
            uri,
            params.get("read", True),
            params.get("write", False),
        )
        return {}

    # -- writing --------------------------------------------------------------------
    async def write(self, params: Mapping[str, Any]) -> dict[str, Any]:
        uri = params["uri"]
        path = self.fence.locate(uri)
        data = _decode(params)
        mode = params.get("mode") or "truncate"
        position = _position(params)
        if_match = params.get("ifMatch")
        create_only = bool(params.get("createOnly"))

        def work() -> dict[str, Any]:
            try:
                info: os.stat_result | None = os.stat(path)
            except FileNotFoundError:
                info = None
            if info is not None and stat.S_ISDIR(info.st_mode):
                raise ProtocolError(INVALID_PARAMS, f"{uri} is a folder")
            if info is not None and not stat.S_ISREG(info.st_mode):
                raise NotAFile(path)  # a pipe or device is not replaced by a file
            if info is not None and create_only:
                raise ProtocolError(ALREADY_EXISTS, f"{uri} already exists (createOnly)")
            if if_match is not None:
                current = etag_of(info) if info is not None else None
                if current != if_match:
                    raise ProtocolError(
                        CONFLICT,
                        f"{uri} changed since etag {if_match}"
                        + ("" if info is not None else ": it is gone"),
                    )
            if not path.parent.is_dir():
                raise ProtocolError(NOT_FOUND, f"the folder {uri} would go in does not exist")
            size = info.st_size if info is not None else 0
            chunks = self._compose(path if info else None, size, data, mode, position, uri)
            atomic_write(path, chunks, create_only=create_only)
            return {}

        return await self._locked(path, uri, work)

    @staticmethod
    def _compose(
        path: Path | None, size: int, data: bytes, mode: str, position: int, uri: Any
    ) -> Iterator[bytes]:
        def checked_cut() -> int:
            if position > size:
                raise ProtocolError(
                    INVALID_PARAMS, f"position {position} is past the end of {uri} ({size} bytes)"
                )
            return size - position if mode == "append" else position

        if mode == "truncate":
            # Past the end would mean a gap of zeros as long as the client likes:
            # a 1e29 position filled the disk.
            cut, tail = checked_cut(), False
        elif mode in ("append", "insert"):
            cut, tail = checked_cut(), True
        else:
            raise ProtocolError(INVALID_PARAMS, f"mode is truncate, append or insert, not {mode!r}")

        def chunks() -> Iterator[bytes]:
            if path is not None and cut:
                yield from file_chunks(path, 0, cut)
            yield data
            if path is not None and tail:
                yield from file_chunks(path, cut)

        return chunks()

    async def delete(self, params: Mapping[str, Any]) -> dict[str, Any]:
        uri = params["uri"]
        path = self.fence.locate(uri, follow=False)
        self._refuse_root(path, uri, "delete")
        recursive = bool(params.get("recursive"))

        def work() -> dict[str, Any]:
            info = os.lstat(path)
            if stat.S_ISDIR(info.st_mode):
                if recursive:
                    shutil.rmtree(path)
                else:
                    os.rmdir(path)
            else:
                os.unlink(path)
            return {}

        return await self._locked(path, uri, work)

    async def mkdir(self, params: Mapping[str, Any]) -> dict[str, Any]:
        uri = params["uri"]
        path = self.fence.locate(uri)

        def work() -> dict[str, Any]:
            if path.exists() and not path.is_dir():
                raise ProtocolError(ALREADY_EXISTS, f"{uri} exists and is not a folder")
            os.makedirs(path, exist_ok=True)
            return {}

        return await self._run(uri, work)

    async def move(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return await self._transfer(params, move=True)

    async def copy(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return await self._transfer(params, move=False)

    async def _transfer(self, params: Mapping[str, Any], *, move: bool) -> dict[str, Any]:
        source_uri, destination_uri = params["source"], params["destination"]
        # A move carries a link as it is; a copy carries what it points to.
        source = self.fence.locate(source_uri, follow=not move)
        destination = self.fence.locate(destination_uri, follow=False)
        if move:
            self._refuse_root(source, source_uri, "move")
        self._refuse_root(destination, destination_uri, "replace")
        fail_if_exists = bool(params.get("failIfExists"))
        verb = "move" if move else "copy"

        def work() -> dict[str, Any]:
            info = os.lstat(source) if move else os.stat(source)
            if source == destination:
                return {}
            if stat.S_ISDIR(info.st_mode) and destination.is_relative_to(source):
                raise ProtocolError(
                    INVALID_PARAMS, f"cannot {verb} {source_uri} into itself ({destination_uri})"
                )
            if not destination.parent.is_dir():
                raise ProtocolError(
                    NOT_FOUND, f"the folder {destination_uri} would go in does not exist"
                )
            exists = os.path.lexists(destination)
            if exists and fail_if_exists:
                raise ProtocolError(
                    ALREADY_EXISTS, f"{destination_uri} already exists (failIfExists)"
                )
            is_folder = stat.S_ISDIR(info.st_mode)
            if move:
                self._move(source, destination, exists)
            elif is_folder:
                self._copy_tree(source, destination, exists)
            else:
                if exists and _is_folder(destination):
                    self._clear(destination)  # a file is not renamed over a folder
                atomic_write(destination, file_chunks(source), mode=mode_of(source))
            return {}

        return await self._locked(destination, destination_uri, work)

    @staticmethod
    def _clear(destination: Path) -> None:
        if destination.is_dir() and not destination.is_symlink():
            shutil.rmtree(destination)
        else:
            os.unlink(destination)

    def _move(self, source: Path, destination: Path, exists: bool) -> None:
        if exists and (source.is_dir() or _is_folder(destination)):
            self._clear(destination)  # os.replace puts a folder over nothing but an empty one
        try:
            os.replace(source, destination)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            if exists and os.path.lexists(destination):
                self._clear(destination)
            shutil.move(source, destination)  # another filesystem: copy, then delete

    def _copy_tree(self, source: Path, destination: Path, exists: bool) -> None:
        # Built beside the target and renamed into place; links are copied as links,
        # so nothing outside the fence is pulled in through one.
        staging = destination.with_name(f".{destination.name}.{os.getpid()}.ahp-tmp")
        shutil.copytree(source, staging, symlinks=True)
        try:
            if exists:
                self._clear(destination)
            os.replace(staging, destination)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    def _refuse_root(self, path: Path, uri: Any, verb: str) -> None:
        if self.fence.is_root(path):
            raise ProtocolError(
                PERMISSION_DENIED, f"cannot {verb} {uri}: it is a session's working directory"
            )

    # -- watching -------------------------------------------------------------------
    async def watch(self, params: Mapping[str, Any], emit: Callable[[Any], None]) -> FileWatch:
        uri = params["uri"]
        path = self.fence.locate(uri)
        if self._spawn is None:
            raise ProtocolError(INTERNAL_ERROR, "this host runs no background work for watches")
        from ahp_files.watch import open_watch

        # Answered once an OS watcher is running for it: never a watch that is dead.
        return await open_watch(self, self._spawn, uri, path, params, emit, ignore=is_temp)
