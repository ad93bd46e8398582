"""Calling a backend method that may block: a plain ``def`` runs in a worker thread.

The contract lets a backend write its catalogue and transcript calls as plain
functions doing file I/O; running them here keeps the event loop serving
every other client meanwhile, as long as they pass over many files
``pausing``.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Any, TypeVar

import anyio.to_thread

from ahpcore.awaitables import resolve


async def call(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``method(*args, **kwargs)``, awaited if async, in a worker thread if not."""
    if inspect.iscoroutinefunction(method):
        return await method(*args, **kwargs)
    return await resolve(await anyio.to_thread.run_sync(partial(method, *args, **kwargs)))


T = TypeVar("T")

#: A pass over files in a worker thread sleeps this long after every PAUSE_EVERY of them.
PAUSE = 0.0002
PAUSE_EVERY = 256


def pausing(items: Iterable[T]) -> Iterator[T]:
    """``items``, with a short sleep every PAUSE_EVERY of them: for a worker thread's loop
    that makes a system call per item (a stat, a read) over thousands of files.

    Each such call lets go of the interpreter lock and takes it straight back,
    before the event loop's thread, waiting for the lock, is scheduled to take
    it; and CPython asks a holder to hand over only once it has kept the lock
    5 ms without a switch. So the loop waits for the whole pass: 55-65 ms for a
    scan of 10,000 logs, every client with it. A real sleep hands the lock over.
    """
    for count, item in enumerate(items, 1):
        if count % PAUSE_EVERY == 0:
            time.sleep(PAUSE)
        yield item
