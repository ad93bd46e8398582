"""File URIs and the URIs of a file as git holds it, both spelled from raw path bytes.

A path is bytes end to end: a name that is not UTF-8 is percent-encoded byte
by byte, and read back to the same bytes.
"""

from __future__ import annotations

import os
from urllib.parse import parse_qs, quote_from_bytes, unquote_to_bytes, urlsplit

#: ``ahp-git:/abs/path?ref=<commit or tree>``: what a file was at ``ref``.
SCHEME = "ahp-git"


def file_uri(path: bytes) -> str:
    return "file://" + quote_from_bytes(path, safe="/")


def path_of_file_uri(uri: str) -> bytes:
    """The local path a ``file:`` URI (or a bare absolute path) names."""
    if uri.startswith("/"):
        return os.fsencode(uri)
    parts = urlsplit(uri)
    if parts.scheme != "file":
        raise ValueError(f"{uri!r} is not a file: URI")
    if parts.netloc not in ("", "localhost"):
        raise ValueError(f"{uri!r} names another machine ({parts.netloc})")
    return unquote_to_bytes(parts.path)


def blob_uri(path: bytes, ref: str) -> str:
    return f"{SCHEME}:{quote_from_bytes(path, safe='/')}?ref={ref}"


def parse_blob_uri(uri: str) -> tuple[bytes, str]:
    """``(absolute path, ref)``; ValueError naming what is wrong."""
    if not uri.startswith(SCHEME + ":"):
        raise ValueError(f"{uri!r} is not an {SCHEME}: URI")
    parts = urlsplit(uri)
    refs = parse_qs(parts.query).get("ref")
    if not refs or not all(c in "0123456789abcdef" for c in refs[0]):
        raise ValueError(f"{uri!r} names no object id in ?ref=")
    path = unquote_to_bytes(parts.path)
    if not path.startswith(b"/"):
        raise ValueError(f"{uri!r} does not name an absolute path")
    return path, refs[0]
