"""The WebSocket transport (TCP or a Unix domain socket), on the websockets library.

One JSON-RPC message per text message (a large one is written as fragments,
see ``WebSocketWire.send_in_parts``). A connection token, when the host has
one, is required on the upgrade as ``?token=`` or ``Authorization: Bearer``.
A plain HTTP request on the port is not AHP: it is answered 401 when its token
would be refused and 426 when it would be admitted, so a client can test a
token without opening a socket; ``GET /healthz`` alone is answered without a
token, with the host's version. Before the token, every request passes the
``Gate``: a browser page from a foreign origin, or a request naming a foreign
host on a loopback bind, is refused 403 (see docs/security.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hmac
import ipaddress
import json
import logging
import os
import socket
import ssl
import stat
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote_plus, urlsplit

from websockets.asyncio.server import Server, ServerConnection, broadcast, serve, unix_serve
from websockets.exceptions import ConnectionClosed
from websockets.frames import Frame, Opcode
from websockets.http11 import Request, Response
from websockets.protocol import OPEN

from ahpcore.logs import escape
from ahpcore.rpc.budget import (
    DEFAULT_CONNECTIONS_PER_ADDRESS,
    DEFAULT_FRAMES_PER_SECOND,
    DEFAULT_HOST_BURST_SECONDS,
    DEFAULT_HOST_BYTES_PER_SECOND,
    HOST_FRAMES_PER_CONNECTION_BUDGET,
    InboundShare,
    SharedInbound,
)
from ahpcore.rpc.peer import HostQueues
from ahpcore.transports.refusals import RefusalLog
from ahpcore.version import __version__

log = logging.getLogger(__name__)

#: Characters per fragment of a message sent in parts: about a millisecond of
#: compressing and writing here.
PART_CHARS = 64 * 1024

ServeConnection = Callable[[Any, Callable[[], Awaitable[str | bytes | None]]], Awaitable[None]]


#: Plain frames a wire holds before it writes them without waiting for the end
#: of the event loop's turn: a burst still goes out in few writes, and its first
#: frames are not held back behind the whole burst.
COALESCE_BYTES = 32 * 1024
#: The last frame written is kept for the next write of the same text (an action's echo
#: after its fan-out) when it is no larger than this.
KEEP_LAST_FRAME_BYTES = 64 * 1024


class EndOfTurn:
    """Writes the frames wires hold with one callback at the end of the loop's turn.

    One callback for all of them, not one per wire: a frame to 200 watchers
    would otherwise schedule 200 callbacks. ``turn`` counts the turns it ended,
    so a wire can tell its first frame in a turn from the rest.
    """

    def __init__(self) -> None:
        self.turn = 0
        self._scheduled = False
        self._wires: list[WebSocketWire] = []

    def schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self.flush_all)

    def hold(self, wire: WebSocketWire) -> None:
        self._wires.append(wire)
        self.schedule(wire.connection.loop)

    def flush_all(self) -> None:
        self._scheduled = False
        self.turn += 1
        wires, self._wires = self._wires, []
        for wire in wires:
            wire.flush()


class WebSocketWire:
    """One client connection.

    The first frame in a turn of the event loop goes straight onto the
    connection; any more in the same turn are held in
    ``_held`` and written together at its end (or at ``COALESCE_BYTES``). A
    burst of actions so reaches each client in a few socket writes instead of
    one per frame, which saves the host a system call per frame and client and
    the client a wake-up for each, and a lone frame waits for nothing.
    Everything else written to the connection (answers through ``send``,
    fragments, the close) writes what is held first, so frames keep their
    order (with deflate, the order they were compressed in).
    """

    #: The last text ``write_many`` framed without extensions: (text, its bytes, the frame).
    #: Held by identity, so only that very string finds it again.
    _last_frame: tuple[str | None, bytes, bytes | None] = (None, b"", None)

    def __init__(
        self,
        connection: ServerConnection,
        end_of_turn: EndOfTurn | None = None,
        limits: ConnectionLimits | None = None,
    ) -> None:
        self.connection = connection
        #: Who the handshake's token opened the connection as (a person's token,
        #: ``Gate.people``); None for the deployment token or none asked for.
        self.identity: str | None = None
        address = connection.remote_address
        self.label = f"ws {address[0]}:{address[1]}" if address else "ws unix socket"
        #: Read by the connection's peer: its account with the host-wide inbound budget.
        self.inbound_share: InboundShare | None = (
            limits.inbound.share() if limits is not None and limits.inbound is not None else None
        )
        #: And the host's ledger of queued outbound bytes.
        self.host_queues: HostQueues | None = limits.queues if limits is not None else None
        self._held: list[bytes] = []
        self._held_bytes = 0
        self._end_of_turn = end_of_turn or EndOfTurn()
        #: The last turn this wire wrote a frame in.
        self._turn = -1

    def _hold(self, frame: bytes) -> None:
        end_of_turn = self._end_of_turn
        if self._turn != end_of_turn.turn:
            self._turn = end_of_turn.turn
            end_of_turn.schedule(self.connection.loop)  # so the next turn is told apart
            self._write(frame)
            return
        if not self._held:
            end_of_turn.hold(self)
        self._held.append(frame)
        self._held_bytes += len(frame)
        if self._held_bytes >= COALESCE_BYTES:
            self.flush()

    def flush(self) -> None:
        """Write the frames held for the end of this turn, in one write."""
        if not self._held:
            return
        data = self._held[0] if len(self._held) == 1 else b"".join(self._held)
        self._held.clear()
        self._held_bytes = 0
        self._write(data)

    def _write(self, data: bytes) -> None:
        if self.connection.protocol.state is not OPEN:
            return  # a close frame went out already: nothing may follow it
        try:
            self.connection.transport.write(data)
        except Exception as exc:  # the frames are lost: end the connection, say so
            log.warning("closing %s: writing to it failed: %r", self.label, exc)
            self.connection.transport.abort()

    async def send(self, text: str) -> None:
        self.flush()
        await self.connection.send(text)

    async def send_in_parts(self, text: str) -> None:
        """One message as fragments of ``PART_CHARS``, letting the event loop run between
        them (each is compressed and written on its own)."""
        self.flush()

        async def parts() -> AsyncIterator[str]:
            for start in range(0, len(text), PART_CHARS):
                if start:
                    await asyncio.sleep(0)
                yield text[start : start + PART_CHARS]

        await self.connection.send(parts())

    def write_now(self, text: str) -> None:
        """Put one text frame on the wire without waiting for it to drain.

        The host bounds what a client may fall behind by reading the write
        buffer before each frame, so waiting for every frame to drain (as
        ``send`` does) only costs a task switch per frame and client.
        """
        if self.write_many([self], text):
            raise ConnectionError(f"writing to {self.label} failed")

    @staticmethod
    def write_many(wires: list[WebSocketWire], text: str) -> list[WebSocketWire]:
        """One frame onto every wire, encoded once; returns the wires a write failed on.

        A connection without extensions (no permessage-deflate) takes the same
        bytes as every other such connection: the frame is built once and held
        for each connection's next write (see ``WebSocketWire``); one with
        deflate compresses it with its own context and holds that. One midway
        through a fragmented message goes through ``broadcast``, which refuses it.
        """
        frame: bytes | None
        last = WebSocketWire._last_frame
        if last[0] is text:
            # The same frame again (an action's fan-out, then its echo to a sender that
            # does not watch the channel): encoded and framed once.
            data, frame = last[1], last[2]
        else:
            data, frame = text.encode(), None
        failed: list[WebSocketWire] = []
        for wire in wires:
            connection = wire.connection
            protocol = connection.protocol
            if protocol.debug or not _sending_whole(connection):
                # Framed for this connection alone, so a refusal names it.
                wire.flush()
                try:
                    broadcast([connection], data, text=True, raise_exceptions=True)
                except ExceptionGroup:
                    failed.append(wire)
                continue
            if protocol.extensions:
                # Compressed with this connection's own context now, so its frames
                # must reach the wire in this order: they are held like any other.
                if protocol.state is not OPEN:
                    continue
                try:
                    protocol.send_text(data)
                except Exception:
                    failed.append(wire)
                    continue
                for chunk in protocol.data_to_send():
                    wire._hold(chunk)
                continue
            if frame is None:
                frame = Frame(Opcode.TEXT, data).serialize(mask=False)
            wire._hold(frame)
        if last[0] is not text and len(data) <= KEEP_LAST_FRAME_BYTES:
            WebSocketWire._last_frame = (text, data, frame)
        return failed

    def is_open(self) -> bool:
        return self.connection.protocol.state is OPEN

    def abort(self) -> None:
        """Drop the connection now, with whatever it still had to write."""
        self._held.clear()
        self._held_bytes = 0
        transport = self.connection.transport
        if transport is not None:
            transport.abort()

    def buffered_bytes(self) -> int | None:
        transport = self.connection.transport
        on_socket = transport.get_write_buffer_size() if transport is not None else 0
        return on_socket + self._held_bytes

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.flush()
        await self.connection.close(code, reason)


def _sending_whole(connection: ServerConnection) -> bool:
    """Whether no fragmented message is being sent on ``connection`` (a frame written
    now would land between its fragments). An unknown websockets says no."""
    return getattr(connection, "send_in_progress", True) is None


#: The query names a token is taken from, compared as sent (``tkn`` is how VS Code
#: spells it when it builds an agent host's address).
TOKEN_NAMES = ("token", "tkn")


def _query_token(query: str) -> str | None:
    """The first non-empty ``token=`` (else ``tkn=``) value in a raw query string.

    Names are compared before any percent-decoding: a decoding parser would also
    take ``tok%65n=``, a spelling the log's redaction and any proxy's may miss.
    """
    found: dict[str, str] = {}
    for part in query.split("&"):
        name, eq, value = part.partition("=")
        if eq and value and name in TOKEN_NAMES:
            found.setdefault(name, unquote_plus(value))
    for name in TOKEN_NAMES:
        if name in found:
            return found[name]
    return None


def token_of(request: Request) -> str | None:
    """The connection token a request carries: ``?token=``, ``?tkn=`` or ``Authorization: Bearer``."""
    offered = _query_token(urlsplit(request.path).query)
    if offered is not None:
        return offered
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


def is_loopback_name(name: str) -> bool:
    """``localhost`` (and its subdomains, which resolve to loopback) or a loopback address."""
    name = name.strip("[]").lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _host_name(header: str) -> str:
    """The name in a ``Host`` header, without its port (``[::1]:80`` -> ``::1``)."""
    header = header.strip()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def normalize_origin(origin: str) -> str:
    """``scheme://host[:port]`` in lower case, as browsers send ``Origin``."""
    return origin.strip().rstrip("/").lower()


@dataclass
class Gate:
    """Who may open a connection: the token, the page it comes from, the name it used.

    * ``Origin`` absent: not a browser page, admitted.
    * ``Origin`` on a loopback name, equal to the host's own (the ``Host`` it was
      asked under), or listed in ``allow_origins`` (``*`` for any): admitted.
      Anything else is a page elsewhere on the web driving the user's browser,
      and is refused 403 without CORS headers, so it cannot read the answer.
    * On a loopback bind, ``Host`` must be a loopback name too: a page whose own
      name resolves to 127.0.0.1 (DNS rebinding) asks under that name.
    """

    #: The token, or what gives it at each handshake (a stored token read again
    #: when its file changes); None: no token asked for.
    token: str | Callable[[], str] | None
    allow_origins: frozenset[str] = frozenset()
    loopback_host_only: bool = False
    throttle: FailureThrottle | None = None
    refusals: RefusalLog = field(default_factory=RefusalLog)
    #: Whose connection a token other than the deployment one opens (a users port),
    #: or None; asked only when the deployment token does not match.
    people: Callable[[str], Awaitable[str | None]] | None = None
    #: Connections admitted with a person's token, until their handler takes the name.
    identities: weakref.WeakKeyDictionary[Any, str] = field(
        default_factory=weakref.WeakKeyDictionary
    )

    async def admit(self, connection: Any, offered: str | None) -> bool:
        """Whether ``offered`` opens a connection: the deployment token, or a person's."""
        if token_accepted(self.expected_token(), offered):
            return True
        if self.people is None or not offered:
            return False
        identity = await self.people(offered)
        if identity is None:
            return False
        self.identities[connection] = identity
        return True

    def expected_token(self) -> str | None:
        return self.token() if callable(self.token) else self.token

    def origin_allowed(self, request: Request) -> bool:
        origin = request.headers.get("Origin")
        if origin is None:
            return True
        wanted = normalize_origin(origin)
        if "*" in self.allow_origins or wanted in self.allow_origins:
            return True
        parts = urlsplit(wanted)
        if parts.hostname is None:  # "null" (a file or sandboxed page) and other opaque origins
            return False
        if is_loopback_name(parts.hostname):
            return True
        host = request.headers.get("Host")
        return host is not None and parts.netloc == host.strip().lower()

    def host_allowed(self, request: Request) -> bool:
        if not self.loopback_host_only:
            return True
        host = request.headers.get("Host")
        return host is None or is_loopback_name(_host_name(host))


#: The one key every loopback address shares (see ``address_key``).
LOOPBACK = "loopback"


def address_key(address: str) -> str:
    """Who a peer address is, for limits kept per address.

    All of loopback (127.0.0.0/8, ``::1``, ``::ffff:127.x.y.z``) is one: any local
    process may bind any of its 16 million source addresses. An IPv6 address is
    its /64, the block one subscriber is usually given whole.
    """
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return address  # "unix", or a name
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return LOOPBACK
    if isinstance(ip, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


#: The record of wrong tokens from every address together.
_EVERYONE = "*"


class FailureThrottle:
    """Slows peers that keep offering wrong tokens, per address and host-wide.

    From one address (``address_key``) the first ``free`` mistakes are free (a
    client with a stale token retries); after them each refusal to that address
    waits twice as long as the last, one at a time, up to ``cap`` seconds. The
    same holds for all addresses together past ``host_free`` mistakes, so
    guesses spread over many addresses are slowed as well. A right token clears
    its address's record, never the host-wide one.
    """

    def __init__(
        self,
        free: int = 5,
        base: float = 0.25,
        cap: float = 5.0,
        forget_after: float = 600.0,
        host_free: int = 50,
    ) -> None:
        self.free, self.base, self.cap, self.forget_after = free, base, cap, forget_after
        self.host_free = host_free
        self._failures: dict[str, tuple[int, float]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def _count(self, key: str) -> int:
        count, last = self._failures.get(key, (0, 0.0))
        return 0 if time.monotonic() - last > self.forget_after else count

    def _delay(self, count: int, free: int) -> float:
        if count < free:
            return 0.0
        return min(self.cap, self.base * 2 ** min(count - free, 64))

    def delay_for(self, peer: str) -> float:
        """How long the next wrong token from ``peer`` will wait."""
        own = self._delay(self._count(address_key(peer)), self.free)
        return max(own, self._delay(self._count(_EVERYONE), self.host_free))

    async def failed(self, peer: str) -> None:
        key = address_key(peer)
        own = self._delay(self._count(key), self.free)
        everyone = self._delay(self._count(_EVERYONE), self.host_free)
        now = time.monotonic()
        self._failures[key] = (self._count(key) + 1, now)
        self._failures[_EVERYONE] = (self._count(_EVERYONE) + 1, now)
        if len(self._failures) > _MAX_TRACKED_PEERS:  # forget the stalest half
            stalest = sorted(self._failures, key=lambda p: self._failures[p][1])
            for stale in [p for p in stalest if p != _EVERYONE][: _MAX_TRACKED_PEERS // 2]:
                self._failures.pop(stale, None)
                self._locks.pop(stale, None)
        if own <= 0 and everyone <= 0:
            return
        # One refusal at a time per address (and host-wide once that is slowed):
        # parallel guesses queue behind each other.
        async with contextlib.AsyncExitStack() as held:
            for lock_key, delay in ((key, own), (_EVERYONE, everyone)):
                if delay > 0:
                    await held.enter_async_context(self._locks.setdefault(lock_key, asyncio.Lock()))
            await asyncio.sleep(max(own, everyone))

    def succeeded(self, peer: str) -> None:
        key = address_key(peer)
        self._failures.pop(key, None)


_MAX_TRACKED_PEERS = 4096


def shared_inbound(
    per_connection: float | None = DEFAULT_FRAMES_PER_SECOND,
) -> SharedInbound | None:
    """The host-wide inbound budget that goes with a per-connection one of
    ``per_connection`` frames/s (None: lifted, and so is the host's)."""
    if per_connection is None:
        return None
    return SharedInbound(
        per_connection * HOST_FRAMES_PER_CONNECTION_BUDGET,
        DEFAULT_HOST_BYTES_PER_SECOND,
        DEFAULT_HOST_BURST_SECONDS,
    )


def _default_inbound() -> SharedInbound | None:
    return shared_inbound()


@dataclass
class ConnectionLimits:
    """What a server bounds across all its connections; servers that share one (the TCP
    listener and the Unix socket of one host) bound them together."""

    #: The host-wide inbound budget, shared fairly (None: none).
    inbound: SharedInbound | None = field(default_factory=_default_inbound)
    #: The ceiling on what all clients have yet to take (None: none).
    queues: HostQueues | None = field(default_factory=HostQueues)
    #: Connections one address (``address_key``) may hold open at once; 0: any number.
    per_address: int = DEFAULT_CONNECTIONS_PER_ADDRESS
    _open: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    _watches: set[asyncio.Future[None]] = field(default_factory=set, init=False, repr=False)
    _refusals_logged: dict[str, float] = field(default_factory=dict, init=False, repr=False)

    def open_from(self, address: str) -> int:
        """Connections open from ``address`` (any spelling of it) now."""
        return self._open.get(address_key(address), 0)

    def admit(self, connection: ServerConnection) -> bool:
        """Count an upgraded connection against its address; False when it has no room.

        The count drops when the connection ends, however it ends.
        """
        key = address_key(_peer_of(connection))
        held = self._open.get(key, 0)
        if self.per_address and held >= self.per_address:
            now = time.monotonic()
            if now - self._refusals_logged.get(key, -60.0) >= 60.0:  # once a minute per address
                self._refusals_logged[key] = now
                log.warning(
                    "refused a connection from %s: it has %d open, the most one address may "
                    "(--max-connections-per-address)",
                    key,
                    held,
                )
            return False
        self._open[key] = held + 1
        ended = asyncio.ensure_future(connection.wait_closed())
        self._watches.add(ended)
        ended.add_done_callback(lambda done: self._release(key, done))
        return True

    def _release(self, key: str, done: asyncio.Future[None]) -> None:
        self._watches.discard(done)
        left = self._open.get(key, 0) - 1
        if left > 0:
            self._open[key] = left
        else:
            self._open.pop(key, None)
            self._refusals_logged.pop(key, None)


def _plain_response(
    connection: ServerConnection,
    status: HTTPStatus,
    text: str,
    extra: dict[str, str] | None = None,
    *,
    cors: bool = True,
) -> Response:
    response = connection.respond(status, text)
    if cors:
        # Only ever sent to a request whose origin the gate admitted.
        response.headers["Access-Control-Allow-Origin"] = "*"
    for key, value in (extra or {}).items():
        response.headers[key] = value
    return response


#: The path a plain GET is answered on without a token, for service managers and monitors.
HEALTH_PATH = "/healthz"
#: Where ``--inspector`` serves its page (``ahpcore.inspector``), on the same port.
INSPECT_PATH = "/inspect"


def _health_response(connection: ServerConnection) -> Response:
    """200 with the version and nothing else: whoever can reach the port learns no more
    than that an ahp host of this version listens there. No CORS header, so no page
    elsewhere on the web reads it either."""
    response = connection.respond(
        HTTPStatus.OK, json.dumps({"status": "ok", "version": __version__}, separators=(",", ":"))
    )
    del response.headers["Content-Type"]  # text/plain, set by respond
    response.headers["Content-Type"] = "application/json"
    response.headers["Cache-Control"] = "no-store"
    return response


def _peer_of(connection: ServerConnection) -> str:
    address = connection.remote_address
    return str(address[0]) if address else "unix"


def _inspector_page(connection: ServerConnection) -> Response:
    """The inspector page (``ahpcore.inspector``), for a request that passed every check."""
    from ahpcore.inspector.page import page

    document, headers = page()
    response = connection.respond(HTTPStatus.OK, document)
    del response.headers["Content-Type"]  # text/plain, set by respond
    for key, value in headers.items():
        response.headers[key] = value
    return response


def _gatekeeper(
    gate: Gate, inspector: bool = False
) -> Callable[[ServerConnection, Request], Awaitable[Response | None]]:
    async def process_request(connection: ServerConnection, request: Request) -> Response | None:
        if not gate.host_allowed(request):
            log.warning(
                "refused a connection from %s asking for Host %s (not a loopback name)",
                _peer_of(connection),
                escape(request.headers.get("Host", "")),
            )
            return _plain_response(
                connection,
                HTTPStatus.FORBIDDEN,
                "This AHP host listens on loopback and answers only to a loopback Host name.\n",
                cors=False,
            )
        if not gate.origin_allowed(request):
            log.warning(
                "refused a connection from %s for page %s (origin not allowed; see --allow-origin)",
                _peer_of(connection),
                escape(request.headers.get("Origin", "")),
            )
            return _plain_response(
                connection,
                HTTPStatus.FORBIDDEN,
                "This AHP host does not accept connections from this web page's origin.\n",
                cors=False,
            )
        upgrade = "websocket" in request.headers.get("Upgrade", "").lower()
        # After the origin and Host checks: a rebound name or a foreign page gets 403 here too.
        if not upgrade and urlsplit(request.path).path == HEALTH_PATH:
            return _health_response(connection)
        offered = token_of(request)
        if not await gate.admit(connection, offered):
            peer = _peer_of(connection)
            gate.refusals.refused(
                peer, "no token" if offered is None else "wrong token", address_key(peer)
            )
            if gate.throttle is not None:
                await gate.throttle.failed(peer)
            return _plain_response(
                connection,
                HTTPStatus.UNAUTHORIZED,
                "This AHP host needs its connection token: pass ?token=<token> "
                "or 'Authorization: Bearer <token>'.\n",
                {"WWW-Authenticate": "Bearer"},
            )
        if gate.throttle is not None and gate.token is not None:
            gate.throttle.succeeded(_peer_of(connection))
        if inspector and not upgrade and urlsplit(request.path).path == INSPECT_PATH:
            # Past the Host, origin and token checks, like an upgrade.
            return _inspector_page(connection)
        if not upgrade:
            return _plain_response(
                connection,
                HTTPStatus.UPGRADE_REQUIRED,
                "This is an Agent Host Protocol endpoint: connect with a WebSocket.\n",
                {"Upgrade": "websocket", "Connection": "Upgrade"},
            )
        return None

    return process_request


def _counter(
    limits: ConnectionLimits,
) -> Callable[[ServerConnection, Request, Response], Response | None]:
    """Counts each upgrade against its address; past the limit, answers 429 instead."""

    def process_response(
        connection: ServerConnection, request: Request, response: Response
    ) -> Response | None:
        # Only an upgrade about to happen is counted, after the token and origin checks:
        # a client without the token cannot fill an address's slots.
        if response.status_code != HTTPStatus.SWITCHING_PROTOCOLS or limits.admit(connection):
            return None
        return _plain_response(
            connection,
            HTTPStatus.TOO_MANY_REQUESTS,
            f"This AHP host already has {limits.per_address} connections from your address "
            "(--max-connections-per-address); close one first.\n",
        )

    return process_response


def _handler(
    serve_connection: ServeConnection, limits: ConnectionLimits, gate: Gate | None = None
) -> Callable[[ServerConnection], Awaitable[None]]:
    end_of_turn = EndOfTurn()  # shared by the server's connections

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

        wire = WebSocketWire(connection, end_of_turn, limits)
        if gate is not None:
            wire.identity = gate.identities.pop(connection, None)
        await serve_connection(wire, frames)

    return handle


async def start_websocket_server(
    serve_connection: ServeConnection,
    *,
    host: str,
    port: int,
    token: str | Callable[[], str] | None,
    max_frame_bytes: int,
    compression: bool,
    allow_origins: Iterable[str] = (),
    throttle: FailureThrottle | None = None,
    limits: ConnectionLimits | None = None,
    inspector: bool = False,
    people: Callable[[str], Awaitable[str | None]] | None = None,
    tls: ssl.SSLContext | None = None,
) -> Server:
    """Listen on TCP; the returned server is closed by the caller.

    ``tls``: serve wss:// with this context (the handshake checks run inside it).

    ``allow_origins`` lists the web origins (``https://app.example``, or ``*``)
    admitted besides loopback ones and the host's own; see ``Gate``. ``limits``
    are shared with any other server given the same (defaults when None).
    ``inspector``: also answer a plain GET of ``/inspect`` with the inspector
    page, behind the same checks as an upgrade.
    ``people``: whose connection a token other than ``token`` opens (a users
    port's people), or None when it opens none.
    """
    limits = limits or ConnectionLimits()
    gate = Gate(
        token,
        frozenset(normalize_origin(origin) for origin in allow_origins),
        loopback_host_only=is_loopback_name(host),
        throttle=throttle or FailureThrottle(),
        people=people,
    )
    return await serve(
        _handler(serve_connection, limits, gate),
        host,
        port,
        process_request=_gatekeeper(gate, inspector),
        process_response=_counter(limits),
        max_size=max_frame_bytes,
        compression="deflate" if compression else None,
        server_header=None,  # the Python and websockets versions are nobody's business
        ssl=tls,
    )


def _socket_answers(path: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(2)
    try:
        probe.connect(path)
    except OSError:
        return False
    finally:
        probe.close()
    return True


async def start_unix_server(
    serve_connection: ServeConnection,
    *,
    path: str,
    max_frame_bytes: int,
    compression: bool,
    allow_origins: Iterable[str] = (),
    limits: ConnectionLimits | None = None,
) -> Server:
    """Listen on a Unix domain socket only its owner may open (no token: the file mode is the gate)."""
    limits = limits or ConnectionLimits()
    if os.path.lexists(path):
        # A stale socket from an earlier run is replaced; a live one, or anything that
        # is not a socket, is not ours to delete.
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise FileExistsError(errno.EEXIST, "exists and is not a socket", path)
        if _socket_answers(path):
            raise FileExistsError(errno.EADDRINUSE, "another running host listens on it", path)
        os.unlink(path)
    old_umask = os.umask(0o177)
    try:
        return await unix_serve(
            _handler(serve_connection, limits),
            path,
            process_request=_gatekeeper(
                Gate(None, frozenset(normalize_origin(o) for o in allow_origins))
            ),
            process_response=_counter(limits),
            max_size=max_frame_bytes,
            compression="deflate" if compression else None,
            server_header=None,
        )
    finally:
        os.umask(old_umask)
