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
from ahpcore.protocol.errors import INTERNAL_ERROR, INVALID_REQUEST, ProtocolError
from ahpcore.rpc.budget import DEFAULT_HOST_QUEUE_BYTES, InboundBudget, InboundShare
from ahpcore.rpc.framing import Message, dumps, dumps_answer_in_slices, parse, without_paths
from ahpcore.rpc.wire import Wire

log = logging.getLogger(__name__)

RequestHandler = Callable[["Peer", Message], Awaitable[Any]]
NotificationHandler = Callable[["Peer", Message], Awaitable[None]]
#: Told of a notification refused for being over the inbound budget, with why.
OverBudgetHandler = Callable[["Peer", Message, str], None]

#: Code a peer closes with when its client fell too far behind (policy violation
#: would blame the client for something that is not a protocol error).
CLOSE_TOO_FAR_BEHIND = 1008
_ids = itertools.count(1)
#: close_reason of a connection closed for falling past clientQueueBytes.
TOO_FAR_BEHIND = "too far behind"
#: close_reason of a connection closed for sending past its inbound budget.
CLOSED_OVER_BUDGET = "over its inbound budget"
#: close_reason of a connection closed for being furthest behind when the host's
#: outbound queues, all connections together, passed their ceiling (``HostQueues``).
FURTHEST_BEHIND = "furthest behind while the host's queues were full"
#: Over budget, a frame bigger than this is not parsed just to refuse it: the sender is closed.
REFUSE_UNREAD_BYTES = 64 * 1024
#: A result listing more items than this (a listSessions of thousands of rows) is
#: encoded in a worker thread, so other clients are not held while it is written.
ENCODE_APART_ITEMS = 1000
#: A frame larger than this goes out in parts (WebSocket fragments of one message),
#: the event loop serving other clients between them: compressing and writing a
#: 3 MB listing in one go held every other connection for tens of milliseconds.
SEND_IN_PARTS_OVER = 256 * 1024


def _long_listing(result: Any) -> bool:
    if not isinstance(result, dict):
        return False
    items = result.get("items")
    return isinstance(items, list) and len(items) > ENCODE_APART_ITEMS


@dataclass
class Reply:
    """A result plus work to do once the answer is queued (release frames held behind it)."""

    result: Any
    after: Callable[[], None] | None = None


async def _discard(frames: Callable[[], Awaitable[str | bytes | None]]) -> None:
    try:
        while await frames() is not None:
            pass
    except Exception:  # the connection is gone: nothing left to drop
        return


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
        budget: InboundBudget | None = None,
        on_over_budget: OverBudgetHandler | None = None,
    ) -> None:
        self.wire = wire
        self.id = next(_ids)
        self._on_request = on_request
        self._on_notification = on_notification
        self._queue_limit = queue_limit
        self._inline = inline_methods
        self._budget = budget
        self._on_over_budget = on_over_budget
        self._outbox: deque[tuple[str, int]] = deque()
        self._queued_bytes = 0
        self._wakeup = anyio.Event()
        self._closed = anyio.Event()
        #: The same as ``_closed.is_set()``, read on every frame to every watcher.
        self._is_closed = False
        self._next_request_id = itertools.count(1)
        self._pending: dict[int, tuple[anyio.Event, list[Any]]] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self.close_reason: str | None = None
        #: A wire that can take a frame at once (and counts what it holds) skips the outbox.
        self._write_now: Callable[[str], None] | None = getattr(wire, "write_now", None)
        self._buffered_bytes: Callable[[], int | None] = wire.buffered_bytes
        #: A wire that can also put one frame on many wires at once (see ``ready_wire``).
        self.write_many: Callable[[list[Any], str], list[Any]] | None = getattr(
            wire, "write_many", None
        )
        #: A wire that can write one message as several fragments (see SEND_IN_PARTS_OVER).
        self._send_in_parts: Callable[[str], Awaitable[None]] | None = getattr(
            wire, "send_in_parts", None
        )
        #: True while the write loop is part-way through such a message: nothing may
        #: go onto the wire around it until it is whole.
        self._in_parts = False
        #: This connection's account with the host-wide inbound budget, when its
        #: transport keeps one (``ahpcore.rpc.budget.SharedInbound``).
        self._share: InboundShare | None = getattr(wire, "inbound_share", None)
        self._held_back = False
        #: The host's ledger of queued outbound bytes, when the transport keeps one, and
        #: what it last counted for this peer.
        self._queues: HostQueues | None = getattr(wire, "host_queues", None)
        self._counted = 0
        if self._queues is not None:
            self._queues.join(self)

    # -- sending -----------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._is_closed

    @property
    def queued_bytes(self) -> int:
        return self._queued_bytes

    @property
    def budget(self) -> InboundBudget | None:
        """This connection's inbound budget (None: unbounded), for whoever reports on it."""
        return self._budget

    def send(self, message: Any) -> bool:
        """Queue one message; False when it was dropped (peer closed or too far behind)."""
        return self.send_text(dumps(message))

    def queue_limit(self) -> int:
        """clientQueueBytes now: how far behind this client may fall before it is closed."""
        return self._queue_limit()

    def ready_wire(self, weight: int, limit: int) -> Any | None:
        """The wire when a frame of ``weight`` bytes may go straight onto it now, else None.

        Nothing may be queued ahead of it, and what the wire still holds plus the
        frame must be within ``limit`` (clientQueueBytes; a wire holding nothing
        takes any frame, as in ``send_text``). A sender with many such peers hands
        them all to one ``write_many`` call instead of one ``send_text`` each; a
        peer past its limit is left to ``send_text``, which closes it.
        """
        if self._outbox or self._in_parts or self._is_closed or self.write_many is None:
            return None
        if self._in_parts_for(weight):
            return None
        held = self._buffered_bytes()
        if held:  # _has_room and HostQueues.count, inline: this runs per frame and watcher
            held += weight
            if held > limit:
                return None
            queues = self._queues
            # A client holding nothing is keeping up and is not counted anew: the ledger
            # is off for it by this one frame at most until its next.
            if queues is not None:
                queues.live += held - self._counted
                self._counted = held
                if queues.live > queues.soft or queues.live + queues.closing > queues.ceiling:
                    queues.enforce()
                    if self._is_closed:
                        return None
        return self.wire

    def _in_parts_for(self, weight: int) -> bool:
        """Whether a frame of ``weight`` bytes goes out as fragments (SEND_IN_PARTS_OVER)."""
        return weight > SEND_IN_PARTS_OVER and self._send_in_parts is not None

    def send_text(self, text: str, weight: int | None = None, limit: int | None = None) -> bool:
        """Queue or write one frame; ``limit`` is clientQueueBytes when the caller read it."""
        if self.closed:
            return False
        weight = len(text.encode("utf-8")) if weight is None else weight
        on_wire = self.wire.buffered_bytes()
        if on_wire is not None:
            if limit is None:
                limit = self._queue_limit()
            held = self._queued_bytes + on_wire
            if not _has_room(held, weight, limit):
                self.fall_behind(held)
                return False
            if held and self._queues is not None:  # as in ready_wire
                self._queues.count(self, held + weight)
                if self._is_closed:
                    return False
        in_parts = self._in_parts_for(weight)
        if self._write_now is not None and not (self._outbox or self._in_parts or in_parts):
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

    def fall_behind(self, behind: int) -> None:
        """Close: the client is ``behind`` bytes behind, past clientQueueBytes."""
        log.warning(
            "client %s (%s) is %d bytes behind, past clientQueueBytes=%d; closing it",
            self.id,
            self.wire.label,
            behind,
            self._queue_limit(),
        )
        self.close(TOO_FAR_BEHIND)

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
        self._is_closed = True
        self._closed.set()
        self._outbox.clear()
        self._queued_bytes = 0
        if self._queues is not None:
            self._queues.closed(self)
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
                share = self._share
                while not self.closed:
                    frame = await frames()
                    if frame is None:
                        break
                    await self._receive(tg, frame)
                    wait = 0.0 if share is None else share.charge(len(frame))
                    if wait > 0 and not await self._hold_back(wait):
                        break
                tg.cancel_scope.cancel()
        finally:
            was_behind = self.close_reason == TOO_FAR_BEHIND
            furthest_behind = self.close_reason == FURTHEST_BEHIND
            over_budget = self.close_reason == CLOSED_OVER_BUDGET
            self.close(self.close_reason or "connection ended")
            with anyio.CancelScope(shield=True):
                try:
                    async with anyio.create_task_group() as draining:
                        # Frames already on their way are read and dropped, so the
                        # other side's answer to the close is not stuck behind them.
                        draining.start_soon(_discard, frames)
                        if was_behind:
                            await self.wire.close(
                                CLOSE_TOO_FAR_BEHIND, "client fell too far behind"
                            )
                        elif furthest_behind:
                            await self.wire.close(
                                CLOSE_TOO_FAR_BEHIND,
                                "client fell furthest behind while the host's outbound queues "
                                "were full",
                            )
                        elif over_budget and self._budget is not None:
                            await self.wire.close(
                                CLOSE_TOO_FAR_BEHIND, f"sent more than {self._budget.describe()}"
                            )
                        else:
                            await self.wire.close()
                        draining.cancel_scope.cancel()
                finally:
                    if self._queues is not None:
                        self._queues.leave(self)

    async def _hold_back(self, wait: float) -> bool:
        """Over its share of a busy host: the next frame is read ``wait`` seconds later,
        and meanwhile the sender's socket fills and slows it down.

        False when the client has left: what it sent that was not read yet is
        dropped, as what was still in its socket is. Served at once, a flood's
        last frames would stall every other client as the flood did; served at
        its pace, they would hold its connection (and a host that stops) for long.
        """
        is_open: Callable[[], bool] | None = getattr(self.wire, "is_open", None)
        if is_open is not None and not is_open():
            return False
        if not self._held_back:
            self._held_back = True
            log.info(
                "client %s (%s) sends more than its share of a busy host; reading it slower",
                self.id,
                self.wire.label,
            )
        await anyio.sleep(wait)
        return is_open is None or is_open()

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
                if weight > SEND_IN_PARTS_OVER and self._send_in_parts is not None:
                    self._in_parts = True
                    await self._send_in_parts(text)
                else:
                    await self.wire.send(text)
            except Exception as exc:  # the socket went away under us
                log.debug("client %s: send failed: %r", self.id, exc)
                self.close("send failed")
                return
            finally:
                self._in_parts = False
                self._queued_bytes = max(0, self._queued_bytes - weight)

    async def _receive(self, tg: anyio.abc.TaskGroup, frame: str | bytes) -> None:
        admitted = self._budget is None or self._budget.admit(len(frame))
        if not admitted and self._refuse_over_budget(frame):
            return
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
        if not admitted:
            self._refuse(message)
            return
        if message.kind == "notification":
            await self._serve_notification(message)
        elif message.method in self._inline:
            await self._serve_request(message)
        else:
            tg.start_soon(self._serve_request, message)

    def _refuse_over_budget(self, frame: str | bytes) -> bool:
        """True when the frame is not even read: the sender is closed instead."""
        budget = self._budget
        assert budget is not None
        if budget.exhausted or len(frame) > REFUSE_UNREAD_BYTES:
            log.warning(
                "client %s (%s) sent more than %s; closing it",
                self.id,
                self.wire.label,
                budget.describe(),
            )
            self.close(CLOSED_OVER_BUDGET)
            return True
        return False

    def _refuse(self, message: Message) -> None:
        """Tell the sender its frame was not served: it is over its inbound budget."""
        assert self._budget is not None
        reason = f"over this connection's inbound budget of {self._budget.describe()}: slow down"
        if message.kind == "request":
            self.respond_error(message.id, ProtocolError(INVALID_REQUEST, reason))
        elif message.kind == "notification" and self._on_over_budget is not None:
            self._on_over_budget(self, message, reason)

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
            elif _long_listing(result):
                text, weight = await anyio.to_thread.run_sync(
                    dumps_answer_in_slices, message.id, result
                )
                self.send_text(text, weight)
            else:
                self.respond(message.id, result)


def _has_room(held: int, weight: int, limit: int) -> bool:
    """Whether a client holding ``held`` bytes may take ``weight`` more within ``limit``.

    A client holding nothing takes any frame, however large: it is not behind.
    """
    return held == 0 or held + weight <= limit


class HostQueues:
    """What the clients of all connections have yet to take, against one ceiling.

    A connection's own backlog is bounded by clientQueueBytes; this bounds their
    sum, which many slow or silent clients would otherwise multiply. Each peer
    that is behind tells the ledger what it holds whenever it sends, so the
    running total is kept in O(1) per frame. It may overstate (a client that
    read since is still counted at its last send) or miss the one frame just
    sent to a client that was keeping up; it is recounted exactly, over every
    connection, only when it passes a mark.

    * Past ``soft`` (three quarters of the ceiling) held by open connections, the
      one furthest behind is closed, 1008 with a reason that says so. What it
      was already sent stays on its socket for it to read up to the close, so a
      slow client learns why.
    * Past the ceiling held by open and closing connections together, the
      closing connection holding the most is dropped at once, unread bytes and all.
    """

    def __init__(self, ceiling: int = DEFAULT_HOST_QUEUE_BYTES) -> None:
        self.ceiling = ceiling
        self.soft = ceiling * 3 // 4
        #: Bytes counted for open connections and for closed ones still writing their close.
        self.live = 0
        self.closing = 0
        self._live: set[Peer] = set()
        self._closing: set[Peer] = set()
        #: Connections closed, and closing ones dropped, to keep within the ceiling.
        self.closed_furthest_behind = 0
        self.dropped = 0

    def join(self, peer: Peer) -> None:
        (self._closing if peer.closed else self._live).add(peer)

    def count(self, peer: Peer, held: int) -> None:
        """``peer`` (open) holds ``held`` bytes now."""
        self.live += held - peer._counted
        peer._counted = held
        if self.live > self.soft or self.live + self.closing > self.ceiling:
            self.enforce()

    def closed(self, peer: Peer) -> None:
        if peer in self._live:
            self._live.discard(peer)
            self._closing.add(peer)
            self.live -= peer._counted
            self.closing += peer._counted

    def leave(self, peer: Peer) -> None:
        if peer in self._live:
            self._live.discard(peer)
            self.live -= peer._counted
        elif peer in self._closing:
            self._closing.discard(peer)
            self.closing -= peer._counted
        peer._counted = 0

    def total(self) -> int:
        """Bytes every connection's client has yet to take, counted now."""
        self._recount()
        return self.live + self.closing

    def _recount(self) -> None:
        self.live = self.closing = 0
        for peer in self._live:
            peer._counted = peer.queued_bytes + (peer.wire.buffered_bytes() or 0)
            self.live += peer._counted
        for peer in self._closing:
            peer._counted = peer.wire.buffered_bytes() or 0
            self.closing += peer._counted

    def enforce(self) -> None:
        """Recount, then drop closing connections and close the furthest behind until
        the totals are within bounds."""
        self._recount()
        while True:
            if self.live + self.closing > self.ceiling and self._drop_biggest_closing():
                continue
            if self.live > self.soft and self._live:
                self._close_furthest_behind()
                continue
            return

    def _drop_biggest_closing(self) -> bool:
        biggest = max(self._closing, key=lambda peer: peer._counted, default=None)
        abort = getattr(biggest.wire, "abort", None) if biggest is not None else None
        if biggest is None or abort is None or biggest._counted == 0:
            return False
        log.warning(
            "dropping client %s (%s): it still holds %d bytes and the host's queues are "
            "past their ceiling of %d bytes",
            biggest.id,
            biggest.wire.label,
            biggest._counted,
            self.ceiling,
        )
        abort()
        self.dropped += 1
        self.closing -= biggest._counted
        biggest._counted = 0
        return True

    def _close_furthest_behind(self) -> None:
        furthest = max(self._live, key=lambda peer: peer._counted)
        log.warning(
            "client %s (%s) is %d bytes behind, the furthest of all while the host's queues "
            "hold %d bytes (ceiling %d); closing it",
            furthest.id,
            furthest.wire.label,
            furthest._counted,
            self.live + self.closing,
            self.ceiling,
        )
        self.closed_furthest_behind += 1
        furthest.close(FURTHEST_BEHIND)  # counted with the closing ones from now on
        # Its outbox went with the close; what its socket holds is still owed.
        held = furthest.wire.buffered_bytes() or 0
        self.closing += held - furthest._counted
        furthest._counted = held
