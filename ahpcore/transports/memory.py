"""An in-process client/server pair, for tests and embedders.

Frames cross as strings with nothing in between; the wire cannot tell what
it holds, so a client on it is never closed for being behind.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream


class MemoryWire:
    label = "in-process"

    def __init__(self, outgoing: MemoryObjectSendStream[str]) -> None:
        self._outgoing = outgoing

    async def send(self, text: str) -> None:
        await self._outgoing.send(text)

    def buffered_bytes(self) -> int | None:
        return None

    async def close(self, code: int = 1000, reason: str = "") -> None:
        await self._outgoing.aclose()


class MemoryClient:
    """The client end: send and receive frames as text or JSON."""

    def __init__(
        self, to_host: MemoryObjectSendStream[str], from_host: MemoryObjectReceiveStream[str]
    ) -> None:
        self._to_host = to_host
        self._from_host = from_host

    async def send(self, message: Any) -> None:
        await self._to_host.send(message if isinstance(message, str) else json.dumps(message))

    async def recv(self) -> dict[str, Any]:
        return dict(json.loads(await self._from_host.receive()))

    async def aclose(self) -> None:
        await self._to_host.aclose()


def memory_pair() -> tuple[MemoryClient, MemoryWire, MemoryObjectReceiveStream[str]]:
    """(client end, the host's wire, the stream the host reads frames from)."""
    to_host_send, to_host_recv = anyio.create_memory_object_stream[str](max_buffer_size=1 << 16)
    from_host_send, from_host_recv = anyio.create_memory_object_stream[str](max_buffer_size=1 << 16)
    return MemoryClient(to_host_send, from_host_recv), MemoryWire(from_host_send), to_host_recv
