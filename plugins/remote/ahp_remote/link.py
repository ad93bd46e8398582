"""One JSON-RPC connection to a remote AHP host, as this host is its client.

Three transports carry it: a child process speaking newline-delimited JSON on
its stdin and stdout (``ahp serve --stdio``, through ``ssh`` or ``docker exec``
or as it is), a WebSocket (``ws://`` or ``wss://``, the token sent as
``Authorization: Bearer``, never in the URL), and a WebSocket through an SSH
port forward (``ssh -N -L``) this link starts and ends with itself.

Every frame the remote sends is checked against the protocol's strict shapes
exactly as a client of this host is (``ahpcore.protocol.wire``): a frame that
breaks them is dropped and logged, an answer that breaks them fails its
request. The remote is a server here, never a client: a request it makes (the
``resource*`` family a host may ask of a client) is refused, so a remote
cannot read or write a file of this machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import socket
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ahpcore.api import escape, redact
from ahpcore.protocol.wire import format_issues, validate_frame

log = logging.getLogger(__name__)

#: The largest frame a remote may send.
MAX_FRAME_BYTES = 16 << 20
#: How much of a child's stderr is kept to say why it ended.
STDERR_LINES = 20
#: How long a request waits for its answer.
REQUEST_TIMEOUT = 30.0
#: JSON-RPC's "method not found", for requests a remote makes of this host.
METHOD_NOT_FOUND = -32601

Notify = Callable[[str, dict[str, Any]], None]


class LinkClosed(ConnectionError):
    """The link ended; the message says why."""


class RemoteError(RuntimeError):
    """The remote host answered a request with an error."""

    def __init__(self, method: str, code: int, message: str) -> None:
        super().__init__(f"{method}: {message}")
        self.method = method
        self.code = code
        self.message = message


class Link:
    """A JSON-RPC client over one transport; ``on_notification`` hears what the remote sends."""

    def __init__(self, label: str, secrets: Sequence[str] = ()) -> None:
        self.label = label
        self.on_notification: Notify = lambda method, params: None
        self.closed = asyncio.Event()
        self.why = ""
        self._secrets = [s for s in secrets if s]
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[str, asyncio.Future[Any]]] = {}
        self._on_answer: dict[int, Callable[[], None]] = {}
        self._reader: asyncio.Task[None] | None = None

    # -- what a transport provides ---------------------------------------------------
    async def _send_text(self, text: str) -> None:
        raise NotImplementedError

    async def _receive_text(self) -> str | bytes | None:
        """The next frame, or None at the end."""
        raise NotImplementedError

    async def _shut(self) -> None:
        raise NotImplementedError

    def _ended(self) -> str:
        """Why the transport ended, once it has."""
        return "the connection ended"

    # -- use ----------------------------------------------------------------------------
    def hide(self, text: str) -> str:
        """``text`` with this link's secrets and any connection token blanked."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return redact(text)

    def begin(self) -> None:
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def request(
        self,
        method: str,
        params: Mapping[str, Any],
        *,
        timeout: float = REQUEST_TIMEOUT,
        on_answer: Callable[[], None] | None = None,
    ) -> Any:
        """Ask, and wait for the answer. ``on_answer`` is called as a good answer is read,
        before any frame after it is: what follows the answer can be held for the asker."""
        if self.closed.is_set():
            raise LinkClosed(self.why)
        ident = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[ident] = (method, future)
        if on_answer is not None:
            self._on_answer[ident] = on_answer
        try:
            await self._send(
                {"jsonrpc": "2.0", "id": ident, "method": method, "params": dict(params)}
            )
            async with asyncio.timeout(timeout):
                return await future
        except TimeoutError:
            raise LinkClosed(f"{self.label} did not answer {method} in {timeout:.0f} s") from None
        finally:
            self._pending.pop(ident, None)
            self._on_answer.pop(ident, None)
            if future.done() and not future.cancelled():
                # Failed while the request was still being written (the link went as it
                # was sent): that error is the one raised, and this one is seen, not left
                # for the loop to report as never retrieved.
                future.exception()

    async def notify(self, method: str, params: Mapping[str, Any]) -> None:
        await self._send({"jsonrpc": "2.0", "method": method, "params": dict(params)})

    async def _send(self, message: dict[str, Any]) -> None:
        if self.closed.is_set():
            raise LinkClosed(self.why)
        try:
            await self._send_text(json.dumps(message, separators=(",", ":")))
        except (OSError, ConnectionError, RuntimeError) as exc:
            raise LinkClosed(f"cannot write to {self.label}: {self.hide(str(exc))}") from None

    async def close(self, why: str = "closed by this host") -> None:
        if not self.closed.is_set():
            self._finish(why)
        reader = self._reader
        if reader is not None and not reader.done() and reader is not asyncio.current_task():
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
        with contextlib.suppress(Exception):
            await self._shut()

    def _finish(self, why: str) -> None:
        if self.closed.is_set():
            return
        self.why = self.hide(why)
        self.closed.set()
        for method, future in self._pending.values():
            if not future.done():
                future.set_exception(LinkClosed(f"{self.why} (while waiting on {method})"))
        self._pending.clear()

    # -- reading -----------------------------------------------------------------------
    async def _read(self) -> None:
        why = ""
        try:
            while True:
                text = await self._receive_text()
                if text is None:
                    break
                await self._take(text)
        except asyncio.CancelledError:
            why = "closed by this host"
            raise
        except Exception as exc:  # a transport failing in its own way ends the link alike
            why = f"{type(exc).__name__}: {exc}"
        finally:
            self._finish(why or self._ended())
            with contextlib.suppress(Exception):
                await asyncio.shield(self._shut())

    async def _take(self, text: str | bytes) -> None:
        try:
            frame = json.loads(text)
        except ValueError:
            log.warning("%s sent a frame that is not JSON; dropped", self.label)
            return
        if not isinstance(frame, dict):
            log.warning("%s sent a frame that is not a JSON object; dropped", self.label)
            return
        ident = frame.get("id")
        if "method" in frame:
            if ident is not None:
                # The remote asks something of its client: this host answers none of it.
                await self._refuse(ident, frame.get("method"))
                return
            issues = validate_frame(frame, direction="server")
            if issues:
                log.warning(
                    "%s sent a notification that breaks the protocol; dropped:\n%s",
                    self.label,
                    self.hide(escape(format_issues(issues))),
                )
                return
            method, params = frame["method"], frame.get("params")
            if isinstance(params, dict):
                try:
                    self.on_notification(method, params)
                except Exception:
                    log.exception("taking %s from %s failed", method, self.label)
            return
        pending = self._pending.pop(ident, None) if isinstance(ident, int) else None
        if pending is None:
            return  # an answer nobody waits for now (its request timed out)
        method, future = pending
        if future.done():
            return
        issues = validate_frame(frame, direction="server", request_method=method)
        if issues:
            future.set_exception(
                RemoteError(
                    method,
                    -32603,
                    f"the answer breaks the protocol: {self.hide(format_issues(issues))}",
                )
            )
        elif "error" in frame:
            error = frame["error"]
            future.set_exception(
                RemoteError(method, int(error.get("code", 0)), self.hide(str(error.get("message"))))
            )
        else:
            answered = self._on_answer.pop(ident, None) if isinstance(ident, int) else None
            if answered is not None:
                answered()
            future.set_result(frame.get("result"))

    async def _refuse(self, ident: Any, method: Any) -> None:
        log.info("%s asked this host for %s; refused", self.label, escape(str(method))[:80])
        with contextlib.suppress(LinkClosed):
            await self._send(
                {
                    "jsonrpc": "2.0",
                    "id": ident,
                    "error": {
                        "code": METHOD_NOT_FOUND,
                        "message": "this host relays sessions to you and serves no requests",
                    },
                }
            )


class PipeLink(Link):
    """A child process speaking AHP on its stdin and stdout."""

    def __init__(self, label: str, argv: Sequence[str]) -> None:
        super().__init__(label)
        self.argv = list(argv)
        self.process: asyncio.subprocess.Process | None = None
        self._stderr: deque[str] = deque(maxlen=STDERR_LINES)
        self._stderr_task: asyncio.Task[None] | None = None

    async def open(self) -> None:
        try:
            self.process = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                limit=MAX_FRAME_BYTES,
                start_new_session=True,  # a Ctrl-C meant for this host is not the child's
            )
        except OSError as exc:
            raise LinkClosed(f"cannot run {self.argv[0]}: {exc.strerror or exc}") from None
        assert self.process.stderr is not None
        self._stderr_task = asyncio.get_running_loop().create_task(
            self._keep_stderr(self.process.stderr)
        )
        self.begin()

    async def _keep_stderr(self, stream: asyncio.StreamReader) -> None:
        while True:
            line = await stream.readline()
            if not line:
                return
            text = self.hide(line.decode("utf-8", "replace").rstrip())
            if text:
                self._stderr.append(text)
                log.debug("%s: %s", self.label, escape(text))

    async def _send_text(self, text: str) -> None:
        process = self.process
        if process is None or process.stdin is None:
            raise LinkClosed("not started")
        process.stdin.write(text.encode("utf-8") + b"\n")
        await process.stdin.drain()

    async def _receive_text(self) -> bytes | None:
        process = self.process
        if process is None or process.stdout is None:
            return None
        while True:
            try:
                line = await process.stdout.readline()
            except (asyncio.LimitOverrunError, ValueError):
                raise LinkClosed(f"{self.label} sent a frame over the size limit") from None
            if not line:
                return None
            if line.strip():
                return line

    def _ended(self) -> str:
        process = self.process
        said = self._stderr[-1] if self._stderr else ""
        if process is not None and process.returncode is not None:
            code = process.returncode
            why = f"{self.argv[0]} exited with status {code}"
        else:
            why = f"{self.argv[0]} closed its output"
        return f"{why}: {said}" if said else why

    async def _shut(self) -> None:
        process = self.process
        if process is None:
            return
        if process.stdin is not None and not process.stdin.is_closing():
            process.stdin.close()
        if process.returncode is None:
            try:
                async with asyncio.timeout(3):
                    await process.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        task = self._stderr_task
        if task is not None and not task.done():
            try:
                async with asyncio.timeout(1):
                    await task
            except (TimeoutError, Exception):
                task.cancel()

    async def exited(self) -> None:
        """Wait until the child is gone (a stopped host leaves none behind)."""
        if self.process is not None:
            await self.process.wait()


class _Hiding(logging.LoggerAdapter[logging.Logger]):
    """The WebSocket library's logger, its lines with the token blanked: at debug level it
    logs every header it sends, ``Authorization`` too."""

    def __init__(self, logger: logging.Logger, hide: Callable[[str], str]) -> None:
        super().__init__(logger, {})
        self._hide = hide

    def log(self, level: int, msg: Any, *args: Any, **kwargs: Any) -> None:
        if not self.isEnabledFor(level):
            return
        try:
            text = str(msg) % args if args else str(msg)
        except (TypeError, ValueError):
            text = " ".join([str(msg), *map(str, args)])
        kwargs.setdefault("stacklevel", 2)
        self.logger.log(level, "%s", self._hide(text), **kwargs)


class SocketLink(Link):
    """A WebSocket to a remote host's port."""

    def __init__(self, label: str, url: str, token: str | None) -> None:
        super().__init__(label, secrets=[token] if token else [])
        self.url = url
        self._token = token
        self._socket: Any = None

    async def open(self, *, timeout: float = 10.0) -> None:
        await self._connect(self.url, timeout)
        self.begin()

    async def _connect(self, url: str, timeout: float, *, refused_is_final: bool = True) -> None:
        """Open the WebSocket to ``url``; ``LinkClosed`` saying why not (refused, bad status,
        TLS, name lookup). A refusal is raised as is, so a tunnel may wait out its start."""
        from websockets.asyncio.client import connect

        headers = {"Authorization": f"Bearer {self._token}"} if self._token else None
        try:
            async with asyncio.timeout(timeout):
                self._socket = await connect(
                    url,
                    additional_headers=headers,
                    max_size=MAX_FRAME_BYTES,
                    open_timeout=timeout,
                    logger=_Hiding(logging.getLogger("websockets.client"), self.hide),
                )
        except TimeoutError:
            raise LinkClosed(f"{self.url} did not answer in {timeout:.0f} s") from None
        except ConnectionRefusedError as exc:
            if refused_is_final:
                raise LinkClosed(f"cannot connect to {self.url}: {exc.strerror or exc}") from None
            raise
        except Exception as exc:
            raise LinkClosed(f"cannot connect to {self.url}: {self.hide(str(exc))}") from None

    async def _send_text(self, text: str) -> None:
        await self._socket.send(text)

    async def _receive_text(self) -> str | bytes | None:
        from websockets.exceptions import ConnectionClosed

        try:
            return await self._socket.recv()
        except ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd is not None else None
            reason = exc.rcvd.reason if exc.rcvd is not None else ""
            self._closed_with = f"the connection closed ({code}{': ' + reason if reason else ''})"
            return None

    _closed_with = "the connection closed"

    def _ended(self) -> str:
        return self._closed_with

    async def _shut(self) -> None:
        if self._socket is not None:
            await self._socket.close()

    def drop(self) -> None:
        """Cut the connection at once, as a network failing would (for tests of reconnection)."""
        if self._socket is not None:
            self._socket.transport.abort()


def free_local_port() -> int:
    """A port of 127.0.0.1 nothing listens on now (ssh may yet lose it to another program:
    then its forward fails, it exits saying so, and the link is tried again)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class TunnelLink(SocketLink):
    """A WebSocket to a host listening on another machine, through ``ssh -N -L``.

    ``open`` starts ssh forwarding a free port of 127.0.0.1 here to the host and port
    the remote machine knows the server by, waits (bounded) until the port takes a
    connection, then speaks WebSocket through it. The link ends when either ends: ssh
    exiting cuts the WebSocket, and closing the link ends ssh."""

    def __init__(
        self,
        label: str,
        url: str,
        token: str | None,
        *,
        ssh: Sequence[str],
        destination: str,
        target: tuple[str, int],
    ) -> None:
        super().__init__(label, url, token)
        self.ssh = list(ssh)
        self.destination = destination
        self.target = target
        self.local_port = 0
        self.process: asyncio.subprocess.Process | None = None
        self._stderr: deque[str] = deque(maxlen=STDERR_LINES)
        self._watch: asyncio.Task[None] | None = None

    def argv(self, local_port: int) -> list[str]:
        host, port = self.target
        there = f"[{host}]" if ":" in host else host
        forward = f"127.0.0.1:{local_port}:{there}:{port}"
        return [*self.ssh, "-L", forward, "--", self.destination]

    def local_url(self) -> str:
        parts = urlsplit(self.url)
        return urlunsplit(
            ("ws", f"127.0.0.1:{self.local_port}", parts.path or "/", parts.query, "")
        )

    async def open(self, *, timeout: float = 15.0) -> None:
        self.local_port = free_local_port()
        argv = self.argv(self.local_port)
        try:
            self.process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,  # a Ctrl-C meant for this host is not the tunnel's
            )
        except OSError as exc:
            raise LinkClosed(f"cannot run {argv[0]}: {exc.strerror or exc}") from None
        assert self.process.stderr is not None
        stderr = asyncio.get_running_loop().create_task(self._keep_stderr(self.process.stderr))
        self._watch = asyncio.get_running_loop().create_task(self._outlive(stderr))
        try:
            await self._through(timeout)
        except BaseException:
            await self._shut()
            raise
        self.begin()

    async def _through(self, timeout: float) -> None:
        """Connect once ssh listens: until then the port refuses, unless ssh gave up."""
        process = self.process
        assert process is not None
        deadline = time.monotonic() + timeout
        url = self.local_url()
        while True:
            if process.returncode is not None:
                await self._stderr_read()
                raise LinkClosed(self._ssh_ended())
            left = deadline - time.monotonic()
            if left <= 0:
                raise LinkClosed(
                    f"ssh to {self.destination} did not open its tunnel in {timeout:.0f} s"
                )
            try:
                await self._connect(url, left, refused_is_final=False)
                return
            except ConnectionRefusedError:
                await asyncio.sleep(0.05)

    async def _keep_stderr(self, stream: asyncio.StreamReader) -> None:
        while True:
            line = await stream.readline()
            if not line:
                return
            text = self.hide(line.decode("utf-8", "replace").rstrip())
            if text:
                self._stderr.append(text)
                log.debug("%s tunnel: %s", self.label, escape(text))

    async def _outlive(self, stderr: asyncio.Task[None]) -> None:
        """When ssh exits the tunnel is gone: cut the WebSocket riding it at once."""
        process = self.process
        assert process is not None
        await process.wait()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1):
                await stderr
        if not self.closed.is_set():
            self._closed_with = self._ssh_ended()
            self.drop()

    async def _stderr_read(self) -> None:
        watch = self._watch
        if watch is not None and not watch.done():
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                async with asyncio.timeout(1.5):
                    await asyncio.shield(watch)

    async def _receive_text(self) -> str | bytes | None:
        text = await super()._receive_text()
        process = self.process
        if text is None and process is not None:
            # The socket often ends a moment before ssh is reaped: wait that moment, so
            # the link says what ssh said rather than that a connection closed.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.5):
                    await process.wait()
            if process.returncode is not None:
                await self._stderr_read()
        return text

    def _ssh_ended(self) -> str:
        process = self.process
        code = process.returncode if process is not None else None
        if code is None:
            why = "ssh ended"
        elif code < 0:
            why = f"ssh was killed by signal {-code}"
        else:
            why = f"ssh exited with status {code}"
        said = "; ".join(list(self._stderr)[-3:])
        return f"{why}: {said}" if said else why

    def _ended(self) -> str:
        process = self.process
        if process is not None and process.returncode is not None:
            return self._ssh_ended()
        return self._closed_with

    async def _shut(self) -> None:
        with contextlib.suppress(Exception):
            await super()._shut()
        process = self.process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
            try:
                async with asyncio.timeout(3):
                    await process.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        watch = self._watch
        if watch is not None and not watch.done() and watch is not asyncio.current_task():
            try:
                async with asyncio.timeout(2):
                    await asyncio.shield(watch)
            except (TimeoutError, Exception):
                watch.cancel()

    async def exited(self) -> None:
        """Wait until ssh is gone (a stopped host leaves no tunnel behind)."""
        if self.process is not None:
            await self.process.wait()
