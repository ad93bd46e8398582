"""Reducer for ``ahp-terminal:`` channels (``TerminalState``).

Mirrors ``types/channels-terminal/reducer.ts``: output accumulates into typed
content parts (command output vs. unclassified text), metadata fields are
replaced, and an exit is recorded as an explicit ``lifecycle``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ._helpers import (
    Action,
    State,
    as_list,
    assoc,
    assoc_many,
    compact,
    dispatching,
    get,
    same,
    set_field,
    truthy,
)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _data(state: State, action: Action) -> State:
    content = as_list(state.get("content"))
    tail = content[-1] if content else None
    data = _text(action.get("data"))
    if (
        isinstance(tail, Mapping)
        and tail.get("type") == "command"
        and not truthy(tail.get("isComplete"))
    ):
        content[-1] = assoc(tail, "output", _text(tail.get("output")) + data)
    elif isinstance(tail, Mapping) and tail.get("type") == "unclassified":
        content[-1] = assoc(tail, "value", _text(tail.get("value")) + data)
    else:
        # Output after a finished command belongs to no command.
        content.append({"type": "unclassified", "value": data})
    return assoc(state, "content", content)


def _command_executed(state: State, action: Action) -> State:
    part = compact(
        type="command",
        commandId=action.get("commandId"),
        commandLine=action.get("commandLine"),
        output="",
        timestamp=action.get("timestamp"),
        isComplete=False,
    )
    # A command arriving at all proves shell integration is present.
    return assoc_many(
        state, content=[*as_list(state.get("content")), part], supportsCommandDetection=True
    )


def _command_finished(state: State, action: Action) -> State:
    content = as_list(state.get("content"))
    for index, part in enumerate(content):
        if get(part, "type") == "command" and same(get(part, "commandId"), action.get("commandId")):
            content[index] = assoc_many(
                part,
                isComplete=True,
                exitCode=action.get("exitCode"),
                durationMs=action.get("durationMs"),
            )
    return assoc(state, "content", content)


def _exited(state: State, action: Action) -> State:
    lifecycle = compact(status="exited", exitCode=action.get("exitCode"))
    return set_field(state, "lifecycle", lifecycle)


_BRANCHES: dict[str, Callable[[State, Action], State]] = {
    "terminal/data": _data,
    # Keystrokes go to the process; the echo comes back as terminal/data.
    "terminal/input": lambda s, a: s,
    "terminal/resized": lambda s, a: assoc_many(s, cols=a.get("cols"), rows=a.get("rows")),
    "terminal/claimed": lambda s, a: set_field(s, "claim", a.get("claim")),
    "terminal/titleChanged": lambda s, a: set_field(s, "title", a.get("title")),
    "terminal/cwdChanged": lambda s, a: set_field(s, "cwd", a.get("cwd")),
    "terminal/exited": _exited,
    "terminal/cleared": lambda s, a: set_field(s, "content", []),
    "terminal/commandDetectionAvailable": lambda s, a: set_field(
        s, "supportsCommandDetection", True
    ),
    "terminal/commandExecuted": _command_executed,
    "terminal/commandFinished": _command_finished,
}

ACTION_TYPES = frozenset(_BRANCHES)


#: Apply one terminal action; an unknown or no-op action returns the state itself.
reduce = dispatching(_BRANCHES)
