"""Reducer for the ``ahp-automations://`` catalogue channel (``AutomationState``).

Mirrors ``types/channels-automation/reducer.ts``: ``entries`` is keyed by each
entry's ``resource``. Create and update requests ask the host to act; the
host answers with ``automation/set``, so they leave the catalogue unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

from ._helpers import (
    Action,
    State,
    as_list,
    assoc,
    dispatching,
    upsert_by,
    without_entry,
)


def _removed(state: State, action: Action) -> State:
    return without_entry(state, "entries", "resource", action.get("resource"))


_BRANCHES: dict[str, Callable[[State, Action], State]] = {
    "automation/createRequested": lambda s, a: s,
    "automation/updateRequested": lambda s, a: s,
    "automation/set": lambda s, a: assoc(
        s, "entries", upsert_by(as_list(s.get("entries")), "resource", a.get("automation"))
    ),
    "automation/removed": _removed,
}

ACTION_TYPES = frozenset(_BRANCHES)


#: Apply one automation action; an unknown or no-op action returns the state itself.
reduce = dispatching(_BRANCHES)
