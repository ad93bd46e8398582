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

    @property
    def exhausted(self) -> bool:
        """A whole burst's worth of refused frames not paid back: the sender is not slowing down."""
        return self._frames <= -self.frame_capacity

    def describe(self) -> str:
        return (
            f"{self.frames_per_second:g} frames/s and "
            f"{self.bytes_per_second / MIB:g} MiB/s per connection"
        )
