"""The Agent Host Protocol, as data: models, versions, error codes, channel URIs.

Importable with pydantic alone (no websockets, no anyio), so a client can use
the models without the host. The generated models are reached as
``ahpcore.protocol.models`` (lenient), ``ahpcore.protocol.strict`` (unknown
keys forbidden) and ``ahpcore.protocol.state`` (TypedDicts); they load on first
use because they are large.
"""

from ahpcore.protocol.errors import ERROR_NAMES, ProtocolError
from ahpcore.protocol.methods import (
    CLIENT_NOTIFICATIONS,
    COMMANDS,
    SERVER_COMMANDS,
    SERVER_NOTIFICATIONS,
)
from ahpcore.protocol.uris import (
    ROOT_CHANNEL,
    default_chat_uri,
    parse_session_uri,
    same_session,
    session_id_of,
)
from ahpcore.protocol.versions import SUPPORTED_VERSIONS, negotiate

__all__ = [
    "CLIENT_NOTIFICATIONS",
    "COMMANDS",
    "ERROR_NAMES",
    "ROOT_CHANNEL",
    "SERVER_COMMANDS",
    "SERVER_NOTIFICATIONS",
    "SUPPORTED_VERSIONS",
    "ProtocolError",
    "default_chat_uri",
    "negotiate",
    "parse_session_uri",
    "same_session",
    "session_id_of",
]
