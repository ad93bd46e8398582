"""Pure state reducers for the Agent Host Protocol, one module per channel kind.

Each reducer is ``reduce(state, action) -> state`` over plain JSON values and
mirrors the protocol's own TypeScript reducer (``types/channels-*/reducer.ts``)
action by action. The contract every module keeps:

* **Pure.** No I/O, no clock, no randomness. Timestamps come from action data
  (a turn's ``startedAt`` and ``duration``), never from the wall clock.
* **Copy-on-write.** The input state and action are never mutated. Only the
  dicts and lists along the changed path are copied; untouched subtrees are
  shared between the old and the new state.
* **Identity means "nothing changed".** An unknown action type, and any action
  that leaves the state as it was, returns the *same* input object. Callers
  may rely on ``new is old`` to detect an action that changes nothing (the
  engine answers such a dispatch without advancing ``serverSeq``).
* **``undefined`` is an absent key.** Where the TypeScript reducer writes
  ``undefined`` the Python reducer removes the key, so no ``None`` is invented.

``reduce(kind, state, action)`` dispatches by channel kind, ``REDUCERS`` maps
kind names to functions, and :func:`channel_kind_for_action` names the kind an
action type belongs to. ``CLIENT_DISPATCHABLE`` and ``HOST_ONLY`` partition
every state action type by the protocol's ``IS_CLIENT_DISPATCHABLE`` table.
"""

from collections.abc import Callable, Mapping
from typing import Any

from . import (
    annotations,
    automation,
    automation_run,
    canvas,
    changeset,
    chat,
    resource_watch,
    root,
    session,
    terminal,
)

Reducer = Callable[[Mapping[str, Any], Mapping[str, Any]], Any]

REDUCERS: Mapping[str, Reducer] = {
    "root": root.reduce,
    "session": session.reduce,
    "chat": chat.reduce,
    "terminal": terminal.reduce,
    "changeset": changeset.reduce,
    "annotations": annotations.reduce,
    "resourceWatch": resource_watch.reduce,
    "automation": automation.reduce,
    "automationRun": automation_run.reduce,
    "canvas": canvas.reduce,
}

#: Every state action type each kind's reducer handles.
ACTION_TYPES: Mapping[str, frozenset[str]] = {
    "root": root.ACTION_TYPES,
    "session": session.ACTION_TYPES,
    "chat": chat.ACTION_TYPES,
    "terminal": terminal.ACTION_TYPES,
    "changeset": changeset.ACTION_TYPES,
    "annotations": annotations.ACTION_TYPES,
    "resourceWatch": resource_watch.ACTION_TYPES,
    "automation": automation.ACTION_TYPES,
    "automationRun": automation_run.ACTION_TYPES,
    "canvas": canvas.ACTION_TYPES,
}

#: Action types a client may originate (``IS_CLIENT_DISPATCHABLE`` is true).
CLIENT_DISPATCHABLE: frozenset[str] = frozenset(
    {
        "root/configChanged",
        "session/titleChanged",
        "session/activeClientSet",
        "session/activeClientRemoved",
        "session/workingDirectorySet",
        "session/workingDirectoryRemoved",
        "session/workingDirectoryReplaced",
        "session/customizationToggled",
        "session/mcpServerStartRequested",
        "session/mcpServerStopRequested",
        "session/mcpServerBackgroundRequested",
        "session/isReadChanged",
        "session/isArchivedChanged",
        "session/configChanged",
        "chat/turnStarted",
        "chat/turnResume",
        "chat/toolCallConfirmed",
        "chat/toolCallComplete",
        "chat/toolCallResultConfirmed",
        "chat/toolCallContentChanged",
        "chat/turnCancelled",
        "chat/workingDirectorySet",
        "chat/workingDirectoryRemoved",
        "chat/pendingMessageSet",
        "chat/pendingMessageRemoved",
        "chat/queuedMessagesReordered",
        "chat/draftChanged",
        "chat/inputAnswerChanged",
        "chat/inputCompleted",
        "chat/truncated",
        "chat/isReadChanged",
        "chat/isArchivedChanged",
        "changeset/filesReviewChanged",
        "annotations/set",
        "annotations/updated",
        "annotations/removed",
        "annotations/entrySet",
        "annotations/entryRemoved",
        "terminal/input",
        "terminal/resized",
        "terminal/claimed",
        "terminal/titleChanged",
        "terminal/cleared",
        "automation/createRequested",
        "automation/updateRequested",
        "automation/removed",
        "automationRun/cancelRequested",
    }
)

ALL_ACTION_TYPES: frozenset[str] = frozenset().union(*ACTION_TYPES.values())

#: Action types only the host may say; a client sending one is refused.
HOST_ONLY: frozenset[str] = ALL_ACTION_TYPES - CLIENT_DISPATCHABLE

_PREFIXES: Mapping[str, str] = {
    "root/": "root",
    "session/": "session",
    "chat/": "chat",
    "terminal/": "terminal",
    "changeset/": "changeset",
    "annotations/": "annotations",
    "resourceWatch/": "resourceWatch",
    # "automationRun/" must not be mistaken for "automation/": prefixes end at "/".
    "automation/": "automation",
    "automationRun/": "automationRun",
    "canvas/": "canvas",
}


def channel_kind_for_action(action_type: str) -> str | None:
    """The channel kind an action type belongs to, by its prefix; ``None`` if unknown."""
    prefix, slash, _ = action_type.partition("/")
    if not slash:
        return None
    return _PREFIXES.get(prefix + "/")


def is_client_dispatchable(action_type: str) -> bool:
    return action_type in CLIENT_DISPATCHABLE


def reduce(channel_kind: str, state: Mapping[str, Any], action: Mapping[str, Any]) -> Any:
    """Apply *action* with the reducer for *channel_kind*.

    Raises ``KeyError`` for an unknown kind. An action type the reducer does
    not know returns *state* itself.
    """
    return REDUCERS[channel_kind](state, action)


__all__ = [
    "ACTION_TYPES",
    "ALL_ACTION_TYPES",
    "CLIENT_DISPATCHABLE",
    "HOST_ONLY",
    "REDUCERS",
    "channel_kind_for_action",
    "is_client_dispatchable",
    "reduce",
]
