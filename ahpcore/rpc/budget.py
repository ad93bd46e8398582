"""A connection's inbound budget: how many frames and bytes per second it may send.

Two token buckets that refill with time. A frame is admitted while both still
hold something (one large frame may overdraw the byte bucket; the debt is
repaid before the next is admitted). A frame that is not admitted is refused
to its sender and still costs a frame; a sender whose debt reaches a full
burst is closed, since it is not listening.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

MIB = 1024 * 1024
#: Frames per second one connection may send, sustained. A person typing, a client
#: streaming its own tool's output and a reconnect burst all stay well below it.
DEFAULT_FRAMES_PER_SECOND = 1000.0
#: Bytes per second one connection may send, sustained.
DEFAULT_BYTES_PER_SECOND = 16.0 * MIB
#: How many seconds of budget a quiet connection may spend at once.
DEFAULT_BURST_SECONDS = 2.0


@dataclass
class InboundBudget:
    frames_per_second: float = DEFAULT_FRAMES_PER_SECOND
    bytes_per_second: float = DEFAULT_BYTES_PER_SECOND
    burst_seconds: float = DEFAULT_BURST_SECONDS
    clock: Callable[[], float] = time.monotonic
    _frames: float = field(init=False)
    _bytes: float = field(init=False)
    _at: float = field(init=False)
    #: Frames refused so far.
    refused: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self._frames = self.frame_capacity
        self._bytes = self.byte_capacity
        self._at = self.clock()

    @property
    def frame_capacity(self) -> float:
        return self.frames_per_second * self.burst_seconds

    @property
    def byte_capacity(self) -> float:
        return self.bytes_per_second * self.burst_seconds

    def _refill(self) -> None:
        now = self.clock()
        elapsed, self._at = max(0.0, now - self._at), now
        self._frames = min(self.frame_capacity, self._frames + elapsed * self.frames_per_second)
        self._bytes = min(self.byte_capacity, self._bytes + elapsed * self.bytes_per_second)

    def admit(self, size: int) -> bool:
        """Spend one frame of ``size`` bytes; False when the connection is over its budget.

        A refused frame costs a frame too, so a sender that keeps on regardless
        runs into debt (see ``exhausted``) instead of being refused forever.
        """
        self._refill()
        self._frames -= 1
        if self._frames >= 0 and self._bytes > 0:
            self._bytes -= size
            return True
        self.refused += 1
        return False

    def levels(self) -> tuple[float, float]:
        """The frames and bytes that may be sent at once now (negative: in debt), read
        without spending or refilling anything."""
        elapsed = max(0.0, self.clock() - self._at)
        frames = min(self.frame_capacity, self._frames + elapsed * self.frames_per_second)
        return frames, min(self.byte_capacity, self._bytes + elapsed * self.bytes_per_second)

    @property
    def exhausted(self) -> bool:
        """A whole burst's worth of refused frames not paid back: the sender is not slowing down."""
        return self._frames <= -self.frame_capacity

    def describe(self) -> str:
        return (
            f"{self.frames_per_second:g} frames/s and "
            f"{self.bytes_per_second / MIB:g} MiB/s per connection"
        )


#: What all connections together may send per second before the busiest are read
#: more slowly, as a multiple of one connection's budget: a host serves a few
#: thousand small requests a second in all, and a ping waits behind every frame
#: read before it.
HOST_FRAMES_PER_CONNECTION_BUDGET = 2.0
#: Bytes per second all connections together may send.
DEFAULT_HOST_BYTES_PER_SECOND = DEFAULT_BYTES_PER_SECOND * HOST_FRAMES_PER_CONNECTION_BUDGET
#: How much of the host's budget may go at once: one connection's burst, so a
#: connection alone on the host spends its own burst unhindered.
DEFAULT_HOST_BURST_SECONDS = DEFAULT_BURST_SECONDS / HOST_FRAMES_PER_CONNECTION_BUDGET
#: What the clients of all connections together may have yet to take, by default
#: (``ahpcore.rpc.peer.HostQueues``); one connection's own ceiling is clientQueueBytes.
DEFAULT_HOST_QUEUE_BYTES = 512 * MIB
#: Connections one address may hold open at once (all of loopback is one address).
DEFAULT_CONNECTIONS_PER_ADDRESS = 64
#: Connections count as active for a second after each frame they send.
ACTIVE_WINDOW_SECONDS = 1.0
#: How far ahead of its fair share a connection's account may run while the host
#: is not busy: what it sent then is repaid first once the host is.
MAX_SHARE_DEBT_SECONDS = 1.0


class SharedInbound:
    """The host's inbound budget, shared fairly by the connections that use it.

    One token bucket of frames and one of bytes for the whole host. While both
    hold something, every frame is read at once. Once they are spent, the host
    is busy: each active connection's fair share is the host's rate divided by
    the connections that sent anything in the last second or so, and a
    connection that has sent more than its share waits before its next frame
    is read (its frames stay in its socket, so the sender is slowed by TCP
    itself). A connection within its share is never held up, so many busy
    connections cannot starve a quiet one. Everything is O(1) per frame.
    """

    def __init__(
        self,
        frames_per_second: float,
        bytes_per_second: float = DEFAULT_HOST_BYTES_PER_SECOND,
        burst_seconds: float = DEFAULT_HOST_BURST_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.frames_per_second = frames_per_second
        self.bytes_per_second = bytes_per_second
        self.burst_seconds = burst_seconds
        self.clock = clock
        self._frame_capacity = frames_per_second * burst_seconds
        self._byte_capacity = bytes_per_second * burst_seconds
        #: A frame's and a byte's cost in seconds of the whole host's rate.
        self._per_frame = 1.0 / frames_per_second
        self._per_byte = 1.0 / bytes_per_second
        self._frames = self._frame_capacity
        self._bytes = self._byte_capacity
        self._at = clock()
        #: Which active window it is, when it ends, and how many connections sent
        #: in it and in the one before.
        self._window = 0
        self._window_ends = self._at + ACTIVE_WINDOW_SECONDS
        self._active_now = 0
        self._active_before = 0
        #: Frames read late for being over their share, so far.
        self.held_back = 0

    def share(self) -> InboundShare:
        """One connection's account with this budget."""
        return InboundShare(self)

    @property
    def active(self) -> int:
        """Connections that sent a frame in this window or the last (at least one)."""
        return max(self._active_now, self._active_before, 1)

    def describe(self) -> str:
        return (
            f"{self.frames_per_second:g} frames/s and "
            f"{self.bytes_per_second / MIB:g} MiB/s for all connections"
        )

    def _refill(self, now: float) -> None:
        elapsed, self._at = now - self._at, now
        frames = self._frames + elapsed * self.frames_per_second
        self._frames = frames if frames < self._frame_capacity else self._frame_capacity
        held = self._bytes + elapsed * self.bytes_per_second
        self._bytes = held if held < self._byte_capacity else self._byte_capacity
        if now >= self._window_ends:
            quiet = now >= self._window_ends + ACTIVE_WINDOW_SECONDS
            self._active_before = 0 if quiet else self._active_now
            self._active_now = 0
            self._window += 1
            self._window_ends = now + ACTIVE_WINDOW_SECONDS


class InboundShare:
    """One connection's account with a ``SharedInbound``."""

    __slots__ = ("_due", "_host", "_window")

    def __init__(self, host: SharedInbound) -> None:
        self._host = host
        self._window = -1
        #: When this connection's frames so far would have been read at its fair share.
        self._due = 0.0

    def charge(self, size: int) -> float:
        """Count one frame of ``size`` bytes just read; seconds to wait before the next.

        Zero unless the host's budget is spent and this connection is ahead of
        its fair share, by what it is ahead.
        """
        host = self._host
        now = host.clock()
        if now > host._at:
            host._refill(now)
        if self._window != host._window:
            self._window = host._window
            host._active_now += 1
        host._frames -= 1
        host._bytes -= size
        # This frame's cost at the connection's fair share of the host's rate.
        active = host._active_now if host._active_now > host._active_before else host._active_before
        per_byte = size * host._per_byte
        cost = active * (per_byte if per_byte > host._per_frame else host._per_frame)
        due = self._due
        after = (due if due > now else now) + cost
        limit = now + MAX_SHARE_DEBT_SECONDS
        self._due = after if after < limit else limit
        if host._frames >= 0 and host._bytes >= 0:
            return 0.0
        # Busy. The buckets' debt is capped, or one flood would keep the host busy long after.
        host._frames = max(host._frames, -host._frame_capacity)
        host._bytes = max(host._bytes, -host._byte_capacity)
        if due <= now:
            return 0.0
        host.held_back += 1
        return due - now
