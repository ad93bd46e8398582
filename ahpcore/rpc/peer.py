"""One JSON-RPC peer per connection: an outbox that counts bytes, request routing, and
requests of our own to the other side.

Requests are served concurrently (a slow ``subscribe`` does not hold up a
``ping``); notifications are served in arrival order, because a client's
dispatches must be applied in the order it sent them.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc

from ahpcore.logs import escape
from ahpcore.protocol.errors import INTERNAL_ERROR, ProtocolError
from ahpcore.rpc.framing import Message, dumps, parse, without_paths
from ahpcore.transports.base import Wire

log = logging.getLogger(__name__)

RequestHandler = Callable[["Peer", Message], Awaitable[Any]]
NotificationHandler = Callable[["Peer", Message], Awaitable[None]]

#: Code a peer closes with when its client fell too far behind (policy violation
#: would blame the client for something that is not a protocol error).
CLOSE_TOO_FAR_BEHIND = 1008
_ids = itertools.count(1)


@dataclass
class Reply:
    """A result plus work to do once the answer is queued (release frames held behind it)."""

    result: Any
    after: Callable[[], None] | None = None


class PeerClosed(Exception):
    """The connection went away before an answer arrived."""


class Peer:
    def __init__(
        self,
        wire: Wire,
        *,
        on_request: RequestHandler,
        on_notification: NotificationHandler,
        queue_limit: Callable[[], int],
        inline_methods: frozenset[str] = frozenset(),
    ) -> None:
        self.wire = wire
        self.id = next(_ids)
        self._on_request = on_request
        self._on_notification = on_notification
        self._queue_limit = queue_limit
        self._inline = inline_methods
        self._outbox: deque[tuple[str, int]] = deque()
        self._queued_bytes = 0
        self._wakeup = anyio.Event()
        self._closed = anyio.Event()
        self._next_request_id = itertools.count(1)
        self._pending: dict[int, tuple[anyio.Event, list[Any]]] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self.close_reason: str | None = None
        #: A wire that can take a frame at once (and counts what it holds) skips the outbox.
        self._write_now: Callable[[str], None] | None = getattr(wire, "write_now", None)

    # -- sending -----------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    @property
    def queued_bytes(self) -> int:
        return self._queued_bytes

    def send(self, message: Any) -> bool:
        """Queue one message; False when it was dropped (peer closed or too far behind)."""
        return self.send_text(dumps(message))

    def send_text(self, text: str, weight: int | None = None) -> bool:
        if self.closed:
            return False
        weight = len(text.encode("utf-8")) if weight is None else weight
        on_wire = self.wire.buffered_bytes()
        if on_wire is not None:
            limit = self._queue_limit()
            held = self._queued_bytes + on_wire
            # A client holding nothing takes any frame, however large: it is not behind.
            if held > 0 and held + weight > limit:
                log.warning(
                    "client %s (%s) is %d bytes behind, past clientQueueBytes=%d; closing it",
                    self.id,
                    self.wire.label,
                    self._queued_bytes + on_wire,
                    limit,
                )
                self.close("too far behind")
                return False
        if self._write_now is not None and not self._outbox:
            # Nothing queued ahead of it: straight onto the wire, in order.
            try:
                self._write_now(text)
            except Exception as exc:  # the socket went away under us
                log.debug("client %s: write failed: %r", self.id, exc)
                self.close("send failed")
                return False
            return True
        self._outbox.append((text, weight))
        self._queued_bytes += weight
        self._wakeup.set()
        return True

    def notify(self, method: str, params: Any) -> bool:
        return self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def respond(self, ident: Any, result: Any) -> None:
        self.send({"jsonrpc": "2.0", "id": ident, "result": result})

    def respond_error(self, ident: Any, error: ProtocolError) -> None:
        self.send({"jsonrpc": "2.0", "id": ident, "error": error.to_error()})

    async def request(self, method: str, params: Any, timeout: float = 30.0) -> Any:
        """Ask the other side; raises ProtocolError with its error, or PeerClosed."""
        ident = next(self._next_request_id)
        done = anyio.Event()
        slot: list[Any] = []
        self._pending[ident] = (done, slot)
        try:
            if not self.send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params}):
                raise PeerClosed(f"client {self.id} is closed")
            with anyio.fail_after(timeout):
                await done.wait()
        finally:
            self._pending.pop(ident, None)
        if not slot:
            raise PeerClosed(f"client {self.id} closed before answering {method}")
        answer = slot[0]
        if "error" in answer:
            error = answer["error"] if isinstance(answer["error"], dict) else {}
            code, message = error.get("code"), error.get("message")
            if not isinstance(code, int) or isinstance(code, bool) or not isinstance(message, str):
                # Relayed as it came, an error without a numeric code and a text
                # would be a malformed frame to whoever asked.
                raise ProtocolError(
                    INTERNAL_ERROR, f"client {self.id} answered {method} with a malformed error"
                )
            raise ProtocolError(code, message, error.get("data"))
        return answer.get("result")

    # -- lifecycle ---------------------------------------------------------
    def close(self, reason: str = "") -> None:
        """Stop sending; anything still queued is dropped with the close."""
        if self.closed:
            return
        self.close_reason = reason
        self._closed.set()
        self._outbox.clear()
        self._queued_bytes = 0
        self._wakeup.set()
        for done, _ in self._pending.values():
            done.set()
        if self._tg is not None:
            self._tg.cancel_scope.cancel()

    async def run(self, frames: Callable[[], Awaitable[str | bytes | None]]) -> None:
        """Serve until ``frames()`` returns None (the other side left) or the peer closes."""
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self._write_loop)
                while not self.closed:
                    frame = await frames()
                    if frame is None:
                        break
                    await self._receive(tg, frame)
                tg.cancel_scope.cancel()
        finally:
            was_behind = self.close_reason == "too far behind"
            self.close(self.close_reason or "connection ended")
            with anyio.CancelScope(shield=True):
                if was_behind:
                    await self.wire.close(CLOSE_TOO_FAR_BEHIND, "client fell too far behind")
                else:
                    await self.wire.close()

    async def _write_loop(self) -> None:
        while not self.closed:
            if not self._outbox:
                self._wakeup = anyio.Event()
                if self._outbox or self.closed:
                    continue
                await self._wakeup.wait()
                continue
            text, weight = self._outbox.popleft()
            try:
                await self.wire.send(text)
            except Exception as exc:  # the socket went away under us
                log.debug("client %s: send failed: %r", self.id, exc)
                self.close("send failed")
                return
            finally:
                self._queued_bytes = max(0, self._queued_bytes - weight)

    async def _receive(self, tg: anyio.abc.TaskGroup, frame: str | bytes) -> None:
        try:
            message = parse(frame)
        except ProtocolError as error:
            ident = error.data.get("id") if isinstance(error.data, dict) else None
            error.data = None
            self.send({"jsonrpc": "2.0", "id": ident, "error": error.to_error()})
            return
        if message.kind == "response":
            waiter = self._pending.get(message.id) if isinstance(message.id, int) else None
            if waiter is not None:
                waiter[1].append(message.raw)
                waiter[0].set()
            return
        if message.kind == "notification":
            await self._serve_notification(message)
        elif message.method in self._inline:
            await self._serve_request(message)
        else:
            tg.start_soon(self._serve_request, message)

    async def _serve_notification(self, message: Message) -> None:
        try:
            await self._on_notification(self, message)
        except ProtocolError as error:
            # A notification is never answered, not even to refuse it.
            log.warning(
                "client %s: %s ignored: %s", self.id, escape(message.method), escape(error.message)
            )
        except Exception:
            log.exception("client %s: notification %s failed", self.id, escape(message.method))

    async def _serve_request(self, message: Message) -> None:
        try:
            result = await self._on_request(self, message)
        except ProtocolError as error:
            self.respond_error(message.id, error)
        except Exception as exc:
            log.exception("client %s: %s failed", self.id, escape(message.method))
            self.respond_error(
                message.id,
                ProtocolError(
                    INTERNAL_ERROR, f"{message.method} failed: {without_paths(str(exc))}"
                ),
            )
        else:
            if isinstance(result, Reply):
                self.respond(message.id, result.result)
                if result.after is not None:
                    result.after()
            else:
                self.respond(message.id, result)
