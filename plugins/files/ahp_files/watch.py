"""Resource watches over watchfiles: the OS's own notifications, never polling.

A watch is one client's view of a shared OS watcher (see :mod:`ahp_files.watchers`):
its root, its depth, its globs. Its watcher's thread filters each batch for it,
so globs never run on the event loop.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio.to_thread

from ahp_files.globs import Globs, checked_globs
from ahp_files.watchers import Seen, SharedWatcher, pool_for
from ahpcore.protocol.errors import NOT_FOUND, ProtocolError


@dataclass(eq=False)
class FileWatch:
    root_uri: str
    root: Path
    recursive: bool
    includes: Globs
    excludes: Globs
    emit: Callable[[list[dict[str, Any]]], None]
    ignore: Callable[[str], bool] = lambda name: False
    watcher: SharedWatcher | None = None
    _closed: bool = field(default=False, init=False)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.watcher is not None:
            self.watcher.leave(self)

    @property
    def closed(self) -> bool:
        return self._closed

    def changes(self, batch: Sequence[Seen]) -> list[dict[str, Any]]:
        """What of ``batch`` this watch reports (run in its watcher's thread)."""
        root = str(self.root)
        under = root.rstrip(os.sep) + os.sep
        changes = []
        for seen in batch:
            if self.ignore(seen.name):
                continue
            if seen.path == root:
                relative = ""
            elif seen.path.startswith(under):
                relative = seen.path[len(under) :].replace(os.sep, "/")
            else:
                continue  # beside a watched file, in the folder watched for it
            if not self.recursive and "/" in relative:
                continue
            if relative and (
                self.excludes(relative) or (self.includes and not self.includes(relative))
            ):
                continue
            uri = self.root_uri.rstrip("/") + ("/" + quote(relative) if relative else "")
            changes.append({"uri": uri, "type": seen.kind})
        return changes


async def open_watch(
    owner: Any,
    spawn: Callable[..., None],
    uri: str,
    root: Path,
    params: Mapping[str, Any],
    emit: Callable[[list[dict[str, Any]]], None],
    ignore: Callable[[str], bool],
) -> FileWatch:
    """A watch of ``root`` (resolved and inside the fence), on a running OS watcher."""
    recursive = bool(params.get("recursive", False))

    def prepare() -> tuple[Globs, Globs, bool]:
        # Compiling a long list of globs, and the stat, are blocking work.
        includes = checked_globs(params.get("includes"), "includes")
        excludes = checked_globs(params.get("excludes"), "excludes")
        if not root.exists():
            raise ProtocolError(NOT_FOUND, f"nothing at {uri} to watch")
        return includes, excludes, root.is_dir()

    includes, excludes, is_folder = await anyio.to_thread.run_sync(prepare)
    watch = FileWatch(uri, root, recursive, includes, excludes, emit, ignore)
    # A file is watched through its folder: a file replaced by a rename (as editors
    # and resourceWrite do) is a new file, which a watch on the old one never sees.
    folder, deep = (root, recursive) if is_folder else (root.parent, False)
    watcher = await pool_for(owner, spawn).watcher_for(uri, folder, deep)
    watch.watcher = watcher
    watcher.join(watch)
    return watch
