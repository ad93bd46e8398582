"""Reducer for ``ahp-automation-run:`` channels (``AutomationRunState``).

Mirrors ``types/channels-automation-run/reducer.ts``: the run lifecycle and
its ordered, unique list of linked sessions. A cancel request asks the host to
act and leaves state unchanged until the lifecycle action arrives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._helpers import (
    Action,
    State,
    as_list,
    assoc,
    index_of,
    keep_if_same,
    removed,
    same,
    set_field,
)


def _session_set(state: State, action: Action) -> State:
    sessions = as_list(state.get("sessions"))
    if index_of(sessions, action.get("session")) >= 0:
        return state
    return assoc(state, "sessions", [*sessions, action.get("session")])


def _session_removed(state: State, action: Action) -> State:
    sessions = as_list(state.get("sessions"))
    index = index_of(sessions, action.get("session"))
    if index < 0:
        return state
    nxt = assoc(state, "sessions", removed(sessions, index))
    if same(state.get("primarySession"), action.get("session")):
        # The recommended session must be a member of the run.
        nxt.pop("primarySession", None)
    return nxt


_BRANCHES: dict[str, Callable[[State, Action], State]] = {
    "automationRun/lifecycleChanged": lambda s, a: set_field(s, "lifecycle", a.get("lifecycle")),
    "automationRun/sessionSet": _session_set,
    "automationRun/sessionRemoved": _session_removed,
    "automationRun/primarySessionChanged": lambda s, a: set_field(
        s, "primarySession", a.get("primarySession")
    ),
    "automationRun/cancelRequested": lambda s, a: s,
}

ACTION_TYPES = frozenset(_BRANCHES)


def reduce(state: State, action: Action) -> Any:
    """Apply one automation-run action; an unknown or no-op action returns *state* itself."""
    branch = _BRANCHES.get(str(action.get("type")))
    if branch is None:
        return state
    return keep_if_same(state, branch(state, action))
