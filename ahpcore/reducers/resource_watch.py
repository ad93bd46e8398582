"""Reducer for resource-watch channels (``ResourceWatchState``).

Mirrors ``types/channels-resource-watch/reducer.ts``. A watch passes change
events through to subscribers and keeps no state of its own, so
``resourceWatch/changed`` leaves the state as it is.
"""

from __future__ import annotations

from typing import Any

from ._helpers import Action, State

ACTION_TYPES = frozenset({"resourceWatch/changed"})


def reduce(state: State, action: Action) -> Any:
    """Every resource-watch action, known or not, leaves *state* itself."""
    return state
