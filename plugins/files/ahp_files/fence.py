"""What a connection may reach: the folders of the sessions on this host.

Every path is resolved (symlinks, ``..``, ``/proc/self/root`` and the like)
before it is compared, so an alias that lands outside is refused like the
plain path would be. Refusals name the URI the client sent and nothing else:
where a link really points is not the client's to learn.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from ahpcore.protocol.errors import INVALID_PARAMS, PERMISSION_DENIED, ProtocolError


def url2pathname(path: str) -> str:
    """``urllib.request.url2pathname``, without loading urllib.request (and http.client
    and ssl under it) into a host that never opens a URL."""
    if os.name == "nt":
        from nturl2path import url2pathname as convert

        return convert(path)
    return unquote(path)


#: ``AHP_FILES_REACH=machine`` lets every connection reach the whole machine.
ENV_REACH = "AHP_FILES_REACH"
REACH_SESSIONS = "sessions"
REACH_MACHINE = "machine"


def path_of(uri: Any) -> Path:
    """The absolute path a ``file:`` URI names, not yet resolved."""
    if not isinstance(uri, str):
        raise ProtocolError(INVALID_PARAMS, f"expected a file: URI, got {uri!r}")
    parts = urlsplit(uri)
    if parts.scheme.lower() != "file":
        raise ProtocolError(
            PERMISSION_DENIED,
            f"{uri}: this host serves file: URIs and the resources clients publish",
        )
    if parts.netloc not in ("", "localhost"):
        raise ProtocolError(PERMISSION_DENIED, f"{uri} names another machine ({parts.netloc})")
    raw = url2pathname(parts.path)  # unquotes; on Windows also turns /C:/x into C:\x
    if "\x00" in raw:
        raise ProtocolError(INVALID_PARAMS, f"{uri}: a path cannot hold a NUL byte")
    path = Path(raw)
    if not path.is_absolute():
        raise ProtocolError(INVALID_PARAMS, f"{uri}: a file: URI names an absolute path")
    return path


def directory_path(value: Any) -> Path | None:
    """A working directory as sessions hold it (a ``file:`` URI or a path), or None."""
    if not isinstance(value, str) or not value:
        return None
    if value.startswith("file:"):
        try:
            return path_of(value)
        except ProtocolError:
            return None
    path = Path(value)
    return path if path.is_absolute() else None


def session_directories(engine: Any) -> Iterable[str]:
    """Working directories of every session and chat the engine holds (read, never changed)."""
    for channel in list(engine.channels.values()):
        if channel.kind in ("session", "chat"):
            yield from channel.state.get("workingDirectories") or ()


class Fence:
    def __init__(
        self,
        directories: Callable[[], Iterable[str]],
        *,
        reach: str | None = None,
    ) -> None:
        self._directories = directories
        chosen = reach or os.environ.get(ENV_REACH) or REACH_SESSIONS
        if chosen not in (REACH_SESSIONS, REACH_MACHINE):
            raise ValueError(
                f"{ENV_REACH} is {REACH_SESSIONS!r} or {REACH_MACHINE!r}, not {chosen!r}"
            )
        self.whole_machine = chosen == REACH_MACHINE
        #: Folders and files granted beyond the sessions' own (what an agent was given).
        self.granted: set[Path] = set()

    def grant(self, path: str | Path) -> None:
        """Let connections reach ``path`` (and what is under it) too."""
        self.granted.add(Path(os.path.realpath(path)))

    def roots(self) -> list[Path]:
        found = set(self.granted)
        for value in set(self._directories()):  # many chats share their session's folders
            path = directory_path(value)
            if path is not None:
                found.add(Path(os.path.realpath(path)))
        return sorted(found)

    def inside(self, real: Path) -> bool:
        return self.whole_machine or any(real == r or real.is_relative_to(r) for r in self.roots())

    def is_root(self, real: Path) -> bool:
        return not self.whole_machine and real in self.roots()

    def locate(self, uri: Any, *, follow: bool = True) -> Path:
        """The resolved path ``uri`` names, or -32009 when it is outside the fence.

        ``follow=False`` resolves the folder holding the last component but not
        the component itself, for operations on a link rather than its target.
        """
        path = path_of(uri)
        if follow or path.parent == path:
            real = Path(os.path.realpath(path))
        else:
            real = Path(os.path.realpath(path.parent)) / path.name
        if not self.inside(real):
            raise ProtocolError(
                PERMISSION_DENIED,
                f"{uri} is outside the working directories of this host's sessions",
            )
        return real
