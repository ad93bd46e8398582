"""Resource watches over watchfiles: the OS's own notifications, never polling.

The watcher lives in a worker thread (setting one up walks the tree, which
must not stall the host) and hands each coalesced batch back to the event loop.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import anyio.from_thread
import anyio.to_thread
from watchfiles import Change, watch

log = logging.getLogger(__name__)

#: Quiet time that ends a batch, and the longest a batch is held (milliseconds).
STEP_MS = 50
DEBOUNCE_MS = 1000
#: Watches each hold a thread while they run; this many may run at once.
MAX_WATCHES = 1024
_limiter: anyio.CapacityLimiter | None = None


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """A glob relative to the watch root: ``*`` and ``?`` within a name, ``**`` across names,
    ``{a,b}`` alternatives."""
    out: list[str] = []
    i = 0
    pattern = pattern.strip("/")
    while i < len(pattern):
        if pattern[i:] == "/**":
            out.append("(?:/.*)?")  # a folder's contents, and the folder itself
            i += 3
        elif pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "{" and "}" in pattern[i:]:
            end = pattern.index("}", i)
            options = pattern[i + 1 : end].split(",")
            out.append("(?:" + "|".join(re.escape(o) for o in options) + ")")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


def matcher(patterns: Iterable[str]) -> Callable[[str], bool]:
    """True when a relative path, or a folder holding it, matches one of ``patterns``."""
    compiled = [_glob_regex(p) for p in patterns if p.strip("/")]

    def matches(relative: str) -> bool:
        parts = relative.split("/")
        prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        return any(rx.fullmatch(prefix) for rx in compiled for prefix in prefixes)

    return matches


@dataclass(eq=False)
class FileWatch:
    root_uri: str
    root: Path
    recursive: bool
    includes: list[str]
    excludes: list[str]
    emit: Callable[[list[dict[str, Any]]], None]
    ignore: Callable[[str], bool] = lambda name: False
    _stop: threading.Event = field(default_factory=threading.Event)

    def close(self) -> None:
        self._stop.set()

    @property
    def closed(self) -> bool:
        return self._stop.is_set()

    async def run(self) -> None:
        global _limiter
        if _limiter is None:
            _limiter = anyio.CapacityLimiter(MAX_WATCHES)
        try:
            await anyio.to_thread.run_sync(self._watch, limiter=_limiter, abandon_on_cancel=True)
        except Exception:
            log.exception("the watch on %s stopped", self.root_uri)
        finally:
            self._stop.set()

    def _watch(self) -> None:
        included = matcher(self.includes) if self.includes else None
        excluded = matcher(self.excludes)
        # A file is watched through its folder: a file replaced by a rename (as editors
        # and resourceWrite do) is a new file, which a watch on the old one never sees.
        single_file = not self.root.is_dir()
        for batch in watch(
            self.root.parent if single_file else self.root,
            watch_filter=None,
            debounce=DEBOUNCE_MS,
            step=STEP_MS,
            stop_event=self._stop,
            recursive=self.recursive and not single_file,
            rust_timeout=500,
            yield_on_timeout=False,
            ignore_permission_denied=True,
        ):
            changes = self._changes(batch, included, excluded)
            if changes and not self.closed:
                anyio.from_thread.run_sync(self.emit, changes)

    def _changes(
        self,
        batch: set[tuple[Change, str]],
        included: Callable[[str], bool] | None,
        excluded: Callable[[str], bool],
    ) -> list[dict[str, Any]]:
        seen: dict[str, set[Change]] = {}
        for change, raw in batch:
            seen.setdefault(raw, set()).add(change)
        changes = []
        for raw in sorted(seen):
            path = Path(raw)
            if self.ignore(path.name):
                continue
            relative = os.path.relpath(path, self.root).replace(os.sep, "/")
            if relative == ".":
                relative = ""
            elif relative.startswith("../"):
                continue
            if not self.recursive and relative.count("/") > 0:
                continue
            if relative and (
                excluded(relative) or (included is not None and not included(relative))
            ):
                continue
            kinds = seen[raw]
            # A batch is unordered: what is there now says how the path ended up.
            if not os.path.lexists(path):
                kind = "deleted"
            elif Change.added in kinds:
                kind = "added"
            else:
                kind = "updated"
            uri = self.root_uri.rstrip("/") + ("/" + quote(relative) if relative else "")
            changes.append({"uri": uri, "type": kind})
        return changes
