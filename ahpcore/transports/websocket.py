"""The WebSocket transport (TCP or a Unix domain socket), on the websockets library.

One JSON-RPC message per text frame. A connection token, when the host has
one, is required on the upgrade as ``?token=`` or ``Authorization: Bearer``.
A plain HTTP request on the port is not AHP: it is answered 401 when its token
would be refused and 426 when it would be admitted, so a client can test a
token without opening a socket.
"""

from __future__ import annotations

import hmac
import logging
import os
import stat
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import Server, ServerConnection, broadcast, serve, unix_serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

log = logging.getLogger(__name__)

ServeConnection = Callable[[Any, Callable[[], Awaitable[str | bytes | None]]], Awaitable[None]]


class WebSocketWire:
    def __init__(self, connection: ServerConnection) -> None:
        self.connection = connection
        address = connection.remote_address
        self.label = f"ws {address[0]}:{address[1]}" if address else "ws unix socket"

    async def send(self, text: str) -> None:
        await self.connection.send(text)

    def write_now(self, text: str) -> None:
        """Put one text frame on the wire without waiting for it to drain.

        The host bounds what a client may fall behind by reading the write
        buffer before each frame, so waiting for every frame to drain (as
        ``send`` does) only costs a task switch per frame and client.
        """
        broadcast([self.connection], text, raise_exceptions=True)

    def buffered_bytes(self) -> int | None:
        transport = self.connection.transport
        return transport.get_write_buffer_size() if transport is not None else 0

    async def close(self, code: int = 1000, reason: str = "") -> None:
        await self.connection.close(code, reason)


def token_of(request: Request) -> str | None:
    """The connection token a request carries, from ``?token=`` or ``Authorization: Bearer``."""
    query = parse_qs(urlsplit(request.path).query)
    if query.get("token"):
        return query["token"][0]
    authorization = request.headers.get("Authorization", "")
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return None


def token_accepted(expected: str | None, offered: str | None) -> bool:
    if expected is None:
        return True
    if offered is None:
        return False
    return hmac.compare_digest(expected.encode("utf-8"), offered.encode("utf-8"))


def _plain_response(
    connection: ServerConnection, status: HTTPStatus, text: str, extra: dict[str, str] | None = None
) -> Response:
    response = connection.respond(status, text)
    response.headers["Access-Control-Allow-Origin"] = "*"
    for key, value in (extra or {}).items():
        response.headers[key] = value
    return response


def _gatekeeper(token: str | None) -> Callable[[ServerConnection, Request], Response | None]:
    def process_request(connection: ServerConnection, request: Request) -> Response | None:
        if not token_accepted(token, token_of(request)):
            return _plain_response(
                connection,
                HTTPStatus.UNAUTHORIZED,
                "This AHP host needs its connection token: pass ?token=<token> "
                "or 'Authorization: Bearer <token>'.\n",
                {"WWW-Authenticate": "Bearer"},
            )
        if "websocket" not in request.headers.get("Upgrade", "").lower():
            return _plain_response(
                connection,
                HTTPStatus.UPGRADE_REQUIRED,
                "This is an Agent Host Protocol endpoint: connect with a WebSocket.\n",
                {"Upgrade": "websocket", "Connection": "Upgrade"},
            )
        return None

    return process_request


def _handler(serve_connection: ServeConnection) -> Callable[[ServerConnection], Awaitable[None]]:
    async def handle(connection: ServerConnection) -> None:
        async def frames() -> str | bytes | None:
            try:
                return await connection.recv()
            except ConnectionClosed as closed:
                codes = {frame.code for frame in (closed.sent, closed.rcvd) if frame is not None}
                if 1009 in codes:
                    log.warning(
                        "closed %s: frame larger than the limit (max_frame_bytes)",
                        connection.remote_address,
                    )
                return None

        await serve_connection(WebSocketWire(connection), frames)

    return handle


async def start_websocket_server(
    serve_connection: ServeConnection,
    *,
    host: str,
    port: int,
    token: str | None,
    max_frame_bytes: int,
    compression: bool,
) -> Server:
    """Listen on TCP; the returned server is closed by the caller."""
    return await serve(
        _handler(serve_connection),
        host,
        port,
        process_request=_gatekeeper(token),
        max_size=max_frame_bytes,
        compression="deflate" if compression else None,
    )


async def start_unix_server(
    serve_connection: ServeConnection,
    *,
    path: str,
    max_frame_bytes: int,
    compression: bool,
) -> Server:
    """Listen on a Unix domain socket only its owner may open (no token: the file mode is the gate)."""
    if os.path.lexists(path):
        # A stale socket from an earlier run is replaced; anything else is not ours to delete.
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise FileExistsError(f"{path} exists and is not a socket; not replacing it")
        os.unlink(path)
    old_umask = os.umask(0o177)
    try:
        return await unix_serve(
            _handler(serve_connection),
            path,
            process_request=_gatekeeper(None),
            max_size=max_frame_bytes,
            compression="deflate" if compression else None,
        )
    finally:
        os.umask(old_umask)
