"""Channel URIs (the root channel, sessions and their aliases, chats) and file URIs.

A session URI is ``<provider>:/<uuid>``; ``ahp-session:/<uuid>`` names the same
session, because only the id inside a session URI is ever read. A session's
default chat is ``ahp-chat://default/<base64url(sessionUri)>`` (the shape VS
Code computes) and the older ``ahp-chat:/<sessionId>`` resolves to it.

A file URI and a local path convert through ``path_of_file_uri`` and
``file_uri`` alone, byte by byte, so a name that is not UTF-8 comes back as it was.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from dataclasses import dataclass
from urllib.parse import quote_from_bytes, unquote_to_bytes, urlsplit

ROOT_CHANNEL = "ahp-root://"
SESSION_ALIAS_SCHEME = "ahp-session"
CHAT_SCHEME = "ahp-chat"
DEFAULT_CHAT_PREFIX = "ahp-chat://default/"

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")


def scheme_of(uri: str) -> str | None:
    """The scheme of ``uri`` (without the colon), or None when it has none."""
    match = _SCHEME.match(uri)
    return match.group(1) if match else None


@dataclass(frozen=True)
class SessionUri:
    """A parsed session URI: the scheme it was spelled with and the id it names."""

    scheme: str
    session_id: str

    def __str__(self) -> str:
        return f"{self.scheme}:/{self.session_id}"

    @property
    def is_alias(self) -> bool:
        return self.scheme == SESSION_ALIAS_SCHEME


def parse_session_uri(uri: str) -> SessionUri:
    """Split ``<scheme>:/<id>`` (or ``<scheme>:///<id>``); ValueError names what is wrong."""
    scheme = scheme_of(uri) if isinstance(uri, str) else None
    if scheme is None:
        raise ValueError(f"{uri!r} is not a session URI: it has no scheme")
    if scheme in (CHAT_SCHEME, "ahp-root"):
        raise ValueError(f"{uri!r} is a {scheme} channel, not a session")
    rest = uri[len(scheme) + 1 :]
    if not rest.startswith("/"):
        raise ValueError(f"{uri!r} is not a session URI: expected {scheme}:/<id>")
    session_id = rest.lstrip("/")
    if not session_id or "/" in session_id:
        raise ValueError(f"{uri!r} is not a session URI: expected {scheme}:/<id>")
    return SessionUri(scheme=scheme, session_id=session_id)


def session_id_of(uri: str) -> str:
    """The id a session URI names, whichever scheme spells it."""
    return parse_session_uri(uri).session_id


def session_uri(provider: str, session_id: str) -> str:
    """The URI the host lists a session under: ``<provider>:/<id>``."""
    return f"{provider}:/{session_id}"


def alias_uri(session_id: str) -> str:
    """``ahp-session:/<id>``, the provider-neutral alias of a session."""
    return f"{SESSION_ALIAS_SCHEME}:/{session_id}"


def same_session(a: str, b: str) -> bool:
    """True when two URIs name one session (only the ids are compared)."""
    try:
        return session_id_of(a) == session_id_of(b)
    except ValueError:
        return False


def _b64url_encode(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode("utf-8")).decode("ascii").rstrip("=")


def _b64url_decode(text: str) -> str | None:
    if not text or not re.fullmatch(r"[A-Za-z0-9_\-]+", text):
        return None
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def default_chat_uri(session: str) -> str:
    """``ahp-chat://default/<base64url(session)>``, unpadded as Node's base64url."""
    return DEFAULT_CHAT_PREFIX + _b64url_encode(session)


def legacy_chat_uri(session_id: str) -> str:
    """``ahp-chat:/<sessionId>``, the older spelling of a session's default chat."""
    return f"{CHAT_SCHEME}:/{session_id}"


def is_chat_uri(uri: str) -> bool:
    return scheme_of(uri) == CHAT_SCHEME


def session_of_default_chat(uri: str) -> str | None:
    """The session URI encoded in a default-chat URI, or None if it is not one."""
    if not uri.startswith(DEFAULT_CHAT_PREFIX):
        return None
    decoded = _b64url_decode(uri[len(DEFAULT_CHAT_PREFIX) :])
    if decoded is None:
        return None
    try:
        parse_session_uri(decoded)
    except ValueError:
        return None
    return decoded


def resolve_default_chat(uri: str, sessions_by_id: dict[str, str] | None = None) -> str | None:
    """The canonical default-chat URI ``uri`` names, if it names one.

    Accepts the canonical shape (returned as is) and the legacy
    ``ahp-chat:/<sessionId>``; the legacy one needs ``sessions_by_id`` (id ->
    the session URI the host holds it under) to know how to spell the session.
    """
    if session_of_default_chat(uri) is not None:
        return uri
    if scheme_of(uri) != CHAT_SCHEME or uri.startswith("ahp-chat://"):
        return None
    session_id = uri[len(CHAT_SCHEME) + 1 :].lstrip("/")
    if not session_id or sessions_by_id is None or session_id not in sessions_by_id:
        return None
    return default_chat_uri(sessions_by_id[session_id])


def respell_session(uri: str, alias: str) -> str:
    """Spell ``uri`` from ``alias`` when both name the same session.

    A session answered under an alias spells every URI inside it from that
    alias: the session URI itself and its default chat.
    """
    try:
        held = parse_session_uri(uri)
        wanted = parse_session_uri(alias)
    except ValueError:
        chat_session = session_of_default_chat(uri)
        if chat_session is not None and same_session(chat_session, alias):
            return default_chat_uri(alias)
        return uri
    return alias if held.session_id == wanted.session_id else uri


#: A session's annotations channel is ``<sessionUri>/annotations``.
ANNOTATIONS_SEGMENT = "/annotations"


def annotations_uri(session_uri: str) -> str:
    return session_uri + ANNOTATIONS_SEGMENT


def respell_tree(value: object, held: str, alias: str) -> object:
    """Copy a JSON value replacing every string naming ``held``'s session by ``alias``'s spelling.

    Touches only strings equal to the session URI, its default chat or its
    annotations channel, so text that merely mentions a URI is left alone.
    """
    if held == alias:
        return value
    replacements = {
        held: alias,
        default_chat_uri(held): default_chat_uri(alias),
        annotations_uri(held): annotations_uri(alias),
    }

    def walk(node: object) -> object:
        if isinstance(node, str):
            return replacements.get(node, node)
        if isinstance(node, list):
            return [walk(item) for item in node]
        if isinstance(node, dict):
            return {key: walk(item) for key, item in node.items()}
        return node

    return walk(value)


def path_of_file_uri(uri: str) -> str | None:
    """The local path a ``file:`` URI of this machine names, or None for any other URI.

    Percent-escapes are decoded to bytes, then to a path as the OS spells it
    (undecodable bytes kept, ``os.fsdecode``). Nothing is checked or resolved here.
    """
    parts = urlsplit(uri)
    if parts.scheme.lower() != "file" or parts.netloc.lower() not in ("", "localhost"):
        return None
    if os.name == "nt":  # /C:/x is C:\x there (nturl2path is what urllib.request uses)
        from nturl2path import url2pathname

        return url2pathname(parts.path) or None
    return os.fsdecode(unquote_to_bytes(parts.path)) or None


def file_uri(path: str | bytes) -> str:
    """The ``file:`` URI of a local absolute path (``str`` or raw bytes)."""
    return "file://" + quote_from_bytes(os.fsencode(path), safe="/")


def first_local_path(working_directories: object) -> str | None:
    """The local path of the first ``file:`` URI of this machine in a list of them."""
    for uri in working_directories if isinstance(working_directories, (list, tuple)) else ():
        if isinstance(uri, str):
            path = path_of_file_uri(uri)
            if path is not None:
                return path
    return None
