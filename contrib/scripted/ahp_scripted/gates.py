"""Named gates a scripted turn's ``wait`` step stops at (kept apart from the runner so a
backend can hold its gates without loading the runner, which a start does not need)."""

from __future__ import annotations

from collections import deque

import anyio


class _Gate:
    def __init__(self) -> None:
        self.permits = 0
        self.waiters: deque[anyio.Event] = deque()
        self.arrived = anyio.Event()


class Gates:
    """Named gates a ``wait`` step stops at until the Python API releases them.

    A release lets exactly one wait through; a release before anyone waits is
    kept, so a test never races its own turn.
    """

    def __init__(self) -> None:
        self._gates: dict[str, _Gate] = {}

    def _gate(self, name: str) -> _Gate:
        return self._gates.setdefault(name, _Gate())

    def release(self, name: str, times: int = 1) -> None:
        gate = self._gate(name)
        for _ in range(times):
            if gate.waiters:
                gate.waiters.popleft().set()
            else:
                gate.permits += 1

    def waiting(self, name: str) -> int:
        """How many turns stand at the gate now."""
        return len(self._gate(name).waiters)

    async def reached(self, name: str) -> None:
        """Return once a turn stands at the gate."""
        gate = self._gate(name)
        while not gate.waiters:
            await gate.arrived.wait()

    async def wait(self, name: str) -> None:
        gate = self._gate(name)
        if gate.permits:
            gate.permits -= 1
            return
        event = anyio.Event()
        gate.waiters.append(event)
        gate.arrived.set()
        gate.arrived = anyio.Event()
        try:
            await event.wait()
        finally:
            if event in gate.waiters:
                gate.waiters.remove(event)
