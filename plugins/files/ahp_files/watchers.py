"""OS watchers, shared by every watch of the same folder, and the host's ceiling on them.

An OS watcher (an inotify instance on Linux) is scarce: Linux gives each user
128 by default, for all of that user's processes together, and an editor, a
build tool and a language server each want some. So the host runs one per
watched folder (and recursive or not), however many connections watch it, and
at most half what the system allows (``AHP_FILES_MAX_WATCHERS`` to choose).
A watcher is started, and known to be running, before a watch is answered.

Each watcher has a thread that waits on the OS and hands every batch of
changes to each watch on it, which filters it with its own globs (in that
thread, never on the event loop) and reports what is left.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.from_thread
import anyio.to_thread
from watchfiles import Change
from watchfiles._rust_notify import RustNotify

from ahpcore.protocol.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    NOT_FOUND,
    PERMISSION_DENIED,
    ProtocolError,
)

log = logging.getLogger(__name__)

#: Quiet time that ends a batch, and the longest a batch is held (milliseconds).
STEP_MS = 50
DEBOUNCE_MS = 1000
#: How often a watcher's thread looks up from the OS to see whether it should stop.
WAKE_MS = 500

ENV_MAX_WATCHERS = "AHP_FILES_MAX_WATCHERS"
#: Where the system says how many inotify instances and watches a user may have.
PROC_INOTIFY = Path("/proc/sys/fs/inotify")
#: The ceiling where the system does not say (macOS, Windows).
FALLBACK_MAX_WATCHERS = 64
#: How long a new watcher waits for stopping ones to give their slots back.
STOPPING_WAIT = 2.0


def _system_limit(name: str) -> int | None:
    try:
        return int((PROC_INOTIFY / name).read_text().strip())
    except (OSError, ValueError):
        return None


def max_watchers(configured: int | None = None) -> int:
    """How many OS watchers this host may run at once: the variable, else what the
    config file said (``configured``), else half the system's inotify instances."""
    chosen = os.environ.get(ENV_MAX_WATCHERS, "").strip()
    if chosen:
        try:
            value = int(chosen)
            if value >= 0:
                return value
        except ValueError:
            pass
        log.warning("%s=%r is not a whole number >= 0; using the default", ENV_MAX_WATCHERS, chosen)
    if configured is not None:
        return configured
    instances = _system_limit("max_user_instances")
    if instances is None:
        return FALLBACK_MAX_WATCHERS
    return max(1, instances // 2)


def inotify_watches() -> int | None:
    """The inotify watches this process holds (one per watched folder), or None where
    /proc cannot say."""
    total = 0
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return None
    for fd in fds:
        try:
            if os.readlink(f"/proc/self/fd/{fd}") != "anon_inode:inotify":
                continue
            with open(f"/proc/self/fdinfo/{fd}") as info:
                total += sum(1 for line in info if line.startswith("inotify wd:"))
        except OSError:
            continue  # closed meanwhile
    return total


class _Slots:
    """OS watchers running in this process (the system's limits are per user, not per host)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.held = 0
        #: Told to stop, not yet closed: their slots come back within a step.
        self.stopping = 0

    def take(self, limit: int) -> bool:
        with self._lock:
            if self.held >= limit:
                return False
            self.held += 1
            return True

    def stop(self) -> None:
        with self._lock:
            self.stopping += 1

    def give_back(self, *, stopping: bool) -> None:
        with self._lock:
            self.held -= 1
            if stopping:
                self.stopping -= 1


slots = _Slots()


def _refusal(uri: str, exc: BaseException) -> ProtocolError:
    """Why the system would not start a watcher, in words an operator can act on."""
    text = str(exc)
    if isinstance(exc, FileNotFoundError):
        return ProtocolError(NOT_FOUND, f"nothing at {uri} to watch")
    if isinstance(exc, PermissionError):
        return ProtocolError(PERMISSION_DENIED, f"the host's user may not watch {uri}")
    if "os error 24" in text or getattr(exc, "errno", None) == errno.EMFILE:
        reason = (
            "the user's inotify instances (fs.inotify.max_user_instances) "
            "or the host's open files are used up"
        )
    elif "limit" in text.lower() or "os error 28" in text:
        reason = "the user's inotify watches (fs.inotify.max_user_watches) are used up"
    else:
        reason = text
    return ProtocolError(INTERNAL_ERROR, f"the system would not watch {uri}: {reason}")


@dataclass(frozen=True)
class Seen:
    """One path of a batch, as every watch of the batch's watcher sees it."""

    path: str
    kind: str  # added, updated or deleted
    name: str


class Subscriber(Protocol):
    """What a watcher needs of a watch on it (``watch.FileWatch`` is the one there is)."""

    @property
    def root_uri(self) -> str: ...

    @property
    def closed(self) -> bool: ...

    @property
    def emit(self) -> Callable[[list[dict[str, Any]]], None]:
        """Reports the watch's changes (called on the event loop)."""
        ...

    def changes(self, batch: Sequence[Seen]) -> list[dict[str, Any]]:
        """What of ``batch`` the watch reports (called in the watcher's thread)."""
        ...


class SharedWatcher:
    """One OS watcher on a folder and the watches it serves."""

    def __init__(self, pool: WatcherPool, folder: Path, recursive: bool) -> None:
        self.pool = pool
        self.folder = folder
        self.recursive = recursive
        self.subscribers: tuple[Subscriber, ...] = ()
        self.stopped = threading.Event()
        self.ready = anyio.Event()
        #: The OS watcher would not start (the request that started it says why).
        self.failed = False
        self._notify: RustNotify | None = None
        self._lock = threading.Lock()
        self._running = False
        self._closed = False
        self._stopping = False  # counted in slots.stopping

    @property
    def key(self) -> tuple[Path, bool]:
        return self.folder, self.recursive

    # -- starting -------------------------------------------------------------------
    def start(self, uri: str) -> None:
        """Start the OS watcher (in a worker thread: a recursive one walks the tree),
        or raise the refusal that says why it would not start."""
        args = ([str(self.folder)], False, False, 300, self.recursive)
        try:
            try:
                # Strict first, so a watcher the system refused is never taken for one.
                notify = RustNotify(*args, False)
            except (PermissionError, FileNotFoundError):
                if not self.recursive or not os.access(self.folder, os.R_OK | os.X_OK):
                    raise
                # A folder in the tree the user may not read, or one removed while
                # the tree was walked: the root is watched, so watch what can be.
                notify = RustNotify(*args, True)
        except Exception as exc:
            raise _refusal(uri, exc) from None
        budget = _system_limit("max_user_watches")
        held = inotify_watches() if budget is not None else None
        if budget is not None and held is not None and held > budget // 2:
            notify.close()
            raise ProtocolError(
                INVALID_PARAMS,
                f"watching {uri} would bring this host's inotify watches to {held}, more than "
                f"half of what the user may have (fs.inotify.max_user_watches={budget}); "
                "watch a smaller folder or without recursive",
            )
        self._notify = notify

    # -- running --------------------------------------------------------------------
    async def run(self) -> None:
        try:
            await anyio.to_thread.run_sync(
                self._watch, limiter=self.pool.limiter(), abandon_on_cancel=True
            )
        except Exception:
            log.exception("the watcher of %s stopped", self.folder)
        finally:
            # Cancelled (the host stops) or failed: the thread closes it within a step.
            self.stop()

    def _watch(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._running = True
        notify = self._notify
        assert notify is not None
        try:
            while not self.stopped.is_set():
                batch = notify.watch(DEBOUNCE_MS, STEP_MS, WAKE_MS, self.stopped)
                if isinstance(batch, set):
                    self._fan_out(batch)
                elif batch == "stop":
                    break
        finally:
            self._close()

    def stop(self) -> None:
        """Stop watching: the thread closes the OS watcher within a step (at once if
        it never started). New watches of the folder get a watcher of their own."""
        self.pool.forget(self)
        with self._lock:
            if self._closed or self._stopping:
                return
            self._stopping = True
            slots.stop()
            self.stopped.set()
            never_ran = not self._running
        if never_ran:  # its thread may never come (the host was stopping): close here
            self._close()

    def _close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._notify is not None:
            self._notify.close()
        slots.give_back(stopping=self._stopping)

    def _fan_out(self, batch: set[tuple[int, str]]) -> None:
        seen = self._sorted(batch)
        deliveries = []
        for watch in self.subscribers:
            if watch.closed:
                continue
            try:
                changes = watch.changes(seen)
            except Exception:  # one watch's fault must not stop the others' reports
                log.exception("filtering changes for the watch of %s failed", watch.root_uri)
                continue
            if changes:
                deliveries.append((watch, changes))
        if deliveries:
            anyio.from_thread.run_sync(_deliver, deliveries)

    def _sorted(self, batch: set[tuple[int, str]]) -> list[Seen]:
        kinds: dict[str, set[int]] = {}
        for change, raw in batch:
            kinds.setdefault(raw, set()).add(change)
        real: dict[str, bool] = {}  # folder -> whether no link leads to it
        seen = []
        for raw in sorted(kinds):
            parent, name = os.path.split(raw)
            if parent not in real:
                real[parent] = os.path.realpath(parent) == parent
            if not real[parent]:
                # Reached through a link in the tree (the OS watcher follows them):
                # what changed is wherever the link points, maybe outside the fence.
                continue
            exists = os.path.lexists(raw)
            # A batch is unordered: what is there now says how the path ended up.
            if not exists:
                kind = "deleted"
            elif Change.added in kinds[raw]:
                kind = "added"
            elif os.path.islink(raw):
                continue  # a link is only made or removed: "updated" is its target's news
            else:
                kind = "updated"
            seen.append(Seen(raw, kind, name))
        return seen

    # -- watches --------------------------------------------------------------------
    def join(self, watch: Subscriber) -> None:
        self.subscribers = (*self.subscribers, watch)

    def leave(self, watch: Subscriber) -> None:
        self.subscribers = tuple(w for w in self.subscribers if w is not watch)
        if not self.subscribers:
            self.stop()


def _deliver(deliveries: list[tuple[Subscriber, list[dict[str, Any]]]]) -> None:
    for watch, changes in deliveries:
        if watch.closed:
            continue
        try:
            watch.emit(changes)
        except Exception:
            log.exception("reporting changes to the watch of %s failed", watch.root_uri)


class WatcherPool:
    """The OS watchers of one host, by folder."""

    def __init__(self, spawn: Callable[..., None], configured: int | None = None) -> None:
        self.spawn = spawn
        #: The config file's ceiling (``[files] max_watchers``), below the variable.
        self.configured = configured
        self.watchers: dict[tuple[Path, bool], SharedWatcher] = {}
        self._limiter: anyio.CapacityLimiter | None = None

    def limiter(self) -> anyio.CapacityLimiter:
        # Each watcher holds a thread for as long as it runs: not from the default
        # pool of 40, which every blocking call of the host shares.
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(4096)
        return self._limiter

    def forget(self, watcher: SharedWatcher) -> None:
        if self.watchers.get(watcher.key) is watcher:
            del self.watchers[watcher.key]

    async def watcher_for(self, uri: str, folder: Path, recursive: bool) -> SharedWatcher:
        """The running watcher of ``folder``, started if none runs; refused when the
        host's ceiling is reached or the system will not start one."""
        key = (folder, recursive)
        while True:
            watcher = self.watchers.get(key)
            if watcher is not None:
                await watcher.ready.wait()
                if not watcher.failed and not watcher.stopped.is_set():
                    return watcher
                self.forget(watcher)
                continue  # it failed or stopped: start one for this watch
            await self._take_slot()
            if key not in self.watchers:
                break
            slots.give_back(stopping=False)  # another request started one meanwhile
        watcher = SharedWatcher(self, folder, recursive)
        self.watchers[key] = watcher
        try:
            await anyio.to_thread.run_sync(watcher.start, uri)
        except BaseException:
            slots.give_back(stopping=False)
            self.forget(watcher)
            watcher.failed = True
            raise
        finally:
            watcher.ready.set()
        self.spawn(watcher.run, name=f"watcher of {folder}")
        return watcher

    async def _take_slot(self) -> None:
        limit = max_watchers(self.configured)
        deadline = time.monotonic() + STOPPING_WAIT
        while not slots.take(limit):
            # Watchers told to stop close within a step; one disposed of just now
            # should make room for the next, not refuse it.
            if slots.stopping <= 0 or time.monotonic() > deadline:
                raise ProtocolError(
                    INVALID_PARAMS,
                    f"this host already runs {slots.held} file watchers, the most it may "
                    f"({limit}; {ENV_MAX_WATCHERS} or [files] max_watchers sets it); watches of a folder already "
                    "watched share its watcher, and disposing of watches frees theirs",
                )
            await anyio.sleep(0.02)


_pools: weakref.WeakKeyDictionary[Any, WatcherPool] = weakref.WeakKeyDictionary()


def pool_for(owner: Any, spawn: Callable[..., None]) -> WatcherPool:
    """The pool of ``owner`` (a resources port: one per host, whose event loop its
    watchers report to)."""
    pool = _pools.get(owner)
    if pool is None:
        pool = _pools[owner] = WatcherPool(spawn, getattr(owner, "max_watchers", None))
    return pool
