"""The chat's connection to a host: requests answered by id, everything else a stream.

``ahpcore.operate.client.Connection`` waits for one answer and passes over what
else comes; a chat needs the rest too (actions, notifications), as they come,
while requests are in flight.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ahpcore.operate.client import (
    CONNECT_TIMEOUT,
    PROTOCOL_VERSION,
    REQUEST_TIMEOUT,
    HostError,
    OperateError,
    _refusal,
    _why,
)
from ahpcore.protocol.uris import ROOT_CHANNEL


class Closed(OperateError):
    """The connection to the host ended."""


class Link:
    """One WebSocket to a host: ``request``, ``dispatch``, and ``events`` for the rest."""

    def __init__(self, websocket: Any, client_id: str) -> None:
        self._ws = websocket
        self.client_id = client_id
        self._ids = itertools.count(1)
        self._seqs = itertools.count(1)
        self._answers: dict[int, tuple[anyio.Event, list[dict[str, Any]]]] = {}
        send: MemoryObjectSendStream[dict[str, Any]]
        receive: MemoryObjectReceiveStream[dict[str, Any]]
        # Unbounded: the reader must never wait on the screen, or requests would stall.
        send, receive = anyio.create_memory_object_stream(math.inf)
        self._events_in = send
        self.events = receive
        #: Why the connection ended, once it has.
        self.closed: str | None = None

    async def pump(self) -> None:
        """Read frames until the connection ends; answers go to their requests."""
        from websockets.exceptions import ConnectionClosed

        try:
            async for message in self._ws:
                frame = json.loads(message)
                if not isinstance(frame, dict):
                    continue
                if "method" not in frame and frame.get("id") in self._answers:
                    event, slot = self._answers.pop(frame["id"])
                    slot.append(frame)
                    event.set()
                elif "method" in frame:
                    self._events_in.send_nowait(frame)
            self.closed = "the host closed the connection"
        except ConnectionClosed as exc:
            said = exc.rcvd
            why = f" ({said.reason or said.code})" if said is not None else ""
            self.closed = f"the host closed the connection{why}"
        finally:
            self.closed = self.closed or "the connection ended"
            for event, _ in self._answers.values():
                event.set()
            self._events_in.close()

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        if self.closed:
            raise Closed(self.closed)
        ident = next(self._ids)
        event, slot = anyio.Event(), list[dict[str, Any]]()
        self._answers[ident] = (event, slot)
        await self._send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        with anyio.fail_after(REQUEST_TIMEOUT):
            await event.wait()
        if not slot:
            raise Closed(self.closed or "the connection ended")
        frame = slot[0]
        if "error" in frame:
            error = frame["error"]
            raise HostError(method, int(error.get("code", 0)), str(error.get("message")))
        return frame.get("result")

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        await self._send({"jsonrpc": "2.0", "method": method, "params": params})

    async def dispatch(self, channel: str, action: dict[str, Any]) -> int:
        """Send ``action`` on ``channel``; its ``clientSeq`` (the host's echo carries it)."""
        seq = next(self._seqs)
        await self.notify(
            "dispatchAction", {"channel": channel, "clientSeq": seq, "action": action}
        )
        return seq

    async def _send(self, frame: dict[str, Any]) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            await self._ws.send(json.dumps(frame))
        except ConnectionClosed:
            raise Closed(self.closed or "the connection was lost") from None

    async def initialize(self) -> dict[str, Any]:
        result = await self.request(
            "initialize",
            {
                "channel": ROOT_CHANNEL,
                "protocolVersions": [PROTOCOL_VERSION],
                "clientId": self.client_id,
                "initialSubscriptions": [ROOT_CHANNEL],
            },
        )
        return dict(result or {})


@asynccontextmanager
async def open_link(
    url: str, token: str | None, token_source: str | None, client_id: str
) -> AsyncIterator[tuple[Link, dict[str, Any]]]:
    """A link to the host at ``url``, initialized, its reader running; and initialize's
    answer. The token goes in a header, never in the address."""
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
    link = Link(websocket, client_id)
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(link.pump)
            try:
                yield link, await link.initialize()
            finally:
                tasks.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(2):
            await websocket.close()
