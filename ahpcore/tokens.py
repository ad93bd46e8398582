"""The connection token kept in the state folder, so a client's saved address outlives restarts.

``ahp serve`` without ``AHP_TOKEN``, ``--token-file`` or ``--token`` uses the
token in ``<state dir>/connection-token``, making it on first use; ``ahp token``
prints it and ``ahp token --rotate`` replaces it. The file is the user's alone
(0600, like everything under the state folder).

A running host reads the file again when it changes (one ``stat`` per
handshake), so a rotated token is the only one new connections are let in with,
without a restart. Connections already open stay open.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import stat
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

#: The file in the state folder that holds the token.
TOKEN_FILE = "connection-token"

#: A token chosen by the user must be at least this long ...
MIN_TOKEN_LENGTH = 16
#: ... and use at least this many different characters ("aaaa..." is one guess).
MIN_TOKEN_DISTINCT = 8


class TokenError(Exception):
    """The stored token cannot be used; the message says why and how to mend it."""


def is_weak(token: str) -> bool:
    return len(token) < MIN_TOKEN_LENGTH or len(set(token)) < MIN_TOKEN_DISTINCT


def token_path(state_dir: Path) -> Path:
    return state_dir / TOKEN_FILE


def new_token() -> str:
    """24 random bytes, URL-safe: the token the host makes."""
    return secrets.token_urlsafe(24)


def _read(path: Path) -> str:
    """The token in ``path``, refusing a file others could read or an empty one."""
    try:
        with open(path, encoding="utf-8") as handle:
            mode = os.fstat(handle.fileno()).st_mode
            text = handle.read().strip()
    except OSError as exc:
        raise TokenError(f"cannot read the stored token {path} ({exc.strerror or exc})") from None
    if mode & 0o077:
        raise TokenError(
            f"the stored token {path} is open to other users (mode {stat.S_IMODE(mode):o}), "
            "who may know it; run ahp token --rotate to replace it"
        )
    if not text:
        raise TokenError(f"the stored token {path} is empty; run ahp token --rotate")
    if is_weak(text):
        raise TokenError(
            f"the stored token {path} is too weak (it needs at least {MIN_TOKEN_LENGTH} "
            f"characters, {MIN_TOKEN_DISTINCT} of them different); run ahp token --rotate"
        )
    return text


def _write(path: Path, token: str, *, replace: bool) -> None:
    """Put ``token`` in ``path``, owner-only from the start, made complete under another name.

    ``replace=False`` links it into place, which fails when the path exists: of two
    starts racing to make the first token, both end up with the one that won.
    """
    # Imported here: the command line reads this module's constants at every start,
    # before the store's modules are needed.
    from ahpcore.store.private import FILE_MODE, private_folder

    private_folder(path.parent, tighten=False)  # a shared --state-dir is the user's choice
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, FILE_MODE)  # mkstemp makes 0600 already; said here, not assumed
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(token + "\n")
        if replace:
            os.replace(temporary, path)
        else:
            with contextlib.suppress(FileExistsError):
                os.link(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)


def stored_token(state_dir: Path) -> str:
    """The token kept in ``state_dir``, made now when there is none."""
    path = token_path(state_dir)
    if not path.exists():
        try:
            _write(path, new_token(), replace=False)
        except OSError as exc:
            raise TokenError(
                f"cannot store a connection token in {path} ({exc.strerror or exc})"
            ) from None
    return _read(path)


def rotate(state_dir: Path) -> str:
    """Replace the stored token with a new one and return it."""
    path = token_path(state_dir)
    token = new_token()
    try:
        _write(path, token, replace=True)
    except OSError as exc:
        raise TokenError(f"cannot write a new token to {path} ({exc.strerror or exc})") from None
    return token


class StoredToken:
    """The stored token as a running host sees it: read again whenever the file changes.

    Calling it gives the token a handshake must carry. When the file changes it
    is read again; when it cannot be read (removed, emptied, opened to others),
    the last good token stays in force and the trouble is logged once.
    """

    def __init__(self, state_dir: Path) -> None:
        self.path = token_path(state_dir)
        self._token = stored_token(state_dir)
        self._stamp = self._stamp_now()
        self._trouble: str | None = None

    def _stamp_now(self) -> tuple[int, int, int, int] | None:
        try:
            info = os.stat(self.path)
        except OSError:
            return None
        return (info.st_ino, info.st_mtime_ns, info.st_size, info.st_mode)

    @property
    def current(self) -> str:
        """The token as it is now, without looking at the file."""
        return self._token

    def __call__(self) -> str:
        stamp = self._stamp_now()
        if stamp == self._stamp:
            return self._token
        self._stamp = stamp
        try:
            if stamp is None:
                raise TokenError(f"the stored token {self.path} is gone")
            token = _read(self.path)
        except TokenError as exc:
            if str(exc) != self._trouble:
                self._trouble = str(exc)
                log.warning("%s; the host keeps the token it had", exc)
            return self._token
        self._trouble = None
        if token != self._token:
            self._token = token
            log.info(
                "the connection token changed (%s); new connections need the new one", self.path
            )
        return self._token
