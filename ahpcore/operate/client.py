"""A small AHP client for the ``ahp`` command: requests and their answers, nothing more.

It speaks to a running host over its WebSocket, or to a host run in this
process over an in-memory pair; either way through the protocol, as any
client would.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio

from ahpcore.protocol.uris import ROOT_CHANNEL

if TYPE_CHECKING:
    from ahpcore.host import Host

#: How long one request may take before the command gives up on the host.
REQUEST_TIMEOUT = 60.0
#: How long opening the connection may take.
CONNECT_TIMEOUT = 10.0
#: The protocol version this client asks for.
PROTOCOL_VERSION = "1.0.0"


class OperateError(Exception):
    """Stops an ``ahp`` command with one line ``ahp: <message>`` and ``code``
    (1: something at run time failed; 2: the command line was wrong)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class HostError(OperateError):
    """The host answered a request with an error."""

    def __init__(self, method: str, code: int, message: str) -> None:
        super().__init__(f"{method} failed: {message} ({code})")
        self.rpc_code = code
        self.rpc_message = message


class Connection:
    """Requests over any pair of ``send(text)`` and ``receive() -> text``; every frame
    that is not the answer waited for (notifications, actions) is passed over."""

    def __init__(
        self, send: Callable[[str], Awaitable[None]], receive: Callable[[], Awaitable[str]]
    ) -> None:
        self._send = send
        self._receive = receive
        self._ids = itertools.count(1)

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        ident = next(self._ids)
        await self._send(
            json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        )
        with anyio.fail_after(REQUEST_TIMEOUT):
            while True:
                frame = json.loads(await self._receive())
                if frame.get("id") != ident or "method" in frame:
                    continue
                if "error" in frame:
                    error = frame["error"]
                    raise HostError(method, int(error.get("code", 0)), str(error.get("message")))
                return frame.get("result")

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        await self._send(json.dumps({"jsonrpc": "2.0", "method": method, "params": params}))

    async def initialize(self) -> None:
        await self.request(
            "initialize",
            {
                "channel": ROOT_CHANNEL,
                "protocolVersions": [PROTOCOL_VERSION],
                "clientId": f"ahp-command-{os.getpid()}",
            },
        )


def _refusal(url: str, status: int, token_source: str | None) -> str:
    if status == 401:
        if token_source is None:
            return (
                f"the host at {url} needs its connection token: pass it with AHP_TOKEN, "
                "--token-file or --token"
            )
        return (
            f"the host at {url} refused the token from {token_source} (it was started with "
            "another); pass its token with AHP_TOKEN, --token-file or --token"
        )
    if status == 403:
        return f"the host at {url} refused the connection (403: a Host name it does not answer to)"
    return f"the host at {url} refused the connection (HTTP {status})"


def _why(exc: BaseException) -> str:
    """The reason alone: asyncio spells a refusal "Connect call failed ('127.0.0.1', 9)"."""
    if isinstance(exc, TimeoutError):
        return "no answer within the time allowed"
    if isinstance(exc, OSError) and exc.errno:
        return os.strerror(exc.errno).lower()
    return str(exc) or type(exc).__name__


@asynccontextmanager
async def connect_websocket(
    url: str, token: str | None, token_source: str | None
) -> AsyncIterator[Connection]:
    """An initialized connection to the host at ``url``; the token goes in a header,
    not in the address, so no log or proxy that records addresses records it."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidHandshake, InvalidStatus, InvalidURI

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        websocket = await connect(
            url, additional_headers=headers, open_timeout=CONNECT_TIMEOUT, max_size=None
        )
    except InvalidStatus as exc:
        raise OperateError(_refusal(url, exc.response.status_code, token_source)) from None
    except InvalidURI:
        raise OperateError(f"--url {url} is not a WebSocket address (ws://host:port/)", 2) from None
    except (OSError, TimeoutError, InvalidHandshake) as exc:
        raise OperateError(f"no AHP host answers at {url} ({_why(exc)})") from None

    async def receive() -> str:
        message = await websocket.recv()
        return message if isinstance(message, str) else message.decode()

    try:
        connection = Connection(websocket.send, receive)
        await connection.initialize()
        yield connection
    finally:
        await websocket.close()


@asynccontextmanager
async def connect_in_process(host: Host) -> AsyncIterator[Connection]:
    """An initialized connection to ``host``, started in this process, over a memory pair."""
    from ahpcore.transports.memory import memory_pair

    client, wire, incoming = memory_pair()

    async def frames() -> str | None:
        try:
            return await incoming.receive()
        except anyio.EndOfStream:
            return None

    async def receive() -> str:
        return json.dumps(await client.recv())

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(host.serve_connection, wire, frames)
        connection = Connection(client.send, receive)
        try:
            await connection.initialize()
            yield connection
        finally:
            await client.aclose()
