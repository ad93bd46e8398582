"""Newline-delimited JSON-RPC over a pair of pipes (``ahp serve --stdio``)."""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import IO

log = logging.getLogger(__name__)


class PipeWire:
    label = "stdio"

    def __init__(self, transport: asyncio.WriteTransport, protocol: asyncio.BaseProtocol) -> None:
        self._transport = transport
        self._writer = asyncio.StreamWriter(transport, protocol, None, asyncio.get_running_loop())

    async def send(self, text: str) -> None:
        self._writer.write(text.encode("utf-8") + b"\n")
        await self._writer.drain()

    def buffered_bytes(self) -> int | None:
        return self._transport.get_write_buffer_size()

    async def close(self, code: int = 1000, reason: str = "") -> None:
        if not self._transport.is_closing():
            self._transport.close()


async def open_pipes(
    reader_file: IO[bytes] | None = None,
    writer_file: IO[bytes] | None = None,
    max_frame_bytes: int = 16 << 20,
) -> tuple[PipeWire, asyncio.StreamReader]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=max_frame_bytes)
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), reader_file or sys.stdin.buffer
    )
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, writer_file or sys.stdout.buffer
    )
    return PipeWire(transport, protocol), reader


async def read_line(reader: asyncio.StreamReader) -> bytes | None:
    """The next non-empty line, or None at end of input or past the frame limit."""
    while True:
        try:
            line = await reader.readline()
        except (asyncio.LimitOverrunError, ValueError):
            log.warning("stdio: frame larger than the limit; closing")
            return None
        if not line:
            return None
        line = line.strip()
        if line:
            return line
