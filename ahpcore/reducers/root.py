"""Reducer for the ``ahp-root://`` channel (``RootState``).

Mirrors ``types/channels-root/reducer.ts``: full replacement of the agent,
session-count and terminal lists, and a merge (or replace) of config values.
"""

from __future__ import annotations

from collections.abc import Callable

from ._helpers import Action, State, as_dict, assoc, dispatching, set_field, truthy


def _config_changed(state: State, action: Action) -> State:
    config = state.get("config")
    if not truthy(config):
        # Without a published schema there is nothing to write values into.
        return state
    incoming = as_dict(action.get("config"))
    if truthy(action.get("replace")):
        values = dict(incoming)
    else:
        values = {**as_dict(as_dict(config).get("values")), **incoming}
    return assoc(state, "config", assoc(as_dict(config), "values", values))


_BRANCHES: dict[str, Callable[[State, Action], State]] = {
    "root/agentsChanged": lambda s, a: set_field(s, "agents", a.get("agents")),
    "root/activeSessionsChanged": lambda s, a: set_field(
        s, "activeSessions", a.get("activeSessions")
    ),
    "root/terminalsChanged": lambda s, a: set_field(s, "terminals", a.get("terminals")),
    "root/configChanged": _config_changed,
}

ACTION_TYPES = frozenset(_BRANCHES)


#: Apply one root action; an unknown or no-op action returns the state itself.
reduce = dispatching(_BRANCHES)
