"""Supervised background work: what the host runs for as long as it runs.

Services and plugins are handed a ``Tasks`` (``spawn`` and ``running``) rather
than the host; ``Supervisor`` is the host's own, on one anyio task group.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

import anyio
import anyio.abc

log = logging.getLogger(__name__)

Work = Callable[..., Coroutine[Any, Any, Any]]


class Tasks(Protocol):
    """Where long-lived work is started."""

    @property
    def running(self) -> bool:
        """Whether work spawned now starts (the host runs and is not stopping)."""
        ...

    def spawn(self, function: Work, *args: Any, name: str | None = None) -> None:
        """Run ``function(*args)`` in the background, supervised (see ``Supervisor``)."""
        ...


def describe(function: Callable[..., Any]) -> str:
    return getattr(function, "__qualname__", None) or repr(function)


def _brief(args: tuple[Any, ...]) -> str:
    described = []
    for arg in args:
        uri = getattr(arg, "uri", None)
        described.append(str(uri) if isinstance(uri, str) else type(arg).__name__)
    return ", ".join(described) or "none"


async def _supervised(function: Work, args: tuple[Any, ...], name: str | None) -> None:
    # Cancellation passes through; any other failure ends here, logged.
    try:
        await function(*args)
    except Exception:
        what = name or describe(function)
        log.exception("background work %s failed (args: %s)", what, _brief(args))


class Supervisor:
    """One task group; an exception in a task is logged with what it was for and goes
    no further, so one session's fault never stops the host."""

    def __init__(self) -> None:
        self._group: anyio.abc.TaskGroup | None = None
        self._stopping = False

    @property
    def running(self) -> bool:
        return self._group is not None

    async def start(self) -> None:
        self._group = anyio.create_task_group()
        await self._group.__aenter__()

    async def stop(self) -> None:
        """Cancel every task and wait for them; work spawned from now on is dropped."""
        group, self._group = self._group, None
        self._stopping = True
        if group is not None:
            group.cancel_scope.cancel()
            await group.__aexit__(None, None, None)

    def spawn(self, function: Work, *args: Any, name: str | None = None) -> None:
        if self._group is None:
            if self._stopping:
                log.debug("host stopping: %s not started", name or describe(function))
                return
            raise RuntimeError("the host is not running: use 'async with host'")
        self._group.start_soon(_supervised, function, args, name, name=name)
