"""Files and folders under the state folder: the user's alone, whatever the umask.

The state folder holds titles, working directories, conversations and what the
agents were told. Everything the host and its plugins write there goes through
these helpers: folders are 0700 and files 0600 from the moment they exist (a
mode given at creation is cut by the umask, so each is set again after), and an
existing one left wider by an older version is tightened when next written.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

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
