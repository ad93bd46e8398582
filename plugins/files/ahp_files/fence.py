"""What a connection may reach: the folders of the sessions on this host.

Every URI becomes one absolute path with no ``.`` or ``..`` in it and every link
resolved (``/proc/self/root`` and the like included) before anything is
compared, so an alias that lands outside is refused like the plain path would
be. Refusals name the URI the client sent and nothing else: where a link really
points is not the client's to learn.

A change (write, delete, move, copy) must land strictly inside a session's
folder: never the folder itself, nor a folder holding one, nor anything in a
``.git`` folder, whose hooks and config git runs as code.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ahpcore import api
from ahpcore.protocol.errors import INVALID_PARAMS, NOT_FOUND, PERMISSION_DENIED, ProtocolError
from ahpcore.protocol.uris import path_of_file_uri

#: ``AHP_FILES_REACH=machine`` lets every connection reach the whole machine.
ENV_REACH = api.ENV_REACH
REACH_SESSIONS = "sessions"
REACH_MACHINE = api.REACH_MACHINE

#: Code points HFS+ ignores in names, so ``.g\u200cit`` is ``.git`` on a Mac.
_HFS_IGNORED = dict.fromkeys(
    [*range(0x200C, 0x2010), *range(0x202A, 0x202F), *range(0x206A, 0x2070), 0xFEFF]
)


def is_git_name(name: str) -> bool:
    """``name`` is ``.git`` as some file system would see it: case folded (macOS and
    Windows), with the code points HFS+ ignores and the trailing dots and spaces
    Windows drops taken out."""
    return name.translate(_HFS_IGNORED).rstrip(". ").casefold() == ".git"


def home_folder() -> Path | None:
    home = api.home_folder()
    return Path(home) if home is not None else None


def system_folder(real: Path, home: Path | None = None) -> bool:
    """``real`` (a resolved path) is too wide to be a session's folder: the same rule
    ``createSession`` keeps (``/``, a system folder, a folder holding the user's home)."""
    return api.too_wide(str(real), str(home) if home is not None else None)


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
    raw = path_of_file_uri(uri) or ""  # byte by byte; on Windows /C:/x is C:\x
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


def normalise(path: Path, *, follow: bool = True) -> Path:
    """``path`` absolute, without ``.`` or ``..``, every link in it resolved (OSError
    when a link goes away while it is read).

    ``follow=False`` leaves a link in the last place unresolved (an operation on the
    link itself), unless that place is ``.`` or ``..``, which name a folder, never a link.
    """
    if follow or path.name in ("", ".", "..") or path.parent == path:
        return Path(os.path.realpath(path))
    return Path(os.path.realpath(path.parent)) / path.name


@dataclass(frozen=True)
class Target:
    """Where an operation acts, as the fence checked it.

    Operations open ``anchor`` (a resolved folder the client cannot change), then each
    of ``walk`` in turn without following links, and act on ``name`` in the last
    folder opened, so a link swapped in after the check is refused, never followed.
    """

    uri: str
    #: Absolute, resolved, without ``.`` or ``..``.
    path: Path
    anchor: Path
    walk: tuple[str, ...]
    #: ``.`` when the target is ``anchor`` itself (only ``/``, with the whole machine in reach).
    name: str


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
        #: The user's home, the one folder a session may hold that a system folder holds.
        self.home = home_folder()
        #: Folders and files granted beyond the sessions' own (what an agent was given).
        #: A granted file can be read; changing it needs its folder granted.
        self.granted: set[Path] = set()

    def grant(self, path: str | Path) -> None:
        """Let connections reach ``path`` (and what is under it) too."""
        self.granted.add(Path(os.path.realpath(path)))

    def roots(self) -> list[Path]:
        """The resolved folders (and granted files) in reach. A session folder that is a
        system folder is left out: ``createSession`` refuses one, and should one get
        through anyway, it does not become the fence."""
        found = set(self.granted)
        home = self.home
        for value in set(self._directories()):  # many chats share their session's folders
            path = directory_path(value)
            if path is None:
                continue
            try:
                real = Path(os.path.realpath(path))
            except OSError:  # changing as it is read: out of reach until it settles
                continue
            if not system_folder(real, home):
                found.add(real)
        return sorted(found)

    def inside(self, real: Path) -> bool:
        return self.whole_machine or any(real == r or real.is_relative_to(r) for r in self.roots())

    def is_root(self, real: Path) -> bool:
        return not self.whole_machine and real in self.roots()

    def locate(self, uri: Any, *, follow: bool = True) -> Path:
        """The resolved path ``uri`` names, or -32009 when it is outside the fence."""
        return self.target(uri, follow=follow).path

    def target(self, uri: Any, *, follow: bool = True, change: bool = False) -> Target:
        """Where ``uri`` leads, or -32009 when it is out of reach.

        With ``change``, the target must be strictly inside a session's folder, hold
        none, and be in no ``.git`` folder.
        """
        try:
            real = normalise(path_of(uri), follow=follow)
        except OSError:  # a link on the way went away while it was read
            raise ProtocolError(
                NOT_FOUND, f"{uri} changed while it was looked up: nothing is there now"
            ) from None
        if not real.is_absolute() or any(part in (".", "..") for part in real.parts):
            raise ProtocolError(PERMISSION_DENIED, f"{uri} does not name one place")
        roots = self.roots()
        if change:
            self._refuse_change(uri, real, roots)
        if self.whole_machine:
            anchor = Path(real.anchor)
        else:
            holding = [r for r in roots if real.is_relative_to(r)]
            if not holding:
                raise ProtocolError(
                    PERMISSION_DENIED,
                    f"{uri} is outside the working directories of this host's sessions",
                )
            anchor = max(holding, key=lambda r: len(r.parts))  # the fewest folders to walk
            if real == anchor:  # a root itself is opened from the folder holding it
                anchor = anchor.parent
        if real == anchor:
            return Target(uri, real, anchor, (), ".")
        below = real.relative_to(anchor).parts
        return Target(uri, real, anchor, below[:-1], below[-1])

    def _refuse_change(self, uri: Any, real: Path, roots: list[Path]) -> None:
        for root in roots:
            if real == root:
                raise ProtocolError(
                    PERMISSION_DENIED,
                    f"{uri} is a folder this host serves (a session's working directory): "
                    "it is not changed",
                )
            if root.is_relative_to(real):
                raise ProtocolError(
                    PERMISSION_DENIED,
                    f"{uri} holds a session's working directory: it is not changed",
                )
        if self.whole_machine:
            if real == self.home or system_folder(real, self.home):
                raise ProtocolError(
                    PERMISSION_DENIED, f"{uri} is a system or home folder: it is not changed"
                )
        elif not any(real.is_relative_to(r) for r in roots):
            raise ProtocolError(
                PERMISSION_DENIED,
                f"{uri} is outside the working directories of this host's sessions",
            )
        self.refuse_git(uri, real, "changes")

    @staticmethod
    def refuse_git(uri: Any, real: Path, doing: str) -> None:
        """-32009 when ``real`` is a ``.git`` folder or in one: a client that could write
        a hook or ``core.fsmonitor`` there would have git run its code."""
        if any(is_git_name(part) for part in real.parts):
            raise ProtocolError(
                PERMISSION_DENIED,
                f"{uri} is in a .git folder, which this host reads but never {doing}: "
                "git runs the hooks and config in it as code",
            )
