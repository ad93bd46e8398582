"""The time the scheduler reads and waits on: the system's, or one a test moves by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol

import anyio

#: The longest the system clock sleeps in one go: a machine that was suspended wakes
#: with its wall clock ahead, and the scheduler should notice within this long.
LONGEST_NAP = 30.0


class Clock(Protocol):
    def now(self) -> datetime:
        """Now, in UTC."""
        ...

    async def sleep_until(self, when: datetime) -> None:
        """Return at ``when`` or earlier (the caller looks at the time again either way)."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep_until(self, when: datetime) -> None:
        delay = (when - self.now()).total_seconds()
        await anyio.sleep(min(max(delay, 0.0), LONGEST_NAP))


class ManualClock:
    """A clock that stands still until ``advance`` or ``set`` moves it (tests)."""

    def __init__(self, start: datetime) -> None:
        self._now = start
        self._moved = anyio.Event()

    def now(self) -> datetime:
        return self._now

    def set(self, moment: datetime) -> None:
        self._now = moment
        moved, self._moved = self._moved, anyio.Event()
        moved.set()

    def advance(self, delta: timedelta) -> None:
        self.set(self._now + delta)

    async def sleep_until(self, when: datetime) -> None:
        while self._now < when:
            await self._moved.wait()
