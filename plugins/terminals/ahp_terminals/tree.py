"""Every process a terminal started, found on Linux so that disposing of it ends them all.

A process that calls ``setsid`` leaves the terminal's session and process
group, and a daemon that forks twice also leaves its shell's children (its
parent ends, and the kernel hands it to init). Three nets catch them:

* the shell is made a *child subreaper* (``prctl``, kept across ``exec``): an
  orphan started from it is adopted by the shell instead of init, so while the
  shell lives everything started from it stays below it. The shell waits for
  any child, adopted ones included, so none is left a zombie;
* the descendants of the shell and of every process already found, from
  /proc's parent links, and the members of the shell's session;
* a mark in the environment each process inherits (``AHP_TERMINAL_ID``), for
  what was orphaned after the shell itself ended. Only a process that clears
  its environment and outlives the shell escapes all three.

Each process found is remembered with its start time, and signalled through a
pidfd checked against it: a pid the kernel has since given to another process
is never signalled.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
import sys
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

#: The variable that marks a terminal's processes; its value is one terminal's token.
MARK_VARIABLE = "AHP_TERMINAL_ID"
_PR_SET_CHILD_SUBREAPER = 36
#: Rounds of "stop what was found, look again" before the final SIGKILL: a process
#: that forks without end can add only so many children between two looks.
STOP_ROUNDS = 10

SUPPORTED = sys.platform.startswith("linux")
_libc: ctypes.CDLL | None = None
if SUPPORTED:
    with contextlib.suppress(OSError):
        _libc = ctypes.CDLL(None, use_errno=True)


def become_subreaper() -> None:
    """Make the calling process adopt its orphaned descendants (Linux; else nothing)."""
    # Runs in the forked child before exec: the library was loaded in the parent.
    if _libc is not None:
        _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


@dataclass(frozen=True)
class _Entry:
    pid: int
    ppid: int
    session: int
    start: int
    zombie: bool


def _read_stat(pid: int) -> _Entry | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
    except OSError:
        return None
    # The name is in parentheses and may hold anything, parentheses included.
    fields = text.rsplit(b")", 1)[1].split()
    try:
        return _Entry(pid, int(fields[1]), int(fields[3]), int(fields[19]), fields[0] == b"Z")
    except (IndexError, ValueError):
        return None


def _scan() -> dict[int, _Entry]:
    entries: dict[int, _Entry] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            entry = _read_stat(int(name))
            if entry is not None:
                entries[entry.pid] = entry
    return entries


def _marked(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            return needle in b"\0" + environ.read()
    except OSError:
        return False


@dataclass
class ProcessTree:
    """One terminal's processes: the shell ``root`` and whatever was started from it."""

    root: int
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    #: pid -> start time of every process found so far.
    found: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        entry = _read_stat(self.root)
        if entry is not None:
            self.found[self.root] = entry.start

    def look(self, *, environment: bool = False) -> set[int]:
        """Live processes of the terminal now (found before, their descendants, the
        shell's session; with ``environment``, also every process carrying the mark)."""
        entries = _scan()
        me = os.getpid()
        live = {
            pid
            for pid, start in self.found.items()
            if (entry := entries.get(pid)) is not None and entry.start == start
        }
        leader = entries.get(self.root)
        # The shell's session is ours while its leader is the shell or is gone: the
        # kernel gives no new process a pid still in use as a session id.
        if leader is None or self.found.get(self.root) == leader.start:
            live |= {pid for pid, entry in entries.items() if entry.session == self.root}
        if environment:
            needle = f"\0{MARK_VARIABLE}={self.token}\0".encode()
            uid = os.getuid()
            for pid, entry in entries.items():
                if pid in live or pid == me or entry.zombie or not _owned_by(pid, uid):
                    continue
                if _marked(pid, needle):
                    live.add(pid)
        live |= _descendants(live, entries)
        live.discard(me)
        for pid in live:
            self.found.setdefault(pid, entries[pid].start)
        return {pid for pid in live if not entries[pid].zombie}

    def signal(self, pids: Iterable[int], sig: int) -> None:
        """Send ``sig`` to each of ``pids`` that is still the process that was found."""
        for pid in pids:
            start = self.found.get(pid)
            if start is not None:
                _signal_if_same(pid, start, sig)

    def stop_and_kill(self) -> None:
        """SIGKILL every process of the terminal, stopping them first so none forks away."""
        stopped: set[int] = set()
        for _ in range(STOP_ROUNDS):
            new = self.look(environment=not stopped) - stopped
            if not new:
                break
            self.signal(new, signal.SIGSTOP)
            stopped |= new
        self.signal(stopped | self.look(), signal.SIGKILL)


def _owned_by(pid: int, uid: int) -> bool:
    try:
        return os.stat(f"/proc/{pid}").st_uid == uid
    except OSError:
        return False


def _descendants(roots: set[int], entries: dict[int, _Entry]) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in entries.values():
        children.setdefault(entry.ppid, []).append(entry.pid)
    found: set[int] = set()
    waiting = list(roots)
    while waiting:
        for child in children.get(waiting.pop(), ()):
            if child not in found and child not in roots:
                found.add(child)
                waiting.append(child)
    return found


def _same(pid: int, start: int) -> bool:
    entry = _read_stat(pid)
    return entry is not None and entry.start == start


def _signal_if_same(pid: int, start: int, sig: int) -> None:
    try:
        handle = os.pidfd_open(pid)
    except OSError as error:
        if error.errno == errno.ENOSYS and _same(pid, start):
            # A kernel before 5.3: checked just before, as close as it allows.
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        return
    try:
        # The pidfd names one process for good; its start time says it is the one found.
        if _same(pid, start):
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(handle, sig)
    finally:
        os.close(handle)
