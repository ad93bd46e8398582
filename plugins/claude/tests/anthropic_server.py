"""A scripted Anthropic Messages API on 127.0.0.1, for driving the real Claude Code CLI offline.

Each main request (a streamed ``POST /v1/messages`` that offers tools) takes the
next reply from the test's script and streams it as server-sent events; side
requests (token counting, title generation, anything else) get a short, sensible
answer. Every request is recorded so a test can check what the CLI sent.

The server runs in a thread of its own so it keeps answering whatever event loop
(or none) the test runs in.
"""

from __future__ import annotations

import itertools
import json
import select
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "claude-sonnet-4-5"


@dataclass
class Text:
    text: str
    #: Stop after the first half of the text (the block left open) until this is released.
    hold: Hold | None = None


@dataclass
class Thinking:
    text: str


@dataclass
class ToolUse:
    name: str
    input: Mapping[str, Any]
    id: str | None = None


@dataclass
class Hold:
    """Stop streaming here until ``release`` is set (or the client goes away)."""

    release: threading.Event = field(default_factory=threading.Event)
    reached: threading.Event = field(default_factory=threading.Event)
    #: Set when the client closed the connection while held.
    closed: threading.Event = field(default_factory=threading.Event)

    def wait(self, connection: socket.socket, seconds: float = 30) -> bool:
        """Hold until released (True), or until the client hangs up or time is out (False)."""
        self.reached.set()
        deadline = time.monotonic() + seconds
        while not self.release.wait(0.05):
            if _hung_up(connection):
                self.closed.set()
                return False
            if time.monotonic() > deadline:
                return True
        return True


def _hung_up(connection: socket.socket) -> bool:
    """Whether the peer closed the connection (it sends nothing more while it waits)."""
    try:
        readable, _, _ = select.select([connection], [], [], 0)
        return bool(readable) and connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


Block = Text | Thinking | ToolUse | Hold


@dataclass
class Reply:
    blocks: list[Block]
    input_tokens: int = 12
    output_tokens: int = 7
    cache_read: int = 0
    cache_write: int = 0
    #: Served only to a request whose user words hold this (a subagent running beside
    #: its parent asks in no fixed order); replies without one are served in order.
    match: str | None = None

    @property
    def stop_reason(self) -> str:
        return "tool_use" if any(isinstance(b, ToolUse) for b in self.blocks) else "end_turn"


def reply(*blocks: Block | str, match: str | None = None, **usage: int) -> Reply:
    return Reply([Text(b) if isinstance(b, str) else b for b in blocks], match=match, **usage)


@dataclass
class Recorded:
    path: str
    body: dict[str, Any]
    main: bool

    def tail_text(self) -> str:
        """The user's words in this request: the user content after the last assistant turn."""
        messages = self.body.get("messages", [])
        texts: list[str] = []
        for message in reversed(messages):
            if message.get("role") == "assistant":
                break
            content = message.get("content")
            if isinstance(content, str):
                texts.append(content)
            else:
                texts.extend(
                    str(part.get("text", ""))
                    for part in content or ()
                    if part.get("type") == "text"
                )
        return "\n".join(reversed(texts))

    def tool_results(self) -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = []
        for message in reversed(self.body.get("messages", [])):
            if message.get("role") == "assistant":
                break
            content = message.get("content")
            if isinstance(content, list):
                results.extend(p for p in content if p.get("type") == "tool_result")
        return results


class AnthropicServer:
    """The scripted API; ``replies`` are served to main requests in order."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.requests: list[Recorded] = []
        self.default = reply("(no more script)")
        #: Answer main requests as an API that does not know the key.
        self.unauthorized = False
        self._holds: list[Hold] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> AnthropicServer:
        self._thread.start()
        return self

    def close(self) -> None:
        for hold in self._holds:
            hold.release.set()
        self._server.shutdown()
        self._server.server_close()

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self.replies.extend(replies)
            for block in (b for r in replies for b in r.blocks):
                if isinstance(block, Hold):
                    self._holds.append(block)
                elif isinstance(block, Text) and block.hold is not None:
                    self._holds.append(block.hold)

    def main_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.main]

    def _next(self, request: Recorded) -> Reply:
        with self._lock:
            said = request.tail_text()
            for wanted in (True, False):
                for index, item in enumerate(self.replies):
                    if (
                        (item.match is not None and item.match in said)
                        if wanted
                        else not item.match
                    ):
                        return self.replies.pop(index)
            return self.default

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._json(200, {"data": [], "has_more": False})

            def do_HEAD(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b"{}"
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                path = self.path.split("?", 1)[0]
                main = (
                    path == "/v1/messages" and bool(body.get("stream")) and bool(body.get("tools"))
                )
                recorded = Recorded(self.path, body, main)
                server.requests.append(recorded)
                if path.endswith("/count_tokens"):
                    self._json(200, {"input_tokens": 42})
                elif path != "/v1/messages":
                    self._json(200, {})
                elif main and server.unauthorized:
                    error = {"type": "authentication_error", "message": "invalid x-api-key"}
                    self._json(401, {"type": "error", "error": error})
                elif main:
                    self._stream(server._next(recorded), body)
                else:
                    # Title generation and other side queries: a short, fixed answer.
                    side = reply('{"title": "Scripted title"}', input_tokens=3, output_tokens=3)
                    if body.get("stream"):
                        self._stream(side, body)
                    else:
                        self._json(200, server._message(side, body))

            def _json(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, item: Reply, body: Mapping[str, Any]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                try:
                    for event, data in server._events(item, body):
                        if event == "hold":
                            hold: Hold = data
                            if not hold.wait(self.connection):
                                return
                            continue
                        self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass

        return Handler

    def _usage(self, item: Reply) -> dict[str, int]:
        return {
            "input_tokens": item.input_tokens,
            "output_tokens": item.output_tokens,
            "cache_read_input_tokens": item.cache_read,
            "cache_creation_input_tokens": item.cache_write,
        }

    def _message(self, item: Reply, body: Mapping[str, Any]) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        for block in item.blocks:
            if isinstance(block, Text):
                content.append({"type": "text", "text": block.text})
        return {
            "id": f"msg_{next(self._ids)}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", MODEL),
            "content": content,
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": self._usage(item),
        }

    def _events(self, item: Reply, body: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
        start = self._message(reply(), body)
        start["usage"] = {**self._usage(item), "output_tokens": 1}
        yield "message_start", {"type": "message_start", "message": start}
        index = 0
        for block in item.blocks:
            if isinstance(block, Hold):
                yield "hold", block
                continue
            if isinstance(block, Text):
                yield from self._block(
                    index,
                    {"type": "text", "text": ""},
                    "text_delta",
                    "text",
                    block.text,
                    hold=block.hold,
                )
            elif isinstance(block, Thinking):
                yield from self._block(
                    index,
                    {"type": "thinking", "thinking": "", "signature": ""},
                    "thinking_delta",
                    "thinking",
                    block.text,
                    signature=True,
                )
            else:
                call_id = block.id or f"toolu_{next(self._ids):04d}"
                head = {"type": "tool_use", "id": call_id, "name": block.name, "input": {}}
                text = json.dumps(block.input)
                yield from self._block(index, head, "input_json_delta", "partial_json", text)
            index += 1
        yield (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": item.stop_reason, "stop_sequence": None},
                "usage": self._usage(item),
            },
        )
        yield "message_stop", {"type": "message_stop"}

    @staticmethod
    def _block(
        index: int,
        head: dict[str, Any],
        kind: str,
        key: str,
        text: str,
        *,
        signature: bool = False,
        hold: Hold | None = None,
    ) -> Iterator[tuple[str, Any]]:
        yield (
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": head},
        )
        # Two deltas, so a client sees the text arrive in pieces.
        middle = len(text) // 2
        for number, piece in enumerate((text[:middle], text[middle:])):
            if number == 1 and hold is not None:
                yield "hold", hold
            if piece:
                delta = {"type": kind, key: piece}
                yield (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
        if signature:
            delta = {"type": "signature_delta", "signature": "c2lnbmF0dXJl"}
            yield (
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
