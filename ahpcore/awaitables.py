"""Values that may or may not have to be awaited."""

from __future__ import annotations

import inspect
from types import CoroutineType
from typing import Any


async def resolve(value: Any) -> Any:
    """``value``, awaited first when it is awaitable: what a hook or a port method that
    may be plain or ``async`` answered."""
    # A coroutine is by far the most common, and told apart without the ABC check.
    if type(value) is CoroutineType or inspect.isawaitable(value):
        return await value
    return value
