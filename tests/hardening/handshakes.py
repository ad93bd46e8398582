"""One WebSocket upgrade request sent exactly as written, from a chosen source address."""

from __future__ import annotations

import base64
import os

import anyio


async def handshake(
    url: str,
    headers: dict[str, str] | None = None,
    *,
    source: str | None = None,
    upgrade: bool = True,
) -> tuple[int, dict[str, str], str]:
    """The status, headers and body of the answer to one GET of ``url``.

    ``source`` binds the client's end (Linux routes all of 127.0.0.0/8 to the
    loopback interface, so any 127.x.y.z works there).
    """
    rest = url.removeprefix("ws://")
    address, _, path = rest.partition("/")
    host, _, port = address.rpartition(":")
    sent = {"Host": address}
    if upgrade:
        sent |= {
            "Upgrade": "websocket",
            "Connection": "Upgrade",
            "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(),
            "Sec-WebSocket-Version": "13",
        }
    sent |= headers or {}
    lines = [f"GET /{path} HTTP/1.1", *(f"{key}: {value}" for key, value in sent.items())]
    async with await anyio.connect_tcp(host, int(port), local_host=source) as stream:
        await stream.send(("\r\n".join(lines) + "\r\n\r\n").encode())
        received = b""
        with anyio.fail_after(30):
            while b"\r\n\r\n" not in received:
                received += await stream.receive()
            head, _, body = received.partition(b"\r\n\r\n")
            answer = {}
            for line in head.decode("latin-1").split("\r\n")[1:]:
                key, _, value = line.partition(":")
                answer[key.strip().lower()] = value.strip()
            length = int(answer.get("content-length", "0"))
            while len(body) < length:
                body += await stream.receive()
    status = int(head.split()[1])
    return status, answer, body.decode("utf-8", "replace")
