"""Writes that never leave a half-written file: a temporary file in the same
folder, flushed to disk, then renamed over the target in one step.

A crash before the rename leaves the old file as it was (and a stray
``.<name>.<random>.ahp-tmp`` beside it, which watches ignore).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

TEMP_SUFFIX = ".ahp-tmp"
CHUNK = 1 << 20


def _current_umask() -> int:
    # Read once, at import, while nothing else can be changing it.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


UMASK = _current_umask()


def is_temp(name: str) -> bool:
    return name.startswith(".") and name.endswith(TEMP_SUFFIX)


def mode_of(path: Path) -> int | None:
    """Permission bits of an existing file (following links), None when there is none."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return None


def atomic_write(
    path: Path,
    chunks: Iterable[bytes],
    *,
    mode: int | None = None,
    create_only: bool = False,
) -> None:
    """Write ``chunks`` to ``path`` all at once or not at all.

    ``mode`` defaults to the existing file's, or what a new file gets under the
    umask. With ``create_only`` an existing ``path`` raises FileExistsError and
    is left alone (the rename is a link, which refuses to replace).
    """
    if mode is None:
        mode = mode_of(path)
    if mode is None:
        mode = 0o666 & ~UMASK
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temp, mode)
        if create_only:
            os.link(temp, path)
            os.unlink(temp)
        else:
            os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    _sync_directory(path.parent)


def _sync_directory(directory: Path) -> None:
    # The rename is durable once the folder is on disk; not every system allows this.
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
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
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)


def open_regular(path: Path) -> int:
    """A descriptor on the regular file at ``path``; NotAFile for anything else."""
    fd = os.open(path, _OPEN_FLAGS)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotAFile(f"{path} is not a regular file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bounded(path: Path, limit: int) -> bytes | None:
    """All of ``path`` when it holds at most ``limit`` bytes, else None.

    Reads at most ``limit + 1`` bytes whatever the file claims its size is, so a
    file that grows while it is read cannot make the host hold more.
    """
    with os.fdopen(open_regular(path), "rb") as source:
        if os.fstat(source.fileno()).st_size > limit:
            return None
        data = source.read(limit + 1)
    return data if len(data) <= limit else None


def file_chunks(path: Path, start: int = 0, stop: int | None = None) -> Iterator[bytes]:
    """Bytes ``[start, stop)`` of ``path``, a megabyte at a time."""
    with os.fdopen(open_regular(path), "rb") as source:
        source.seek(start)
        left = None if stop is None else max(0, stop - start)
        while left is None or left > 0:
            block = source.read(CHUNK if left is None else min(CHUNK, left))
            if not block:
                return
            if left is not None:
                left -= len(block)
            yield block
