"""Files and folders under the state folder: the user's alone, whatever the umask.

The state folder holds titles, working directories, conversations and what the
agents were told. Everything the host and its plugins write there goes through
these helpers: folders are 0700 and files 0600 from the moment they exist (a
mode given at creation is cut by the umask, so each is set again after), and an
existing one left wider by an older version is tightened when next written.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

log = logging.getLogger(__name__)

#: Modes of every folder and file under the state folder.
FOLDER_MODE = 0o700
FILE_MODE = 0o600
#: Files SQLite keeps beside a database; it gives each the database's own mode.
SQLITE_SUFFIXES = ("", "-wal", "-shm", "-journal")


def private_folder(path: Path, *, tighten: bool = True) -> Path:
    """``path`` as an owner-only folder: made (with missing parents, each 0700) or tightened.

    ``tighten=False`` leaves an existing folder as it is: the state folder itself,
    which a user who named it with ``--state-dir`` may mean to share.
    """
    missing: list[Path] = []
    for folder in (path, *path.parents):
        if folder.exists():
            break
        missing.append(folder)
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile by another thread
            folder.mkdir(mode=FOLDER_MODE)
        os.chmod(folder, FOLDER_MODE)  # mkdir's mode is cut by the umask
    if not missing and tighten:
        _tighten(path, FOLDER_MODE)
    return path


def _tighten(path: Path | str, mode: int) -> None:
    """Set ``mode`` on a path this user owns; others' files and vanished ones are left be."""
    with contextlib.suppress(FileNotFoundError, PermissionError):
        os.chmod(path, mode)


def private_file(path: Path, *, tighten_folder: bool = True) -> Path:
    """Create ``path`` empty and owner-only if it is missing (its folder too); tighten it if not."""
    private_folder(path.parent, tighten=tighten_folder)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, FILE_MODE)
    os.close(fd)
    _tighten(path, FILE_MODE)
    return path


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` through an owner-only temporary file and a rename.

    A reader never sees half of it, and the file is never readable by others,
    not even while it is written.
    """
    private_folder(path.parent)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, FILE_MODE)  # mkstemp makes 0600 already; said here, not assumed
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def private_sqlite(path: Path, *, tighten_folder: bool = True) -> Path:
    """Make a database file owner-only before SQLite opens it, and tighten its companions.

    SQLite creates the ``-wal``, ``-shm`` and ``-journal`` files with the
    database's mode, so a database made 0600 keeps them 0600.
    """
    private_file(path, tighten_folder=tighten_folder)
    tighten_sqlite(path)
    return path


def tighten_sqlite(path: Path) -> None:
    """Set 0600 on a database and each companion file that exists."""
    for suffix in SQLITE_SUFFIXES:
        _tighten(f"{path}{suffix}", FILE_MODE)


class PrivateJsonFile:
    """A small JSON object a plugin keeps under the state folder, owner-only: read once as
    the plugin starts, written whole at each change.

    ``read()`` answers ``{}`` when the file is missing, and when it cannot be read or
    holds no JSON object (that is logged): the plugin starts without what it kept
    rather than not at all. ``await save(data)`` writes through ``write_private`` in a
    worker thread, one save after another, shielded from cancellation, so what a
    cancelled turn ended with is written too. A None path keeps nothing.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = anyio.Lock()

    def read(self) -> dict[str, Any]:
        if self.path is None:
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            log.warning("could not read %s; starting without it", self.path, exc_info=True)
            return {}
        if not isinstance(data, dict):
            log.warning("%s holds no JSON object; starting without it", self.path)
            return {}
        return data

    async def save(self, data: Mapping[str, Any]) -> None:
        if self.path is None:
            return
        # Made where it is called (the event loop, which changes the data), written in a thread.
        text = json.dumps(data, indent=1)
        with anyio.CancelScope(shield=True):
            async with self._lock:
                await anyio.to_thread.run_sync(write_private, self.path, text)
