"""A remote session's terminals, each mirrored by a terminal of this host.

The remote host lists its terminals on its root channel, each with the session
that claims it. For every one a remote session of this host claims, a terminal
is opened here (``host.open_terminal``, claimed by the session's chat here)
running ``python -m ahp_remote.mirror`` on a Unix socket this plugin serves
from an owner-only folder: what the remote terminal prints is written to it,
what a person types here is read from it and sent to the remote terminal as
``terminal/input``, and the size here goes there as ``terminal/resized``. A
client subscribes to the terminal here as to any other.

Only the remote's output reaches this machine, as text in a terminal; nothing
the remote sends is run here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ahp_remote.link import LinkClosed, RemoteError
from ahpcore.api import NoTerminals, escape

if TYPE_CHECKING:
    from ahp_remote.machine import Machine
    from ahpcore.api import PluginHost

log = logging.getLogger(__name__)

#: The most a person may type at once, as one line from the mirror program.
MAX_LINE = 1 << 20
#: Mirrors one chat opens at most: a remote listing ever more terminals starts no more.
MAX_MIRRORS = 16


def content_text(state: Mapping[str, Any]) -> str:
    """What a terminal's snapshot shows, as the text it printed."""
    shown = []
    for part in state.get("content") or ():
        if not isinstance(part, Mapping):
            continue
        if part.get("type") == "command":
            shown.append(str(part.get("output", "")))
        else:
            shown.append(str(part.get("value", "")))
    return "".join(shown)


class Mirror:
    """One remote terminal, shown and typed into through a terminal here."""

    def __init__(self, machine: Machine, remote_uri: str, title: str) -> None:
        self.machine = machine
        self.remote_uri = remote_uri
        self.title = title
        self.local_uri: str | None = None
        self._folder: str | None = None
        self._server: asyncio.AbstractServer | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: list[bytes] = []
        self._ended = False
        self._watching = False

    async def open(self, host: PluginHost, chat: str) -> None:
        self._folder = tempfile.mkdtemp(prefix="ahp-remote-")  # owner-only (0700)
        path = str(Path(self._folder) / "t.sock")
        self._server = await asyncio.start_unix_server(self._serve, path, limit=MAX_LINE)
        Path(path).chmod(0o600)
        state = await self.machine.watch(self.remote_uri, self)
        self._watching = True
        self._write(content_text(state))
        lifecycle = state.get("lifecycle") or {}
        terminal = await host.open_terminal(
            chat,
            sys.executable,
            ["-m", "ahp_remote.mirror", path],
            name=f"{self.title} (on {self.machine.title})",
        )
        self.local_uri = terminal.uri
        if isinstance(lifecycle, Mapping) and lifecycle.get("kind") == "exited":
            self._end()

    async def close(self) -> None:
        if self._watching:
            self._watching = False
            await self.machine.unwatch(self.remote_uri, self)
        self._end()
        if self._server is not None:
            self._server.close()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)

    # -- the remote terminal -------------------------------------------------------------------
    def take(self, action: dict[str, Any], origin: Mapping[str, Any] | None) -> None:
        kind = action.get("type")
        if kind == "terminal/data":
            self._write(str(action.get("data", "")))
        elif kind == "terminal/cleared":
            self._write("\x1b[H\x1b[2J")
        elif kind == "terminal/exited":
            self._end()

    def reset(self, state: dict[str, Any] | None) -> None:
        if state is None:
            self._end()
            return
        self._write("\x1b[H\x1b[2J" + content_text(state))

    def lost(self, why: str) -> None:
        pass

    def relinked(self) -> None:
        pass

    # -- the terminal here ------------------------------------------------------------------------
    def _write(self, text: str) -> None:
        if self._ended or not text:
            return
        data = text.encode("utf-8")
        if self._writer is None:
            self._pending.append(data)
        else:
            self._writer.write(data)

    def _end(self) -> None:
        self._ended = True
        writer = self._writer
        if writer is not None:
            self._writer = None
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._writer is not None or self._ended:
            writer.close()
            return
        self._writer = writer
        for data in self._pending:
            writer.write(data)
        self._pending.clear()
        if self._ended:
            writer.close()
            return
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                await self._typed(line)
        except (ValueError, ConnectionError, asyncio.LimitOverrunError):
            return
        finally:
            if self._writer is writer:
                self._writer = None
                writer.close()

    async def _typed(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            return
        if not isinstance(message, dict):
            return
        action: dict[str, Any] | None = None
        if isinstance(message.get("input"), str):
            action = {"type": "terminal/input", "data": message["input"]}
        size = message.get("resize")
        if isinstance(size, list) and len(size) == 2 and all(isinstance(n, int) for n in size):
            action = {"type": "terminal/resized", "cols": size[0], "rows": size[1]}
        if action is None:
            return
        try:
            await self.machine.dispatch(self.remote_uri, action)
        except LinkClosed as exc:
            log.info("cannot type into %s: %s", self.remote_uri, escape(str(exc)))


class Mirrors:
    """The mirrors of one remote session's terminals."""

    def __init__(
        self,
        host: PluginHost | None,
        machine: Machine,
        session: str,
        chat: str,
        remote_chat: str,
        default: bool,
    ) -> None:
        self.host = host
        self.machine = machine
        #: The remote session whose terminals are mirrored.
        self.session = session
        #: The chat here that claims the mirrors.
        self.chat = chat
        #: The remote chat whose terminals these are; the default chat's take the rest too.
        self.remote_chat = remote_chat
        self.default = default
        self.by_remote: dict[str, Mirror] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    def local_uri(self, remote_uri: str) -> str | None:
        mirror = self.by_remote.get(remote_uri)
        return mirror.local_uri if mirror is not None else None

    def sync(self) -> None:
        """Open a mirror for each remote terminal the session claims that has none yet."""
        if self.host is None or self._closed:
            return
        for info in self.machine.terminals:
            claim = info.get("claim") or {}
            uri = info.get("resource")
            if claim.get("session") != self.session or not isinstance(uri, str):
                continue
            mine = claim.get("chat") == self.remote_chat
            if not mine and not (self.default and not self._claimed_elsewhere(claim)):
                continue
            if uri in self.by_remote:
                continue
            if len(self.by_remote) >= MAX_MIRRORS:
                log.warning(
                    "%s lists more than %d terminals for one chat; the rest are not shown here",
                    self.machine.title,
                    MAX_MIRRORS,
                )
                return
            mirror = self.by_remote[uri] = Mirror(self.machine, uri, str(info.get("title") or uri))
            task = asyncio.get_running_loop().create_task(self._open(mirror))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _claimed_elsewhere(self, claim: Mapping[str, Any]) -> bool:
        """Whether another chat of the session here mirrors the terminal's chat."""
        chat = claim.get("chat")
        return isinstance(chat, str) and chat.startswith("ahp-chat:/remote-")

    async def _open(self, mirror: Mirror) -> None:
        assert self.host is not None
        try:
            await mirror.open(self.host, self.chat)
        except (NoTerminals, ValueError, PermissionError, LinkClosed, RemoteError, OSError) as exc:
            log.info(
                "the terminal %s of %s is not shown here: %s",
                mirror.remote_uri,
                self.machine.title,
                escape(str(exc)),
            )
            await mirror.close()
        except Exception:
            log.exception("mirroring %s failed", mirror.remote_uri)
            await mirror.close()

    async def close(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        for mirror in list(self.by_remote.values()):
            with contextlib.suppress(Exception):
                await mirror.close()
        self.by_remote.clear()
