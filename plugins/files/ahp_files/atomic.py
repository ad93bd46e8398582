"""Writes that never leave a half-written file: a temporary file in the same
folder, flushed to disk, then renamed over the target in one step.

A crash before the rename leaves the old file as it was (and a stray
``.<name>.<random>.ahp-tmp`` beside it, which watches ignore). Any other way out
(an error, a cancelled request) removes the temporary file.

Everything here works in a folder given as an open descriptor, so the folder
written to is the folder the fence checked.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

TEMP_SUFFIX = ".ahp-tmp"
CHUNK = 1 << 20
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _current_umask() -> int:
    # Read once, at import, while nothing else can be changing it.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


UMASK = _current_umask()


def is_temp(name: str) -> bool:
    return name.startswith(".") and name.endswith(TEMP_SUFFIX)


def temp_name(name: str) -> str:
    # The name is cut so the temporary one stays within the file system's 255 bytes.
    return f".{name[:100]}.{os.urandom(6).hex()}{TEMP_SUFFIX}"


def mode_of(path: Path) -> int | None:
    """Permission bits of an existing file (following links), None when there is none."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return None


def _write_all(fd: int, chunks: Iterable[bytes]) -> None:
    for chunk in chunks:
        view = memoryview(chunk)
        while view:
            view = view[os.write(fd, view) :]


def atomic_write_at(
    folder: int,
    name: str,
    fill: Callable[[int], None],
    *,
    mode: int | None = None,
    create_only: bool = False,
    before_rename: Callable[[], None] | None = None,
) -> None:
    """Write ``name`` in the open ``folder`` all at once or not at all.

    ``fill`` writes the content into the descriptor it is given. ``mode`` defaults
    to what a new file gets under the umask. With ``create_only`` an existing
    ``name`` raises FileExistsError and is left alone (the rename is a link, which
    refuses to replace). ``before_rename`` runs once the content is on disk, to
    clear what the rename could not replace (a folder).
    """
    if mode is None:
        mode = 0o666 & ~UMASK
    for _ in range(100):
        temp = temp_name(name)
        try:
            fd = os.open(
                temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC, 0o600,
                dir_fd=folder,
            )  # fmt: skip
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(errno.EEXIST, f"no free temporary name beside {name}")
    try:
        try:
            fill(fd)
            os.fsync(fd)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        if before_rename is not None:
            before_rename()
        if create_only:
            os.link(temp, name, src_dir_fd=folder, dst_dir_fd=folder, follow_symlinks=False)
            os.unlink(temp, dir_fd=folder)
        else:
            os.replace(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=folder)
        raise
    sync_folder(folder)


def atomic_write(
    path: Path,
    chunks: Iterable[bytes],
    *,
    mode: int | None = None,
    create_only: bool = False,
) -> None:
    """``atomic_write_at`` for a path: ``mode`` defaults to the existing file's."""
    if mode is None:
        mode = mode_of(path)
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
    try:
        atomic_write_at(
            folder, path.name, lambda fd: _write_all(fd, chunks), mode=mode, create_only=create_only
        )
    finally:
        os.close(folder)


def write_chunks(chunks: Iterable[bytes]) -> Callable[[int], None]:
    """A ``fill`` for ``atomic_write_at`` that writes ``chunks`` in order."""
    return lambda fd: _write_all(fd, chunks)


def sync_folder(folder: int) -> None:
    # The rename is durable once the folder is on disk; not every system allows this.
    with contextlib.suppress(OSError):
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC, dir_fd=folder)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class NotAFile(OSError):
    """The path names a pipe, device or socket: reading one can block forever or never end."""


#: Opening never waits on a pipe's writer, and a link swapped in after the fence
#: resolved the path is refused rather than followed.
_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOFOLLOW", 0)
    | _CLOEXEC
    | getattr(os, "O_BINARY", 0)
)


def open_regular(path: Path | str, folder: int | None = None) -> int:
    """A descriptor on the regular file at ``path`` (in the open ``folder`` when given);
    NotAFile for anything else."""
    fd = os.open(path, _OPEN_FLAGS, dir_fd=folder)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotAFile(f"{path} is not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bounded(path: Path | str, limit: int, folder: int | None = None) -> bytes | None:
    """All of ``path`` when it holds at most ``limit`` bytes, else None.

    Reads at most ``limit + 1`` bytes whatever the file claims its size is, so a
    file that grows while it is read cannot make the host hold more.
    """
    with os.fdopen(open_regular(path, folder), "rb") as source:
        if os.fstat(source.fileno()).st_size > limit:
            return None
        data = source.read(limit + 1)
    return data if len(data) <= limit else None


def fd_chunks(fd: int, start: int = 0, stop: int | None = None) -> Iterator[bytes]:
    """Bytes ``[start, stop)`` of an open file, a megabyte at a time."""
    position = start
    while stop is None or position < stop:
        block = os.pread(fd, CHUNK if stop is None else min(CHUNK, stop - position), position)
        if not block:
            return
        position += len(block)
        yield block


def file_chunks(path: Path, start: int = 0, stop: int | None = None) -> Iterator[bytes]:
    """Bytes ``[start, stop)`` of ``path``, a megabyte at a time."""
    fd = open_regular(path)
    try:
        yield from fd_chunks(fd, start, stop)
    finally:
        os.close(fd)


def _data_segments(fd: int, size: int) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each stretch of ``fd`` below ``size`` that holds data; the
    rest are holes. The whole file is one stretch where holes cannot be asked about."""
    seek_data, seek_hole = getattr(os, "SEEK_DATA", None), getattr(os, "SEEK_HOLE", None)
    if seek_data is None or seek_hole is None:
        yield 0, size
        return
    offset = 0
    while offset < size:
        try:
            start = os.lseek(fd, offset, seek_data)
            end = min(os.lseek(fd, start, seek_hole), size)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # no data past offset
                return
            if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP) and offset == 0:
                yield 0, size  # a file system that does not say
                return
            raise
        if start >= size:
            return
        yield start, end
        offset = end


def copy_data(
    source: int, target: int, size: int, checkpoint: Callable[[], None] = lambda: None
) -> None:
    """The first ``size`` bytes of ``source`` into the empty ``target``, holes left as
    holes (a sparse file stays sparse), ``checkpoint`` called between megabytes."""
    for start, end in _data_segments(source, size):
        position = start
        while position < end:
            checkpoint()
            block = os.pread(source, min(CHUNK, end - position), position)
            if not block:  # the file shrank meanwhile
                break
            view = memoryview(block)
            at = position
            while view:
                written = os.pwrite(target, view, at)
                view, at = view[written:], at + written
            position += len(block)
    os.ftruncate(target, size)  # a hole at the end is size, not data
