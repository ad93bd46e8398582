"""The replay buffer: the envelopes a reconnecting client may have missed.

Bounded twice: the last ``max_count`` envelopes, or ``max_bytes()`` of them,
whichever comes first. An envelope weighs what its frame text weighs,
measured once when it is buffered. The newest is kept whatever it weighs,
because one action larger than the whole budget is still the state the host
holds. ``max_bytes`` is read on every append so a pushed value applies to the
next action buffered.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple


class Buffered(NamedTuple):
    """One buffered envelope (a tuple: one is made for every action)."""

    server_seq: int
    channel: str
    envelope: dict[str, Any]
    weight: int


class ReplayBuffer:
    def __init__(self, max_count: int = 1000, max_bytes: Callable[[], int] = lambda: 32 << 20):
        self.max_count = max_count
        self.max_bytes = max_bytes
        self._items: deque[Buffered] = deque()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def bytes(self) -> int:
        return self._bytes

    @property
    def oldest_seq(self) -> int | None:
        return self._items[0].server_seq if self._items else None

    def append(self, item: Buffered) -> None:
        self._items.append(item)
        self._bytes += item.weight
        limit = self.max_bytes()
        while len(self._items) > 1 and (len(self._items) > self.max_count or self._bytes > limit):
            dropped = self._items.popleft()
            self._bytes -= dropped.weight

    def covers(self, last_seen: int, current: int) -> bool:
        """True when every envelope after ``last_seen`` up to ``current`` is still held."""
        if last_seen > current:
            return False  # a sequence from another run of the host
        if last_seen == current:
            return True
        oldest = self.oldest_seq
        return oldest is not None and oldest <= last_seen + 1

    def since(self, last_seen: int) -> Iterator[Buffered]:
        for item in self._items:
            if item.server_seq > last_seen:
                yield item
