"""Calling a backend method that may block: a plain ``def`` runs in a worker thread.

The contract lets a backend write its catalogue and transcript calls as plain
functions doing file I/O; running them here keeps the event loop serving
every other client meanwhile.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import partial
from typing import Any

import anyio.to_thread


async def call(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``method(*args, **kwargs)``, awaited if async, in a worker thread if not."""
    if inspect.iscoroutinefunction(method):
        return await method(*args, **kwargs)
    result = await anyio.to_thread.run_sync(partial(method, *args, **kwargs))
    if inspect.isawaitable(result):
        return await result
    return result
