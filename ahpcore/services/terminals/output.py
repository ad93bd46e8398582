"""A terminal's output on its way to the channel: frames, pacing and the scrollback cap.

Reads are coalesced into one ``terminal/data`` per frame interval (or per
``FRAME_BYTES``), so a flood costs a bounded number of frames per second, and
a reader that outpaces the terminal's watchers waits for their queues to
drain, which slows the process down the way a real terminal does.
"""

from __future__ import annotations

import codecs
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

from ahpcore.ports import TerminalProcess
from ahpcore.protocol.uris import file_uri

#: Root config key: how many bytes of output a terminal keeps for late subscribers.
SCROLLBACK_KEY = "terminalScrollbackBytes"
DEFAULT_SCROLLBACK_BYTES = 1 << 20
MIN_SCROLLBACK_BYTES = 64 << 10
#: Any client may set the key, and each of the host's terminals keeps this much
#: (every frame of output also copies what is kept): a ceiling the client cannot lift.
MAX_SCROLLBACK_BYTES = 8 << 20
#: Output waits at most this long to join a frame.
FRAME_INTERVAL = 0.016
#: A frame is sent as soon as this much output is waiting.
FRAME_BYTES = 256 << 10
#: Reading pauses while a watcher has this much queued, for at most PAUSE_LIMIT seconds.
PAUSE_BYTES = 2 << 20
PAUSE_LIMIT = 1.0


def _text_key(part: Mapping[str, Any]) -> str:
    return "output" if part.get("type") == "command" else "value"


def _utf8_size(text: str) -> int:
    # isascii() is a flag CPython keeps on each string: most output is counted
    # without encoding a copy of it.
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _size(part: Mapping[str, Any]) -> int:
    text = part.get(_text_key(part))
    return _utf8_size(text) if isinstance(text, str) else 0


def _without_first_bytes(text: str, count: int) -> str:
    """``text`` less its first ``count`` UTF-8 bytes (a character cut in two is dropped)."""
    if text.isascii():
        return text[count:]
    return text.encode("utf-8")[count:].decode("utf-8", "ignore")


def trim_content(content: list[Any], cap: int) -> tuple[list[Any], int]:
    """The newest ``cap`` bytes of content: whole old parts dropped, the oldest kept cut."""
    sizes = [_size(part) if isinstance(part, Mapping) else 0 for part in content]
    total = sum(sizes)
    if total <= cap:
        return content, total
    excess = total - cap
    first = 0
    while excess > 0 and first < len(content) and sizes[first] <= excess:
        excess -= sizes[first]
        first += 1
    kept = list(content[first:])
    if kept and excess > 0:
        part = kept[0]
        key = _text_key(part)
        kept[0] = {**part, key: _without_first_bytes(part[key], excess)}
    return kept, sum(_size(part) for part in kept if isinstance(part, Mapping))


@dataclass(eq=False)
class LiveTerminal:
    uri: str
    process: TerminalProcess | None = None
    #: The client id that asked for it with createTerminal; None for a ``!`` command's.
    creator: str | None = None
    feed: TerminalFeed = field(init=False)


class FeedSink(Protocol):
    """Where a feed's actions go (the terminals service)."""

    def spawn(self, function: Callable[[], Coroutine[Any, Any, Any]]) -> None: ...

    def content(self, terminal: LiveTerminal) -> list[Any]:
        """What the terminal's channel holds now."""
        ...

    def data(self, terminal: LiveTerminal, text: str, size: int) -> None: ...

    def watcher_backlog(self, terminal: LiveTerminal) -> int: ...

    def apply(self, terminal: LiveTerminal, action: dict[str, Any]) -> None: ...

    def publish_list(self) -> None: ...


class TerminalFeed:
    """``TerminalEvents`` for one terminal: what its port reports becomes actions."""

    def __init__(self, service: FeedSink, terminal: LiveTerminal) -> None:
        self.service = service
        self.terminal = terminal
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._pending: list[str] = []
        self._pending_bytes = 0
        self._flush_scheduled = False
        self._command_ids = 0
        self._open_command: str | None = None
        #: Bytes of output held in the channel's content (approximate between trims).
        self.held = 0
        #: Set once the process is gone and its output reported.
        self.done = anyio.Event()
        self.exit_code: int | None = None
        #: True once the scrollback cap dropped output.
        self.trimmed = False

    def output_text(self) -> str:
        """The output the channel still holds, as one string."""
        parts = self.service.content(self.terminal)
        return "".join(part.get(_text_key(part), "") for part in parts)

    # -- output --------------------------------------------------------------------
    async def output(self, data: bytes) -> None:
        if self.done.is_set():
            return
        text = self._decoder.decode(data)
        if not text:
            return
        self._pending.append(text)
        self._pending_bytes += len(data)
        if self._pending_bytes >= FRAME_BYTES:
            self.flush()
            await self._wait_for_watchers()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self.service.spawn(self._flush_later)

    async def _flush_later(self) -> None:
        await anyio.sleep(FRAME_INTERVAL)
        self.flush()

    def flush(self) -> None:
        """Send what is waiting as one ``terminal/data`` (before anything that follows it)."""
        self._flush_scheduled = False
        if not self._pending:
            return
        text = "".join(self._pending)
        size = self._pending_bytes
        self._pending.clear()
        self._pending_bytes = 0
        self.service.data(self.terminal, text, size)

    async def _wait_for_watchers(self) -> None:
        # Yield at least once per frame so one flood cannot hold the loop.
        await anyio.sleep(0)
        backlog = self.service.watcher_backlog
        deadline = time.monotonic() + PAUSE_LIMIT
        while backlog(self.terminal) > PAUSE_BYTES and time.monotonic() < deadline:
            await anyio.sleep(FRAME_INTERVAL)

    # -- marks ---------------------------------------------------------------------
    def _then(self, action: dict[str, Any], after: Callable[[], Any] | None = None) -> None:
        self.flush()
        self.service.apply(self.terminal, action)
        if after is not None:
            after()

    def title(self, title: str) -> None:
        self._then({"type": "terminal/titleChanged", "title": title}, self.service.publish_list)

    def cwd(self, path: str) -> None:
        self._then({"type": "terminal/cwdChanged", "cwd": file_uri(path)})

    def detection_available(self) -> None:
        self._then({"type": "terminal/commandDetectionAvailable"})

    def command_started(self, command_line: str) -> None:
        self._command_ids += 1
        self._open_command = str(self._command_ids)
        self._then(
            {
                "type": "terminal/commandExecuted",
                "commandId": self._open_command,
                "commandLine": command_line,
                "timestamp": int(time.time() * 1000),
            }
        )

    def command_finished(self, exit_code: int | None, duration_ms: int | None) -> None:
        if self._open_command is None:
            return
        action: dict[str, Any] = {
            "type": "terminal/commandFinished",
            "commandId": self._open_command,
        }
        if exit_code is not None:
            action["exitCode"] = exit_code
        if duration_ms is not None:
            action["durationMs"] = duration_ms
        self._open_command = None
        self._then(action)

    def exited(self, exit_code: int | None) -> None:
        if self.done.is_set():
            return
        tail = self._decoder.decode(b"", final=True)
        if tail:
            self._pending.append(tail)
            self._pending_bytes += len(tail.encode("utf-8"))
        action: dict[str, Any] = {"type": "terminal/exited"}
        if exit_code is not None:
            action["exitCode"] = exit_code
        self.exit_code = exit_code
        self._then(action, self.service.publish_list)
        self.done.set()
