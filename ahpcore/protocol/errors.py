"""JSON-RPC and AHP error codes, and the exception that carries one to the wire."""

from __future__ import annotations

from typing import Any

# JSON-RPC 2.0
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

# AHP (names as the protocol's AhpErrorCodes spells them)
SESSION_NOT_FOUND = -32001
PROVIDER_NOT_FOUND = -32002
SESSION_ALREADY_EXISTS = -32003
TURN_IN_PROGRESS = -32004
UNSUPPORTED_PROTOCOL_VERSION = -32005
AUTH_REQUIRED = -32007
NOT_FOUND = -32008
PERMISSION_DENIED = -32009
ALREADY_EXISTS = -32010
CONFLICT = -32011
TCP_CONNECTION_OPEN_FAILED = -32012

ERROR_NAMES: dict[int, str] = {
    PARSE_ERROR: "ParseError",
    INVALID_REQUEST: "InvalidRequest",
    METHOD_NOT_FOUND: "MethodNotFound",
    INVALID_PARAMS: "InvalidParams",
    INTERNAL_ERROR: "InternalError",
    SESSION_NOT_FOUND: "SessionNotFound",
    PROVIDER_NOT_FOUND: "ProviderNotFound",
    SESSION_ALREADY_EXISTS: "SessionAlreadyExists",
    TURN_IN_PROGRESS: "TurnInProgress",
    UNSUPPORTED_PROTOCOL_VERSION: "UnsupportedProtocolVersion",
    AUTH_REQUIRED: "AuthRequired",
    NOT_FOUND: "NotFound",
    PERMISSION_DENIED: "PermissionDenied",
    ALREADY_EXISTS: "AlreadyExists",
    CONFLICT: "Conflict",
    TCP_CONNECTION_OPEN_FAILED: "TcpConnectionOpenFailed",
}


class ProtocolError(Exception):
    """An error answered to the peer as a JSON-RPC error object."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_error(self) -> dict[str, Any]:
        """The JSON-RPC ``error`` member."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error

    def __repr__(self) -> str:
        name = ERROR_NAMES.get(self.code, str(self.code))
        return f"ProtocolError({name}, {self.message!r})"
