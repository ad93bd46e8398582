"""Filesystem calls relative to opened folders, so the path the fence checked is the
path used.

The fence resolves a URI to a path without links. An operation opens the fence's
anchor, then each folder below it without following links, and acts on the last
name with the ``dir_fd`` calls. A folder swapped for a link after the check is
refused (``LinkInTheWay``, an ELOOP), never followed out of the fence.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterator

from ahp_files.fence import Target
from ahpcore.protocol.errors import INVALID_PARAMS, ProtocolError

#: Called between steps of long work; raises to stop it (a cancelled request).
Checkpoint = Callable[[], None]

#: Walking through a folder needs its identity, not the right to list it.
WALK = (
    os.O_DIRECTORY
    | os.O_NOFOLLOW
    | getattr(os, "O_CLOEXEC", 0)
    | (getattr(os, "O_PATH", 0) or os.O_RDONLY)
)
#: A folder opened to list or fill.
LISTABLE = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
#: Each level of a recursive walk holds a descriptor or two.
MAX_DEPTH = 200


def never_stop() -> None:
    """A checkpoint for work nobody can cancel."""


class LinkInTheWay(OSError):
    """A name the fence saw as a folder or file is a link now."""

    def __init__(self, name: str) -> None:
        super().__init__(errno.ELOOP, f"{name} became a link while it was opened")


def too_deep() -> ProtocolError:
    return ProtocolError(
        INVALID_PARAMS, f"folders nested more than {MAX_DEPTH} deep: this host does not walk them"
    )


def lstat_at(folder: int, name: str) -> os.stat_result | None:
    """What ``name`` is in ``folder`` (a link as a link), or None when there is nothing."""
    try:
        return os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return None


def open_folder_at(folder: int, name: str, flags: int = WALK) -> int:
    try:
        return os.open(name, flags, dir_fd=folder)
    except OSError as exc:
        # O_NOFOLLOW|O_DIRECTORY on a link fails as "not a folder" (ELOOP on some systems).
        if exc.errno in (errno.ENOTDIR, errno.ELOOP):
            info = lstat_at(folder, name)
            if info is not None and stat.S_ISLNK(info.st_mode):
                raise LinkInTheWay(name) from None
        raise


def open_anchor(target: Target) -> int:
    # The anchor is resolved and the client can change neither it nor what holds it.
    return os.open(target.anchor, os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0) | os.O_RDONLY)


@contextlib.contextmanager
def parent_of(target: Target, *, create: bool = False) -> Iterator[int]:
    """A descriptor on the folder holding ``target.name``; with ``create``, missing
    folders on the way are made (``mkdir -p``)."""
    fd = open_anchor(target)
    try:
        for name in target.walk:
            try:
                step = open_folder_at(fd, name)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, dir_fd=fd)
                step = open_folder_at(fd, name)
            os.close(fd)
            fd = step
        yield fd
    finally:
        os.close(fd)


def is_folder_at(folder: int, name: str) -> bool:
    info = lstat_at(folder, name)
    return info is not None and stat.S_ISDIR(info.st_mode)


def names_in(folder: int) -> list[tuple[str, bool]]:
    """(name, is a folder, links not followed) for each entry of an open folder."""
    with os.scandir(folder) as entries:
        return [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]


def remove_at(folder: int, name: str, *, recursive: bool, checkpoint: Checkpoint) -> None:
    """Remove ``name`` from ``folder``: a link as a link, a folder only when empty
    unless ``recursive``."""
    info = os.stat(name, dir_fd=folder, follow_symlinks=False)
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(name, dir_fd=folder)
    elif recursive:
        remove_tree_at(folder, name, checkpoint)
    else:
        os.rmdir(name, dir_fd=folder)


def remove_tree_at(folder: int, name: str, checkpoint: Checkpoint, depth: int = 0) -> None:
    """``rm -r`` that opens each folder without following links, so a link swapped in
    mid-way is refused rather than emptied."""
    if depth > MAX_DEPTH:
        raise too_deep()
    inner = open_folder_at(folder, name, LISTABLE)
    try:
        for entry, is_folder in names_in(inner):
            checkpoint()
            if is_folder:
                remove_tree_at(inner, entry, checkpoint, depth + 1)
                continue
            try:
                os.unlink(entry, dir_fd=inner)
            except OSError as exc:
                # It became a folder since it was listed (Linux says EISDIR, macOS EPERM).
                if exc.errno not in (errno.EISDIR, errno.EPERM) or not is_folder_at(inner, entry):
                    raise
                remove_tree_at(inner, entry, checkpoint, depth + 1)
    finally:
        os.close(inner)
    os.rmdir(name, dir_fd=folder)
