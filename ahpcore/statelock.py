"""One host per state folder: an exclusive lock held for the host process's life.

Two hosts on one session store would each take the other's sessions for ones an
unclean stop left behind, and their views of a session would drift apart. So
``ahp serve`` with the file store locks ``<state dir>/host.lock`` (``flock``)
before it opens anything, and writes its pid and, once bound, its address into
it. A second host finds the lock taken and says who holds it.

The kernel drops the lock when the process ends, however it ends (a crash, a
``SIGKILL``), so a lock is never stale. The file is never removed or replaced:
a lock is held on the file as it was opened, and a new file under the same name
would be a second, free lock. Readers judge the lock, not the file's words,
which outlive the host that wrote them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ahpcore.store.private import private_file

try:
    import fcntl
except ImportError:  # Windows: no flock; the lock is not taken there
    fcntl = None  # type: ignore[assignment]

#: The lock file in the state folder.
LOCK_FILE = "host.lock"


@dataclass(frozen=True)
class Holder:
    """What the host holding a state folder wrote about itself."""

    pid: int | None
    address: str | None

    def describe(self) -> str:
        pid = f"pid {self.pid}" if self.pid is not None else "pid unknown"
        return f"{pid}, {f'listening on {self.address}' if self.address else 'still starting'}"


class StateFolderInUse(Exception):
    """Another process holds the state folder's lock."""

    def __init__(self, state_dir: Path, holder: Holder) -> None:
        super().__init__(
            f"state folder {state_dir} is in use by another host ({holder.describe()}); "
            "stop that one, or give this one its own --state-dir"
        )
        self.holder = holder


def _parse(text: str) -> Holder:
    # raw_decode: a shorter record written over a longer one may leave the old tail
    # for an instant (see StateLock.note).
    try:
        record, _ = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return Holder(None, None)
    if not isinstance(record, dict):
        return Holder(None, None)
    pid, address = record.get("pid"), record.get("address")
    return Holder(
        pid if isinstance(pid, int) else None, address if isinstance(address, str) else None
    )


def holder_of(state_dir: Path) -> Holder | None:
    """Who holds ``state_dir``'s lock now, or None when nobody does.

    Looked at by asking for the lock shared, without waiting: refused, a host
    holds it. The file's words are read only then, as they outlive their writer.
    """
    if fcntl is None:  # no flock, no lock taken (Windows)
        return None
    try:
        fd = os.open(state_dir / LOCK_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 4096, 0).decode("utf-8", "replace")
        else:
            return None
    finally:
        os.close(fd)  # which also lets go of the shared lock taken to look
    return _parse(text)


class StateLock:
    """The lock on one state folder, taken by ``acquire`` and held until the process ends."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd
        self._record: dict[str, Any] = {"pid": os.getpid()}
        self._write()

    @classmethod
    def acquire(cls, state_dir: Path) -> StateLock | None:
        """Lock ``state_dir``; raises ``StateFolderInUse`` naming the holder.

        None where the platform has no ``flock``.
        """
        if fcntl is None:
            return None
        path = private_file(state_dir / LOCK_FILE, tighten_folder=False)
        fd = os.open(path, os.O_RDWR)  # not inherited by the agents' processes (PEP 446)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _parse(os.pread(fd, 4096, 0).decode("utf-8", "replace"))
            os.close(fd)
            raise StateFolderInUse(state_dir, holder) from None
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd)

    def note(self, address: str) -> None:
        """Record where this host listens, for a second host's refusal to name."""
        self._record["address"] = address
        self._write()

    def _write(self) -> None:
        # Written over the old record, then cut to length: a reader never finds the
        # file empty, and ``_parse`` ignores any old tail it catches.
        data = json.dumps(self._record).encode("utf-8") + b"\n"
        os.pwrite(self._fd, data, 0)
        os.ftruncate(self._fd, len(data))
