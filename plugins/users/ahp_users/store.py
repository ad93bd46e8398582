"""The people file: who may connect, with which role, their tokens as salted scrypt hashes.

It lives at ``<state dir>/users/people.json``, owner-only (0600). The command line
(``ahp users ...``) changes it under a lock, replacing it whole; a running host
only reads it, again whenever it changes. A token is ``ahpu-<id>.<secret>``: the
id (not secret) says which hash to try, so a handshake costs one scrypt, not
one per person. Nothing here ever writes a token itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ahpcore.api import private_folder, write_private

FOLDER = "users"
PEOPLE_FILE = "people.json"
SEEN_FILE = "seen.json"
LOCK_FILE = ".lock"
ROLES = ("admin", "member", "viewer")
TOKEN_PREFIX = "ahpu-"
#: scrypt's cost: about 16 MiB and tens of milliseconds a check, on purpose.
SCRYPT_N, SCRYPT_R, SCRYPT_P, SCRYPT_LEN = 1 << 14, 8, 1, 32
#: A person's name: what ``user:<name>`` spells, so no spaces or colons.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_TOKEN = re.compile(rf"^{TOKEN_PREFIX}([0-9a-f]{{8}})\.[A-Za-z0-9_-]{{20,}}$")


class UsersError(Exception):
    """The people file cannot be used, or a change to it cannot be made; the message says why."""


def folder(state_dir: Path) -> Path:
    return state_dir / FOLDER


def people_path(state_dir: Path) -> Path:
    return folder(state_dir) / PEOPLE_FILE


def now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _scrypt(token: str, salt: bytes, n: int, r: int, p: int, length: int) -> bytes:
    return hashlib.scrypt(
        token.encode("utf-8"), salt=salt, n=n, r=r, p=p, dklen=length, maxmem=64 << 20
    )


def make_token() -> tuple[str, dict[str, Any]]:
    """A new token and what is kept of it (its id, a salt and the hash)."""
    token_id = secrets.token_hex(4)
    token = f"{TOKEN_PREFIX}{token_id}.{secrets.token_urlsafe(32)}"
    salt = os.urandom(16)
    digest = _scrypt(token, salt, SCRYPT_N, SCRYPT_R, SCRYPT_P, SCRYPT_LEN)
    kept = {
        "id": token_id,
        "salt": salt.hex(),
        "hash": digest.hex(),
        "n": SCRYPT_N,
        "r": SCRYPT_R,
        "p": SCRYPT_P,
    }
    return token, kept


def token_id(token: str) -> str | None:
    """The id part of a person's token, or None for anything else (a deployment token)."""
    match = _TOKEN.match(token)
    return match.group(1) if match else None


def verify(token: str, kept: dict[str, Any]) -> bool:
    """Whether ``token`` is the one ``kept`` was made from (compared in constant time)."""
    try:
        salt, expected = bytes.fromhex(kept["salt"]), bytes.fromhex(kept["hash"])
        n, r, p = int(kept["n"]), int(kept["r"]), int(kept["p"])
    except (KeyError, TypeError, ValueError):
        return False
    return hmac.compare_digest(_scrypt(token, salt, n, r, p, len(expected)), expected)


@dataclass(frozen=True)
class Entry:
    name: str
    role: str
    created: str
    token: dict[str, Any]


def parse(text: str, where: Path) -> dict[str, Entry]:
    """The people in the file's ``text``; ``UsersError`` naming ``where`` when it is not one."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise UsersError(f"{where} is not JSON ({exc})") from None
    people = data.get("people") if isinstance(data, dict) else None
    if not isinstance(people, list):
        raise UsersError(f"{where} holds no list of people")
    found: dict[str, Entry] = {}
    for item in people:
        if not isinstance(item, dict):
            raise UsersError(f"{where}: a person is not an object")
        name, role, token = item.get("name"), item.get("role"), item.get("token")
        if not isinstance(name, str) or not NAME.match(name):
            raise UsersError(f"{where}: a person's name is missing or not allowed")
        if role not in ROLES:
            raise UsersError(f"{where}: {name} has role {role!r}, not one of {', '.join(ROLES)}")
        if not isinstance(token, dict) or not isinstance(token.get("id"), str):
            raise UsersError(f"{where}: {name} has no token hash")
        found[name] = Entry(name, role, str(item.get("created", "")), token)
    return found


def read(path: Path) -> dict[str, Entry]:
    """The people file at ``path`` (none: nobody); refused when others could read it."""
    try:
        with open(path, encoding="utf-8") as handle:
            mode = os.fstat(handle.fileno()).st_mode
            text = handle.read()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise UsersError(f"cannot read {path} ({exc.strerror or exc})") from None
    if mode & 0o077:
        raise UsersError(f"{path} is open to other users (mode {stat.S_IMODE(mode):o})")
    return parse(text, path)


def dump(people: dict[str, Entry]) -> str:
    rows = [
        {"name": e.name, "role": e.role, "created": e.created, "token": e.token}
        for e in sorted(people.values(), key=lambda e: e.name)
    ]
    return json.dumps({"version": 1, "people": rows}, indent=2) + "\n"


@contextlib.contextmanager
def editing(state_dir: Path) -> Iterator[dict[str, Entry]]:
    """The people, to change in place; written back (0600, whole) when the block ends well.

    One command at a time changes the file: a lock beside it is held throughout.
    """
    home = private_folder(folder(state_dir))
    with open(home / LOCK_FILE, "a") as lock:
        os.fchmod(lock.fileno(), 0o600)
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        people = read(people_path(state_dir))
        yield people
        write_private(people_path(state_dir), dump(people))


def read_seen(state_dir: Path) -> dict[str, str]:
    try:
        data = json.loads((folder(state_dir) / SEEN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, str)} if isinstance(data, dict) else {}


def write_seen(state_dir: Path, seen: dict[str, str]) -> None:
    write_private(folder(state_dir) / SEEN_FILE, json.dumps(seen, indent=2) + "\n")
