"""Copy-on-write helpers shared by the channel reducers.

States and actions are plain JSON values. A TypeScript ``undefined`` has no
JSON spelling, so the reducers represent it as an *absent key*: a helper asked
to store ``None`` removes the key instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

JsonDict = dict[str, Any]
State = Mapping[str, Any]
Action = Mapping[str, Any]

# SessionStatus bits, shared by session and chat status fields.
STATUS_IDLE = 1
STATUS_ERROR = 1 << 1
STATUS_IN_PROGRESS = 1 << 3
STATUS_INPUT_NEEDED = (1 << 3) | (1 << 4)
STATUS_IS_READ = 1 << 5
STATUS_IS_ARCHIVED = 1 << 6
# The mutually exclusive activity bits (0-4); the rest are orthogonal flags.
STATUS_ACTIVITY_MASK = (1 << 5) - 1


def truthy(value: Any) -> bool:
    """JavaScript truthiness: unlike Python, empty arrays and objects are true."""
    if value is None or value is False:
        return False
    if isinstance(value, bool):
        return True
    if isinstance(value, int | float):
        return value != 0 and not (isinstance(value, float) and math.isnan(value))
    if isinstance(value, str):
        return value != ""
    return True


def same(a: Any, b: Any) -> bool:
    """Strict structural equality of JSON values.

    Identity is checked first so shared subtrees cost nothing, and types must
    match so ``True`` never equals ``1``.
    """
    if a is b:
        return True
    if type(a) is not type(b):
        # int and float are one JSON number type.
        if isinstance(a, int | float) and isinstance(b, int | float):
            if isinstance(a, bool) or isinstance(b, bool):
                return False
            return a == b
        return False
    if isinstance(a, dict | list | tuple) and a != b:
        # Strictly equal implies ==, and == finds a change at C speed (shared
        # subtrees by identity); only equal-looking values need the strict walk.
        return False
    if isinstance(a, dict):
        if len(a) != len(b):
            return False
        return all(key in b and same(value, b[key]) for key, value in a.items())
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def keep_if_same(old: Any, new: Any) -> Any:
    """Return *old* itself when *new* carries no change, so callers can use ``is``."""
    return old if new is not old and same(old, new) else new


def as_list(value: Any) -> list[Any]:
    """A fresh list copy of a JSON array; anything else reads as empty."""
    if isinstance(value, list | tuple):
        return list(value)
    return []


def as_dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def get(value: Any, key: str) -> Any:
    """``value.key`` that tolerates non-objects, like optional chaining."""
    return value.get(key) if isinstance(value, Mapping) else None


def assoc(state: State, key: str, value: Any) -> JsonDict:
    """``{...state, key: value}``; ``None`` stands for ``undefined`` and removes the key."""
    out = dict(state)
    if value is None:
        out.pop(key, None)
    else:
        out[key] = value
    return out


def assoc_many(state: State, /, **changes: Any) -> JsonDict:
    out = dict(state)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def dissoc(state: State, *keys: str) -> JsonDict:
    out = dict(state)
    for key in keys:
        out.pop(key, None)
    return out


def set_field(state: State, key: str, value: Any) -> Any:
    """Assign one field, returning *state* itself when it already holds that value."""
    if value is None:
        return dissoc(state, key) if key in state else state
    if key in state and same(state[key], value):
        return state
    return assoc(state, key, value)


def compact(**fields: Any) -> JsonDict:
    """An object literal whose ``undefined`` (``None``) members are left out."""
    return {key: value for key, value in fields.items() if value is not None}


def find_index(items: Sequence[Any], pred: Callable[[Any], bool]) -> int:
    for index, item in enumerate(items):
        if pred(item):
            return index
    return -1


def index_by(items: Sequence[Any], key: str, value: Any) -> int:
    """``items.findIndex(i => i[key] === value)``."""
    return find_index(items, lambda item: same(get(item, key), value))


def index_of(items: Sequence[Any], value: Any) -> int:
    """``items.indexOf(value)``."""
    return find_index(items, lambda item: same(item, value))


def replaced(items: Sequence[Any], index: int, value: Any) -> list[Any]:
    out = list(items)
    out[index] = value
    return out


def removed(items: Sequence[Any], index: int) -> list[Any]:
    out = list(items)
    del out[index]
    return out


def upsert_by(items: Sequence[Any], key: str, entry: Any) -> list[Any]:
    """Replace the entry whose *key* matches in place, or append it."""
    index = index_by(items, key, get(entry, key))
    if index < 0:
        return [*items, entry]
    return replaced(items, index, entry)


def with_status_flag(status: Any, flag: int, on: bool) -> int:
    base = status if isinstance(status, int) and not isinstance(status, bool) else 0
    return base | flag if on else base & ~flag


def status_of(state: State) -> int:
    status = state.get("status")
    return status if isinstance(status, int) and not isinstance(status, bool) else 0


def add_milliseconds(timestamp: Any, duration: Any) -> str | None:
    """``new Date(Date.parse(timestamp) + duration).toISOString()``.

    Returns ``None`` where JavaScript would produce an invalid date. A timestamp
    without an offset is read as UTC.
    """
    if not isinstance(timestamp, str) or isinstance(duration, bool):
        return None
    if not isinstance(duration, int | float) or not math.isfinite(duration):
        return None
    try:
        parsed = datetime.fromisoformat(timestamp)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    delta = parsed - epoch
    base_ms = (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
    # A JS time value is a whole number of milliseconds, truncated toward zero.
    total_ms = int(base_ms + duration)
    try:
        moment = epoch + timedelta(milliseconds=total_ms)
    except OverflowError:
        return None
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def dispatching(
    branches: Mapping[str, Callable[[State, Action], Any]],
) -> Callable[[State, Action], Any]:
    """A channel's reducer from its branches, one per action type.

    An unknown type returns the state itself, and so does a branch whose result
    equals what it was given, which is how a no-op is told from a change.
    """

    def reduce(state: State, action: Action) -> Any:
        branch = branches.get(str(action.get("type")))
        if branch is None:
            return state
        return keep_if_same(state, branch(state, action))

    return reduce


def working_directory_set(state: State, action: Action) -> State:
    """Add ``action.directory`` to ``workingDirectories`` unless it is there already."""
    current = as_list(state.get("workingDirectories"))
    if index_of(current, action.get("directory")) >= 0:
        return state
    return assoc(state, "workingDirectories", [*current, action.get("directory")])


def working_directory_removed(state: State, action: Action) -> State:
    """Drop ``action.directory`` from ``workingDirectories`` if it is there."""
    current = state.get("workingDirectories")
    if current is None:
        return state
    index = index_of(as_list(current), action.get("directory"))
    if index < 0:
        return state
    return assoc(state, "workingDirectories", removed(current, index))


def without_entry(state: State, field: str, key: str, value: Any) -> State:
    """Drop the entry of list ``field`` whose ``key`` is ``value``; the state itself when none is."""
    entries = as_list(state.get(field))
    index = index_by(entries, key, value)
    if index < 0:
        return state
    return assoc(state, field, removed(entries, index))
