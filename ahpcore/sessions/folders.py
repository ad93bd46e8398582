"""Which folders a session may work in.

A session's working directories are the fence of what its clients reach through
the host's file services (``resourceRead`` and the like), so each is checked
before any session holds it, wherever it comes from: ``createSession``,
``createChat``, and the working-directory actions.

A working directory is a ``file:`` URI naming a folder of this machine
(``file:///…`` or ``file://localhost/…``) whose path, once percent-decoded, is
absolute and plain: no ``.`` or ``..`` segment, no empty segment, no NUL. It is
refused rather than normalised, so what the client named is what the session
holds. And it is not the machine itself: ``/`` and the system's own folders (see
``SYSTEM_FOLDERS``) and any folder holding the user's home, symlinks resolved,
are refused unless the host was started with ``AHP_FILES_REACH=machine``, which
lets every connection reach the whole machine anyway. The files plugin's fence
keeps the same rule through ``too_wide``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from urllib.parse import urlsplit

from ahpcore.protocol.errors import INVALID_PARAMS, PERMISSION_DENIED, ProtocolError
from ahpcore.protocol.uris import path_of_file_uri, scheme_of

#: The host's setting for what connections may reach (the files plugin reads it too):
#: ``machine`` is the whole machine; anything else, the sessions' folders.
ENV_REACH = "AHP_FILES_REACH"
REACH_MACHINE = "machine"

#: Folders no session may work in without machine reach: the root, where the
#: system keeps its programs, settings, devices and runtime state, and the folders
#: holding every user's home (the macOS names too, since ``/etc`` resolves to
#: ``/private/etc`` there). The user's own home is fine, even where it is ``/root``.
SYSTEM_FOLDERS = (
    "/",
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/home",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var",
    "/Library",
    "/System",
    "/Users",
    "/private",
    "/private/etc",
    "/private/var",
)
#: Of those, the ones refused with everything under them: the kernel's views of
#: processes and devices (``/proc/self/root`` is ``/`` again, ``/proc/self/environ``
#: the host's secrets, ``/dev/pts/0`` another terminal).
SYSTEM_TREES = ("/dev", "/proc", "/sys")
#: Ordinary files under a system tree: shared memory is a plain tmpfs.
ORDINARY_UNDER_TREES = ("/dev/shm",)


def machine_reach() -> bool:
    """True when the host lets connections reach the whole machine."""
    return os.environ.get(ENV_REACH) == REACH_MACHINE


def _refuse(code: int, where: str, uri: str, why: str) -> ProtocolError:
    return ProtocolError(code, f"{where}: {uri!r} {why}")


def local_path(uri: object, where: str) -> str:
    """The absolute path a working-directory URI names, or a ProtocolError saying why not.

    ``where`` names the parameter in the error (``params.workingDirectories[0]``).
    """
    if not isinstance(uri, str) or not uri:
        raise ProtocolError(
            INVALID_PARAMS, f"{where}: a working directory is a non-empty file: URI, not {uri!r}"
        )
    scheme = scheme_of(uri)
    if scheme is None:
        raise _refuse(INVALID_PARAMS, where, uri, "is not a URI (expected file:///<absolute path>)")
    if scheme.lower() != "file":
        raise _refuse(
            INVALID_PARAMS,
            where,
            uri,
            "is not a file: URI; a working directory is a folder of this machine "
            "(file:///<absolute path>)",
        )
    if not uri[len(scheme) + 1 :].startswith("//"):
        raise _refuse(INVALID_PARAMS, where, uri, "is not spelled file:///<absolute path>")
    parts = urlsplit(uri)
    if parts.netloc.lower() not in ("", "localhost"):
        raise _refuse(
            PERMISSION_DENIED,
            where,
            uri,
            f"names another machine ({parts.netloc}); this host works in its own folders",
        )
    if "?" in uri:
        raise _refuse(
            INVALID_PARAMS, where, uri, "has a query; write a '?' in a folder's name as %3F"
        )
    if "#" in uri:
        raise _refuse(
            INVALID_PARAMS, where, uri, "has a fragment; write a '#' in a folder's name as %23"
        )
    if not parts.path:
        raise _refuse(INVALID_PARAMS, where, uri, "names no folder")
    path = path_of_file_uri(uri) or ""
    if "\x00" in path:
        raise _refuse(INVALID_PARAMS, where, uri, "holds a NUL byte (%00)")
    segments = path.split("/")
    # Decoded first: %2e%2e and %2f..%2f are the '..' they spell.
    if any(segment in (".", "..") for segment in segments):
        raise _refuse(
            INVALID_PARAMS,
            where,
            uri,
            "has '.' or '..' segments (percent-decoded); name the folder itself",
        )
    if "" in segments[1:-1]:  # a trailing slash is the folder itself
        raise _refuse(INVALID_PARAMS, where, uri, "has an empty segment ('//')")
    if not path.startswith("/"):
        raise _refuse(INVALID_PARAMS, where, uri, "does not name an absolute path")
    return path


def _within(path: str, tree: str) -> bool:
    return path == tree or path.startswith(tree.rstrip("/") + "/")


def home_folder() -> str | None:
    """The user's home, resolved, or None where it is unknown."""
    home = os.path.expanduser("~")
    return os.path.realpath(home) if os.path.isabs(home) else None


@functools.cache
def _spellings() -> tuple[frozenset[str], tuple[str, ...]]:
    """The system folders and trees as spelled and as resolved (``/lib`` -> ``/usr/lib``)."""
    found = frozenset(SYSTEM_FOLDERS) | {os.path.realpath(f) for f in SYSTEM_FOLDERS}
    trees = tuple({*SYSTEM_TREES, *(os.path.realpath(t) for t in SYSTEM_TREES)})
    return found, trees


def too_wide(real: str, home: str | None) -> bool:
    """True when ``real`` (an absolute, resolved path) is too wide for a session's
    folder: ``/``, a system folder or tree, or a folder holding ``home``."""
    if real.startswith("//"):  # POSIX keeps a leading '//': it is still '/'
        real = "/" + real.lstrip("/")
    if real == home:
        return False
    system, trees = _spellings()
    if real in system:
        return True
    if any(_within(real, tree) for tree in trees):
        return not any(_within(real, ordinary) for ordinary in ORDINARY_UNDER_TREES)
    return home is not None and _within(home, real)


def system_folder(path: str) -> str | None:
    """The too-wide folder (see ``too_wide``) ``path`` is or resolves to, or None."""
    home = home_folder()
    for candidate in (os.path.normpath(path), os.path.realpath(path)):
        if too_wide(candidate, home):
            return candidate
    return None


def check_folder(uri: object, where: str) -> None:
    """Refuse ``uri`` as a working directory, naming ``where`` and why (see the module)."""
    path = local_path(uri, where)
    if machine_reach():
        return
    found = system_folder(path)
    if found is None:
        return
    plain = os.path.normpath(path)
    named = "is a system folder" if found == plain else "leads to a system folder"
    raise _refuse(
        PERMISSION_DENIED,
        where,
        str(uri),
        f"{named}: a session there would reach the whole system. A host whose clients "
        f"may reach the whole machine is started with {ENV_REACH}={REACH_MACHINE}",
    )


def check_folders(directories: Iterable[object], where: str = "params.workingDirectories") -> None:
    """``check_folder`` for each, naming the first refused by its index."""
    for index, directory in enumerate(directories):
        check_folder(directory, f"{where}[{index}]")
