"""The blocking work of each ``resource*`` command, on targets the fence checked.

Each function opens the folders on the way with ``anchored.parent_of`` and acts on
the last name relative to the folder it opened: what was checked is what is used.
They run in a worker thread; ``checkpoint`` stops long work when the request is
cancelled, and every way out removes what was half made.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import mimetypes
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ahp_files.anchored import (
    LISTABLE,
    MAX_DEPTH,
    Checkpoint,
    LinkInTheWay,
    lstat_at,
    names_in,
    never_stop,
    open_folder_at,
    parent_of,
    remove_at,
    remove_tree_at,
    too_deep,
)
from ahp_files.atomic import (
    NotAFile,
    atomic_write_at,
    copy_data,
    fd_chunks,
    open_regular,
    read_bounded,
    temp_name,
    write_chunks,
)
from ahp_files.fence import Target
from ahpcore.protocol.errors import (
    ALREADY_EXISTS,
    CONFLICT,
    INVALID_PARAMS,
    NOT_FOUND,
    ProtocolError,
)

#: The largest file resourceRead answers with (base64 grows it by a third, and a
#: frame past the host's limit would close the connection).
MAX_READ_BYTES = 32 << 20
#: The most one resourceCopy writes (and the most of an existing file a
#: resourceWrite rewrites); ``AHP_FILES_MAX_COPY_BYTES`` sets it.
ENV_MAX_COPY_BYTES = "AHP_FILES_MAX_COPY_BYTES"
DEFAULT_MAX_COPY_BYTES = 1 << 30
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def max_copy_bytes(environ: Any = None) -> int:
    raw = (os.environ if environ is None else environ).get(ENV_MAX_COPY_BYTES)
    if raw is None or not raw.strip():
        return DEFAULT_MAX_COPY_BYTES
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(
            f"{ENV_MAX_COPY_BYTES} is a number of bytes (an integer >= 0), not {raw!r}"
        )
    return value


def etag_of(info: os.stat_result) -> str:
    """Changes whenever the file is rewritten, renamed over, or touched."""
    return f"{info.st_mtime_ns:x}-{info.st_size:x}-{info.st_ino:x}"


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).isoformat().replace("+00:00", "Z")


def content_type(path: Path, sample: bytes | None = None) -> str | None:
    guessed, _ = mimetypes.guess_type(path.name)
    if guessed:
        return guessed
    if sample is None:
        return None
    return "application/octet-stream" if b"\x00" in sample[:8192] else "text/plain"


def _no_link(info: os.stat_result, target: Target) -> os.stat_result:
    # The fence resolved every link in the path: one here appeared after the check.
    if stat.S_ISLNK(info.st_mode):
        raise LinkInTheWay(target.name)
    return info


@contextlib.contextmanager
def _folder_for(target: Target, *, create: bool = False) -> Iterator[int]:
    """The folder ``target`` goes in; a missing one is named as such."""
    with contextlib.ExitStack() as stack:
        try:
            folder = stack.enter_context(parent_of(target, create=create))
        except FileNotFoundError:
            raise ProtocolError(
                NOT_FOUND, f"the folder {target.uri} would go in does not exist"
            ) from None
        yield folder


# -- reading ------------------------------------------------------------------------
def read(target: Target, wanted: Any, limit: int = MAX_READ_BYTES) -> dict[str, Any]:
    uri = target.uri
    with parent_of(target) as folder:
        info = _no_link(os.stat(target.name, dir_fd=folder, follow_symlinks=False), target)
        if stat.S_ISDIR(info.st_mode):
            raise ProtocolError(INVALID_PARAMS, f"{uri} is a folder: list it with resourceList")
        if info.st_size > limit:
            raise ProtocolError(
                INVALID_PARAMS, f"{uri} is {info.st_size} bytes; resourceRead answers up to {limit}"
            )
        data = read_bounded(target.name, limit, folder)
    if data is None:
        raise ProtocolError(INVALID_PARAMS, f"{uri} grew past {limit} bytes while it was read")
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
    kind = content_type(target.path, data)
    if kind:
        result["contentType"] = kind
    return result


def list_folder(target: Target) -> dict[str, Any]:
    with parent_of(target) as folder:
        info = lstat_at(folder, target.name)
        if info is None:
            raise FileNotFoundError(target.name)
        if not stat.S_ISDIR(_no_link(info, target).st_mode):
            raise ProtocolError(INVALID_PARAMS, f"{target.uri} is not a folder")
        inner = open_folder_at(folder, target.name, LISTABLE)
    entries = []
    try:
        with os.scandir(inner) as found:
            for entry in found:
                try:
                    is_dir = entry.is_dir()  # what a link points to, as a listing shows it
                except OSError:
                    is_dir = False
                entries.append({"name": entry.name, "type": "directory" if is_dir else "file"})
    finally:
        os.close(inner)
    entries.sort(key=lambda e: e["name"])
    return {"entries": entries}


def resolve(target: Target, *, follow: bool, requested: Path) -> dict[str, Any]:
    with parent_of(target) as folder:
        info = os.stat(target.name, dir_fd=folder, follow_symlinks=False)
    if follow:
        _no_link(info, target)
    result: dict[str, Any] = {"uri": target.uri}
    if follow and target.path != requested:
        result["uri"] = target.path.as_uri()  # canonical: a link was followed
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
        kind = content_type(target.path)
        if kind:
            result["contentType"] = kind
    return result


# -- writing ------------------------------------------------------------------------
@dataclass(frozen=True)
class WriteRequest:
    data: bytes
    mode: str = "truncate"
    position: int = 0
    if_match: str | None = None
    create_only: bool = False


def _kept(request: WriteRequest, size: int, uri: str) -> tuple[int, bool]:
    """How much of the existing file comes before the new data, and whether the
    rest of it follows."""
    if request.mode not in ("truncate", "append", "insert"):
        raise ProtocolError(
            INVALID_PARAMS, f"mode is truncate, append or insert, not {request.mode!r}"
        )
    # Past the end would mean a gap of zeros as long as the client likes: a 1e29
    # position filled the disk.
    if request.position > size:
        raise ProtocolError(
            INVALID_PARAMS,
            f"position {request.position} is past the end of {uri} ({size} bytes)",
        )
    if request.mode == "append":
        return size - request.position, True
    return request.position, request.mode == "insert"


def write(target: Target, request: WriteRequest, *, rewrite_limit: int) -> dict[str, Any]:
    uri = target.uri
    with _folder_for(target) as folder:
        info = lstat_at(folder, target.name)
        if info is not None:
            _no_link(info, target)
            if stat.S_ISDIR(info.st_mode):
                raise ProtocolError(INVALID_PARAMS, f"{uri} is a folder")
            if not stat.S_ISREG(info.st_mode):
                raise NotAFile(target.name)  # a pipe or device is not replaced by a file
            if request.create_only:
                raise ProtocolError(ALREADY_EXISTS, f"{uri} already exists (createOnly)")
        if request.if_match is not None:
            current = etag_of(info) if info is not None else None
            if current != request.if_match:
                raise ProtocolError(
                    CONFLICT,
                    f"{uri} changed since etag {request.if_match}"
                    + ("" if info is not None else ": it is gone"),
                )
        size = info.st_size if info is not None else 0
        cut, tail = _kept(request, size, uri)
        kept = size if tail else cut
        if kept > rewrite_limit:
            # A write rewrites the whole file: a small append to a huge sparse file
            # would write all of it out.
            raise ProtocolError(
                INVALID_PARAMS,
                f"{uri} is {size} bytes; a write rewrites it, and rewrites are limited to "
                f"{rewrite_limit} bytes ({ENV_MAX_COPY_BYTES})",
            )
        existing = open_regular(target.name, folder) if info is not None and kept else None
        try:

            def chunks() -> Iterator[bytes]:
                if existing is not None and cut:
                    yield from fd_chunks(existing, 0, cut)
                yield request.data
                if existing is not None and tail:
                    yield from fd_chunks(existing, cut, size)

            atomic_write_at(
                folder,
                target.name,
                write_chunks(chunks()),
                mode=stat.S_IMODE(info.st_mode) if info is not None else None,
                create_only=request.create_only,
            )
        finally:
            if existing is not None:
                os.close(existing)
    return {}


def delete(target: Target, *, recursive: bool, checkpoint: Checkpoint = never_stop) -> None:
    with parent_of(target) as folder:
        remove_at(folder, target.name, recursive=recursive, checkpoint=checkpoint)


def mkdir(target: Target) -> None:
    with parent_of(target, create=True) as folder:
        try:
            os.mkdir(target.name, dir_fd=folder)
        except FileExistsError:
            info = _no_link(os.stat(target.name, dir_fd=folder, follow_symlinks=False), target)
            if not stat.S_ISDIR(info.st_mode):
                raise ProtocolError(
                    ALREADY_EXISTS, f"{target.uri} exists and is not a folder"
                ) from None


# -- moving and copying -------------------------------------------------------------
class Budget:
    """The bytes a copy may still write."""

    def __init__(self, limit: int, uri: str) -> None:
        self.limit, self.left, self.uri = limit, limit, uri

    def take(self, size: int) -> None:
        if size > self.left:
            raise ProtocolError(
                INVALID_PARAMS,
                f"{self.uri} grew past the copy limit of {self.limit} bytes "
                f"({ENV_MAX_COPY_BYTES}) while it was copied",
            )
        self.left -= size


def measure(folder: int, name: str, uri: str, checkpoint: Checkpoint) -> int:
    """The bytes a copy of ``name`` writes; refuses what a copy cannot carry."""
    info = os.stat(name, dir_fd=folder, follow_symlinks=False)
    if stat.S_ISREG(info.st_mode):
        return info.st_size
    if not stat.S_ISDIR(info.st_mode):
        raise NotAFile(name)
    inner = open_folder_at(folder, name, LISTABLE)
    try:
        return _measure_in(inner, uri, checkpoint, 1)
    finally:
        os.close(inner)


def _measure_in(folder: int, uri: str, checkpoint: Checkpoint, depth: int) -> int:
    if depth > MAX_DEPTH:
        raise too_deep()
    total = 0
    for name, _ in names_in(folder):
        checkpoint()
        info = os.stat(name, dir_fd=folder, follow_symlinks=False)
        if stat.S_ISREG(info.st_mode):
            total += info.st_size
        elif stat.S_ISDIR(info.st_mode):
            inner = open_folder_at(folder, name, LISTABLE)
            try:
                total += _measure_in(inner, uri, checkpoint, depth + 1)
            finally:
                os.close(inner)
        elif not stat.S_ISLNK(info.st_mode):  # links are copied as links
            raise ProtocolError(
                INVALID_PARAMS,
                f"{uri} holds {name}, which is not a regular file (a pipe, device or socket)",
            )
    return total


def _keep_times(fd: int, info: os.stat_result) -> None:
    with contextlib.suppress(OSError):
        os.utime(fd, ns=(info.st_atime_ns, info.st_mtime_ns))


def _copy_file_into(
    source: int,
    name: str,
    folder: int,
    new_name: str,
    budget: Budget,
    checkpoint: Checkpoint,
    *,
    replace_folder: bool = False,
) -> None:
    """``name`` in ``source`` to ``new_name`` in ``folder``, all at once or not at all."""
    opened = open_regular(name, source)
    try:
        info = os.fstat(opened)
        budget.take(info.st_size)
        clear = None
        if replace_folder:  # a file is not renamed over a folder: the folder goes first

            def clear() -> None:
                remove_at(folder, new_name, recursive=True, checkpoint=checkpoint)

        atomic_write_at(
            folder,
            new_name,
            lambda fd: copy_data(opened, fd, info.st_size, checkpoint),
            mode=stat.S_IMODE(info.st_mode),
            before_rename=clear,
        )
    finally:
        os.close(opened)


def _copy_children(
    source: int, target: int, budget: Budget, checkpoint: Checkpoint, depth: int
) -> None:
    """Everything in the open folder ``source`` into the empty open folder ``target``.
    Links are copied as links, so nothing outside the fence is pulled in through one."""
    if depth > MAX_DEPTH:
        raise too_deep()
    for name, _ in names_in(source):
        checkpoint()
        info = os.stat(name, dir_fd=source, follow_symlinks=False)
        if stat.S_ISLNK(info.st_mode):
            os.symlink(os.readlink(name, dir_fd=source), name, dir_fd=target)
        elif stat.S_ISDIR(info.st_mode):
            os.mkdir(name, 0o700, dir_fd=target)
            inner_source = open_folder_at(source, name, LISTABLE)
            try:
                inner_target = open_folder_at(target, name, LISTABLE)
                try:
                    _copy_children(inner_source, inner_target, budget, checkpoint, depth + 1)
                    os.fchmod(inner_target, stat.S_IMODE(info.st_mode))
                    _keep_times(inner_target, info)
                finally:
                    os.close(inner_target)
            finally:
                os.close(inner_source)
        else:
            opened = open_regular(name, source)
            try:
                held = os.fstat(opened)
                budget.take(held.st_size)
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC
                written = os.open(name, flags, 0o600, dir_fd=target)
                try:
                    copy_data(opened, written, held.st_size, checkpoint)
                    os.fchmod(written, stat.S_IMODE(held.st_mode))
                    _keep_times(written, held)
                finally:
                    os.close(written)
            finally:
                os.close(opened)


def _copy_tree_into(
    source: int,
    name: str,
    folder: int,
    new_name: str,
    budget: Budget,
    checkpoint: Checkpoint,
    *,
    replace: bool,
) -> None:
    """The folder ``name`` in ``source`` to ``new_name`` in ``folder``: built beside it
    under a temporary name and renamed into place, removed on any failure."""
    inner_source = open_folder_at(source, name, LISTABLE)
    try:
        info = os.fstat(inner_source)
        staging = temp_name(new_name)
        os.mkdir(staging, 0o700, dir_fd=folder)
        try:
            inner_target = open_folder_at(folder, staging, LISTABLE)
            try:
                _copy_children(inner_source, inner_target, budget, checkpoint, 1)
                os.fchmod(inner_target, stat.S_IMODE(info.st_mode))
                _keep_times(inner_target, info)
            finally:
                os.close(inner_target)
            if replace:  # os.replace puts a folder over nothing but an empty one
                remove_at(folder, new_name, recursive=True, checkpoint=checkpoint)
            os.replace(staging, new_name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(OSError, ProtocolError):
                remove_tree_at(folder, staging, never_stop)
            raise
    finally:
        os.close(inner_source)


def copy(
    source: Target,
    destination: Target,
    *,
    fail_if_exists: bool,
    limit: int,
    checkpoint: Checkpoint = never_stop,
) -> None:
    with parent_of(source) as from_folder:
        info = _no_link(os.stat(source.name, dir_fd=from_folder, follow_symlinks=False), source)
        if source.path == destination.path:
            return
        is_folder = stat.S_ISDIR(info.st_mode)
        if is_folder and destination.path.is_relative_to(source.path):
            raise ProtocolError(
                INVALID_PARAMS, f"cannot copy {source.uri} into itself ({destination.uri})"
            )
        size = measure(from_folder, source.name, source.uri, checkpoint)
        if size > limit:
            raise ProtocolError(
                INVALID_PARAMS,
                f"{source.uri} is {size} bytes; a copy writes at most {limit} bytes "
                f"({ENV_MAX_COPY_BYTES})",
            )
        with _folder_for(destination) as to_folder:
            existing = lstat_at(to_folder, destination.name)
            if existing is not None and fail_if_exists:
                raise ProtocolError(
                    ALREADY_EXISTS, f"{destination.uri} already exists (failIfExists)"
                )
            budget = Budget(limit, source.uri)
            if is_folder:
                _copy_tree_into(
                    from_folder,
                    source.name,
                    to_folder,
                    destination.name,
                    budget,
                    checkpoint,
                    replace=existing is not None,
                )
            else:
                _copy_file_into(
                    from_folder,
                    source.name,
                    to_folder,
                    destination.name,
                    budget,
                    checkpoint,
                    replace_folder=existing is not None and stat.S_ISDIR(existing.st_mode),
                )


def move(
    source: Target,
    destination: Target,
    *,
    fail_if_exists: bool,
    limit: int,
    checkpoint: Checkpoint = never_stop,
) -> None:
    """Move ``source`` (a link as a link) over ``destination``."""
    with parent_of(source) as from_folder:
        info = os.stat(source.name, dir_fd=from_folder, follow_symlinks=False)
        if source.path == destination.path:
            return
        is_folder = stat.S_ISDIR(info.st_mode)
        if is_folder and destination.path.is_relative_to(source.path):
            raise ProtocolError(
                INVALID_PARAMS, f"cannot move {source.uri} into itself ({destination.uri})"
            )
        with _folder_for(destination) as to_folder:
            existing = lstat_at(to_folder, destination.name)
            if existing is not None and fail_if_exists:
                raise ProtocolError(
                    ALREADY_EXISTS, f"{destination.uri} already exists (failIfExists)"
                )
            if existing is not None and (is_folder or stat.S_ISDIR(existing.st_mode)):
                # A rename puts a folder over nothing but an empty one, nor a file over one.
                remove_at(to_folder, destination.name, recursive=True, checkpoint=checkpoint)
                existing = None
            try:
                os.rename(
                    source.name, destination.name, src_dir_fd=from_folder, dst_dir_fd=to_folder
                )
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                _move_across(source, from_folder, destination, to_folder, info, limit, checkpoint)


def _move_across(
    source: Target,
    from_folder: int,
    destination: Target,
    to_folder: int,
    info: os.stat_result,
    limit: int,
    checkpoint: Checkpoint,
) -> None:
    """Another file system: copy (within the copy limit), then remove the source."""
    if stat.S_ISLNK(info.st_mode):
        link = os.readlink(source.name, dir_fd=from_folder)
        staging = temp_name(destination.name)
        os.symlink(link, staging, dir_fd=to_folder)
        try:
            os.replace(staging, destination.name, src_dir_fd=to_folder, dst_dir_fd=to_folder)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(staging, dir_fd=to_folder)
            raise
    else:
        size = measure(from_folder, source.name, source.uri, checkpoint)
        if size > limit:
            raise ProtocolError(
                INVALID_PARAMS,
                f"{source.uri} is {size} bytes on another file system; a move there copies, "
                f"and a copy writes at most {limit} bytes ({ENV_MAX_COPY_BYTES})",
            )
        budget = Budget(limit, source.uri)
        if stat.S_ISDIR(info.st_mode):
            _copy_tree_into(
                from_folder, source.name, to_folder, destination.name, budget, checkpoint,
                replace=False,
            )  # fmt: skip
        else:
            _copy_file_into(
                from_folder, source.name, to_folder, destination.name, budget, checkpoint
            )
    remove_at(from_folder, source.name, recursive=True, checkpoint=checkpoint)
