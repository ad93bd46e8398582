"""File URIs and the URIs of a file as git holds it, both spelled from raw path bytes.

A path is bytes end to end: a name that is not UTF-8 is percent-encoded byte
by byte, and read back to the same bytes.
"""

from __future__ import annotations

import os
from urllib.parse import parse_qs, quote_from_bytes, unquote_to_bytes, urlsplit

from ahpcore import api

#: ``ahp-git:/abs/path?ref=<commit or tree>``: what a file was at ``ref``.
SCHEME = "ahp-git"


def file_uri(path: bytes) -> str:
    return api.file_uri(path)


def path_of_file_uri(uri: str) -> bytes:
    """The local path a ``file:`` URI (or a bare absolute path) names, as git reads it."""
    if uri.startswith("/"):
        return os.fsencode(uri)
    path = api.path_of_file_uri(uri)
    if path is None:
        raise ValueError(f"{uri!r} is not a file: URI of this machine")
    return os.fsencode(path)


def blob_uri(path: bytes, ref: str) -> str:
    return f"{SCHEME}:{quote_from_bytes(path, safe='/')}?ref={ref}"


#: Lengths of a full object id: SHA-1 and SHA-256, in hex.
FULL_ID_LENGTHS = (40, 64)


def is_full_object_id(ref: str) -> bool:
    """A whole object id in lower-case hex: never an abbreviation, a name or an expression."""
    return len(ref) in FULL_ID_LENGTHS and all(c in "0123456789abcdef" for c in ref)


def parse_blob_uri(uri: str) -> tuple[bytes, str]:
    """``(absolute path, ref)``; ValueError naming what is wrong."""
    if not uri.startswith(SCHEME + ":"):
        raise ValueError(f"{uri!r} is not an {SCHEME}: URI")
    parts = urlsplit(uri)
    if parts.netloc:
        raise ValueError(f"{uri!r} names a host ({parts.netloc}); it takes a local path")
    refs = parse_qs(parts.query).get("ref")
    if not refs or len(refs) != 1 or not is_full_object_id(refs[0]):
        raise ValueError(
            f"{uri!r} names no full object id in ?ref= (40 or 64 lower-case hex digits; "
            "abbreviations and names are not taken)"
        )
    path = unquote_to_bytes(parts.path)
    if not path.startswith(b"/"):
        raise ValueError(f"{uri!r} does not name an absolute path")
    return path, refs[0]


def plain_relative(rel: bytes) -> bool:
    """``rel`` names a path from the top of a tree as git reads one: no empty, ``.`` or
    ``..`` part (git would read ``./`` and ``../`` against its working directory)."""
    if not rel or b"\0" in rel:
        return False
    return all(part not in (b"", b".", b"..") for part in rel.split(b"/"))
