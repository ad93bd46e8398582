"""The session-host fixture, shared with the session tests."""

from typing import Any

from ahpcore.protocol.uris import session_id_of
from tests.sessions.conftest import session_host

__all__ = ["live_session", "session_host"]


def live_session(host: Any, uri: str) -> Any:
    """The session the host holds live under ``uri``, or None."""
    return host.sessions.sessions.get(session_id_of(uri))
