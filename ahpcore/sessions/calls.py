"""Calling a backend method that may block: a plain ``def`` runs in a worker thread.

The contract lets a backend write its catalogue and transcript calls as plain
functions doing file I/O; running them here keeps the event loop serving
every other client meanwhile, as long as they pass over many files
``pausing``.
"""

from __future__ import annotations

import heapq
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
#: At 256 a backend's first catalogue of 100,000 sessions after a restart held another
#: client's ping up to 12-17 ms; at 64, 4-8 ms, for about 0.4 s more of that pass.
PAUSE = 0.0002
PAUSE_EVERY = 64


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


#: The most items ``sorted_pausing`` sorts in one call of the list's own sort.
SORT_RUN = 4096


def sorted_pausing(
    items: Iterable[T], *, key: Callable[[T], Any], reverse: bool = False
) -> list[T]:
    """``sorted(items, key=key, reverse=reverse)``, for a worker thread sorting many rows.

    A list's sort compares in C and keeps the interpreter lock the whole time:
    100,000 catalogue rows by (time, id) took 90-210 ms, and the event loop, with
    every client, waited as long. Sorted here in runs of SORT_RUN with a pause
    after each, and merged by ``heapq.merge``, whose steps are bytecode the lock
    is handed over between. The same order, ties included (both are stable).
    """
    whole = items if isinstance(items, list) else list(items)
    if len(whole) <= SORT_RUN:
        return sorted(whole, key=key, reverse=reverse)
    runs = []
    for start in range(0, len(whole), SORT_RUN):
        runs.append(sorted(whole[start : start + SORT_RUN], key=key, reverse=reverse))
        time.sleep(PAUSE)
    return list(pausing(heapq.merge(*runs, key=key, reverse=reverse)))
